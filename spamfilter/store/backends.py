"""The hot count statements, one class per supported backend (SQLite, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

import numpy as np

from spamfilter.counts import TokenCounts
from spamfilter.errors import StoreInconsistent
from spamfilter.store.schema import day_number


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

    def add_totals(self, owner: str, label: int, values: tuple[int, int, int]) -> tuple[Any, ...]:
        """Add (messages, terms, binary_terms) to a class's totals; the new totals."""
        return self.rows(self.ADD_TOTALS, (owner, label, *values))[0]

    def bump_version(self, owner: str) -> int:
        return int(self.rows(self.BUMP_VERSION, (owner,))[0][0])

    def select_versions(self, owners: Sequence[str]) -> list[tuple[Any, ...]]:
        """(owner, version) rows of those of ``owners`` that have one. Read
        before every batch scored, so on the raw cursor: through SQLAlchemy
        the statement cost more than the rest of a daemon's fit."""
        marks = ",".join([self.PARAM] * len(owners))
        return self.rows(f"SELECT owner, version FROM model_versions WHERE owner IN ({marks})", list(owners))

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
        "terms = terms + excluded.terms, binary_terms = binary_terms + excluded.binary_terms "
        "RETURNING messages, terms, binary_terms"
    )
    BUMP_VERSION = "INSERT INTO model_versions (owner, version) VALUES (?, 1) ON CONFLICT (owner) DO UPDATE SET version = version + 1 RETURNING version"

    def select_tokens(self, owner: str, chunk: list[str]) -> list[tuple[Any, ...]]:
        marks = ",".join("?" * len(chunk))
        sql = f"SELECT token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens WHERE owner = ? AND token IN ({marks})"
        return self.rows(sql, [owner, *chunk])

    def _load_delta(self, token_list: list[str], columns: list[list[int]]) -> None:
        c = self.cursor
        c.execute("CREATE TEMP TABLE IF NOT EXISTS count_delta (token TEXT PRIMARY KEY, hd INTEGER, sd INTEGER, ht INTEGER, st INTEGER) WITHOUT ROWID")
        c.execute("DELETE FROM temp.count_delta")
        c.executemany("INSERT INTO temp.count_delta VALUES (?, ?, ?, ?, ?)", zip(token_list, *columns))

    def upsert_tokens(self, owner: str, today: date, token_list: list[str], columns: list[list[int]]) -> list[tuple[Any, ...]]:
        # A token's day moves to ``today`` only where a message adds to its
        # counts: forgetting one is not training it, and must not keep it
        # from `db prune --older-than`.
        self._load_delta(token_list, columns)
        # "WHERE true" tells SQLite's parser the ON CONFLICT belongs to the upsert.
        return self.rows(
            "INSERT INTO tokens (owner, token, ham_docs, spam_docs, ham_terms, spam_terms, last_seen) "
            "SELECT ?, token, hd, sd, ht, st, ? FROM temp.count_delta WHERE true "
            "ON CONFLICT (owner, token) DO UPDATE SET ham_docs = ham_docs + excluded.ham_docs, "
            "spam_docs = spam_docs + excluded.spam_docs, ham_terms = ham_terms + excluded.ham_terms, "
            "spam_terms = spam_terms + excluded.spam_terms, "
            "last_seen = CASE WHEN excluded.ham_docs > 0 OR excluded.spam_docs > 0 THEN excluded.last_seen ELSE last_seen END "
            "RETURNING token, ham_docs, spam_docs, ham_terms, spam_terms",
            (owner, day_number(today)),
        )

    def delete_dead(self, owner: str, token_list: list[str]) -> None:
        # token_list is the batch just upserted, still in temp.count_delta.
        self.cursor.execute("DELETE FROM tokens WHERE owner = ? AND ham_docs = 0 AND spam_docs = 0 AND token IN (SELECT token FROM temp.count_delta)", (owner,))

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
        "terms = class_totals.terms + excluded.terms, binary_terms = class_totals.binary_terms + excluded.binary_terms "
        "RETURNING class_totals.messages, class_totals.terms, class_totals.binary_terms"
    )
    BUMP_VERSION = "INSERT INTO model_versions AS v (owner, version) VALUES (%s, 1) ON CONFLICT (owner) DO UPDATE SET version = v.version + 1 RETURNING v.version"

    def select_tokens(self, owner: str, chunk: list[str]) -> list[tuple[Any, ...]]:
        return self.rows("SELECT token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens WHERE owner = %s AND token = ANY(%s::text[])", (owner, chunk))

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
            "spam_terms = t.spam_terms + excluded.spam_terms, "
            "last_seen = CASE WHEN excluded.ham_docs > 0 OR excluded.spam_docs > 0 THEN excluded.last_seen ELSE t.last_seen END "
            "RETURNING t.token, t.ham_docs, t.spam_docs, t.ham_terms, t.spam_terms",
            (owner, day_number(today), [token_list[i] for i in order], *columns),
        )

    def delete_dead(self, owner: str, token_list: list[str]) -> None:
        self.cursor.execute("DELETE FROM tokens WHERE owner = %s AND ham_docs = 0 AND spam_docs = 0 AND token = ANY(%s::text[])", (owner, token_list))

    def add_histogram(self, owner: str, rows: list[tuple[int, int, int]]) -> None:
        labels, ks, ns = ([row[i] for row in rows] for i in range(3))
        self.cursor.execute(
            "INSERT INTO doc_histogram AS h (owner, label, doc_count, tokens) "
            "SELECT %s, u.label, u.k, u.n FROM unnest(%s::smallint[], %s::bigint[], %s::bigint[]) AS u(label, k, n) "
            "ON CONFLICT (owner, label, doc_count) DO UPDATE SET tokens = h.tokens + excluded.tokens",
            (owner, labels, ks, ns),
        )
        self.cursor.execute("DELETE FROM doc_histogram WHERE owner = %s AND tokens = 0", (owner,))


def _whole(rows: Sequence[Sequence[Any]], table: str, start: int = 1) -> Sequence[Sequence[Any]]:
    """``rows`` of ``table``, once their values from column ``start`` on are
    seen to be whole numbers; else ``StoreInconsistent``. A SQLite sum past
    2^63 - 1 is kept as an inexact REAL, which no count array can hold:
    every command but ``db check`` refuses such a store, naming the check."""
    for row in rows:
        for value in row[start:]:
            if type(value) is not int:
                raise StoreInconsistent(f"{table} holds {value!r} where a count belongs: the database is damaged (`spamfilter db check` lists the problems)")
    return rows


def _counts_at(token_list: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> TokenCounts:
    """(token, ham_docs, spam_docs, ham_terms, spam_terms) rows as counts in
    the order of ``token_list``; zeros for tokens without a row."""
    out = TokenCounts.zeros(len(token_list))
    if rows:
        _whole(rows, "tokens")
        position = dict(zip(token_list, range(len(token_list))))
        columns = np.fromiter((position[row[0]] for row in rows), dtype=np.int64, count=len(rows))
        values = np.array([row[1:] for row in rows], dtype=np.int64).T
        out.doc_count[:, columns] = values[0:2]
        out.term_count[:, columns] = values[2:4]
    return out
