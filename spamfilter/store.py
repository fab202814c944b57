"""The token store: the only module that speaks SQL.

Tables (created and changed only by the Alembic revisions in ``migrations/``):

    tokens         token -> ham_docs, spam_docs, ham_terms, spam_terms
                   (messages containing it, occurrences; rows with both
                   message counts 0 are deleted, so the row count is V)
    class_totals   label -> messages, terms, binary_terms
    doc_histogram  (label, doc_count) -> tokens: how many vocabulary tokens
                   occur in exactly doc_count messages of the class; it makes
                   the Bernoulli absent-token sum exact without a full scan
    messages       digest -> label, trained_at, token_counts (the message's
                   own token counts, packed by pack_token_counts) so forgetting or relabelling
                   subtracts exactly what training added, whatever the
                   tokenizer settings are by then
    imap_folders   (account, folder) -> uidvalidity (the account column is the
                   owner's: see StoreTransaction._imap_key)
    imap_uids      (account, folder, uid) -> digest, keywords: the UIDs already
                   handled, and which junk keywords they had when last looked at
    imap_messages  (account, digest) -> label, origin, folder, pending: what
                   ``spamfilter imap run`` decided and where the message
                   belongs; ``pending`` marks a move not yet confirmed

Every write goes through ``Store.begin()``: one transaction, taken with
``BEGIN IMMEDIATE`` on SQLite so two writers queue on the busy timeout instead
of failing on a lock upgrade. Counts change only by ``count = count + delta``
upserts whose RETURNING clause gives the new values; the histogram delta is
derived from those, so it stays right even when other processes write the
same tokens concurrently.

Pruning (``prune_tokens``) and importing counts (``spamfilter db import``)
change the counts without a ledger entry. What the ledger no longer accounts
for is kept in ``untracked_totals`` (owner, label -> messages, terms,
binary_terms): per class what the owner's totals differ by from the sums
over the ledger (imported counts add, pruned counts subtract). ``class_totals =
ledger sums + untracked`` then always holds; while ``untracked`` is not zero,
token counts may differ from the ledger's, and untraining a message stops at
zero for tokens that are gone (``add_counts_clipped``).
"""

from __future__ import annotations

import os
import re
import stat
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

from spamfilter.counts import HAM, SPAM, ClassCounts, IntArray, TokenCounts, Totals
from spamfilter.errors import NoSuchDatabase, SchemaOutOfDate, StoreBusyError, StoreConflict, StoreError


#: The Alembic head this code reads and writes; tests check it is the
#: migrations' head. Kept as a constant so opening a store needs no Alembic import.
SCHEMA_REVISION = "0004"

metadata = sa.MetaData()

tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("owner", sa.Text(), primary_key=True),
    sa.Column("token", sa.Text(), primary_key=True),
    sa.Column("ham_docs", sa.BigInteger(), nullable=False, server_default="0"),
    sa.Column("spam_docs", sa.BigInteger(), nullable=False, server_default="0"),
    sa.Column("ham_terms", sa.BigInteger(), nullable=False, server_default="0"),
    sa.Column("spam_terms", sa.BigInteger(), nullable=False, server_default="0"),
    sa.Column("last_seen", sa.Date(), nullable=True),
    sqlite_with_rowid=False,
)

