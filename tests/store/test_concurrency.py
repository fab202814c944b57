"""Many processes on one database, and processes killed with SIGKILL.

Real `spamfilter` processes on a SQLite file and on PostgreSQL: concurrent
training of disjoint message sets must end with exactly the counts of one
sequential training; a training run killed at points defined by the work it
has committed must leave a database that opens, passes its integrity check,
holds whole batches only, and ends, once the training is run again, exactly
as one clean run.

Later (2026): 15 messages a trainer and batches of 3 (was 50 and 7), the
sequential reference trained once in this process, kills at a count of
committed messages instead of a random fraction of a timed run, processes
forked from this one (see ``Run``): eight trainers (were six), two readers
and 20 (6) kills, in 20 s of CPU time instead of 159 s.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import sqlite3
import sys
import time
import uuid
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest
import sqlalchemy as sa

from spamfilter.cli import main
from spamfilter.config import Config
from spamfilter.filter import Filter
from spamfilter.mail import digest_bytes, read_index
from spamfilter.store import unpack_token_counts

pytestmark = pytest.mark.corpus

TRAINERS = 8
PER_TRAINER = 15
BATCH = 3
HANG_GUARD = 300  # seconds; only to stop a test that hangs


class Run:
    """``spamfilter ARGS`` in a process forked from this one, stdout and
    stderr to files in ``logs``.

    Each is a process of its own (its own connections, killed by SIGKILL
    like any other) running the command line's entry point; forking skips
    the interpreter's start and spamfilter's imports, 1.6 s of CPU time a
    process and most of what these tests cost when they started each with
    ``python -m spamfilter``. This process holds no database connection
    when it forks (SQLite's locks are per process and not inherited).
    """

    def __init__(self, logs: Path, db: str, *args: str, config: Path | None = None) -> None:
        name = uuid.uuid4().hex
        self.out, self.err = logs / f"{name}.out", logs / f"{name}.err"
        argv = ["--db", db, *(["--config", str(config)] if config else []), *args]
        self.process = _FORK.Process(target=_run_cli, args=(argv, self.out, self.err))
        self.process.start()

    def running(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> bool:
        """SIGKILL the process; False if it had ended already."""
        alive = self.process.is_alive()
        if alive:
            assert self.process.pid is not None
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.join(60)
        return alive

    def finish(self) -> tuple[int, str, str]:
        """Wait for the end: (exit code, stdout, stderr)."""
        self.process.join(HANG_GUARD)
        assert self.process.exitcode is not None, "hangs"
        return self.process.exitcode, self.out.read_text(), self.err.read_text()


_FORK = multiprocessing.get_context("fork")


def _run_cli(argv: list[str], out: Path, err: Path) -> None:
    with out.open("w") as stdout, err.open("w") as stderr:
        os.dup2(stdout.fileno(), 1)
        os.dup2(stderr.fileno(), 2)
        sys.stdout, sys.stderr = stdout, stderr
        code = main(argv)
        stdout.flush()
        stderr.flush()
    os._exit(code)


def spamfilter(logs: Path, db: str, *args: str, config: Path | None = None) -> str:
    """Run ``spamfilter ARGS`` to its end; its stdout. It must exit 0."""
    code, out, err = Run(logs, db, *args, config=config).finish()
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def message_sets(corpora_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Eight disjoint TREC indexes of 15 spamassassin messages each (mixed labels)."""
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
    for i in range(TRAINERS):
        index = out / f"set{i}.index"
        index.write_text("".join(f"{label} {path}\n" for label, path in unique[i * PER_TRAINER : (i + 1) * PER_TRAINER]))
        indexes.append(index)
    return indexes


@pytest.fixture(scope="module")
def all_messages(message_sets: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One index of every message of the eight sets."""
    index = tmp_path_factory.mktemp("all") / "all.index"
    index.write_text("".join(i.read_text() for i in message_sets))
    return index


@pytest.fixture(scope="module")
def reference(all_messages: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[object, ...]]]:
    """The tables after training every message sequentially, in this process."""
    url = f"sqlite:///{tmp_path_factory.mktemp('reference') / 'reference.db'}"
    with Filter.open(Config(), url) as f:
        f.train(read_index(str(all_messages)))
    return dump(url)


def small_batches(tmp_path: Path) -> Path:
    """Batches of 3, and a busy timeout of 0.2 s, so that writers are sure to
    find each other's locks held past it and must wait and try again."""
    config = tmp_path / "config.toml"
    config.write_text(f"[store]\nbatch_size = {BATCH}\nbusy_timeout = 0.2\n")
    return config


def dump(url: str) -> dict[str, list[tuple[object, ...]]]:
    """The model's tables, without timestamps, sorted here (the backends
    collate text differently)."""
    queries = {
        "tokens": "SELECT owner, token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens",
        "class_totals": "SELECT owner, label, messages, terms, binary_terms FROM class_totals WHERE messages > 0 OR terms > 0",
        "doc_histogram": "SELECT owner, label, doc_count, tokens FROM doc_histogram",
        "messages": "SELECT owner, digest, label FROM messages",
    }
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return {name: sorted(tuple(r) for r in conn.execute(sa.text(sql))) for name, sql in queries.items()}
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


def new_database(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A new, empty database: a SQLite file, or the session's PostgreSQL
    database with a new public schema."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'spamfilter.db'}"
    return str(request.getfixturevalue("fresh_postgres_url"))


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_concurrent_training_loses_no_update(
    backend: str, message_sets: list[Path], reference: dict[str, list[tuple[object, ...]]], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # With a 0.2 s busy timeout, before busy batches were tried again: of
    # the eight trainers, some exited 75 on both backends.
    config = small_batches(tmp_path)
    url = new_database(backend, tmp_path, request)
    spamfilter(tmp_path, url, "db", "upgrade")
    # Eight trainers at once, and two readers classifying meanwhile.
    trainers = [Run(tmp_path, url, "train", "--index", str(index), config=config) for index in message_sets]
    readers = [Run(tmp_path, url, "classify", "--index", str(message_sets[i])) for i in (0, 3)]
    waits = 0
    for run in trainers:
        code, _, err = run.finish()
        assert code == 0, err
        assert "Traceback" not in err
        # Whatever a trainer says on stderr is that it waited for the others.
        lines = err.splitlines()
        assert all("; trying again in " in line for line in lines), lines
        waits += len(lines)
    for run in readers:
        code, _, err = run.finish()
        # Before both classes are trained a reader may find the model empty (69).
        assert code in (0, 69), err
        assert "Traceback" not in err
    print(f"{backend}: trainers waited and tried again {waits} times")
    stats = json.loads(spamfilter(tmp_path, url, "stats", "--format", "json"))
    counts = Counter(line.split()[0] for index in message_sets for line in index.read_text().splitlines())
    assert (
        (stats["spam_messages"], stats["ham_messages"])
        == (counts["spam"], counts["ham"])
        == (sum(1 for _, _, label in reference["messages"] if label == 1), sum(1 for _, _, label in reference["messages"] if label == 0))
    )
    assert dump(url) == reference
    assert stats["tokens"] == len(reference["tokens"])
    assert_consistent(url)


@pytest.mark.parametrize(("backend", "kills"), [("sqlite", 20), ("postgresql", 6)])
def test_killed_training_keeps_whole_batches_and_resumes(
    backend: str, kills: int, all_messages: Path, reference: dict[str, list[tuple[object, ...]]], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    config = small_batches(tmp_path)
    total = len(reference["messages"])
    killed = new_database(backend, tmp_path, request)
    # The schema first, so that every kill lands in the training itself.
    spamfilter(tmp_path, killed, "db", "upgrade")
    # No pool: the trainers fork from this process, which must hold no
    # connection to the database then.
    engine = sa.create_engine(killed, poolclass=sa.pool.NullPool)
    rng = random.Random(2026)
    trained_after_kill = []
    try:
        held = 0  # messages the database holds
        for _ in range(3 * kills):
            if len(trained_after_kill) == kills:
                break
            # Kill once the run has committed one to three batches more than
            # the database held; start again from nothing when that would be
            # the end, or when a run finished before its kill (its last
            # batches took less than a poll), so the kills keep landing in
            # the middle of the training.
            target = held + BATCH * rng.randint(1, 3)
            if target >= total:
                with engine.begin() as conn:
                    for table in ("messages", "tokens", "doc_histogram"):
                        conn.execute(sa.text(f"DELETE FROM {table}"))
                    conn.execute(sa.text("UPDATE class_totals SET messages = 0, terms = 0, binary_terms = 0"))
                target = BATCH * rng.randint(1, 3)
            run = Run(tmp_path, killed, "train", "--index", str(all_messages), config=config)
            deadline = time.monotonic() + HANG_GUARD
            while run.running() and time.monotonic() < deadline:
                with engine.connect() as conn:
                    if conn.execute(sa.text("SELECT count(*) FROM messages")).scalar_one() >= target:
                        break
                time.sleep(0.01)
            run.kill()
            if backend == "sqlite":
                # The database opens and passes SQLite's own check.
                with closing(sqlite3.connect(tmp_path / "spamfilter.db")) as check:
                    assert check.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            # Its counts are exactly the sums of the messages in its ledger.
            held = assert_consistent(killed)
            if held < total:
                trained_after_kill.append(held)
    finally:
        engine.dispose()
    print(f"messages trained when killed: {trained_after_kill}")
    assert len(trained_after_kill) == kills
    assert all(0 < n < total for n in trained_after_kill), "a kill missed the training"
    # Each kill leaves whole batches of 3.
    assert all(n % BATCH == 0 for n in trained_after_kill), trained_after_kill
    spamfilter(tmp_path, killed, "train", "--index", str(all_messages), config=config)
    assert dump(killed) == reference
    assert_consistent(killed)
