"""The library API: ``Filter`` trains, forgets, relabels and classifies mail.

This layer owns the transactions: every training batch (``store.batch_size``
messages) is one transaction, so a killed process leaves the store at the end
of the last whole batch. The command line is a thin shell over this module.

    from spamfilter.config import load_config
    from spamfilter.mail import read_messages
    from spamfilter.service import Filter

    with Filter.open(load_config()) as f:
        for verdict in f.classify(read_messages(["inbox.mbox"])):
            print(verdict.source, verdict.verdict, verdict.log_odds)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from spamfilter import dependence
from spamfilter.analysis import Analysed as _Analysed
from spamfilter.analysis import Analyser, analyse, analyse_labelled
from spamfilter.analysis import Refusal as Refusal
from spamfilter.answers import OnlineStep, Stats, TrainSummary, Verdict
from spamfilter.cache import CacheKey, CountCache, ModelView
from spamfilter.config import Config, counts_occurrences, database_url
from spamfilter.counts import FeatureStats, TokenCounts, Totals
from spamfilter.delta import CountDelta
from spamfilter.errors import NotTrainedError
from spamfilter.locations import default_location_url
from spamfilter.mail import MailItem
from spamfilter.nb import decision, model
from spamfilter.nb.calibration import MAP_BINS, CalibrationMap, recorded
from spamfilter.nb.gaussian import GaussianParams, gaussian_estimate
from spamfilter.nb.learning import ONLINE_TRAIN_MODE as ONLINE_TRAIN_MODE
from spamfilter.nb.learning import TUNE_MARGIN as TUNE_MARGIN
from spamfilter.nb.learning import TrainMode as TrainMode
from spamfilter.nb.learning import wants_training
from spamfilter.nb.scorer import Evidence, LogOddsParts, Scorer
from spamfilter.retry import retrying
from spamfilter.store import CountsWritten, Store, StoreTransaction
from spamfilter.tokenizer import Tokenizer, is_header_line
from spamfilter.tokenizer.features import FEATURE_NAMES as FEATURE_NAMES
from spamfilter.tokenizer.features import FEATURE_UNITS as FEATURE_UNITS
from spamfilter.tokenizer.features import SCALE
from spamfilter.vectorizer import indexed_matrix
from spamfilter.verdicts import Decision, Label

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Fitted:
    """A batch ready to score: its m known tokens (rows ``ids`` of the
    filter's ``CountCache``, whose token list was ``vocabulary``), the
    evidence the scorer reads (counts (2, m), totals, X (n_messages, m),
    header mask, pair counts, feature densities), the parameters of its
    columns, and the map from log-odds to P(spam) of the model's history."""

    ids: npt.NDArray[np.int64]
    vocabulary: list[str]
    evidence: Evidence
    params: model.NBParams
    calibration: CalibrationMap = field(default_factory=CalibrationMap)

    @property
    def tokens(self) -> list[str]:
        """The token of each of the m columns (looked up only when asked:
        scoring itself does not need them)."""
        return [self.vocabulary[i] for i in self.ids.tolist()]


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of ``size`` items (the last one shorter)."""
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch


class Filter:
    """A naive Bayes filter over one token store."""

    def __init__(self, store: Store, config: Config, *, jobs: int = 1, write_deadline: float | None = None) -> None:
        self.store = store
        self.config = config
        self.write_deadline = config.store.write_deadline if write_deadline is None else write_deadline
        #: The counts read so far, valid while the model versions hold.
        self.cache = CountCache()
        #: The one-dependence counts read so far, for the same model key as the cache.
        self.pair_cache = dependence.PairCache()
        #: The one place the log-odds are put together (``spamfilter.nb.scorer``).
        self.scorer = Scorer(config.model)
        self.tokenizer = Tokenizer(config.tokenizer)
        self.analyser = Analyser(config.tokenizer, config.tokenizer.max_bytes, self.tokenizer)
        #: What ``classify`` reads with: the message features only when a setting scores them
        #: (training always keeps their sums, so ``[model] features`` can be switched on later).
        self.reader = Analyser(config.tokenizer, config.tokenizer.max_bytes, self.tokenizer, features=config.model.features)
        #: Processes that read (parse and tokenize) the messages of a long
        #: ``classify`` or ``train``; 1 reads them in this one.
        self.jobs = jobs
        self._after_commit: Callable[[], None] | None = None
        #: The calibration map read at the cache's model versions, until this
        #: filter records (``_record``) or the versions move.
        self._calibration: tuple[CacheKey, CalibrationMap] | None = None
        d = config.decision
        if d.spam_cutoff is not None and d.ham_cutoff is not None:
            self.thresholds = decision.thresholds_from_cutoffs(d.ham_cutoff, d.spam_cutoff)
        else:
            self.thresholds = decision.thresholds_from_loss(d.cost_ham_as_spam, d.cost_spam_as_ham, d.cost_unsure)

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

    # -- reading ------------------------------------------------------------

    def tokens(self, item: MailItem) -> list[str]:
        """The message's tokens; raises ``MailParseError`` if it is not mail."""
        return self.analyser.tokens(item)

    # -- training -----------------------------------------------------------

    def train(self, labelled: Iterable[tuple[bool, MailItem]], *, train_mode: TrainMode = TrainMode.teft, margin: float = TUNE_MARGIN) -> TrainSummary:
        """Train each (is_spam, message); already-trained messages are left as they are.

        With ``train_mode`` toe or tune each message is first scored by the
        model as trained so far, in stream order, and trained only if
        ``learn_online`` would train it; the others count as ``skipped``.
        """
        if TrainMode(train_mode) is TrainMode.teft:
            return self._train(labelled, relabel=False)
        total = TrainSummary()
        for step, summary in self._learn(labelled, TrainMode(train_mode), margin):
            total = total + summary
            if isinstance(step.result, Refusal):
                total = total + TrainSummary(refused=(step.result,))
            elif not step.trained:
                total = total + TrainSummary(skipped=1)
        return total

    def mark(self, labelled: Iterable[tuple[bool, MailItem]]) -> TrainSummary:
        """User feedback: make each message trained as (is_spam), moving it out
        of the other class if it was trained there."""
        return self._train(labelled, relabel=True)

    def _read_labelled(self, labelled: Iterable[tuple[bool, MailItem]]) -> Iterator[tuple[Label, _Analysed | Refusal]]:
        """Each (is_spam, message) read on ``self.jobs`` processes, in order."""
        for is_spam, result in analyse_labelled(self.analyser, labelled, self.jobs, self.config.store.batch_size):
            yield Label.of(is_spam), result

    def _train(self, labelled: Iterable[tuple[bool, MailItem]], *, relabel: bool) -> TrainSummary:
        total = TrainSummary()
        for results in batched(self._read_labelled(labelled), self.config.store.batch_size):
            refused = tuple(r for _, r in results if isinstance(r, Refusal))
            good = [(label, r) for label, r in results if isinstance(r, _Analysed)]

            def step(good: list[tuple[Label, _Analysed]] = good) -> TrainSummary:
                with self._write_transaction() as tx:
                    return self._train_batch(tx, good, relabel)

            total = total + retrying(step, self.write_deadline) + TrainSummary(refused=refused)
        return total

    def _train_batch(self, tx: StoreTransaction, batch: Sequence[tuple[Label, _Analysed]], relabel: bool, record: bool = True) -> TrainSummary:
        known = tx.trained_labels([a.digest for _, a in batch])
        add: dict[str, tuple[Label, _Analysed]] = {}
        unchanged = conflicts = 0
        moving: list[str] = []
        for label, a in batch:
            previous = known.get(a.digest)
            if previous == label or (a.digest in add and add[a.digest][0] == label):
                unchanged += 1
            elif previous is None and a.digest not in add:
                add[a.digest] = (label, a)
            elif relabel:
                if previous is not None and a.digest not in add:
                    moving.append(a.digest)
                add[a.digest] = (label, a)
            else:
                conflicts += 1
        new = list(add.values()) if record and not relabel else []
        # The calibration record: how the model before this batch scores it.
        # Read off the write's own counts when the model is the owner's naive
        # Bayes alone (no read, no cache kept), else scored before the write.
        from_write = bool(new) and self._records_from_write(tx.owner)
        if new and not from_write:
            self._record_before_learning(tx, new)
        totals = tx.totals() if from_write else None
        # A relabelled message is untrained with exactly the counts (and
        # features) recorded when it was trained, then trained afresh with
        # its new label.
        delta = CountDelta()
        for old in tx.take_messages(moving):
            delta.add(old.label, old.token_counts, -1, old.features)
        for label, a in add.values():
            delta.add(label, a.counts, +1, a.features)
        written = self._apply(tx, delta)
        if totals is not None and written is not None and totals.messages.all():
            self._record_from_write(tx, new, written, delta, totals)
        tx.record_messages([(d, label, a.counts, a.features) for d, (label, a) in add.items()])
        # With the batch in the ledger: a new choice of parents counts it.
        dependence.reselect_if_due(tx, self.config.model)
        new_labels = [label for d, (label, _) in add.items() if d not in moving]
        return TrainSummary(
            trained_ham=new_labels.count(model.HAM), trained_spam=new_labels.count(model.SPAM), unchanged=unchanged, relabelled=len(moving), conflicts=conflicts
        )

    def _record_before_learning(self, tx: StoreTransaction, new: Sequence[tuple[Label, _Analysed]]) -> None:
        """Score the messages ``train`` is about to learn with the model as
        it is, and record those scores in the calibration history: mail the
        model has not seen yet, labelled. ``mark`` records nothing: the
        messages a user corrects are mostly the filter's errors, and a
        history of them would make every score look wrong."""
        if not self._cached_model(tx).totals.messages.all():
            return  # no model yet to score with
        verdicts = self._score([a for _, a in new], tx)
        self._record(tx, [label for label, _ in new], [v.log_odds for v in verdicts])

    def _records_from_write(self, owner: str) -> bool:
        """Whether ``_record_from_write`` can score a batch: naive Bayes
        without message features, over the owner's counts alone."""
        m = self.config.model
        return m.dependence == "none" and not m.features and self._model_owners(owner) == (owner,)

    def _record_from_write(self, tx: StoreTransaction, new: Sequence[tuple[Label, _Analysed]], written: CountsWritten, delta: CountDelta, totals: Totals) -> None:
        """Record how the model before the batch scored its new messages,
        from what the write returned: every token of the batch with its new
        counts, less the batch's own (``delta.written``), over the totals read
        before the write. The same scores as ``_record_before_learning``'s,
        without reading the counts first."""
        assert delta.written is not None
        before = TokenCounts(written.counts.doc_count - delta.written.doc_count, written.counts.term_count - delta.written.term_count)
        index = dict(zip(written.token_list, range(len(written.token_list))))
        X, ids = indexed_matrix([a.counts for _, a in new], index, before.known(), binary=not counts_occurrences(self.config.model.event_model))
        header = None
        if self.config.model.header_apart:
            header = np.fromiter((is_header_line(written.token_list[i]) for i in ids.tolist()), dtype=bool, count=ids.size)
        odds = self.scorer.log_odds(Evidence(before.take(ids), totals, X, header))
        self._record(tx, [label for label, _ in new], odds.tolist())

    def forget(self, items: Iterable[MailItem]) -> TrainSummary:
        """Untrain messages: subtract exactly the counts their training added."""
        total = TrainSummary()
        # Forgetting needs only the identity, not a parse: even a message the
        # current settings would refuse can be forgotten.
        for batch in batched(items, self.config.store.batch_size):
            digests = sorted({item.digest for item in batch})

            def step(digests: list[str] = digests) -> int:
                with self._write_transaction() as tx:
                    # Taken out of the ledger first (DELETE ... RETURNING):
                    # a second process forgetting the same message at once
                    # gets nothing back and subtracts nothing.
                    removed = tx.take_messages(digests)
                    delta = CountDelta()
                    for old in removed:
                        delta.add(old.label, old.token_counts, -1, old.features)
                    self._apply(tx, delta)
                    return len(removed)

            forgotten = retrying(step, self.write_deadline)
            total = total + TrainSummary(forgotten=forgotten, unknown=len(digests) - forgotten)
        return total

    @contextmanager
    def _write_transaction(self) -> Iterator[StoreTransaction]:
        """A write transaction; once it has committed, the cache takes the
        counts it wrote (see ``_apply``)."""
        self._after_commit = None
        try:
            with self.store.begin() as tx:
                yield tx
        except BaseException:
            self._after_commit = None
            raise
        update, self._after_commit = self._after_commit, None
        if update is not None:
            update()

    def _apply(self, tx: StoreTransaction, delta: CountDelta) -> CountsWritten | None:
        """Write ``delta`` in ``tx`` (a ``_write_transaction``), and arrange
        for the cache to follow if it holds the model as it was just before;
        what was written.

        The cache is kept only when this write is the one change between
        the versions: the owner's version went up by exactly one from the
        one the cache holds (no other process wrote in between, so the
        versions need not be read again here) and the model that classifies
        this user's mail was and still is the user's own counts alone (the
        shared model of "fallback" or "merge" is not updated in place, it is
        read again).
        """
        candidates = self._model_owners(tx.owner)
        before: CacheKey | None = self.cache.key
        own_before = self.cache.view is not None and self.cache.view.owners == (tx.owner,)
        written = delta.apply(tx)
        if written is None or before is None or before[0] != candidates:
            return written
        own = candidates.index(tx.owner)
        assert self.cache.view is not None
        owners: tuple[str, ...]
        if candidates == (tx.owner,):
            # The model is this owner's counts alone: its totals follow the
            # write in memory, as the store changed them.
            totals, owners = self.cache.view.totals.changed(written.classes, written.histogram), candidates
        else:
            totals, owners = self.model_of(tx)
        if not own_before or owners != (tx.owner,) or written.version != before[1][own] + 1:
            self._after_commit = self.cache.clear
            return written
        after = (candidates, tuple(written.version if i == own else v for i, v in enumerate(before[1])))
        view = ModelView(totals, owners)
        self._after_commit = lambda: self.cache.apply(before, after, written.token_list, written.counts, view)
        return written

    # -- classifying --------------------------------------------------------

    def classify(self, items: Iterable[MailItem]) -> Iterator[Verdict | Refusal]:
        """A ``Verdict`` (or a ``Refusal``) per message, in input order;
        messages are read on ``self.jobs`` processes."""
        for results in batched(analyse(self.reader, items, self.jobs, self.config.store.batch_size), self.config.store.batch_size):
            analysed = [r for r in results if isinstance(r, _Analysed)]
            verdicts = iter(self._score(analysed) if analysed else [])
            for r in results:
                yield next(verdicts) if isinstance(r, _Analysed) else r

    def fit(self, docs: Sequence[dict[str, int]], tx: StoreTransaction | None = None) -> Fitted:
        """The model's parameters for the known tokens of ``docs``, and their X.

        The counts come from the filter's ``CountCache``: only tokens it has
        not seen at the current model version are read from the store.
        """
        # Inside the caller's transaction if it has one (online learning),
        # else in a read transaction of its own.
        m = self.config.model
        binary = not counts_occurrences(m.event_model)
        with nullcontext(tx) if tx is not None else self.store.begin(write=False) as reader:
            view = self._cached_model(reader)
            missing = self.cache.make_room(docs)
            if missing:
                counts = reader.token_counts(missing, owner=view.owners[0])
                for other in view.owners[1:]:
                    counts = counts + reader.token_counts(missing, owner=other)
                self.cache.add(missing, counts)
            gaussian = self._gaussian(reader, view.owners) if m.features else None
            held = self.cache.rows()
            X, ids = indexed_matrix(docs, self.cache.index, held.known(), binary=binary)
            pairs = header = None
            if m.dependence != "none" or m.header_apart:
                columns = [self.cache.tokens[i] for i in ids.tolist()]
                if m.header_apart:
                    header = np.fromiter(map(is_header_line, columns), dtype=bool, count=len(columns))
                if m.dependence != "none":
                    pairs = dependence.pair_counts(reader, view.owners[0], columns, self.pair_cache, self.cache.key)
            history = self._calibration_map(reader, view.owners[0])
        token_counts = held.take(ids)
        evidence = Evidence(token_counts, view.totals, X, header, pairs, gaussian)
        return Fitted(ids, self.cache.tokens, evidence, self.scorer.params(token_counts, view.totals), history)

    @staticmethod
    def feature_sums(reader: StoreTransaction, owners: tuple[str, ...]) -> FeatureStats:
        """The per-class sums of the message features of the model made of
        ``owners``' (a few rows, read each time). Training keeps them whatever
        ``[model] features`` says; messages trained before schema revision
        0005 are in none of them."""
        width = len(FEATURE_NAMES)
        stats = FeatureStats.zeros(width)
        for owner in owners:
            stats = stats + reader.feature_stats(width, owner=owner)
        return stats

    @staticmethod
    def feature_densities(stats: FeatureStats) -> GaussianParams:
        """The normal densities of ``stats`` (``gaussian_estimate``), in
        the features' own units: stored value / SCALE."""
        return gaussian_estimate(stats, SCALE)

    @staticmethod
    def _gaussian(reader: StoreTransaction, owners: tuple[str, ...]) -> GaussianParams:
        """The feature densities of the model made of ``owners``' sums."""
        return Filter.feature_densities(Filter.feature_sums(reader, owners))

    @staticmethod
    def feature_values(analysed: Sequence[_Analysed]) -> model.FloatArray:
        """The messages' feature vectors in the features' own units, (n, F)."""
        return np.array([a.features for a in analysed], dtype=np.float64).reshape(len(analysed), -1) / SCALE

    def _model_owners(self, owner: str) -> tuple[str, ...]:
        """Whose counts may make up the model of ``owner``'s mail."""
        if owner == "" or self.config.store.shared_model == "none":
            return (owner,)
        return (owner, "")

    def _cached_model(self, reader: StoreTransaction) -> ModelView:
        """The totals and owners of the model that classifies this user's
        mail, from the cache while the model versions have not moved."""
        candidates = self._model_owners(reader.owner)
        key = (candidates, reader.versions(candidates))
        if not self.cache.valid_for(key):
            totals, owners = self.model_of(reader)
            self.cache.reset(key, ModelView(totals, owners))
        assert self.cache.view is not None
        return self.cache.view

    def model_of(self, reader: StoreTransaction) -> tuple[Totals, tuple[str, ...]]:
        """The totals of the model that classifies this user's mail, and whose
        counts it adds up: the user's own, the shared model's (fallback), or
        both (merge)."""
        s = self.config.store
        mine = reader.totals()
        if reader.owner == "" or s.shared_model == "none":
            return mine, (reader.owner,)
        if s.shared_model == "fallback":
            if int(mine.messages.min()) >= s.shared_min_messages:
                return mine, (reader.owner,)
            return reader.totals(owner=""), ("",)
        shared = reader.totals(owner="")
        merged = Totals(
            mine.classes + shared.classes,
            reader.vocabulary_size([reader.owner, ""]),
            mine.histogram,  # unused: config.has_absent_term rules out "merge" for models that read it
        )
        return merged, (reader.owner, "")

    def _score(self, analysed: Sequence[_Analysed], tx: StoreTransaction | None = None) -> list[Verdict]:
        fitted = self.fit([a.counts for a in analysed], tx)
        odds = self.log_odds_parts(fitted, analysed).log_odds
        probability, decision = self.judge(fitted, odds)
        return [Verdict(a.source, a.digest, float(p), float(lo), Decision.of_code(int(v))) for a, p, lo, v in zip(analysed, probability, odds, decision)]

    def judge(self, fitted: Fitted, log_odds: model.FloatArray) -> tuple[model.FloatArray, npt.NDArray[np.int64]]:
        """The calibrated P(spam) of each of a batch's log-odds (the map of
        ``fitted``) and the loss matrix's decision code on it."""
        calibrated = fitted.calibration.log_odds(log_odds)
        return decision.spam_probability(calibrated), decision.decide(calibrated, self.thresholds)

    def _calibration_map(self, reader: StoreTransaction, owner: str) -> CalibrationMap:
        """The calibration map of ``owner``'s history, read again only when the
        model versions moved or this filter recorded since (a record another
        process adds without training shows at its next training write)."""
        key = self.cache.key
        if key is None or self._calibration is None or self._calibration[0] != key:
            history = CalibrationMap(reader.calibration_history(MAP_BINS, owner=owner))
            self._calibration = None if key is None else (key, history)
            return history
        return self._calibration[1]

    def _record(self, tx: StoreTransaction, labels: Sequence[Label], log_odds: Sequence[float]) -> None:
        """Add messages scored before they were learned to the owner's
        calibration history (``calibration.recorded``)."""
        self._calibration = None
        if labels:
            decay, added = recorded(np.asarray(log_odds, dtype=np.float64), np.asarray([label == Label.SPAM for label in labels]))
            tx.record_calibration(decay, added)

    def log_odds_parts(self, fitted: Fitted, analysed: Sequence[_Analysed]) -> LogOddsParts:
        """What a batch's log-odds are made of (``Scorer.parts``): naive
        Bayes's; with ``[model] dependence`` the one-dependence estimate's,
        which replace them; with ``[model] features`` each feature's term."""
        evidence = fitted.evidence
        if evidence.gaussian is not None:
            evidence = replace(evidence, features=self.feature_values(analysed))
        return self.scorer.parts(evidence, fitted.params)

    # -- learning online ----------------------------------------------------

    def learn_online(self, labelled: Iterable[tuple[bool, MailItem]], *, train_mode: TrainMode = ONLINE_TRAIN_MODE, margin: float = TUNE_MARGIN) -> Iterator[OnlineStep]:
        """Classify each message, then train on its true label (the TREC
        spam-track protocol: a user who corrects every verdict at once).

        train_mode: "teft" trains every message; "toe" only misclassified
        ones (an unsure verdict counts as an error); "tune" also those whose
        log-odds lie within ``margin`` nats of a decision bound. Before the
        model has both classes a message gets score 0.5, log-odds 0 and
        "unsure". Each message is parsed and tokenized once for both steps.
        """
        for step, _ in self._learn(labelled, TrainMode(train_mode), margin):
            yield step

    def _learn(self, labelled: Iterable[tuple[bool, MailItem]], train_mode: TrainMode, margin: float) -> Iterator[tuple[OnlineStep, TrainSummary]]:
        """``learn_online``'s steps, each with what its training did."""
        # Reading the next message overlaps with scoring and training this
        # one when jobs > 1; classify_seconds is then the wall time from one
        # step to the next verdict, waiting for the readers included.
        started = time.perf_counter()
        for label, analysed in self._read_labelled(labelled):
            is_spam = label == Label.SPAM
            if isinstance(analysed, Refusal):
                yield OnlineStep(is_spam, analysed, False, time.perf_counter() - started, 0.0), TrainSummary()
                started = time.perf_counter()
                continue

            def step(label: Label = label, analysed: _Analysed = analysed) -> tuple[Verdict, bool, TrainSummary, float]:
                # One write transaction for both steps (tried again while the
                # database is busy): the verdict is computed from exactly the
                # counts the training then updates.
                with self._write_transaction() as tx:
                    # The learning rule reads the model's own log-odds (``own``), not the calibrated score.
                    try:
                        verdict = self._score([analysed], tx)[0]
                        self._record(tx, [label], [verdict.log_odds])
                        own = Decision.of_code(int(decision.decide(np.array([verdict.log_odds]), self.thresholds)[0]))
                    except NotTrainedError:
                        verdict = Verdict(analysed.source, analysed.digest, 0.5, 0.0, Decision.UNSURE)
                        own = Decision.UNSURE
                    classified = time.perf_counter()
                    train = wants_training(train_mode, label, own, verdict.log_odds, self.thresholds.ham_max, self.thresholds.spam_min, margin)
                    summary = self._train_batch(tx, [(label, analysed)], relabel=False, record=False) if train else TrainSummary()
                    return verdict, train, summary, classified

            verdict, train, summary, classified = retrying(step, self.write_deadline)
            yield OnlineStep(is_spam, verdict, train, classified - started, time.perf_counter() - classified), summary
            started = time.perf_counter()

    # -- facts --------------------------------------------------------------

    def stats(self) -> Stats:
        """Messages and tokens per class, the calibration record, and where the database is."""
        with self.store.begin(write=False) as tx:
            totals = tx.totals()
            recorded_weight = float(tx.calibration_history(MAP_BINS).sum())
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
        )


def _database(url: str | None, config: Config) -> tuple[str, bool]:
    """The database to open (`database_url`), and whether it is the default
    location, whose folders are created on first use."""
    chosen = database_url(url, config)
    return chosen, chosen == default_location_url()


def upgrade_database(config: Config, url: str | None = None, *, create_dirs: bool = False) -> tuple[str | None, str | None]:
    """Bring the database (chosen as `Filter.open` does) to the current
    schema; (revision before, after).

    Tried again while the database is busy, for up to the config's
    ``write_deadline`` seconds. A missing SQLite file is created, in a missing
    folder only with ``create_dirs`` or at the default location."""
    url, at_default = _database(url, config)
    store = Store.open(url, busy_timeout=config.store.busy_timeout, upgrade_new=False, check=False, create_dirs=create_dirs or at_default)
    try:
        before = store.schema_revision()
        retrying(store.upgrade, config.store.write_deadline)
        return before, store.schema_revision()
    finally:
        store.close()
