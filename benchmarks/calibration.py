"""The calibrated score on later mail and online: the filter's map from log-odds to P(spam).

    python -m benchmarks.calibration [--corpus spamassassin ...] [--protocol split|online]

Drives `spamfilter.nb.calibration` as the filter does (`Scoring.record`,
`Scoring.judge`), over the cached token matrices of `benchmarks.streams`:

- split: train once on the first half in batches of 200 (the default
  `[store] batch_size`), each batch scored by the model of the batches
  before it and recorded in the history (`calibration.recorded`), as
  `spamfilter train` does; then score the second half with the whole
  model and read P(spam) off the history (`CalibrationMap`).
- online: each message scored by the model of the messages learned before
  it (the library's tune rule, `streams.online_scores`), its P(spam) read
  off the history of all messages before it, then recorded.

For each corpus and each (half-life, prior bound) of the grid it prints
the log-loss (nats per message) of the raw and of the calibrated score,
the two P(spam) tails, and the loss per message of the loss matrix's
three-way verdicts on raw and on calibrated P(spam); then, leaving one
corpus out at a time (`benchmarks.loco`'s rule: choose on the others by the
geometric mean of log-loss relative to the raw score), what the setting
chosen on the others gives on the corpus left out. Writes
results/calibration.json. Asserts nothing.

On the split protocol the record is weighted by the model's size, as
`train` weighs it: an entry scored by a model of n messages weighs n / N
once the model holds N (each batch scales the whole record by n_before /
n_after, `calibration.growth`), so what a small early model said counts
less. Online it is not, as online learning does not. `--sizing` runs the
defaults both ways on each protocol. `--sizing-power P` (split only)
weighs each entry by (n / N) ** P instead, beside P = 1. `--cross-fitted` (split only) sets
beside the sized record one that `train` cannot keep but a held-out
calibration would: each batch of the first half scored by the model of
the whole first half less that batch, then recorded in order, unscaled.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.loco import CORPORA, OVERLAP
from benchmarks.option_grid import parse_setting
from benchmarks.streams import Corpus, online_scores, split_scores
from spamfilter.config import Config
from spamfilter.nb import decision
from spamfilter.nb import model as nb
from spamfilter.nb.calibration import HALF_LIFE, MAP_BINS, PRIOR_BOUND, CalibrationMap, calibrated_in_order, calibration, growth, recorded

#: Candidate (half-life in messages, prior bound in nats); the defaults first.
GRID = [(hl, b) for hl in (HALF_LIFE, 500.0, 2000.0, float("inf")) for b in (PRIOR_BOUND, float(np.log(19.0)), float(np.log(999.0)))]
BATCH = 200


def split_calibrated(c: Corpus, config: Config, half_life: float, bound: float, sized: bool | float | str = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(raw log-odds, calibrated log-odds, labels) of the second half; with
    ``sized`` (as `train` records) each batch's record scaled by the model's
    growth, n / N (`calibration.growth`), or by (n / N) ** sized for a
    number; with ``sized = "cross-fitted"`` each batch scored by the first
    half's model less that batch."""
    m = config.model
    head = c.y.size // 2
    W = np.zeros((2, MAP_BINS))
    start = 0
    while start < head:
        stop = min(start + BATCH, head)
        if sized == "cross-fitted":
            odds, y = split_scores(c, m, start, stop, trained=np.r_[0:start, stop:head])
            decay, added = recorded(odds, y, half_life)
            W = decay * W + added
        elif c.y[:start].any() and (~c.y[:start]).any():
            odds, y = split_scores(c, m, start, stop)
            decay, added = recorded(odds, y, half_life, growth(start, stop - start) ** float(sized) if sized else 1.0)
            W = decay * W + added
        start = stop
    odds, y = split_scores(c, m)
    return odds, CalibrationMap(W, bound).log_odds(odds), y


def online_calibrated(raw: np.ndarray, y: np.ndarray, half_life: float, bound: float) -> np.ndarray:
    """Each message's calibrated log-odds from the record of the messages before it
    (`calibration.calibrated_in_order` a message at a time); a message scored
    before the model knew both classes, log-odds 0, is not recorded."""
    known = np.flatnonzero(np.cumsum(y) * np.cumsum(~y) > 0)
    first = int(known[0]) + 1 if known.size else raw.size
    out = np.zeros_like(raw)
    out[first:] = calibrated_in_order(raw[first:], y[first:], 1, half_life, bound)
    return out


def online_sized(raw: np.ndarray, y: np.ndarray, trained: np.ndarray, half_life: float, bound: float) -> np.ndarray:
    """``online_calibrated`` with the record weighted by the model's size
    (each message trained scales the record by n / (n + 1))."""
    W = np.zeros((2, MAP_BINS))
    out = np.zeros_like(raw)
    both = np.cumsum(y) * np.cumsum(~y) > 0
    n = 0
    for i in range(raw.size):
        if i and both[i - 1]:
            out[i] = CalibrationMap(W, bound).log_odds(raw[i : i + 1])[0]
            decay, added = recorded(raw[i : i + 1], y[i : i + 1], half_life)
            W = decay * W + added
        if trained[i]:
            W = W * (n / (n + 1))
            n += 1
    return out


