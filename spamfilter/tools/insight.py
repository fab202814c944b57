"""Insight into a filter's model: the most class-indicative tokens
(``spamfilter top-words``), one message's log-odds term by term
(``spamfilter explain``), when the messages in the model were trained and
the class densities of the message features (``spamfilter report``).

    from spamfilter.config import load_config
    from spamfilter.filter import Filter
    from spamfilter.tools.insight import Insight

    with Filter.open(load_config()) as f:
        for word in Insight(f).top_words(10):
            print(word.token, word.score)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import numpy as np

from spamfilter.answers import Refusal
from spamfilter.config import counts_occurrences, has_absent_term
from spamfilter.counts import IntArray, TokenCounts
from spamfilter.errors import MailParseError
from spamfilter.filter import Filter
from spamfilter.filter.scoring import feature_densities, feature_sums
from spamfilter.mail import MailItem
from spamfilter.nb import model
from spamfilter.tokenizer.features import FEATURE_NAMES, FEATURE_UNITS
from spamfilter.verdicts import Decision


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
        spam), tempering included; 0 for a token ``min_evidence`` or ``max_tokens`` leaves out.
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
        n ** tempering, i.e. multiplied by ``factor`` (with ``[model]
        unseen_weight``, n grows by the weighted unseen token events of the
        body, or of the whole message with the header lines scored with it).
    ignored: known tokens ``min_evidence``, ``max_tokens`` or ``header_max_tokens`` leaves out (contribution 0).
    unknown: distinct tokens of the message the model has never seen.
    absent: vocabulary tokens in the absent-token term (bernoulli), else 0.
    unseen_weight: ``[model] unseen_weight``, what each unknown token event
        counts in n (0: they are ignored; see ``events``).
    header_events, header_factor: with the header lines scored apart
        (``[model] header_apart``), their own n and scale; ``events`` and
        ``factor`` are then the rest's (0 and 1 otherwise).
    """

    source: str
    digest: str
    verdict: Decision
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
    unseen_weight: float = 0.0
    header_events: int = 0
    header_factor: float = 1.0

    def tempering(self) -> str:
        """How many token events count and how their evidence was scaled:
        the body's and, scored apart, the header lines' (each its own n)."""
        if not self.header_events:
            return f"{self.events} token events count, their evidence scaled by {self.factor:.4g}"
        return f"{self.events} body token events count, scaled by {self.factor:.4g}; {self.header_events} header-line token events, scaled by {self.header_factor:.4g}"


@dataclass(frozen=True, slots=True)
class TrainedDay:
    """Messages in the model now that were trained on one (UTC) day."""

    day: date
    spam: int
    ham: int


@dataclass(frozen=True, slots=True)
class FeatureDensity:
    """The two class-conditional normal densities of one message feature,
    in its own units (the stored fixed-point value / SCALE); each pair is
    (ham, spam).

    n: messages in the feature sums.
    mean, sd: mu and sigma of ``gaussian_estimate``, the variance
        floored as the model floors it.
    usable: both classes have the two messages a variance needs; the
        model adds the feature's log-odds only then.
    """

    name: str
    unit: str
    n: tuple[int, int]
    mean: tuple[float, float]
    sd: tuple[float, float]
    usable: bool


@dataclass(frozen=True, slots=True)
class FeatureDensities:
    """The message features of the model ``classify`` uses.

    messages: (ham, spam) messages in the model; the feature sums may hold
        fewer (messages trained before the sums were kept are in none).
    in_use: ``[model] features``: whether scoring adds them.
    """

    messages: tuple[int, int]
    in_use: bool
    weight: float
    features: tuple[FeatureDensity, ...]


