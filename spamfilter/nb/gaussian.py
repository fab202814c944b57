"""Gaussian naive Bayes for the continuous message features: a normal
density per class and feature from exact integer sums (``model`` re-exports
these names). Pure numpy, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from spamfilter.counts import FeatureStats
from spamfilter.verdicts import HAM, SPAM

FloatArray = npt.NDArray[np.float64]

#: Least variance of a feature, in the feature's own units (see ``gaussian_estimate``).
FEATURE_VAR_FLOOR = 0.01


@dataclass(frozen=True, slots=True)
class GaussianParams:
    """Per-class normal densities of F features, each (2, F): mean mu[c, i],
    variance var[c, i] (floored), and usable[i]: both classes have the two
    messages a sample variance needs."""

    mean: FloatArray
    var: FloatArray
    usable: npt.NDArray[np.bool_]


def gaussian_estimate(stats: FeatureStats, scale: float, var_floor: float = FEATURE_VAR_FLOOR) -> GaussianParams:
    """mu and sigma^2 per class and feature from the integer sums of
    fixed-point values x = round(value * scale):

        mu[c,i]      = S1 / (n * scale)
        sigma2[c,i]  = (n * S2 - S1^2) / (n * (n - 1) * scale^2),   at least var_floor

    with n = n[c,i], S1 = sum x, S2 = sum x^2. The numerator is computed in
    exact integer arithmetic (Python ints: n * S2 overflows int64 on a large
    model), so the variance has no cancellation error however large the
    mean; incremental training, batch training and train-then-forget give
    the same sums and so the same bits. (Welford's running update avoids the
    cancellation too, but in floats, and is not exactly reversible.)

    The variance is the unbiased sample variance (n - 1), as in the worked
    mixed-attribute example of Zhou's Machine Learning (watermelon 3.0; the
    test reproduces it); the maximum-likelihood n differs by n / (n - 1),
    nothing once a class has a few dozen messages. The floor keeps a feature
    one class never varies in (no ham with an attachment yet) from giving a
    near-infinite density ratio to the first message that differs: 0.01,
    sigma >= 0.1, in units where log-counts step by log(2) = 0.69 from 0
    to 1 and shares lie in [0, 1].
    """
    n = stats.n.tolist()
    s1 = stats.total.tolist()
    s2 = stats.total_sq.tolist()
    f = stats.n.shape[1]
    mean = np.zeros((2, f))
    var = np.full((2, f), var_floor)
    for c in (HAM, SPAM):
        for i in range(f):
            k = n[c][i]
            if k >= 1:
                mean[c, i] = s1[c][i] / (k * scale)
            if k >= 2:
                var[c, i] = max((k * s2[c][i] - s1[c][i] ** 2) / (k * (k - 1) * scale * scale), var_floor)
    usable: npt.NDArray[np.bool_] = np.asarray((stats.n >= 2).all(axis=0))
    return GaussianParams(mean, var, usable)


def gaussian_log_density(x: FloatArray, params: GaussianParams) -> FloatArray:
    """log N(x[k,i] | mu[c,i], sigma2[c,i]) = -log(2 pi sigma2) / 2 - (x - mu)^2 / (2 sigma2),
    for x of shape (k, F); shape (k, 2, F)."""
    diff = x[:, None, :] - params.mean[None, :, :]
    result: FloatArray = -0.5 * np.log(2 * np.pi * params.var)[None] - diff * diff / (2 * params.var)[None]
    return result


def feature_log_odds(x: FloatArray, params: GaussianParams, weight: float) -> FloatArray:
    """What each feature adds to the log-odds of each message, shape (k, F):

        g[k,i] = weight * (log N(x[k,i] | mu[1,i], sigma2[1,i]) - log N(x[k,i] | mu[0,i], sigma2[0,i]))

    and 0 for a feature not ``usable``. The features are added to the token
    log-odds untempered: tempering shrinks the n token events of a message,
    whose number grows with its length; the F features are F, however long
    the message, and ``weight`` ([model] feature_weight) is their one scale.
    """
    density = gaussian_log_density(x, params)
    result: FloatArray = weight * (density[:, SPAM, :] - density[:, HAM, :]) * params.usable[None, :]
    return result