def figures(y: np.ndarray, raw: np.ndarray, calibrated: np.ndarray, thresholds: decision.Thresholds, costs: tuple[float, float, float]) -> dict[str, float]:
    cal, before = calibration(y, calibrated), calibration(y, raw)

    def loss(odds: np.ndarray) -> float:
        v = decision.decide(odds, thresholds)
        return float(costs[0] * np.sum((v == nb.SPAM) & ~y) + costs[1] * np.sum((v == nb.HAM) & y) + costs[2] * np.sum(v == nb.UNSURE)) / y.size

    v = decision.decide(calibrated, thresholds)
    return {
        "raw_log_loss": before.log_loss,
        "log_loss": cal.log_loss,
        "low_tail_spam_pct": cal.low_tail_spam_pct,
        "ham_in_low_tail_pct": cal.ham_in_low_tail_pct,
        "high_tail_ham_pct": cal.high_tail_ham_pct,
        "spam_in_high_tail_pct": cal.spam_in_high_tail_pct,
        "raw_loss": loss(raw),
        "loss": loss(calibrated),
        "spam_unsure_pct": 100.0 * float(np.mean(v[y] == nb.UNSURE)),
        "ham_unsure_pct": 100.0 * float(np.mean(v[~y] == nb.UNSURE)),
    }


def name_of(half_life: float, bound: float, sized: bool | float | str = False) -> str:
    if isinstance(sized, str):
        return f"half-life {half_life:g}, bound {bound:.2f}, {sized}"
    power = "" if sized is True or sized == 1 else f" ** {float(sized):g}"
    return f"half-life {half_life:g}, bound {bound:.2f}" + (f", sized{power}" if sized else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", choices=CORPORA, default=None)
    parser.add_argument("--protocol", action="append", choices=["split", "online"], default=None)
    parser.add_argument("--sizing", action="store_true", help="the defaults with and without the record weighted by the model's size")
    parser.add_argument("--cross-fitted", action="store_true", help="split: the sized record against one scored by the model less each batch")
    parser.add_argument("--sizing-power", action="append", type=float, help="split: the record sized by (n / N) ** P for each P given, beside the sized one (P = 1)")
    parser.add_argument("--setting", default="", help="[model] keys over the defaults, e.g. unseen_weight=0.5 (benchmarks.option_grid)")
    args = parser.parse_args()
    config = Config()
    config = replace(config, model=parse_setting(config.model, args.setting))
    d = config.decision
    thresholds = decision.thresholds_from_loss(d.cost_ham_as_spam, d.cost_spam_as_ham, d.cost_unsure)
    costs = (d.cost_ham_as_spam, d.cost_spam_as_ham, d.cost_unsure)
    corpora = args.corpus or CORPORA
    Path("results").mkdir(exist_ok=True)
    out: dict[str, object] = {}
    for protocol in args.protocol or ["split", "online"]:
        as_filter = protocol == "split"  # `train` weighs the record by the model's size, online learning does not
        grid: list[tuple[float, float, bool | float | str]] = [(hl, b, as_filter) for hl, b in GRID]
        if args.sizing:
            grid = [(HALF_LIFE, PRIOR_BOUND, as_filter), (HALF_LIFE, PRIOR_BOUND, not as_filter)]
        if args.cross_fitted:
            grid = [(HALF_LIFE, PRIOR_BOUND, True), (HALF_LIFE, PRIOR_BOUND, "cross-fitted")]
        if args.sizing_power:
            grid = [(HALF_LIFE, PRIOR_BOUND, True), *((HALF_LIFE, PRIOR_BOUND, p) for p in args.sizing_power if p != 1)]
        table: dict[str, dict[str, dict[str, float]]] = {name_of(*g): {} for g in grid}
        for corpus in corpora:
            started = time.perf_counter()
            c = Corpus(config, corpus)
            raw_online, trained = online_scores(c, config.model, thresholds) if protocol == "online" else (None, None)
            for hl, bound, sized in grid:
                if raw_online is None:
                    raw, calibrated, y = split_calibrated(c, config, hl, bound, sized)
                else:
                    raw, y = raw_online, c.y
                    calibrated = online_sized(raw, y, trained, hl, bound) if sized else online_calibrated(raw, y, hl, bound)
                r = table[name_of(hl, bound, sized)][corpus] = figures(y, raw, calibrated, thresholds, costs)
                print(
                    f"{protocol:6} {corpus:13} {name_of(hl, bound, sized):28} log-loss {r['raw_log_loss']:.4f} -> {r['log_loss']:.4f}  "
                    f"P<=0.01 {r['low_tail_spam_pct']:.2f}% spam, {r['ham_in_low_tail_pct']:.0f}% of ham  "
                    f"P>=0.99 {r['high_tail_ham_pct']:.2f}% ham, {r['spam_in_high_tail_pct']:.0f}% of spam  "
                    f"loss {r['raw_loss']:.4f} -> {r['loss']:.4f}  unsure ham/spam {r['ham_unsure_pct']:.1f}/{r['spam_unsure_pct']:.1f}%",
                    flush=True,
                )
            print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)
        folds = []
        for left_out in corpora:
            choosing = [x for x in corpora if x != left_out and x not in OVERLAP.get(left_out, set())]

            def mean_ratio(name: str) -> float:
                return float(np.exp(np.mean([np.log(table[name][x]["log_loss"] / table[name][x]["raw_log_loss"]) for x in choosing])))

            chosen = min(table, key=lambda name: (mean_ratio(name), name != name_of(*grid[0])))
            r = table[chosen][left_out]
            folds.append({"left_out": left_out, "chosen": chosen, **r})
            print(f"  {protocol} left out {left_out:13} chose {chosen:28} log-loss {r['raw_log_loss']:.4f} -> {r['log_loss']:.4f}")
        out[protocol] = {"table": table, "folds": folds}
    Path("results/calibration.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
