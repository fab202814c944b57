"""The read side of a filter: the model one user's mail is classified with,
read from the store into a ``CountCache`` and turned into verdicts.

    store counts ──(only tokens not cached at this model version)──> CountCache
    CountCache + a batch's token counts ──> Fitted (evidence, parameters, calibration map)
    Fitted ──Scorer──> log-odds ──calibration map──> P(spam) ──loss matrix──> verdict

The log-odds are put together by ``spamfilter.nb.scorer`` alone; this module
only gathers what it reads (the counts, the header mask, the pair counts, the
feature densities) and keeps what it may keep between batches.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import numpy.typing as npt

from spamfilter.analysis import Analysed
from spamfilter.answers import Verdict
from spamfilter.config import Config, counts_occurrences
from spamfilter.counts import FeatureStats, Totals
from spamfilter.filter import dependence
from spamfilter.filter.cache import CacheKey, CountCache, ModelView
from spamfilter.nb import decision, model
from spamfilter.nb.calibration import MAP_BINS, CalibrationMap, entry_weights, moved_entries, recorded, score_bins
from spamfilter.nb.gaussian import GaussianParams, gaussian_estimate
from spamfilter.nb.scorer import Evidence, LogOddsParts, Scorer
from spamfilter.store import Store, StoreTransaction
from spamfilter.tokenizer import is_header_line
from spamfilter.tokenizer.features import FEATURE_NAMES, SCALE
from spamfilter.vectorizer import indexed_matrix, unseen_counts
from spamfilter.verdicts import Decision, Label


@dataclass(frozen=True, slots=True)
class Fitted:
    """A batch ready to score: its m known tokens (rows ``ids`` of the
    ``CountCache``, whose token list was ``vocabulary``), the evidence the
    scorer reads (counts (2, m), totals, X (n_messages, m), header mask, pair
    counts, feature densities), the parameters of its columns, and the map
    from log-odds to P(spam) of the model's history."""

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


def feature_densities(stats: FeatureStats) -> GaussianParams:
    """The normal densities of ``stats`` (``gaussian_estimate``), in the
    features' own units: stored value / SCALE."""
    return gaussian_estimate(stats, SCALE)


def feature_values(analysed: Sequence[Analysed]) -> model.FloatArray:
    """The messages' feature vectors in the features' own units, (n, F)."""
    return np.array([a.features for a in analysed], dtype=np.float64).reshape(len(analysed), -1) / SCALE


def _settings(config: Config) -> dict[str, object]:
    """The settings the raw log-odds depend on, by name: the tokenizer's and
    the model's, but those that do nothing under the others (when parents
    are chosen again; the features' weight with the features off; the
    one-dependence sizes under naive Bayes; the header lines' number when
    they are not scored apart)."""
    m = config.model
    inert = {"reselect_growth"}
    inert |= set() if m.features else {"feature_weight"}
    inert |= set() if m.dependence != "none" else {"aode_parents", "aode_children", "aode_child_support", "aode_min_support"}
    inert |= set() if m.header_apart else {"header_max_tokens"}
    left_out = {f"model.{name}" for name in inert}
    return {k: v for k, v in _every_setting(config).items() if k not in left_out}


def _every_setting(config: Config) -> dict[str, object]:
    """Every tokenizer and model setting, by its name in the settings JSON."""
    return {f"tokenizer.{k}": v for k, v in asdict(config.tokenizer).items()} | {f"model.{k}": v for k, v in asdict(config.model).items()}


def record_settings(config: Config) -> str:
    """The settings a calibration record is written under (``_settings``), as JSON."""
    return json.dumps(_settings(config), sort_keys=True)


#: Every setting's default, those ``_settings`` leaves out included.
_DEFAULTS = _every_setting(Config())


def changed_settings(stored: str | None, current: str) -> list[str]:
    """The settings a record was written under (``stored``) that differ
    from ``current``, each as "name: then -> now"; none when the record's
    are not known (written before they were kept, or imported from a file
    without them). A setting the record does not name (added since, or
    doing nothing then) is taken to have had its default."""
    if stored is None or stored == current:
        return []
    then, now = json.loads(stored), json.loads(current)
    return [f"{k}: {then.get(k, _DEFAULTS.get(k))} -> {now[k]}" for k in sorted(now) if then.get(k, _DEFAULTS.get(k)) != now[k]]


