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

import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from itertools import islice
from typing import TextIO, TypeVar

import numpy as np
import scipy.sparse as sp

from spamfilter import model
from spamfilter.config import Config, default_db_url, default_location_url
from spamfilter.errors import CountsFileError, MailParseError, NotTrainedError, StoreConflict
from spamfilter.mail import MailItem, parse_message
from spamfilter.store import IntArray, Store, StoreTransaction, Totals
from spamfilter.tokenizer import Tokenizer
from spamfilter.vectorizer import Vocabulary, batch_vocabulary, count_matrix, term_counts

T = TypeVar("T")

VERDICT_NAMES = {model.HAM: "ham", model.SPAM: "spam", model.UNSURE: "unsure"}


@dataclass(frozen=True, slots=True)
class Verdict:
    """The filter's answer for one message.

    score: P(spam|x) in [0, 1]; rounds to 1.0 for most spam, so rank by log_odds.
    log_odds: log P(spam|x) - log P(ham|x).
    verdict: "spam", "ham" or "unsure".
    """

    source: str
    digest: str
    score: float
    log_odds: float
    verdict: str


@dataclass(frozen=True, slots=True)
class Refusal:
    """A message that could not be read as mail; the run went on without it."""

    source: str
    reason: str


@dataclass(frozen=True, slots=True)
class TrainSummary:
    """What a train / forget / mark call did, message by message counts.

    trained: added to the model with the requested label, per class (ham, spam).
    unchanged: already trained with that label (training is idempotent).
    relabelled: moved from the other class (``mark``).
    conflicts: trained with the other class; ``train`` leaves them, ``mark`` moves them.
    forgotten: removed from the model (``forget``).
    unknown: ``forget`` of a message that was never trained.
    """

    trained_ham: int = 0
    trained_spam: int = 0
    unchanged: int = 0
    relabelled: int = 0
    conflicts: int = 0
    forgotten: int = 0
    unknown: int = 0
    refused: tuple[Refusal, ...] = field(default_factory=tuple)

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
        )


@dataclass(frozen=True, slots=True)
class Stats:
    """Size of the model and of its database."""

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


TRAIN_MODES = ("teft", "toe", "tune")


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
class WordScore:
    """How strongly the model's smoothed estimates tie one token to a class.

    score: log P(token|spam) - log P(token|ham) (its negative when ranking
        for ham), with P(token|c) the configured event model's theta[c,j].
    spam_count, ham_count: the counts those estimates come from: messages
        containing the token (bernoulli, multinomial-binary) or its
        occurrences (multinomial).
    """

    token: str
    spam_count: int
    ham_count: int
    score: float


@dataclass(frozen=True, slots=True)
class Contribution:
    """One term of a message's log-odds.

    token: None for the Bernoulli model's absent-token term, the sum over
        every vocabulary token the message lacks (its counts are None too).
    contribution: what the term adds to the log-odds (positive: towards
        spam), tempering included; 0 for a token ``min_evidence`` ignores.
    spam_count, ham_count: as in ``WordScore``.
    """

    token: str | None
    contribution: float
    spam_count: int | None
    ham_count: int | None


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a message got its verdict: log_odds = prior + sum of the contributions.

    verdict, score, log_odds: what ``Filter.classify`` answers for the message.
    prior: log P(spam) - log P(ham) from the trained message counts.
    tokens: every known token's contribution (and for bernoulli the
        absent-token term), largest in magnitude first.
    events: n, the token events that count; the evidence is divided by
        n ** tempering, i.e. multiplied by ``factor``.
    ignored: known tokens ``min_evidence`` leaves out (contribution 0).
    unknown: distinct tokens of the message the model has never seen.
    absent: vocabulary tokens in the absent-token term (bernoulli), else 0.
    """

    source: str
    digest: str
    verdict: str
    score: float
    log_odds: float
    prior: float
    tokens: tuple[Contribution, ...]
    event_model: str
    events: int
    factor: float
    ignored: int
    unknown: int
    absent: int


@dataclass(frozen=True, slots=True)
class TrainedDay:
    """Messages in the model now that were trained on one (UTC) day."""

    day: date
    spam: int
    ham: int


@dataclass(frozen=True, slots=True)
class _Analysed:
    item: MailItem
    digest: str
    counts: dict[str, int]


@dataclass(frozen=True, slots=True)
class _Fitted:
    """A batch ready to score: its m known tokens, their counts (2, m) and
    parameters, and X (n_messages, m)."""

    columns: Vocabulary
    counts: model.TokenCounts
    stats: model.ClassStats
    params: model.NBParams
    X: sp.csr_matrix


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of ``size`` items (the last one shorter)."""
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch


