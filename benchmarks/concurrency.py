"""Training throughput with 1, 2 and 4 concurrent processes, on SQLite and PostgreSQL.

    python -m benchmarks.concurrency [--messages 2000] [--postgres URL]

The first `--messages` distinct spamassassin messages are split into as many
disjoint TREC indexes as there are workers; the workers (`spamfilter train
--index`, one process each, the default batch of 500 messages per
transaction) start together on one new database, and the wall time until the
last one ends gives the messages per second. After each run the counts are
checked against `spamfilter stats`: nothing may be lost.

PostgreSQL needs a server where a database may be created (default
postgresql+psycopg://postgres@127.0.0.1:5432/test, trust auth); each run gets
a new database, dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from spamfilter.mail import digest_bytes

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "spamassassin"


def distinct_rows(n: int) -> list[tuple[str, Path]]:
    rows = [line.split() for line in (CORPUS / "index").read_text().splitlines() if line.strip()]
    seen: set[str] = set()
    out = []
    for label, path in rows:
        d = digest_bytes((CORPUS / path).read_bytes())
        if d not in seen:
            seen.add(d)
            out.append((label, CORPUS / path))
        if len(out) == n:
            break
    return out


def run(url: str, rows: list[tuple[str, Path]], workers: int, work: Path) -> float:
    indexes = []
    for w in range(workers):
        index = work / f"w{workers}_{w}.index"
        index.write_text("".join(f"{label} {path}\n" for label, path in rows[w::workers]))
        indexes.append(index)
    spamfilter = [sys.executable, "-m", "spamfilter", "--db", url]
    subprocess.run([*spamfilter, "db", "upgrade"], check=True, capture_output=True)
    started = time.perf_counter()
    procs = [subprocess.Popen([*spamfilter, "train", "--index", str(i)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for i in indexes]
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"a worker failed: {err.decode()}")
    seconds = time.perf_counter() - started
    stats = json.loads(subprocess.run([*spamfilter, "stats", "--format", "json"], check=True, capture_output=True, text=True).stdout)
    expected_spam = sum(1 for label, _ in rows if label == "spam")
    assert (stats["spam_messages"], stats["ham_messages"]) == (expected_spam, len(rows) - expected_spam), stats
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    rows = distinct_rows(args.messages)
    admin = sa.create_engine(args.postgres, isolation_level="AUTOCOMMIT")
    results: list[tuple[str, int, float]] = []
    with tempfile.TemporaryDirectory(prefix="spamfilter-conc-") as tmp:
        work = Path(tmp)
        for workers in (1, 2, 4):
            results.append(("sqlite", workers, run(f"sqlite:///{work / f'{workers}.db'}", rows, workers, work)))
            name = f"spamfilter_bench_{secrets.token_hex(4)}"
            with admin.connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
            try:
                url = sa.engine.make_url(args.postgres).set(database=name).render_as_string(hide_password=False)
                results.append(("postgresql", workers, run(url, rows, workers, work)))
            finally:
                with admin.connect() as conn:
                    conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
    print(f"{len(rows)} distinct spamassassin messages, trained by N concurrent processes")
    print(f"{'backend':<12} {'workers':>7} {'seconds':>8} {'msg/s':>7}")
    for backend, workers, seconds in results:
        print(f"{backend:<12} {workers:>7} {seconds:>8.1f} {len(rows) / seconds:>7.0f}")


if __name__ == "__main__":
    main()
