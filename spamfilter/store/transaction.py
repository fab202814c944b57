"""One open transaction's reads and writes (``Store.begin`` opens it), and
the records it returns."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from spamfilter.counts import MAX_COUNT, ClassCounts, FeatureStats, IntArray, TokenCounts, Totals, histogram_delta
from spamfilter.errors import CountLimitError, StoreError, StoreInconsistent
from spamfilter.store import schema
from spamfilter.store.backends import _counts_at, _CountSQL, _PgCountSQL, _SqliteCountSQL, _whole
from spamfilter.store.imap_rows import ImapRows
from spamfilter.store.insight_rows import InsightRows
from spamfilter.store.ledger import DamagedEntry, pack_ledger_entry, unpack_features, unpack_token_counts
from spamfilter.store.pairs import PairTables
from spamfilter.store.schema import _CHUNK, CLOCK_LABEL, COUNT_COLUMNS, calibration, class_totals, doc_histogram, feature_stats, messages, tokens, untracked_totals
from spamfilter.store.statements import _Statements
from spamfilter.verdicts import HAM, SPAM, Label

FloatArray = npt.NDArray[np.float64]

_TOTAL_COLUMNS = ("messages", "terms", "binary_terms")


@dataclass(frozen=True, slots=True)
class TrainedMessage:
    """One row of the trained-message ledger."""

    digest: str
    label: int
    trained_at: datetime
    token_counts: dict[str, int]
    features: tuple[int, ...] = ()
    #: (bin, log weight less the record clock) of its calibration record
    #: entry (``spamfilter.nb.calibration``), None when it has none.
    record: tuple[int, float] | None = None


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
        for label, m, t, b in _whole(self.counts_sql.select_totals(own), "class_totals"):
            classes.messages[label], classes.terms[label], classes.binary_terms[label] = m, t, b
        rows: list[list[tuple[int, int]]] = [[], []]
        for label, k, n in _whole(self.counts_sql.select_histogram(own), "doc_histogram"):
            rows[label].append((k, n))
        hist = tuple(np.array(r, dtype=np.int64).reshape(-1, 2) for r in rows)
        vocabulary = int(hist[0][:, 1].sum())
        return Totals(classes, vocabulary, (hist[0], hist[1]))

    def record_versions(self, owners: Sequence[str]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``versions`` of ``owners``, and of their calibration records
        (``record_version_owner``), in one query."""
        found = self.versions([*owners, *map(schema.record_version_owner, owners)])
        return found[: len(owners)], found[len(owners) :]

    def versions(self, owners: Sequence[str]) -> tuple[int, ...]:
        """The model version of each owner: a number every transaction that
        changes the owner's counts increases by one (0 for a model never
        written). Equal versions mean equal counts, so an in-memory copy of
        the counts stays valid while the versions do not move."""
        found = {str(o): int(v) for o, v in self.counts_sql.select_versions(owners)}
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
        # Asked in key order, each chunk's lookups fall on neighbouring pages
        # of the index: a classify run's reads took 40% less time than in
        # the order the batch gave (3,000 spamassassin messages, 356,000
        # tokens asked: 1.4 s -> 0.83 s).
        ordered = sorted(token_list)
        for start in range(0, len(ordered), _CHUNK):
            found += self.counts_sql.select_tokens(own, ordered[start : start + _CHUNK])
        return _counts_at(token_list, found)

    def trained_labels(self, digests: Sequence[str]) -> dict[str, int]:
        """Label of each digest already in the ledger (absent ones are left out)."""
        result: dict[str, int] = {}
        for start in range(0, len(digests), _CHUNK):
            chunk = list(digests[start : start + _CHUNK])
            result.update({d: int(lbl) for d, lbl in self.conn.execute(self.sql.labels, {"own": self.owner, "keys": chunk})})
        return result

    def adopt_digests(self, formers: Mapping[str, str]) -> None:
        """Move each message the ledger holds under a former digest to the
        digest it has now (``formers``: former -> now; ``mail.former_digest``),
        unless the ledger holds it under that one too."""
        if formers:
            self.conn.execute(self.sql.adopt_digest, [{"own": self.owner, "old": old, "new": new} for old, new in formers.items()])

    # -- writes -------------------------------------------------------------

    def record_messages(
        self,
        rows: Sequence[tuple[str, int, dict[str, int], tuple[int, ...], bytes | None]],
        when: datetime | None = None,
        records: Mapping[str, tuple[int, float]] | None = None,
    ) -> None:
        """Add (digest, label, token_counts, features, entry) rows to the
        ledger; ``entry``, when not None, is ``pack_ledger_entry`` of the
        counts and features, packed already (by the processes that read
        the mail). ``records``: digest -> its calibration record entry
        (``TrainedMessage.record``)."""
        if not rows:
            return
        when = when or datetime.now(timezone.utc)
        records = records or {}
        values = [
            {
                "owner": self.owner,
                "digest": d,
                "label": lbl,
                "trained_at": when,
                "token_counts": pack_ledger_entry(c, f) if entry is None else entry,
                "record_bin": records[d][0] if d in records else None,
                "record_weight": records[d][1] if d in records else None,
            }
            for d, lbl, c, f, entry in rows
        ]
        self.conn.execute(self.sql.record, values)

    def take_messages(self, digests: Sequence[str]) -> list[TrainedMessage]:
        """Delete the ledger rows of ``digests`` and return what they held, in
        one statement per chunk (DELETE ... RETURNING): of two transactions
        taking the same message, only one gets it."""
        result: list[TrainedMessage] = []
        try:
            for start in range(0, len(digests), _CHUNK):
                chunk = list(digests[start : start + _CHUNK])
                for d, lbl, when, blob, b, w in self.conn.execute(self.sql.take_ledger, {"own": self.owner, "keys": chunk}):
                    record = None if b is None or w is None else (int(b), float(w))
                    if lbl not in (HAM, SPAM):
                        raise _damaged(d, DamagedEntry(f"label {lbl!r}"))
                    try:
                        result.append(TrainedMessage(d, int(lbl), when, unpack_token_counts(blob), unpack_features(blob), record))
                    except DamagedEntry as exc:
                        raise _damaged(d, exc) from exc
        except (ValueError, TypeError) as exc:  # what SQLite keeps as any type: a training time, a record entry
            raise StoreInconsistent(f"a ledger row is damaged ({type(exc).__name__}: {exc}): `spamfilter db check` lists such rows") from None
        return result

    def add_counts(self, token_list: Sequence[str], delta: TokenCounts, classes: ClassCounts) -> CountsWritten:
        """Add ``delta`` (2, len(token_list)) to the tokens' counts and
        ``classes`` to the class totals; returns the new counts.

        Negative deltas untrain. Keeps ``doc_histogram`` in step, deletes
        tokens whose message counts drop to zero in both classes, and
        increases the model version by one. Raises ``StoreError`` if any
        count would go negative, and ``CountLimitError`` if one would pass
        ``MAX_COUNT`` (the caller's transaction then rolls back, so nothing
        is written).
        """
        token_list = list(token_list)
        if len(token_list) != len(delta):
            raise ValueError("token_list and delta differ in length")
        new = TokenCounts.zeros(len(token_list))
        if token_list:
            columns = np.concatenate([delta.doc_count, delta.term_count]).tolist()
            new = _counts_at(token_list, self.counts_sql.upsert_tokens(self.owner, self.today, token_list, columns))
            full = np.flatnonzero((new.doc_count > MAX_COUNT).any(axis=0) | (new.term_count > MAX_COUNT).any(axis=0))
            if full.size:
                raise _past_limit(f"token {token_list[int(full[0])]!r}")
            bad = new.any_negative()
            if bad is not None:
                raise StoreError(f"count of token {token_list[bad]!r} would go negative: the store is inconsistent (run `spamfilter db check`)")
            histogram = {key: n for key, n in histogram_delta(new - delta, new).items() if n != 0}
            self._add_histogram(histogram)
            if not new.known().all():
                self.counts_sql.delete_dead(self.owner, token_list)
        else:
            histogram = {}
        for label in (HAM, SPAM):
            values = classes.of_class(label)
            if any(values):
                # A REAL here is SQLite's sum past 2^63 - 1, of a total that was past the limit before.
                written = self.counts_sql.add_totals(self.owner, label, values)
                if any(type(v) is not int or v > MAX_COUNT for v in written):
                    raise _past_limit(f"the {Label(label).decision} class totals")
                if min(written) < 0:
                    raise StoreInconsistent(
                        f"the {Label(label).decision} class totals would go negative: the database is damaged (`spamfilter db check` lists the problems)"
                    )
        return CountsWritten(token_list, new, self.counts_sql.bump_version(self.owner), classes, histogram)

    def feature_stats(self, width: int, owner: str | None = None) -> FeatureStats:
        """The sums of the first ``width`` message features per class (of
        this transaction's owner, or of ``owner``); zeros where none."""
        own = self.owner if owner is None else owner
        out = FeatureStats.zeros(width)
        t = feature_stats.c
        query = sa.select(t.label, t.feature, t.n, t.total, t.total_sq).where(t.owner == own)
        for label, i, n, total, total_sq in self.conn.execute(query):
            if 0 <= i < width:
                out.n[label, i], out.total[label, i], out.total_sq[label, i] = n, total, total_sq
        return out

    def add_feature_stats(self, delta: FeatureStats) -> None:
        """Add ``delta`` to this owner's feature sums: one upsert
        (count = count + delta, atomic on both backends)."""
        rows = [
            {"owner": self.owner, "label": c, "feature": i, "n": int(delta.n[c, i]), "total": int(delta.total[c, i]), "total_sq": int(delta.total_sq[c, i])}
            for c in (HAM, SPAM)
            for i in range(delta.n.shape[1])
            if delta.n[c, i] or delta.total[c, i] or delta.total_sq[c, i]
        ]
        if rows:
            self.conn.execute(self.sql.add_feature_stats, rows)

    def calibration_history(self, bins: int, owner: str | None = None) -> FloatArray:
        """The calibration history of this transaction's owner (or of
        ``owner``): weights (2, bins), ham row 0, spam row 1; zeros where none."""
        out = np.zeros((2, bins))
        for label, b, weight in self.conn.execute(self.sql.calibration, {"own": self.owner if owner is None else owner}):
            if label in (HAM, SPAM) and 0 <= b < bins:
                out[label, b] = max(weight, 0.0)
        return out

    def record_calibration(self, decay: float, added: FloatArray) -> float:
        """Make this owner's calibration history ``decay * history + added``
        (an update and an upsert, each atomic on both backends), move its
        record clock by log(decay), and raise its record version
        (``record_version_owner``), so that another process's copy of the
        map is read again. The clock after."""
        self.lock_record()
        rows = [{"owner": self.owner, "label": c, "bin": b, "weight": float(added[c, b])} for c in (HAM, SPAM) for b in np.flatnonzero(added[c]).tolist()]
        if decay != 1.0:
            self.conn.execute(self.sql.decay_calibration, {"own": self.owner, "decay": decay})
            rows.append({"owner": self.owner, "label": CLOCK_LABEL, "bin": 0, "weight": math.log(decay)})
        if rows:
            self.conn.execute(self.sql.add_calibration, rows)
        return self.record_clock()

    def record_settings(self, owner: str | None = None) -> str | None:
        """The settings (JSON) this owner's (or ``owner``'s) record was written under, or None."""
        value = self.conn.execute(self.sql.record_settings, {"own": self.owner if owner is None else owner}).scalar()
        return None if value is None else str(value)

    def start_record(self, settings: str, *, afresh: bool) -> None:
        """Mark this owner's record as written under ``settings``; ``afresh``: first empty its
        history and drop the ledger's entries in it (recorded under other settings)."""
        if afresh:
            self.conn.execute(self.sql.clear_history, {"own": self.owner})
            self.conn.execute(self.sql.drop_record_entries, {"own": self.owner})
        self.conn.execute(self.sql.set_record_settings, {"owner": self.owner, "settings": settings})

    def lock_record(self) -> None:
        """Take this owner's calibration record for this transaction (its
        record version, as `record_calibration` does first): a process
        that records waits, so what is read of the record next stays what
        it is until this transaction ends (PostgreSQL reads committed
        rows)."""
        self.counts_sql.bump_version(schema.record_version_owner(self.owner))

    def record_clock(self) -> float:
        """This owner's record clock (0 before anything was recorded)."""
        clock = self.conn.execute(self.sql.record_clock, {"own": self.owner}).scalar()
        return 0.0 if clock is None else float(clock)

    def _add_histogram(self, delta: dict[tuple[int, int], int]) -> None:
        rows = [(label, k, n) for (label, k), n in sorted(delta.items()) if n != 0]
        if rows:
            self.counts_sql.add_histogram(self.owner, rows)

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
        query = sa.select(tokens.c.token, *(tokens.c[name] for name in COUNT_COLUMNS), tokens.c.last_seen).where(tokens.c.owner == self.owner).order_by(column)
        result = self.conn.execute(query, execution_options={"stream_results": True, "yield_per": chunk})
        for row in result:
            _whole([row[1:5]], "tokens")
            yield str(row[0]), row[1], row[2], row[3], row[4], row[5]

    def counts_out_of_range(self) -> list[str]:
        """This owner's stored counts that are not whole numbers from
        -MAX_COUNT to MAX_COUNT (tokens, class and untracked totals, the
        histogram), one line each: what ``totals`` and ``iter_tokens``
        refuse to read, and what could not be trained further."""
        found: list[str] = []
        keyed = (
            (tokens, tokens.c.token, COUNT_COLUMNS),
            (class_totals, class_totals.c.label, _TOTAL_COLUMNS),
            (untracked_totals, untracked_totals.c.label, _TOTAL_COLUMNS),
            (doc_histogram, doc_histogram.c.label, ("doc_count", "tokens")),
        )
        for table, key, names in keyed:
            columns = [table.c[name] for name in names]
            outside: list[sa.ColumnElement[bool]] = [(c > MAX_COUNT) | (c < -MAX_COUNT) for c in columns]
            if self.conn.dialect.name == "sqlite":
                outside += [sa.func.typeof(c) != "integer" for c in columns]
            query = sa.select(key, *columns).where((table.c.owner == self.owner) & sa.or_(*outside)).order_by(key)
            for row in self.conn.execute(query):
                where = f"token {row[0]!r}" if table is tokens else f"{Label(row[0]).decision}"
                found += [
                    f"{table.name} {where} {name} is {value!r}" for name, value in zip(names, row[1:]) if type(value) is not int or not -MAX_COUNT <= value <= MAX_COUNT
                ]
        # Ledger rows no command can read: a label neither ham nor spam; in
        # SQLite, which keeps any type, a training time or a record entry
        # that is not one.
        when = sa.type_coerce(messages.c.trained_at, sa.Text)
        bad: sa.ColumnElement[bool] = messages.c.label.not_in([HAM, SPAM])
        if self.conn.dialect.name == "sqlite":
            typeof = sa.func.typeof
            bad = bad | sa.or_(
                sa.func.datetime(when).is_(None),
                when.op("NOT GLOB")("[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]*"),
                typeof(messages.c.record_bin).not_in(["integer", "null"]),
                typeof(messages.c.record_weight).not_in(["integer", "real", "null"]),
            )
        query = sa.select(messages.c.digest, messages.c.label, when).where((messages.c.owner == self.owner) & bad).order_by(messages.c.digest)
        found += [f"messages {d}: label {label!r}, trained at {at!r}" for d, label, at in self.conn.execute(query)]
        return found

    def iter_ledger(self, chunk: int = 500, on_damaged: Callable[[str, str], None] | None = None) -> Iterator[tuple[int, dict[str, int]]]:
        """(label, token_counts) of every message in this owner's ledger, streamed
        in the order they were trained (ties: by digest). An entry that
        cannot be read raises ``StoreInconsistent``, or with ``on_damaged``
        is passed to it (digest, why) and left out."""
        query = (
            sa.select(messages.c.digest, messages.c.label, messages.c.token_counts)
            .where(messages.c.owner == self.owner)
            .order_by(messages.c.trained_at, messages.c.digest)
        )
        for digest, label, blob in self.conn.execute(query, execution_options={"stream_results": True, "yield_per": chunk}):
            try:
                if label not in (HAM, SPAM):
                    raise DamagedEntry(f"label {label!r}")
                counts = unpack_token_counts(blob)
            except DamagedEntry as exc:
                if on_damaged is None:
                    raise _damaged(digest, exc) from exc
                on_damaged(digest, str(exc))
                continue
            yield int(label), counts

    def ledger_feature_sums(self, width: int, chunk: int = 500) -> FeatureStats:
        """The feature sums this owner's ledger gives: over its entries that
        carry ``width`` features (one unreadable is left out; `iter_ledger`
        names it)."""
        out = FeatureStats.zeros(width)
        query = sa.select(messages.c.label, messages.c.token_counts).where(messages.c.owner == self.owner)
        for label, blob in self.conn.execute(query, execution_options={"stream_results": True, "yield_per": chunk}):
            try:
                x = np.asarray(unpack_features(blob), dtype=np.int64)
            except DamagedEntry:
                continue
            if x.size == width:
                out.n[int(label)] += 1
                out.total[int(label)] += x
                out.total_sq[int(label)] += x * x
        return out

    def bump_version(self) -> int:
        """Increase this owner's model version (a change that is not a count
        write, e.g. a new choice of one-dependence parents); the new version."""
        return self.counts_sql.bump_version(self.owner)

    @property
    def insight(self) -> InsightRows:
        """What a person inspects of this owner's model (``spamfilter.store.insight_rows``)."""
        return InsightRows(self.conn, self.owner)

    @property
    def imap(self) -> ImapRows:
        """This owner's IMAP state (``spamfilter.store.imap_rows``)."""
        return ImapRows(self.conn, self.sql, self.owner)

    @property
    def pairs(self) -> PairTables:
        """This owner's one-dependence counts (``spamfilter.store.pairs``)."""
        return self.pairs_of(self.owner)

    def pairs_of(self, owner: str) -> PairTables:
        """The one-dependence counts of ``owner``'s model."""
        return PairTables(self.conn, owner)

    def ledger_counts(self) -> IntArray:
        """Messages per class the ledger holds, (2,): the class totals less the untracked."""
        messages_ = np.zeros(2, dtype=np.int64)
        for label, m, _, _ in self.counts_sql.select_totals(self.owner):
            messages_[label] = m
        return messages_ - self.untracked().messages

    def untracked(self) -> ClassCounts:
        """What the ledger does not account for in this owner's class totals
        (see the module docstring): zeros for a store never pruned or
        imported into."""
        out = ClassCounts.zeros()
        query = sa.select(untracked_totals.c.label, untracked_totals.c.messages, untracked_totals.c.terms, untracked_totals.c.binary_terms).where(
            untracked_totals.c.owner == self.owner
        )
        for label, m, t, b in _whole(list(self.conn.execute(query)), "untracked_totals"):
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
        if shrinks and isinstance(self.counts_sql, _PgCountSQL):
            # A prune (SHARE ROW EXCLUSIVE) must not commit between reading
            # `untracked` and the subtraction: the strict path would then
            # meet its deleted tokens. ROW EXCLUSIVE, which every writer
            # takes anyway, waits for a prune and keeps one out, and lets
            # other writers through. (SQLite's BEGIN IMMEDIATE already does.)
            self.counts_sql.cursor.execute("LOCK TABLE tokens IN ROW EXCLUSIVE MODE")
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
        effective = TokenCounts(np.where(shrinking, docs - old.doc_count, delta.doc_count), np.where(shrinking, terms - old.term_count, delta.term_count))
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
                'SELECT token FROM tokens WHERE owner = %s AND token = ANY(%s::text[]) ORDER BY token COLLATE "C" FOR UPDATE', (self.owner, list(token_list))
            )

    def exclude_writers(self) -> None:
        """Keep every other writer of the counts out until this transaction
        ends, so what it reads stays what it writes over. SQLite's write
        transaction (BEGIN IMMEDIATE) does so already; on PostgreSQL locks
        on the tables a writer of counts writes first, in the order it does
        (the message features' sums, then the tokens), so that a writer
        waits before it holds anything this transaction will touch: one that
        held its features' row while waiting for the tokens deadlocked with
        a `db import --replace` deleting that row."""
        if self.conn.dialect.name == "postgresql":
            self.conn.execute(sa.text("LOCK TABLE feature_stats, tokens IN SHARE ROW EXCLUSIVE MODE"))

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
        if not dry_run:
            # The count, the histogram buckets and the delete below are three
            # statements: all three must see the same tokens.
            self.exclude_writers()
        condition = (tokens.c.owner == self.owner) & ((tokens.c.ham_docs + tokens.c.spam_docs) < min_count)
        if last_seen_by is not None:
            old = tokens.c.last_seen.is_(None) | (tokens.c.last_seen <= last_seen_by)
            if self.conn.dialect.name == "sqlite":
                # A date a process of the code before revision 0008 wrote as
                # ISO text (`DayNumber`): SQLite ranks text above every number.
                as_text = sa.type_coerce(tokens.c.last_seen, sa.Text)
                old = old | ((sa.func.typeof(as_text) == "text") & (sa.func.date(as_text) <= last_seen_by.isoformat()))
            condition = condition & old
        sums = [sa.func.coalesce(sa.func.sum(tokens.c[name]), 0) for name in COUNT_COLUMNS]
        # PostgreSQL sums bigints as numeric (a Decimal); SQLite's sum of a
        # column holding text is a REAL, which _whole refuses.
        found = self.conn.execute(sa.select(sa.func.count(), *sums).where(condition)).one()
        row = [int(x) if isinstance(x, Decimal) and x == x.to_integral_value() else x for x in found]
        if any(type(x) is not int for x in row):
            # A sum, not a stored value: name the fault, not the sum.
            raise StoreInconsistent("tokens holds a count that is not a whole number: the database is damaged (`spamfilter db check` lists the problems)")
        removed = int(row[0])
        hd, sd, ht, st = (int(x) for x in row[1:])
        taken = ClassCounts(np.zeros(2, dtype=np.int64), np.array([ht, st], dtype=np.int64), np.array([hd, sd], dtype=np.int64))
        if dry_run or removed == 0:
            return removed, taken
        hist_delta: dict[tuple[int, int], int] = {}
        for label, name in ((HAM, "ham_docs"), (SPAM, "spam_docs")):
            column = tokens.c[name]
            for k, n in _whole(list(self.conn.execute(sa.select(column, sa.func.count()).where(condition).group_by(column))), "tokens", start=0):
                hist_delta[(int(label), int(k))] = -int(n)
        pruned = {str(t) for (t,) in self.conn.execute(sa.delete(tokens).where(condition).returning(tokens.c.token))}
        self._add_histogram(hist_delta)
        for label in (HAM, SPAM):
            self.counts_sql.add_totals(self.owner, label, (-taken).of_class(label))
        # The class totals lost `taken`, the ledger's sums what its entries
        # lost: untracked stays their difference (zero for a store whose
        # counts all came from its ledger).
        self.add_untracked(self._drop_from_ledger(pruned) - taken)
        self.counts_sql.bump_version(self.owner)
        return removed, taken

    def _drop_from_ledger(self, pruned: set[str]) -> ClassCounts:
        """Take the ``pruned`` tokens out of this owner's ledger entries, so
        that forgetting or relabelling a message later subtracts only what
        is left of it: a pruned token trained again by a later message is
        that message's alone. What the ledger's sums lost (terms and
        binary_terms per class).

        A one-dependence selection's pair counts are sums over the entries
        (a parent's occurrences are the sizes of the messages that hold
        it): whoever prunes counts them again from the entries left
        (``filter.dependence.recount``).
        """
        lost = ClassCounts.zeros()
        if not pruned:
            return lost
        query = sa.select(messages.c.digest, messages.c.label, messages.c.token_counts).where(
            (messages.c.owner == self.owner) & (messages.c.digest > sa.bindparam("after"))
        )
        after = ""
        while rows := self.conn.execute(query.order_by(messages.c.digest).limit(_CHUNK), {"after": after}).all():
            after = str(rows[-1][0])
            changed = []
            for digest, label, blob in rows:
                try:
                    counts = unpack_token_counts(blob)
                    features = unpack_features(blob)
                except DamagedEntry as exc:
                    raise _damaged(digest, exc) from exc
                gone = pruned.intersection(counts)
                if gone:
                    lost.terms[label] += sum(counts.pop(t) for t in gone)
                    lost.binary_terms[label] += len(gone)
                    changed.append({"d": digest, "entry": pack_ledger_entry(counts, features)})
            if changed:
                self.conn.execute(self.sql.rewrite_ledger, [{"own": self.owner, **row} for row in changed])
        return lost

    def clear_model(self) -> None:
        """Delete this owner's whole model: tokens, totals, histogram, ledger."""
        own = self.owner
        self.conn.execute(sa.delete(tokens).where(tokens.c.owner == own))
        self.conn.execute(sa.delete(doc_histogram).where(doc_histogram.c.owner == own))
        self.conn.execute(sa.delete(messages).where(messages.c.owner == own))
        self.conn.execute(sa.delete(class_totals).where(class_totals.c.owner == own))
        self.conn.execute(sa.delete(untracked_totals).where(untracked_totals.c.owner == own))
        self.conn.execute(sa.delete(feature_stats).where(feature_stats.c.owner == own))
        self.conn.execute(sa.delete(calibration).where(calibration.c.owner == own))
        self.conn.execute(self.sql.forget_record_settings, {"own": own})
        self.pairs.clear()
        self.counts_sql.bump_version(own)


def _past_limit(what: str) -> CountLimitError:
    """The error for a write that took a count of ``what`` past ``MAX_COUNT``."""
    return CountLimitError(
        f"training this would take a count of {what} past {MAX_COUNT} (2^62 - 1), the most the "
        "store keeps: nothing was written (`spamfilter db check` tells whether the counts are sound)"
    )


def _damaged(digest: str, exc: DamagedEntry) -> StoreInconsistent:
    return StoreInconsistent(f"the ledger entry of message {digest} is damaged ({exc}): `spamfilter db check` lists such entries")
