"""The one-dependence tables of one owner, inside a transaction (``StoreTransaction.pairs``).

aode_parents    the chosen parent tokens p with D[c,p] (messages holding p)
                and N[c,p] (their distinct tokens, summed), per class
aode_children   the child tokens j (the parents among them) whose pairs with
                the parents are counted
aode_pairs      D[c,p,j] for each parent p and child j seen together (j = p
                included: it repeats D[c,p]); a row whose counts fall to zero
                is deleted
aode_selection  how many messages the ledger held when the parents were chosen

Every count covers the messages of the ledger (``messages``), so training,
``forget`` and ``mark`` change them by exactly what the message's ledger
entry holds, and ``replace`` rebuilds them from the ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection

from spamfilter.counts import IntArray
from spamfilter.store.schema import aode_children, aode_pairs, aode_parents, aode_selection

# Rows per statement: 5 values a pair row stays far below both backends' limits.
_CHUNK = 2000

ParentRow = tuple[str, int, int, int, int]  # token, ham_docs, spam_docs, ham_terms, spam_terms
PairRow = tuple[str, str, int, int]  # token, parent, ham_docs, spam_docs


class PairTables:
    """Reads and writes of one owner's one-dependence counts in ``conn``'s transaction."""

    def __init__(self, conn: Connection, owner: str) -> None:
        self.conn = conn
        self.owner = owner
        insert: Any = sqlite.insert
        if conn.dialect.name == "postgresql":
            from sqlalchemy.dialects import postgresql

            insert = postgresql.insert
        self._insert = insert

    def parents(self) -> tuple[list[str], IntArray, IntArray]:
        """The parents (sorted), D[c,p] and N[c,p], each (2, P)."""
        t = aode_parents.c
        rows = self.conn.execute(
            sa.select(t.token, t.ham_docs, t.spam_docs, t.ham_terms, t.spam_terms).where(t.owner == self.owner).order_by(t.token)
        ).all()
        values = np.array([r[1:] for r in rows], dtype=np.int64).reshape(-1, 4)
        return [str(r[0]) for r in rows], values[:, 0:2].T.copy(), values[:, 2:4].T.copy()

    def pair_rows(self, token_list: Sequence[str]) -> list[PairRow]:
        """(token, parent, D[ham,p,j], D[spam,p,j]) of every pair whose token is in ``token_list``."""
        t = aode_pairs.c
        query = sa.select(t.token, t.parent, t.ham_docs, t.spam_docs).where(
            (t.owner == self.owner) & t.token.in_(sa.bindparam("keys", expanding=True))
        )
        out: list[PairRow] = []
        for start in range(0, len(token_list), _CHUNK):
            chunk = list(token_list[start : start + _CHUNK])
            out += [(str(a), str(b), int(h), int(s)) for a, b, h, s in self.conn.execute(query, {"keys": chunk})]
        return out

    def children_among(self, token_list: Sequence[str]) -> set[str]:
        """The tokens of ``token_list`` that are children."""
        t = aode_children.c
        query = sa.select(t.token).where((t.owner == self.owner) & t.token.in_(sa.bindparam("keys", expanding=True)))
        out: set[str] = set()
        for start in range(0, len(token_list), _CHUNK):
            out.update(str(r[0]) for r in self.conn.execute(query, {"keys": list(token_list[start : start + _CHUNK])}))
        return out

    def selected_at(self) -> int | None:
        """How many messages the ledger held when the parents were chosen; None if never."""
        t = aode_selection.c
        value = self.conn.execute(sa.select(t.messages).where(t.owner == self.owner)).scalar_one_or_none()
        return None if value is None else int(value)

    def add(self, parent_rows: Sequence[ParentRow], pair_rows: Sequence[PairRow]) -> None:
        """Add signed changes to existing parents' counts and to pair counts
        (pairs are created as needed and deleted when they reach zero)."""
        p = aode_parents.c
        for token, hd, sd, ht, st in parent_rows:
            self.conn.execute(
                sa.update(aode_parents)
                .where((p.owner == self.owner) & (p.token == token))
                .values(ham_docs=p.ham_docs + hd, spam_docs=p.spam_docs + sd, ham_terms=p.ham_terms + ht, spam_terms=p.spam_terms + st)
            )
        if not pair_rows:
            return
        row = self._insert(aode_pairs)
        upsert = row.on_conflict_do_update(
            index_elements=[aode_pairs.c.owner, aode_pairs.c.token, aode_pairs.c.parent],
            set_={name: aode_pairs.c[name] + row.excluded[name] for name in ("ham_docs", "spam_docs")},
        )
        values = [{"owner": self.owner, "token": a, "parent": b, "ham_docs": h, "spam_docs": s} for a, b, h, s in pair_rows]
        for start in range(0, len(values), _CHUNK):
            self.conn.execute(upsert, values[start : start + _CHUNK])
        fallen = sorted({a for a, _, h, s in pair_rows if h < 0 or s < 0})
        t = aode_pairs.c
        dead = sa.delete(aode_pairs).where(
            (t.owner == self.owner) & t.token.in_(sa.bindparam("keys", expanding=True)) & (t.ham_docs == 0) & (t.spam_docs == 0)
        )
        for start in range(0, len(fallen), _CHUNK):
            self.conn.execute(dead, {"keys": fallen[start : start + _CHUNK]})

    def replace(self, parent_rows: Sequence[ParentRow], children: Sequence[str], pair_rows: Sequence[PairRow], messages: int) -> None:
        """Put these parents, children and pair counts in place of the
        owner's, chosen when the ledger held ``messages`` messages."""
        self.clear()
        rows = [{"owner": self.owner, "token": t} for t in children]
        for start in range(0, len(rows), _CHUNK):
            self.conn.execute(sa.insert(aode_children), rows[start : start + _CHUNK])
        if parent_rows:
            keys = ("token", "ham_docs", "spam_docs", "ham_terms", "spam_terms")
            self.conn.execute(sa.insert(aode_parents), [{"owner": self.owner, **dict(zip(keys, r))} for r in parent_rows])
        values = [{"owner": self.owner, "token": a, "parent": b, "ham_docs": h, "spam_docs": s} for a, b, h, s in pair_rows]
        for start in range(0, len(values), _CHUNK):
            self.conn.execute(sa.insert(aode_pairs), values[start : start + _CHUNK])
        self.conn.execute(
            sa.insert(aode_selection), [{"owner": self.owner, "messages": messages, "selected_at": datetime.now(timezone.utc)}]
        )

    def clear(self) -> None:
        """Drop the owner's parents, pair counts and selection."""
        for table in (aode_pairs, aode_children, aode_parents, aode_selection):
            self.conn.execute(sa.delete(table).where(table.c.owner == self.owner))
