"""The Bayes decision: P(spam) from log-odds, and the verdict with a loss matrix.

Pure numpy/scipy, no I/O. The verdict acts on log-odds bounds: the filter
passes it the calibrated log-odds (``spamfilter.nb.calibration``), so that
the loss matrix's decision is taken on a probability that means what it
says; ``thresholds_from_loss`` derives the bounds from the costs and
``thresholds_from_cutoffs`` from explicit probability cutoffs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import expit

from spamfilter.counts import IntArray
from spamfilter.verdicts import HAM, SPAM, UNSURE_CODE

FloatArray = npt.NDArray[np.float64]


def spam_probability(odds: FloatArray) -> FloatArray:
    """P(spam|x) = 1 / (1 + exp(-L)); saturates to 1.0 past L ~ 37, so never rank on it."""
    result: FloatArray = expit(odds)
    return result


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Verdict bounds on the log-odds: ham if L <= ham_max, spam if L > spam_min."""

    ham_max: float
    spam_min: float


def logit(p: float) -> float:
    """log(p / (1 - p)) for 0 < p < 1."""
    return float(np.log(p) - np.log1p(-p))


def thresholds_from_loss(cost_ham_as_spam: float, cost_spam_as_ham: float, cost_unsure: float) -> Thresholds:
    """Bayes decision rule with a reject option, as log-odds bounds.

    With p = P(spam|x) the expected loss of each action is

        say ham:    p * cost_spam_as_ham
        say spam:   (1 - p) * cost_ham_as_spam
        say unsure: cost_unsure            (a person looks at it)

    Without an unsure action, spam wins when p > t = c_hs / (c_hs + c_sh)
    (c_hs = cost_ham_as_spam, c_sh = cost_spam_as_ham): with c_hs = 10,
    c_sh = 1 a message must be 10/11 = 91% likely spam. With one, unsure wins
    on p in (c_u / c_sh, 1 - c_u / c_hs) whenever that interval is not empty,
    i.e. when c_u < c_hs * c_sh / (c_hs + c_sh); otherwise the two-way rule stands.
    """
    c_hs, c_sh, c_u = cost_ham_as_spam, cost_spam_as_ham, cost_unsure
    if c_u <= 0 or c_u >= c_hs * c_sh / (c_hs + c_sh):
        t = logit(c_hs / (c_hs + c_sh))
        return Thresholds(ham_max=t, spam_min=t)
    return Thresholds(ham_max=logit(c_u / c_sh), spam_min=logit(1 - c_u / c_hs))


def thresholds_from_cutoffs(ham_cutoff: float, spam_cutoff: float) -> Thresholds:
    """Explicit probability cutoffs (0 < ham_cutoff <= spam_cutoff < 1) as log-odds bounds."""
    return Thresholds(ham_max=logit(ham_cutoff), spam_min=logit(spam_cutoff))


def decide(odds: FloatArray, thresholds: Thresholds) -> IntArray:
    """Verdict per message: HAM, SPAM or UNSURE, shape (n,)."""
    verdict = np.full(odds.shape, UNSURE_CODE, dtype=np.int64)
    verdict[odds <= thresholds.ham_max] = HAM
    verdict[odds > thresholds.spam_min] = SPAM
    return verdict
