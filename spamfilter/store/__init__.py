"""The token store: the only package that speaks SQL.

    __init__     Store: open, check and upgrade a database, begin transactions
    schema       the tables and the schema revision they are
    transaction  StoreTransaction: the reads and writes of one transaction
    statements   the SQLAlchemy statements, built once per dialect
    backends     the hot count statements on the raw driver cursor, per backend
    engine       engines for SQLite and PostgreSQL; driver errors as ours
    ledger       the ledger's blob of a message's token counts

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
                   tokenizer settings are by then; record_bin, record_weight:
                   its calibration record entry, which moves or goes with it
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

import fcntl
import hashlib
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

from spamfilter.counts import Totals
from spamfilter.errors import NoSuchDatabase, SchemaOutOfDate, StoreBusyError, StoreError
from spamfilter.store.engine import _connect_error, _make_engine, _make_owner_only, _store_error, display_url, sqlite_path
from spamfilter.store.imap_rows import ImapRecord
from spamfilter.store.ledger import pack_token_counts, unpack_token_counts
from spamfilter.store.schema import COUNT_COLUMNS, SCHEMA_REVISION, class_totals, metadata, model_versions
from spamfilter.store.statements import _Statements
from spamfilter.store.transaction import CountsWritten, StoreTransaction, TrainedMessage

_log = logging.getLogger(__name__)

__all__ = [
    "COUNT_COLUMNS",
    "SCHEMA_REVISION",
    "CountsWritten",
    "ImapRecord",
    "Store",
    "StoreTransaction",
    "TrainedMessage",
    "display_url",
    "metadata",
    "nothing_to_check",
    "pack_token_counts",
    "sqlite_path",
    "unpack_token_counts",
]


#: The PostgreSQL advisory lock key that serialises schema upgrades (any
#: constant no other program on the server is likely to use: "spamfilt" in ASCII).
_UPGRADE_LOCK = 0x7370616D66696C74


def nothing_to_check() -> None:
    """``still_held`` of a lock that cannot be lost (a file lock), or of none
    (an in-memory database, a dry run)."""


class Store:
    """A token store on one database. Open with ``Store.open(url)``."""

    def __init__(self, engine: Engine, url: str, owner: str = "", created: tuple[Path, ...] = ()) -> None:
        self.engine = engine
        self.url = url
        self.owner = owner
        #: What opening the store created on disk: the folders of a new
        #: SQLite file (outermost first) and the file (``remove_if_unused``).
        self.created = created
        dbapi = getattr(engine.dialect, "dbapi", None)
        self._driver_error: type[Exception] = getattr(dbapi, "Error", DBAPIError)
        self.statements = _Statements(engine.dialect.name)
        #: This process made the schema in an empty server database (`open`).
        self.made_schema = False
        self._checked = False  # the file passed a quick check (begin)
        self._reached = False  # a connection was made (then a refused one is a disconnect)

    @classmethod
    def open(
        cls, url: str, *, busy_timeout: float = 30.0, upgrade_new: bool = True, check: bool = True, owner: str = "", create: bool = True, create_dirs: bool = True
    ) -> Store:
        """Connect, create the schema on a new (empty) database, check the revision.

        Raises ``SchemaOutOfDate`` for a database at an older revision, and
        ``StoreError`` when it cannot be reached or was written by a newer
        spamfilter. ``check=False`` skips both (for ``upgrade`` itself).
        A missing SQLite file is created (mode 0600) only with ``create``,
        else ``NoSuchDatabase``; its missing parent folders only with
        ``create_dirs``, else ``StoreError``.
        """
        engine, created = _make_engine(url, busy_timeout, create, create_dirs)
        store = cls(engine, url, owner, created)
        if not check:
            return store
        try:
            revision = store.schema_revision()
            if revision is None:
                # Read again after the tables: another process may have
                # created the schema in between.
                if store._has_tables() and store.schema_revision() is None:
                    raise StoreError(f"{store.display_url}: has tables but no spamfilter schema revision")
                if not create:
                    # A command that only reads: an empty server database
                    # is no spamfilter database (perhaps a mistyped name),
                    # as an empty SQLite file is not; it is left empty.
                    raise NoSuchDatabase(
                        f"no spamfilter database in {store.display_url} (it has no tables this role can see; `spamfilter train` or `db upgrade` creates them)"
                    )
                if not upgrade_new:
                    raise SchemaOutOfDate(f"{store.display_url}: empty database; run `spamfilter db upgrade`")
                store.made_schema = store.upgrade() is None
            elif revision != SCHEMA_REVISION:
                if revision in store._known_revisions():
                    raise SchemaOutOfDate(f"{store.display_url}: schema revision {revision} is older than {SCHEMA_REVISION}; run `spamfilter db upgrade`")
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
        return display_url(self.url)

    def close(self) -> None:
        """Release the connections."""
        self.engine.dispose()

    def remove_if_unused(self) -> bool:
        """Close the store and delete what opening it created (a new SQLite
        file with its -wal and -shm, and the folders made for it) if the file
        holds nothing but the schema: what a command that failed on a new
        path (``db import``) would otherwise leave behind. False, and nothing
        deleted, when it created no file or one of its tables has a row
        (another process may have written into it meanwhile)."""
        if self.made_schema and self.engine.dialect.name == "postgresql":
            return self._drop_unused_schema()
        if not self.created or self.created[-1].is_dir():
            return False
        try:
            with self.engine.connect() as conn:
                used = any(conn.execute(sa.select(sa.literal(1)).select_from(t).where(_written(t)).limit(1)).first() for t in metadata.sorted_tables)
        except DBAPIError:
            used = True  # not even the schema can be read: leave it to the user
        self.close()
        if used:
            return False
        path = self.created[-1]
        with _unless_open_elsewhere(path.with_name(path.name + "-shm")) as free:
            if not free:
                return False  # another process has it open, and may write
            for name in (path.name, path.name + "-wal", path.name + "-shm", path.name + "-journal"):
                path.with_name(name).unlink(missing_ok=True)
        for folder in reversed(self.created[:-1]):
            try:
                folder.rmdir()
            except OSError:
                break  # not empty (someone else's file): it and its parents stay
        return True

    def _drop_unused_schema(self) -> bool:
        """`remove_if_unused` on a server database whose schema this process
        made: the tables dropped in one transaction that first locks them
        all (a writer's transaction ends first, and then its rows keep them)."""
        names = [t.name for t in reversed(metadata.sorted_tables)]
        try:
            with self.engine.begin() as conn:
                conn.execute(sa.text(f"LOCK TABLE {', '.join(names)} IN ACCESS EXCLUSIVE MODE"))
                if any(conn.execute(sa.select(sa.literal(1)).select_from(t).where(_written(t)).limit(1)).first() for t in metadata.sorted_tables):
                    return False
                metadata.drop_all(conn)
                conn.execute(sa.text("DROP TABLE IF EXISTS alembic_version"))
        except DBAPIError:
            return False
        finally:
            self.close()
        return True

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema -------------------------------------------------------------

    def _has_tables(self) -> bool:
        return bool(sa.inspect(self.engine).get_table_names())

    def schema_revision(self) -> str | None:
        """The database's Alembic revision, or None for a database without one."""
        try:
            with self._connect() as conn:
                return _revision_on(conn)
        except DBAPIError as exc:
            raise _store_error(exc, f"database {self.display_url}") from None

    def _connect(self) -> sa.Connection:
        """A connection from the pool; ``StoreUnreachable`` or
        ``StoreDisconnected`` when the server cannot be reached
        (``engine._connect_error``)."""
        try:
            conn = self.engine.connect()
        except DBAPIError as exc:
            raise _connect_error(exc, f"database {self.display_url}", self.engine.dialect.name, self._reached) from None
        self._reached = True
        return conn

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

    def upgrade(self, revision: str = "head") -> str | None:
        """Apply the Alembic migrations up to ``revision`` in one transaction;
        the revision the database had when this transaction took the lock
        (None: no schema), so that of two processes upgrading at once only
        the first reports an upgrade.

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
        from alembic.util import CommandError

        cfg = self._alembic_config()
        path = sqlite_path(self.url)
        current = self.schema_revision()
        if current is not None and current not in self._known_revisions():
            raise StoreError(f"{self.display_url}: schema revision {current} is unknown to this spamfilter (newer?): not upgraded")
        try:
            if path is not None and self._has_tables():
                # Migrating rewrites tables: not in a damaged file, as no
                # other write does.
                self._refuse_damaged()
            if path is not None and not self._has_tables():
                # The counts say a lot about someone's mail: owner-only file.
                _make_owner_only(path)
            with self.engine.connect() as conn:
                if self.engine.dialect.name == "sqlite":
                    conn = conn.execution_options(sqlite_begin="IMMEDIATE")
                with conn.begin():
                    if self.engine.dialect.name == "postgresql":
                        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _UPGRADE_LOCK})
                    found = _revision_on(conn)
                    if found is None and set(sa.inspect(conn).get_table_names()) - {"alembic_version"}:
                        # Another program's database, as `open` refuses it.
                        raise StoreError(f"{self.display_url}: has tables but no spamfilter schema revision: not upgraded")
                    cfg.attributes["connection"] = conn
                    command.upgrade(cfg, revision)
                    return found
        except DBAPIError as exc:
            raise _store_error(exc, f"cannot upgrade {self.display_url}") from None
        except self._driver_error as exc:
            raise self._driver_failure(exc, f"cannot upgrade {self.display_url}") from None
        except CommandError as exc:
            raise StoreError(f"cannot upgrade {self.display_url}: {exc}") from None
        except OSError as exc:
            raise StoreError(f"cannot upgrade {self.display_url}: {exc.strerror or exc}") from None

    # -- transactions -------------------------------------------------------

    @contextmanager
    def begin(self, *, write: bool = True) -> Iterator[StoreTransaction]:
        """One transaction: committed when the block ends, rolled back on error."""
        options = {"sqlite_begin": "IMMEDIATE"} if write and self.engine.dialect.name == "sqlite" else {}
        if write and not self._checked and sqlite_path(self.url) is not None:
            # Writing into a damaged file can spread the damage: the first
            # write of a process checks the file (PRAGMA quick_check).
            self._refuse_damaged()
            self._checked = True
        with self._transaction(options) as tx:
            yield tx

    def _refuse_damaged(self) -> None:
        """Raise ``StoreError`` when SQLite's quick check finds the file damaged."""
        problems = self.integrity_check(quick=True)
        if problems:
            raise StoreError(f"{self.display_url}: the database file is damaged ({problems[0]}); `spamfilter db check` lists the problems")

    @contextmanager
    def _transaction(self, options: dict[str, str]) -> Iterator[StoreTransaction]:
        try:
            with self._connect() as conn:
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
        disconnect = self.engine.dialect.is_disconnect(exc, None, None)  # type: ignore[arg-type]
        wrapped = DBAPIError.instance(None, None, exc, self._driver_error, connection_invalidated=disconnect)
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

    def _advisory_unlock(self, conn: sa.Connection, number: int, name: str) -> None:
        """Release a session advisory lock; if its connection was lost
        meanwhile, the server released the lock then: say so (another run
        may have started since), and raise nothing."""
        try:
            conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": number})
        except DBAPIError as exc:
            if not exc.connection_invalidated:
                raise _store_error(exc, f"database {self.display_url}") from None
            _log.warning("the lock of %s was lost with its connection to %s before the end; another one may have run at the same time", name, self.display_url)

    @contextmanager
    def exclusive(self, name: str) -> Iterator[Callable[[], None]]:
        """Hold the lock of ``name`` (what runs, in words) on this database for the block, or
        raise ``StoreBusyError`` at once if another process holds it (one
        ``imap run`` per account: two at once moved the same messages
        twice). SQLite: an advisory lock on a file beside the database
        (``DB.lock-<sha>``, owner-only); PostgreSQL: a session advisory
        lock, so runs on other hosts are kept apart too. An in-memory
        database is one process's alone: nothing to lock.

        Yields ``still_held()``, for the run to call before each step that
        must not be done twice: a PostgreSQL session lock goes with its
        connection, so if that was lost the lock is taken again on a new
        one (with a warning: another run may have run meanwhile), and if
        another process holds it by then, ``StoreBusyError`` stops the run
        before that step. A file lock cannot be lost: nothing to check."""
        key = hashlib.sha256(f"spamfilter:{name}".encode()).digest()
        path = sqlite_path(self.url)
        busy = f"{name} is already running in another process ({self.display_url})"
        if self.engine.dialect.name == "postgresql":
            with self._session_lock(int.from_bytes(key[:8], "big", signed=True), name, busy) as still_held:
                yield still_held
            return
        if path is None:
            yield nothing_to_check
            return
        lock = path.with_name(f"{path.name}.lock-{key[:6].hex()}")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StoreError(f"cannot lock {name}: {lock}: {exc.strerror or exc}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreBusyError(busy) from None
            yield nothing_to_check
        finally:
            os.close(fd)  # the lock goes with the descriptor

    @contextmanager
    def _session_lock(self, number: int, name: str, busy: str) -> Iterator[Callable[[], None]]:
        """``exclusive`` on PostgreSQL: a session advisory lock, taken again
        on a new connection by ``still_held`` if its connection was lost."""
        held: list[sa.Connection] = []  # every connection used; the last holds the lock
        locked = False

        def take(message: str) -> None:
            nonlocal locked
            locked = False
            try:
                conn = self.engine.connect()
            except DBAPIError as exc:
                raise _store_error(exc, f"cannot lock {name} on {self.display_url}") from None
            held.append(conn)
            if not conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": number}).scalar():
                raise StoreBusyError(message)
            locked = True

        def still_held() -> None:
            try:
                held[-1].execute(sa.text("SELECT 1")).scalar()
                return
            except DBAPIError as exc:
                if not exc.connection_invalidated:
                    raise _store_error(exc, f"database {self.display_url}") from None
            take(f"{name} lost its lock with its connection to {self.display_url}, and another process holds it now: stopped")
            _log.warning("the lock of %s was lost with its connection to %s and taken again; another one may have run meanwhile", name, self.display_url)

        try:
            take(busy)
            yield still_held
        finally:
            try:
                if locked:
                    # Closing gives the connection back to the pool, where a
                    # session lock would outlive the run: release it first.
                    self._advisory_unlock(held[-1], number, name)
            finally:
                for conn in held:
                    conn.close()

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

    def free_bytes(self) -> int | None:
        """Bytes of a SQLite file's free pages (space deleted rows and
        rebuilt tables left, which ``vacuum`` gives back); None on other
        databases."""
        if self.engine.dialect.name != "sqlite":
            return None
        try:
            with self.engine.connect() as conn:
                pages = conn.exec_driver_sql("PRAGMA freelist_count").scalar_one()
                size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
        except DBAPIError as exc:
            raise _store_error(exc, f"database {self.display_url}") from None
        return int(pages) * int(size)

    def _vacuum_postgresql(self, conn: sa.Connection) -> None:
        """``VACUUM ANALYZE`` of every table of the schema. PostgreSQL skips,
        with only a warning, a table the role may not vacuum (not its owner):
        those make a ``StoreError`` naming them, not a silent success."""
        skipped: list[str] = []
        raw: Any = conn.connection.driver_connection  # a psycopg connection

        def notice(diag: Any) -> None:
            if str(getattr(diag, "message_primary", "")).startswith("skipping"):
                skipped.append(str(diag.message_primary))

        raw.add_notice_handler(notice)
        try:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE " + ", ".join(t.name for t in metadata.sorted_tables))
        finally:
            raw.remove_notice_handler(notice)
        if skipped:
            more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
            raise StoreError(f"cannot vacuum {self.display_url}: {skipped[0]}{more}: vacuum as the tables' owner")

    def vacuum(self) -> None:
        """Give the space of deleted rows back and refresh the planner's statistics.

        SQLite: copy the WAL into the file, ``VACUUM`` (rewrites the file
        without its free pages), then checkpoint again and truncate the WAL,
        which VACUUM filled. PostgreSQL: ``VACUUM ANALYZE`` of every
        table; the space becomes reusable, the files rarely shrink. Both run
        outside a transaction, as they must.
        """
        if sqlite_path(self.url) is not None:
            # VACUUM of a damaged file fails with whatever SQLite meets
            # first, "database or disk is full" among them: check first.
            self._refuse_damaged()
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
                    self._vacuum_postgresql(conn)
        except DBAPIError as exc:
            raise _store_error(exc, f"cannot vacuum {self.display_url}") from None
        except self._driver_error as exc:
            # The SQLite statements run on the raw driver cursor.
            raise self._driver_failure(exc, f"cannot vacuum {self.display_url}") from None


def _written(table: sa.Table) -> sa.ColumnElement[bool]:
    """Which rows of ``table`` a new schema does not hold: it holds zero
    class totals and model version 1 (the migrations'), and nothing else;
    every write of counts raises the version."""
    if table is class_totals:
        return (class_totals.c.messages != 0) | (class_totals.c.terms != 0) | (class_totals.c.binary_terms != 0)
    if table is model_versions:
        return model_versions.c.version > 1
    return sa.true()


@contextmanager
def _unless_open_elsewhere(shm: Path) -> Iterator[bool]:
    """Whether no other process has the SQLite file of WAL index ``shm``
    open, holding, while the block runs, the write lock a new connection
    would need, so that none attaches meanwhile. An open connection in WAL
    mode keeps a shared lock on its WAL index (SQLite's unix VFS: byte 128,
    past the 8 lock bytes at 120); a file being deleted under it would take
    its writes into nothing."""
    try:
        fd = os.open(shm, os.O_RDWR)
    except FileNotFoundError:
        yield True  # no WAL index: no connection is open
        return
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 16, 120)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _revision_on(conn: Connection) -> str | None:
    """The Alembic revision seen on ``conn`` (None: no schema)."""
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    row = conn.execute(sa.text("SELECT version_num FROM alembic_version")).first()
    return None if row is None else str(row[0])
