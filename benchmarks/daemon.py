"""`spamc` through `spamfilter serve` against bogofilter, on the same messages.

    python -m benchmarks.daemon [--train 2000] [--messages 1000] [--clients 8] [--requests 20000] [--corpus enron]

Trains both filters on the first `--train` messages of spamassassin (or
the concatenated Enron mailboxes; spam and ham alternating), then on the next `--messages` messages:

1. sequential, one process per message as a delivery agent runs them:
   `spamc < msg` (PROCESS, the message back with the X-Spam-* fields)
   against `bogofilter -p < msg`, alternating message by message so both see
   the same machine load; median and p99 wall time per message;
2. throughput: `--clients` threads each running `spamc < msg` over their
   share of the messages, against one `bogofilter -b -T` run classifying
   the same files;
3. the daemon's resident memory (VmRSS, its workers' included) after start, after the runs above,
   and after `--requests` more requests (the messages over and over).

Prints a table and one JSON line; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from spamfilter.config import Config
from spamfilter.filter import Filter
from spamfilter.mail import MailItem

CORPORA = Path(__file__).resolve().parents[2] / "shared" / "corpora"
CORPUS_INDEX = {"spamassassin": "spamassassin/index", "enron": "enron-spam-preprocessed/index"}
MAX_SIZE = "30000000"


def rows(n: int, corpus: str = "spamassassin") -> list[tuple[bool, Path]]:
    """The first n messages of the corpus's index, spam and ham alternating."""
    index = CORPORA / CORPUS_INDEX[corpus]
    lines = [line.split() for line in index.read_text().splitlines() if line.strip()]
    spam = [index.parent / p for label, p in lines if label == "spam"]
    ham = [index.parent / p for label, p in lines if label == "ham"]
    out: list[tuple[bool, Path]] = []
    for s, h in zip(spam, ham):
        out += [(True, s), (False, h)]
    return out[:n]


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a forked daemon's workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` and its workers, KiB."""
    total = 0
    for p in [pid, *children(pid)]:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def open_fds(pid: int) -> int:
    """File descriptors open in ``pid`` and its workers."""
    return sum(len(os.listdir(f"/proc/{p}/fd")) for p in [pid, *children(pid)])


def timed(cmd: list[str], path: Path) -> float:
    with open(path, "rb") as stdin:
        start = time.perf_counter()
        subprocess.run(cmd, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        return time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def start_daemon(url: str, tmp: Path, *args: str) -> tuple[subprocess.Popen[bytes], int, Path]:
    """``spamfilter serve`` on a free loopback port with an empty config in
    ``tmp``: the process, its port and its log (stderr)."""
    config = tmp / "config.toml"
    config.write_text("")
    log = tmp / f"serve-{time.monotonic_ns()}.log"
    with open(log, "wb") as err:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "spamfilter", "--db", url, "--config", str(config), "serve", "--listen", "127.0.0.1:0", *args], stdout=subprocess.DEVNULL, stderr=err
        )
    while (m := re.search(r"listening on 127\.0\.0\.1:(\d+)", log.read_text())) is None:
        if daemon.poll() is not None:
            sys.exit(log.read_text())
        time.sleep(0.05)
    return daemon, int(m.group(1)), log


