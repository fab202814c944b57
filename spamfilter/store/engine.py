"""Engines for the two supported databases, and their driver errors as ours."""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import time
from pathlib import Path
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from spamfilter.errors import NoSuchDatabase, StoreBusyError, StoreConflict, StoreDisconnected, StoreError, StoreUnreachable
from spamfilter.locations import make_private_dirs, not_a_folder


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL, or None (in-memory or another backend)."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def _sidecars_follow(path: Path) -> None:
    """Give the SQLite file's -wal and -shm the file's own permissions again.

    SQLite creates them with the file's mode; a reader of a file made
    read-only (0400) leaves a 0400 -shm behind, and once the file is
    writable again every write fails ("attempt to write a readonly
    database") until the -shm is deleted. A sidecar not ours to change is
    left as it is (SQLite then reports the error). First, a file SQLite
    cannot open at all in this folder is refused (``_refuse_unreadable_wal``)."""
    _refuse_unreadable_wal(path)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return
    for sidecar in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            st = sidecar.lstat()
            if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != mode:
                sidecar.chmod(mode)
        except OSError:
            pass


def _refuse_unreadable_wal(path: Path) -> None:
    """Raise ``StoreError`` when SQLite cannot open the file at all: a
    spamfilter database is in WAL mode, read through its -shm file, which a
    reader must create when it is not there, and this user cannot write to
    the folder (another user's, or a read-only file system). SQLite said
    only "unable to open database file". Asked of the file system only:
    opening the file to read its header and closing it again would drop
    every POSIX lock this process's SQLite connections hold on it (a
    daemon's, when it reloads)."""
    if path.with_name(path.name + "-shm").exists() or os.access(path.parent, os.W_OK):
        return
    raise StoreError(
        f"database {path}: this user cannot write to its folder {path.parent} (no permission, or a read-only file system), "
        f"where SQLite must create {path.name}-shm to read it; run as a user who can, "
        f"or open it read-only with immutable=1 (sqlite:///{path}?immutable=1) while nothing writes to it"
    )


