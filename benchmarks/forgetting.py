"""Forgetting old counts and training on errors, online over long streams.

    python -m benchmarks.forgetting --corpus all --half-life 0 --half-life 5000 \\
        [--train-mode teft --train-mode toe] [--limit N] [--check N]

Two answers to a store that keeps growing, measured before either is
built into the store:

- exponential forgetting: the message trained k messages ago counts
  2 ** (-k / H) times (H = --half-life messages; 0 keeps every count at 1).
  Token counts, class counts and the prior all decay, so the model is, in
  effect, trained on its last H / ln 2 messages, weighted. Kept exactly as
  a store would keep it: each new message adds weight g ** t (g = 2 ** (1/H)),
  and scoring divides every count by the newest weight;
- the library's training modes (`Filter.learn_online`): teft trains every
  message, toe only those misfiled or called unsure at the configured
  loss matrix, tune also those within --margin nats (default the
  library's, 12) of a decision bound (`learning.wants_training`).

Each stream is tokenized once (benchmarks/option_grid.py's cache) and scored
with the library's own model arithmetic (`model.estimate`,
`model.joint_log_likelihood`, header lines apart as configured). With
half-life 0 this is the library's online loop: --check N compares teft and
tune with `evaluation.run_online` on the first N messages. Prints per stream and
setting 1-ROCA %, sm at 0.1% hm, lam %, the largest |log-odds| of a misfiled
message, 1-ROCA % per window (bogofilter's row from benchmarks/long_stream.py's
cache when it is there), and how many messages each setting trained.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.long_stream import stream
from benchmarks.option_grid import Counts, Doc, report, setup, tokenized
from spamfilter import model as nb
from spamfilter.config import ModelConfig
from spamfilter.counts import ClassCounts, Decision, Label
from spamfilter.evaluation import default_window, run_online
from spamfilter.learning import TUNE_MARGIN, TrainMode, wants_training

#: Renormalise the stored weights when the newest passes this (keeps float64 exact enough).
RESCALE = 1e12


class DecayingCounts(Counts):
    """``Counts`` in which the message trained k messages ago weighs 2 ** (-k / half_life)."""

    def __init__(self, half_life: float) -> None:
        super().__init__()
        self.growth = 2.0 ** (1.0 / half_life) if half_life > 0 else 1.0
        self.weight = 1.0  # what the next trained message adds per count
        self.doc = self.doc.astype(np.float64)
        self.term = self.term.astype(np.float64)
        self.classes = ClassCounts(*(np.zeros(2) for _ in range(3)))

    def add(self, doc: Doc, is_spam: bool, weight: float = 1) -> None:
        super().add(doc, is_spam, weight * self.weight)
        self.weight *= self.growth
        if self.weight > RESCALE:
            for array in (self.doc, self.term, self.classes.messages, self.classes.terms, self.classes.binary_terms):
                array /= self.weight
            self.weight = 1.0

    def columns(self, cols: np.ndarray) -> tuple[nb.TokenCounts, ClassCounts]:
        # in units of the newest trained message, which weighs 1
        newest = self.weight / self.growth
        c = self.classes
        return nb.TokenCounts(self.doc[:, cols] / newest, self.term[:, cols] / newest), ClassCounts(c.messages / newest, c.terms / newest, c.binary_terms / newest)


def online(docs: list[Doc], y: np.ndarray, m: ModelConfig, half_life: float, mode: TrainMode, thresholds: nb.Thresholds, margin: float = TUNE_MARGIN) -> tuple[np.ndarray, int]:
    """Log-odds of each message before it is (maybe) trained (the library's
    rule, ``learning.wants_training``), and how many were trained."""
    counts = DecayingCounts(half_life)
    odds = np.zeros(len(docs))
    trained = 0
    for i, (doc, is_spam) in enumerate(zip(docs, y)):
        if i % 5000 == 0:
            print(f"  half-life {half_life:g}, {mode.value}: {i} of {len(docs)}", file=sys.stderr, flush=True)
        lo = odds[i] = counts.score(doc, [m])[0]
        # before both classes are known the library calls every message unsure
        verdict = Decision.of_code(int(nb.decide(odds[i : i + 1], thresholds)[0])) if counts.classes.messages.all() else Decision.UNSURE
        if wants_training(mode, Label.of(bool(is_spam)), verdict, lo, thresholds.ham_max, thresholds.spam_min, margin):
            counts.add(doc, bool(is_spam))
            trained += 1
    return odds, trained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", required=True)
    parser.add_argument("--half-life", action="append", type=float, default=[], help="messages (0 = no forgetting; repeatable)")
    parser.add_argument("--train-mode", action="append", choices=[t.value for t in TrainMode], default=[])
    parser.add_argument("--margin", action="append", type=float, default=[], help="tune: nats from a decision bound (default the library's; repeatable)")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--window", type=int, default=None)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--label", default="", help="suffix of the results file (to keep runs apart)")
    parser.add_argument("--check", type=int, default=0, help="compare half-life 0, teft and tune, with run_online on the first N messages")
    args = parser.parse_args()
    config, threshold = setup(args)
    thresholds = nb.thresholds_from_loss(config.decision.cost_ham_as_spam, config.decision.cost_spam_as_ham, config.decision.cost_unsure)
    modes = [TrainMode(t) for t in (args.train_mode or ["teft"])]
    settings = [(h, t, g) for h in (args.half_life or [0.0]) for t in modes for g in (args.margin or [TUNE_MARGIN] if t is TrainMode.tune else [TUNE_MARGIN])]
    for name in args.corpus:
        docs, y = tokenized(config, name, args.limit)
        if args.check:
            items = list(stream(name, args.check))
            for mode in (TrainMode.teft, TrainMode.tune):
                report_, scored = run_online(config, items, train_mode=mode)
                mine, n = online(docs[: args.check], y[: args.check], config.model, 0.0, mode, thresholds)
                diff = np.max(np.abs(mine[: len(scored)] - np.array([s.log_odds for s in scored])))
                print(f"check {name}, {mode.value}: largest |log-odds difference| against run_online over {len(scored)} messages: {diff:.2e}; trained {n} and {report_.trained}")
        names, rows, trained = [], [], []
        for half_life, mode, margin in settings:
            odds, n = online(docs, y, config.model, half_life, mode, thresholds, margin)
            names.append(f"half-life {half_life:g}, {mode.value}" + (f" {margin:g} nats" if mode is TrainMode.tune else ""))
            rows.append(odds)
            trained.append(n)
        window = args.window or default_window(y.size)
        cached = Path("results") / f"long_stream-bogofilter-{name}-{args.limit or 'all'}-w{window}.json"
        result = report(f"{name}, {y.size} messages, online", names, np.array(rows), y, threshold, window)
        if cached.exists():
            bogo = json.loads(cached.read_text())
            shown = " ".join("-" if w is None else f"{w:.3f}" for w in bogo["windows"])
            print(f"{'bogofilter 1.2.5 (long_stream cache)':<36} {bogo['one_minus_roca_pct']:8.4f} {bogo['sm_at_hm01_pct']:9.2f} {bogo['lam_pct']:7.3f} {'':>10}  {shown}")
        for label, n in zip(names, trained):
            print(f"  {label}: trained {n} of {y.size}")
        for row, n in zip(result, trained):
            row["trained"] = n
        out = Path("results") / f"forgetting-{name}-{args.limit or 'all'}{'-' + args.label if args.label else ''}.json"
        out.write_text(json.dumps({"stream": name, "messages": int(y.size), "window": window, "rows": result}, indent=2) + "\n")


if __name__ == "__main__":
    main()
