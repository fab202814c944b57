"""What the filter answers: a message's verdict, what a training call did,
the size of the model, one step of an online run (``spamfilter.filter.Filter``),
and what a schema upgrade did (``spamfilter.filter.upgrade_database``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spamfilter.verdicts import Decision


@dataclass(frozen=True, slots=True)
class Refusal:
    """A message that could not be read as mail; the run went on without it."""

    source: str
    reason: str

    @property
    def why(self) -> str:
        """The reason without the source, which a reason from the parser
        starts with already (for a line that names the source itself)."""
        return self.reason.removeprefix(f"{self.source}: ")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The filter's answer for one message.

    score: the calibrated P(spam|x) (``spamfilter.nb.calibration``): of the
        messages scored p, a share p was spam in the model's history.
    log_odds: the model's own log P(spam|x) - log P(ham|x), unbounded; rank by it.
    verdict: spam, ham or unsure, the loss matrix's decision on ``score``.
    """

    source: str
    digest: str
    score: float
    log_odds: float
    verdict: Decision


@dataclass(frozen=True, slots=True)
class TrainSummary:
    """What a train / forget / mark call did, message by message counts.

    trained: added to the model with the requested label, per class (ham, spam).
    unchanged: already trained with that label (training is idempotent).
    relabelled: moved from the other class (``mark``).
    conflicts: trained with the other class; ``train`` leaves them, ``mark`` moves them.
    forgotten: removed from the model (``forget``).
    unknown: ``forget`` of a message that was never trained.
    skipped: scored right by enough not to be trained (``train`` in toe or tune mode).
    """

    trained_ham: int = 0
    trained_spam: int = 0
    unchanged: int = 0
    relabelled: int = 0
    conflicts: int = 0
    forgotten: int = 0
    unknown: int = 0
    refused: tuple[Refusal, ...] = field(default_factory=tuple)
    skipped: int = 0

    def __add__(self, other: TrainSummary) -> TrainSummary:
        return TrainSummary(
            self.trained_ham + other.trained_ham,
            self.trained_spam + other.trained_spam,
            self.unchanged + other.unchanged,
            self.relabelled + other.relabelled,
            self.conflicts + other.conflicts,
            self.forgotten + other.forgotten,
            self.unknown + other.unknown,
            self.refused + other.refused,
            self.skipped + other.skipped,
        )


@dataclass(frozen=True, slots=True)
class Stats:
    """Size of the model and of its database. ``calibration_messages``: the
    weight of the calibration record the scores are read off, in messages,
    each halved every ``calibration.HALF_LIFE`` recorded after it (0: no
    record, the scores are the model's own probability bounded to [0.01,
    0.99]). ``classified_by``: whose counts and record classify the user's
    mail; the user's own, or "" (the shared model) while ``shared_model =
    "fallback"`` stands in for a model still too small. The counts above
    it are always the user's own. ``calibration_changed``: the settings
    that differ from those the record was written under ("name: then ->
    now"); when there are any the record is not read (its weight is given
    as 0) until training records under the new ones."""

    ham_messages: int
    spam_messages: int
    tokens: int
    ham_tokens: int
    spam_tokens: int
    ham_terms: int
    spam_terms: int
    database: str
    size_bytes: int | None
    event_model: str
    alpha: float
    user: str = ""
    calibration_messages: float = 0.0
    classified_by: str = ""
    calibration_changed: tuple[str, ...] = ()

    def classifying_model(self, shared_model: str, min_messages: int) -> str | None:
        """In words, for a user whose mail another model classifies (the
        shared model, or the sum of both): whose counts the scores, the top
        words and the features come from. None for a model that classifies
        alone."""
        if self.classified_by != self.user:
            return f'the shared model, until this one has {min_messages} spam and {min_messages} ham (shared_model = "fallback")'
        if self.user and shared_model == "merge":
            return "this model's counts added to the shared model's (shared_model = \"merge\")"
        return None


@dataclass(frozen=True, slots=True)
class OnlineStep:
    """One message of an online run: the verdict it got before training,
    whether it was then trained, and the seconds each step took."""

    is_spam: bool
    result: Verdict | Refusal
    trained: bool
    classify_seconds: float
    train_seconds: float


@dataclass(frozen=True, slots=True)
class Upgraded:
    """What ``upgrade_database`` did: the schema revision before and after,
    and the bytes of free pages a SQLite file holds after it (a migration
    that rebuilds a table leaves the old one's pages free; None on
    PostgreSQL)."""

    before: str | None
    after: str | None
    free_bytes: int | None
