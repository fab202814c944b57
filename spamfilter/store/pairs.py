"""The one-dependence tables of one owner, inside a transaction (``StoreTransaction.pairs``).

aode_parents    the chosen parent tokens p with D[c,p] (messages holding p)
                and N[c,p] (their distinct tokens, summed), per class; a
                parent's index is its place in token order
aode_pairs      one row per child token j: D[c,p,j] for every parent p seen
                with it (p = j included when j is a parent: it repeats
                D[c,p]), packed as little-endian int32 triples (parent
                index, ham count, spam count) in parent order, zero counts
                left out
aode_selection  how many messages the ledger held when they were chosen

Every count covers the messages of the ledger (``messages``), so training,
``forget`` and ``mark`` change them by exactly what the message's ledger
entry holds, and ``replace`` rebuilds them from the ledger. One row per
child keeps a batch's read to one row per token it holds (a row per pair
was 3,400 rows a message on spamassassin mail, most of a classify run).

On PostgreSQL, a writer of the counts holds a shared transaction-level
advisory lock of the owner, and ``replace`` an exclusive one, so a choice
of parents never interleaves with a training step; the child rows a step
changes are locked in token order (FOR UPDATE) before they are read.
SQLite's write transaction holds the whole database already.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np
import numpy.typing as npt
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from spamfilter.counts import IntArray
from spamfilter.store.schema import aode_pairs, aode_parents, aode_selection

#: A child's pair counts: rows of (parent index, D[ham,p,j], D[spam,p,j]),
#: shape (k, 3), stored as little-endian int32 (plain integer rows: numpy
#: concatenates those far faster than structured records).
Pairs = npt.NDArray[np.int64]
PAIR_COLUMNS = 3

# Rows per statement, far below both backends' bound-variable limits.
_CHUNK = 2000

ParentRow = tuple[str, int, int, int, int]  # token, ham_docs, spam_docs, ham_terms, spam_terms


def unpack(blob: bytes) -> Pairs:
    """The rows of a packed child."""
    return np.frombuffer(blob, dtype="<i4").reshape(-1, PAIR_COLUMNS).astype(np.int64)


def pack(rows: Pairs) -> bytes:
    """Inverse of ``unpack``."""
    if rows.size and (rows.max() > np.iinfo(np.int32).max or rows.min() < 0):
        raise ValueError("a pair count out of the int32 range")
    return rows.astype("<i4").tobytes()


class PairTables:
    """Reads and writes of one owner's one-dependence counts in ``conn``'s transaction."""

    def __init__(self, conn: Connection, owner: str) -> None:
        self.conn = conn
        self.owner = owner
        self.postgres = conn.dialect.name == "postgresql"

    def lock(self, *, exclusive: bool) -> None:
        """Take the owner's advisory lock until the transaction ends (PostgreSQL)."""
        if self.postgres:
            name = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
            self.conn.execute(sa.text(f"SELECT {name}(hashtext(:key))"), {"key": "spamfilter-aode:" + self.owner})

    def parents(self) -> tuple[list[str], IntArray, IntArray]:
        """The parents in index order, D[c,p] and N[c,p], each (2, P)."""
        t = aode_parents.c
        rows = self.conn.execute(sa.select(t.token, t.ham_docs, t.spam_docs, t.ham_terms, t.spam_terms).where(t.owner == self.owner).order_by(t.token)).all()
        values = np.array([r[1:] for r in rows], dtype=np.int64).reshape(-1, 4)
        names = [str(r[0]) for r in rows]
        # the index order is Python's string order, whatever the database collation
        order = sorted(range(len(names)), key=names.__getitem__)
        values = values[order]
        return [names[i] for i in order], values[:, 0:2].T.copy(), values[:, 2:4].T.copy()

    def children(self, token_list: Sequence[str], *, for_update: bool = False) -> dict[str, Pairs]:
        """The packed pair counts of the tokens of ``token_list`` that are
        children (the others are left out); ``for_update`` locks their rows."""
        t = aode_pairs.c
        query = sa.select(t.token, t.counts).where((t.owner == self.owner) & t.token.in_(sa.bindparam("keys", expanding=True)))
        if for_update and self.postgres:
            query = query.order_by(t.token.collate("C")).with_for_update()
        out: dict[str, Pairs] = {}
        wanted = sorted(set(token_list))
        for start in range(0, len(wanted), _CHUNK):
            for token, blob in self.conn.execute(query, {"keys": wanted[start : start + _CHUNK]}):
                out[str(token)] = unpack(bytes(blob))
        return out

    def all_children(self) -> dict[str, Pairs]:
        """Every child's packed counts."""
        t = aode_pairs.c
        rows = self.conn.execute(sa.select(t.token, t.counts).where(t.owner == self.owner))
        return {str(token): unpack(bytes(blob)) for token, blob in rows}

    def put_children(self, rows: Mapping[str, Pairs]) -> None:
        """Write new packed counts for existing child rows."""
        t = aode_pairs.c
        update = sa.update(aode_pairs).where((t.owner == sa.bindparam("own")) & (t.token == sa.bindparam("key"))).values(counts=sa.bindparam("blob"))
        values = [{"own": self.owner, "key": token, "blob": pack(records)} for token, records in rows.items()]
        for start in range(0, len(values), _CHUNK):
            self.conn.execute(update, values[start : start + _CHUNK])

    def add_parents(self, parent_rows: Sequence[ParentRow]) -> None:
        """Add signed changes to the parents' counts (atomic on both backends)."""
        if not parent_rows:
            return
        p = aode_parents.c
        names = ("ham_docs", "spam_docs", "ham_terms", "spam_terms")
        update = (
            sa.update(aode_parents)
            .where((p.owner == sa.bindparam("own")) & (p.token == sa.bindparam("key")))
            .values({name: p[name] + sa.bindparam("d_" + name) for name in names})
        )
        self.conn.execute(update, [{"own": self.owner, "key": r[0], **{"d_" + n: v for n, v in zip(names, r[1:])}} for r in parent_rows])

    def selected_at(self) -> int | None:
        """How many messages the ledger held when the parents were chosen; None if never."""
        t = aode_selection.c
        value = self.conn.execute(sa.select(t.messages).where(t.owner == self.owner)).scalar_one_or_none()
        return None if value is None else int(value)

    def replace(self, parent_rows: Sequence[ParentRow], children: Mapping[str, Pairs], messages: int) -> None:
        """Put these parents and children's packed counts in place of the
        owner's, chosen when the ledger held ``messages`` messages."""
        self.lock(exclusive=True)
        self.clear()
        keys = ("token", "ham_docs", "spam_docs", "ham_terms", "spam_terms")
        rows: list[dict[str, Any]] = [{"owner": self.owner, **dict(zip(keys, r))} for r in parent_rows]
        if rows:
            self.conn.execute(sa.insert(aode_parents), rows)
        rows = [{"owner": self.owner, "token": token, "counts": pack(records)} for token, records in children.items()]
        for start in range(0, len(rows), _CHUNK):
            self.conn.execute(sa.insert(aode_pairs), rows[start : start + _CHUNK])
        self.conn.execute(sa.insert(aode_selection), [{"owner": self.owner, "messages": messages, "selected_at": datetime.now(timezone.utc)}])

    def clear(self) -> None:
        """Drop the owner's parents, pair counts and selection."""
        for table in (aode_pairs, aode_parents, aode_selection):
            self.conn.execute(sa.delete(table).where(table.c.owner == self.owner))
