"""AODE / SPODE against naive Bayes, through the filter itself: online and split, 1-ROCA %.

    python -m benchmarks.aode_grid --corpus spamassassin --parents 200 --parents 50 [--split half]

Every setting is a ``[model]`` value run by the library's own runs
(``evaluation.run_online``, learning every message, or ``run_split``), so
the one-dependence counts are the store's, kept by training and chosen
again by ``dependence.reselect`` whenever the ledger has grown by
``--growth`` (2: after 50, 100, 200, ... messages), as ``spamfilter train``
and ``evaluate`` do. Naive Bayes is run beside it with the same settings and
``dependence = "none"``; both score every token with one tempering
(``header_apart = false``), since the one-dependence estimators do not
score the header lines apart. ``--features`` adds runs with the Gaussian
message features at weights 1 and 0.2. Prints 1-ROCA %, sm at 0.1% hm, lam %
and seconds per setting; writes results/aode_grid-<stream>-<split>.json.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.compare import ranking
from benchmarks.long_stream import STREAMS, stream
from spamfilter.config import Config, ModelConfig, TrainMode, load_config
from spamfilter.nb import aode, decision
from spamfilter.tools.evaluation import run_online, run_split


def settings(config: Config, args: argparse.Namespace) -> list[tuple[str, ModelConfig]]:
    """Each setting of the grid, labelled, naive Bayes first."""
    base = replace(config.model, header_apart=False, dependence="none", reselect_growth=args.growth, aode_min_support=args.min_support)
    weights = [1.0, 0.2] if args.features else []
    out = [("naive Bayes", base)] + [(f"naive Bayes + features w={w:g}", replace(base, features=True, feature_weight=w)) for w in weights]
    dependence = "spode" if args.spode else "aode"
    for k in args.parents or [aode.DEFAULT_PARENTS]:
        for children in args.children or [0]:
            for child_support in args.child_support or [0]:
                m = replace(base, dependence=dependence, aode_parents=k, aode_children=children or 10**6, aode_child_support=child_support or args.min_support)
                label = f"{dependence} K={1 if args.spode else k} C={children or 'all'}/{child_support or args.min_support} m'={args.min_support}"
                out.append((label, m))
                out += [(f"{label} + features w={w:g}", replace(m, features=True, feature_weight=w)) for w in weights]
    return out


def run(config: Config, labelled: list[Any], split: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(is_spam, log-odds) of the judged messages of one run of the filter."""
    if split is None:
        _, scored = run_online(config, labelled, train_mode=TrainMode.teft)
    else:
        _, scored = run_split(config, labelled, head=len(labelled) // 2 if split == "half" else 10_000)
    return np.array([s.is_spam for s in scored]), np.array([s.log_odds for s in scored])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", choices=sorted(STREAMS), required=True)
    parser.add_argument("--parents", type=int, action="append", default=[])
    parser.add_argument("--children", type=int, action="append", default=[], help="C: pairs with the C best-ranked tokens only (0: every token)")
    parser.add_argument("--child-support", type=int, action="append", default=[], help="children: tokens in at least this many messages (0: as --min-support)")
    parser.add_argument("--min-support", type=int, default=aode.DEFAULT_MIN_SUPPORT)
    parser.add_argument("--growth", type=float, default=2.0)
    parser.add_argument("--split", choices=["half", "10k"], default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--spode", action="store_true", help="SPODE: one parent, chosen on the held-out tail (of the 20 best-ranked)")
    parser.add_argument("--features", action="store_true", help="also the Gaussian message features (weights 1 and 0.2)")
    args = parser.parse_args()
    config = load_config(args.config) if args.config else Config()
    threshold = decision.thresholds_from_loss(config.decision.cost_ham_as_spam, config.decision.cost_spam_as_ham, 0.0).spam_min
    Path("results").mkdir(exist_ok=True)
    for name in args.corpus:
        labelled = list(stream(name, args.limit))
        rows: list[dict[str, Any]] = []
        print(f"\n{name} ({args.split or 'online'}; load {os.getloadavg()[0]:.1f})")
        print(f"{'setting':<40} {'1-ROCA%':>8} {'sm@hm.1%':>9} {'lam%':>7} {'s':>7}")
        for label, m in settings(config, args):
            start = time.perf_counter()
            truth, odds = run(replace(config, model=m), labelled, args.split)
            seconds = time.perf_counter() - start
            r = ranking(truth, odds, threshold)
            rows.append({"setting": label, **r, "seconds": seconds})
            print(f"{label:<40} {r['one_minus_roca_pct']:8.4f} {r['sm_at_hm01_pct']:9.2f} {r['lam_pct']:7.3f} {seconds:7.1f}", flush=True)
        out = Path("results") / f"aode_grid-{name}-{args.split or 'online'}-{args.limit or 'all'}.json"
        out.write_text(json.dumps({"stream": name, "split": args.split, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