class Filter:
    """A naive Bayes filter over one token store."""

    def __init__(self, store: Store, config: Config) -> None:
        self.store = store
        self.config = config
        self.tokenizer = Tokenizer(config.tokenizer)
        d = config.decision
        if d.spam_cutoff is not None and d.ham_cutoff is not None:
            self.thresholds = model.thresholds_from_cutoffs(d.ham_cutoff, d.spam_cutoff)
        else:
            self.thresholds = model.thresholds_from_loss(d.cost_ham_as_spam, d.cost_spam_as_ham, d.cost_unsure)

    @property
    def two_way_threshold(self) -> float:
        """The log-odds above which the Bayes rule says spam when there is no
        unsure verdict: log(cost_ham_as_spam / cost_spam_as_ham)."""
        d = self.config.decision
        return model.thresholds_from_loss(d.cost_ham_as_spam, d.cost_spam_as_ham, 0.0).spam_min

    @classmethod
    def open(
        cls,
        config: Config,
        url: str | None = None,
        user: str | None = None,
        *,
        create: bool = True,
        create_dirs: bool = False,
    ) -> Filter:
        """Open the store at ``url``, the config's, or the default, for the
        model of ``user`` (default: the config's).

        A SQLite file that does not exist is created only with ``create``
        (else ``NoSuchDatabase``), and in a folder that does not exist only
        with ``create_dirs`` or at the default location (else
        ``StoreError``): a mistyped ``--db`` should fail, not leave folders
        and an empty database behind.
        """
        url = url or config.store.url or default_db_url()
        owner = config.store.user if user is None else user
        store = Store.open(
            url,
            busy_timeout=config.store.busy_timeout,
            owner=owner,
            create=create,
            create_dirs=create_dirs or url == default_location_url(),
        )
        return cls(store, config)

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
        message = parse_message(item, max_bytes=self.config.tokenizer.max_bytes)
        return self.tokenizer.tokenize(message)

    def _analyse(self, items: Sequence[MailItem]) -> list[_Analysed | Refusal]:
        results: list[_Analysed | Refusal] = []
        for item in items:
            try:
                counts = term_counts(self.tokens(item))
            except MailParseError as exc:
                results.append(Refusal(item.source, str(exc)))
                continue
            results.append(_Analysed(item, item.digest, counts))
        return results

    # -- training -----------------------------------------------------------

    def train(self, labelled: Iterable[tuple[bool, MailItem]]) -> TrainSummary:
        """Train each (is_spam, message); already-trained messages are left as they are."""
        return self._train(labelled, relabel=False)

    def mark(self, labelled: Iterable[tuple[bool, MailItem]]) -> TrainSummary:
        """User feedback: make each message trained as (is_spam), moving it out
        of the other class if it was trained there."""
        return self._train(labelled, relabel=True)

    def _train(self, labelled: Iterable[tuple[bool, MailItem]], *, relabel: bool) -> TrainSummary:
        total = TrainSummary()
        for batch in batched(labelled, self.config.store.batch_size):
            results = self._analyse([item for _, item in batch])
            refused = tuple(r for r in results if isinstance(r, Refusal))
            good = [
                (model.SPAM if is_spam else model.HAM, r)
                for (is_spam, _), r in zip(batch, results)
                if isinstance(r, _Analysed)
            ]

            def step(good: list[tuple[int, _Analysed]] = good) -> TrainSummary:
                with self.store.begin() as tx:
                    return self._train_batch(tx, good, relabel)

            total = total + _retrying(step) + TrainSummary(refused=refused)
        return total

    def _train_batch(self, tx: StoreTransaction, batch: list[tuple[int, _Analysed]], relabel: bool) -> TrainSummary:
        known = tx.trained_labels([a.digest for _, a in batch])
        add: dict[str, tuple[int, dict[str, int]]] = {}
        unchanged = conflicts = 0
        moving: list[str] = []
        for label, a in batch:
            previous = known.get(a.digest)
            if previous == label or (a.digest in add and add[a.digest][0] == label):
                unchanged += 1
            elif previous is None and a.digest not in add:
                add[a.digest] = (label, a.counts)
            elif relabel:
                if previous is not None and a.digest not in add:
                    moving.append(a.digest)
                add[a.digest] = (label, a.counts)
            else:
                conflicts += 1
        # A relabelled message is untrained with exactly the counts recorded
        # when it was trained, then trained afresh with its new label.
        removed = tx.take_messages(moving)
        delta = _Delta()
        for old in removed:
            delta.add(old.label, old.token_counts, -1)
        for label, counts in add.values():
            delta.add(label, counts, +1)
        delta.apply(tx)
        tx.record_messages([(d, label, counts) for d, (label, counts) in add.items()])
        new_labels = [label for d, (label, _) in add.items() if d not in moving]
        return TrainSummary(
            trained_ham=new_labels.count(model.HAM),
            trained_spam=new_labels.count(model.SPAM),
            unchanged=unchanged,
            relabelled=len(moving),
            conflicts=conflicts,
        )

    def forget(self, items: Iterable[MailItem]) -> TrainSummary:
        """Untrain messages: subtract exactly the counts their training added."""
        total = TrainSummary()
        # Forgetting needs only the identity, not a parse: even a message the
        # current settings would refuse can be forgotten.
        for batch in batched(items, self.config.store.batch_size):
            digests = sorted({item.digest for item in batch})

            def step(digests: list[str] = digests) -> int:
                with self.store.begin() as tx:
                    # Taken out of the ledger first (DELETE ... RETURNING):
                    # a second process forgetting the same message at once
                    # gets nothing back and subtracts nothing.
                    removed = tx.take_messages(digests)
                    delta = _Delta()
                    for old in removed:
                        delta.add(old.label, old.token_counts, -1)
                    delta.apply(tx)
                    return len(removed)

            forgotten = _retrying(step)
            total = total + TrainSummary(forgotten=forgotten, unknown=len(digests) - forgotten)
        return total

    # -- classifying --------------------------------------------------------

    def classify(self, items: Iterable[MailItem]) -> Iterator[Verdict | Refusal]:
        """A ``Verdict`` (or a ``Refusal``) per message, in input order."""
        for batch in batched(items, self.config.store.batch_size):
            results = self._analyse(batch)
            analysed = [r for r in results if isinstance(r, _Analysed)]
            verdicts = iter(self._score(analysed) if analysed else [])
            for r in results:
                yield next(verdicts) if isinstance(r, _Analysed) else r

    def _fit(self, docs: Sequence[dict[str, int]], tx: StoreTransaction | None = None) -> _Fitted:
        """The model's parameters for the known tokens of ``docs``, and their X."""
        vocabulary = batch_vocabulary(docs)
        # Inside the caller's transaction if it has one (online learning),
        # else in a read transaction of its own.
        with nullcontext(tx) if tx is not None else self.store.begin(write=False) as reader:
            totals, counts = self._read_model(reader, vocabulary.tokens)
        known = (counts[:, 0] + counts[:, 1]) > 0
        columns = Vocabulary(t for t, k in zip(vocabulary.tokens, known) if k)
        counts = counts[known]
        stats = model.ClassStats(totals.messages, totals.terms, totals.binary_terms, totals.vocabulary_size, totals.histogram)
        token_counts = model.TokenCounts(doc_count=counts[:, 0:2].T.copy(), term_count=counts[:, 2:4].T.copy())
        params = model.estimate(self.config.model.event_model, token_counts, stats, self.config.model.alpha)
        X = count_matrix(docs, columns, binary=params.binary)
        return _Fitted(columns, token_counts, stats, params, X)

    def _read_model(self, reader: StoreTransaction, token_list: Sequence[str]) -> tuple[Totals, IntArray]:
        """Totals and token counts of the model that classifies this user's
        mail: the user's own, the shared one (fallback), or both added (merge)."""
        totals, owners = self._model_of(reader)
        counts = reader.token_counts(token_list, owner=owners[0])
        for other in owners[1:]:
            counts = counts + reader.token_counts(token_list, owner=other)
        return totals, counts

    def _model_of(self, reader: StoreTransaction) -> tuple[Totals, tuple[str, ...]]:
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
            mine.messages + shared.messages,
            mine.terms + shared.terms,
            mine.binary_terms + shared.binary_terms,
            reader.vocabulary_size([reader.owner, ""]),
            mine.histogram,  # not used by the multinomial models "merge" allows
        )
        return merged, (reader.owner, "")

    def _score(self, analysed: Sequence[_Analysed], tx: StoreTransaction | None = None) -> list[Verdict]:
        fitted = self._fit([a.counts for a in analysed], tx)
        m = self.config.model
        odds = model.log_odds(model.joint_log_likelihood(fitted.X, fitted.params, m.tempering, m.min_evidence))
        probability = model.spam_probability(odds)
        decision = model.decide(odds, self.thresholds)
        return [
            Verdict(a.item.source, a.digest, float(p), float(lo), VERDICT_NAMES[int(v)])
            for a, p, lo, v in zip(analysed, probability, odds, decision)
        ]

    # -- learning online ----------------------------------------------------

    def learn_online(
        self,
        labelled: Iterable[tuple[bool, MailItem]],
        *,
        train_mode: str = "teft",
        margin: float = 1.0,
    ) -> Iterator[OnlineStep]:
        """Classify each message, then train on its true label (the TREC
        spam-track protocol: a user who corrects every verdict at once).

        train_mode: "teft" trains every message; "toe" only misclassified
        ones (an unsure verdict counts as an error); "tune" also those whose
        log-odds lie within ``margin`` of a decision bound. Before the model
        has both classes a message gets score 0.5, log-odds 0 and "unsure".
        Each message is parsed and tokenized once for both steps.
        """
        if train_mode not in TRAIN_MODES:
            raise ValueError(f"unknown train mode {train_mode!r}")
        for is_spam, item in labelled:
            started = time.perf_counter()
            analysed = self._analyse([item])[0]
            if isinstance(analysed, Refusal):
                yield OnlineStep(is_spam, analysed, False, time.perf_counter() - started, 0.0)
                continue
            # One write transaction for both steps: the verdict is computed
            # from exactly the counts the training then updates.
            with self.store.begin() as tx:
                try:
                    verdict = self._score([analysed], tx)[0]
                except NotTrainedError:
                    verdict = Verdict(item.source, analysed.digest, 0.5, 0.0, "unsure")
                classified = time.perf_counter()
                wrong = verdict.verdict != ("spam" if is_spam else "ham")
                near = min(abs(verdict.log_odds - self.thresholds.ham_max), abs(verdict.log_odds - self.thresholds.spam_min)) < margin
                train = train_mode == "teft" or wrong or (train_mode == "tune" and near)
                if train:
                    self._train_batch(tx, [(model.SPAM if is_spam else model.HAM, analysed)], relabel=False)
            yield OnlineStep(is_spam, verdict, train, classified - started, time.perf_counter() - classified)

    # -- facts --------------------------------------------------------------

    def stats(self) -> Stats:
        """Messages and tokens per class, and where the database is."""
        totals = self.store.totals()
        unseen = [
            int(h[h[:, 0] == 0, 1].sum()) if h.size else 0 for h in totals.histogram
        ]
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
        )

    # -- insight ------------------------------------------------------------

    def _shown_counts(self, counts: model.TokenCounts) -> model.IntArray:
        """The (2, m) counts the configured event model estimates from."""
        return counts.term_count if self.config.model.event_model == "multinomial" else counts.doc_count

    def top_words(self, n: int = 30, *, spam: bool = True, min_count: int = 5) -> list[WordScore]:
        """The ``n`` tokens the model ties most strongly to spam (or ham), best first.

            score[j] = log theta[spam,j] - log theta[ham,j]   (negated for ham)

        with theta the configured event model's smoothed P(token|class)
        (``model.token_log_likelihood``). Tokens whose spam_count + ham_count
        is below ``min_count`` are left out: a token seen once has a large
        score from the smoothing alone. Ties are broken by the token.
        Raises ``NotTrainedError`` without a trained spam and ham.
        """
        m = self.config.model
        n = max(n, 0)
        best_tokens: list[str] = []
        best_rows = np.zeros((0, 4), dtype=np.int64)
        best_scores = np.zeros(0)
        with self.store.begin(write=False) as reader:
            totals, owners = self._model_of(reader)
            stats = model.ClassStats(totals.messages, totals.terms, totals.binary_terms, totals.vocabulary_size, totals.histogram)
            model.log_prior(stats)  # NotTrainedError without both classes
            # The vocabulary streams by in token order, a chunk at a time;
            # only the best n so far are kept, so memory stays small.
            chunks = reader.iter_frequent_tokens(min_count, occurrences=m.event_model == "multinomial", owners=owners)
            for token_list, rows in chunks:
                counts = model.TokenCounts(doc_count=rows[:, 0:2].T.copy(), term_count=rows[:, 2:4].T.copy())
                log_theta = model.token_log_likelihood(m.event_model, counts, stats, m.alpha)
                score = log_theta[model.SPAM] - log_theta[model.HAM]
                tokens_now = best_tokens + token_list
                rows_now = np.concatenate([best_rows, rows])
                scores_now = np.concatenate([best_scores, score if spam else -score])
                # The kept ones precede the chunk in token order, so the
                # stable sort breaks ties by token.
                keep = np.argsort(-scores_now, kind="stable")[:n]
                keep.sort()  # back to token order for the next round
                best_tokens = [tokens_now[j] for j in keep.tolist()]
                best_rows, best_scores = rows_now[keep], scores_now[keep]
        counts = model.TokenCounts(doc_count=best_rows[:, 0:2].T.copy(), term_count=best_rows[:, 2:4].T.copy())
        shown = self._shown_counts(counts)
        order = np.argsort(-best_scores, kind="stable")
        return [
            WordScore(best_tokens[j], int(shown[model.SPAM, j]), int(shown[model.HAM, j]), float(best_scores[j]))
            for j in order.tolist()
        ]

    def explain(self, item: MailItem) -> Explanation:
        """The message's verdict and its log-odds term by term (``model.log_odds_terms``):
        the prior, each known token's contribution and, for bernoulli, the
        absent-token term. They add up to the log-odds ``classify`` gives the
        message. Raises ``MailParseError`` if it is not mail, ``NotTrainedError``
        without a trained spam and ham.
        """
        counts = term_counts(self.tokens(item))
        fitted = self._fit([counts])
        m = self.config.model
        odds = model.log_odds(model.joint_log_likelihood(fitted.X, fitted.params, m.tempering, m.min_evidence))
        log_theta = model.token_log_likelihood(m.event_model, fitted.counts, fitted.stats, m.alpha)
        terms = model.log_odds_terms(fitted.X, fitted.params, log_theta, m.tempering, m.min_evidence)
        shown = self._shown_counts(fitted.counts)
        contributions = [
            Contribution(token, float(terms.token[j]), int(shown[model.SPAM, j]), int(shown[model.HAM, j]))
            for j, token in enumerate(fitted.columns.tokens)
        ]
        absent = 0
        if m.event_model == "bernoulli":
            absent = fitted.stats.vocabulary_size - int(terms.used.sum())
            contributions.append(Contribution(None, terms.absent, None, None))
        contributions.sort(key=lambda c: (-abs(c.contribution), c.token or ""))
        return Explanation(
            source=item.source,
            digest=item.digest,
            verdict=VERDICT_NAMES[int(model.decide(odds, self.thresholds)[0])],
            score=float(model.spam_probability(odds)[0]),
            log_odds=float(odds[0]),
            prior=terms.prior,
            tokens=tuple(contributions),
            event_model=m.event_model,
            events=int(terms.events),
            factor=terms.factor,
            ignored=len(fitted.columns) - int(terms.used.sum()),
            unknown=len(counts) - len(fitted.columns),
            absent=absent,
        )

    def training_history(self) -> list[TrainedDay]:
        """Per day, oldest first, how many of the messages the model holds now
        were trained that day (from the ledger's trained_at)."""
        with self.store.begin(write=False) as reader:
            rows = reader.trained_per_day()
        days: dict[date, list[int]] = {}
        for day, label, n in rows:
            days.setdefault(day, [0, 0])[label] += n
        return [TrainedDay(day, spam=c[model.SPAM], ham=c[model.HAM]) for day, c in sorted(days.items())]

    # -- maintenance --------------------------------------------------------

    def check(self) -> CheckReport:
        """Verify that the stored counts of this user's model agree with each
        other, in one read snapshot (``spamfilter db check``).

        With the ledger's per-message token counts L and the token table T:

            class_totals.messages[c]     = ledger rows of class c + untracked
            class_totals.terms[c]        = sum_j T.terms[c,j]   (= sum of L's counts + untracked)
            class_totals.binary_terms[c] = sum_j T.docs[c,j]    (= sum of L's sizes + untracked)
            doc_histogram[c,k]           = #{j : T.docs[c,j] = k}, k = 0 included
            T[j]                         = sum over the ledger's messages of L[j]

        plus no negative count, no token in no message, terms >= docs and
        docs <= messages per class, and SQLite's integrity check. The last
        equation is the strongest; it is skipped for a store that was pruned or
        imported into (``untracked`` not zero), whose ledger no longer holds
        every count.
        """
        store = self.store
        with store.snapshot() as tx:
            totals = tx.totals()
            untracked = tx.untracked()
            exact = not untracked.any()
            ledger_rows = np.zeros((3, 2), dtype=np.int64)
            per_token: dict[str, list[int]] = {}
            for label, counts in tx.iter_ledger():
                ledger_rows[:, label] += (1, sum(counts.values()), len(counts))
                if exact:
                    for token, n in counts.items():
                        row = per_token.get(token)
                        if row is None:
                            row = per_token[token] = [0, 0, 0, 0]
                        row[label] += 1
                        row[2 + label] += n
            negative, empty, uneven, beyond, differ = (_Findings() for _ in range(5))
            sums = [0, 0, 0, 0]
            histogram: tuple[Counter[int], Counter[int]] = (Counter(), Counter())
            messages = totals.messages.tolist()
            for token, hd, sd, ht, st, _ in tx.iter_tokens():
                row = [hd, sd, ht, st]
                for i in range(4):
                    sums[i] += row[i]
                histogram[0][hd] += 1
                histogram[1][sd] += 1
                if min(row) < 0:
                    negative.add(f"token {token!r} has counts {row}")
                if hd <= 0 and sd <= 0:
                    empty.add(f"token {token!r} is in no message")
                for label in (model.HAM, model.SPAM):
                    docs, terms = row[label], row[2 + label]
                    if docs > terms or (docs == 0) != (terms == 0):
                        uneven.add(f"token {token!r}: {_CLASS[label]} messages {docs}, occurrences {terms}")
                    if docs > messages[label]:
                        beyond.add(f"token {token!r} is in {docs} {_CLASS[label]} messages of {messages[label]}")
                if exact:
                    expected = per_token.pop(token, None)
                    if expected != row:
                        differ.add(f"token {token!r}: stored {row}, ledger {expected or [0, 0, 0, 0]}")
            for token, expected in sorted(per_token.items()):
                differ.add(f"token {token!r}: not stored, ledger {expected}")
        stored = np.stack([totals.messages, totals.terms, totals.binary_terms])
        negative.extend(
            f"class_totals {_CLASS[c]} {name} is {int(stored[i, c])}"
            for i, name in enumerate(_TOTAL_NAMES) for c in (0, 1) if stored[i, c] < 0
        )
        for c in (0, 1):
            negative.extend(f"doc_histogram {_CLASS[c]} count {k} has {n} tokens" for k, n in totals.histogram[c].tolist() if n < 0)
        token_sums = np.array([[sums[2], sums[3]], [sums[0], sums[1]]], dtype=np.int64)
        items = [
            negative.item("no count is negative"),
            empty.item("every stored token is in a message"),
            uneven.item("occurrences >= messages >= 1 per class"),
            beyond.item("no token is in more messages than its class has"),
            _compare_item(
                "class totals (terms, binary_terms) = sums over the tokens",
                stored[1:], token_sums, "the tokens add up to", names=_TOTAL_NAMES[1:],
            ),
            _histogram_item(totals.histogram, histogram),
            _compare_item(
                "class totals = sums over the ledger" + (" + untracked" if not exact else ""),
                stored, ledger_rows + untracked, "the ledger" + (" + untracked" if not exact else "") + " gives", names=_TOTAL_NAMES,
            ),
        ]
        if exact:
            items.append(differ.item("token counts = sums over the ledger's messages"))
        else:
            why = [w for w, flag in (("pruned", (untracked[1:] < 0).any()), ("imported", (untracked > 0).any())) if flag]
            items.append(CheckItem("token counts = sums over the ledger's messages", f"skipped ({', '.join(why) or 'pruned'})"))
        problems = store.integrity_check()
        if problems is None:
            items.append(CheckItem("SQLite integrity_check", "skipped (not SQLite)"))
        else:
            items.append(CheckItem("SQLite integrity_check", "failed" if problems else "ok", tuple(problems)))
        return CheckReport(store.owner, store.display_url, tuple(items))

    def prune(self, min_count: int, older_than_days: int, *, dry_run: bool = False, today: date | None = None) -> PruneSummary:
        """Delete this user's tokens in fewer than ``min_count`` messages (spam
        and ham together) that were last trained ``older_than_days`` or more
        days ago (0: any day; a token without a date counts as old), in one
        transaction (``spamfilter db prune``).

        The class totals lose the pruned tokens' occurrences, so
        N[c] = sum_j N[c,j] over the tokens left and the multinomial estimates
        theta[c,j] = (N[c,j] + alpha) / (N[c] + alpha*V) still sum to 1 over
        the vocabulary left; message counts (priors, Bernoulli denominators)
        do not change. The ledger keeps each message's full counts, so
        forgetting a message later subtracts what is still there and stops
        at zero for the tokens that are gone. SQLite keeps the freed pages
        for reuse; ``vacuum`` gives them back to the file system.
        """
        if min_count < 0 or older_than_days < 0:
            raise ValueError("min_count and older_than_days must be >= 0")
        today = today or datetime.now(timezone.utc).date()
        size_before = self.store.size_bytes()
        with self.store.begin() as tx:
            before = tx.totals().vocabulary_size
            removed, counts = tx.prune_tokens(min_count, today - timedelta(days=older_than_days), dry_run=dry_run)
        return PruneSummary(
            user=self.store.owner,
            tokens_before=before,
            tokens_removed=removed,
            ham_terms_removed=int(counts[2]),
            spam_terms_removed=int(counts[3]),
            size_before=size_before,
            size_after=self.store.size_bytes(),
            dry_run=dry_run,
        )

    def vacuum(self) -> VacuumSummary:
        """Give the database's free space back (``spamfilter db vacuum``);
        the sizes are of a SQLite file and its WAL (None elsewhere)."""
        before = self.store.size_bytes()
        self.store.vacuum()
        return VacuumSummary(self.store.display_url, before, self.store.size_bytes())

    def export_counts(self, out: TextIO) -> int:
        """Write this user's counts to ``out`` in the counts format v1
        (``spamfilter db export``), from one read snapshot, streamed; returns
        the number of tokens written.

            # spamfilter counts v1 owner=<owner>
            # totals ham_messages=M0 spam_messages=M1 ham_terms=N0 spam_terms=N1 ham_binary_terms=B0 spam_binary_terms=B1
            # token<TAB>ham_docs<TAB>spam_docs<TAB>ham_terms<TAB>spam_terms
            <token><TAB><ham_docs><TAB><spam_docs><TAB><ham_terms><TAB><spam_terms>
            ...

        UTF-8, one token a line in code point order; in tokens and the owner
        a backslash, tab, newline and carriage return are written as \\\\,
        \\t, \\n and \\r, and a leading "#" as \\#. The ledger is not
        exported: imported counts cannot be forgotten message by message.
        """
        written = 0
        with self.store.snapshot() as tx:
            t = tx.totals()
            out.write(f"{COUNTS_HEADER} owner={escape_token(self.store.owner)}\n")
            values = (*t.messages.tolist(), *t.terms.tolist(), *t.binary_terms.tolist())
            out.write("# totals " + " ".join(f"{key}={v}" for key, v in zip(_TOTALS_KEYS, values)) + "\n")
            out.write("# token\tham_docs\tspam_docs\tham_terms\tspam_terms\n")
            lines: list[str] = []
            for token, hd, sd, ht, st, _ in tx.iter_tokens():
                lines.append(f"{escape_token(token)}\t{hd}\t{sd}\t{ht}\t{st}\n")
                if len(lines) == 1000:
                    out.write("".join(lines))
                    written += len(lines)
                    lines = []
            out.write("".join(lines))
            written += len(lines)
        return written

    def import_counts(self, lines: Iterable[str], *, replace: bool) -> ImportSummary:
        """Read counts in the format ``export_counts`` writes into this user's
        model, in one transaction (``spamfilter db import``).

        ``replace`` first deletes the user's model (tokens, totals,
        histogram and ledger); otherwise the counts are added to it. The
        histogram is kept in step token by token, the imported tokens' last
        seen day is today, and the imported totals are recorded as untracked
        (no ledger: they cannot be forgotten message by message). The file
        is checked as it is read: counts are whole numbers >= 0 with
        occurrences >= messages >= 1 in some class and no more messages
        than the totals line gives, and the token lines must add up to its
        terms and binary_terms (a truncated file fails). Raises
        ``CountsFileError`` naming the line; nothing is written then.
        """
        reader = _CountsReader(lines)
        tokens = 0
        with self.store.begin() as tx:
            if replace:
                tx.clear_model()
            for chunk in reader.chunks(5000):
                token_list = list(chunk)
                delta = np.array([chunk[t] for t in token_list], dtype=np.int64).reshape(-1, 4)
                tx.add_counts(token_list, delta, np.zeros((3, 2), dtype=np.int64))
                tokens += len(token_list)
            imported = reader.finish()
            tx.add_counts([], np.zeros((0, 4), dtype=np.int64), imported)
            tx.add_untracked(imported)
        return ImportSummary(self.store.owner, tokens, int(imported[0, model.HAM]), int(imported[0, model.SPAM]), replace)


