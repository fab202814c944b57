"""The database under load: many processes creating one new database, writers
that wait for each other instead of giving up, errors kept to one line.

The many-trainers test (eight trainers with a 0.2 s busy timeout, compared
with a sequential run) is in tests/store/test_concurrency.py.
"""

from __future__ import annotations

import logging
import multiprocessing
import random
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from spamfilter.cli import exitcodes
from spamfilter.errors import SpamfilterError, StoreBusyError, StoreConflict
from spamfilter.retry import retrying
from spamfilter.store import SCHEMA_REVISION, Store, metadata
from spamfilter.store.engine import _make_engine

HANG_GUARD = 60  # seconds; only to stop a test that hangs

SPAM = b"From: winner@lottery.example\nSubject: claim your prize now\n\nYou won a million dollars, send your bank details today.\n"
HAM = b"From: alice@example.org\nSubject: minutes of the meeting\n\nAttached are the minutes; the next meeting is on Tuesday.\n"


def spamfilter(db: str, *args: str, config: Path | None = None) -> list[str]:
    extra = ["--config", str(config)] if config else []
    return [sys.executable, "-m", "spamfilter", "--db", db, *extra, *args]


# -- eight processes opening one new database ----------------------------------


def _open_at_once(url: str, barrier: multiprocessing.synchronize.Barrier, results: multiprocessing.queues.Queue[tuple[int, str]]) -> None:
    barrier.wait()
    try:
        # Each waits its turn at the schema's lock (10 s: the machine may be busy).
        with Store.open(url, busy_timeout=10.0) as store:
            results.put((exitcodes.OK, str(store.schema_revision())))
    except SpamfilterError as exc:
        results.put((exitcodes.for_error(exc), str(exc)))


def test_eight_processes_opening_a_new_database_all_get_the_schema(any_db_url: str) -> None:
    # Before the upgrade was serialised: SQLite 7 of 8 "database is locked",
    # PostgreSQL 7 of 8 a duplicate pg_type row, all exit 75.
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(8)
    results: multiprocessing.queues.Queue[tuple[int, str]] = ctx.Queue()
    procs = [ctx.Process(target=_open_at_once, args=(any_db_url, barrier, results)) for _ in range(8)]
    for proc in procs:
        proc.start()
    outcomes = [results.get(timeout=HANG_GUARD) for _ in procs]
    for proc in procs:
        proc.join(timeout=HANG_GUARD)
        assert proc.exitcode == 0
    assert outcomes == [(exitcodes.OK, SCHEMA_REVISION)] * 8
    engine = sa.create_engine(any_db_url)
    try:
        with engine.connect() as conn:
            assert set(sa.inspect(conn).get_table_names()) == set(metadata.tables) | {"alembic_version"}
            assert [tuple(r) for r in conn.execute(sa.text("SELECT version_num FROM alembic_version"))] == [(SCHEMA_REVISION,)]
    finally:
        engine.dispose()


def test_a_file_switched_to_wal_while_another_process_writes_waits_for_it(tmp_path: Path) -> None:
    # A file still in rollback mode (as a new one is, until the first opener
    # switches it) with a writer holding its reserved lock: SQLite answers the
    # switch to WAL "database is locked" at once, whatever the busy timeout
    # (seen once in 60 runs of the eight-processes test above). The opener
    # now waits, within its busy timeout, for the writer to finish.
    path = tmp_path / "mail.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE earlier (n)")
    # spamfilter's own file (another program's is left in its journal mode).
    writer.execute("CREATE TABLE alembic_version (version_num)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO earlier VALUES (1)")
    timer = threading.Timer(0.3, writer.execute, ("COMMIT",))
    timer.start()
    try:
        engine, _ = _make_engine(f"sqlite:///{path}", busy_timeout=10.0)
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("SELECT n FROM earlier").all() == [(1,)]
        engine.dispose()
    finally:
        timer.join()
        writer.close()


# -- retrying a busy transaction -------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def failing(times: int, error: type[StoreBusyError] = StoreBusyError) -> tuple[list[int], object]:
    calls: list[int] = []

    def step() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error("database x: the database stayed locked by another process (database is locked)")
        return "done"

    return calls, step


