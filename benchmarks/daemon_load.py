"""`spamfilter serve` under load: more processes, idle connections, a locked database.

    python -m benchmarks.daemon_load [--train 2000] [--messages 400] [--idle 500] [--lock-seconds 60]
    python -m benchmarks.daemon_load --workers 4 --workers 2 [--rounds 4]

Trains a model on the first `--train` messages of spamassassin (spam and ham
alternating), then, each part with a fresh daemon on it:

1. throughput: one `spamc -c` client over the next `--messages` messages,
   then 8 concurrent clients over the same messages, with `--processes 1`
   and with one process per core; the ratio of 8 clients' rate to one's,
   and the 8 clients' p99 latency;
2. idle connections: p99 of 100 `spamc -c` with no other client, then with
   `--idle` connections held open that send nothing; the daemon's file
   descriptors and memory (workers included) while they are held and after
   they are closed;
3. a locked database: p99 of 100 `spamc -c` and 100 `spamc -K` (PING)
   before, and while another process holds the write lock (`BEGIN
   IMMEDIATE`) for `--lock-seconds`; 4 TELLs sent under the lock, how each
   was answered; one more TELL once the lock is gone.

With ``--workers`` it measures only the throughput part, one process per
core, for each number of scoring threads given (``serve --workers``), in
turn for ``--rounds`` rounds, so that the machine's drift falls on all of
them alike.

Prints a table and one JSON line; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import sqlite3
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.daemon import compare_workers, open_fds, percentile, rows, rss_kib, start_daemon, timed
from spamfilter import spamd
from spamfilter.config import Config
from spamfilter.filter import Filter
from spamfilter.mail import MailItem


def checks(spamc: list[str], paths: list[Path], clients: int) -> tuple[float, list[float]]:
    """``spamc -c`` over ``paths`` from ``clients`` threads: messages/s and the latencies."""
    with ThreadPoolExecutor(clients) as pool:
        start = time.perf_counter()
        times = list(pool.map(lambda p: timed([*spamc, "-c"], p), paths))
    return len(paths) / (time.perf_counter() - start), times


def throughput(url: str, tmp: Path, paths: list[Path], processes: int, workers: int | None = None) -> dict[str, float]:
    threads = [] if workers is None else ["--workers", str(workers)]
    daemon, port, _ = start_daemon(url, tmp, "--processes", str(processes), *threads)
    spamc = ["spamc", "-d", "127.0.0.1", "-p", str(port)]
    try:
        checks(spamc, paths[:50], 1)  # warm the caches
        one, _ = checks(spamc, paths, 1)
        eight, times = checks(spamc, paths, 8)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
    return {
        "one_client_per_s": one,
        "eight_clients_per_s": eight,
        "ratio": eight / one,
        "eight_median_ms": percentile(times, 0.5) * 1000,
        "eight_p99_ms": percentile(times, 0.99) * 1000,
    }


def throughput_line(r: dict[str, float]) -> str:
    """One ``throughput`` result (or a mean of them) as a line."""
    return (
        f"1 client {r['one_client_per_s']:.0f}/s, 8 clients {r['eight_clients_per_s']:.0f}/s (x{r['ratio']:.2f}), "
        f"8-client median {r['eight_median_ms']:.1f} ms, p99 {r['eight_p99_ms']:.1f} ms"
    )


def idle(url: str, tmp: Path, paths: list[Path], n: int) -> dict[str, float]:
    daemon, port, _ = start_daemon(url, tmp)
    spamc = ["spamc", "-d", "127.0.0.1", "-p", str(port)]
    held: list[socket.socket] = []
    try:
        checks(spamc, paths[:50], 1)
        _, quiet = checks(spamc, paths[:100], 1)
        for _ in range(n):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=60))
        time.sleep(2)
        _, busy = checks(spamc, paths[:100], 1)
        fds_held, rss_held = open_fds(daemon.pid), rss_kib(daemon.pid)
        open_after = sum(1 for s in held if _open(s))
        for s in held:
            s.close()
        time.sleep(2)
        fds_after, rss_after = open_fds(daemon.pid), rss_kib(daemon.pid)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
    return {
        "idle": n,
        "p99_ms_alone": percentile(quiet, 0.99) * 1000,
        "p99_ms_with_idle": percentile(busy, 0.99) * 1000,
        "held_open_by_daemon": open_after,
        "fds_held": fds_held,
        "fds_after": fds_after,
        "rss_mib_held": rss_held / 1024,
        "rss_mib_after": rss_after / 1024,
    }


def _open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def locked(url: str, tmp: Path, paths: list[Path], seconds: float) -> dict[str, object]:
    daemon, port, _ = start_daemon(url, tmp, "--allow-tell")
    address = spamd.Address(host="127.0.0.1", port=port)
    spamc = ["spamc", "-d", "127.0.0.1", "-p", str(port)]
    lock = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        checks(spamc, paths[:50], 1)
        _, check_free = checks(spamc, paths[:100], 1)
        _, ping_free = checks([*spamc, "-K"], paths[:100], 1)
        lock.execute("BEGIN IMMEDIATE")
        held_from = time.monotonic()
        answers: list[str] = []

        def tell(path: Path) -> None:
            try:
                learned = spamd.tell_remote(address, path.read_bytes(), is_spam=True, user=None, timeout=120)
                answers.append("learned" if learned else "unchanged")
            except (OSError, spamd.ProtocolError) as exc:
                answers.append(str(exc))

        tellers = [threading.Thread(target=tell, args=(p,)) for p in paths[100:104]]
        for t in tellers:
            t.start()
        _, check_locked = checks(spamc, paths[:100], 1)
        _, ping_locked = checks([*spamc, "-K"], paths[:100], 1)
        for t in tellers:
            t.join()
        time.sleep(max(seconds - (time.monotonic() - held_from), 0))
        lock.execute("ROLLBACK")
        tell(paths[104])
    finally:
        lock.close()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
    return {
        "lock_seconds": seconds,
        "check_median_ms_free": percentile(check_free, 0.5) * 1000,
        "check_median_ms_locked": percentile(check_locked, 0.5) * 1000,
        "check_p99_ms_free": percentile(check_free, 0.99) * 1000,
        "check_p99_ms_locked": percentile(check_locked, 0.99) * 1000,
        "ping_p99_ms_free": percentile(ping_free, 0.99) * 1000,
        "ping_p99_ms_locked": percentile(ping_locked, 0.99) * 1000,
        "tells_under_lock": answers[:4],
        "tell_after": answers[4:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--lock-seconds", type=float, default=60.0)
    parser.add_argument("--workers", type=int, action="append", help="compare these numbers of scoring threads (throughput only)")
    parser.add_argument("--rounds", type=int, default=4, help="with --workers: rounds of each, in turn")
    args = parser.parse_args()
    if shutil.which("spamc") is None:
        sys.exit("spamc is not installed")
    chosen = rows(args.train + max(args.messages, 110))
    train, test = chosen[: args.train], [p for _, p in chosen[args.train :]]
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        url = f"sqlite:///{tmp}/model.db"
        with Filter.open(Config(), url) as f:
            f.train((s, MailItem(str(p), p.read_bytes())) for s, p in train)
        if args.workers:
            compare_workers(args.workers, args.rounds, lambda n: throughput(url, tmp, test[: args.messages], cores, n), throughput_line)
            return
        result = {
            "processes_1": throughput(url, tmp, test[: args.messages], 1),
            f"processes_{cores}": throughput(url, tmp, test[: args.messages], cores),
            "idle": idle(url, tmp, test, args.idle),
            "locked": locked(url, tmp, test, args.lock_seconds),
        }
    for key in ("processes_1", f"processes_{cores}"):
        r = result[key]
        print(
            f"{key}: 1 client {r['one_client_per_s']:.0f}/s, 8 clients {r['eight_clients_per_s']:.0f}/s (x{r['ratio']:.2f}), "
            f"8-client median {r['eight_median_ms']:.1f} ms, p99 {r['eight_p99_ms']:.1f} ms"
        )
    i = result["idle"]
    print(
        f"idle {i['idle']}: p99 {i['p99_ms_alone']:.1f} ms alone, {i['p99_ms_with_idle']:.1f} ms with them; "
        f"{i['held_open_by_daemon']} held open; fds {i['fds_held']} -> {i['fds_after']}; RSS {i['rss_mib_held']:.0f} -> {i['rss_mib_after']:.0f} MiB"
    )
    k = result["locked"]
    print(
        f"locked {k['lock_seconds']:.0f} s: CHECK median {k['check_median_ms_free']:.1f} -> {k['check_median_ms_locked']:.1f} ms, "
        f"p99 {k['check_p99_ms_free']:.1f} -> {k['check_p99_ms_locked']:.1f} ms, "
        f"PING p99 {k['ping_p99_ms_free']:.1f} -> {k['ping_p99_ms_locked']:.1f} ms; TELLs {k['tells_under_lock']}, after {k['tell_after']}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