def _retrying(step: Callable[[], T], attempts: int = 8) -> T:
    """Run one transaction, again after a lost race with another process
    (``StoreConflict``: deadlock, serialization failure, a message inserted
    twice), with a short random backoff; the last failure is raised. A lock
    held past the busy timeout (``StoreBusyError``) is not retried: the
    timeout is already the wait the user chose."""
    for attempt in range(attempts):
        try:
            return step()
        except StoreConflict:
            if attempt == attempts - 1:
                raise
            time.sleep(random.uniform(0.0, 0.05 * 2**attempt))
    raise AssertionError("unreachable")


class _Delta:
    """Accumulates count changes of a batch before one write to the store."""

    def __init__(self) -> None:
        self.rows: dict[str, list[int]] = {}
        self.classes = np.zeros((3, 2), dtype=np.int64)

    def add(self, label: int, counts: dict[str, int], sign: int) -> None:
        rows = self.rows
        doc_col, term_col = label, 2 + label
        for token, n in counts.items():
            row = rows.get(token)
            if row is None:
                row = rows[token] = [0, 0, 0, 0]
            row[doc_col] += sign
            row[term_col] += sign * n
        self.classes[0, label] += sign
        self.classes[1, label] += sign * sum(counts.values())
        self.classes[2, label] += sign * len(counts)

    def apply(self, tx: StoreTransaction) -> None:
        token_list = [t for t, row in self.rows.items() if any(row)]
        if not token_list and not self.classes.any():
            return
        delta = np.array([self.rows[t] for t in token_list], dtype=np.int64).reshape(-1, 4)
        tx.add_counts_clipped(token_list, delta, self.classes)


