"""The store's reads for people: the tokens of a model with their counts in
token order (``top-words``, ``report``), and how many of the trained
messages were trained each day. Reached as ``StoreTransaction.insight``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import date

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from spamfilter.counts import TokenCounts
from spamfilter.errors import StoreInconsistent
from spamfilter.store.schema import COUNT_COLUMNS, messages, tokens
from spamfilter.verdicts import HAM, SPAM


class InsightRows:
    """One owner's model, read for a person in an open transaction."""

    def __init__(self, conn: Connection, owner: str) -> None:
        self.conn = conn
        self.owner = owner

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
        query = sa.select(day, messages.c.label, sa.func.count()).where(messages.c.owner == self.owner).group_by(day, messages.c.label).order_by(day, messages.c.label)
        result: list[tuple[date, int, int]] = []
        damaged = StoreInconsistent("a trained message has no training day or no label: the ledger is damaged (`spamfilter db check` lists such rows)")
        for when, label, n in self.conn.execute(query):
            if when is None or label not in (HAM, SPAM):  # SQLite keeps any text as a time, any label
                raise damaged
            try:
                on = when if isinstance(when, date) else date.fromisoformat(str(when))
            except ValueError:
                raise damaged from None
            result.append((on, int(label), int(n)))
        return result
