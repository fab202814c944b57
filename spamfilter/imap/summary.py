"""What an ``imap run`` reports: each thing it did to a message or folder
(``Event``, for progress and ``--verbose``), and its counts (``RunSummary``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from spamfilter.verdicts import Decision


@dataclass(frozen=True, slots=True)
class Event:
    """One thing a run did (or, in a dry run, would do) to one message.

    kind: "classified", "moved", "flagged", "trained", "refused" or
    "created" for what was done to a message or folder; "kept" for a
    message left as it was, since the user had marked it ``$NotJunk``
    before the run saw it; "skipped" for keywords a folder would not keep,
    left out of a change; "scanned" (detail:
    how many new messages the folder has) and "fetched" (detail: how many
    came in one chunk) for progress.
    """

    kind: str
    folder: str
    uid: int
    detail: str
    dry_run: bool = False


@dataclass(slots=True)
class RunSummary:
    """Counts of one run (all passes of its retries together)."""

    seen: int = 0
    spam: int = 0
    ham: int = 0
    unsure: int = 0
    moved: int = 0
    flagged: int = 0
    trained_spam: int = 0
    trained_ham: int = 0
    errors: int = 0
    retries: int = 0
    created: list[str] = field(default_factory=list)
    #: --limit: how many more messages this run may classify (None: no limit).
    limit_left: int | None = None
    #: The UIDs counted in ``seen``, per (folder, UIDVALIDITY): a pass
    #: broken off and started again reads some of them twice.
    counted: dict[tuple[str, int], set[int]] = field(default_factory=dict, repr=False)
    #: The digests counted in ``seen``, per (folder, UIDVALIDITY), and what of
    #: a folder's earlier ones a new UIDVALIDITY of it has yet to meet: a
    #: folder renumbered between a broken pass and its retry is read again.
    digests: dict[tuple[str, int], Counter[str]] = field(default_factory=dict, repr=False)
    earlier: dict[tuple[str, int], Counter[str]] = field(default_factory=dict, repr=False)
    #: (folder, digest) of the messages this run moved (or set out to move)
    #: to a folder: a later pass that reads them there as new (the answer
    #: telling their new UIDs was lost, or not given) does not count them again.
    moved_in: Counter[tuple[str, str]] = field(default_factory=Counter, repr=False)
    #: (folder, digest, keyword) of keywords sent whose answer was lost with
    #: the connection: the server may have set them. By digest, since the
    #: folder may be renumbered before the pass after reads it.
    unconfirmed: Counter[tuple[str, str, str]] = field(default_factory=Counter, repr=False)

    def see(self, folder: str, uidvalidity: int, messages: Iterable[tuple[int, str]]) -> None:
        """Count these (uid, digest) messages of ``folder`` as seen, once
        each: not again when read again under the same UID, under a new
        UIDVALIDITY of the folder, or where this run moved them."""
        key = (folder, uidvalidity)
        uids = self.counted.setdefault(key, set())
        digests = self.digests.setdefault(key, Counter())
        if key not in self.earlier:
            self.earlier[key] = sum((c for (f, v), c in self.digests.items() if f == folder and v != uidvalidity), Counter())
        earlier = self.earlier[key]
        for uid, digest in messages:
            if uid in uids:
                continue
            uids.add(uid)
            if earlier[digest] > 0:
                earlier[digest] -= 1
            elif self.moved_in[folder, digest] > 0:
                self.moved_in[folder, digest] -= 1
            else:
                digests[digest] += 1
                self.seen += 1

    def moving(self, folder: str, digests: Iterable[str]) -> None:
        """Messages (by digest) this run is moving to ``folder``."""
        self.moved_in.update((folder, d) for d in digests)

    def flag_unsure(self, folder: str, digests: Iterable[str], keywords: Iterable[str]) -> None:
        """Keywords sent to the messages of ``digests`` whose answer was
        lost: set or not, the pass after finds out."""
        words = [k.lower() for k in keywords]
        self.unconfirmed.update((folder, d, k) for d in digests for k in words)

    def flag_resent(self, folder: str, digests: Iterable[str], keywords: Iterable[str]) -> None:
        """Keywords sent again to the messages of ``digests``: they lacked
        them, so a lost answer for them had not set them, and a byte-identical
        copy that carries them is not to be counted as set by this run."""
        for k in keywords:
            for d in digests:
                key = (folder, d, k.lower())
                if self.unconfirmed[key] > 0:
                    self.unconfirmed[key] -= 1

    def flag_found(self, folder: str, messages: Iterable[tuple[int, str]], keyword: str) -> list[int]:
        """These (uid, digest) messages carry ``keyword``: those this run had
        set it on without hearing so (``flag_unsure``) are counted flagged
        now. Their UIDs."""
        found = []
        for uid, digest in messages:
            key = (folder, digest, keyword.lower())
            if self.unconfirmed[key] > 0:
                self.unconfirmed[key] -= 1
                found.append(uid)
        self.flagged += len(found)
        return found

    def add_verdict(self, verdict: Decision) -> None:
        """Count one message given ``verdict``."""
        if verdict is Decision.SPAM:
            self.spam += 1
        elif verdict is Decision.HAM:
            self.ham += 1
        else:
            self.unsure += 1

    @property
    def classified(self) -> int:
        """Messages given a verdict."""
        return self.spam + self.ham + self.unsure

    def so_far(self) -> str:
        """What a run that gives up had done (it is recorded, and the next run goes on from there)."""
        trained = self.trained_spam + self.trained_ham
        if not (self.classified or self.moved or trained):
            return ""
        return f"; done and recorded before: {self.classified} classified, {self.moved} moved, {trained} trained"

    def as_dict(self) -> dict[str, int | list[str]]:
        """The counts, for JSON output."""
        return {
            "seen": self.seen,
            "classified": self.classified,
            "spam": self.spam,
            "ham": self.ham,
            "unsure": self.unsure,
            "moved": self.moved,
            "flagged": self.flagged,
            "trained_spam": self.trained_spam,
            "trained_ham": self.trained_ham,
            "errors": self.errors,
            "retries": self.retries,
            "created_folders": list(self.created),
        }
