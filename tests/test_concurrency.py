"""Many processes on one database, and processes killed with SIGKILL.

Real `spamfilter` processes on a SQLite file and on PostgreSQL: concurrent
training of disjoint message sets must end with exactly the counts of one
sequential training; a training run killed at random moments must leave a
database that opens, passes its integrity check, holds whole batches only,
and ends, once the training is run again, exactly as one clean run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from spamfilter.mail import digest_bytes
from spamfilter.store import unpack_token_counts

pytestmark = pytest.mark.corpus


def spamfilter(db: str, *args: str, config: Path | None = None) -> list[str]:
    extra = ["--config", str(config)] if config else []
    return [sys.executable, "-m", "spamfilter", "--db", db, *extra, *args]


@pytest.fixture(scope="module")
def message_sets(corpora_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Six disjoint TREC indexes of 50 spamassassin messages each (mixed labels)."""
    root = corpora_dir / "spamassassin"
    rows = [line.split() for line in (root / "index").read_text().splitlines() if line.strip()]
    random.Random(11).shuffle(rows)
    out = tmp_path_factory.mktemp("sets")
    seen: set[str] = set()
    unique = []
    for label, path in rows:
        digest = digest_bytes((root / path).read_bytes())
        if digest not in seen:
            seen.add(digest)
            unique.append((label, root / path))
    indexes = []
    for i in range(6):
        index = out / f"set{i}.index"
        index.write_text("".join(f"{label} {path}\n" for label, path in unique[i * 50 : (i + 1) * 50]))
        indexes.append(index)
    return indexes


def small_batches(tmp_path: Path) -> Path:
    config = tmp_path / "config.toml"
    config.write_text("[store]\nbatch_size = 7\nbusy_timeout = 60.0\n")
    return config