class Scoring:
    """The model that classifies the mail of the store's owner, kept between
    batches while its versions hold, and the verdicts it gives."""

    def __init__(self, store: Store, config: Config) -> None:
        self.store = store
        self.config = config
        #: The counts read so far, valid while the model versions hold.
        self.cache = CountCache()
        #: The one-dependence counts read so far, for the same model key as the cache.
        self.pair_cache = dependence.PairCache()
        #: The one place the log-odds are put together (``spamfilter.nb.scorer``).
        self.scorer = Scorer(config.model)
        #: The settings this filter's log-odds are of (``record_settings``).
        self.settings = record_settings(config)
        #: The transaction in which ``prepare_record`` last started the record afresh.
        self._restarted: StoreTransaction | None = None
        #: The calibration map read at the cache's model versions, until a
        #: record is added (``record``) or the versions move.
        self._calibration: tuple[tuple[CacheKey, int | None], CalibrationMap] | None = None
        #: The calibration record versions a reader gave ``cached_model``.
        self._records: tuple[StoreTransaction, dict[str, int]] | None = None
        d = config.decision
        self.thresholds = decision.configured_thresholds(d.ham_cutoff, d.spam_cutoff, d.cost_ham_as_spam, d.cost_spam_as_ham, d.cost_unsure)

    # -- the model: whose counts, read how ----------------------------------

    def model_owners(self, owner: str) -> tuple[str, ...]:
        """Whose counts may make up the model of ``owner``'s mail."""
        if owner == "" or self.config.store.shared_model == "none":
            return (owner,)
        return (owner, "")

    def cached_model(self, reader: StoreTransaction) -> ModelView:
        """The totals and owners of the model that classifies this user's
        mail, from the cache while the model versions have not moved."""
        candidates = self.model_owners(reader.owner)
        versions, records = reader.record_versions(candidates)
        key = (candidates, versions)
        self._records = (reader, dict(zip(candidates, records)))
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

    def fit(self, docs: Sequence[dict[str, int]], tx: StoreTransaction | None = None) -> Fitted:
        """The model's parameters for the known tokens of ``docs``, and their X.

        The counts come from the ``CountCache``: only tokens it has not seen
        at the current model version are read from the store.
        """
        # Inside the caller's transaction if it has one (online learning),
        # else in a read transaction of its own.
        m = self.config.model
        binary = not counts_occurrences(m.event_model)
        with nullcontext(tx) if tx is not None else self.store.begin(write=False) as reader:
            view = self.cached_model(reader)
            missing = self.cache.make_room(docs)
            if missing:
                counts = reader.token_counts(missing, owner=view.owners[0])
                for other in view.owners[1:]:
                    counts = counts + reader.token_counts(missing, owner=other)
                self.cache.add(missing, counts)
            gaussian = feature_densities(feature_sums(reader, view.owners)) if m.features else None
            held = self.cache.rows()
            X, ids = indexed_matrix(docs, self.cache.index, held.known_at, binary=binary)
            unseen = unseen_counts(docs, self.cache.index, held.known_at, is_header_line, binary=binary) if m.unseen_weight else None
            pairs = None
            header = self.cache.header()[ids] if m.header_apart else None
            if m.dependence != "none":
                columns = [self.cache.tokens[i] for i in ids.tolist()]
                pairs = dependence.pair_counts(reader, view.owners[0], columns, self.pair_cache, self.cache.key)
            history = self.calibration_map(reader, view.owners[0])
        token_counts = held.take(ids)
        evidence = Evidence(token_counts, view.totals, X, header, pairs, gaussian, unseen=unseen)
        return Fitted(ids, self.cache.tokens, evidence, self.scorer.params(token_counts, view.totals), history)

    # -- scores and verdicts ------------------------------------------------

    def log_odds_parts(self, fitted: Fitted, analysed: Sequence[Analysed]) -> LogOddsParts:
        """What a batch's log-odds are made of (``Scorer.parts``): naive
        Bayes's; with ``[model] dependence`` the one-dependence estimate's,
        which replace them; with ``[model] features`` each feature's term."""
        evidence = fitted.evidence
        if evidence.gaussian is not None:
            evidence = replace(evidence, features=feature_values(analysed))
        return self.scorer.parts(evidence, fitted.params)

    def judge(self, fitted: Fitted, log_odds: model.FloatArray) -> tuple[model.FloatArray, npt.NDArray[np.int64]]:
        """The calibrated P(spam) of each of a batch's log-odds (the map of
        ``fitted``) and the loss matrix's decision code on it."""
        calibrated = fitted.calibration.log_odds(log_odds)
        return decision.spam_probability(calibrated), decision.decide(calibrated, self.thresholds)

    def own_decision(self, log_odds: float) -> Decision:
        """The loss matrix's decision on the model's own log-odds, which the
        learning rule reads (not the calibrated score)."""
        return Decision.of_code(int(decision.decide(np.array([log_odds]), self.thresholds)[0]))

    def verdicts(self, analysed: Sequence[Analysed], tx: StoreTransaction | None = None) -> list[Verdict]:
        """A ``Verdict`` for each message of a batch."""
        fitted = self.fit([a.counts for a in analysed], tx)
        odds = self.log_odds_parts(fitted, analysed).log_odds
        probability, codes = self.judge(fitted, odds)
        return [Verdict(a.source, a.digest, float(p), float(lo), Decision.of_code(int(v))) for a, p, lo, v in zip(analysed, probability, odds, codes)]

    # -- the calibration record ---------------------------------------------

    def calibration_map(self, reader: StoreTransaction, owner: str) -> CalibrationMap:
        """The calibration map of ``owner``'s history, read again only when the
        model versions moved or a record was added since (a record another
        process adds is seen at once: its record version moves)."""
        seen = self._records
        record = seen[1].get(owner) if seen is not None and seen[0] is reader else reader.record_versions([owner])[1][0]
        key = None if self.cache.key is None else (self.cache.key, record)
        if key is None or self._calibration is None or self._calibration[0] != key:
            # A record of other settings' log-odds says nothing of these.
            kept = not self.stale_record(reader, owner)
            history = CalibrationMap(reader.calibration_history(MAP_BINS, owner=owner) if kept else None)
            self._calibration = None if key is None else (key, history)
            return history
        return self._calibration[1]

    def stale_record(self, reader: StoreTransaction, owner: str) -> list[str]:
        """The settings ``owner``'s record was written under that differ
        from this filter's (``changed_settings``): when there are any, the
        record is not read, and the next recording starts it afresh."""
        return changed_settings(reader.record_settings(owner), self.settings)

    def log_odds_bounds(self) -> tuple[float, float]:
        """The thresholds, which act on the calibrated score, as raw
        log-odds through this model's calibration map: a message is ham at
        or below the first, spam above the second (``CalibrationMap.raw_bound``)."""
        with self.store.begin(write=False) as reader:
            history = self.calibration_map(reader, self.cached_model(reader).owners[0])
        t = self.thresholds
        return history.raw_bound(t.ham_max), history.raw_bound(t.spam_min)

    def record(self, tx: StoreTransaction, labels: Sequence[Label], log_odds: Sequence[float], grown: float = 1.0) -> list[tuple[int, float]]:
        """Add messages scored before they were learned to the owner's
        calibration history (``calibration.recorded``; ``grown``, n / N, when
        learning them grows the model from n to N messages); each message's
        entry (bin, log weight less the record clock), for its ledger row."""
        self._calibration = None
        if not labels:
            return []
        self.prepare_record(tx)
        odds = np.asarray(log_odds, dtype=np.float64)
        decay, added = recorded(odds, np.asarray([label == Label.SPAM for label in labels]), grown=grown)
        clock = tx.record_calibration(decay, added)
        return list(zip(score_bins(odds).tolist(), (np.log(entry_weights(odds.size, grown=grown)) - clock).tolist()))

    def prepare_record(self, tx: StoreTransaction) -> bool:
        """Before recording: take the owner's record (so that no other
        process changes its settings until this transaction ends), and when
        it was written under other settings, empty it and drop the ledger's
        entries in it (``start_record``). Whether it was started afresh:
        then entries read before in this transaction are of the old one."""
        tx.lock_record()
        stored = tx.record_settings()
        if stored == self.settings:
            return False
        afresh = bool(changed_settings(stored, self.settings))
        tx.start_record(self.settings, afresh=afresh)
        if afresh:
            self._calibration = None
            self._restarted = tx
        return afresh

    def restarted(self, tx: StoreTransaction) -> bool:
        """Whether ``prepare_record`` started the record afresh in ``tx``."""
        return self._restarted is tx

    def move_recorded(self, tx: StoreTransaction, entries: Sequence[tuple[int, int, float, int | None]]) -> None:
        """Move recorded entries to their message's new class, or take them
        out (``calibration.moved_entries``): ``mark`` and ``forget``."""
        if entries:
            self._calibration = None
            tx.record_calibration(1.0, moved_entries(tx.calibration_history(MAP_BINS), tx.record_clock(), entries))
