"""Gaussian naive Bayes over continuous features: the textbook example and exactness."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spamfilter.counts import FeatureStats
from spamfilter.nb import model
from spamfilter.nb.gaussian import feature_log_odds, gaussian_estimate, gaussian_log_density
from spamfilter.verdicts import HAM, SPAM

# Zhou, Machine Learning (2016), watermelon data set 3.0: density and sugar
# content of 8 good melons (class 1 here) and 9 bad ones (class 0), in
# thousandths, so scale 1000 holds them exactly.
GOOD = [(697, 460), (774, 376), (634, 264), (608, 318), (556, 215), (403, 237), (481, 149), (437, 211)]
BAD = [(666, 91), (243, 267), (245, 57), (343, 99), (639, 161), (657, 198), (360, 370), (593, 42), (719, 103)]


def stats_of(rows: list[tuple[int, tuple[int, ...]]]) -> FeatureStats:
    total = FeatureStats.zeros(len(rows[0][1]))
    for label, x in rows:
        total = total + FeatureStats.of_message(label, x)
    return total


def melons() -> FeatureStats:
    return stats_of([(SPAM, x) for x in GOOD] + [(HAM, x) for x in BAD])


def test_watermelon_densities_match_the_book() -> None:
    params = gaussian_estimate(melons(), scale=1000, var_floor=0.0)
    # The book: density mu 0.574 / 0.496, sigma 0.129 / 0.195;
    # sugar mu 0.279 / 0.154, sigma 0.101 / 0.108 (good / bad).
    assert params.mean[SPAM] == pytest.approx([0.574, 0.279], abs=5e-4)
    assert params.mean[HAM] == pytest.approx([0.496, 0.154], abs=5e-4)
    assert np.sqrt(params.var[SPAM]) == pytest.approx([0.129, 0.101], abs=5e-4)
    assert np.sqrt(params.var[HAM]) == pytest.approx([0.195, 0.108], abs=5e-4)
    # Test melon 1 (density 0.697, sugar 0.460):
    # p(0.697 | good) = 1.959, p(0.697 | bad) = 1.203, p(0.460 | good) = 0.788, p(0.460 | bad) = 0.066.
    density = np.exp(gaussian_log_density(np.array([[0.697, 0.460]]), params))[0]
    assert density[SPAM] == pytest.approx([1.959, 0.788], abs=5e-4)
    assert density[HAM] == pytest.approx([1.203, 0.066], abs=5e-4)
    # Exact values from the sums: good density mean 4590/8000.
    assert params.mean[SPAM, 0] == 4590 / 8000
    good = [d for d, _ in GOOD]
    var = (8 * sum(d * d for d in good) - sum(good) ** 2) / (8 * 7 * 1000**2)
    assert params.var[SPAM, 0] == var


def test_feature_log_odds_is_the_weighted_density_ratio() -> None:
    params = gaussian_estimate(melons(), scale=1000, var_floor=0.0)
    x = np.array([[0.697, 0.460]])
    g = feature_log_odds(x, params, weight=0.5)
    assert g[0] == pytest.approx([0.5 * math.log(1.959 / 1.203), 0.5 * math.log(0.788 / 0.066)], rel=2e-3)


def test_variance_floor_and_too_few_messages() -> None:
    same = stats_of([(SPAM, (1024,)), (SPAM, (1024,)), (HAM, (0,)), (HAM, (0,)), (HAM, (0,))])
    params = gaussian_estimate(same, scale=1024, var_floor=0.01)
    assert params.var.tolist() == [[0.01], [0.01]]
    assert params.usable.tolist() == [True]
    one = stats_of([(SPAM, (1024,)), (HAM, (0,)), (HAM, (0,))])
    assert feature_log_odds(np.array([[1.0]]), gaussian_estimate(one, 1024), 1.0).tolist() == [[0.0]]


def test_forgetting_restores_the_sums_exactly_and_batch_equals_incremental() -> None:
    rng = np.random.default_rng(3)
    rows = [(int(rng.integers(2)), tuple(int(v) for v in rng.integers(0, 20_000, 7))) for _ in range(500)]
    batch = stats_of(rows)
    running = FeatureStats.zeros(7)
    for label, x in rows:
        running = running + FeatureStats.of_message(label, x)
    assert all((getattr(batch, f) == getattr(running, f)).all() for f in ("n", "total", "total_sq"))
    extra = FeatureStats.of_message(SPAM, (19_999,) * 7)
    back = (batch + extra) - extra
    assert (gaussian_estimate(back, 1024).var == gaussian_estimate(batch, 1024).var).all()
    assert (back.total_sq == batch.total_sq).all() and (back.n == batch.n).all()
