"""Later mail that bogofilter ranks right and spamfilter does not, by token class.

    python -m benchmarks.error_analysis [--corpus spamassassin ...]

Train once on the first half of a stream, classify the second half, with
spamfilter (the library's counts and scoring over the cached tokens of
benchmarks/loco.py) and bogofilter 1.2.5 (`-B` bulk training, `-b -T`) side by
side. Each system is put at its own operating point of 0.1% ham lost (its
threshold: the score of the ham ranked 0.1% from the top), and the messages
are sorted by who gets them right there:

- spam let through by spamfilter but not by bogofilter, and the reverse;
- ham filed as spam by one and not the other.

The counts are the library's in memory (`memcounts.MemoryCounts`), the
scores its scorer's. For spamfilter's misses, each message's log-odds is
taken apart with `Scorer.terms` (the terms sum to the log-odds) and summed by token
class: header lines (`tokenizer.is_header_line`), Subject words, bigrams
(`bi:`), URLs (`url:`), and the other body tokens; the prior and the
Bernoulli absent-token term go to "prior". Prints the counts and the mean
contribution of each class to the misses, and how far below the threshold
they fell. Asserts nothing.
"""

from __future__ import annotations

import argparse

import numpy as np
import scipy.sparse as sp

from benchmarks.loco import CORPORA
from benchmarks.option_grid import bogofilter_split
from benchmarks.streams import Corpus, learned_counts
from spamfilter.config import Config
from spamfilter.nb.scorer import Scorer
from spamfilter.tokenizer import BIGRAM, SUBJECT, URL, is_header_line

CLASSES = ("header lines", "subject", "bigrams", "urls", "body")


def token_class(token: str) -> str:
    if is_header_line(token):
        return "header lines"
    for prefix, name in ((SUBJECT, "subject"), (BIGRAM, "bigrams"), (URL, "urls")):
        if token.startswith(prefix):
            return name
    return "body"


def threshold_at(y: np.ndarray, score: np.ndarray, ham_lost: float = 0.001) -> float:
    """The score above which ``ham_lost`` of the ham lies."""
    return float(np.quantile(score[~y], 1.0 - ham_lost))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", choices=CORPORA, default=None)
    args = parser.parse_args()
    config = Config()
    m = config.model
    for name in args.corpus or ["spamassassin", "csdmc2010"]:
        c = Corpus(config, name)
        head = c.y.size // 2
        counts = learned_counts(c, np.arange(head))
        scorer = Scorer(m)
        X = sp.csr_matrix(c.X(m)[head:])
        mine = scorer.log_odds(counts.evidence(X, c.header, histogram=False))
        truth = c.y[head:]
        theirs, their_y = bogofilter_split(name, None, "half")
        if their_y.size != truth.size or (their_y != truth).any():
            print(f"{name}: bogofilter read a different set of messages; left out")
            continue
        t_mine, t_theirs = threshold_at(truth, mine), threshold_at(truth, theirs)
        miss_mine, miss_theirs = truth & (mine <= t_mine), truth & (theirs <= t_theirs)
        fp_mine, fp_theirs = ~truth & (mine > t_mine), ~truth & (theirs > t_theirs)
        print(f"\n{name}: {truth.size} later messages ({int(truth.sum())} spam), at 0.1% ham lost each")
        print(
            f"  spam let through: spamfilter {int(miss_mine.sum())}, bogofilter {int(miss_theirs.sum())}; "
            f"only spamfilter {int((miss_mine & ~miss_theirs).sum())}, only bogofilter {int((miss_theirs & ~miss_mine).sum())}"
        )
        print(
            f"  ham filed as spam: spamfilter {int(fp_mine.sum())}, bogofilter {int(fp_theirs.sum())}; "
            f"only spamfilter {int((fp_mine & ~fp_theirs).sum())}, only bogofilter {int((fp_theirs & ~fp_mine).sum())}"
        )
        rows = np.flatnonzero(miss_mine & ~miss_theirs)
        sums: dict[str, list[float]] = {k: [] for k in (*CLASSES, "prior")}
        for i in rows:
            evidence = counts.evidence(X[i], c.header, histogram=False)
            names = np.array([token_class(c.tokens[j]) for j in counts.known(X[i])])
            terms = scorer.terms(evidence)
            for k in CLASSES:
                sums[k].append(float(terms.token[names == k].sum()))
            sums["prior"].append(terms.prior + terms.absent)
        if rows.size:
            shown = ", ".join(f"{k} {np.mean(v):+.2f}" for k, v in sums.items())
            print(f"  spamfilter's own misses, mean log-odds by token class: {shown}; mean log-odds {float(mine[rows].mean()):+.2f} against the threshold {t_mine:+.2f}")


if __name__ == "__main__":
    main()
