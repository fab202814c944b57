"""What an ``imap run`` reports: each thing it did to a message or folder
(``Event``, for progress and ``--verbose``), and its counts (``RunSummary``).
"""

from __future__ import annotations

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

    def see(self, folder: str, uidvalidity: int, uids: Iterable[int]) -> None:
        """Count these messages of ``folder`` as seen, once each."""
        known = self.counted.setdefault((folder, uidvalidity), set())
        before = len(known)
        known.update(uids)
        self.seen += len(known) - before

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
