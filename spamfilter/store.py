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
                   own token counts, zlib-packed) so forgetting or relabelling
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
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

from spamfilter.errors import SchemaOutOfDate, StoreBusyError, StoreConflict, StoreError

IntArray = npt.NDArray[np.int64]

#: The Alembic head this code reads and writes; tests check it is the
#: migrations' head. Kept as a constant so opening a store needs no Alembic import.
SCHEMA_REVISION = "0003"

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
class Totals:
    """Whole-store aggregates (class index 0 = ham, 1 = spam).

    messages, terms, binary_terms: (2,) arrays.
    vocabulary_size: rows of ``tokens``.
    histogram: per class an (K, 2) array of (doc_count, tokens) rows.
    """

    messages: IntArray
    terms: IntArray
    binary_terms: IntArray
    vocabulary_size: int
    histogram: tuple[IntArray, IntArray]


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


# A token is free text to the store: escape backslash and newline so one
# line holds one token; tabs need no escape, as the count follows the last
# tab on its line.
_ESCAPE_SEQUENCE = re.compile(r"\\(.)", re.DOTALL)


def _escape(token: str) -> str:
    return token.replace("\\", "\\\\").replace("\n", "\\n")


def _unescape(token: str) -> str:
    return _ESCAPE_SEQUENCE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), token)


def pack_token_counts(counts: dict[str, int]) -> bytes:
    """Encode a message's token counts as zlib-compressed ``token\tcount``
    lines, backslash and newline in tokens escaped (the tokenizer emits
    neither, but the ledger must give back whatever it was given)."""
    text = "\n".join(f"{_escape(token)}\t{n}" for token, n in counts.items())
    return zlib.compress(text.encode("utf-8"), 6)


def unpack_token_counts(blob: bytes) -> dict[str, int]:
    """Inverse of ``pack_token_counts``."""
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


