"""``Filter``: one user's model in one store, read, trained and asked.

It owns the transactions: every training batch (``store.batch_size``
messages) is one transaction, so a killed process leaves the store at the
end of the last whole batch. The jobs are done by ``scoring`` (the model
read into memory, and the verdicts), ``training`` (the writes) and
``online`` (both, message by message); this class reads the mail, on worker
processes for long runs, and hands it to them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import partial

from spamfilter.analysis import Analysed, Analyser, analyse, analyse_labelled
from spamfilter.answers import OnlineStep, Refusal, Stats, TrainSummary, Upgraded, Verdict
from spamfilter.config import ONLINE_TRAIN_MODE, TUNE_MARGIN, Config, TrainMode, database_url
from spamfilter.filter import online
from spamfilter.filter.scoring import Scoring
from spamfilter.filter.training import Training, batched
from spamfilter.locations import default_location_url
from spamfilter.mail import MailItem
from spamfilter.nb import decision, model
from spamfilter.nb.calibration import MAP_BINS
from spamfilter.retry import retrying
from spamfilter.store import Store
from spamfilter.store.ledger import pack_ledger_entry
from spamfilter.tokenizer import Tokenizer
from spamfilter.verdicts import Label


class Filter:
    """A naive Bayes filter over one token store."""

    def __init__(self, store: Store, config: Config, *, jobs: int = 1, write_deadline: float | None = None) -> None:
        self.store = store
        self.config = config
        self.tokenizer = Tokenizer(config.tokenizer)
        self.analyser = Analyser(config.tokenizer, config.tokenizer.max_bytes, self.tokenizer)
        #: What ``train`` and ``mark`` read with: it also packs each message's
        #: ledger entry, on the reading processes (online learning, which
        #: trains a few of the messages it reads, packs only those).
        self.trainer = Analyser(config.tokenizer, config.tokenizer.max_bytes, self.tokenizer, ledger=pack_ledger_entry)
        #: What ``classify`` reads with: the message features only when a setting scores them
        #: (training always keeps their sums, so ``[model] features`` can be switched on later).
        self.reader = Analyser(config.tokenizer, config.tokenizer.max_bytes, self.tokenizer, features=config.model.features, formers=False)
        #: Processes that read (parse and tokenize) the messages of a long
        #: ``classify`` or ``train``; 1 reads them in this one.
        self.jobs = jobs
        #: The model in memory and the verdicts it gives.
        self.scoring = Scoring(store, config)
        #: The writes, which keep ``scoring``'s cache coherent.
        self.training = Training(store, config, self.scoring, config.store.write_deadline if write_deadline is None else write_deadline)

    @property
    def thresholds(self) -> decision.Thresholds:
        """The log-odds bounds of the loss matrix's verdicts."""
        return self.scoring.thresholds

    def log_odds_bounds(self) -> tuple[float, float]:
        """Where the verdicts change on the model's own log-odds: ham at or
        below the first, spam above the second (``thresholds`` act on the
        calibrated score; these are read back through the calibration map)."""
        return self.scoring.log_odds_bounds()

    @property
    def two_way_threshold(self) -> float:
        """The log-odds above which the Bayes rule says spam when there is no
        unsure verdict: log(cost_ham_as_spam / cost_spam_as_ham)."""
        d = self.config.decision
        return decision.thresholds_from_loss(d.cost_ham_as_spam, d.cost_spam_as_ham, 0.0).spam_min

    @classmethod
    def open(
        cls,
        config: Config,
        url: str | None = None,
        user: str | None = None,
        *,
        create: bool = True,
        create_dirs: bool = False,
        jobs: int = 1,
        write_deadline: float | None = None,
    ) -> Filter:
        """Open the store at ``url``, the config's, or the default, for the
        model of ``user`` (default: the config's).

        A SQLite file that does not exist is created only with ``create``
        (else ``NoSuchDatabase``), and in a folder that does not exist only
        with ``create_dirs`` or at the default location (else
        ``StoreError``): a mistyped ``--db`` should fail, not leave folders
        and an empty database behind. Long runs read messages on ``jobs``
        processes. ``write_deadline`` overrides the config's (``filter``
        passes 0).
        """
        url, at_default = _database(url, config)
        owner = config.store.user if user is None else user
        deadline = config.store.write_deadline if write_deadline is None else write_deadline

        def opened() -> Store:
            return Store.open(url, busy_timeout=config.store.busy_timeout, owner=owner, create=create, create_dirs=create_dirs or at_default)

        return cls(retrying(opened, deadline), config, jobs=jobs, write_deadline=deadline)

    def close(self) -> None:
        """Release the database."""
        self.store.close()

    def __enter__(self) -> Filter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tokens(self, item: MailItem) -> list[str]:
        """The message's tokens; raises ``MailParseError`` if it is not mail."""
        return self.analyser.tokens(item)

    def _read_labelled(self, labelled: Iterable[tuple[bool, MailItem]], analyser: Analyser | None = None) -> Iterator[tuple[Label, Analysed | Refusal]]:
        """Each (is_spam, message) read on ``self.jobs`` processes, in order."""
        for is_spam, result in analyse_labelled(analyser or self.analyser, labelled, self.jobs, self.config.store.batch_size):
            yield Label.of(is_spam), result

    # -- training -----------------------------------------------------------

    def train(self, labelled: Iterable[tuple[bool, MailItem]], *, train_mode: TrainMode = TrainMode.teft, margin: float = TUNE_MARGIN) -> TrainSummary:
        """Train each (is_spam, message); already-trained messages are left as they are.

        With ``train_mode`` toe or tune each message is first scored by the
        model as trained so far, in stream order, and trained only if
        ``learn_online`` would train it; the others count as ``skipped``.
        """
        if TrainMode(train_mode) is TrainMode.teft:
            return self.training.train(self._read_labelled(labelled, self.trainer), relabel=False)
        total = TrainSummary()
        for step, summary in online.learn(self.training, self._read_labelled(labelled), TrainMode(train_mode), margin):
            total = total + summary
            if isinstance(step.result, Refusal):
                total = total + TrainSummary(refused=(step.result,))
            elif not step.trained and not (summary.unchanged or summary.conflicts):
                total = total + TrainSummary(skipped=1)
        return total

    def mark(self, labelled: Iterable[tuple[bool, MailItem]]) -> TrainSummary:
        """User feedback: make each message trained as (is_spam), moving it out
        of the other class if it was trained there."""
        return self.training.train(self._read_labelled(labelled, self.trainer), relabel=True)

    def forget(self, items: Iterable[MailItem]) -> TrainSummary:
        """Untrain messages: subtract exactly the counts their training added."""
        return self.training.forget(items)

    def learn_online(self, labelled: Iterable[tuple[bool, MailItem]], *, train_mode: TrainMode = ONLINE_TRAIN_MODE, margin: float = TUNE_MARGIN) -> Iterator[OnlineStep]:
        """Classify each message, then train on its true label (the TREC
        spam-track protocol: a user who corrects every verdict at once).

        train_mode: "teft" trains every message; "toe" only misclassified
        ones (an unsure verdict counts as an error); "tune" also those whose
        log-odds lie within ``margin`` nats of a decision bound. Each message
        is parsed and tokenized once for both steps (``filter.online``).
        """
        for step, _ in online.learn(self.training, self._read_labelled(labelled), TrainMode(train_mode), margin):
            yield step

    # -- classifying --------------------------------------------------------

    def classify(self, items: Iterable[MailItem]) -> Iterator[Verdict | Refusal]:
        """A ``Verdict`` (or a ``Refusal``) per message, in input order;
        messages are read on ``self.jobs`` processes. A batch whose reads
        met a busy database or a lost connection is scored again, as a
        training batch is written again, up to the write deadline."""
        for results in batched(analyse(self.reader, items, self.jobs, self.config.store.batch_size), self.config.store.batch_size):
            analysed = [r for r in results if isinstance(r, Analysed)]
            verdicts = iter(retrying(partial(self.scoring.verdicts, analysed), self.training.write_deadline) if analysed else [])
            for r in results:
                yield next(verdicts) if isinstance(r, Analysed) else r

    # -- facts --------------------------------------------------------------

    def stats(self) -> Stats:
        """Messages and tokens per class, the calibration record, and where the database is."""
        with self.store.begin(write=False) as tx:
            totals = tx.totals()
            # The record of the model that classifies: under fallback the
            # shared model's, until the user's own is big enough.
            classified_by = self.scoring.model_of(tx)[1][0]
            changed = self.scoring.stale_record(tx, classified_by)
            recorded_weight = 0.0 if changed else float(tx.calibration_history(MAP_BINS, owner=classified_by).sum())
        unseen = [int(h[h[:, 0] == 0, 1].sum()) if h.size else 0 for h in totals.histogram]
        return Stats(
            ham_messages=int(totals.messages[model.HAM]),
            spam_messages=int(totals.messages[model.SPAM]),
            tokens=totals.vocabulary_size,
            ham_tokens=totals.vocabulary_size - unseen[model.HAM],
            spam_tokens=totals.vocabulary_size - unseen[model.SPAM],
            ham_terms=int(totals.terms[model.HAM]),
            spam_terms=int(totals.terms[model.SPAM]),
            database=self.store.display_url,
            size_bytes=self.store.size_bytes(),
            event_model=self.config.model.event_model,
            alpha=self.config.model.alpha,
            user=self.store.owner,
            calibration_messages=recorded_weight,
            classified_by=classified_by,
            calibration_changed=tuple(changed),
        )


def _database(url: str | None, config: Config) -> tuple[str, bool]:
    """The database to open (`database_url`), and whether it is the default
    location, whose folders are created on first use."""
    chosen = database_url(url, config)
    return chosen, chosen == default_location_url()


def upgrade_database(config: Config, url: str | None = None, *, create_dirs: bool = False) -> Upgraded:
    """Bring the database (chosen as `Filter.open` does) to the current
    schema (``Upgraded``).

    Tried again while the database is busy, for up to the config's
    ``write_deadline`` seconds. A missing SQLite file is created, in a missing
    folder only with ``create_dirs`` or at the default location."""
    url, at_default = _database(url, config)
    store = Store.open(url, busy_timeout=config.store.busy_timeout, upgrade_new=False, check=False, create_dirs=create_dirs or at_default)
    try:
        before = retrying(store.upgrade, config.store.write_deadline)
        return Upgraded(before, store.schema_revision(), store.free_bytes())
    finally:
        store.close()
