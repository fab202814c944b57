"""Leave one corpus out: choose a setting on the other corpora, report it on the one left out.

    python -m benchmarks.loco [--protocol split|online ...] [--grid NAME=VALUES ...] [--corpus C ...]

A default chosen on the figures it is then reported with is no evidence
that it carries over to mail nobody tuned on. Here every candidate setting
is scored on every corpus, on both protocols the filter is used with:

- split: train once on the first half of the stream (every message, as
  ``spamfilter train`` does), classify the second half;
- online: classify each message, then learn from it as the library does
  online (``learning.wants_training``: errors and near misses, 12 nats).

Then, for each corpus left out in turn, the candidate with the best
geometric mean of 1-ROCA relative to the defaults over the *other*
corpora (each 1-ROCA floored at 0.01% so that a near-perfect mailbox
cannot dominate the mean) is the one chosen, and its figure on the
left-out corpus is set beside the defaults'. spamassassin and csdmc2010
share 2,111 messages, so neither is used to choose when the other is
left out. A default is to change only when the chosen setting is better
on the left-out corpus in most folds and no fold is more than 5% worse
(docs/benchmarks.md, "Leave one corpus out").

Each stream is tokenized once (the cache of benchmarks/option_grid.py);
the counts are the library's in memory (`memcounts.MemoryCounts`) and the
scoring its one scorer (`scorer.Scorer`). Writes
results/loco-<protocol>.json. Asserts nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.compare import ranking
from benchmarks.streams import Corpus, online_scores, split_scores
from spamfilter.config import Config, ModelConfig
from spamfilter.nb import decision
from spamfilter.nb.calibration import log_loss

CORPORA = ["spamassassin", "csdmc2010", *(f"enron{i}" for i in range(1, 7))]
#: Corpora that share messages: one is never used to choose when the other is left out.
OVERLAP = {"spamassassin": {"csdmc2010"}, "csdmc2010": {"spamassassin"}}
#: 1-ROCA % below this counts as this in the geometric mean.
FLOOR = 0.01
#: The default grid: each [model] key's candidate values (the default among them).
GRID = {"tempering": [0.4, 0.55, 0.7, 0.85], "header_max_tokens": [5, 10, 20], "alpha": [0.03, 0.1, 0.3]}


def figures(y: np.ndarray, odds: np.ndarray, threshold: float) -> dict[str, float]:
    r = ranking(y, odds, threshold)
    return {"roca": r["one_minus_roca_pct"], "sm_at_hm01": r["sm_at_hm01_pct"], "lam": r["lam_pct"], "log_loss": log_loss(y, odds)}


def candidates(base: ModelConfig, grid: dict[str, list[Any]]) -> list[tuple[str, ModelConfig]]:
    """Every combination of the grid's values over ``base``, named by what differs from it."""
    keys = list(grid)
    out = []
    for values in itertools.product(*(grid[k] for k in keys)):
        changed = {k: v for k, v in zip(keys, values) if getattr(base, k) != v}
        out.append((",".join(f"{k}={v}" for k, v in changed.items()) or "defaults", replace(base, **changed)))
    return out


def choose(table: dict[str, dict[str, dict[str, float]]], left_out: str, corpora: list[str]) -> str:
    """The candidate with the best geometric mean of 1-ROCA relative to the
    defaults over the corpora used to choose when ``left_out`` is left out."""
    choosing = [c for c in corpora if c != left_out and c not in OVERLAP.get(left_out, set())]

    def mean_ratio(name: str) -> float:
        ratios = [max(table[name][c]["roca"], FLOOR) / max(table["defaults"][c]["roca"], FLOOR) for c in choosing]
        return float(np.exp(np.mean(np.log(ratios))))

    return min(table, key=lambda name: (mean_ratio(name), name != "defaults"))


def left_out_folds(table: dict[str, dict[str, dict[str, float]]], corpora: list[str]) -> list[dict[str, Any]]:
    """For each corpus left out, the setting chosen on the others and its
    figures beside the defaults' there (printed as they come)."""
    folds = []
    for left_out in corpora:
        chosen = choose(table, left_out, corpora)
        mine, base = table[chosen][left_out], table["defaults"][left_out]
        folds.append(
            {"left_out": left_out, "chosen": chosen, "chosen_figures": mine, "default_figures": base, "roca_ratio": max(mine["roca"], FLOOR) / max(base["roca"], FLOOR)}
        )
        print(
            f"  left out {left_out:13} chose {chosen:40} 1-ROCA {mine['roca']:.4f} (defaults {base['roca']:.4f}) "
            f"sm@0.1%hm {mine['sm_at_hm01']:.2f} ({base['sm_at_hm01']:.2f}) log-loss {mine['log_loss']:.3f} ({base['log_loss']:.3f})"
        )
    return folds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", action="append", choices=["split", "online"], default=None)
    parser.add_argument("--corpus", action="append", choices=CORPORA, default=None)
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2", help="[model] key and its candidate values (replaces the default grid)")
    args = parser.parse_args()
    config = Config()
    grid = {k: [json.loads(v) for v in vs.split(",")] for k, _, vs in (g.partition("=") for g in args.grid)} if args.grid else GRID
    corpora = args.corpus or CORPORA
    thresholds = decision.thresholds_from_loss(config.decision.cost_ham_as_spam, config.decision.cost_spam_as_ham, config.decision.cost_unsure)
    two_way = decision.thresholds_from_loss(config.decision.cost_ham_as_spam, config.decision.cost_spam_as_ham, 0.0).spam_min
    settings = candidates(config.model, grid)
    Path("results").mkdir(exist_ok=True)
    loaded = {name: Corpus(config, name) for name in corpora}
    for protocol in args.protocol or ["split", "online"]:
        table: dict[str, dict[str, dict[str, float]]] = {}
        started = time.perf_counter()
        for name, m in settings:
            table[name] = {}
            for corpus, c in loaded.items():
                odds, y = split_scores(c, m) if protocol == "split" else (online_scores(c, m, thresholds)[0], c.y)
                table[name][corpus] = figures(y, odds, two_way)
            shown = " ".join(f"{table[name][c]['roca']:.4f}" for c in corpora)
            print(f"{protocol:6} {name:45} {shown}  ({time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.1f})", flush=True)
        folds = left_out_folds(table, corpora)
        better = sum(f["roca_ratio"] < 1 for f in folds)
        worst = max(f["roca_ratio"] for f in folds)
        print(f"  {protocol}: better on the left-out corpus in {better} of {len(folds)} folds; worst fold x{worst:.3f}")
        Path(f"results/loco-{protocol}.json").write_text(json.dumps({"grid": grid, "table": table, "folds": folds}, indent=1) + "\n")


if __name__ == "__main__":
    main()
