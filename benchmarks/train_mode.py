"""Train once on everything, or on errors and near misses: the split protocol, left out one corpus at a time.

    python -m benchmarks.train_mode [--corpus C ...] [--margin 12,24]

`spamfilter train` learns every message it is given (teft); online
learning learns only errors and near misses (`--train-mode tune`, a margin
of 12 nats). A stream with thousands of copies of one campaign, counted as
thousands of independent messages, gives those copies' words the weight of
thousands of messages; learning only what the model does not yet get right
counts a campaign until it is known. Here the first half of each stream
is learned either way (tune: in stream order, each message scored by the
counts learned before it, as `train --train-mode tune` does) and the
second half is scored by the frozen model, for every shared corpus with a
time order, then left out one at a time as in `benchmarks/loco.py` (a
setting is chosen on the other corpora by the geometric mean of its 1-ROCA
relative to teft's, spamassassin and csdmc2010 never choosing for each
other). Counts and scoring are the library's (`MemoryCounts`, `Scorer`).
Writes results/train-mode.json. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.loco import CORPORA, figures, left_out_folds
from benchmarks.streams import Corpus, online_scores, split_scores
from spamfilter.config import Config, TrainMode
from spamfilter.nb import decision
from spamfilter.nb.memcounts import MemoryCounts
from spamfilter.nb.scorer import Scorer


def head_of(c: Corpus, head: int) -> Corpus:
    """The first ``head`` messages of ``c``, over the same vocabulary."""
    h = Corpus.__new__(Corpus)
    h.y, h.terms, h.binary, h.tokens, h.header = c.y[:head], c.terms[:head], c.binary[:head], c.tokens, c.header
    return h


def learned_once(c: Corpus, config: Config, mode: TrainMode, margin: float) -> tuple[np.ndarray, np.ndarray, int]:
    """Learn the first half in ``mode``, score the second half: (log-odds, labels, messages learned)."""
    m = config.model
    head = c.y.size // 2
    d = config.decision
    thresholds = decision.thresholds_from_loss(d.cost_ham_as_spam, d.cost_spam_as_ham, d.cost_unsure)
    _, trained = online_scores(head_of(c, head), m, thresholds, mode, margin)
    rows = np.flatnonzero(trained)
    counts = MemoryCounts.of(c.binary[rows], c.terms[rows], c.y[rows])
    evidence = counts.evidence(c.X(m)[head:], c.header, histogram=m.event_model == "bernoulli")
    return Scorer(m).log_odds(evidence), c.y[head:], int(rows.size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", choices=CORPORA, default=None)
    parser.add_argument("--margin", default="12", help="comma-separated tune margins in nats")
    args = parser.parse_args()
    config = Config()
    d = config.decision
    two_way = decision.thresholds_from_loss(d.cost_ham_as_spam, d.cost_spam_as_ham, 0.0).spam_min
    corpora = args.corpus or CORPORA
    table: dict[str, dict[str, dict[str, float]]] = {"defaults": {}}
    started = time.perf_counter()
    for corpus in corpora:
        c = Corpus(config, corpus)
        odds, y = split_scores(c, config.model)
        table["defaults"][corpus] = {**figures(y, odds, two_way), "learned": c.y.size // 2}
        for mode, margin in [(TrainMode.toe, 0.0), *((TrainMode.tune, float(x)) for x in args.margin.split(","))]:
            name = f"{mode} {margin:g}" if mode is TrainMode.tune else str(mode)
            odds, y, learned = learned_once(c, config, mode, margin)
            table.setdefault(name, {})[corpus] = {**figures(y, odds, two_way), "learned": learned}
        shown = "  ".join(f"{n} {t[corpus]['roca']:.4f} ({t[corpus]['learned']})" for n, t in table.items())
        print(f"{corpus:13} {shown}  ({time.perf_counter() - started:.0f} s)", flush=True)
    folds = left_out_folds(table, corpora)
    better = sum(f["roca_ratio"] < 1 for f in folds)
    print(f"better on the left-out corpus in {better} of {len(folds)} folds; worst fold x{max(f['roca_ratio'] for f in folds):.3f}")
    Path("results").mkdir(exist_ok=True)
    Path("results/train-mode.json").write_text(json.dumps({"table": table, "folds": folds}, indent=1) + "\n")


if __name__ == "__main__":
    main()
