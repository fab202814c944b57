"""Seconds per hostile message: the extremes of tests/mail/test_hostile.py, timed.

    python -m benchmarks.hostile              # every extreme, once each
    python -m benchmarks.hostile --repeat 3   # the best of three

The tests only check that each extreme is handled (tokens or a refusal, a
verdict) with bounded output and no hang; this measures how long each one
takes end to end (parse, tokenize, digest, score) on a filter trained on
the first 10 spam and 10 ham of the spamassassin corpus, as in the tests.
Prints the slowest first and writes results/hostile.json; asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spamfilter.config import Config
from spamfilter.errors import MailParseError
from spamfilter.filter import Filter
from spamfilter.mail import MailItem, read_index

REPO = Path(__file__).resolve().parents[1]
CORPORA = REPO.parent / "shared" / "corpora"


def git_sha() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False, cwd=REPO)
    return out.stdout.strip() or "unknown"


def extremes() -> list[tuple[str, Callable[[], bytes]]]:
    """The hand-made extremes of the test module (tests/ is not a package)."""
    spec = importlib.util.spec_from_file_location("test_hostile", REPO / "tests" / "test_hostile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Its dataclasses look the module up in sys.modules while being built.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    cases: list[tuple[str, Callable[[], bytes]]] = module.EXTREMES
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="time each message this many times and keep the fastest")
    args = parser.parse_args()
    labelled = list(read_index(str(CORPORA / "spamassassin" / "index")))
    training = [p for p in labelled if p[0]][:10] + [p for p in labelled if not p[0]][:10]
    rows: list[dict[str, Any]] = []
    with Filter.open(Config(), "sqlite://") as f:
        f.train(training)
        for name, make in extremes():
            raw = make()
            try:
                tokens = len(f.tokens(MailItem("hostile", raw)))
            except MailParseError:
                tokens = -1  # refused
            best = float("inf")
            for _ in range(args.repeat):
                started = time.perf_counter()
                list(f.classify([MailItem("hostile", raw)]))
                best = min(best, time.perf_counter() - started)
            rows.append({"message": name, "bytes": len(raw), "tokens": tokens, "seconds": round(best, 4)})
    rows.sort(key=lambda r: -r["seconds"])
    for row in rows:
        print(f"{row['seconds']:8.3f} s  {row['bytes']:>10,} bytes  {row['message']}")
    out = REPO / "results" / "hostile.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"git": git_sha(), "repeat": args.repeat, "messages": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