def test_busy_transaction_is_tried_again_with_growing_pauses_and_a_warning_each_time(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    calls, step = failing(5)
    with caplog.at_level(logging.INFO, logger="spamfilter"):
        assert retrying(step, 600.0, sleep=clock.sleep, clock=clock, rng=random.Random(1)) == "done"  # type: ignore[arg-type]
    assert len(calls) == 6
    assert len(clock.pauses) == 5
    # Full jitter: the n-th pause is drawn from [0, 0.05 * 2**n].
    assert all(0.0 <= p <= 0.05 * 2**n for n, p in enumerate(clock.pauses))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 5
    assert warnings[0].getMessage().startswith("database x: the database stayed locked by another process (database is locked); trying again in ")
    assert warnings[-1].getMessage().endswith("(attempt 6)")


def test_busy_transaction_gives_up_at_the_deadline() -> None:
    clock = FakeClock()
    calls, step = failing(10_000)
    with pytest.raises(StoreBusyError):
        retrying(step, 60.0, sleep=clock.sleep, clock=clock, rng=random.Random(2))  # type: ignore[arg-type]
    # Pauses are capped at 5 s: it kept trying until the next pause would
    # have crossed the deadline, and not after.
    assert clock.now <= 60.0
    assert max(clock.pauses) <= 5.0
    assert len(calls) == len(clock.pauses) + 1 >= 20


def test_no_deadline_means_one_attempt_for_busy_and_eight_for_a_lost_race() -> None:
    clock = FakeClock()
    calls, step = failing(100)
    with pytest.raises(StoreBusyError):
        retrying(step, 0.0, sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]
    assert len(calls) == 1
    calls, step = failing(100, StoreConflict)
    with pytest.raises(StoreConflict):
        retrying(step, 0.0, sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]
    assert len(calls) == 8


@pytest.fixture
def mail(tmp_path: Path) -> tuple[Path, Path]:
    spam, ham = tmp_path / "spam.eml", tmp_path / "ham.eml"
    spam.write_bytes(SPAM)
    ham.write_bytes(HAM)
    return spam, ham


def short_timeout(tmp_path: Path, deadline: float = 600.0) -> Path:
    config = tmp_path / "busy.toml"
    config.write_text(f"[store]\nbusy_timeout = 0.2\nwrite_deadline = {deadline}\n")
    return config


@contextmanager
def write_locked(path: Path) -> Iterator[None]:
    """Another process's write transaction on the SQLite file at ``path``
    (created if missing), held until the block ends."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def training(tmp_path: Path, mail: tuple[Path, Path], deadline: float = 600.0, extra: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """A new SQLite database, and the command that trains the two messages
    into it with a 0.2 s busy timeout and the write deadline given."""
    url = f"sqlite:///{tmp_path / 'sf.db'}"
    Store.open(url).close()
    spam, ham = mail
    return url, spamfilter(url, "train", "--spam", str(spam), "--ham", str(ham), *extra, config=short_timeout(tmp_path, deadline))


# tune scores each message in its own transaction before training it
@pytest.mark.parametrize("extra", [(), ("--train-mode", "tune")])
def test_training_waits_for_a_writer_that_holds_the_database(tmp_path: Path, mail: tuple[Path, Path], extra: tuple[str, ...]) -> None:
    url, train = training(tmp_path, mail, extra=extra)
    with write_locked(tmp_path / "sf.db"):
        proc = subprocess.Popen(train, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Let go of the lock once the trainer has said it is waiting.
        assert proc.stderr is not None
        first = proc.stderr.readline()
    out, rest = proc.communicate(timeout=HANG_GUARD)
    assert first.startswith(f"spamfilter: database {url}: the database stayed locked by another process"), first + rest
    assert "; trying again in " in first
    assert proc.returncode == 0, first + rest
    assert out.strip() == "trained 1 spam, 1 ham"
    with Store.open(url) as store:
        assert store.totals().messages.tolist() == [1, 1]


def test_training_gives_up_with_75_after_the_write_deadline(tmp_path: Path, mail: tuple[Path, Path]) -> None:
    url, train = training(tmp_path, mail, deadline=1.0)
    with write_locked(tmp_path / "sf.db"):
        done = subprocess.run(train, capture_output=True, text=True, timeout=HANG_GUARD)
    assert done.returncode == exitcodes.STORE_BUSY, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) >= 2
    assert all(line.startswith(f"spamfilter: database {url}: the database stayed locked") for line in lines)
    assert all("; trying again in " in line for line in lines[:-1])
    assert "trying again" not in lines[-1]


def test_filter_on_a_new_database_held_by_a_writer_exits_75_without_retrying(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    with write_locked(path):
        done = subprocess.run(spamfilter(f"sqlite:///{path}", "filter", config=short_timeout(tmp_path)), input=SPAM, capture_output=True, timeout=HANG_GUARD)
    assert done.returncode == exitcodes.STORE_BUSY, done.stderr
    assert done.stdout == SPAM
    assert b"trying again" not in done.stderr
    assert len(done.stderr.splitlines()) == 1


# -- errors are one line ----------------------------------------------------------


def test_postgresql_permission_error_is_one_line(postgres_url: str) -> None:
    # A role that may connect but not create tables in the new database: the
    # driver's message has a second line (LINE 2: CREATE TABLE ...).
    import secrets

    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    role = f"spamfilter_ro_{secrets.token_hex(3)}"
    database = f"{role}_db"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE ROLE "{role}" LOGIN'))
        conn.execute(sa.text(f'CREATE DATABASE "{database}"'))
    try:
        db_admin = sa.create_engine(sa.engine.make_url(postgres_url).set(database=database), isolation_level="AUTOCOMMIT")
        with db_admin.connect() as conn:
            conn.execute(sa.text("REVOKE CREATE ON SCHEMA public FROM PUBLIC"))
        db_admin.dispose()
        url = sa.engine.make_url(postgres_url).set(username=role, database=database).render_as_string(hide_password=False)
        done = subprocess.run(spamfilter(url, "db", "upgrade"), capture_output=True, text=True, timeout=HANG_GUARD)
        assert done.returncode == exitcodes.STORE_ERROR
        assert done.stderr == f"spamfilter: cannot upgrade {url}: permission denied for schema public\n"
        missing = sa.engine.make_url(postgres_url).set(database=f"{database}_missing").render_as_string(hide_password=False)
        done = subprocess.run(spamfilter(missing, "stats"), capture_output=True, text=True, timeout=HANG_GUARD)
        assert done.returncode == exitcodes.NO_INPUT  # as a missing SQLite file
        assert done.stderr.count("\n") == 1 and f'database "{database}_missing" does not exist' in done.stderr
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
            conn.execute(sa.text(f'DROP ROLE IF EXISTS "{role}"'))
        admin.dispose()


def test_a_daemon_refuses_to_start_on_a_postgresql_database_that_does_not_exist(postgres_url: str) -> None:
    # It started, warning "until spamfilter train trains the model", but
    # train cannot make a server's database: every message went unscanned.
    missing = sa.engine.make_url(postgres_url).set(database="spamfilter_no_such_database").render_as_string(hide_password=False)
    for command in (["serve", "--listen", "127.0.0.1:0"], ["milter", "--listen", "127.0.0.1:0"]):
        done = subprocess.run(spamfilter(missing, *command), capture_output=True, text=True, timeout=HANG_GUARD)
        assert done.returncode == exitcodes.NO_INPUT, done.stderr
        assert "no such database" in done.stderr and "Traceback" not in done.stderr


def _first_messages(corpora_dir: Path, tmp_path: Path, n: int) -> Path:
    """An index of spamassassin's first ``n`` messages, by absolute path."""
    root = corpora_dir / "spamassassin"
    lines = (root / "index").read_text().splitlines()[:n]
    index = tmp_path / "index"
    index.write_text("".join(f"{label} {root / path}\n" for label, path in (line.split() for line in lines)))
    return index


def _split(index: Path, n: int) -> tuple[Path, Path]:
    """Two indexes beside ``index``: its first ``n`` lines and the rest."""
    lines = index.read_text().splitlines()
    head, rest = index.with_name(index.name + ".head"), index.with_name(index.name + ".rest")
    head.write_text("\n".join(lines[:n]) + "\n")
    rest.write_text("\n".join(lines[n:]) + "\n")
    return head, rest


def _trained_cleanly(index: Path, config: Path, tmp_path: Path) -> str:
    """A new SQLite database trained on ``index`` with nothing going wrong."""
    clean = f"sqlite:///{tmp_path / 'clean.db'}"
    assert subprocess.run(spamfilter(clean, "train", "--index", str(index), "--jobs", "1", config=config), capture_output=True, timeout=HANG_GUARD).returncode == 0
    return clean


def _model_size(url: str) -> tuple[int, int, int]:
    """(spam messages, ham messages, tokens) as `stats` reports them."""
    import json

    s = json.loads(subprocess.run(spamfilter(url, "stats", "--format", "json"), capture_output=True, text=True, timeout=HANG_GUARD).stdout)
    return s["spam_messages"], s["ham_messages"], s["tokens"]


@pytest.mark.corpus
def test_a_train_whose_postgresql_connection_is_ended_goes_on_with_a_new_one(fresh_postgres_url: str, corpora_dir: Path, tmp_path: Path) -> None:
    # A server restart (here: the administrator ending the connection) made
    # a long train exit 74; the batch in flight rolls back and runs again.
    import json
    import time

    index = _first_messages(corpora_dir, tmp_path, 300)
    config = tmp_path / "c.toml"
    config.write_text("[store]\nbatch_size = 20\n")
    admin = sa.create_engine(fresh_postgres_url, isolation_level="AUTOCOMMIT")
    locker = sa.create_engine(fresh_postgres_url)
    train = subprocess.Popen(
        spamfilter(fresh_postgres_url, "train", "--index", str(index), "--jobs", "1", config=config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    ended = 0
    try:
        deadline = time.monotonic() + HANG_GUARD

        def trained() -> int:
            with admin.connect() as conn:
                return (
                    int(conn.execute(sa.text("SELECT coalesce(sum(messages), 0) FROM class_totals")).scalar() or 0) if sa.inspect(conn).has_table("class_totals") else 0
                )

        while trained() == 0 and train.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        # Hold the totals so the next batch waits inside its transaction,
        # then end the connection it waits on, as a restart would.
        with locker.connect() as hold, hold.begin():
            hold.execute(sa.text("LOCK TABLE class_totals IN ACCESS EXCLUSIVE MODE"))
            mine = hold.execute(sa.text("SELECT pg_backend_pid()")).scalar()
            while not ended and train.poll() is None and time.monotonic() < deadline:
                with admin.connect() as conn:
                    ended = int(
                        conn.execute(
                            sa.text(
                                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database()"
                                " AND wait_event_type = 'Lock' AND pid <> :mine"
                            ),
                            {"mine": mine},
                        ).scalar()
                        or 0
                    )
                time.sleep(0.02)
        out, err = train.communicate(timeout=HANG_GUARD)
    finally:
        if train.poll() is None:
            train.kill()
        admin.dispose()
        locker.dispose()
    assert ended == 1, "the run ended before its connection could be"
    assert train.returncode == 0, err
    assert "the connection to the server was lost" in err and "trying again" in err
    assert _model_size(fresh_postgres_url) == _model_size(_trained_cleanly(index, config, tmp_path))
    assert subprocess.run(spamfilter(fresh_postgres_url, "db", "check"), capture_output=True, timeout=HANG_GUARD).returncode == 0


class _Proxy:
    """A TCP relay on a loopback port to the PostgreSQL server, which can
    go away (listener and every relayed connection closed: connections are
    refused, as while a server restarts) and come back on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        import socket
        import threading

        self.target = target
        self._socket, self._threading = socket, threading
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._listener: socket.socket | None = None
        self.start()

    def start(self) -> None:
        s = self._socket.socket()
        s.setsockopt(self._socket.SOL_SOCKET, self._socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        self._listener = s
        self._threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def stop(self) -> None:
        import socket

        assert self._listener is not None
        # shutdown first: a close alone leaves the thread blocked in
        # accept() holding the socket, which then still takes connections
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            for c in self._conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self._conns.clear()

    def _accept(self, listener: object) -> None:
        import socket

        assert isinstance(listener, socket.socket)
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            with self._lock:
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                self._threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: object, b: object) -> None:
        import socket

        assert isinstance(a, socket.socket) and isinstance(b, socket.socket)
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@pytest.mark.corpus
def test_a_train_goes_on_after_a_server_restart_and_a_gone_server_is_75(fresh_postgres_url: str, corpora_dir: Path, tmp_path: Path) -> None:
    # While a server restarts it refuses connections: the reconnect that
    # met the refusal ended the run with 74, where the run should wait for
    # the server up to write_deadline, as for a dropped connection.
    import json
    import time

    parsed = sa.engine.make_url(fresh_postgres_url)
    proxy = _Proxy((parsed.host or "127.0.0.1", parsed.port or 5432))
    url = parsed.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    index = _first_messages(corpora_dir, tmp_path, 300)
    config = tmp_path / "c.toml"
    config.write_text("[store]\nbatch_size = 20\nwrite_deadline = 50.0\n")
    admin = sa.create_engine(fresh_postgres_url, isolation_level="AUTOCOMMIT")

    def trained() -> int:
        with admin.connect() as conn:
            if not sa.inspect(conn).has_table("class_totals"):
                return 0
            return int(conn.execute(sa.text("SELECT coalesce(sum(messages), 0) FROM class_totals")).scalar() or 0)

    train = subprocess.Popen(spamfilter(url, "train", "--index", str(index), "--jobs", "1", config=config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + HANG_GUARD
        while trained() == 0 and train.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        proxy.stop()
        gone = trained()
        time.sleep(2.0)  # the run meets refused connections meanwhile
        proxy.start()
        out, err = train.communicate(timeout=HANG_GUARD)
    finally:
        if train.poll() is None:
            train.kill()
        admin.dispose()
    assert 0 < gone < 300, "the run ended before the server went away"
    assert train.returncode == 0, err
    assert "the server cannot be reached" in err and "trying again" in err and "Traceback" not in err
    assert _model_size(fresh_postgres_url) == _model_size(_trained_cleanly(index, config, tmp_path))
    # A server that cannot be reached from the start: a temporary failure
    # (75, what an MTA queues and retries), at once and in one line; the
    # message still goes through `filter` as it came.
    proxy.stop()
    for args in (["stats"], ["filter"]):
        done = subprocess.run(spamfilter(url, *args), input=SPAM.decode(), capture_output=True, text=True, timeout=HANG_GUARD)
        assert done.returncode == exitcodes.STORE_BUSY, done.stderr
        assert "the server cannot be reached" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stdout == SPAM.decode()


@pytest.mark.parametrize("query", ["?sslmode=bogus", "?foo=bar", ":99999"])
def test_a_postgresql_url_the_driver_refuses_is_a_store_error_not_a_wait(query: str) -> None:
    # libpq's own refusal of the URL, before any server is asked, was taken
    # for a server out of reach (75): an MTA queues mail for days on that.
    url = f"postgresql+psycopg://nobody@127.0.0.1{query if query.startswith(':') else ''}/x{query if query.startswith('?') else ''}"
    for args in (["stats"], ["filter"]):
        done = subprocess.run(spamfilter(url, *args), input=SPAM.decode(), capture_output=True, text=True, timeout=HANG_GUARD)
        assert done.returncode == exitcodes.STORE_ERROR, done.stderr
        assert "the database URL is not one the driver takes" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stdout == SPAM.decode()


@pytest.mark.corpus
def test_a_classify_goes_on_after_a_server_restart(fresh_postgres_url: str, corpora_dir: Path, tmp_path: Path) -> None:
    # Scoring reads were never tried again: one dropped connection ended a
    # classify with 75 and part of its output.
    import time

    train_index, rest = _split(_first_messages(corpora_dir, tmp_path, 900), 300)
    config = tmp_path / "c.toml"
    config.write_text("[store]\nbatch_size = 20\nwrite_deadline = 50.0\n")
    assert subprocess.run(spamfilter(fresh_postgres_url, "train", "--index", str(train_index), config=config), capture_output=True, timeout=HANG_GUARD).returncode == 0
    direct = subprocess.run(
        spamfilter(fresh_postgres_url, "classify", "--format", "tsv", "--jobs", "1", "--index", str(rest), config=config),
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
    )
    assert direct.returncode == 0 and len(direct.stdout.splitlines()) == 601, direct.stderr  # and a header line
    parsed = sa.engine.make_url(fresh_postgres_url)
    proxy = _Proxy((parsed.host or "127.0.0.1", parsed.port or 5432))
    url = parsed.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    out = tmp_path / "out.tsv"
    with out.open("w") as sink:
        run = subprocess.Popen(
            spamfilter(url, "classify", "--format", "tsv", "--jobs", "1", "--index", str(rest), config=config), stdout=sink, stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + HANG_GUARD
            while not out.read_text() and run.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            proxy.stop()
            time.sleep(1.0)
            proxy.start()
            _, err = run.communicate(timeout=HANG_GUARD)
        finally:
            if run.poll() is None:
                run.kill()
    assert run.returncode == 0, err
    assert "the server cannot be reached" in err or "the connection to the server was lost" in err, err
    assert out.read_text() == direct.stdout


def test_commands_that_read_leave_an_empty_server_database_empty(fresh_postgres_url: str, tmp_path: Path) -> None:
    # stats, db check, forget and the rest created the whole schema in any
    # empty database they were pointed at (a mistyped name of one that exists).
    mail = tmp_path / "m.eml"
    mail.write_bytes(HAM)
    for args in (["stats"], ["db", "check"], ["db", "export"], ["forget", str(mail)], ["classify", str(mail)], ["top-words"]):
        done = subprocess.run(spamfilter(fresh_postgres_url, *args), capture_output=True, text=True, timeout=HANG_GUARD)
        assert done.returncode == exitcodes.NO_INPUT, (args, done.stderr)
        assert "no spamfilter database" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    engine = sa.create_engine(fresh_postgres_url)
    try:
        assert sa.inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
    assert subprocess.run(spamfilter(fresh_postgres_url, "train", "--ham", str(mail)), capture_output=True, timeout=HANG_GUARD).returncode == 0
    assert subprocess.run(spamfilter(fresh_postgres_url, "stats"), capture_output=True, timeout=HANG_GUARD).returncode == 0


@pytest.mark.corpus
def test_an_import_that_replaces_a_model_waits_for_its_trainers(fresh_postgres_url: str, corpora_dir: Path, tmp_path: Path) -> None:
    # A trainer holding its batch's row of the features' sums while waiting
    # for the tokens the import had locked, and the import deleting that
    # row: "lost a race with another process (deadlock detected)", exit 75,
    # in three tries of three.
    index = _first_messages(corpora_dir, tmp_path, 600)
    first, _ = _split(index, 100)
    config = tmp_path / "c.toml"
    config.write_text("[store]\nbatch_size = 20\n")
    assert (
        subprocess.run(spamfilter(fresh_postgres_url, "--user", "u", "train", "--index", str(first), config=config), capture_output=True, timeout=HANG_GUARD).returncode
        == 0
    )
    counts = tmp_path / "counts.tsv"
    exported = subprocess.run(spamfilter(fresh_postgres_url, "--user", "u", "db", "export", str(counts)), capture_output=True, text=True, timeout=HANG_GUARD)
    assert exported.returncode == 0, exported.stderr
    train = subprocess.Popen(
        spamfilter(fresh_postgres_url, "--user", "u", "train", "--jobs", "1", "--index", str(index), config=config),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        imports = [
            subprocess.run(spamfilter(fresh_postgres_url, "--user", "u", "db", "import", "--replace", str(counts)), capture_output=True, text=True, timeout=HANG_GUARD)
            for _ in range(3)
        ]
        _, err = train.communicate(timeout=HANG_GUARD)
    finally:
        if train.poll() is None:
            train.kill()
    assert [i.returncode for i in imports] == [0, 0, 0], [i.stderr for i in imports]
    assert train.returncode == 0, err


def test_a_vacuum_postgresql_skips_is_an_error_and_every_table_is_vacuumed(fresh_postgres_url: str, tmp_path: Path) -> None:
    # A role that does not own the tables: PostgreSQL skips each with a
    # warning, and `db vacuum` said "vacuumed" (exit 0). It also named four
    # tables of the schema only.
    import secrets

    mail = tmp_path / "m.eml"
    mail.write_bytes(HAM)
    assert subprocess.run(spamfilter(fresh_postgres_url, "train", "--ham", str(mail)), capture_output=True, timeout=HANG_GUARD).returncode == 0
    admin = sa.create_engine(fresh_postgres_url, isolation_level="AUTOCOMMIT")
    role = f"spamfilter_vac_{secrets.token_hex(3)}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE ROLE "{role}" LOGIN'))
            conn.execute(sa.text(f'GRANT USAGE ON SCHEMA public TO "{role}"'))
            conn.execute(sa.text(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"'))
        url = sa.engine.make_url(fresh_postgres_url).set(username=role).render_as_string(hide_password=False)
        done = subprocess.run(spamfilter(url, "db", "vacuum"), capture_output=True, text=True, timeout=HANG_GUARD)
        assert done.returncode == exitcodes.STORE_ERROR, done.stderr
        assert "skipping" in done.stderr and "vacuum as the tables' owner" in done.stderr and done.stderr.count("\n") == 1, done.stderr
        owner = subprocess.run(spamfilter(fresh_postgres_url, "db", "vacuum"), capture_output=True, text=True, timeout=HANG_GUARD)
        assert owner.returncode == 0, owner.stderr
        with admin.connect() as conn:
            vacuumed = conn.execute(sa.text("SELECT relname FROM pg_stat_user_tables WHERE last_vacuum IS NOT NULL")).scalars().all()
        assert set(vacuumed) >= {t.name for t in metadata.sorted_tables}
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'REASSIGN OWNED BY "{role}" TO CURRENT_USER'))
            conn.execute(sa.text(f'DROP OWNED BY "{role}"'))
            conn.execute(sa.text(f'DROP ROLE IF EXISTS "{role}"'))
        admin.dispose()


def _terminate_other_backends(admin: sa.Engine) -> None:
    """End every other connection to this database, as a restart would, and
    wait until each is gone (a backend ends after the call returns, and its
    locks with it)."""
    with admin.connect() as conn:
        ended = (
            conn.execute(sa.text("SELECT pg_terminate_backend(pid, 60000) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"))
            .scalars()
            .all()
        )
    assert all(ended)  # false: still there after the 60 s


def test_a_run_lock_lost_mid_run_is_taken_again_or_stops_the_run_before_its_next_step(fresh_postgres_url: str, caplog: pytest.LogCaptureFixture) -> None:
    # A PostgreSQL session lock goes with its connection. It used to be
    # noticed only when the run ended: meanwhile a second run could start
    # and both move the same mail. Now the run asks still_held() before
    # each step: the lock is taken again if it is free, else the run stops.
    name = "an imap run of account 'home'"
    admin = sa.create_engine(fresh_postgres_url, isolation_level="AUTOCOMMIT")
    first, second = Store.open(fresh_postgres_url), Store.open(fresh_postgres_url)
    try:
        with caplog.at_level(logging.WARNING, logger="spamfilter.store"), first.exclusive(name) as still_held:
            still_held()  # nothing lost: no warning
            assert "lost" not in caplog.text
            _terminate_other_backends(admin)
            still_held()  # free: taken again on a new connection
            assert f"the lock of {name} was lost with its connection" in caplog.text and "taken again" in caplog.text
            with pytest.raises(StoreBusyError), second.exclusive(name):
                pass  # held again by the first
            _terminate_other_backends(admin)
            with second.exclusive(name):  # a second run starts in the gap
                with pytest.raises(StoreBusyError, match="lost its lock with its connection .* another process holds it now"):
                    still_held()
        with second.exclusive(name), first.exclusive(name + " (another)"):
            pass  # nothing left held by either
    finally:
        first.close()
        second.close()
        admin.dispose()


def test_a_run_lock_lost_with_its_connection_ends_with_a_warning_not_a_driver_error(fresh_postgres_url: str, caplog: pytest.LogCaptureFixture) -> None:
    # Leaving the block then raised sqlalchemy's OperationalError with its
    # SQL (imap run: "internal error", 70).
    admin = sa.create_engine(fresh_postgres_url, isolation_level="AUTOCOMMIT")
    first, second = Store.open(fresh_postgres_url), Store.open(fresh_postgres_url)
    try:
        with caplog.at_level(logging.WARNING, logger="spamfilter.store"), first.exclusive("an imap run of account 'home'"):
            with pytest.raises(StoreBusyError), second.exclusive("an imap run of account 'home'"):
                pass
            _terminate_other_backends(admin)
        assert "the lock of an imap run of account 'home' was lost with its connection" in caplog.text
        with second.exclusive("an imap run of account 'home'"):
            pass  # free again
    finally:
        first.close()
        second.close()
        admin.dispose()
