"""Naive Bayes maths: raw counts -> smoothed log-probabilities -> log-odds.

Pure numpy/scipy, no I/O. The store keeps only integer counts; everything here
is derived from them at scoring time, so training and untraining are plain
additions and subtractions of counts and the estimates can never drift.

Classes are indexed ``HAM = 0`` and ``SPAM = 1``; every per-class array has
that first axis.

Event models (McCallum & Nigam 1998; Metsis, Androutsopoulos & Paliouras 2006)
---------------------------------------------------------------------------
For a message x over the vocabulary of V known tokens::

    bernoulli:          theta[c,j] = (D[c,j] + alpha) / (D[c] + 2*alpha)
                        log P(x|c) = sum_{j in x} log theta[c,j]
                                   + sum_{j not in x} log(1 - theta[c,j])
    multinomial:        theta[c,j] = (N[c,j] + alpha) / (N[c] + alpha*V)
                        log P(x|c) = sum_j x[j] * log theta[c,j]      (x[j] = count)
    multinomial-binary: as multinomial with x[j] in {0, 1} and N counting each
                        token once per message (Metsis et al.'s "Boolean" NB)

    D[c,j] = class-c messages containing token j,   D[c] = class-c messages
    N[c,j] = occurrences of j in class c,           N[c] = sum_j N[c,j]

and log P(c|x) = log P(c) + log P(x|c) - log P(x), with the prior
P(c) = D[c] / (D[0] + D[1]). The decision uses only the log-odds

    L(x) = log P(spam|x) - log P(ham|x) = jll[:,1] - jll[:,0],

which, unlike P(spam|x) = expit(L), does not round to exactly 1.0 once L
passes about 37: ranking by L keeps thousands of "certain" spams in order.

The Bernoulli absent-token sum without touching the vocabulary
--------------------------------------------------------------
sum_{j not in x} log(1 - theta[c,j]) is rewritten (as scikit-learn does) as

    A[c] - sum_{j in x} log(1 - theta[c,j]),   A[c] = sum_{j=1..V} log(1 - theta[c,j])

and A[c] depends on the counts D[c,j] only through how many tokens have each
count. With H[c,k] = number of vocabulary tokens whose class-c message count is k:

    A[c] = sum_k H[c,k] * log((D[c] - k + alpha) / (D[c] + 2*alpha))

The store keeps H (a few hundred rows at most) next to the token counts, so
A is exact and costs O(distinct counts), not O(V), per scoring call.
Tokens the model has never seen are not in the feature space and are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from spamfilter.config import counts_occurrences, has_absent_term
from spamfilter.counts import FeatureStats as FeatureStats
from spamfilter.counts import IntArray as IntArray
from spamfilter.counts import TokenCounts as TokenCounts
from spamfilter.counts import Totals as Totals
from spamfilter.errors import NotTrainedError, StoreInconsistent
from spamfilter.verdicts import HAM as HAM
from spamfilter.verdicts import SPAM as SPAM
from spamfilter.verdicts import UNSURE_CODE

UNSURE = UNSURE_CODE

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class NBParams:
    """What scoring needs: jll = X @ weight.T + bias, shape (n, 2).

    weight: (2, m) log theta (multinomial models) or
        log theta - log(1 - theta) (bernoulli).
    bias: (2,) log prior, plus A[c] for bernoulli.
    log_prior: (2,) log P(c), the part of ``bias`` that tempering leaves alone.
    binary: whether X must be 0/1 (bernoulli, multinomial-binary).
    """

    weight: FloatArray
    bias: FloatArray
    log_prior: FloatArray
    binary: bool


def log_prior(stats: Totals) -> FloatArray:
    """log P(c) = log D[c] - log (D[0] + D[1]), shape (2,)."""
    messages = stats.messages.astype(np.float64)
    if (messages < 0).any():
        # Not an untrained model: a damaged one.
        raise StoreInconsistent(
            f"the model's message counts are negative ({int(messages[SPAM])} spam, {int(messages[HAM])} ham): `spamfilter db check` lists the problems"
        )
    if messages[HAM] <= 0 or messages[SPAM] <= 0:
        raise NotTrainedError(f"the model needs at least one trained spam and one trained ham (it has {int(messages[SPAM])} spam and {int(messages[HAM])} ham)")
    result: FloatArray = np.log(messages) - np.log(messages.sum())
    return result


def bernoulli_absent_sum(stats: Totals, alpha: float) -> FloatArray:
    """A[c] = sum over the vocabulary of log(1 - theta[c,j]), shape (2,).

    Computed from the count histogram: sum_k H[c,k] log((D[c]-k+alpha)/(D[c]+2 alpha)).
    """
    out = np.zeros(2)
    for c in (HAM, SPAM):
        hist = stats.histogram[c]
        if hist.size == 0:
            continue
        k = hist[:, 0].astype(np.float64)
        n = hist[:, 1].astype(np.float64)
        d = float(stats.messages[c])
        out[c] = float(n @ (np.log(d - k + alpha) - np.log(d + 2 * alpha)))
    return out


def token_log_likelihood(event_model: str, counts: TokenCounts, stats: Totals, alpha: float) -> FloatArray:
    """log P(token j | c) = log theta[c,j] for the m columns of ``counts``, shape (2, m).

    bernoulli:          theta[c,j] = (D[c,j] + alpha) / (D[c] + 2*alpha), the chance
                        that a class-c message contains token j
    multinomial:        theta[c,j] = (N[c,j] + alpha) / (N[c] + alpha*V)
    multinomial-binary: the same with N counting each token once per message
    """
    if event_model == "bernoulli":
        d = stats.messages.astype(np.float64)[:, None]
        bernoulli: FloatArray = np.log(counts.doc_count + alpha) - np.log(d + 2 * alpha)
        return bernoulli
    if event_model == "multinomial":
        n_jc, n_c = counts.term_count, stats.terms
    elif event_model == "multinomial-binary":
        n_jc, n_c = counts.doc_count, stats.binary_terms
    else:
        raise ValueError(f"unknown event model {event_model!r}")
    v = float(stats.vocabulary_size)
    # A model of messages without a single token (v = 0, no terms) has a
    # log(0) here, over no columns at all: nothing to warn about.
    with np.errstate(divide="ignore"):
        multinomial: FloatArray = np.log(n_jc + alpha) - np.log(n_c.astype(np.float64) + alpha * v)[:, None]
    return multinomial


def estimate(event_model: str, counts: TokenCounts, stats: Totals, alpha: float) -> NBParams:
    """Smoothed parameters for the m columns of ``counts`` (see module docstring)."""
    prior = log_prior(stats)
    log_theta = token_log_likelihood(event_model, counts, stats, alpha)
    if has_absent_term(event_model):
        d = stats.messages.astype(np.float64)[:, None]
        log_one_minus = np.log(d - counts.doc_count + alpha) - np.log(d + 2 * alpha)
        return NBParams(weight=log_theta - log_one_minus, bias=prior + bernoulli_absent_sum(stats, alpha), log_prior=prior, binary=True)
    return NBParams(weight=log_theta, bias=prior, log_prior=prior, binary=not counts_occurrences(event_model))


def joint_log_likelihood(
    X: sp.csr_matrix,
    params: NBParams,
    tempering: float = 0.0,
    min_evidence: float = 0.0,
    max_tokens: int = 0,
    header: npt.NDArray[np.bool_] | None = None,
    header_max_tokens: int = 0,
    unseen: FloatArray | None = None,
) -> FloatArray:
    """Unnormalised log posterior per row, shape (n, 2):

        jll[i, c] = log P(c) + log P(x_i | c) / n_i ** tempering

    X has shape (n, m), one row per message, one column per token of ``params``;
    it must hold 0/1 values when ``params.binary``. n_i = sum_j X[i, j], the
    token events of message i the model uses (at least 1).

    min_evidence > 0 drops, before anything else, every token whose weight
    differs between the classes by less than that many nats,
    |weight[1, j] - weight[0, j]| < min_evidence: a per-message feature
    selection in the spirit of bogofilter's and SpamBayes's "ignore the
    near-neutral words". Online on spamassassin (tempering 0.5) 3 nats took
    1-ROCA from 0.44% to 0.30%, on csdmc2010 from 0.14% to 0.11%, but on the
    header-less enron1 it made it worse (0.32% to 0.50%): it is off by default
    and `spamfilter tune` tries it.

    max_tokens = k > 0 then keeps, per message, only the k tokens with the
    largest |weight[1, j] - weight[0, j]| (SpamBayes's max_discriminators;
    bogofilter instead drops the tokens near 0.5, as min_evidence does); see
    ``evidence_features`` for what was measured.

    tempering = 0 is textbook naive Bayes. The independence assumption is
    badly wrong for mail: one spam's URL gives host, parent-domain and path
    tokens, its words repeat in subject, text and HTML parts, so the summed
    log-likelihood counts much of the same evidence many times over, and the
    overcount grows with the message. Raising the likelihood to the power
    n ** -tempering (a tempered, or "power", likelihood) treats n correlated
    tokens as n ** (1 - tempering) independent ones. With 0.5, long messages
    with evidence on both sides no longer get extreme log-odds for whichever
    side is a little longer; on the date-ordered halves of spamassassin this
    took 1-ROCA from 2.26% to 2.05% and the ham filed as spam at the default
    cutoffs from 3.05% to 0.32%, on csdmc2010 1-ROCA from 2.05% to 0.16%
    (multinomial-binary, alpha 0.1; docs/benchmarks.md).

    Later: the exponent trades the early online model (little data, wants
    little shrinking) against later mail. Online 1-ROCA over the eight
    shared streams went on average 3.5% better from 0.5 to 0.55, no stream
    more than 2.2% worse (0.6: enron4 5.2% worse); trained on the first half
    and classifying the second, csdmc2010 went 1.05% -> 0.74% (0.11% at 0.8,
    which costs spamassassin online 39%). The default is 0.55.

    Measured and removed: clipping each token's log-likelihood ratio to
    [-c, c] nats (the former ``[model] token_cap``; spamassassin online
    0.337% -> 0.372% at 4 nats, 0.520% at 2, and nothing on average with
    max_tokens): a capped token still counts, so a long message still adds up.

    header (m,) marks the columns of header-line tokens
    (``tokenizer.is_header_line``): with it those are scored apart, with
    their own selection (the header_max_tokens strongest, 0 = all) and their
    own tempering, and the rest with max_tokens and theirs:

        jll[i, c] = log P(c) + log P(x_i,rest | c) / n_rest ** t + log P(x_i,head | c) / n_head ** t

    (the Bernoulli absent-token sum goes with the rest). A message without
    header-line tokens scores as without the mask.

    unseen (n,), with tempering: token events of each message that are not
    among X's columns (tokens the model has never seen), already weighted
    (``[model] unseen_weight``), added to n_i (to n_rest with the header
    lines apart), after any selection: min_evidence and max_tokens leave
    known tokens out of n, never unseen ones. Their evidence is zero; they
    only make the message's known evidence count for less. Measured in
    docs/benchmarks.md ("Leave one corpus out").

    (Over 60 lines for the measurements this docstring records; the code
    is about 15.)
    """
    if header is not None and header.any():
        # Header lines apart: each part its own selection and tempering.
        if min_evidence == 0 and max_tokens == 0:
            return _apart_by_entries(sp.csr_matrix(X), params, tempering, header, header_max_tokens, unseen)
        head, rest = split_columns(X, header)
        apart: FloatArray = (
            _tempered_evidence(rest, params, tempering, min_evidence, max_tokens, absent=True, unseen=unseen)
            + _tempered_evidence(head, params, tempering, min_evidence, header_max_tokens, absent=False)
            + params.log_prior
        )
        return apart
    jll: FloatArray = _tempered_evidence(X, params, tempering, min_evidence, max_tokens, absent=True, unseen=unseen) + params.log_prior
    return jll


def _apart_by_entries(X: sp.csr_matrix, params: NBParams, tempering: float, header: npt.NDArray[np.bool_], k: int, unseen: FloatArray | None = None) -> FloatArray:
    """``joint_log_likelihood`` with the header lines apart and no other
    selection, computed over X's entries (two sparse matrices and a second
    selection per batch were a quarter of scoring one message). Each sum
    runs over a row's entries in their order, as the sparse products do, so
    the result is the same to the bit (tests/nb/test_model.py)."""
    n = X.shape[0]
    row = np.repeat(np.arange(n), np.diff(X.indptr))
    cols, data = X.indices, X.data
    in_head = header[cols]
    rest = np.flatnonzero(~in_head)
    head = np.flatnonzero(in_head)
    if k > 0 and head.size:
        ratio = params.weight[SPAM, cols[head]] - params.weight[HAM, cols[head]]
        position = head - X.indptr[row[head]]
        # as evidence_features: strongest first, the ham side, then message order
        order = np.lexsort((position, ratio, -np.abs(ratio), row[head]))
        rows = row[head][order]
        rank = np.arange(order.size) - np.searchsorted(rows, rows, side="left")
        head = np.sort(head[order[rank < k]])
    jll = np.empty((n, 2))
    absent = params.bias - params.log_prior
    sizes: list[FloatArray] = [np.bincount(row[part], weights=data[part], minlength=n).astype(np.float64, copy=False) for part in (rest, head)]
    if unseen is not None:
        sizes[0] = sizes[0] + unseen
    factors = [np.maximum(size, 1.0) ** -tempering if tempering else np.ones(n) for size in sizes]
    for c in (HAM, SPAM):
        rest_sum = np.bincount(row[rest], weights=data[rest] * params.weight[c, cols[rest]], minlength=n) + absent[c]
        head_sum = np.bincount(row[head], weights=data[head] * params.weight[c, cols[head]], minlength=n)
        jll[:, c] = rest_sum * factors[0] + head_sum * factors[1] + params.log_prior[c]
    return jll


def split_columns(X: sp.csr_matrix, columns: npt.NDArray[np.bool_]) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """X's entries in ``columns`` and the others, as two matrices of X's
    shape whose rows keep X's order of entries (so a row's sums come out
    as X's would, to the bit)."""
    X = sp.csr_matrix(X)
    inside = columns[X.indices]
    parts = []
    for keep in (inside, ~inside):
        data = np.where(keep, X.data, 0.0)
        part = sp.csr_matrix((data, X.indices.copy(), X.indptr.copy()), shape=X.shape)
        part.eliminate_zeros()
        parts.append(part)
    return parts[0], parts[1]