def dump(url: str) -> dict[str, list[tuple[object, ...]]]:
    """The model's tables, without timestamps."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return {
                "tokens": [tuple(r) for r in conn.execute(sa.text("SELECT owner, token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens ORDER BY owner, token"))],
                "class_totals": [tuple(r) for r in conn.execute(sa.text("SELECT owner, label, messages, terms, binary_terms FROM class_totals WHERE messages > 0 OR terms > 0 ORDER BY owner, label"))],
                "doc_histogram": [tuple(r) for r in conn.execute(sa.text("SELECT owner, label, doc_count, tokens FROM doc_histogram ORDER BY owner, label, doc_count"))],
                "messages": [tuple(r) for r in conn.execute(sa.text("SELECT owner, digest, label FROM messages ORDER BY owner, digest"))],
            }
    finally:
        engine.dispose()


def assert_consistent(url: str) -> int:
    """The counts are exactly the sums over the trained-message ledger (so
    every batch is all or nothing); returns the number of trained messages."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            ledger = list(conn.execute(sa.text("SELECT label, token_counts FROM messages WHERE owner = ''")))
            tokens = {row[0]: tuple(row[1:]) for row in conn.execute(sa.text("SELECT token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens WHERE owner = ''"))}
            totals = {row[0]: tuple(row[1:]) for row in conn.execute(sa.text("SELECT label, messages, terms, binary_terms FROM class_totals WHERE owner = ''"))}
            histogram = {(row[0], row[1]): row[2] for row in conn.execute(sa.text("SELECT label, doc_count, tokens FROM doc_histogram WHERE owner = ''"))}
    finally:
        engine.dispose()
    expected: dict[str, list[int]] = {}
    messages, terms, binary = [0, 0], [0, 0], [0, 0]
    for label, blob in ledger:
        counts = unpack_token_counts(blob)
        messages[label] += 1
        terms[label] += sum(counts.values())
        binary[label] += len(counts)
        for token, n in counts.items():
            row = expected.setdefault(token, [0, 0, 0, 0])
            row[label] += 1
            row[2 + label] += n
    assert tokens == {t: tuple(r) for t, r in expected.items()}
    for label in (0, 1):
        assert totals.get(label, (0, 0, 0)) == (messages[label], terms[label], binary[label])
    recomputed = Counter((label, row[label]) for row in tokens.values() for label in (0, 1))
    assert {k: v for k, v in histogram.items() if v} == dict(recomputed)
    return len(ledger)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_concurrent_training_loses_no_update(backend: str, message_sets: list[Path], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    def fresh(name: str) -> str:
        if backend == "sqlite":
            return f"sqlite:///{tmp_path / name}"
        return str(request.getfixturevalue("fresh_postgres_url"))

    config = small_batches(tmp_path)
    # Sequential reference first (PostgreSQL: one database per session, so
    # the reference is dumped before the concurrent run replaces it).
    reference_url = fresh("reference.db")
    for index in message_sets:
        subprocess.run(spamfilter(reference_url, "train", "--index", str(index), config=config), check=True, capture_output=True, timeout=300)
    reference = dump(reference_url)
    url = fresh("concurrent.db") if backend == "sqlite" else str(request.getfixturevalue("postgres_url"))
    if backend == "postgresql":
        engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(sa.text("DROP SCHEMA public CASCADE"))
            conn.execute(sa.text("CREATE SCHEMA public"))
        engine.dispose()
    subprocess.run(spamfilter(url, "db", "upgrade"), check=True, capture_output=True, timeout=120)
    # Six trainers at once, and two readers classifying meanwhile.
    trainers = [
        subprocess.Popen(spamfilter(url, "train", "--index", str(index), config=config), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for index in message_sets
    ]
    readers = [
        subprocess.Popen(spamfilter(url, "classify", "--index", str(message_sets[i])), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for i in (0, 3)
    ]
    for proc in trainers:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
        assert b"Traceback" not in err
    for proc in readers:
        _, err = proc.communicate(timeout=300)
        # Before both classes are trained a reader may find the model empty (69).
        assert proc.returncode in (0, 69), err.decode()
        assert b"Traceback" not in err
    stats = json.loads(subprocess.run(spamfilter(url, "stats", "--format", "json"), check=True, capture_output=True, text=True).stdout)
    counts = Counter(line.split()[0] for index in message_sets for line in index.read_text().splitlines())
    assert (stats["spam_messages"], stats["ham_messages"]) == (counts["spam"], counts["ham"])
    assert dump(url) == reference
    assert stats["tokens"] == len(reference["tokens"])
    assert_consistent(url)


@pytest.mark.parametrize(("backend", "kills"), [("sqlite", 20), ("postgresql", 6)])
def test_killed_training_keeps_whole_batches_and_resumes(backend: str, kills: int, message_sets: list[Path], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    index = tmp_path / "all.index"
    index.write_text("".join(i.read_text() for i in message_sets))
    config = small_batches(tmp_path)
    clean = f"sqlite:///{tmp_path / 'clean.db'}"
    started = time.monotonic()
    subprocess.run(spamfilter(clean, "train", "--index", str(index), config=config), check=True, capture_output=True, timeout=300)
    length = time.monotonic() - started
    total = assert_consistent(clean)

    killed_path = tmp_path / "killed.db"
    killed = f"sqlite:///{killed_path}" if backend == "sqlite" else str(request.getfixturevalue("fresh_postgres_url"))
    # The schema first, so that every kill lands in the training itself.
    subprocess.run(spamfilter(killed, "db", "upgrade"), check=True, capture_output=True, timeout=120)
    rng = random.Random(2026)
    trained_after_kill = []
    for _ in range(kills):
        proc = subprocess.Popen(spamfilter(killed, "train", "--index", str(index), config=config), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 1.0) * length)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        if backend == "sqlite":
            # The database opens and passes SQLite's own check.
            with sqlite3.connect(killed_path) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        # Its counts are exactly the sums of the messages in its ledger.
        trained_after_kill.append(assert_consistent(killed))
        # Start again from nothing once a run got through, so the kills keep
        # landing in the middle of the training.
        if trained_after_kill[-1] == total:
            engine = sa.create_engine(killed)
            with engine.begin() as conn:
                for table in ("messages", "tokens", "doc_histogram"):
                    conn.execute(sa.text(f"DELETE FROM {table}"))
                conn.execute(sa.text("UPDATE class_totals SET messages = 0, terms = 0, binary_terms = 0"))
            engine.dispose()
    print(f"messages trained when killed: {trained_after_kill}")
    assert len(trained_after_kill) == kills
    assert any(0 < n < total for n in trained_after_kill), "no kill landed in the middle of the training"
    # Each kill leaves whole batches of 7 (the last one may be shorter).
    assert all(n % 7 == 0 or n == total for n in trained_after_kill), trained_after_kill
    subprocess.run(spamfilter(killed, "train", "--index", str(index), config=config), check=True, capture_output=True, timeout=300)
    assert dump(killed) == dump(clean)
