"""Where users feel speed, side by side with bogofilter, in one run.

    python -m benchmarks.speed [--corpus enron --corpus spamassassin] [--jobs N]
                               [--starts 10] [--online 1000]

For each corpus the first messages of its TREC index are the training mail
and the next ones the mail to classify (enron: the concatenated Enron
mailboxes, 5,000 then 3,000; spamassassin: 3,046 then 3,000), and both
programs get the same files:

- start: ``spamfilter filter < msg`` (a new process per message, as a
  delivery filter runs) against ``bogofilter -p < msg``, alternating, on
  ``--starts`` messages; also ``spamfilter --version``;
- batch train: ``spamfilter train --index`` against bogofilter's bulk
  registration (``-s -B`` spam files, ``-n -B`` ham files);
- batch classify: ``spamfilter classify --index --format tsv`` against
  ``bogofilter -T -B`` on the same files; wall time and peak memory;
- online: ``spamfilter evaluate`` (classify, then train, each message in
  order, in one process) against bogofilter run as a mail system would, one
  ``-T`` and one ``-s|-n`` process per message, on the first ``--online``
  messages of the index.

Every figure is wall time of the real command (GNU time for the peak
memory) with the machine's load average printed beside it: the machines
are shared, so read the ratios, which both programs see under the same
load. Writes results/speed.json. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CORPORA = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"
SPLITS = {"enron": ("enron-spam-preprocessed/index", 5000, 3000), "spamassassin": ("spamassassin/index", 3046, 3000)}
SPAMFILTER = [sys.executable, "-m", "spamfilter"]  # --python replaces the interpreter


def read_split(corpus: str) -> tuple[list[tuple[bool, Path]], list[tuple[bool, Path]]]:
    index, n_train, n_test = SPLITS[corpus]
    path = CORPORA / index
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            label, rel = line.split(None, 1)
            rows.append((label.lower() == "spam", (path.parent / rel).resolve()))
    return rows[:n_train], rows[n_train : n_train + n_test]


def write_index(rows: list[tuple[bool, Path]], path: Path) -> Path:
    path.write_text("".join(f"{'spam' if s else 'ham'} {p}\n" for s, p in rows))
    return path


def timed(cmd: list[str], *, stdin: Path | None = None, text_in: str | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one command, its output discarded."""
    with tempfile.NamedTemporaryFile("r") as report:
        full = ["/usr/bin/time", "-q", "-f", "%M", "-o", report.name, *cmd]
        started = time.perf_counter()
        if stdin is not None:
            with open(stdin, "rb") as fh:
                subprocess.run(full, stdin=fh, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        else:
            subprocess.run(full, input=text_in, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        wall = time.perf_counter() - started
        lines = [x for x in Path(report.name).read_text().split() if x.isdigit()]
    return wall, (int(lines[-1]) / 1024 if lines else float("nan"))


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, text=True, capture_output=True, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


def bench_corpus(corpus: str, jobs: int, starts: int, online: int, work: Path) -> dict[str, object]:
    train, test = read_split(corpus)
    out: dict[str, object] = {"corpus": corpus, "train": len(train), "test": len(test), "jobs": jobs}
    db = f"sqlite:///{work / f'{corpus}.db'}"
    bogo = work / f"{corpus}.bogo"
    bogo.mkdir()
    train_index = write_index(train, work / f"{corpus}-train.idx")
    test_index = write_index(test, work / f"{corpus}-test.idx")
    env_jobs = ["--jobs", str(jobs)] if jobs else []

    # -- batch train
    wall, rss = timed([*SPAMFILTER, "--db", db, "train", "--index", str(train_index), *env_jobs])
    out["train_spamfilter"] = {"seconds": wall, "msgs_per_s": len(train) / wall, "rss_mb": rss}
    started = time.perf_counter()
    for is_spam, flag in ((True, "-s"), (False, "-n")):
        files = [str(p) for s, p in train if s == is_spam]
        run(["bogofilter", "-d", str(bogo), flag, "-B", *files])
    wall = time.perf_counter() - started
    out["train_bogofilter"] = {"seconds": wall, "msgs_per_s": len(train) / wall}

    # -- batch classify
    wall, rss = timed([*SPAMFILTER, "--db", db, "classify", "--index", str(test_index), "--format", "tsv", *env_jobs])
    out["classify_spamfilter"] = {"seconds": wall, "msgs_per_s": len(test) / wall, "rss_mb": rss}
    wall, rss = timed(["bogofilter", "-d", str(bogo), "-T", "-B", *[str(p) for _, p in test]])
    out["classify_bogofilter"] = {"seconds": wall, "msgs_per_s": len(test) / wall, "rss_mb": rss}

    # -- one message, a new process each time
    sample = [p for _, p in test[:: max(1, len(test) // starts)]][:starts]
    ours, theirs, rss_ours = [], [], []
    for path in sample:
        wall, rss = timed([*SPAMFILTER, "--db", db, "filter", "--always-zero"], stdin=path)
        ours.append(wall)
        rss_ours.append(rss)
        theirs.append(timed(["bogofilter", "-d", str(bogo), "-p"], stdin=path)[0])
    out["filter_spamfilter"] = {"median_s": statistics.median(ours), "rss_mb": statistics.median(rss_ours)}
    out["filter_bogofilter"] = {"median_s": statistics.median(theirs)}
    versions = [timed([*SPAMFILTER, "--version"])[0] for _ in range(max(3, starts // 2))]
    out["version_spamfilter"] = {"median_s": statistics.median(versions)}

    # -- online: classify then train each message
    stream = (train + test)[:online]
    stream_index = write_index(stream, work / f"{corpus}-online.idx")
    wall, rss = timed([*SPAMFILTER, "evaluate", "--index", str(stream_index), "--format", "json", *env_jobs])
    out["online_spamfilter"] = {"seconds": wall, "msgs_per_s": len(stream) / wall, "rss_mb": rss}
    fresh = work / f"{corpus}.bogo-online"
    fresh.mkdir()
    started = time.perf_counter()
    for is_spam, path in stream:
        run(["bogofilter", "-d", str(fresh), "-T", "-I", str(path)])
        run(["bogofilter", "-d", str(fresh), "-s" if is_spam else "-n", "-I", str(path)])
    wall = time.perf_counter() - started
    out["online_bogofilter"] = {"seconds": wall, "msgs_per_s": len(stream) / wall}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", action="append", choices=sorted(SPLITS))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="0: do not pass --jobs (a spamfilter without it)")
    parser.add_argument("--python", help="the interpreter of the spamfilter to measure (default: this one)")
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--online", type=int, default=1000)
    args = parser.parse_args()
    if args.python:
        SPAMFILTER[0] = args.python
    for tool in ("bogofilter", "/usr/bin/time"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is needed (Debian packages bogofilter, time)")
    results = {"load_before": os.getloadavg(), "cores": os.cpu_count(), "corpora": []}
    with tempfile.TemporaryDirectory() as tmp:
        for corpus in args.corpus or ["enron", "spamassassin"]:
            results["corpora"].append(bench_corpus(corpus, args.jobs, args.starts, args.online, Path(tmp)))  # type: ignore[union-attr]
    results["load_after"] = os.getloadavg()
    Path("results").mkdir(exist_ok=True)
    Path("results/speed.json").write_text(json.dumps(results | {"python": SPAMFILTER[0]}, indent=2))
    print(f"load average {results['load_before']} -> {results['load_after']}, {results['cores']} cores")
    print(f"{'corpus':13} {'task':28} {'spamfilter':>14} {'bogofilter':>14} {'ratio':>7}")
    for r in results["corpora"]:  # type: ignore[union-attr]

        def row(task: str, ours: float, theirs: float, unit: str, higher_is_better: bool) -> None:
            ratio = ours / theirs if higher_is_better else theirs / ours
            print(f"{r['corpus']:13} {task:28} {ours:10.3f} {unit:3} {theirs:10.3f} {unit:3} {ratio:7.2f}")

        row("filter < msg (median)", r["filter_spamfilter"]["median_s"], r["filter_bogofilter"]["median_s"], "s", False)
        row("batch train", r["train_spamfilter"]["msgs_per_s"], r["train_bogofilter"]["msgs_per_s"], "m/s", True)
        row("batch classify", r["classify_spamfilter"]["msgs_per_s"], r["classify_bogofilter"]["msgs_per_s"], "m/s", True)
        row("online classify + train", r["online_spamfilter"]["msgs_per_s"], r["online_bogofilter"]["msgs_per_s"], "m/s", True)
        print(f"{r['corpus']:13} {'--version (median)':28} {r['version_spamfilter']['median_s']:10.3f} s")
        print(f"{r['corpus']:13} {'classify peak RSS':28} {r['classify_spamfilter']['rss_mb']:10.1f} MB  {r['classify_bogofilter']['rss_mb']:10.1f} MB")
        print(f"{r['corpus']:13} {'filter peak RSS':28} {r['filter_spamfilter']['rss_mb']:10.1f} MB")
    print("ratio: spamfilter's speed as a multiple of bogofilter's (above 1: faster)")


if __name__ == "__main__":
    main()