def _tempered_evidence(
    X: sp.csr_matrix, params: NBParams, tempering: float, min_evidence: float, max_tokens: int, *, absent: bool, unseen: FloatArray | None = None
) -> FloatArray:
    """log P(x|c) / n ** tempering per row, (n, 2), after the selection;
    with ``absent`` the Bernoulli absent-token sum is in it; ``unseen``
    is added to n."""
    X = evidence_features(X, params, min_evidence, max_tokens)
    rest = params.bias - params.log_prior if absent else np.zeros(2)
    evidence = np.asarray(X @ params.weight.T) + rest
    if tempering:
        evidence = evidence * tempering_factor(X, tempering, unseen)[:, None]
    result: FloatArray = evidence
    return result


def evidence_features(X: sp.csr_matrix, params: NBParams, min_evidence: float, max_tokens: int = 0) -> sp.csr_matrix:
    """X with the columns the message's selection drops set to 0, shape (n, m):
    first every token with |d[j]| < min_evidence (d = weight[1] - weight[0]),
    then, with max_tokens = k > 0, all but the k present tokens of largest
    |d[j]| in each row (ties: the smaller d[j] first, then the one that comes
    first in the row, which keeps the message's token order).

    Measured (online 1-ROCA %, tempering 0.5, docs/benchmarks.md "Long
    streams, later mail and bounded evidence"): k = 40 took spamassassin
    from 0.337% to 0.240% (bogofilter: 0.278%) and csdmc2010 from 0.121% to
    0.107%, and the largest |log-odds| of a misfiled spamassassin message
    from 39 to 27; but on the header-less Enron mailboxes, whose evidence is
    many weak words, it was worse on four of six (enron2 0.060% -> 0.120%,
    the six concatenated 0.063% -> 0.076%). Off by default.
    """
    if min_evidence > 0:
        strong = np.abs(params.weight[SPAM] - params.weight[HAM]) >= min_evidence
        X = X @ sp.diags(strong.astype(np.float64))
    if max_tokens > 0:
        X = sp.csr_matrix(X)
        X.eliminate_zeros()
        ratio = params.weight[SPAM] - params.weight[HAM]
        strength = np.abs(ratio)
        data = X.data.copy()
        for i in range(X.shape[0]):
            lo, hi = X.indptr[i], X.indptr[i + 1]
            if hi - lo <= max_tokens:
                continue
            cols = X.indices[lo:hi]
            # strongest first; at equal strength the ham-side ratio first,
            # then the token that comes first in the message: the same
            # choice whatever the columns' order (a batch's, one message's
            # and a cache's differ), so the same sum to the bit
            order = np.lexsort((np.arange(hi - lo), ratio[cols], -strength[cols]))
            data[lo + order[max_tokens:]] = 0.0
        X = sp.csr_matrix((data, X.indices.copy(), X.indptr.copy()), shape=X.shape)
        X.eliminate_zeros()
    return X


