"""What ``imap run`` remembers of an account, read and written through the store.

``imapsync`` talks to the server and decides; this module owns its
transactions (as ``Filter`` owns its own). Each method is one
transaction, in the order the sync's crash safety needs them (see
``spamfilter.imap.sync``): nothing here is cached between calls, so a second
process syncing the same account sees what the first committed.

A dry run reads everything and writes nothing: every writing method is then
a no-op, and reading a folder whose UIDVALIDITY changed does not record the
new one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from spamfilter.config import ImapAccount
from spamfilter.errors import ConfigError
from spamfilter.filter import Filter
from spamfilter.imap.session import JUNK, NOT_JUNK, Fetched
from spamfilter.store import ImapRecord as ImapRecord

#: The junk keywords a message carries, as recorded per handled UID.
JUNK_BIT = 1
NOT_JUNK_BIT = 2


def keyword_bits(flags: Iterable[str]) -> int:
    """The ``JUNK_BIT`` / ``NOT_JUNK_BIT`` set of a message's ``flags``
    (keywords compare in any case, as in IMAP)."""
    lower = {f.lower() for f in flags}
    return (JUNK.lower() in lower) * JUNK_BIT | (NOT_JUNK.lower() in lower) * NOT_JUNK_BIT


def needs_training(record: ImapRecord | None, label: int) -> bool:
    """Whether a message so recorded is still to be trained with ``label``."""
    return record is None or record.label != label or record.origin == "filter"


def label_of(record: ImapRecord | None) -> int | None:
    return None if record is None else record.label


def log_odds_of(record: ImapRecord | None) -> float | None:
    return None if record is None else record.log_odds


def finished_move(record: ImapRecord) -> ImapRecord:
    """``record`` with its move no longer pending."""
    return ImapRecord(record.digest, record.label, record.origin, record.folder, False, record.log_odds)


@dataclass(frozen=True, slots=True)
class Arrival:
    """Messages a move put into ``folder``: the server's UIDVALIDITY there,
    each message's new UID with its digest, and (new UID, keyword bits)
    of the keywords they arrived with."""

    folder: str
    uidvalidity: int
    uids: Sequence[tuple[int, str]]
    keywords: Sequence[tuple[int, int]] = ()


def arrival(target: str, uidvalidity: int, new_uids: dict[int, int], moves: Sequence[tuple[Fetched, ImapRecord]]) -> Arrival:
    """The moved messages whose ``new_uids`` in ``target`` (of ``uidvalidity``) the server told."""
    told = [(new_uids[m.uid], r.digest, keyword_bits(m.flags)) for m, r in moves if m.uid in new_uids]
    return Arrival(target, uidvalidity, [(u, d) for u, d, _ in told], [(u, k) for u, _, k in told])


def folders_to_create(account: ImapAccount, missing: set[str]) -> set[str]:
    """Which of the ``missing`` folders a run creates: all of them, but with
    ``spam_action = "report"`` none (it changes nothing on the server),
    except the spam folder that trained spam is filed in (``trained_action
    = "move"``, which report leaves as it is). A folder to classify is
    never created: a misspelt one would filter nothing and say nothing, so
    it is ``ConfigError``."""
    absent = [folder for folder in account.classify_folders if folder in missing]
    if absent:
        raise ConfigError(f"imap.{account.name}.classify_folders: the server has no folder {absent[0]!r} (a folder to classify is never created)")
    if account.spam_action != "report":
        return missing
    return {account.spam_folder} & missing if account.trained_action == "move" else set()


class ImapState:
    """The IMAP state of one account (``account``) in ``spamfilter``'s store."""

    def __init__(self, spamfilter: Filter, account: str, *, dry_run: bool = False) -> None:
        self._store = spamfilter.store
        self.account = account
        self.dry_run = dry_run
        #: Per renumbered folder, digest -> the keyword bits recorded under
        #: its old UIDs (``renumbered``).
        self._before: dict[str, dict[str, int]] = {}
        #: A dry run's UIDs gone from each folder (``forget_uids``), which it
        #: does not write but which the rest of the run must not see.
        self._gone: dict[str, set[int]] = {}

    def records(self, digests: Sequence[str]) -> dict[str, ImapRecord]:
        """What is known of the messages with these digests."""
        with self._store.begin(write=False) as tx:
            return tx.imap.records(self.account, digests)

    def unchanged_by_training(self, digests: Sequence[str], is_spam: bool) -> set[int]:
        """The positions of ``digests`` that training them with this label
        would leave as they are: trained with it already, or a copy of an
        earlier one in the list (what ``Filter.mark`` counts as unchanged)."""
        with self._store.begin(write=False) as tx:
            labels = tx.trained_labels(list(set(digests)))
        label, seen, unchanged = int(is_spam), set(), set()
        for i, d in enumerate(digests):
            if labels.get(d) == label or d in seen:
                unchanged.add(i)
            seen.add(d)
        return unchanged

    def adopt(self, formers: Mapping[str, str]) -> None:
        """What was recorded under messages' former digests (former -> now:
        a store from before mailbox annotations were left out of digests)
        is theirs under the digests they have now."""
        if self.dry_run or not formers:
            return
        with self._store.begin() as tx:
            tx.imap.adopt(self.account, formers)

    def commit(self, folder: str, records: Sequence[ImapRecord] = (), handled: Sequence[tuple[int, str]] = (), keywords: Sequence[tuple[int, int]] = ()) -> None:
        """Write ``records``, mark (uid, digest) ``handled`` in ``folder`` and
        record the (uid, bits) ``keywords`` they have, in one transaction
        (a handled UID without recorded keywords has None)."""
        if self.dry_run or not (records or handled):
            return
        before = self._before.get(folder)
        if before:
            # Handled again under its new UIDs: a message keeps the keywords
            # last seen under the old ones, so a change the user made since
            # is still news to the keyword pass.
            digest_of = dict(handled)
            keywords = [(u, before.get(digest_of.get(u, ""), bits)) for u, bits in keywords]
        with self._store.begin() as tx:
            tx.imap.put_records(self.account, records)
            tx.imap.add_uids(self.account, folder, handled)
            tx.imap.set_keywords(self.account, folder, keywords)

    def handled(self, folder: str, uidvalidity: int) -> dict[int, str] | None:
        """UID -> digest of the messages handled in ``folder``; None when its
        UIDVALIDITY is not the recorded one (a new folder, or one the server
        renumbered: every message is new again, and its digest finds what is
        known of it). ``renumbered`` records the new one, once the moves a
        broken run left pending there are finished."""
        with self._store.begin(write=False) as tx:
            if tx.imap.uidvalidity(self.account, folder) != uidvalidity:
                return None
            return {u: d for u, (d, _) in tx.imap.uids(self.account, folder).items()}

    def renumbered(self, folder: str, uidvalidity: int) -> None:
        """Record ``folder``'s new UIDVALIDITY, dropping the UIDs recorded
        under the old one (their keyword bits kept by digest for ``commit``)."""
        if self.dry_run:
            return
        with self._store.begin() as tx:
            self._before[folder] = {d: bits for d, bits in tx.imap.uids(self.account, folder).values() if bits is not None}
            tx.imap.set_uidvalidity(self.account, folder, uidvalidity)

    def forget_uids(self, folder: str, uids: Sequence[int]) -> None:
        """Drop UIDs that are no longer in ``folder`` (a dry run only
        remembers them: a message the user moved out of the spam folder is
        then seen as moved back, as the real run sees it)."""
        if self.dry_run:
            self._gone.setdefault(folder, set()).update(uids)
            return
        if not uids:
            return
        with self._store.begin() as tx:
            tx.imap.delete_uids(self.account, folder, uids)

    def pending(self, folder: str) -> list[ImapRecord]:
        """Moves out of ``folder`` recorded as started and not as done."""
        with self._store.begin(write=False) as tx:
            return tx.imap.pending(self.account, folder)

    def folder_digests(self, folder: str) -> set[str]:
        """Digests of the messages handled in ``folder`` (as last seen)."""
        if not folder:
            return set()
        gone = self._gone.get(folder, set())
        with self._store.begin(write=False) as tx:
            return {d for u, (d, _) in tx.imap.uids(self.account, folder).items() if u not in gone}

    def keywords(self, folder: str, uidvalidity: int) -> dict[int, tuple[str, int | None]] | None:
        """UID -> (digest, keyword bits last seen) in ``folder``; None when the
        folder was renumbered since it was last read."""
        with self._store.begin(write=False) as tx:
            if tx.imap.uidvalidity(self.account, folder) != uidvalidity:
                return None
            return tx.imap.uids(self.account, folder)

    def set_keywords(self, folder: str, rows: Sequence[tuple[int, int]]) -> None:
        """Record the keyword bits now seen on (uid, bits) of ``folder``."""
        if self.dry_run:
            return
        with self._store.begin() as tx:
            tx.imap.set_keywords(self.account, folder, rows)

    def moves_done(self, folder: str, records: Sequence[ImapRecord], uids: Sequence[int], arrivals: Sequence[Arrival]) -> None:
        """Record moves out of ``folder`` as done: the ``records`` (no longer
        pending), their ``uids`` here dropped, and the new UIDs in the target
        folders whose UIDVALIDITY is the one recorded (the next run need not
        fetch those messages to recognise them), with their keywords."""
        if self.dry_run:
            return
        with self._store.begin() as tx:
            tx.imap.put_records(self.account, records)
            tx.imap.delete_uids(self.account, folder, uids)
            for arrival in arrivals:
                if tx.imap.uidvalidity(self.account, arrival.folder) == arrival.uidvalidity:
                    tx.imap.add_uids(self.account, arrival.folder, arrival.uids)
                    tx.imap.set_keywords(self.account, arrival.folder, arrival.keywords)
