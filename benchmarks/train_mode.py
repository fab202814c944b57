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

`--near-copies` adds the other way to count a campaign less: learn every
message but a near-copy of one already learned with the same label, where
a near-copy shares at least 80% of its body tokens (Jaccard of the token
sets outside the header lines, estimated from 64 MinHash values, candidates
found by 16 bands of 4). Three rules: learn only the first of each set of
near-copies; learn copies 1, 2, 4, 8, ... (a set of n counts about log2 n
+ 1 times); learn at most 3. Writes results/train-mode.json. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import time
import zlib
from pathlib import Path

import numpy as np

from benchmarks.loco import CORPORA, figures, left_out_folds
from benchmarks.streams import Corpus, learned_counts, online_scores, split_scores
from spamfilter.config import Config, TrainMode
from spamfilter.nb import decision
from spamfilter.nb.scorer import Scorer


def head_of(c: Corpus, head: int) -> Corpus:
    """The first ``head`` messages of ``c``, over the same vocabulary."""
    h = Corpus.__new__(Corpus)
    h.y, h.terms, h.binary, h.tokens, h.header, h.identity = c.y[:head], c.terms[:head], c.binary[:head], c.tokens, c.header, c.identity[:head]
    return h


def learned_once(c: Corpus, config: Config, mode: TrainMode, margin: float) -> tuple[np.ndarray, np.ndarray, int]:
    """Learn the first half in ``mode``, score the second half: (log-odds, labels, messages learned)."""
    m = config.model
    head = c.y.size // 2
    d = config.decision
    thresholds = decision.thresholds_from_loss(d.cost_ham_as_spam, d.cost_spam_as_ham, d.cost_unsure)
    _, trained = online_scores(head_of(c, head), m, thresholds, mode, margin)
    rows = np.flatnonzero(trained)
    counts = learned_counts(c, rows)
    evidence = counts.evidence(c.X(m)[head:], c.header, histogram=m.event_model == "bernoulli")
    return Scorer(m).log_odds(evidence), c.y[head:], int(rows.size)


#: MinHash: K values per message, LSH bands of R values, the Jaccard a near-copy shares at least.
K, BANDS, R, NEAR = 64, 16, 4, 0.8
_A = np.arange(1, 2 * K, 2, dtype=np.uint64) * np.uint64(0x9E3779B1)
_B = np.arange(K, dtype=np.uint64) * np.uint64(0x85EBCA77)
_PRIME = np.uint64(4294967311)


def copy_numbers(c: Corpus, head: int) -> np.ndarray:
    """For each of the first ``head`` messages, its place among the near-copies
    of the same label before it (1: the first of its kind)."""
    hashes = np.array([zlib.crc32(t.encode()) for t in c.tokens], dtype=np.uint64)
    body = ~c.header
    seen: list[dict[int, int]] = [{}, {}]
    signatures: list[np.ndarray | None] = []
    root = np.arange(head)
    size: dict[int, int] = {}
    number = np.ones(head, dtype=np.int64)
    for i in range(head):
        cols = c.binary.indices[c.binary.indptr[i] : c.binary.indptr[i + 1]]
        cols = cols[body[cols]] if body[cols].any() else cols
        sig = ((hashes[cols][None, :] * _A[:, None] + _B[:, None]) % _PRIME).min(axis=1) if cols.size else None
        signatures.append(sig)
        if sig is None:
            continue
        label = int(c.y[i])
        keys = [hash(tuple(sig[b * R : (b + 1) * R].tolist())) for b in range(BANDS)]
        for k in keys:
            j = seen[label].get(k)
            other = signatures[j] if j is not None else None
            if other is not None and float((other == sig).mean()) >= NEAR:
                root[i] = root[j]  # type: ignore[index]
                break
        size[int(root[i])] = size.get(int(root[i]), 0) + 1
        number[i] = size[int(root[i])]
        for k in keys:
            seen[label].setdefault(k, i)
    return number


def near_copies_once(c: Corpus, config: Config, number: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Learn the first half's messages that ``keep`` marks, score the second half."""
    m = config.model
    head = number.size
    rows = np.flatnonzero(keep)
    counts = learned_counts(c, rows)
    evidence = counts.evidence(c.X(m)[head:], c.header, histogram=m.event_model == "bernoulli")
    return Scorer(m).log_odds(evidence), c.y[head:], int(rows.size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", choices=CORPORA, default=None)
    parser.add_argument("--margin", default="12", help="comma-separated tune margins in nats")
    parser.add_argument("--near-copies", action="store_true", help="also learn near-copies once, log2-many times, or at most 3 times")
    parser.add_argument("--no-modes", action="store_true", help="leave out toe and tune (with --near-copies)")
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
        modes = [] if args.no_modes else [(TrainMode.toe, 0.0), *((TrainMode.tune, float(x)) for x in args.margin.split(","))]
        for mode, margin in modes:
            name = f"{mode} {margin:g}" if mode is TrainMode.tune else str(mode)
            odds, y, learned = learned_once(c, config, mode, margin)
            table.setdefault(name, {})[corpus] = {**figures(y, odds, two_way), "learned": learned}
        if args.near_copies:
            number = copy_numbers(c, c.y.size // 2)
            for name, keep in [("copies once", number == 1), ("copies log2", (number & (number - 1)) == 0), ("copies <= 3", number <= 3)]:
                odds, y, learned = near_copies_once(c, config, number, keep)
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
