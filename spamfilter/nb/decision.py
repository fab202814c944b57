"""The Bayes decision: P(spam) from log-odds, and the verdict with a loss matrix.

Pure numpy/scipy, no I/O. The verdict acts on log-odds bounds: the filter
passes it the calibrated log-odds (``spamfilter.nb.calibration``), so that
the loss matrix's decision is taken on a probability that means what it
says; ``thresholds_from_loss`` derives the bounds from the costs,
``thresholds_from_cutoffs`` from explicit probability cutoffs, and
``best_cutoffs`` the bounds with the lowest loss on labelled scores
(``spamfilter tune``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import expit

from spamfilter.counts import IntArray
from spamfilter.verdicts import HAM, SPAM, UNSURE_CODE

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


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


def configured_thresholds(ham_cutoff: float | None, spam_cutoff: float | None, cost_ham_as_spam: float, cost_spam_as_ham: float, cost_unsure: float) -> Thresholds:
    """The bounds a configuration decides with: its cutoffs when it sets
    both (``tune --write`` does), else the loss matrix's."""
    if ham_cutoff is not None and spam_cutoff is not None:
        return thresholds_from_cutoffs(ham_cutoff, spam_cutoff)
    return thresholds_from_loss(cost_ham_as_spam, cost_spam_as_ham, cost_unsure)


def decide(odds: FloatArray, thresholds: Thresholds) -> IntArray:
    """Verdict per message: HAM, SPAM or UNSURE, shape (n,)."""
    verdict = np.full(odds.shape, UNSURE_CODE, dtype=np.int64)
    verdict[odds <= thresholds.ham_max] = HAM
    verdict[odds > thresholds.spam_min] = SPAM
    return verdict


@dataclass(frozen=True, slots=True)
class Cutoffs:
    """Verdict bounds in log-odds (ham if L <= ham_max, spam if L > spam_min;
    ``tune`` chooses them on the calibrated log-odds, logit P(spam)) and the
    empirical loss they give on the validation messages."""

    ham_max: float
    spam_min: float
    loss: float

    def probabilities(self) -> tuple[float, float]:
        """The bounds as the config's (ham_cutoff, spam_cutoff): P(spam) at
        each, the inverse of `thresholds_from_cutoffs`."""
        ham_cutoff, spam_cutoff = spam_probability(np.array([self.ham_max, self.spam_min]))
        return float(ham_cutoff), float(spam_cutoff)


def best_cutoffs(
    is_spam: BoolArray,
    odds: FloatArray,
    *,
    cost_ham_as_spam: float,
    cost_spam_as_ham: float,
    cost_unsure: float,
    limit: float = 34.0,
    spam_min_floor: float = -math.inf,
    ham_max_ceiling: float = math.inf,
) -> Cutoffs:
    """The two cutoffs minimising the total loss on labelled scores:

        loss = c_hs * #(ham above spam_min) + c_sh * #(spam at or below ham_max)
             + c_u * #(messages between the two)

    Over the n+1 cuts of the sorted scores, with i1 <= i2 messages below the
    ham and spam cuts, loss = [c_sh S(i1) - c_u i1] + [c_u i2 + c_hs (H - H(i2))]
    (S, H: spam and ham among the lowest i), so a running minimum of the first
    bracket finds the optimum in O(n log n). Cuts fall midway between distinct
    scores and are clamped to +-``limit`` so they stay finite probabilities.
    With cost_unsure = 0 the unsure verdict is not used: one cutoff.

    ``spam_min_floor`` and ``ham_max_ceiling`` bound the cutoffs (``tune``
    passes the loss matrix's own thresholds, so a small sample can neither
    lower the spam cutoff below them nor close the unsure band): a cut is
    allowed where the bound can be placed between the same two scores, and
    the bound is then used as the cutoff.
    """
    order = np.argsort(odds, kind="stable")
    s = np.asarray(odds, dtype=np.float64)[order]
    y = np.asarray(is_spam, dtype=bool)[order]
    n = s.size
    spam_below = np.concatenate([[0], np.cumsum(y)])
    ham_below = np.concatenate([[0], np.cumsum(~y)])
    # a cut at i is possible where it separates distinct scores
    valid = np.ones(n + 1, dtype=bool)
    valid[1:n] = s[1:] > s[:-1]
    cut = np.empty(n + 1)
    cut[0] = s[0] - 1.0 if n else -limit
    cut[n] = s[-1] if n else limit
    cut[1:n] = (s[:-1] + s[1:]) / 2
    cut = np.clip(cut, -limit, limit)
    # score just below and just above each cut (the messages it separates)
    below = np.concatenate([[-np.inf], s])
    above = np.concatenate([s, [np.inf]])
    ham_ok = valid & (below <= ham_max_ceiling)
    spam_ok = valid & (above > spam_min_floor)
    options = _cut_options(spam_below, ham_below, ham_ok, spam_ok, cost_ham_as_spam=cost_ham_as_spam, cost_spam_as_ham=cost_spam_as_ham, cost_unsure=cost_unsure)
    if not options:
        raise ValueError("the cutoff bounds leave no possible cut")
    loss = min(o[0] for o in options)
    # Several cuts may tie (a gap between the classes): take the middle one,
    # the widest margin on both sides, not the first.
    tied = [o for o in options if o[0] <= loss + 1e-9]
    _, i1, i2 = tied[len(tied) // 2]
    if cost_unsure == 0:  # one cutoff, bounded to the same cut (two would open an unsure band)
        one = float(np.clip(cut[i2], min(spam_min_floor, ham_max_ceiling), max(spam_min_floor, ham_max_ceiling)))
        return Cutoffs(ham_max=one, spam_min=one, loss=loss)
    return Cutoffs(ham_max=min(float(cut[i1]), ham_max_ceiling), spam_min=max(float(cut[i2]), spam_min_floor), loss=loss)


def _cut_options(
    spam_below: IntArray, ham_below: IntArray, ham_ok: BoolArray, spam_ok: BoolArray, *, cost_ham_as_spam: float, cost_spam_as_ham: float, cost_unsure: float
) -> list[tuple[float, int, int]]:
    """(loss, i1, i2) for each allowed spam cut i2 with the best ham cut
    i1 <= i2 (a running minimum of the ham cut's bracket; see
    ``best_cutoffs``); i1 = i2 when the unsure verdict is not used."""
    n = spam_below.size - 1
    c_u = cost_unsure if cost_unsure > 0 else float("inf")
    first = np.where(ham_ok, cost_spam_as_ham * spam_below - (c_u if np.isfinite(c_u) else 0.0) * np.arange(n + 1), np.inf)
    run_min, run_arg = float("inf"), 0
    n_ham = int(ham_below[-1])
    options: list[tuple[float, int, int]] = []
    for i2 in range(n + 1):
        if first[i2] < run_min:
            run_min, run_arg = float(first[i2]), i2
        if not spam_ok[i2]:
            continue
        if np.isfinite(c_u):
            if not np.isfinite(run_min):
                continue
            options.append((float(run_min + c_u * i2 + cost_ham_as_spam * (n_ham - ham_below[i2])), run_arg, i2))
        elif ham_ok[i2]:
            options.append((float(cost_spam_as_ham * spam_below[i2] + cost_ham_as_spam * (n_ham - ham_below[i2])), i2, i2))
    return options