def _class_total_columns() -> list[sa.Column[object]]:
    """(owner, label) -> messages, terms, binary_terms: the class totals and
    the untracked totals have the same shape."""
    return [
        sa.Column("owner", sa.Text(), primary_key=True),
        sa.Column("label", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("messages", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("terms", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("binary_terms", sa.BigInteger(), nullable=False, server_default="0"),
    ]


class_totals = sa.Table("class_totals", metadata, *_class_total_columns())

doc_histogram = sa.Table(
    "doc_histogram",
    metadata,
    sa.Column("owner", sa.Text(), primary_key=True),
    sa.Column("label", sa.SmallInteger(), primary_key=True, autoincrement=False),
    sa.Column("doc_count", sa.BigInteger(), primary_key=True, autoincrement=False),
    sa.Column("tokens", sa.BigInteger(), nullable=False),
)

messages = sa.Table(
    "messages",
    metadata,
    sa.Column("owner", sa.Text(), primary_key=True),
    sa.Column("digest", sa.String(32), primary_key=True),
    sa.Column("label", sa.SmallInteger(), nullable=False),
    sa.Column("trained_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("token_counts", sa.LargeBinary(), nullable=False),
)

untracked_totals = sa.Table("untracked_totals", metadata, *_class_total_columns())

model_versions = sa.Table(
    "model_versions",
    metadata,
    sa.Column("owner", sa.Text(), primary_key=True),
    sa.Column("version", sa.BigInteger(), nullable=False),
)

imap_folders = sa.Table(
    "imap_folders",
    metadata,
    sa.Column("account", sa.Text(), primary_key=True),
    sa.Column("folder", sa.Text(), primary_key=True),
    sa.Column("uidvalidity", sa.BigInteger(), nullable=False),
)

imap_uids = sa.Table(
    "imap_uids",
    metadata,
    sa.Column("account", sa.Text(), primary_key=True),
    sa.Column("folder", sa.Text(), primary_key=True),
    sa.Column("uid", sa.BigInteger(), primary_key=True, autoincrement=False),
    sa.Column("digest", sa.String(32), nullable=False),
    sa.Column("keywords", sa.SmallInteger(), nullable=True),
)

imap_messages = sa.Table(
    "imap_messages",
    metadata,
    sa.Column("account", sa.Text(), primary_key=True),
    sa.Column("digest", sa.String(32), primary_key=True),
    sa.Column("label", sa.SmallInteger(), nullable=False),
    sa.Column("origin", sa.String(8), nullable=False),
    sa.Column("folder", sa.Text(), nullable=False),
    sa.Column("pending", sa.Boolean(), nullable=False),
    sa.Column("log_odds", sa.Float(), nullable=True),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("source", sa.Text(), nullable=True),
)

COUNT_COLUMNS = ("ham_docs", "spam_docs", "ham_terms", "spam_terms")

# Rows per multi-row statement: 5 bound values a token keeps far below
# SQLite's 32,766-variable limit and PostgreSQL's 65,535.
_CHUNK = 2000


@dataclass(frozen=True, slots=True)
class TrainedMessage:
    """One row of the trained-message ledger."""

    digest: str
    label: int
    trained_at: datetime
    token_counts: dict[str, int]


@dataclass(frozen=True, slots=True)
class ImapRecord:
    """What ``imap run`` knows of one message of an account.

    label: 0 ham, 1 spam, 2 unsure (the filter's verdict, or the user's word).
    origin: "filter" (classified), "train" (from a training folder) or
        "user" (learnt from the user moving or flagging it).
    folder: where the message belongs; pending: a move there from the
        folder ``source`` was started and not yet seen to be done.
    """

    digest: str
    label: int
    origin: str
    folder: str
    pending: bool = False
    log_odds: float | None = None
    source: str = ""


# A token is free text to the store: escape backslash, newline and NUL so
# one line holds one token (in the first ledger format tabs needed no escape,
# as the count followed the last tab on its line).
#
# The counts file of ``db export`` (maintenance.escape_token) escapes a
# different set on purpose. This one is part of what databases already hold,
# so it cannot change, and escapes NUL, the ledger's own separator; it is on
# the training path, so a message is escaped only when a token needs it; and
# it reads any unknown escape as the character itself. The counts file is
# text a person may edit: tab separates its fields, carriage return and a
# leading "#" would be lost to text tools and comments, and an unknown
# escape there is a mistake to report.
_ESCAPE_SEQUENCE = re.compile(r"\\(.)", re.DOTALL)


def _escape(token: str) -> str:
    return token.replace("\\", "\\\\").replace("\n", "\\n").replace("\0", "\\0")


_UNESCAPED: Final = {"n": "\n", "0": "\0"}


def _unescape(token: str) -> str:
    return _ESCAPE_SEQUENCE.sub(lambda m: _UNESCAPED.get(m.group(1), m.group(1)), token)


# Ledger entries. The first format (zlib level 6 of "token<TAB>count" lines)
# cost 240 us a message, 8% of training; the second keeps the tokens and the
# counts apart, writes only the counts that are not 1 (most tokens occur once
# in a message), and compresses at level 1: 110 us and a smaller blob on
# spamassassin mail (2,590 against 2,609 bytes a message). Entries of the
# first format stay readable (a zlib stream starts with 0x78), so databases
# written before need no rewrite and forget them exactly.
_LEDGER_V2: Final = b"\x02"


def pack_token_counts(counts: dict[str, int]) -> bytes:
    """Encode a message's token counts for the ledger: ``\x02`` then, zlib
    compressed, the tokens one a line (backslash and newline escaped: the
    tokenizer emits neither, but the ledger must give back whatever it was
    given), a NUL, and the comma-separated counts unless all are 1 (a
    message without tokens is a lone NUL)."""
    text = "\n".join(counts)
    if "\\" in text or "\0" in text or text.count("\n") != max(len(counts) - 1, 0):
        text = "\n".join(_escape(token) for token in counts)
    body = text.encode("utf-8") if counts else b"\0"
    if any(n != 1 for n in counts.values()):
        body += b"\0" + ",".join(map(str, counts.values())).encode("ascii")
    return _LEDGER_V2 + zlib.compress(body, 1)


def unpack_token_counts(blob: bytes) -> dict[str, int]:
    """Inverse of ``pack_token_counts``; also reads the first format."""
    if not blob.startswith(_LEDGER_V2):
        return _unpack_v1(blob)
    body = zlib.decompress(blob[1:])
    if body == b"\0":
        return {}
    raw_names, _, numbers = body.partition(b"\0")
    text = raw_names.decode("utf-8")
    names = text.split("\n")
    if "\\" in text:
        names = [_unescape(name) for name in names]
    if numbers:
        return dict(zip(names, map(int, numbers.split(b","))))
    return dict.fromkeys(names, 1)


def _unpack_v1(blob: bytes) -> dict[str, int]:
    text = zlib.decompress(blob).decode("utf-8")
    result: dict[str, int] = {}
    if text:
        for line in text.split("\n"):
            token, _, n = line.rpartition("\t")
            result[_unescape(token) if "\\" in token else token] = int(n)
    return result


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
    left as it is (SQLite then reports the error)."""
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


def _make_engine(url: str, busy_timeout: float, create: bool = True, create_dirs: bool = True) -> Engine:
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError:
        raise StoreError(f"not a database URL: {url!r}") from None
    if parsed.get_backend_name() != "sqlite":
        connect_args: dict[str, object] = {}
        if parsed.get_backend_name() == "postgresql":
            # The busy timeout bounds lock waits here too (then 55P03).
            connect_args["options"] = f"-c lock_timeout={int(busy_timeout * 1000)}"
        try:
            return sa.create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
        except (ImportError, SQLAlchemyError) as exc:
            raise StoreError(f"cannot use database {parsed.render_as_string(hide_password=True)}: {_driver_message(exc)}") from None
    path = sqlite_path(url)
    if path is None:
        engine = sa.create_engine(parsed, poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        if not path.exists():
            if not create:
                raise NoSuchDatabase(f"no such database: {path}")
            if not create_dirs and not path.parent.is_dir():
                raise StoreError(
                    f"cannot create database {path}: folder {path.parent} does not exist (--create-dirs creates it)"
                )
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                # The counts say a lot about someone's mail: owner-only file.
                fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
                os.close(fd)
            except OSError as exc:
                raise StoreError(f"cannot create database {path}: {exc.strerror}") from None
        else:
            _sidecars_follow(path)
        engine = sa.create_engine(parsed, connect_args={"timeout": busy_timeout})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        # Let SQLAlchemy's begin event (below) issue BEGIN itself, so writes
        # can take the lock up front with BEGIN IMMEDIATE.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        if path is not None:
            cursor.execute("PRAGMA journal_mode = WAL")
            # WAL + NORMAL: a commit is atomic and survives a killed process;
            # only a power cut can lose the last commits, never half of one.
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


#: The PostgreSQL advisory lock key that serialises schema upgrades (any
#: constant no other program on the server is likely to use: "spamfilt" in ASCII).
_UPGRADE_LOCK = 0x7370616D66696C74

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
    if sqlstate == "55P03":
        return StoreBusyError(f"{what}: a lock stayed held by another process past the busy timeout ({text})")
    if isinstance(exc, OperationalError) and "locked" in text:
        return StoreBusyError(f"{what}: the database stayed locked by another process ({text})")
    return StoreError(f"{what}: {text}")


class _CountSQL:
    """The count statements of one backend, on its DB-API cursor.

    Both backends change counts the same way: the batch's deltas go to the
    server in one round trip and are added there with an atomic
    ``count = count + delta`` upsert, whose RETURNING clause gives the new
    counts (the histogram is kept in step from those, and they stay right
    when other processes write the same tokens at once). Nothing is read
    before writing. The statements run on the raw driver cursor of the
    transaction's own connection: SQLAlchemy's per-row parameter handling
    cost more than the databases themselves (7.5 ms of 22 ms per online
    message, profiled).
    """

    def rows(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        self.cursor.execute(sql, params)
        return list(self.cursor.fetchall())

    def select_tokens(self, owner: str, chunk: list[str]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def upsert_tokens(self, owner: str, today: date, token_list: list[str], columns: list[list[int]]) -> list[tuple[Any, ...]]:
        """Add the four count columns (ham_docs, spam_docs, ham_terms,
        spam_terms; one value a token) to the tokens' rows; the new rows."""
        raise NotImplementedError

    def delete_dead(self, owner: str, token_list: list[str]) -> None:
        raise NotImplementedError

    def add_histogram(self, owner: str, rows: list[tuple[int, int, int]]) -> None:
        raise NotImplementedError

    def add_totals(self, owner: str, label: int, values: tuple[int, int, int]) -> None:
        self.cursor.execute(self.ADD_TOTALS, (owner, label, *values))

    def bump_version(self, owner: str) -> int:
        return int(self.rows(self.BUMP_VERSION, (owner,))[0][0])

    def select_totals(self, owner: str) -> list[tuple[Any, ...]]:
        """(label, messages, terms, binary_terms) rows."""
        return self.rows(self.select_totals_sql, (owner,))

    def select_histogram(self, owner: str) -> list[tuple[Any, ...]]:
        """(label, doc_count, tokens) rows, in that order."""
        return self.rows(self.select_histogram_sql, (owner,))

    # The histogram has a row per distinct message count (hundreds): read
    # with one fetchall, not row by row through SQLAlchemy (99,000 fetchone
    # calls in an online run of 600 messages).
    SELECT_TOTALS = "SELECT label, messages, terms, binary_terms FROM class_totals WHERE owner = {p}"
    SELECT_HISTOGRAM = "SELECT label, doc_count, tokens FROM doc_histogram WHERE owner = {p} ORDER BY label, doc_count"

    ADD_TOTALS = ""
    BUMP_VERSION = ""

    #: The driver's parameter mark.
    PARAM = ""

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor
        self.select_totals_sql = self.SELECT_TOTALS.format(p=self.PARAM)
        self.select_histogram_sql = self.SELECT_HISTOGRAM.format(p=self.PARAM)


class _SqliteCountSQL(_CountSQL):
    """SQLite: the deltas are put in a per-connection temporary table (one
    ``executemany``), then added to ``tokens`` by one INSERT ... SELECT
    upsert. The transaction holds the write lock (BEGIN IMMEDIATE)."""

    PARAM = "?"
    ADD_TOTALS = (
        "INSERT INTO class_totals (owner, label, messages, terms, binary_terms) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (owner, label) DO UPDATE SET messages = messages + excluded.messages, "
        "terms = terms + excluded.terms, binary_terms = binary_terms + excluded.binary_terms"
    )
    BUMP_VERSION = (
        "INSERT INTO model_versions (owner, version) VALUES (?, 1) "
        "ON CONFLICT (owner) DO UPDATE SET version = version + 1 RETURNING version"
    )

    def select_tokens(self, owner: str, chunk: list[str]) -> list[tuple[Any, ...]]:
        marks = ",".join("?" * len(chunk))
        sql = f"SELECT token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens WHERE owner = ? AND token IN ({marks})"
        return self.rows(sql, [owner, *chunk])

    def _load_delta(self, token_list: list[str], columns: list[list[int]]) -> None:
        c = self.cursor
        c.execute(
            "CREATE TEMP TABLE IF NOT EXISTS count_delta "
            "(token TEXT PRIMARY KEY, hd INTEGER, sd INTEGER, ht INTEGER, st INTEGER) WITHOUT ROWID"
        )
        c.execute("DELETE FROM temp.count_delta")
        c.executemany("INSERT INTO temp.count_delta VALUES (?, ?, ?, ?, ?)", zip(token_list, *columns))

    def upsert_tokens(self, owner: str, today: date, token_list: list[str], columns: list[list[int]]) -> list[tuple[Any, ...]]:
        self._load_delta(token_list, columns)
        # "WHERE true" tells SQLite's parser the ON CONFLICT belongs to the upsert.
        return self.rows(
            "INSERT INTO tokens (owner, token, ham_docs, spam_docs, ham_terms, spam_terms, last_seen) "
            "SELECT ?, token, hd, sd, ht, st, ? FROM temp.count_delta WHERE true "
            "ON CONFLICT (owner, token) DO UPDATE SET ham_docs = ham_docs + excluded.ham_docs, "
            "spam_docs = spam_docs + excluded.spam_docs, ham_terms = ham_terms + excluded.ham_terms, "
            "spam_terms = spam_terms + excluded.spam_terms, last_seen = excluded.last_seen "
            "RETURNING token, ham_docs, spam_docs, ham_terms, spam_terms",
            (owner, today.isoformat()),
        )

    def delete_dead(self, owner: str, token_list: list[str]) -> None:
        # token_list is the batch just upserted, still in temp.count_delta.
        self.cursor.execute(
            "DELETE FROM tokens WHERE owner = ? AND ham_docs = 0 AND spam_docs = 0 "
            "AND token IN (SELECT token FROM temp.count_delta)",
            (owner,),
        )

    def add_histogram(self, owner: str, rows: list[tuple[int, int, int]]) -> None:
        self.cursor.executemany(
            "INSERT INTO doc_histogram (owner, label, doc_count, tokens) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (owner, label, doc_count) DO UPDATE SET tokens = tokens + excluded.tokens",
            [(owner, *row) for row in rows],
        )
        self.cursor.execute("DELETE FROM doc_histogram WHERE owner = ? AND tokens = 0", (owner,))


class _PgCountSQL(_CountSQL):
    """PostgreSQL: the deltas travel as five arrays in one statement
    (``unnest`` keeps their order; ten times faster than a multi-row VALUES
    with seven bound values a token), in one token order for every writer,
    so two transactions upserting overlapping tokens queue on the row locks
    instead of deadlocking."""

    PARAM = "%s"
    ADD_TOTALS = (
        "INSERT INTO class_totals (owner, label, messages, terms, binary_terms) VALUES (%s, %s, %s, %s, %s) "
        "ON CONFLICT (owner, label) DO UPDATE SET messages = class_totals.messages + excluded.messages, "
        "terms = class_totals.terms + excluded.terms, binary_terms = class_totals.binary_terms + excluded.binary_terms"
    )
    BUMP_VERSION = (
        "INSERT INTO model_versions AS v (owner, version) VALUES (%s, 1) "
        "ON CONFLICT (owner) DO UPDATE SET version = v.version + 1 RETURNING v.version"
    )

    def select_tokens(self, owner: str, chunk: list[str]) -> list[tuple[Any, ...]]:
        return self.rows(
            "SELECT token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens WHERE owner = %s AND token = ANY(%s::text[])",
            (owner, chunk),
        )

    def upsert_tokens(self, owner: str, today: date, token_list: list[str], columns: list[list[int]]) -> list[tuple[Any, ...]]:
        order = sorted(range(len(token_list)), key=token_list.__getitem__)
        columns = [[column[i] for i in order] for column in columns]
        return self.rows(
            "INSERT INTO tokens AS t (owner, token, ham_docs, spam_docs, ham_terms, spam_terms, last_seen) "
            "SELECT %s, u.token, u.hd, u.sd, u.ht, u.st, %s "
            "FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[]) "
            "WITH ORDINALITY AS u(token, hd, sd, ht, st, n) ORDER BY u.n "
            "ON CONFLICT (owner, token) DO UPDATE SET ham_docs = t.ham_docs + excluded.ham_docs, "
            "spam_docs = t.spam_docs + excluded.spam_docs, ham_terms = t.ham_terms + excluded.ham_terms, "
            "spam_terms = t.spam_terms + excluded.spam_terms, last_seen = excluded.last_seen "
            "RETURNING t.token, t.ham_docs, t.spam_docs, t.ham_terms, t.spam_terms",
            (owner, today, [token_list[i] for i in order], *columns),
        )

    def delete_dead(self, owner: str, token_list: list[str]) -> None:
        self.cursor.execute(
            "DELETE FROM tokens WHERE owner = %s AND ham_docs = 0 AND spam_docs = 0 AND token = ANY(%s::text[])",
            (owner, token_list),
        )

    def add_histogram(self, owner: str, rows: list[tuple[int, int, int]]) -> None:
        labels, ks, ns = ([row[i] for row in rows] for i in range(3))
        self.cursor.execute(
            "INSERT INTO doc_histogram AS h (owner, label, doc_count, tokens) "
            "SELECT %s, u.label, u.k, u.n FROM unnest(%s::smallint[], %s::bigint[], %s::bigint[]) AS u(label, k, n) "
            "ON CONFLICT (owner, label, doc_count) DO UPDATE SET tokens = h.tokens + excluded.tokens",
            (owner, labels, ks, ns),
        )
        self.cursor.execute("DELETE FROM doc_histogram WHERE owner = %s AND tokens = 0", (owner,))


@dataclass(frozen=True, slots=True)
class CountsWritten:
    """What ``add_counts`` left in the store: the tokens' new counts (2, m),
    in the order given (a token now in no message has zeros and is gone from
    the table), the model's new version, and what it added to the class
    totals and to the histogram ((label, k) -> tokens), so a copy of the
    totals can follow (``Totals.changed``)."""

    token_list: list[str]
    counts: TokenCounts
    version: int
    classes: ClassCounts
    histogram: dict[tuple[int, int], int]


class _Statements:
    """Every statement the store runs, built once per dialect.

    Building a SQLAlchemy construct costs more than running it on SQLite;
    with constant statements (IN lists as expanding parameters) each one is
    compiled once and then served from the engine's compiled cache, which
    took online classify-then-train from 64 to well over 100 messages/s.
    """

    def __init__(self, dialect: str) -> None:
        insert: Any = sqlite.insert
        if dialect == "postgresql":
            # Imported only for PostgreSQL: 18 ms of every SQLite start.
            from sqlalchemy.dialects import postgresql

            insert = postgresql.insert
        keys: sa.BindParameter[list[str]] = sa.bindparam("keys", expanding=True)
        own: sa.BindParameter[str] = sa.bindparam("own")
        self.class_totals = sa.select(
            class_totals.c.label, class_totals.c.messages, class_totals.c.terms, class_totals.c.binary_terms
        ).where(class_totals.c.owner == own)
        self.histogram = (
            sa.select(doc_histogram.c.label, doc_histogram.c.doc_count, doc_histogram.c.tokens)
            .where(doc_histogram.c.owner == own)
            .order_by(doc_histogram.c.label, doc_histogram.c.doc_count)
        )
        self.versions = sa.select(model_versions.c.owner, model_versions.c.version).where(model_versions.c.owner.in_(keys))
        self.labels = sa.select(messages.c.digest, messages.c.label).where((messages.c.owner == own) & messages.c.digest.in_(keys))
        self.take_ledger = (
            sa.delete(messages)
            .where((messages.c.owner == own) & messages.c.digest.in_(keys))
            .returning(messages.c.digest, messages.c.label, messages.c.trained_at, messages.c.token_counts)
        )
        self.record = sa.insert(messages)
        where_folder = (imap_uids.c.account == sa.bindparam("acct")) & (imap_uids.c.folder == sa.bindparam("fold"))
        self.imap_validity = sa.select(imap_folders.c.uidvalidity).where(
            (imap_folders.c.account == sa.bindparam("acct")) & (imap_folders.c.folder == sa.bindparam("fold"))
        )
        folder_row = insert(imap_folders)
        self.set_imap_validity = folder_row.on_conflict_do_update(
            index_elements=[imap_folders.c.account, imap_folders.c.folder],
            set_={"uidvalidity": folder_row.excluded.uidvalidity},
        )
        self.imap_uids = sa.select(imap_uids.c.uid, imap_uids.c.digest, imap_uids.c.keywords).where(where_folder)
        self.set_imap_keywords = (
            sa.update(imap_uids)
            .where(where_folder & (imap_uids.c.uid == sa.bindparam("u")))
            .values(keywords=sa.bindparam("k"))
        )
        self.clear_imap_uids = sa.delete(imap_uids).where(where_folder)
        self.delete_imap_uids = sa.delete(imap_uids).where(where_folder & imap_uids.c.uid.in_(sa.bindparam("keys", expanding=True)))
        uid_row = insert(imap_uids)
        self.add_imap_uids = uid_row.on_conflict_do_update(
            index_elements=[imap_uids.c.account, imap_uids.c.folder, imap_uids.c.uid],
            set_={"digest": uid_row.excluded.digest, "keywords": None},
        )
        self.imap_records = sa.select(imap_messages).where(
            (imap_messages.c.account == sa.bindparam("acct")) & imap_messages.c.digest.in_(keys)
        )
        record_row = insert(imap_messages)
        self.put_imap_records = record_row.on_conflict_do_update(
            index_elements=[imap_messages.c.account, imap_messages.c.digest],
            set_={c: record_row.excluded[c] for c in ("label", "origin", "folder", "pending", "log_odds", "updated_at", "source")},
        )
        self.imap_pending = sa.select(imap_messages).where(
            (imap_messages.c.account == sa.bindparam("acct"))
            & imap_messages.c.pending
            & (imap_messages.c.source == sa.bindparam("src"))
        )
        totals_row = insert(class_totals)
        self.add_totals = totals_row.on_conflict_do_update(
            index_elements=[class_totals.c.owner, class_totals.c.label],
            set_={name: class_totals.c[name] + totals_row.excluded[name] for name in ("messages", "terms", "binary_terms")},
        )
        untracked_row = insert(untracked_totals)
        self.add_untracked = untracked_row.on_conflict_do_update(
            index_elements=[untracked_totals.c.owner, untracked_totals.c.label],
            set_={name: untracked_totals.c[name] + untracked_row.excluded[name] for name in ("messages", "terms", "binary_terms")},
        )


class Store:
    """A token store on one database. Open with ``Store.open(url)``."""

    def __init__(self, engine: Engine, url: str, owner: str = "") -> None:
        self.engine = engine
        self.url = url
        self.owner = owner
        dbapi = getattr(engine.dialect, "dbapi", None)
        self._driver_error: type[Exception] = getattr(dbapi, "Error", DBAPIError)
        self.statements = _Statements(engine.dialect.name)

    @classmethod
    def open(
        cls,
        url: str,
        *,
        busy_timeout: float = 30.0,
        upgrade_new: bool = True,
        check: bool = True,
        owner: str = "",
        create: bool = True,
        create_dirs: bool = True,
    ) -> Store:
        """Connect, create the schema on a new (empty) database, check the revision.

        Raises ``SchemaOutOfDate`` for a database at an older revision, and
        ``StoreError`` when it cannot be reached or was written by a newer
        spamfilter. ``check=False`` skips both (for ``upgrade`` itself).
        A missing SQLite file is created (mode 0600) only with ``create``,
        else ``NoSuchDatabase``; its missing parent folders only with
        ``create_dirs``, else ``StoreError``.
        """
        engine = _make_engine(url, busy_timeout, create, create_dirs)
        store = cls(engine, url, owner)
        if not check:
            return store
        try:
            revision = store.schema_revision()
            if revision is None:
                # Read again after the tables: another process may have
                # created the schema in between.
                if store._has_tables() and store.schema_revision() is None:
                    raise StoreError(f"{store.display_url}: has tables but no spamfilter schema revision")
                if not upgrade_new:
                    raise SchemaOutOfDate(f"{store.display_url}: empty database; run `spamfilter db upgrade`")
                store.upgrade()
            elif revision != SCHEMA_REVISION:
                if revision in store._known_revisions():
                    raise SchemaOutOfDate(
                        f"{store.display_url}: schema revision {revision} is older than {SCHEMA_REVISION}; "
                        "run `spamfilter db upgrade`"
                    )
                raise StoreError(f"{store.display_url}: schema revision {revision} is unknown to this spamfilter (newer?)")
        except DBAPIError as exc:
            engine.dispose()
            raise _store_error(exc, f"cannot open {store.display_url}") from None
        except StoreError:
            engine.dispose()
            raise
        return store

    @property
    def display_url(self) -> str:
        """The URL with any password hidden."""
        return sa.engine.make_url(self.url).render_as_string(hide_password=True)

    def close(self) -> None:
        """Release the connections."""
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema -------------------------------------------------------------

    def _has_tables(self) -> bool:
        return bool(sa.inspect(self.engine).get_table_names())

    def schema_revision(self) -> str | None:
        """The database's Alembic revision, or None for a database without one."""
        with self.engine.connect() as conn:
            if not sa.inspect(conn).has_table("alembic_version"):
                return None
            row = conn.execute(sa.text("SELECT version_num FROM alembic_version")).first()
            return None if row is None else str(row[0])

    @staticmethod
    def _alembic_config() -> AlembicConfig:
        from importlib.resources import files

        from alembic.config import Config as AlembicConfig

        cfg = AlembicConfig()
        cfg.set_main_option("script_location", str(files("spamfilter.migrations")))
        return cfg

    def _known_revisions(self) -> set[str]:
        from alembic.script import ScriptDirectory

        script = ScriptDirectory.from_config(self._alembic_config())
        return {rev.revision for rev in script.walk_revisions()}

    def upgrade(self, revision: str = "head") -> None:
        """Apply the Alembic migrations up to ``revision`` in one transaction.

        Processes that find the same new (or old) database at once take
        turns: on SQLite the transaction holds the write lock from its
        ``BEGIN IMMEDIATE``, on PostgreSQL a transaction-level advisory lock,
        both taken before Alembic reads the revision. So the first creates
        the schema and the others, once they get the lock, find it at head
        and change nothing. Without that, eight processes opening one new
        database failed with "database is locked" (SQLite: a read
        transaction cannot become a writer while another writes) or a
        duplicate ``pg_type`` row (PostgreSQL: two CREATE TABLE at once).
        """
        from alembic import command

        cfg = self._alembic_config()
        path = sqlite_path(self.url)
        try:
            if path is not None and not self._has_tables():
                # The counts say a lot about someone's mail: owner-only file.
                _make_owner_only(path)
            with self.engine.connect() as conn:
                if self.engine.dialect.name == "sqlite":
                    conn = conn.execution_options(sqlite_begin="IMMEDIATE")
                with conn.begin():
                    if self.engine.dialect.name == "postgresql":
                        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _UPGRADE_LOCK})
                    cfg.attributes["connection"] = conn
                    command.upgrade(cfg, revision)
        except DBAPIError as exc:
            raise _store_error(exc, f"cannot upgrade {self.display_url}") from None

    # -- transactions -------------------------------------------------------

    @contextmanager
    def begin(self, *, write: bool = True) -> Iterator[StoreTransaction]:
        """One transaction: committed when the block ends, rolled back on error."""
        options = {"sqlite_begin": "IMMEDIATE"} if write and self.engine.dialect.name == "sqlite" else {}
        with self._transaction(options) as tx:
            yield tx

    @contextmanager
    def _transaction(self, options: dict[str, str]) -> Iterator[StoreTransaction]:
        try:
            with self.engine.connect() as conn:
                if options:
                    conn = conn.execution_options(**options)
                with conn.begin():
                    yield StoreTransaction(conn, self.statements, self.owner)
        except DBAPIError as exc:
            raise _store_error(exc, f"database {self.display_url}") from None
        except self._driver_error as exc:
            # Raised by the raw driver cursors of the hot paths.
            raise self._driver_failure(exc, f"database {self.display_url}") from None

    def _driver_failure(self, exc: Exception, what: str) -> StoreError:
        """The error for one the raw driver cursors raised (SQLAlchemy does not wrap those)."""
        wrapped = DBAPIError.instance(None, None, exc, self._driver_error)
        assert isinstance(wrapped, DBAPIError)
        return _store_error(wrapped, what)

    def totals(self) -> Totals:
        """Shortcut: the aggregates in a read transaction of their own."""
        with self.begin(write=False) as tx:
            return tx.totals()

    def size_bytes(self) -> int | None:
        """Bytes on disk of a SQLite file (with its WAL), else None."""
        path = sqlite_path(self.url)
        if path is None or not path.exists():
            return None
        wal = path.with_name(path.name + "-wal")
        return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)

    # -- maintenance ----------------------------------------------------------

    def checkpoint(self) -> bool:
        """Copy a SQLite WAL into the file and truncate it, so ``size_bytes``
        is the file's own size; False when a reader kept part of it (which
        then still counts). True at once on other databases."""
        if self.engine.dialect.name != "sqlite":
            return True
        try:
            with self.engine.connect() as conn:
                # The raw cursor of the autocommit connection: no BEGIN, as
                # a checkpoint inside a read transaction cannot truncate.
                dbapi = conn.connection.dbapi_connection
                assert dbapi is not None
                cursor = dbapi.cursor()
                busy = cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                cursor.close()
        except DBAPIError as exc:
            raise _store_error(exc, f"cannot checkpoint {self.display_url}") from None
        except self._driver_error as exc:
            raise self._driver_failure(exc, f"cannot checkpoint {self.display_url}") from None
        return int(busy) == 0

    @contextmanager
    def snapshot(self) -> Iterator[StoreTransaction]:
        """A read transaction that sees one state of the database from start
        to end (a SQLite WAL reader does; PostgreSQL needs REPEATABLE READ),
        for checks and exports that read several tables while others write."""
        options = {"isolation_level": "REPEATABLE READ"} if self.engine.dialect.name == "postgresql" else {}
        with self._transaction(options) as tx:
            yield tx

    def integrity_check(self) -> list[str] | None:
        """The problems SQLite's ``PRAGMA integrity_check`` finds in the file
        ([] when it is sound); None on other databases."""
        if self.engine.dialect.name != "sqlite":
            return None
        try:
            with self.engine.connect() as conn:
                rows = [str(row[0]) for row in conn.exec_driver_sql("PRAGMA integrity_check")]
        except DBAPIError as exc:
            raise _store_error(exc, f"cannot check {self.display_url}") from None
        return [] if rows == ["ok"] else rows

    def vacuum(self) -> None:
        """Give the space of deleted rows back and refresh the planner's statistics.

        SQLite: copy the WAL into the file, ``VACUUM`` (rewrites the file
        without its free pages), then checkpoint again and truncate the WAL,
        which VACUUM filled. PostgreSQL: ``VACUUM ANALYZE`` of the count
        tables; the space becomes reusable, the files rarely shrink. Both run
        outside a transaction, as they must.
        """
        try:
            with self.engine.connect() as conn:
                if self.engine.dialect.name == "sqlite":
                    # The sqlite3 connection is in autocommit mode (see
                    # _make_engine), and its cursor bypasses SQLAlchemy's
                    # autobegin, so no BEGIN precedes the VACUUM.
                    dbapi = conn.connection.dbapi_connection
                    assert dbapi is not None
                    cursor = dbapi.cursor()
                    for statement in ("PRAGMA wal_checkpoint(TRUNCATE)", "VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)"):
                        cursor.execute(statement).fetchall()
                    cursor.close()
                elif self.engine.dialect.name == "postgresql":
                    auto = conn.execution_options(isolation_level="AUTOCOMMIT")
                    auto.exec_driver_sql("VACUUM ANALYZE tokens, class_totals, doc_histogram, messages")
        except DBAPIError as exc:
            raise _store_error(exc, f"cannot vacuum {self.display_url}") from None


class StoreTransaction:
    """Reads and writes inside one open transaction (see ``Store.begin``)."""

    def __init__(self, conn: Connection, statements: _Statements, owner: str = "") -> None:
        self.conn = conn
        self.sql = statements
        #: Whose model the counts are: "" is the default (and shared) model.
        self.owner = owner
        self.today = datetime.now(timezone.utc).date()
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None
        backend: type[_CountSQL] = _PgCountSQL if conn.dialect.name == "postgresql" else _SqliteCountSQL
        self.counts_sql = backend(dbapi.cursor())

    # -- reads --------------------------------------------------------------

    def totals(self, owner: str | None = None) -> Totals:
        """Class totals, vocabulary size and the per-class count histograms
        (of this transaction's owner, or of ``owner``)."""
        own = self.owner if owner is None else owner
        classes = ClassCounts.zeros()
        for label, m, t, b in self.counts_sql.select_totals(own):
            classes.messages[label], classes.terms[label], classes.binary_terms[label] = m, t, b
        rows: list[list[tuple[int, int]]] = [[], []]
        for label, k, n in self.counts_sql.select_histogram(own):
            rows[label].append((k, n))
        hist = tuple(np.array(r, dtype=np.int64).reshape(-1, 2) for r in rows)
        vocabulary = int(hist[0][:, 1].sum())
        return Totals(classes, vocabulary, (hist[0], hist[1]))

    def versions(self, owners: Sequence[str]) -> tuple[int, ...]:
        """The model version of each owner: a number every transaction that
        changes the owner's counts increases by one (0 for a model never
        written). Equal versions mean equal counts, so an in-memory copy of
        the counts stays valid while the versions do not move."""
        found = {str(o): int(v) for o, v in self.conn.execute(self.sql.versions, {"keys": list(owners)})}
        return tuple(found.get(o, 0) for o in owners)

    def vocabulary_size(self, owners: Sequence[str]) -> int:
        """Distinct tokens over the models of ``owners`` together."""
        inner = sa.select(tokens.c.token).where(tokens.c.owner.in_(list(owners))).distinct().subquery()
        return int(self.conn.execute(sa.select(sa.func.count()).select_from(inner)).scalar_one())

    def token_counts(self, token_list: Sequence[str], owner: str | None = None) -> TokenCounts:
        """Counts of the given tokens, in that order, each (2, len(token_list));
        zeros for unknown tokens (of this transaction's owner, or of ``owner``)."""
        own = self.owner if owner is None else owner
        found: list[tuple[Any, ...]] = []
        for start in range(0, len(token_list), _CHUNK):
            found += self.counts_sql.select_tokens(own, list(token_list[start : start + _CHUNK]))
        return _counts_at(token_list, found)

    def trained_labels(self, digests: Sequence[str]) -> dict[str, int]:
        """Label of each digest already in the ledger (absent ones are left out)."""
        result: dict[str, int] = {}
        for start in range(0, len(digests), _CHUNK):
            chunk = list(digests[start : start + _CHUNK])
            result.update({d: int(lbl) for d, lbl in self.conn.execute(self.sql.labels, {"own": self.owner, "keys": chunk})})
        return result

    # -- writes -------------------------------------------------------------

    def record_messages(self, rows: Sequence[tuple[str, int, dict[str, int]]], when: datetime | None = None) -> None:
        """Add (digest, label, token_counts) rows to the ledger."""
        if not rows:
            return
        when = when or datetime.now(timezone.utc)
        values = [
            {"owner": self.owner, "digest": d, "label": lbl, "trained_at": when, "token_counts": pack_token_counts(c)}
            for d, lbl, c in rows
        ]
        self.conn.execute(self.sql.record, values)

    def take_messages(self, digests: Sequence[str]) -> list[TrainedMessage]:
        """Delete the ledger rows of ``digests`` and return what they held, in
        one statement per chunk (DELETE ... RETURNING): of two transactions
        taking the same message, only one gets it."""
        result: list[TrainedMessage] = []
        for start in range(0, len(digests), _CHUNK):
            chunk = list(digests[start : start + _CHUNK])
            for d, lbl, when, blob in self.conn.execute(self.sql.take_ledger, {"own": self.owner, "keys": chunk}):
                result.append(TrainedMessage(d, int(lbl), when, unpack_token_counts(blob)))
        return result

    def add_counts(self, token_list: Sequence[str], delta: TokenCounts, classes: ClassCounts) -> CountsWritten:
        """Add ``delta`` (2, len(token_list)) to the tokens' counts and
        ``classes`` to the class totals; returns the new counts.

        Negative deltas untrain. Keeps ``doc_histogram`` in step, deletes
        tokens whose message counts drop to zero in both classes, and
        increases the model version by one. Raises ``StoreError`` if any
        count would go negative (the caller's transaction then rolls back,
        so nothing is written).
        """
        token_list = list(token_list)
        if len(token_list) != len(delta):
            raise ValueError("token_list and delta differ in length")
        new = TokenCounts.zeros(len(token_list))
        if token_list:
            columns = np.concatenate([delta.doc_count, delta.term_count]).tolist()
            new = _counts_at(token_list, self.counts_sql.upsert_tokens(self.owner, self.today, token_list, columns))
            bad = new.any_negative()
            if bad is not None:
                raise StoreError(
                    f"count of token {token_list[bad]!r} would go negative: the store is inconsistent (run `spamfilter db check`)"
                )
            histogram = {key: n for key, n in _histogram_delta(new - delta, new).items() if n != 0}
            self._add_histogram(histogram)
            if not new.known().all():
                self.counts_sql.delete_dead(self.owner, token_list)
        else:
            histogram = {}
        for label in (HAM, SPAM):
            values = classes.of_class(label)
            if any(values):
                self.counts_sql.add_totals(self.owner, label, values)
        return CountsWritten(token_list, new, self.counts_sql.bump_version(self.owner), classes, histogram)

    def _add_histogram(self, delta: dict[tuple[int, int], int]) -> None:
        rows = [(label, k, n) for (label, k), n in sorted(delta.items()) if n != 0]
        if rows:
            self.counts_sql.add_histogram(self.owner, rows)

    # -- IMAP state ---------------------------------------------------------

    def _imap_key(self, account: str) -> str:
        """The ``account`` column of this owner's IMAP state: the account's
        name, prefixed by the owner's name and a unit separator for a user
        other than the default (user names are printable, so two users'
        accounts of the same name never share a key)."""
        return account if not self.owner else f"{self.owner}\x1f{account}"

    def imap_uidvalidity(self, account: str, folder: str) -> int | None:
        """The UIDVALIDITY recorded for the folder, or None if never seen."""
        row = self.conn.execute(self.sql.imap_validity, {"acct": self._imap_key(account), "fold": folder}).first()
        return None if row is None else int(row[0])

    def set_imap_uidvalidity(self, account: str, folder: str, uidvalidity: int) -> None:
        """Record a folder's UIDVALIDITY; the UIDs handled under the old one are dropped."""
        self.conn.execute(self.sql.clear_imap_uids, {"acct": self._imap_key(account), "fold": folder})
        self.conn.execute(self.sql.set_imap_validity, [{"account": self._imap_key(account), "folder": folder, "uidvalidity": uidvalidity}])

    def imap_uids(self, account: str, folder: str) -> dict[int, tuple[str, int | None]]:
        """UID -> (digest, keywords) of the folder's messages already handled;
        keywords is what ``set_imap_keywords`` last recorded, or None."""
        rows = self.conn.execute(self.sql.imap_uids, {"acct": self._imap_key(account), "fold": folder})
        return {int(uid): (str(d), None if k is None else int(k)) for uid, d, k in rows}

    def set_imap_keywords(self, account: str, folder: str, rows: Sequence[tuple[int, int]]) -> None:
        """Record (uid, keywords) of handled messages (keywords: a bit set the caller defines)."""
        if rows:
            params = [{"acct": self._imap_key(account), "fold": folder, "u": uid, "k": k} for uid, k in rows]
            self.conn.execute(self.sql.set_imap_keywords, params)

    def add_imap_uids(self, account: str, folder: str, rows: Sequence[tuple[int, str]]) -> None:
        """Mark (uid, digest) pairs of the folder as handled."""
        if rows:
            values = [{"account": self._imap_key(account), "folder": folder, "uid": uid, "digest": d} for uid, d in rows]
            self.conn.execute(self.sql.add_imap_uids, values)

    def delete_imap_uids(self, account: str, folder: str, uids: Sequence[int]) -> None:
        """Forget UIDs that are no longer in the folder."""
        uids = list(uids)
        for start in range(0, len(uids), _CHUNK):
            params = {"acct": self._imap_key(account), "fold": folder, "keys": uids[start : start + _CHUNK]}
            self.conn.execute(self.sql.delete_imap_uids, params)

    def imap_records(self, account: str, digests: Sequence[str]) -> dict[str, ImapRecord]:
        """The records of those digests that have one."""
        result: dict[str, ImapRecord] = {}
        digests = list(digests)
        for start in range(0, len(digests), _CHUNK):
            params = {"acct": self._imap_key(account), "keys": digests[start : start + _CHUNK]}
            for row in self.conn.execute(self.sql.imap_records, params).mappings():
                result[row["digest"]] = _imap_record(row)
        return result

    def imap_pending(self, account: str, source: str) -> list[ImapRecord]:
        """The records of moves out of ``source`` not yet seen to be done."""
        return [_imap_record(row) for row in self.conn.execute(self.sql.imap_pending, {"acct": self._imap_key(account), "src": source}).mappings()]

    def put_imap_records(self, account: str, records: Sequence[ImapRecord]) -> None:
        """Insert or replace records."""
        if not records:
            return
        now = datetime.now(timezone.utc)
        values = [
            {
                "account": self._imap_key(account), "digest": r.digest, "label": r.label, "origin": r.origin,
                "folder": r.folder, "pending": r.pending, "log_odds": r.log_odds, "updated_at": now,
                "source": r.source or None,
            }
            for r in records
        ]
        self.conn.execute(self.sql.put_imap_records, values)

    # -- insight --------------------------------------------------------------

    def _frequent_query(self, min_count: int, occurrences: bool, owners: Sequence[str] | None) -> sa.Select[tuple[object, ...]]:
        sums = [sa.func.sum(tokens.c[name]).label(name) for name in COUNT_COLUMNS]
        if occurrences:
            total = sa.func.sum(tokens.c.ham_terms + tokens.c.spam_terms)
        else:
            total = sa.func.sum(tokens.c.ham_docs + tokens.c.spam_docs)
        column: sa.ColumnElement[str] = tokens.c.token
        if self.conn.dialect.name == "postgresql":
            column = tokens.c.token.collate("C")
        return (
            sa.select(tokens.c.token, *sums)
            .where(tokens.c.owner.in_(list(owners) if owners is not None else [self.owner]))
            .group_by(tokens.c.token)
            .having(total >= min_count)
            .order_by(column)
        )

    def iter_frequent_tokens(
        self, min_count: int, *, occurrences: bool = False, owners: Sequence[str] | None = None, chunk: int = 20000
    ) -> Iterator[tuple[list[str], TokenCounts]]:
        """Tokens whose total count over both classes is at least ``min_count``,
        with their counts, in token (code point) order, ``chunk`` tokens at a
        time (a server-side cursor on PostgreSQL), so memory does not grow
        with the vocabulary. The total is of messages containing the token,
        or with ``occurrences`` of its occurrences. ``owners``: the models
        whose counts are added (default: this owner's)."""
        query = self._frequent_query(min_count, occurrences, owners)
        result = self.conn.execute(query, execution_options={"stream_results": True, "yield_per": chunk})
        for part in result.partitions(chunk):
            rows = np.array([row[1:5] for row in part], dtype=np.int64).reshape(-1, 4).T
            yield [str(row[0]) for row in part], TokenCounts(rows[0:2].copy(), rows[2:4].copy())

    def trained_per_day(self) -> list[tuple[date, int, int]]:
        """(day, label, messages) rows from the ledger: how many of the
        messages trained now were trained on each day, oldest day first. A
        forgotten message has left the ledger; a relabelled one counts on
        the day of its new label."""
        day = sa.func.date(messages.c.trained_at)
        query = (
            sa.select(day, messages.c.label, sa.func.count())
            .where(messages.c.owner == self.owner)
            .group_by(day, messages.c.label)
            .order_by(day, messages.c.label)
        )
        result: list[tuple[date, int, int]] = []
        for when, label, n in self.conn.execute(query):
            result.append((when if isinstance(when, date) else date.fromisoformat(str(when)), int(label), int(n)))
        return result

    # -- maintenance ----------------------------------------------------------

    def iter_tokens(self, chunk: int = 5000) -> Iterator[tuple[str, int, int, int, int, date | None]]:
        """Every token of this owner as (token, ham_docs, spam_docs, ham_terms,
        spam_terms, last_seen), in code point order of the token (the same
        order as Python's ``sorted``), fetched ``chunk`` rows at a time (a
        server-side cursor on PostgreSQL), so memory does not grow with the
        vocabulary."""
        column: sa.ColumnElement[str] = tokens.c.token
        if self.conn.dialect.name == "postgresql":
            # The default collation sorts by locale; "C" sorts UTF-8 bytes,
            # i.e. code points, as SQLite's BINARY does.
            column = tokens.c.token.collate("C")
        query = (
            sa.select(tokens.c.token, *(tokens.c[name] for name in COUNT_COLUMNS), tokens.c.last_seen)
            .where(tokens.c.owner == self.owner)
            .order_by(column)
        )
        result = self.conn.execute(query, execution_options={"stream_results": True, "yield_per": chunk})
        for row in result:
            yield str(row[0]), int(row[1]), int(row[2]), int(row[3]), int(row[4]), row[5]

    def iter_ledger(self, chunk: int = 500) -> Iterator[tuple[int, dict[str, int]]]:
        """(label, token_counts) of every message in this owner's ledger, streamed."""
        query = sa.select(messages.c.label, messages.c.token_counts).where(messages.c.owner == self.owner)
        for label, blob in self.conn.execute(query, execution_options={"stream_results": True, "yield_per": chunk}):
            yield int(label), unpack_token_counts(blob)

    def untracked(self) -> ClassCounts:
        """What the ledger does not account for in this owner's class totals
        (see the module docstring): zeros for a store never pruned or
        imported into."""
        out = ClassCounts.zeros()
        query = sa.select(
            untracked_totals.c.label, untracked_totals.c.messages, untracked_totals.c.terms, untracked_totals.c.binary_terms
        ).where(untracked_totals.c.owner == self.owner)
        for label, m, t, b in self.conn.execute(query):
            out.messages[label], out.terms[label], out.binary_terms[label] = m, t, b
        return out

    def add_untracked(self, delta: ClassCounts) -> None:
        """Add ``delta`` to ``untracked()``."""
        for label in (HAM, SPAM):
            m, t, b = delta.of_class(label)
            if m or t or b:
                row = {"owner": self.owner, "label": int(label), "messages": m, "terms": t, "binary_terms": b}
                self.conn.execute(self.sql.add_untracked, [row])

    def add_counts_clipped(self, token_list: Sequence[str], delta: TokenCounts, classes: ClassCounts) -> CountsWritten:
        """``add_counts``, except that in a store that was pruned or imported
        into (``untracked()`` not zero) a subtraction stops at zero.

        Untraining a message there can meet a token that pruning removed, or
        whose count now comes from other messages. Per token and class the
        new counts are clipped to docs >= 0 and terms >= docs, and terms = 0
        where docs = 0; what the clipping saved is left in the class totals
        (they stay the sums over the tokens) and added to ``untracked``
        (class totals = ledger sums + untracked stays exact). A store never
        pruned or imported into keeps ``add_counts``' strictness: a count
        going negative there is an inconsistency, and raises ``StoreError``.
        """
        shrinks = bool((delta.doc_count < 0).any() or (delta.term_count < 0).any())
        if not shrinks or not self.untracked().any():
            return self.add_counts(token_list, delta, classes)
        # Writers are kept out meanwhile: SQLite's BEGIN IMMEDIATE holds the
        # write lock, and on PostgreSQL the rows are locked below, so the
        # clipping works on the counts it then changes.
        token_list = list(token_list)
        self.lock_tokens(token_list)
        old = self.token_counts(token_list)
        docs = np.maximum(old.doc_count + delta.doc_count, 0)
        terms = np.where(docs == 0, 0, np.maximum(old.term_count + delta.term_count, docs))
        shrinking = (delta.doc_count < 0) | (delta.term_count < 0)
        effective = TokenCounts(
            np.where(shrinking, docs - old.doc_count, delta.doc_count),
            np.where(shrinking, terms - old.term_count, delta.term_count),
        )
        saved = (effective - delta).sums()
        changed = np.flatnonzero(effective.doc_count.any(axis=0) | effective.term_count.any(axis=0))
        written = self.add_counts([token_list[int(i)] for i in changed], effective.take(changed), classes + saved)
        if saved.any():
            self.add_untracked(saved)
        return written

    def lock_tokens(self, token_list: Sequence[str]) -> None:
        """On PostgreSQL, lock the tokens' rows until the transaction ends (in
        one order for every writer); SQLite's write transaction holds the
        whole database already."""
        if isinstance(self.counts_sql, _PgCountSQL):
            self.counts_sql.rows(
                "SELECT token FROM tokens WHERE owner = %s AND token = ANY(%s::text[]) ORDER BY token COLLATE \"C\" FOR UPDATE",
                (self.owner, list(token_list)),
            )

    def prune_tokens(self, min_count: int, last_seen_by: date | None, *, dry_run: bool = False) -> tuple[int, ClassCounts]:
        """Delete this owner's tokens that occur in fewer than ``min_count``
        messages of both classes together and were last seen on or before
        ``last_seen_by`` (None: whenever; a token without a date counts as
        old). Returns how many tokens that is and what they held: per class
        their occurrences (terms) and presences (binary_terms); ``dry_run``
        only counts them.

        The histogram loses the tokens' buckets, and the class totals their
        occurrences and presences, so the totals stay the sums over the
        tokens that are left; the messages counts do not change.
        ``untracked`` records what was taken.
        """
        if self.conn.dialect.name == "postgresql" and not dry_run:
            # The count, the histogram buckets and the delete below are three
            # statements: keep writers out until the transaction ends, so all
            # three see the same tokens (SQLite's BEGIN IMMEDIATE does this).
            self.conn.execute(sa.text("LOCK TABLE tokens IN SHARE ROW EXCLUSIVE MODE"))
        condition = (tokens.c.owner == self.owner) & ((tokens.c.ham_docs + tokens.c.spam_docs) < min_count)
        if last_seen_by is not None:
            condition = condition & (tokens.c.last_seen.is_(None) | (tokens.c.last_seen <= last_seen_by))
        sums = [sa.func.coalesce(sa.func.sum(tokens.c[name]), 0) for name in COUNT_COLUMNS]
        row = self.conn.execute(sa.select(sa.func.count(), *sums).where(condition)).one()
        removed = int(row[0])
        hd, sd, ht, st = (int(x) for x in row[1:])
        taken = ClassCounts(np.zeros(2, dtype=np.int64), np.array([ht, st], dtype=np.int64), np.array([hd, sd], dtype=np.int64))
        if dry_run or removed == 0:
            return removed, taken
        hist_delta: dict[tuple[int, int], int] = {}
        for label, name in ((HAM, "ham_docs"), (SPAM, "spam_docs")):
            column = tokens.c[name]
            for k, n in self.conn.execute(sa.select(column, sa.func.count()).where(condition).group_by(column)):
                hist_delta[(int(label), int(k))] = -int(n)
        self.conn.execute(sa.delete(tokens).where(condition))
        self._add_histogram(hist_delta)
        for label in (HAM, SPAM):
            self.counts_sql.add_totals(self.owner, label, (-taken).of_class(label))
        self.add_untracked(-taken)
        self.counts_sql.bump_version(self.owner)
        return removed, taken

    def clear_model(self) -> None:
        """Delete this owner's whole model: tokens, totals, histogram, ledger."""
        own = self.owner
        self.conn.execute(sa.delete(tokens).where(tokens.c.owner == own))
        self.conn.execute(sa.delete(doc_histogram).where(doc_histogram.c.owner == own))
        self.conn.execute(sa.delete(messages).where(messages.c.owner == own))
        self.conn.execute(sa.delete(class_totals).where(class_totals.c.owner == own))
        self.conn.execute(sa.delete(untracked_totals).where(untracked_totals.c.owner == own))
        self.counts_sql.bump_version(own)


def _counts_at(token_list: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> TokenCounts:
    """(token, ham_docs, spam_docs, ham_terms, spam_terms) rows as counts in
    the order of ``token_list``; zeros for tokens without a row."""
    out = TokenCounts.zeros(len(token_list))
    if rows:
        position = dict(zip(token_list, range(len(token_list))))
        columns = np.fromiter((position[row[0]] for row in rows), dtype=np.int64, count=len(rows))
        values = np.array([row[1:] for row in rows], dtype=np.int64).T
        out.doc_count[:, columns] = values[0:2]
        out.term_count[:, columns] = values[2:4]
    return out


def _histogram_delta(old: TokenCounts, new: TokenCounts) -> dict[tuple[int, int], int]:
    """How the (label, doc_count) -> tokens histogram changes when the
    tokens' counts go from ``old`` to ``new``: each token leaves the bucket
    of its old message count and joins the one of its new count, in each
    class, as long as it is in the vocabulary (in some message) at all."""
    delta: dict[tuple[int, int], int] = {}
    for counts, sign in ((old, -1), (new, 1)):
        in_vocabulary = counts.known()
        for label in (HAM, SPAM):
            # A token whose count did not change adds -1 and +1 to the same
            # bucket; the caller drops the zeros.
            uniq, n = np.unique(counts.doc_count[label][in_vocabulary], return_counts=True)
            for k, c in zip(uniq.tolist(), n.tolist()):
                delta[(int(label), k)] = delta.get((int(label), k), 0) + sign * c
    return delta


def _imap_record(row: sa.RowMapping) -> ImapRecord:
    return ImapRecord(
        row["digest"], int(row["label"]), row["origin"], row["folder"], bool(row["pending"]), row["log_odds"], row["source"] or ""
    )