def tempering_factor(X: sp.csr_matrix, tempering: float, unseen: FloatArray | None = None) -> FloatArray:
    """n_i ** -tempering per row of the (already selected) X, shape (n,);
    n_i = sum_j X[i, j] (plus ``unseen[i]``), at least 1."""
    n = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
    if unseen is not None:
        n = n + unseen
    n = np.maximum(n, 1.0)
    result: FloatArray = n**-tempering
    return result


def log_odds(jll: FloatArray) -> FloatArray:
    """L = log P(spam|x) - log P(ham|x), shape (n,); the ranking score."""
    result: FloatArray = jll[:, SPAM] - jll[:, HAM]
    return result


@dataclass(frozen=True, slots=True)
class LogOddsTerms:
    """One message's log-odds taken apart: L = prior + sum(token) + absent.

    prior: log P(spam) - log P(ham).
    token: (m,) what each column adds; 0 for a column the message lacks or
        that ``min_evidence`` or ``max_tokens`` drops.
    absent: the Bernoulli sum over the tokens the message lacks (0 for the
        multinomial models, which have no such term).
    used: (m,) whether the column counts: present in the message and not
        dropped by ``min_evidence`` or ``max_tokens``.
    events: n, the token events that count (sum of x after the selection).
    factor: n ** -tempering (n at least 1), the scale already applied to
        ``token`` and ``absent``.
    header_events, header_factor: the same for the header-line tokens when
        they are scored apart (``header`` given); then ``events`` and
        ``factor`` are the rest's.
    """

    prior: float
    token: FloatArray
    absent: float
    used: npt.NDArray[np.bool_]
    events: float
    factor: float
    header_events: float = 0.0
    header_factor: float = 1.0