def _make_owner_only(path: Path) -> None:
    """Take group and other permissions off a database file about to receive
    the schema (an empty file created beforehand with the umask's 0644),
    and off its sidecars."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            path.chmod(mode & 0o700)
    except OSError:
        return
    _sidecars_follow(path)


def _create_sqlite_file(path: Path, create: bool, create_dirs: bool) -> list[Path]:
    """Create the missing SQLite file ``path`` (empty, owner-only) and, with
    ``create_dirs``, its missing folders; what it created, outermost first."""
    if not create:
        raise NoSuchDatabase(f"no such database: {path}")
    if (why := not_a_folder(path)) is not None:
        raise StoreError(f"cannot create database {path}: {why}")
    if not create_dirs and not path.parent.is_dir():
        raise StoreError(f"cannot create database {path}: folder {path.parent} does not exist (--create-dirs creates it)")
    created: list[Path] = []
    try:
        created = make_private_dirs(path.parent)
        # The counts say a lot about someone's mail: owner-only file.
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
        created.append(path)
    except FileExistsError:
        pass  # another process created it meanwhile: not ours to remove
    except OSError as exc:
        raise StoreError(f"cannot create database {path}: {exc.strerror}") from None
    return created


def _switch_to_wal(dbapi_conn, busy_timeout: float) -> None:  # type: ignore[no-untyped-def]
    """Put the file in WAL mode (a no-op once it is, which it stays).

    A new file is still in rollback mode, and switching needs its exclusive
    lock. When several processes open one new file at once, SQLite answers
    "database is locked" at once to those that would otherwise wait on each
    other (holding a shared lock while another holds the reserved one), without
    calling the busy handler; so try again, with short pauses, until the busy
    timeout has passed."""
    deadline = time.monotonic() + busy_timeout
    pause = 0.005
    while True:
        try:
            dbapi_conn.execute("PRAGMA journal_mode = WAL").fetchall()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _foreign_sqlite(cursor) -> bool:  # type: ignore[no-untyped-def]
    """Whether the file holds tables but no spamfilter schema (another
    program's database): it is refused, and left in its journal mode."""
    tables, ours = cursor.execute("SELECT count(*), coalesce(sum(name = 'alembic_version'), 0) FROM sqlite_master WHERE type = 'table'").fetchone()
    return bool(tables) and not ours


def _empty_sqlite_file(path: Path) -> bool:
    """Whether ``path`` holds nothing yet: no byte in it or its write-ahead
    log (a new WAL database's first pages may be in the log alone)."""
    wal = path.with_name(path.name + "-wal")
    try:
        return path.stat().st_size == 0 and (not wal.exists() or wal.stat().st_size == 0)
    except OSError:
        return False


def _make_engine(url: str, busy_timeout: float, create: bool = True, create_dirs: bool = True) -> tuple[Engine, tuple[Path, ...]]:
    """The engine for ``url``, and what making it created on disk: the
    folders of a new SQLite file (outermost first) and the file."""
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise StoreError(f"not a database URL: {display_url(url)!r}") from None
    if parsed.get_backend_name() != "sqlite":
        connect_args: dict[str, object] = {}
        if parsed.get_backend_name() == "postgresql":
            parsed, connect_args["options"] = _postgresql_options(parsed, busy_timeout)
        try:
            return sa.create_engine(parsed, pool_pre_ping=True, connect_args=connect_args), ()
        except (ImportError, SQLAlchemyError) as exc:
            raise StoreError(f"cannot use database {display_url(url)}: {_driver_message(exc)}") from None
    path = sqlite_path(url)
    parsed = _sqlite_uri_options(parsed)
    read_only = parsed.query.get("mode") == "ro" or parsed.query.get("immutable") == "1"
    created: list[Path] = []
    if path is None:
        engine = sa.create_engine(parsed, poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        try:
            there = path.exists()
        except PermissionError:
            # A folder on the way this user may not enter (Path.exists
            # raises for that, not only for a missing file).
            raise StoreError(f"database {path}: permission denied (a folder of its path cannot be entered by this user)") from None
        if not there:
            created = _create_sqlite_file(path, create and not read_only, create_dirs)
        elif path.is_dir():
            # SQLite said only "unable to open database file".
            raise StoreError(f"database {path}: it is a folder; name a database file (e.g. {path / 'spamfilter.db'})")
        elif not create and _empty_sqlite_file(path):
            # A command that only reads would have written the schema into it.
            raise NoSuchDatabase(f"no spamfilter database in {path} (an empty file)")
        elif not read_only:
            _sidecars_follow(path)
        engine = sa.create_engine(parsed, connect_args={"timeout": busy_timeout})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        # Let SQLAlchemy's begin event (below) issue BEGIN itself, so writes
        # can take the lock up front with BEGIN IMMEDIATE.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        if path is not None and not read_only and not _foreign_sqlite(cursor):
            _switch_to_wal(dbapi_conn, busy_timeout)
            # WAL + NORMAL: a commit is atomic and survives a killed process;
            # only a power cut can lose the last commits, never half of one.
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine, tuple(created)


#: The options of a SQLite URL (``sqlite:///mail.db?mode=ro``): SQLite's
#: own URI parameters, which the driver reads only from a URI filename.
_SQLITE_URI_OPTIONS = frozenset({"mode", "immutable", "nolock", "cache", "vfs"})


def _sqlite_uri_options(parsed: sa.engine.URL) -> sa.engine.URL:
    """``parsed`` with its SQLite options passed to SQLite: ``?mode=ro`` and
    the other URI parameters need ``uri=true`` beside them, without which
    the driver ignores them (a store asked for read-only would be written).
    An option SQLite does not know is refused, not ignored."""
    options = {key for key in parsed.query if key != "uri"}
    unknown = sorted(options - _SQLITE_URI_OPTIONS)
    if unknown:
        known = ", ".join(sorted(_SQLITE_URI_OPTIONS))
        raise StoreError(f"SQLite URL option {unknown[0]!r} is not one SQLite reads ({known})")
    if not options:
        return parsed
    if parsed.database in (None, "", ":memory:"):
        raise StoreError(f"SQLite URL option {sorted(options)[0]!r} needs a database file")
    # SQLite reads the options only from a URI filename ("file:" and the
    # path, percent-encoded where a URI needs it).
    return parsed.set(database="file:" + quote(parsed.database)).update_query_dict({"uri": "true"})


#: PostgreSQL SQLSTATEs of a transaction that lost a race and can simply be
#: run again: deadlock detected, serialization failure, unique violation
#: (two processes inserting the same new message into the ledger).
_RETRYABLE_SQLSTATES = {"40P01", "40001", "23505"}


def _driver_message(exc: BaseException) -> str:
    """The first line of a driver's error: PostgreSQL's DETAIL, HINT and
    LINE (with the SQL) and SQLAlchemy's statement, parameters and link
    follow on lines of their own, and an error is one line on stderr."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def _store_error(exc: DBAPIError, what: str) -> StoreError:
    text = _driver_message(exc)
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if sqlstate in _RETRYABLE_SQLSTATES:
        return StoreConflict(f"{what}: lost a race with another process ({text})")
    if exc.connection_invalidated:
        # SQLAlchemy saw a disconnect and dropped the connection from its
        # pool: the next attempt gets a new one.
        return StoreDisconnected(f"{what}: the connection to the server was lost ({text})")
    if sqlstate == "3D000" or (sqlstate is None and _names_missing_database(text)):
        # As a missing SQLite file is (exit 66): the server has no such database.
        return NoSuchDatabase(f"{what}: no such database ({text})")
    if sqlstate == "55P03":
        return StoreBusyError(f"{what}: a lock stayed held by another process past the busy timeout ({text})")
    if isinstance(exc, OperationalError) and "locked" in text:
        return StoreBusyError(f"{what}: the database stayed locked by another process ({text})")
    if "database disk image is malformed" in text:
        # SQLITE_CORRUPT where even the check cannot start (a truncated
        # file: its schema cannot be read).
        return StoreError(
            f"{what}: the database file is damaged ({text}); where SQLite can still read its schema, `spamfilter db check` lists the problems, else restore it from a backup"
        )
    if "attempt to write a readonly database" in text and re.search(r"[?&]mode=ro(?:&|$)", what):
        # Opened read-only on purpose ("?mode=ro" in its URL, which `what`
        # names): the file's permissions are not the matter.
        return StoreError(f"{what}: {text} (the URL opens it read-only, mode=ro: this command writes)")
    if "attempt to write a readonly database" in text:
        # Also when only reading: in WAL mode SQLite makes the -shm file
        # beside the database to read it, and a stats of a database in a
        # folder the user cannot write said only this.
        return StoreError(
            f"{what}: {text} (this user must be able to write the file, its -wal and -shm files and the folder that holds them: SQLite writes the -shm even to read)"
        )
    return StoreError(f"{what}: {text}")


def _connect_error(exc: DBAPIError, what: str, dialect: str, reached: bool) -> StoreError:
    """The error for a connection that could not be made. One the server
    never answered (refused, timed out, no such host: no SQLSTATE and no
    FATAL line of the server's): if this process had reached the server
    before, it went away (a restart) and the transaction runs again
    (``StoreDisconnected``); if not, it is out of reach
    (``StoreUnreachable``, exit 75). Anything else (a wrong password, no
    such database, a SQLite file) as ``_store_error``."""
    text = _driver_message(exc)
    # libpq reports the server's own refusals (no such role or database, a
    # wrong password) at connect time as "FATAL:" lines, without a SQLSTATE.
    answered = getattr(exc.orig, "sqlstate", None) is not None or "FATAL:" in text
    if dialect != "sqlite" and not answered and _CLIENT_REFUSAL_RE.search(text):
        # The driver's own refusal of the URL (sslmode=bogus, port 99999,
        # an unknown option): no server was asked, and trying again later
        # (75, which an MTA queues mail for, for days) cannot help.
        return StoreError(f"{what}: the database URL is not one the driver takes ({text})")
    if dialect != "sqlite" and not answered:
        if reached:
            return StoreDisconnected(f"{what}: the server cannot be reached ({text})")
        return StoreUnreachable(f"{what}: the server cannot be reached ({text})")
    return _store_error(exc, what)


#: How libpq words a connection string it refuses before connecting.
_CLIENT_REFUSAL_RE = re.compile(r"\binvalid (?:[\w-]+ )*(?:value|number|option)\b")


def _names_missing_database(text: str) -> bool:
    return 'database "' in text and "does not exist" in text


def _postgresql_options(parsed: sa.engine.URL, busy_timeout: float) -> tuple[sa.engine.URL, str]:
    """The URL without its ``options``, and the options to connect with:
    the busy timeout as ``lock_timeout`` (lock waits then end in 55P03),
    first among the URL's own options (or ``$PGOPTIONS``, which an explicit
    value would replace), so a lock_timeout there wins."""
    given = parsed.query.get("options", os.environ.get("PGOPTIONS", ""))
    given = " ".join(given) if isinstance(given, tuple) else given
    # At least 1 ms: lock_timeout = 0 would mean wait for ever.
    return parsed.difference_update_query(["options"]), f"-c lock_timeout={max(1, int(busy_timeout * 1000))} {given}".strip()


def display_url(url: str) -> str:
    """``url`` with any password hidden, for messages and logs (as given
    when it is no URL: opening it says so)."""
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError):
        # Not parsed (a bad port): hide what looks like a password all the same.
        return re.sub(r"(password=)[^&]*", r"\1***", re.sub(r"(://[^:/]*:)[^@]*@", r"\1***@", url))
    if "password" in parsed.query:  # libpq takes ?password= too
        parsed = parsed.update_query_dict({"password": "***"})
    # The query's values come out URL-encoded: *** as %2A%2A%2A.
    return parsed.render_as_string(hide_password=True).replace("password=%2A%2A%2A", "password=***")
