"""Robinson's f(w) and Fisher's chi-square combining (bogofilter's and
SpamBayes's way to combine token evidence), measured as an alternative to
the filter's log-odds (benchmarks/option_grid.py --fisher, docs/benchmarks.md
"Bounded evidence"); the filter does not score with them.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.special import gammaln, logsumexp

from spamfilter.counts import TokenCounts, Totals
from spamfilter.nb.model import FloatArray
from spamfilter.verdicts import HAM, SPAM


def robinson_probability(counts: TokenCounts, stats: Totals, s: float, x: float) -> FloatArray:
    """Robinson's smoothed spam probability of each column, shape (m,):

        p(w) = (b / n_s) / (b / n_s + g / n_h)       b, g = D[1,j], D[0,j]; n_s, n_h = D[1], D[0]
        f(w) = (s * x + n * p(w)) / (s + n)          n = b + g

    a Beta prior of strength s pulling a token seen in few messages towards
    the background x (bogofilter's robs = 0.0178 and robx = 0.52; SpamBayes
    uses s = 0.45, x = 0.5). A token in no message gets f = x.
    """
    d = counts.doc_count.astype(np.float64)
    messages = stats.messages.astype(np.float64)
    spam_rate, ham_rate = d[SPAM] / max(messages[SPAM], 1.0), d[HAM] / max(messages[HAM], 1.0)
    total = spam_rate + ham_rate
    p = np.divide(spam_rate, total, out=np.full(total.shape, x), where=total > 0)
    n = d[SPAM] + d[HAM]
    f: FloatArray = np.divide(s * x + n * p, s + n, out=np.full(n.shape, x), where=(s + n) > 0)
    return f


def fisher_log_odds(X: sp.csr_matrix, f: FloatArray, min_dev: float) -> FloatArray:
    """Fisher's chi-square combining of the tokens with |f(w) - 0.5| > min_dev, per row of X (n, m):

        S = -2 sum ln(1 - f),  H = -2 sum ln f      over the k selected tokens present
        L = ln Q(H; 2k) - ln Q(S; 2k)                 Q: chi-square survival function

    With an even number of degrees of freedom the tail has a closed form,
    Q(t; 2k) = exp(-t/2) sum_{i<k} (t/2)^i / i!, taken here in logs
    (logsumexp), so it does not underflow to 0 for hundreds of tokens.

    Under the hypothesis that the f are uniform, H and S are chi-square with
    2k degrees of freedom; Q(S) is small when many f are near 1 (spam), Q(H)
    when many are near 0 (ham). bogofilter and SpamBayes combine the two as
    (1 + Q(H) - Q(S)) / 2, which saturates at 0 and 1; the difference of the
    log tails ranks the same way at the ends without the ties. 0 for a row
    with no selected token. It is not a sum over tokens, so it has no
    per-token decomposition like ``log_odds_terms``.
    """
    used = np.abs(f - 0.5) > min_dev
    q = np.clip(f, 1e-300, 1.0)
    one_minus = np.clip(1.0 - f, 1e-300, 1.0)
    binary = X.copy()
    binary.data = np.ones_like(binary.data)
    k = np.asarray(binary @ used.astype(np.float64)).ravel().astype(np.int64)
    ham_stat = -2.0 * np.asarray(binary @ np.where(used, np.log(q), 0.0)).ravel()
    spam_stat = -2.0 * np.asarray(binary @ np.where(used, np.log(one_minus), 0.0)).ravel()
    result: FloatArray = np.array([log_chi2_tail(h, n) - log_chi2_tail(t, n) if n else 0.0 for h, t, n in zip(ham_stat, spam_stat, k.tolist())])
    return result


def log_chi2_tail(t: float, k: int) -> float:
    """ln Q(t; 2k) = -t/2 + ln sum_{i<k} (t/2)^i / i!  (k >= 1, t >= 0)."""
    i = np.arange(k, dtype=np.float64)
    half = max(t / 2.0, 1e-300)
    return float(-half + logsumexp(i * np.log(half) - gammaln(i + 1.0)))