def log_odds_terms(
    x: sp.csr_matrix,
    params: NBParams,
    log_theta: FloatArray,
    tempering: float = 0.0,
    min_evidence: float = 0.0,
    max_tokens: int = 0,
    header: npt.NDArray[np.bool_] | None = None,
    header_max_tokens: int = 0,
    unseen: float = 0.0,
) -> LogOddsTerms:
    """The log-odds of the one message in x (shape (1, m)), term by term, with
    the same feature selection and tempering as ``joint_log_likelihood``:

        L = prior + sum_j token[j] + absent
        prior    = log P(spam) - log P(ham)
        token[j] = f * x'[j] * (d[j] + log(1 - theta[1,j]) - log(1 - theta[0,j]))
                 = f * x'[j] * (log theta[1,j] - log theta[0,j])
        absent   = f * sum_{j not in x'} (log(1 - theta[1,j]) - log(1 - theta[0,j]))    (bernoulli)
                 = f * (A[1] - A[0] - sum_j x'[j] * (log(1 - theta[1,j]) - log(1 - theta[0,j])))

    d[j] = weight[1, j] - weight[0, j]. x' is x without the columns min_evidence
    and max_tokens drop (a Bernoulli token so dropped counts as absent, as it
    does in scoring), f = n ** -tempering with
    n = sum_j x'[j], and log_theta (2, m) is ``token_log_likelihood`` of the
    columns. For the multinomial models log theta is the weight and the bias
    is the prior, so ``absent`` is 0. With ``header`` the header-line
    columns are taken apart as ``joint_log_likelihood`` does, each part with
    its own x' and f; ``unseen`` (the message's weighted unseen token
    events) is added to the n of the rest, as in ``joint_log_likelihood``.
    The terms sum to the classifier's log-odds up to floating-point
    rounding.
    """
    if x.shape[0] != 1:
        raise ValueError(f"log_odds_terms takes one message, not {x.shape[0]}")
    prior = float(params.log_prior[SPAM] - params.log_prior[HAM])
    if header is None or not header.any():
        token, absent, counts, factor = _part_terms(x, params, log_theta, tempering, min_evidence, max_tokens, absent=True, unseen=unseen)
        return LogOddsTerms(prior, token, absent, counts > 0, float(counts.sum()), factor)
    head, rest = split_columns(x, header)
    token, absent, counts, factor = _part_terms(rest, params, log_theta, tempering, min_evidence, max_tokens, absent=True, unseen=unseen)
    h_token, h_absent, h_counts, h_factor = _part_terms(head, params, log_theta, tempering, min_evidence, header_max_tokens, absent=False)
    return LogOddsTerms(prior, token + h_token, absent + h_absent, (counts + h_counts) > 0, float(counts.sum()), factor, float(h_counts.sum()), h_factor)