def _make_engine(url: str, busy_timeout: float) -> Engine:
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
            raise StoreError(f"cannot use database {parsed.render_as_string(hide_password=True)}: {exc}") from None
    path = sqlite_path(url)
    if path is None:
        engine = sa.create_engine(parsed, poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        if not path.exists():
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


#: PostgreSQL SQLSTATEs of a transaction that lost a race and can simply be
#: run again: deadlock detected, serialization failure, unique violation
#: (two processes inserting the same new message into the ledger).
_RETRYABLE_SQLSTATES = {"40P01", "40001", "23505"}


def _store_error(exc: DBAPIError, what: str) -> StoreError:
    text = str(exc.orig) if exc.orig is not None else str(exc)
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if sqlstate in _RETRYABLE_SQLSTATES:
        return StoreConflict(f"{what}: lost a race with another process ({text.strip()})")
    if sqlstate == "55P03":
        return StoreBusyError(f"{what}: a lock stayed held by another process past the busy timeout ({text.strip()})")
    if isinstance(exc, OperationalError) and "locked" in text:
        return StoreBusyError(f"{what}: the database stayed locked by another process ({text})")
    return StoreError(f"{what}: {text}")


# The SQLite hot path (see StoreTransaction.__init__): plain SQL on the
# sqlite3 cursor, same tables as above.
_SQLITE_TOTALS = "SELECT label, messages, terms, binary_terms FROM class_totals WHERE owner = ?"
_SQLITE_HISTOGRAM = "SELECT label, doc_count, tokens FROM doc_histogram WHERE owner = ? ORDER BY label, doc_count"
_SQLITE_SET_TOKEN = (
    "INSERT INTO tokens (owner, token, ham_docs, spam_docs, ham_terms, spam_terms, last_seen) VALUES (?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (owner, token) DO UPDATE SET ham_docs = excluded.ham_docs, spam_docs = excluded.spam_docs, "
    "ham_terms = excluded.ham_terms, spam_terms = excluded.spam_terms, last_seen = excluded.last_seen"
)
_SQLITE_DELETE_TOKEN = "DELETE FROM tokens WHERE owner = ? AND token = ?"
_SQLITE_ADD_HISTOGRAM = (
    "INSERT INTO doc_histogram (owner, label, doc_count, tokens) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (owner, label, doc_count) DO UPDATE SET tokens = tokens + excluded.tokens"
)
_SQLITE_PRUNE_HISTOGRAM = "DELETE FROM doc_histogram WHERE owner = ? AND tokens = 0"
_SQLITE_ADD_TOTALS = (
    "INSERT INTO class_totals (owner, label, messages, terms, binary_terms) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (owner, label) DO UPDATE SET messages = messages + excluded.messages, "
    "terms = terms + excluded.terms, binary_terms = binary_terms + excluded.binary_terms"
)


_PG_UPSERT_TOKENS = (
    "INSERT INTO tokens AS t (owner, token, ham_docs, spam_docs, ham_terms, spam_terms, last_seen) "
    "SELECT %s, u.token, u.hd, u.sd, u.ht, u.st, %s "
    "FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[]) "
    "WITH ORDINALITY AS u(token, hd, sd, ht, st, n) ORDER BY u.n "
    "ON CONFLICT (owner, token) DO UPDATE SET ham_docs = t.ham_docs + excluded.ham_docs, "
    "spam_docs = t.spam_docs + excluded.spam_docs, ham_terms = t.ham_terms + excluded.ham_terms, "
    "spam_terms = t.spam_terms + excluded.spam_terms, last_seen = excluded.last_seen "
    "RETURNING t.token, t.ham_docs, t.spam_docs, t.ham_terms, t.spam_terms"
)
_PG_SELECT_TOKENS = (
    "SELECT token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens WHERE owner = %s AND token = ANY(%s::text[])"
)
_PG_LOCK_TOKENS = _PG_SELECT_TOKENS + " ORDER BY token COLLATE \"C\" FOR UPDATE"


def _sqlite_select_tokens(n: int) -> str:
    return (
        "SELECT token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens WHERE owner = ? AND token IN ("
        + ",".join("?" * n)
        + ")"
    )


class _Statements:
    """Every statement the store runs, built once per dialect.

    Building a SQLAlchemy construct costs more than running it on SQLite;
    with constant statements (IN lists as expanding parameters) each one is
    compiled once and then served from the engine's compiled cache, which
    took online classify-then-train from 64 to well over 100 messages/s.
    """

    def __init__(self, dialect: str) -> None:
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        keys: sa.BindParameter[list[str]] = sa.bindparam("keys", expanding=True)
        counts = [tokens.c[name] for name in COUNT_COLUMNS]
        own: sa.BindParameter[str] = sa.bindparam("own")
        self.class_totals = sa.select(
            class_totals.c.label, class_totals.c.messages, class_totals.c.terms, class_totals.c.binary_terms
        ).where(class_totals.c.owner == own)
        self.histogram = (
            sa.select(doc_histogram.c.label, doc_histogram.c.doc_count, doc_histogram.c.tokens)
            .where(doc_histogram.c.owner == own)
            .order_by(doc_histogram.c.label, doc_histogram.c.doc_count)
        )
        self.token_counts = sa.select(tokens.c.token, *counts).where((tokens.c.owner == own) & tokens.c.token.in_(keys))
        self.labels = sa.select(messages.c.digest, messages.c.label).where((messages.c.owner == own) & messages.c.digest.in_(keys))
        self.take_ledger = (
            sa.delete(messages)
            .where((messages.c.owner == own) & messages.c.digest.in_(keys))
            .returning(messages.c.digest, messages.c.label, messages.c.trained_at, messages.c.token_counts)
        )
        self.record = sa.insert(messages)
        self.delete_tokens = sa.delete(tokens).where((tokens.c.owner == own) & tokens.c.token.in_(keys))
        upsert = insert(tokens)
        self.upsert_tokens = upsert.on_conflict_do_update(
            index_elements=[tokens.c.owner, tokens.c.token],
            set_={**{name: tokens.c[name] + upsert.excluded[name] for name in COUNT_COLUMNS}, "last_seen": upsert.excluded.last_seen},
        ).returning(tokens.c.token, *counts)
        hist = insert(doc_histogram)
        self.upsert_histogram = hist.on_conflict_do_update(
            index_elements=[doc_histogram.c.owner, doc_histogram.c.label, doc_histogram.c.doc_count],
            set_={"tokens": doc_histogram.c.tokens + hist.excluded.tokens},
        )
        self.prune_histogram = sa.delete(doc_histogram).where((doc_histogram.c.owner == own) & (doc_histogram.c.tokens == 0))
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
        self._checked = False  # the file passed a quick check (begin)

    @classmethod
    def open(cls, url: str, *, busy_timeout: float = 30.0, upgrade_new: bool = True, check: bool = True, owner: str = "") -> Store:
        """Connect, create the schema on a new (empty) database, check the revision.

        Raises ``SchemaOutOfDate`` for a database at an older revision, and
        ``StoreError`` when it cannot be reached or was written by a newer
        spamfilter. ``check=False`` skips both (for ``upgrade`` itself).
        """
        engine = _make_engine(url, busy_timeout)
        store = cls(engine, url, owner)
        if not check:
            return store
        try:
            revision = store.schema_revision()
            if revision is None:
                if store._has_tables():
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
        """Apply the Alembic migrations up to ``revision`` in one transaction."""
        from alembic import command

        cfg = self._alembic_config()
        path = sqlite_path(self.url)
        try:
            if path is not None and not self._has_tables():
                # The counts say a lot about someone's mail: owner-only file.
                _make_owner_only(path)
            with self.engine.begin() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
        except DBAPIError as exc:
            raise _store_error(exc, f"cannot upgrade {self.display_url}") from None

    # -- transactions -------------------------------------------------------

    @contextmanager
    def begin(self, *, write: bool = True) -> Iterator[StoreTransaction]:
        """One transaction: committed when the block ends, rolled back on error."""
        options = {"sqlite_begin": "IMMEDIATE"} if write and self.engine.dialect.name == "sqlite" else {}
        if write and not self._checked and sqlite_path(self.url) is not None:
            # Writing into a damaged file can spread the damage: the first
            # write of a process checks the file (PRAGMA quick_check).
            problems = self.integrity_check(quick=True)
            if problems:
                raise StoreError(
                    f"{self.display_url}: the database file is damaged ({problems[0]}); "
                    "`spamfilter db check` lists the problems"
                )
            self._checked = True
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

    def integrity_check(self, *, quick: bool = False) -> list[str] | None:
        """The problems SQLite's ``PRAGMA integrity_check`` (``quick_check``:
        no index-to-table comparison, about 0.13 s of CPU for a 63 MB file)
        finds in the file, one a line ([] when it is sound); None on other
        databases. A file too damaged to be checked gives SQLite's error."""
        if self.engine.dialect.name != "sqlite":
            return None
        try:
            with self.engine.connect() as conn:
                rows = [str(row[0]) for row in conn.exec_driver_sql(f"PRAGMA {'quick_check' if quick else 'integrity_check'}")]
        except OperationalError as exc:  # locked, I/O: not an answer about the file
            raise _store_error(exc, f"cannot check {self.display_url}") from None
        except DBAPIError as exc:  # "database disk image is malformed"
            rows = [str(exc.orig)]
        lines = [line for row in rows for line in row.splitlines() if line and not line.startswith("*** in database")]
        return [] if lines == ["ok"] else lines

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
        # On SQLite the hot statements go straight to the sqlite3 cursor of
        # this same connection and transaction: SQLAlchemy's per-row
        # parameter processing cost more than SQLite itself (profiled: 7.5 ms
        # of 22 ms per online message in add_counts alone).
        dbapi = conn.connection.dbapi_connection
        self.raw = dbapi.cursor() if conn.dialect.name == "sqlite" and dbapi is not None else None
        # On PostgreSQL the token upsert and lookups pass arrays (psycopg).
        self.pg = dbapi.cursor() if conn.dialect.name == "postgresql" and dbapi is not None else None
        # The counts of the last token_counts() call, until add_counts()
        # changes the table: online learning scores a message and then
        # trains it in one transaction, and need not read its tokens twice.
        self._last_read: tuple[dict[str, int], IntArray] | None = None

    # -- reads --------------------------------------------------------------

    def totals(self, owner: str | None = None) -> Totals:
        """Class totals, vocabulary size and the per-class count histograms
        (of this transaction's owner, or of ``owner``)."""
        own = self.owner if owner is None else owner
        msgs = np.zeros(2, dtype=np.int64)
        terms = np.zeros(2, dtype=np.int64)
        binary = np.zeros(2, dtype=np.int64)
        if self.raw is not None:
            totals_rows = self.raw.execute(_SQLITE_TOTALS, (own,)).fetchall()
            histogram_rows = self.raw.execute(_SQLITE_HISTOGRAM, (own,)).fetchall()
        else:
            totals_rows = list(self.conn.execute(self.sql.class_totals, {"own": own}))
            histogram_rows = list(self.conn.execute(self.sql.histogram, {"own": own}))
        for label, m, t, b in totals_rows:
            msgs[label], terms[label], binary[label] = m, t, b
        rows: list[list[tuple[int, int]]] = [[], []]
        for label, k, n in histogram_rows:
            rows[label].append((k, n))
        hist = tuple(np.array(r, dtype=np.int64).reshape(-1, 2) for r in rows)
        vocabulary = int(hist[0][:, 1].sum())
        return Totals(msgs, terms, binary, vocabulary, (hist[0], hist[1]))

    def vocabulary_size(self, owners: Sequence[str]) -> int:
        """Distinct tokens over the models of ``owners`` together."""
        inner = sa.select(tokens.c.token).where(tokens.c.owner.in_(list(owners))).distinct().subquery()
        return int(self.conn.execute(sa.select(sa.func.count()).select_from(inner)).scalar_one())

    def token_counts(self, token_list: Sequence[str], owner: str | None = None, *, for_update: bool = False) -> IntArray:
        """Counts of the given tokens, shape (len(token_list), 4), columns
        ham_docs, spam_docs, ham_terms, spam_terms; zeros for unknown tokens
        (of this transaction's owner, or of ``owner``).
        """
        own = self.owner if owner is None else owner
        out = np.zeros((len(token_list), 4), dtype=np.int64)
        position = {t: i for i, t in enumerate(token_list)}
        for start in range(0, len(token_list), _CHUNK):
            chunk = list(token_list[start : start + _CHUNK])
            if self.raw is not None:
                found = self.raw.execute(_sqlite_select_tokens(len(chunk)), [own, *chunk]).fetchall()
            elif self.pg is not None:
                self.pg.execute(_PG_LOCK_TOKENS if for_update else _PG_SELECT_TOKENS, (own, chunk))
                found = self.pg.fetchall()
            else:
                found = list(self.conn.execute(self.sql.token_counts, {"own": own, "keys": chunk}))
            for row in found:
                out[position[row[0]]] = row[1:]
        if own == self.owner:
            self._last_read = (position, out)
        return out

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

    def add_counts(
        self,
        token_list: Sequence[str],
        delta: IntArray,
        class_delta: IntArray,
    ) -> None:
        """Add ``delta`` (len(token_list), 4) to the tokens' counts and ``class_delta``
        (3, 2) rows messages, terms, binary_terms to the class totals.

        Negative deltas untrain. Keeps ``doc_histogram`` in step and deletes
        tokens whose message counts drop to zero in both classes. Raises
        ``StoreError`` if any count would go negative (nothing is written: the
        caller's transaction rolls back).
        """
        if len(token_list) != delta.shape[0]:
            raise ValueError("token_list and delta differ in length")
        if self.raw is not None:
            # The transaction holds SQLite's write lock (BEGIN IMMEDIATE), so
            # nobody can change the counts between this read and the write.
            old_counts = self._counts_before_write(token_list)
            new_counts = old_counts + delta
            self._check_not_negative(token_list, new_counts)
            keep = (new_counts[:, 0] > 0) | (new_counts[:, 1] > 0)
            rows = new_counts.tolist()
            own, today = self.owner, self.today
            self.raw.executemany(_SQLITE_SET_TOKEN, [(own, t, *rows[i], today) for i, t in enumerate(token_list) if keep[i]])
        else:
            new_counts = np.zeros_like(delta)
            # Rows in one order for every writer, so two transactions that
            # upsert overlapping tokens queue on the row locks instead of
            # deadlocking.
            order = sorted(range(len(token_list)), key=token_list.__getitem__)
            token_list = [token_list[i] for i in order]
            delta = delta[order]
            position = {t: i for i, t in enumerate(token_list)}
            if self.pg is not None and token_list:
                # PostgreSQL: the whole delta as five arrays in one statement
                # (unnest keeps their order), ten times faster than a
                # multi-row VALUES with seven bound values per token.
                columns = delta.T.tolist()
                self.pg.execute(_PG_UPSERT_TOKENS, (self.owner, self.today, list(token_list), *columns))
                for row in self.pg.fetchall():
                    new_counts[position[row[0]]] = row[1:]
                values = []
            else:
                values = [
                    {"owner": self.owner, "token": t, "ham_docs": hd, "spam_docs": sd, "ham_terms": ht, "spam_terms": st, "last_seen": self.today}
                    for t, (hd, sd, ht, st) in zip(token_list, delta.tolist())
                ]
            if values:
                # executemany with RETURNING: SQLAlchemy's "insertmanyvalues"
                # packs the rows into multi-row statements; the returned new
                # counts stay right under concurrent writers (PostgreSQL).
                for row in self.conn.execute(self.sql.upsert_tokens, values):
                    new_counts[position[row[0]]] = row[1:]
            self._check_not_negative(token_list, new_counts)
            old_counts = new_counts - delta
        was_known = (old_counts[:, 0] > 0) | (old_counts[:, 1] > 0)
        is_known = (new_counts[:, 0] > 0) | (new_counts[:, 1] > 0)
        hist_delta: dict[tuple[int, int], int] = {}
        for label in (0, 1):
            for mask, ks, sign in ((was_known, old_counts[:, label], -1), (is_known, new_counts[:, label], 1)):
                # A token whose count did not change adds -1 and +1 to the same
                # bucket; the zero is dropped below.
                uniq, n = np.unique(ks[mask], return_counts=True)
                for k, c in zip(uniq.tolist(), n.tolist()):
                    hist_delta[(label, k)] = hist_delta.get((label, k), 0) + sign * c
        self._add_histogram({key: n for key, n in hist_delta.items() if n != 0})
        gone = [token_list[int(i)] for i in np.flatnonzero(~is_known)]
        if self.raw is not None:
            self.raw.executemany(_SQLITE_DELETE_TOKEN, [(self.owner, t) for t in gone])
        else:
            for start in range(0, len(gone), _CHUNK):
                self.conn.execute(self.sql.delete_tokens, {"own": self.owner, "keys": gone[start : start + _CHUNK]})
        for label in (0, 1):
            m, t, b = (int(x) for x in class_delta[:, label])
            if m or t or b:
                if self.raw is not None:
                    self.raw.execute(_SQLITE_ADD_TOTALS, (self.owner, label, m, t, b))
                else:
                    total_row = {"owner": self.owner, "label": label, "messages": m, "terms": t, "binary_terms": b}
                    self.conn.execute(self.sql.add_totals, [total_row])

    def _counts_before_write(self, token_list: Sequence[str]) -> IntArray:
        """token_counts(), served from the last read when it covers every token."""
        last, self._last_read = self._last_read, None
        if last is not None:
            position, counts = last
            rows = [position.get(t, -1) for t in token_list]
            if -1 not in rows:
                return counts[rows]
        counts = self.token_counts(token_list)
        self._last_read = None
        return counts

    @staticmethod
    def _check_not_negative(token_list: Sequence[str], new_counts: IntArray) -> None:
        if (new_counts < 0).any():
            bad = token_list[int(np.argwhere(new_counts < 0)[0, 0])]
            raise StoreError(f"count of token {bad!r} would go negative: the store is inconsistent (run `spamfilter db check`)")

    def _add_histogram(self, delta: dict[tuple[int, int], int]) -> None:
        if not delta:
            return
        if self.raw is not None:
            self.raw.executemany(_SQLITE_ADD_HISTOGRAM, [(self.owner, lbl, k, n) for (lbl, k), n in sorted(delta.items())])
            if any(n < 0 for n in delta.values()):
                self.raw.execute(_SQLITE_PRUNE_HISTOGRAM, (self.owner,))
            return
        values = [{"owner": self.owner, "label": lbl, "doc_count": k, "tokens": n} for (lbl, k), n in sorted(delta.items())]
        self.conn.execute(self.sql.upsert_histogram, values)
        if any(n < 0 for n in delta.values()):
            self.conn.execute(self.sql.prune_histogram, {"own": self.owner})

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
    ) -> Iterator[tuple[list[str], IntArray]]:
        """Tokens whose total count over both classes is at least ``min_count``,
        with their counts, shape (k, 4), columns ham_docs, spam_docs,
        ham_terms, spam_terms, in token (code point) order, ``chunk`` tokens
        at a time (a server-side cursor on PostgreSQL), so memory does not
        grow with the vocabulary. The total is of messages containing the
        token, or with ``occurrences`` of its occurrences. ``owners``: the
        models whose counts are added (default: this owner's)."""
        yield from self._chunks(self._frequent_query(min_count, occurrences, owners), chunk)

    def _chunks(self, query: sa.Select[tuple[object, ...]], chunk: int) -> Iterator[tuple[list[str], IntArray]]:
        result = self.conn.execute(query, execution_options={"stream_results": True, "yield_per": chunk})
        for part in result.partitions(chunk):
            yield [str(row[0]) for row in part], np.array([row[1:5] for row in part], dtype=np.int64).reshape(-1, 4)

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

    def untracked(self) -> IntArray:
        """What the ledger does not account for in this owner's class totals,
        shape (3, 2), rows messages, terms, binary_terms (see the module
        docstring): zeros for a store never pruned or imported into."""
        out = np.zeros((3, 2), dtype=np.int64)
        query = sa.select(
            untracked_totals.c.label, untracked_totals.c.messages, untracked_totals.c.terms, untracked_totals.c.binary_terms
        ).where(untracked_totals.c.owner == self.owner)
        for label, m, t, b in self.conn.execute(query):
            out[:, int(label)] = (m, t, b)
        return out

    def add_untracked(self, delta: IntArray) -> None:
        """Add ``delta`` (3, 2) to ``untracked()``."""
        for label in (0, 1):
            m, t, b = (int(x) for x in delta[:, label])
            if m or t or b:
                row = {"owner": self.owner, "label": label, "messages": m, "terms": t, "binary_terms": b}
                self.conn.execute(self.sql.add_untracked, [row])

    def add_counts_clipped(self, token_list: Sequence[str], delta: IntArray, class_delta: IntArray) -> None:
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
        if not (delta < 0).any() or not self.untracked().any():
            self.add_counts(token_list, delta, class_delta)
            return
        # On SQLite add_counts serves its read of the old counts from this one;
        # on PostgreSQL the rows are locked, so the clipping works on the
        # counts it then changes.
        old = self.token_counts(token_list, for_update=True)
        effective = delta.copy()
        saved = np.zeros((3, 2), dtype=np.int64)
        for label in (0, 1):
            d, t = label, 2 + label
            shrinking = (delta[:, d] < 0) | (delta[:, t] < 0)
            docs = np.maximum(old[:, d] + delta[:, d], 0)
            terms = np.where(docs == 0, 0, np.maximum(old[:, t] + delta[:, t], docs))
            effective[:, d] = np.where(shrinking, docs - old[:, d], delta[:, d])
            effective[:, t] = np.where(shrinking, terms - old[:, t], delta[:, t])
            saved[1, label] = int((effective[:, t] - delta[:, t]).sum())
            saved[2, label] = int((effective[:, d] - delta[:, d]).sum())
        changed = effective.any(axis=1)
        self.add_counts([token_list[int(i)] for i in np.flatnonzero(changed)], effective[changed], class_delta + saved)
        if saved.any():
            self.add_untracked(saved)

    def prune_tokens(self, min_count: int, last_seen_by: date | None, *, dry_run: bool = False) -> tuple[int, IntArray]:
        """Delete this owner's tokens that occur in fewer than ``min_count``
        messages of both classes together and were last seen on or before
        ``last_seen_by`` (None: whenever; a token without a date counts as
        old). Returns how many tokens that is and their summed counts, shape
        (4,): ham_docs, spam_docs, ham_terms, spam_terms; ``dry_run`` only
        counts them.

        The histogram loses the tokens' buckets, and the class totals their
        occurrences (terms) and presences (binary_terms), so the totals stay
        the sums over the tokens that are left; the messages counts do not
        change. ``untracked`` records what was taken.
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
        counts = np.array([int(x) for x in row[1:]], dtype=np.int64)
        if dry_run or removed == 0:
            return removed, counts
        hist_delta: dict[tuple[int, int], int] = {}
        for label, name in ((0, "ham_docs"), (1, "spam_docs")):
            column = tokens.c[name]
            for k, n in self.conn.execute(sa.select(column, sa.func.count()).where(condition).group_by(column)):
                hist_delta[(label, int(k))] = -int(n)
        self.conn.execute(sa.delete(tokens).where(condition))
        self._add_histogram(hist_delta)
        taken = np.zeros((3, 2), dtype=np.int64)
        taken[1] = -counts[2:4]
        taken[2] = -counts[0:2]
        for label in (0, 1):
            total_row = {"owner": self.owner, "label": label, "messages": 0, "terms": int(taken[1, label]), "binary_terms": int(taken[2, label])}
            self.conn.execute(self.sql.add_totals, [total_row])
        self.add_untracked(taken)
        return removed, counts

    def clear_model(self) -> None:
        """Delete this owner's whole model: tokens, totals, histogram, ledger."""
        own = self.owner
        self.conn.execute(sa.delete(tokens).where(tokens.c.owner == own))
        self.conn.execute(sa.delete(doc_histogram).where(doc_histogram.c.owner == own))
        self.conn.execute(sa.delete(messages).where(messages.c.owner == own))
        self.conn.execute(sa.delete(class_totals).where(class_totals.c.owner == own))
        self.conn.execute(sa.delete(untracked_totals).where(untracked_totals.c.owner == own))
        self._last_read = None


def _imap_record(row: sa.RowMapping) -> ImapRecord:
    return ImapRecord(
        row["digest"], int(row["label"]), row["origin"], row["folder"], bool(row["pending"]), row["log_odds"], row["source"] or ""
    )
