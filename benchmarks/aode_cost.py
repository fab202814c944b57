"""What the one-dependence model costs: classify, single-message and training
time, and database size, naive Bayes against AODE/SPODE on the same database.

    python -m benchmarks.aode_cost [--corpus spamassassin] [--train 2000] [--classify 1000] [--repeat 3]

Trains naive Bayes on the first --train messages of the stream (library
`Filter.train`), copies the database, and in the copy chooses the parents
(`Maintenance.reselect`, the defaults' aode_parents, aode_children, ...).
Then, alternating the two databases --repeat times (best time kept): batch
classification of the next --classify messages (`Filter.classify`, messages
read beforehand, so only scoring is timed), one message at a time for 200 of
them (a delivery filter's work per message, without process start), and
training the next 500 (each on a fresh copy), and a whole `spamfilter
classify` process over the --classify files (start-up, reading and a cold
model included: what a user waits for). Prints ms per message and the
ratios; writes results/aode_cost-<corpus>.json. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.long_stream import STREAMS, stream
from spamfilter.config import Config, ModelConfig, StoreConfig
from spamfilter.filter import Filter
from spamfilter.tools.maintenance import Maintenance


def best_of(repeat: int, run: Callable[[], None]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=sorted(STREAMS), default="spamassassin")
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--classify", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dependence", choices=["aode", "spode"], default="aode")
    args = parser.parse_args()
    items = list(stream(args.corpus, args.train + args.classify + 500))
    head, rest, more = items[: args.train], [m for _, m in items[args.train : args.train + args.classify]], items[args.train + args.classify :]
    work = Path(tempfile.mkdtemp(prefix="aode-cost-"))
    plain = Config(store=StoreConfig(url=f"sqlite:///{work / 'nb.db'}"))
    with Filter.open(plain) as f:
        f.train(head)
    size_nb = (work / "nb.db").stat().st_size
    shutil.copy(work / "nb.db", work / "aode.db")
    dep = Config(store=StoreConfig(url=f"sqlite:///{work / 'aode.db'}"), model=replace(ModelConfig(), dependence=args.dependence, reselect_growth=0.0))
    with Filter.open(dep) as f:
        start = time.perf_counter()
        chosen = Maintenance(f.store).reselect(f.config.model)
        reselect_s = time.perf_counter() - start
    size_aode = (work / "aode.db").stat().st_size
    out: dict[str, Any] = {
        "corpus": args.corpus,
        "train": args.train,
        "parents": len(chosen.parents),
        "children": chosen.children,
        "pairs": chosen.pairs,
        "reselect_s": reselect_s,
        "db_mb": {"naive": size_nb / 1e6, args.dependence: size_aode / 1e6},
    }
    for name, config in (("naive", plain), (args.dependence, dep)):
        with Filter.open(config) as f:
            analysed = [f.analyser.one(m) for m in rest]
            batch = best_of(args.repeat, lambda: [f.scoring.verdicts(analysed[i : i + 200]) for i in range(0, len(analysed), 200)])
            one = best_of(args.repeat, lambda: [f.scoring.verdicts([a]) for a in analysed[:200]])
        trained = []
        for _ in range(args.repeat):
            shutil.copy(work / ("nb.db" if name == "naive" else "aode.db"), work / "copy.db")
            with Filter.open(replace(config, store=StoreConfig(url=f"sqlite:///{work / 'copy.db'}"))) as f:
                start = time.perf_counter()
                f.train(more)
                trained.append(time.perf_counter() - start)
        db = work / ("nb.db" if name == "naive" else "aode.db")
        toml = work / f"{name}.toml"
        toml.write_text(f'[model]\ndependence = "{config.model.dependence}"\nreselect_growth = 0.0\n')
        command = [sys.executable, "-m", "spamfilter", "--config", str(toml), "--db", f"sqlite:///{db}", "classify", *(m.source for m in rest)]
        cli = best_of(args.repeat, lambda: subprocess.run(command, check=True, stdout=subprocess.DEVNULL))
        out[name] = {
            "classify_ms": 1000 * batch / len(analysed),
            "one_ms": 1000 * one / 200,
            "train_ms": 1000 * min(trained) / len(more),
            "cli_ms": 1000 * cli / len(rest),
        }
    a, n = out[args.dependence], out["naive"]
    out["ratios"] = {k: a[k] / n[k] for k in n}
    print(
        f"{args.corpus}: trained {args.train}, {len(chosen.parents)} parent(s), {chosen.children} children, {chosen.pairs} pair counts; "
        f"reselect {reselect_s:.1f} s; database {size_nb / 1e6:.1f} MB -> {size_aode / 1e6:.1f} MB (load {os.getloadavg()[0]:.1f})"
    )
    print(f"{'':<10} {'classify ms/msg':>16} {'one at a time':>14} {'train ms/msg':>13} {'CLI classify ms/msg':>20}")
    for name in ("naive", args.dependence, "ratios"):
        r = out[name] if name != "ratios" else out["ratios"]
        print(f"{name:<10} {r['classify_ms']:16.2f} {r['one_ms']:14.2f} {r['train_ms']:13.2f} {r['cli_ms']:20.2f}")
    Path("results").mkdir(exist_ok=True)
    Path(f"results/aode_cost-{args.corpus}-{args.dependence}.json").write_text(json.dumps(out, indent=2) + "\n")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
