"""What ``imap run`` remembers of an account, in the store's IMAP tables:
each folder's UIDVALIDITY, the UIDs handled with their digests and
keywords, and a record per message (``ImapRecord``). Reached as
``StoreTransaction.imap``, inside the transaction's connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from spamfilter.store.schema import _CHUNK
from spamfilter.store.statements import _Statements


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


class ImapRows:
    """One owner's IMAP state, read and written in an open transaction."""

    def __init__(self, conn: Connection, statements: _Statements, owner: str) -> None:
        self.conn = conn
        self.sql = statements
        self.owner = owner

    def _key(self, account: str) -> str:
        """The ``account`` column of this owner's IMAP state: the account's
        name, prefixed by the owner's name and a unit separator for a user
        other than the default (user names are printable, so two users'
        accounts of the same name never share a key)."""
        return account if not self.owner else f"{self.owner}\x1f{account}"

    def uidvalidity(self, account: str, folder: str) -> int | None:
        """The UIDVALIDITY recorded for the folder, or None if never seen."""
        row = self.conn.execute(self.sql.imap_validity, {"acct": self._key(account), "fold": folder}).first()
        return None if row is None else int(row[0])

    def set_uidvalidity(self, account: str, folder: str, uidvalidity: int) -> None:
        """Record a folder's UIDVALIDITY; the UIDs handled under the old one are dropped."""
        self.conn.execute(self.sql.clear_imap_uids, {"acct": self._key(account), "fold": folder})
        self.conn.execute(self.sql.set_imap_validity, [{"account": self._key(account), "folder": folder, "uidvalidity": uidvalidity}])

    def uids(self, account: str, folder: str) -> dict[int, tuple[str, int | None]]:
        """UID -> (digest, keywords) of the folder's messages already handled;
        keywords is what ``set_keywords`` last recorded, or None."""
        rows = self.conn.execute(self.sql.imap_uids, {"acct": self._key(account), "fold": folder})
        return {int(uid): (str(d), None if k is None else int(k)) for uid, d, k in rows}

    def set_keywords(self, account: str, folder: str, rows: Sequence[tuple[int, int]]) -> None:
        """Record (uid, keywords) of handled messages (keywords: a bit set the caller defines)."""
        if rows:
            params = [{"acct": self._key(account), "fold": folder, "u": uid, "k": k} for uid, k in rows]
            self.conn.execute(self.sql.set_imap_keywords, params)

    def add_uids(self, account: str, folder: str, rows: Sequence[tuple[int, str]]) -> None:
        """Mark (uid, digest) pairs of the folder as handled."""
        if rows:
            values = [{"account": self._key(account), "folder": folder, "uid": uid, "digest": d} for uid, d in rows]
            self.conn.execute(self.sql.add_imap_uids, values)

    def delete_uids(self, account: str, folder: str, uids: Sequence[int]) -> None:
        """Forget UIDs that are no longer in the folder."""
        uids = list(uids)
        for start in range(0, len(uids), _CHUNK):
            params = {"acct": self._key(account), "fold": folder, "keys": uids[start : start + _CHUNK]}
            self.conn.execute(self.sql.delete_imap_uids, params)

    def records(self, account: str, digests: Sequence[str]) -> dict[str, ImapRecord]:
        """The records of those digests that have one."""
        result: dict[str, ImapRecord] = {}
        digests = list(digests)
        for start in range(0, len(digests), _CHUNK):
            params = {"acct": self._key(account), "keys": digests[start : start + _CHUNK]}
            for row in self.conn.execute(self.sql.imap_records, params).mappings():
                result[row["digest"]] = _imap_record(row)
        return result

    def adopt(self, account: str, formers: Mapping[str, str]) -> None:
        """Move the records and handled UIDs kept under a message's former
        digest (``mail.former_digest``; former -> now) to its digest now."""
        if formers:
            params = [{"acct": self._key(account), "old": old, "new": new} for old, new in formers.items()]
            self.conn.execute(self.sql.adopt_imap_record, params)
            self.conn.execute(self.sql.adopt_imap_uids, params)

    def pending(self, account: str, source: str) -> list[ImapRecord]:
        """The records of moves out of ``source`` not yet seen to be done."""
        return [_imap_record(row) for row in self.conn.execute(self.sql.imap_pending, {"acct": self._key(account), "src": source}).mappings()]

    def put_records(self, account: str, records: Sequence[ImapRecord]) -> None:
        """Insert or replace records."""
        if not records:
            return
        now = datetime.now(timezone.utc)
        values = [
            {
                "account": self._key(account),
                "digest": r.digest,
                "label": r.label,
                "origin": r.origin,
                "folder": r.folder,
                "pending": r.pending,
                "log_odds": r.log_odds,
                "updated_at": now,
                "source": r.source or None,
            }
            for r in records
        ]
        self.conn.execute(self.sql.put_imap_records, values)


def _imap_record(row: sa.RowMapping) -> ImapRecord:
    return ImapRecord(row["digest"], int(row["label"]), row["origin"], row["folder"], bool(row["pending"]), row["log_odds"], row["source"] or "")
