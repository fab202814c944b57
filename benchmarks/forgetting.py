"""Training on errors and near misses, online over long streams.

    python -m benchmarks.forgetting --corpus all [--train-mode teft --train-mode toe]
        [--margin 4 --margin 12] [--limit N] [--check N]

The library's training modes (`Filter.learn_online`): teft trains every
message, toe only those misfiled or called unsure at the configured loss
matrix, tune also those within --margin nats (default the library's, 12)
of a decision bound (`learning.wants_training`).

Each stream is tokenized once (benchmarks/option_grid.py's cache) and run
with the library's in-memory counts and scorer (`benchmarks.loco.online_scores`:
`memcounts.MemoryCounts`, `scorer.Scorer`); --check N compares teft and
tune with `evaluation.run_online` on the first N messages. Prints per
stream and setting 1-ROCA %, sm at 0.1% hm, lam %, the largest |log-odds|
of a misfiled message, 1-ROCA % per window (bogofilter's row from
benchmarks/long_stream.py's cache when it is there), and how many messages
each setting trained. Asserts nothing.

Exponential forgetting (every count decaying with a half-life of H
messages) was measured here with a copy of the counts of its own, before
the benchmarks used the library's: no half-life met the window target
(docs/benchmarks.md, "Training on or near errors, and forgetting"); that
option went with the copy.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.long_stream import stream
from benchmarks.option_grid import report, setup
from benchmarks.streams import Corpus, online_scores, tokenized
from spamfilter.config import TUNE_MARGIN, TrainMode
from spamfilter.nb import decision
from spamfilter.tools.evaluation import default_window, run_online


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", required=True)
    parser.add_argument("--train-mode", action="append", choices=[t.value for t in TrainMode], default=[])
    parser.add_argument("--margin", action="append", type=float, default=[], help="tune: nats from a decision bound (default the library's; repeatable)")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--window", type=int, default=None)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--label", default="", help="suffix of the results file (to keep runs apart)")
    parser.add_argument("--check", type=int, default=0, help="compare teft and tune with run_online on the first N messages")
    args = parser.parse_args()
    config, threshold = setup(args)
    thresholds = decision.thresholds_from_loss(config.decision.cost_ham_as_spam, config.decision.cost_spam_as_ham, config.decision.cost_unsure)
    modes = [TrainMode(t) for t in (args.train_mode or ["teft"])]
    settings = [(t, g) for t in modes for g in (args.margin or [TUNE_MARGIN] if t is TrainMode.tune else [TUNE_MARGIN])]
    for name in args.corpus:
        docs, y, digests = tokenized(config, name, args.limit)
        c = Corpus.of_docs(docs, y, digests)
        if args.check:
            items = list(stream(name, args.check))
            head = Corpus.of_docs(docs[: args.check], y[: args.check], digests[: args.check])
            for mode in (TrainMode.teft, TrainMode.tune):
                report_, scored = run_online(config, items, train_mode=mode)
                mine, learned = online_scores(head, config.model, thresholds, mode)
                diff = np.max(np.abs(mine[: len(scored)] - np.array([s.log_odds for s in scored])))
                print(
                    f"check {name}, {mode.value}: largest |log-odds difference| against run_online over {len(scored)} messages: {diff:.2e}; trained {int(learned.sum())} and {report_.trained}"
                )
        names, rows, trained = [], [], []
        for mode, margin in settings:
            odds, learned = online_scores(c, config.model, thresholds, mode, margin)
            names.append(mode.value + (f" {margin:g} nats" if mode is TrainMode.tune else ""))
            rows.append(odds)
            trained.append(int(learned.sum()))
        window = args.window or default_window(y.size)
        cached = Path("results") / f"long_stream-bogofilter-{name}-{args.limit or 'all'}-w{window}.json"
        result = report(f"{name}, {y.size} messages, online", names, np.array(rows), y, threshold, window)
        if cached.exists():
            bogo = json.loads(cached.read_text())
            shown = " ".join("-" if w is None else f"{w:.3f}" for w in bogo["windows"])
            print(
                f"{'bogofilter 1.2.5 (long_stream cache)':<36} {bogo['one_minus_roca_pct']:8.4f} {bogo['sm_at_hm01_pct']:9.2f} {bogo['lam_pct']:7.3f} {'':>10}  {shown}"
            )
        for label, n in zip(names, trained):
            print(f"  {label}: trained {n} of {y.size}")
        for row, n in zip(result, trained):
            row["trained"] = n
        out = Path("results") / f"forgetting-{name}-{args.limit or 'all'}{'-' + args.label if args.label else ''}.json"
        out.write_text(json.dumps({"stream": name, "messages": int(y.size), "window": window, "rows": result}, indent=2) + "\n")


if __name__ == "__main__":
    main()