def _part_terms(
    x: sp.csr_matrix, params: NBParams, log_theta: FloatArray, tempering: float, min_evidence: float, max_tokens: int, *, absent: bool, unseen: float = 0.0
) -> tuple[FloatArray, float, FloatArray, float]:
    """(token terms, absent term, the selected x', f) of one message's columns (see ``log_odds_terms``)."""
    selected = evidence_features(x, params, min_evidence, max_tokens)
    factor = float(tempering_factor(selected, tempering, np.array([unseen]) if unseen else None)[0]) if tempering else 1.0
    counts = np.asarray(selected.todense(), dtype=np.float64).ravel()
    log_one_minus = log_theta - params.weight  # log(1 - theta) for bernoulli, 0 otherwise
    absent_all = (params.bias - params.log_prior)[SPAM] - (params.bias - params.log_prior)[HAM]
    # the part's present tokens leave the absent-token sum: a part without it
    # (the header lines) still takes their log(1 - theta) out
    rest = (absent_all if absent else 0.0) - float(counts @ (log_one_minus[SPAM] - log_one_minus[HAM]))
    ratio = (params.weight[SPAM] - params.weight[HAM]) + (log_one_minus[SPAM] - log_one_minus[HAM])
    token: FloatArray = factor * counts * ratio
    return token, float(factor * rest), counts, factor
