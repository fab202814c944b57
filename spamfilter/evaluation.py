"""Measuring the filter: ranking and error rates from labelled runs.

Scores are ranked by log-odds, never by the probability (which ties at 1.0
for most spam). ROC area follows the TREC spam track (Cormack & Lynam):
1-ROCA% = 100 * (1 - AUC), with tied scores counting half.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.stats import rankdata

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


def roc_area(is_spam: BoolArray, score: FloatArray) -> float:
    """P(score of a random spam > score of a random ham), ties counting 1/2.

    Mann-Whitney form: (sum of spam ranks - n_s (n_s + 1) / 2) / (n_s n_h),
    with average ranks for ties. Needs at least one message of each class.
    """
    is_spam = np.asarray(is_spam, dtype=bool)
    n_spam = int(is_spam.sum())
    n_ham = is_spam.size - n_spam
    if n_spam == 0 or n_ham == 0:
        raise ValueError("ROC area needs at least one spam and one ham")
    ranks = rankdata(np.asarray(score, dtype=np.float64))
    return float((ranks[is_spam].sum() - n_spam * (n_spam + 1) / 2) / (n_spam * n_ham))


@dataclass(frozen=True, slots=True)
class ErrorRates:
    """Percentages at the filter's verdicts.

    ham_as_spam: % of ham given the verdict spam (false positives).
    spam_as_ham: % of spam given the verdict ham (false negatives).
    ham_unsure, spam_unsure: % of each class given the verdict unsure.
    accuracy: % of all messages whose verdict is their true class.
    """

    ham_as_spam: float
    spam_as_ham: float
    ham_unsure: float
    spam_unsure: float
    accuracy: float


def error_rates(is_spam: BoolArray, verdicts: list[str]) -> ErrorRates:
    """Error and unsure rates of verdicts ("spam" / "ham" / "unsure") against the truth."""
    is_spam = np.asarray(is_spam, dtype=bool)
    v = np.asarray(verdicts)
    ham, spam = ~is_spam, is_spam

    def pct(mask: BoolArray, within: BoolArray) -> float:
        n = int(within.sum())
        return 100.0 * float((mask & within).sum()) / n if n else 0.0

    correct = ((v == "spam") & spam) | ((v == "ham") & ham)
    return ErrorRates(
        ham_as_spam=pct(v == "spam", ham),
        spam_as_ham=pct(v == "ham", spam),
        ham_unsure=pct(v == "unsure", ham),
        spam_unsure=pct(v == "unsure", spam),
        accuracy=100.0 * float(correct.mean()) if v.size else 0.0,
    )