def upgrade_database(url: str, *, busy_timeout: float = 30.0, create_dirs: bool = True) -> tuple[str | None, str | None]:
    """Bring the database at ``url`` to the current schema; (revision before, after).

    A missing SQLite file is created, in a missing folder only with ``create_dirs``."""
    store = Store.open(url, busy_timeout=busy_timeout, upgrade_new=False, check=False, create_dirs=create_dirs)
    try:
        before = store.schema_revision()
        store.upgrade()
        return before, store.schema_revision()
    finally:
        store.close()


# -- maintenance: check results, the counts file format ------------------------

_CLASS = {model.HAM: "ham", model.SPAM: "spam"}
_TOTAL_NAMES = ("messages", "terms", "binary_terms")

#: First line of a counts file (``Filter.export_counts``); "v1" is the format version.
COUNTS_HEADER = "# spamfilter counts v1"
_TOTALS_KEYS = ("ham_messages", "spam_messages", "ham_terms", "spam_terms", "ham_binary_terms", "spam_binary_terms")
_ESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r", "#": "#"}
_ESCAPED = re.compile(r"\\(.?)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class CheckItem:
    """One comparison of ``Filter.check``: what was compared, its status
    ("ok", "failed" or "skipped (why)") and the problems found."""

    name: str
    status: str
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CheckReport:
    """What ``Filter.check`` found for one user's model."""

    user: str
    database: str
    items: tuple[CheckItem, ...]

    @property
    def ok(self) -> bool:
        """No comparison failed."""
        return all(item.status != "failed" for item in self.items)


@dataclass(frozen=True, slots=True)
class PruneSummary:
    """What ``Filter.prune`` removed (or would remove, ``dry_run``); the
    sizes are of a SQLite file and its WAL, None on other databases."""

    user: str
    tokens_before: int
    tokens_removed: int
    ham_terms_removed: int
    spam_terms_removed: int
    size_before: int | None
    size_after: int | None
    dry_run: bool


@dataclass(frozen=True, slots=True)
class VacuumSummary:
    """Database size before and after ``Filter.vacuum`` (None unless SQLite)."""

    database: str
    size_before: int | None
    size_after: int | None


@dataclass(frozen=True, slots=True)
class ImportSummary:
    """What ``Filter.import_counts`` read: the tokens and the messages of
    the totals line; ``replaced``: the model was emptied first."""

    user: str
    tokens: int
    ham_messages: int
    spam_messages: int
    replaced: bool


class _Findings:
    """Problems of one kind: how many, and the first few to show."""

    SHOWN = 10

    def __init__(self) -> None:
        self.count = 0
        self.examples: list[str] = []

    def add(self, problem: str) -> None:
        self.count += 1
        if len(self.examples) < self.SHOWN:
            self.examples.append(problem)

    def extend(self, problems: Iterable[str]) -> None:
        for problem in problems:
            self.add(problem)

    def item(self, name: str) -> CheckItem:
        shown = list(self.examples)
        if self.count > len(shown):
            shown.append(f"... and {self.count - len(shown)} more")
        return CheckItem(name, "failed" if self.count else "ok", tuple(shown))


def _compare_item(name: str, stored: IntArray, expected: IntArray, what: str, *, names: Sequence[str]) -> CheckItem:
    """Compare (k, 2) stored class totals with what they should be."""
    problems = tuple(
        f"{_CLASS[c]} {row}: stored {int(stored[i, c])}, {what} {int(expected[i, c])}"
        for i, row in enumerate(names) for c in (0, 1) if stored[i, c] != expected[i, c]
    )
    return CheckItem(name, "failed" if problems else "ok", problems)


def _histogram_item(stored: tuple[IntArray, IntArray], counted: tuple[Counter[int], Counter[int]]) -> CheckItem:
    """Compare doc_histogram with the recount from the tokens (empty buckets ignored)."""
    problems = []
    for c in (0, 1):
        have = {int(k): int(n) for k, n in stored[c].tolist() if n != 0}
        for k in sorted(set(have) | set(counted[c])):
            if have.get(k, 0) != counted[c].get(k, 0):
                problems.append(f"{_CLASS[c]}, tokens in {k} messages: stored {have.get(k, 0)}, counted {counted[c].get(k, 0)}")
    findings = _Findings()
    findings.extend(problems)
    return findings.item("doc_histogram = recount from the tokens")


def escape_token(text: str) -> str:
    """A token (or owner) as written in a counts file: backslash, tab, newline
    and carriage return escaped, and a leading "#" (which would read as a comment)."""
    out = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return "\\" + out if out.startswith("#") else out


def unescape_token(text: str) -> str:
    """Inverse of ``escape_token``; raises ``ValueError`` for an unknown escape."""
    if "\\" not in text:
        return text

    def one(m: re.Match[str]) -> str:
        if m.group(1) not in _ESCAPES:
            raise ValueError(f"unknown escape \\{m.group(1)}")
        return _ESCAPES[m.group(1)]

    return _ESCAPED.sub(one, text)


class _CountsReader:
    """Parses and checks a counts file line by line (``Filter.import_counts``)."""

    def __init__(self, lines: Iterable[str]) -> None:
        self.lines = lines
        self.totals: IntArray | None = None
        self.sums = np.zeros((2, 2), dtype=np.int64)  # rows terms, binary_terms
        self.where = "line 1"

    def fail(self, reason: str) -> CountsFileError:
        return CountsFileError(f"counts file, {self.where}: {reason}")

    def chunks(self, size: int) -> Iterator[dict[str, list[int]]]:
        """Token -> [ham_docs, spam_docs, ham_terms, spam_terms], ``size``
        tokens at a time (a token given twice in one chunk adds up)."""
        chunk: dict[str, list[int]] = {}
        number = 0
        try:
            for number, line in enumerate(self.lines, start=1):
                self.where = f"line {number}"
                line = line[:-1] if line.endswith("\n") else line
                line = line[:-1] if line.endswith("\r") else line
                if number == 1:
                    if not (line == COUNTS_HEADER or line.startswith(COUNTS_HEADER + " ")):
                        raise self.fail(f"not a spamfilter counts file (the first line is not {COUNTS_HEADER!r} ...)")
                    continue
                if line.startswith("# totals "):
                    self.totals = self._totals(line)
                    continue
                if not line or line.startswith("#"):
                    continue
                token, counts = self._token_line(line)
                row = chunk.get(token)
                if row is None:
                    chunk[token] = counts
                else:
                    chunk[token] = [a + b for a, b in zip(row, counts)]
                if len(chunk) >= size:
                    yield chunk
                    chunk = {}
        except UnicodeDecodeError as exc:
            raise CountsFileError(f"counts file, after line {number}: not UTF-8 ({exc.reason})") from None
        if number == 0:
            raise self.fail("the file is empty")
        if chunk:
            yield chunk

    def _totals(self, line: str) -> IntArray:
        fields = dict(part.partition("=")[::2] for part in line[len("# totals ") :].split())
        try:
            values = [int(fields[key]) for key in _TOTALS_KEYS]
        except (KeyError, ValueError):
            raise self.fail(f"the totals line needs whole numbers for {', '.join(_TOTALS_KEYS)}") from None
        if min(values) < 0:
            raise self.fail("a total is negative")
        return np.array(values, dtype=np.int64).reshape(3, 2)

    def _token_line(self, line: str) -> tuple[str, list[int]]:
        if self.totals is None:
            raise self.fail("a token line comes before the '# totals' line")
        parts = line.split("\t")
        if len(parts) != 5:
            raise self.fail(f"expected token and 4 counts separated by tabs, found {len(parts)} fields")
        try:
            token = unescape_token(parts[0])
            counts = [int(p) for p in parts[1:]]
        except ValueError as exc:
            raise self.fail(str(exc)) from None
        if min(counts) < 0:
            raise self.fail("a count is negative")
        for c in (0, 1):
            docs, terms = counts[c], counts[2 + c]
            if docs > terms or (docs == 0) != (terms == 0):
                raise self.fail(f"{_CLASS[c]}: {docs} messages but {terms} occurrences")
            if docs > self.totals[0, c]:
                raise self.fail(f"the token is in {docs} {_CLASS[c]} messages, the totals line has {int(self.totals[0, c])}")
        if counts[0] == 0 and counts[1] == 0:
            raise self.fail("the token is in no message")
        self.sums[0] += counts[2:4]
        self.sums[1] += counts[0:2]
        return token, counts

    def finish(self) -> IntArray:
        """The totals to add, (3, 2) rows messages, terms, binary_terms,
        once the token lines were seen to add up to them."""
        self.where = "end of file"
        if self.totals is None:
            raise self.fail("no '# totals' line")
        for i, name in ((1, "terms"), (2, "binary_terms")):
            for c in (0, 1):
                if self.sums[i - 1, c] != self.totals[i, c]:
                    raise self.fail(
                        f"the token lines add up to {int(self.sums[i - 1, c])} {_CLASS[c]} {name}, the totals line says "
                        f"{int(self.totals[i, c])} (a truncated or edited file)"
                    )
        return self.totals
