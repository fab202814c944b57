"""The one place a message's log-odds are put together.

    counts (2, m), totals  ->  parameters (``model.estimate``)
    X (n, m)               ->  naive Bayes log-odds (``model.joint_log_likelihood``)
                               or, with one-dependence counts, AODE/SPODE's
                               where a parent value has support (``aode``)
    feature values (n, F)  ->  plus each message feature's Gaussian term
                               (``gaussian.feature_log_odds``), times its weight

    L = (naive or one-dependence) + sum_f feature[f]

Pure numpy/scipy, no I/O. The filter (classify, online learning), explain,
tune, evaluate and the benchmarks all score through ``Scorer``; the settings
travel as one value, the ``[model]`` section (``config.ModelConfig``), so no
caller can assemble them differently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from spamfilter.config import ModelConfig
from spamfilter.counts import TokenCounts, Totals
from spamfilter.nb import aode, model
from spamfilter.nb.gaussian import GaussianParams, feature_log_odds

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Evidence:
    """A batch of n messages over m known tokens, ready to score.

    counts: (2, m) the model's counts of the m tokens; totals: its totals.
    X: (n, m) token counts (0/1 for the binary event models).
    header: (m,) which columns are header-line tokens (``tokenizer.is_header_line``);
        used with ``[model] header_apart``, else None.
    pairs: the one-dependence counts of the m columns, or None (naive Bayes).
    gaussian: the message features' densities, or None (features off).
    features: (n, F) the messages' feature values in their own units, with ``gaussian``.
    unseen: (n, 2) token events of each message the model has never seen
        (not among the m columns): those of its body, those of its header
        lines; used with ``[model] unseen_weight``, else None.
    """

    counts: TokenCounts
    totals: Totals
    X: sp.csr_matrix
    header: npt.NDArray[np.bool_] | None = None
    pairs: aode.PairCounts | None = None
    gaussian: GaussianParams | None = None
    features: FloatArray | None = None
    unseen: FloatArray | None = None


@dataclass(frozen=True, slots=True)
class LogOddsParts:
    """What a batch's log-odds are made of: naive Bayes's (n,); the
    one-dependence estimate's (n,), which replaces it, or None; and each
    message feature's term (n, F), zeros without features, added."""

    naive: FloatArray
    dependent: FloatArray | None
    features: FloatArray

    @property
    def log_odds(self) -> FloatArray:
        """L = log P(spam|x) - log P(ham|x), shape (n,)."""
        chosen = self.naive if self.dependent is None else self.dependent
        result: FloatArray = chosen + self.features.sum(axis=1)
        return result


class Scorer:
    """Turns counts and a batch into log-odds, under one ``[model]`` section.

    The message features count only with ``features`` on, at ``feature_weight``;
    the one-dependence estimate only where ``Evidence.pairs`` is given.
    """

    def __init__(self, scoring: ModelConfig) -> None:
        self.scoring = scoring
        self.feature_weight = scoring.feature_weight if scoring.features else 0.0

    def params(self, counts: TokenCounts, totals: Totals) -> model.NBParams:
        """The smoothed parameters of the columns of ``counts`` (``model.estimate``)."""
        return model.estimate(self.scoring.event_model, counts, totals, self.scoring.alpha)

    def naive(self, X: sp.csr_matrix, params: model.NBParams, header: npt.NDArray[np.bool_] | None = None, unseen: FloatArray | None = None) -> FloatArray:
        """Naive Bayes's log-odds of the rows of X, shape (n,), with the
        settings' selection, tempering and header lines apart (``unseen``:
        ``Evidence.unseen``)."""
        s = self.scoring
        jll = model.joint_log_likelihood(
            X, params, s.tempering, s.min_evidence, s.max_tokens, header if s.header_apart else None, s.header_max_tokens, self.unseen(unseen)
        )
        return model.log_odds(jll)

    def unseen(self, unseen: FloatArray | None) -> FloatArray | None:
        """What the unseen tokens (``Evidence.unseen``, (n, 2)) add to the
        size the tempering divides by, (n,): the body's, or with the header
        lines scored together with it all of them, times ``unseen_weight``
        (None when it is 0 or they were not counted)."""
        s = self.scoring
        if unseen is None or not s.unseen_weight:
            return None
        counted = unseen[:, 0] if s.header_apart else unseen.sum(axis=1)
        result: FloatArray = s.unseen_weight * counted
        return result

    def parts(self, e: Evidence, params: model.NBParams | None = None) -> LogOddsParts:
        """The log-odds parts of the batch (``params``: ``self.params`` of
        its counts, if already computed)."""
        params = self.params(e.counts, e.totals) if params is None else params
        naive = self.naive(e.X, params, e.header, e.unseen)
        dependent = self._dependent(e, params, naive) if e.pairs is not None else None
        n = e.X.shape[0]
        if e.gaussian is None or e.features is None or not self.feature_weight:
            width = e.gaussian.mean.shape[1] if e.gaussian is not None else 0
            features: FloatArray = np.zeros((n, width))
        else:
            features = feature_log_odds(e.features, e.gaussian, self.feature_weight)
        return LogOddsParts(naive, dependent, features)

    def log_odds(self, e: Evidence, params: model.NBParams | None = None) -> FloatArray:
        """The batch's log-odds, shape (n,)."""
        return self.parts(e, params).log_odds

    def _dependent(self, e: Evidence, params: model.NBParams, naive: FloatArray) -> FloatArray:
        """The one-dependence log-odds where a parent value has support,
        naive Bayes's elsewhere, over the tokens the selection keeps."""
        assert e.pairs is not None
        s = self.scoring
        X = model.evidence_features(e.X, params, s.min_evidence, s.max_tokens)
        jll, covered = aode.joint_log_likelihood(X, e.counts.doc_count, e.totals.classes, e.totals.vocabulary_size, e.pairs, s.alpha, s.tempering, s.aode_min_support)
        result: FloatArray = np.where(covered, jll[:, 1] - jll[:, 0], naive)
        return result

    def terms(self, e: Evidence, params: model.NBParams | None = None) -> model.LogOddsTerms:
        """The naive Bayes log-odds of the one message in ``e`` term by term
        (``model.log_odds_terms``, with the same selection and tempering)."""
        s = self.scoring
        params = self.params(e.counts, e.totals) if params is None else params
        log_theta = model.token_log_likelihood(s.event_model, e.counts, e.totals, s.alpha)
        header = e.header if s.header_apart else None
        unseen = self.unseen(e.unseen)
        return model.log_odds_terms(
            e.X, params, log_theta, s.tempering, s.min_evidence, s.max_tokens, header, s.header_max_tokens, float(unseen[0]) if unseen is not None else 0.0
        )
