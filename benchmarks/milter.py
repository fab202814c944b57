"""How long an MTA waits for ``spamfilter milter`` at the end of a message,
against a ``spamfilter filter`` process per message, on the same messages.

    python -m benchmarks.milter [--train 1000] [--messages 300] [--corpus enron]
    python -m benchmarks.milter --workers 4 --workers 2 [--clients 8] [--rounds 4]

Trains a model on the first ``--train`` messages of spamassassin (spam and
ham alternating, as ``benchmarks.daemon`` picks them), starts ``spamfilter
milter`` on a loopback port and sends the next ``--messages`` messages over
one connection as an MTA does (MAIL, RCPT, the header fields, the body in
64 KiB chunks, end of message), timing each from the end-of-message command
to the milter's final reply: the wait Postfix adds to the end of DATA. Then
runs ``spamfilter filter < msg`` for each message, the whole process.
With ``--workers`` it instead compares numbers of messages the milter
scores at once (``milter --workers``, one process per core): for each,
in turn for ``--rounds`` rounds, ``--clients`` connections send every
message at the same time, as an MTA with that many smtpd processes does;
it prints their throughput and the median and p99 wait.

Prints a table and one JSON line; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.daemon import compare_workers, rows
from spamfilter.config import Config
from spamfilter.daemon import milter
from spamfilter.filter import Filter
from spamfilter.mail import MailItem


def _fields_and_body(raw: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """An LF message split as an MTA hands it over (continuation lines kept
    in their field's value; an mbox ``From `` line left out)."""
    if raw.startswith(b"From "):
        raw = raw[raw.find(b"\n") + 1 :]
    head, _, body = raw.partition(b"\n\n")
    fields: list[tuple[bytes, bytes]] = []
    for line in head.split(b"\n"):
        if line[:1] in (b" ", b"\t") and fields:
            fields[-1] = (fields[-1][0], fields[-1][1] + b"\n" + line)
        elif b":" in line:
            name, _, value = line.partition(b":")
            fields.append((name, value))
    return fields, body


def _exchange(sock: socket.socket, stream: object, code: bytes, data: bytes = b"") -> bytes:
    sock.sendall(milter.packet(code, data))
    while True:
        got = milter.read_packet(stream)  # type: ignore[arg-type]
        assert got is not None
        if got[0] in (milter.CONTINUE, milter.ACCEPT, milter.TEMPFAIL, milter.REPLYCODE, milter.OPTNEG):
            return got[0]


def milter_waits(port: int, messages: list[bytes]) -> list[float]:
    """Seconds from each message's end-of-message command to the final reply."""
    waits = []
    with socket.create_connection(("127.0.0.1", port)) as sock, sock.makefile("rb") as stream:
        offer = (6).to_bytes(4, "big") + (0x1FF).to_bytes(4, "big") + (0x1FFFFF).to_bytes(4, "big")
        _exchange(sock, stream, milter.OPTNEG, offer)
        for raw in messages:
            fields, body = _fields_and_body(raw)
            _exchange(sock, stream, milter.MAIL, b"<sender@example.org>\0")
            _exchange(sock, stream, milter.RCPT, b"<user@example.test>\0")
            for name, value in fields:
                _exchange(sock, stream, milter.HEADER, name + b"\0" + value + b"\0")
            _exchange(sock, stream, milter.EOH)
            for i in range(0, len(body), 65535):
                _exchange(sock, stream, milter.BODY, body[i : i + 65535])
            started = time.perf_counter()
            _exchange(sock, stream, milter.EOB)
            waits.append(time.perf_counter() - started)
        sock.sendall(milter.packet(milter.QUIT))
    return waits


def start_milter(base: list[str], log: Path, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    """``spamfilter milter`` on a free loopback port: the process and its port."""
    with open(log, "wb") as err:
        proc = subprocess.Popen([*base, "milter", "--listen", "127.0.0.1:0", "--max-size", "30000000", *args], stderr=err)
    while (m := re.search(r"listening on 127\.0\.0\.1:(\d+)", log.read_text())) is None:
        if proc.poll() is not None:
            sys.exit(log.read_text())
        time.sleep(0.05)
    return proc, int(m.group(1))


def concurrent_waits(base: list[str], work: Path, messages: list[bytes], workers: int, clients: int) -> dict[str, float]:
    """A milter with ``--workers`` ``workers``, and ``clients`` connections
    each sending every message at once: messages/s, median and p99 wait."""
    proc, port = start_milter(base, work / f"milter-{workers}.log", "--workers", str(workers))
    try:
        milter_waits(port, messages[:20])  # warm the caches
        started = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            waits = [w for part in pool.map(lambda _: milter_waits(port, messages), range(clients)) for w in part]
        elapsed = time.perf_counter() - started
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    median, p99 = _ms(waits)
    return {"messages_per_s": len(waits) / elapsed, "median_ms": median, "p99_ms": p99}


def _ms(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--corpus", default="spamassassin")
    parser.add_argument("--workers", type=int, action="append", help="compare these numbers of messages scored at once (concurrent clients only)")
    parser.add_argument("--clients", type=int, default=8, help="with --workers: connections sending at once")
    parser.add_argument("--rounds", type=int, default=4, help="with --workers: rounds of each, in turn")
    args = parser.parse_args()
    picked = rows(args.train + args.messages, args.corpus)
    work = Path(tempfile.mkdtemp(prefix="bench-milter-"))
    url, config = f"sqlite:///{work / 'model.db'}", work / "config.toml"
    config.write_text("")
    with Filter.open(Config(), url) as f:
        f.train([(is_spam, MailItem(str(p), p.read_bytes())) for is_spam, p in picked[: args.train]])
    messages = [p.read_bytes() for _, p in picked[args.train :]]
    base = [sys.executable, "-m", "spamfilter", "--db", url, "--config", str(config)]
    if args.workers:
        compare_workers(
            args.workers,
            args.rounds,
            lambda n: concurrent_waits(base, work, messages, n, args.clients),
            lambda r: f"{args.clients} clients {r['messages_per_s']:.0f} msg/s, median {r['median_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms",
        )
        return
    proc, port = start_milter(base, work / "milter.log")
    try:
        waits = milter_waits(port, messages)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    filter_times = []
    for raw in messages:
        started = time.perf_counter()
        subprocess.run([*base, "filter"], input=raw, capture_output=True, check=False)
        filter_times.append(time.perf_counter() - started)
    result = {"corpus": args.corpus, "train": args.train, "messages": len(messages), "milter_ms": _ms(waits), "filter_ms": _ms(filter_times)}
    print("| | median ms / message | p99 ms / message |\n|---|---:|---:|")
    print("| end of message to the milter's reply | %.2f | %.2f |" % result["milter_ms"])
    print("| `spamfilter filter < msg` (a process) | %.2f | %.2f |" % result["filter_ms"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