def compare_workers(counts: list[int], rounds: int, run: Callable[[int], dict[str, float]], line: Callable[[dict[str, float]], str]) -> None:
    """``run(n)`` for each number of workers n of ``counts`` in turn,
    ``rounds`` times, so that the machine's drift falls on all of them
    alike; prints each run (``line`` renders its figures) with the load
    average, then each n's mean figures, then every run as one JSON line."""
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    for _ in range(rounds):
        for n in counts:
            r = run(n)
            runs[n].append(r)
            print(f"--workers {n}: {line(r)} (load {os.getloadavg()[0]:.1f})", flush=True)
    for n, done in runs.items():
        mean = {key: sum(r[key] for r in done) / len(done) for key in done[0]}
        print(f"--workers {n}, mean of {rounds}: {line(mean)}")
    print(json.dumps({str(n): done for n, done in runs.items()}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--corpus", choices=sorted(CORPUS_INDEX), default="spamassassin", help="enron has the 10,000+ messages a big model needs")
    args = parser.parse_args()
    for tool in ("spamc", "bogofilter"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed")
    chosen = rows(args.train + args.messages, args.corpus)
    train, test = chosen[: args.train], [p for _, p in chosen[args.train :]]
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/model.db"
        with Filter.open(Config(), url) as f:
            f.train((is_spam, MailItem(str(p), p.read_bytes())) for is_spam, p in train)
        bogo = f"{tmp}/bogo"
        os.mkdir(bogo)
        subprocess.run(["bogofilter", "-d", bogo, "-s", "-B", *[str(p) for s, p in train if s]], check=True)
        subprocess.run(["bogofilter", "-d", bogo, "-n", "-B", *[str(p) for s, p in train if not s]], check=True)

        daemon, port, log = start_daemon(url, Path(tmp), "--max-size", MAX_SIZE, "--workers", "4")
        try:
            spamc = ["spamc", "-d", "127.0.0.1", "-p", str(port), "-s", MAX_SIZE]
            rss_start = rss_kib(daemon.pid)

            # 1. sequential, alternating
            t_spamc: list[float] = []
            t_bogo: list[float] = []
            for path in test:
                t_spamc.append(timed(spamc, path))
                t_bogo.append(timed(["bogofilter", "-d", bogo, "-p"], path))

            # 2. throughput
            shares = [test[i :: args.clients] for i in range(args.clients)]

            def client(share: list[Path]) -> None:
                for path in share:
                    timed(spamc, path)

            threads = [threading.Thread(target=client, args=(s,)) for s in shares]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            spamc_rate = len(test) / (time.perf_counter() - start)
            start = time.perf_counter()
            subprocess.run(["bogofilter", "-d", bogo, "-b", "-T"], input="\n".join(map(str, test)) + "\n", capture_output=True, text=True, check=False)
            bogo_rate = len(test) / (time.perf_counter() - start)
            rss_after_runs = rss_kib(daemon.pid)

            # 3. memory over many requests
            rss_track = []
            for n in range(args.requests):
                timed(spamc + ["-c"], test[n % len(test)])
                if (n + 1) % max(args.requests // 4, 1) == 0:
                    rss_track.append(rss_kib(daemon.pid))
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
        errors = [line for line in log.read_text().splitlines() if "error" in line]

    result = {
        "messages": len(test),
        "trained": len(train),
        "spamc_median_ms": statistics.median(t_spamc) * 1000,
        "spamc_p99_ms": percentile(t_spamc, 0.99) * 1000,
        "bogofilter_p_median_ms": statistics.median(t_bogo) * 1000,
        "bogofilter_p_p99_ms": percentile(t_bogo, 0.99) * 1000,
        "spamc_clients": args.clients,
        "spamc_concurrent_msgs_per_s": spamc_rate,
        "bogofilter_b_msgs_per_s": bogo_rate,
        "rss_mib_start": rss_start / 1024,
        "rss_mib_after_runs": rss_after_runs / 1024,
        "rss_mib_during_requests": [r / 1024 for r in rss_track],
        "extra_requests": args.requests,
        "log_errors": len(errors),
    }
    print(f"{'':40} {'median ms':>10} {'p99 ms':>10}")
    print(f"{'spamc < msg (spamfilter serve)':40} {result['spamc_median_ms']:10.2f} {result['spamc_p99_ms']:10.2f}")
    print(f"{'bogofilter -p < msg':40} {result['bogofilter_p_median_ms']:10.2f} {result['bogofilter_p_p99_ms']:10.2f}")
    print(f"{args.clients} concurrent spamc: {spamc_rate:.0f} msgs/s; bogofilter -b -T: {bogo_rate:.0f} msgs/s")
    print(
        f"daemon RSS MiB: start {rss_start / 1024:.0f}, after runs {rss_after_runs / 1024:.0f}, over {args.requests} more requests {[round(r / 1024) for r in rss_track]}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
