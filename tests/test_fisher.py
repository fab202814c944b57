"""Robinson's f(w) and Fisher's chi-square combining (benchmarks/fisher.py), by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks import fisher
from spamfilter.counts import TokenCounts, Totals


def robinson_example() -> tuple[TokenCounts, Totals]:
    from spamfilter.counts import ClassCounts

    # 4 ham, 6 spam; token A in 1 ham and 3 spam, B in none, C in 2 ham
    doc = np.array([[1, 0, 2], [3, 0, 0]], dtype=np.int64)
    empty = np.zeros((0, 2), dtype=np.int64)
    classes = ClassCounts(messages=np.array([4, 6]), terms=doc.sum(axis=1), binary_terms=doc.sum(axis=1))
    return TokenCounts(doc, doc.copy()), Totals(classes, vocabulary_size=3, histogram=(empty, empty))


def test_robinson_probability_by_hand() -> None:
    counts, stats = robinson_example()
    # A: p = (3/6) / (3/6 + 1/4) = 2/3, n = 4: f = (0.5 + 4 * 2/3) / 5; B: unseen, f = x; C: p = 0, n = 2: f = 0.5 / 3
    f = fisher.robinson_probability(counts, stats, s=1.0, x=0.5)
    assert f.tolist() == pytest.approx([(0.5 + 8 / 3) / 5, 0.5, 1 / 6], rel=1e-12)
    # s = 0: the raw ratio of rates
    assert fisher.robinson_probability(counts, stats, s=0.0, x=0.5)[[0, 2]].tolist() == pytest.approx([2 / 3, 0.0], abs=1e-12)


def test_fisher_log_odds_by_hand() -> None:
    import scipy.sparse as sp

    counts, stats = robinson_example()
    f = fisher.robinson_probability(counts, stats, s=1.0, x=0.5)
    X = sp.csr_matrix(np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]]))
    # min_dev 0.1 keeps A and C (B sits at 0.5): 2k = 4 degrees of freedom, where
    # the chi-square tail is Q(t; 4) = exp(-t/2) (1 + t/2)
    h = -2 * (math.log(f[0]) + math.log(f[2]))
    s = -2 * (math.log(1 - f[0]) + math.log(1 - f[2]))
    expected = (-h / 2 + math.log1p(h / 2)) - (-s / 2 + math.log1p(s / 2))
    got = fisher.fisher_log_odds(X, f, 0.1)
    assert got.tolist() == pytest.approx([expected, 0.0], rel=1e-12)
    # min_dev 0.2 keeps only C: Q(t; 2) = exp(-t/2), so L = logit f(C) = -log 5
    assert fisher.fisher_log_odds(X, f, 0.2).tolist() == pytest.approx([-math.log(5.0), 0.0], rel=1e-12)


def test_log_chi2_tail_matches_scipy_and_does_not_underflow() -> None:
    from scipy.stats import chi2

    for t, k in ((0.5, 1), (3.0, 2), (40.0, 7), (200.0, 50)):
        assert fisher.log_chi2_tail(t, k) == pytest.approx(float(chi2.logsf(t, 2 * k)), rel=1e-9)
    # far in the tail scipy's survival function is 0; the closed form is not
    assert chi2.sf(5000.0, 200) == 0.0
    assert fisher.log_chi2_tail(5000.0, 100) == pytest.approx(-2500 + 99 * math.log(2500) - math.lgamma(100) + math.log1p(99 / 2500 + 99 * 98 / 2500**2), rel=1e-6)