class Insight:
    """Reads a ``Filter``'s model (the one its ``classify`` uses: the user's,
    the shared one or both merged) to say what it has learnt."""

    def __init__(self, spamfilter: Filter) -> None:
        self.filter = spamfilter

    def _shown_counts(self, counts: TokenCounts) -> IntArray:
        """The (2, m) counts the configured event model estimates from."""
        return counts.term_count if counts_occurrences(self.filter.config.model.event_model) else counts.doc_count

    def top_words(self, n: int = 30, *, spam: bool = True, min_count: int = 5) -> list[WordScore]:
        """The ``n`` tokens the model ties most strongly to spam (or ham), best first.

            score[j] = log theta[spam,j] - log theta[ham,j]   (negated for ham)

        with theta the configured event model's smoothed P(token|class)
        (``model.token_log_likelihood``). Tokens whose spam_count + ham_count
        is below ``min_count`` are left out: a token seen once has a large
        score from the smoothing alone. Ties are broken by the token.
        Raises ``NotTrainedError`` without a trained spam and ham.
        """
        m = self.filter.config.model
        n = max(n, 0)
        best_tokens: list[str] = []
        best = TokenCounts.zeros(0)
        best_scores = np.zeros(0)
        with self.filter.store.begin(write=False) as reader:
            stats, owners = self.filter.scoring.model_of(reader)
            model.log_prior(stats)  # NotTrainedError without both classes
            # The vocabulary streams by in token order, a chunk at a time;
            # only the best n so far are kept, so memory stays small.
            chunks = reader.insight.iter_frequent_tokens(min_count, occurrences=counts_occurrences(m.event_model), owners=owners)
            for token_list, counts in chunks:
                log_theta = model.token_log_likelihood(m.event_model, counts, stats, m.alpha)
                score = log_theta[model.SPAM] - log_theta[model.HAM]
                tokens_now = best_tokens + token_list
                counts_now = TokenCounts(np.concatenate([best.doc_count, counts.doc_count], axis=1), np.concatenate([best.term_count, counts.term_count], axis=1))
                scores_now = np.concatenate([best_scores, score if spam else -score])
                # The kept ones precede the chunk in token order, so the
                # stable sort breaks ties by token.
                keep = np.argsort(-scores_now, kind="stable")[:n]
                keep.sort()  # back to token order for the next round
                best_tokens = [tokens_now[j] for j in keep.tolist()]
                best, best_scores = counts_now.take(keep), scores_now[keep]
        shown = self._shown_counts(best)
        order = np.argsort(-best_scores, kind="stable")
        return [WordScore(best_tokens[j], int(shown[model.SPAM, j]), int(shown[model.HAM, j]), float(best_scores[j])) for j in order.tolist()]

    def explain(self, item: MailItem) -> Explanation:
        """The message's verdict and its log-odds term by term (``Scorer.terms``):
        the prior, each known token's contribution and, for bernoulli, the
        absent-token term (with ``[model] features`` each feature's term,
        with ``[model] dependence`` the one-dependence estimate's difference
        from naive Bayes). They add up to the log-odds ``classify`` gives the
        message. Raises ``MailParseError`` if it is not mail, ``NotTrainedError``
        without a trained spam and ham.
        """
        analysed = self.filter.analyser.one(item)
        if isinstance(analysed, Refusal):
            raise MailParseError(analysed.reason)
        counts = analysed.counts
        fitted = self.filter.scoring.fit([counts])
        m = self.filter.config.model
        parts = self.filter.scoring.log_odds_parts(fitted, [analysed])
        # With [model] dependence the one-dependence log-odds replace naive
        # Bayes's: the difference is one more contribution, "dependence:<model>".
        dependence = None if parts.dependent is None else parts.dependent - parts.naive
        features = parts.features[0] if fitted.evidence.gaussian is not None else None
        odds = parts.log_odds
        terms = self.filter.scoring.scorer.terms(fitted.evidence, fitted.params)
        shown = self._shown_counts(fitted.evidence.counts)
        contributions = [Contribution(token, float(terms.token[j]), int(shown[model.SPAM, j]), int(shown[model.HAM, j])) for j, token in enumerate(fitted.tokens)]
        absent = 0
        if has_absent_term(m.event_model):
            absent = fitted.evidence.totals.vocabulary_size - int(terms.used.sum())
            contributions.append(Contribution(None, terms.absent, None, None))
        if features is not None:
            # With [model] features each message feature's Gaussian term is
            # one more contribution, named "feature:<name>" (no counts).
            contributions += [Contribution(f"feature:{name}", float(v), None, None) for name, v in zip(FEATURE_NAMES, features.tolist())]
        if dependence is not None:
            contributions.append(Contribution(f"dependence:{m.dependence}", float(dependence[0]), None, None))
        contributions.sort(key=lambda c: (-abs(c.contribution), c.token or ""))
        probability, decision = self.filter.scoring.judge(fitted, odds)
        return Explanation(
            source=item.source,
            digest=item.digest,
            verdict=Decision.of_code(int(decision[0])),
            score=float(probability[0]),
            log_odds=float(odds[0]),
            prior=terms.prior,
            tokens=tuple(contributions),
            event_model=m.event_model,
            events=int(terms.events),
            factor=terms.factor,
            ignored=len(fitted.ids) - int(terms.used.sum()),
            unknown=len(counts) - len(fitted.ids),
            absent=absent,
            unseen_weight=m.unseen_weight,
            header_events=int(terms.header_events),
            header_factor=terms.header_factor,
        )

    def feature_densities(self) -> FeatureDensities:
        """Per message feature, the normal density of each class that the
        model estimates from its stored sums n, sum x, sum x^2 (kept by
        training whatever ``[model] features`` says)."""
        with self.filter.store.begin(write=False) as reader:
            totals, owners = self.filter.scoring.model_of(reader)
            sums = feature_sums(reader, owners)
        params = feature_densities(sums)
        sd = np.sqrt(params.var)
        features = tuple(
            FeatureDensity(
                name=name,
                unit=unit,
                n=(int(sums.n[model.HAM, i]), int(sums.n[model.SPAM, i])),
                mean=(float(params.mean[model.HAM, i]), float(params.mean[model.SPAM, i])),
                sd=(float(sd[model.HAM, i]), float(sd[model.SPAM, i])),
                usable=bool(params.usable[i]),
            )
            for i, (name, unit) in enumerate(zip(FEATURE_NAMES, FEATURE_UNITS, strict=True))
        )
        m = self.filter.config.model
        messages = (int(totals.messages[model.HAM]), int(totals.messages[model.SPAM]))
        return FeatureDensities(messages, m.features, m.feature_weight, features)

    def training_history(self) -> list[TrainedDay]:
        """Per day, oldest first, how many of the messages the model holds now
        were trained that day (from the ledger's trained_at)."""
        with self.filter.store.begin(write=False) as reader:
            rows = reader.insight.trained_per_day()
        days: dict[date, list[int]] = {}
        for day, label, n in rows:
            days.setdefault(day, [0, 0])[label] += n
        return [TrainedDay(day, spam=c[model.SPAM], ham=c[model.HAM]) for day, c in sorted(days.items())]
