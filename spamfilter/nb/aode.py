"""One-dependence estimators over a bounded set of parent tokens: AODE and SPODE.

Pure numpy/scipy, no I/O. Naive Bayes lets every token depend on the class
alone. A super-parent one-dependence estimator (SPODE) lets every token
also depend on one parent attribute x_p; AODE (Webb, Boughton & Wang 2005)
averages the SPODEs of every parent value with enough training support:

    P(c, x) ~ sum_{p : |D_{x_p}| >= m'} P(c, x_p) prod_{j != p} P(x_j | c, x_p)

Here the attributes are tokens and the parents are a bounded set of K
tokens chosen by their mutual information with the class (``rank_tokens``);
scoring never scans the vocabulary. A parent's value in a message is
"present" or "absent", and both values are parents: the SPODE of an absent
parent is naive Bayes over the messages lacking it. Pairs are counted for
a bounded set of child tokens (the parents and the C most informative
tokens seen in a few messages); a token that is not a child keeps naive
Bayes's theta[c,j] in every SPODE (it is taken as independent of the
parents), so it adds the same term to all of them. SPODE is the case of
one parent (``spode_parent`` chooses it on held-out mail).

The children follow the multinomial-binary event model (each distinct
token of a message is one draw; absent tokens are not evidence), conditioned
on the class and the parent's value. With D[c,p,j] the class-c messages
holding both p and j, D[c,p] = D[c,p,p], N[c,p] = sum_j D[c,p,j] (the
distinct tokens of the class-c messages holding p), and the model's own
D[c,j], D[c] and N[c] (binary terms, see ``spamfilter.counts``), with
Lidstone strength alpha over V known tokens::

    P(c, p present) = (D[c,p] + alpha) / (D + 4 alpha)
    P(c, p absent)  = (D[c] - D[c,p] + alpha) / (D + 4 alpha)
    theta[c,j|p present] = (D[c,p,j] + alpha) / (N[c,p] - D[c,p] + alpha (V - 1))    j != p
    theta[c,j|p absent]  = (D[c,j] - D[c,p,j] + alpha) / (N[c] - N[c,p] + alpha V)

(4 = two classes times two values; with alpha = 1 this is the Laplace
correction of the textbook's P(c, x_i) = (|D_c,xi| + 1) / (|D| + N N_i).)

A SPODE's log-likelihood of the children is tempered like naive Bayes's,
divided by n ** tempering for a message of n known tokens (see
``model.joint_log_likelihood``), and the averaged joint is

    jll[c] = logsumexp_p (log P(c, x_p) + tempered sum_j log theta[c,j|x_p]) - log(#p)

A message for which no parent value has support scores as naive Bayes.

The arithmetic stays sparse: sum_{j in x} log(D[c,p,j] + alpha) is
n log alpha plus X @ G.T with G[p,j] = log(1 + D[c,p,j] / alpha), nonzero
only where the pair was seen; the absent-parent sum is naive Bayes's
X @ log(D[c,j] + alpha) plus a correction that is likewise nonzero only on
seen pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.special import logsumexp, xlogy

from spamfilter.counts import ClassCounts, IntArray
from spamfilter.verdicts import HAM, SPAM

FloatArray = npt.NDArray[np.float64]

#: Default number of parent tokens and support threshold m'.
DEFAULT_PARENTS = 200
DEFAULT_MIN_SUPPORT = 30


@dataclass(frozen=True, slots=True)
class PairCounts:
    """The one-dependence counts a batch needs, over its m token columns.

    parent_docs: (2, P) D[c,p], class-c messages holding parent p.
    parent_terms: (2, P) N[c,p], distinct tokens of those messages, summed.
    pairs: per class a (P, m) sparse matrix of D[c,p,j] (zero where unseen).
    parent_column: (P,) the column of each parent among the m, or -1 when
        the parent is not one of them (absent from every message of the batch).
    child: (m,) whether each column is a child token (pairs are kept for
        children only; the other tokens score as naive Bayes).
    """

    parent_docs: IntArray
    parent_terms: IntArray
    pairs: tuple[sp.csr_matrix, sp.csr_matrix]
    parent_column: IntArray
    child: npt.NDArray[np.bool_]


def mutual_information(doc_count: IntArray, messages: IntArray) -> FloatArray:
    """I(token presence; class) in nats for each column of D[c,j], shape (m,),
    from the 2 x 2 table of (present, absent) x (ham, spam) message counts."""
    d = messages.astype(np.float64)
    total = float(d.sum())
    present = doc_count.astype(np.float64)
    absent = d[:, None] - present
    p_token = present.sum(axis=0) / total
    out = np.zeros(present.shape[1])
    if total <= 0:
        return out
    for cells, p_value in ((present, p_token), (absent, 1.0 - p_token)):
        for c in (HAM, SPAM):
            joint = cells[c] / total
            expected = p_value * (d[c] / total)
            with np.errstate(divide="ignore", invalid="ignore"):
                out += np.where(joint > 0, xlogy(joint, joint) - xlogy(joint, expected), 0.0)
    return np.maximum(out, 0.0)


def rank_tokens(tokens: list[str], doc_count: IntArray, messages: IntArray, min_support: int) -> list[str]:
    """The tokens in at least ``min_support`` messages, by decreasing mutual
    information with the class (ties: the token that sorts first). The
    first K are the parents, the first C >= K the children whose pairs with
    the parents are counted."""
    if not tokens:
        return []
    mi = mutual_information(doc_count, messages)
    eligible = np.flatnonzero(doc_count.sum(axis=0) >= min_support)
    order = sorted(eligible.tolist(), key=lambda j: (-mi[j], tokens[j]))
    return [tokens[j] for j in order]


@dataclass(frozen=True, slots=True)
class _Batch:
    """A batch's rows split for the SPODE sums: X (n, m), its child
    columns Xc and the other columns Xo, the token counts n, n_child and
    n_other, the tempering factor tau (n,) and present[i, p]."""

    X: sp.csr_matrix
    Xc: sp.csr_matrix
    Xo: sp.csr_matrix
    n: FloatArray
    n_child: FloatArray
    n_other: FloatArray
    tau: FloatArray
    present: npt.NDArray[np.bool_]


def joint_log_likelihood(
    X: sp.csr_matrix, doc_count: IntArray, classes: ClassCounts, vocabulary_size: int, pairs: PairCounts, alpha: float, tempering: float, min_support: int
) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """AODE's jll (n, 2) for the 0/1 rows of X (n, m), and which rows had a
    parent value with support (the others' rows are zero: score them as
    naive Bayes). doc_count is the model's D[c,j] of the m columns."""
    n_rows = X.shape[0]
    P = pairs.parent_docs.shape[1]
    if P == 0:
        return np.zeros((n_rows, 2)), np.zeros(n_rows, dtype=bool)
    X = sp.csr_matrix(X, dtype=np.float64)
    n = np.asarray(X.sum(axis=1), dtype=np.float64).ravel()
    Xc = sp.csr_matrix(X @ sp.diags(pairs.child.astype(np.float64)))
    n_child = np.asarray(Xc.sum(axis=1), dtype=np.float64).ravel()
    present = np.zeros((n_rows, P), dtype=bool)
    inside = np.flatnonzero(pairs.parent_column >= 0)
    if inside.size:
        present[:, inside] = X[:, pairs.parent_column[inside]].toarray() > 0
    tau: FloatArray = np.maximum(n, 1.0) ** -tempering if tempering else np.ones(n_rows)
    batch = _Batch(X, Xc, sp.csr_matrix(X - Xc), n, n_child, n - n_child, tau, present)
    d = classes.messages.astype(np.float64)
    pd = pairs.parent_docs.astype(np.float64)
    usable = np.where(present, (pd.sum(axis=0) >= min_support)[None, :], ((d.sum() - pd.sum(axis=0)) >= min_support)[None, :])
    joint = np.full((n_rows, P, 2), -np.inf)
    for c in (HAM, SPAM):
        spode = _class_spodes(batch, c, doc_count[c], classes, vocabulary_size, pairs, alpha)
        joint[:, :, c] = np.where(usable, spode, -np.inf)
    covered = usable.any(axis=1)
    jll = np.zeros((n_rows, 2))
    if covered.any():
        count = usable[covered].sum(axis=1).astype(np.float64)
        jll[covered] = logsumexp(joint[covered], axis=1) - np.log(count)[:, None]
    return jll, covered


def _class_spodes(b: _Batch, c: int, doc_count: IntArray, classes: ClassCounts, vocabulary_size: int, pairs: PairCounts, alpha: float) -> FloatArray:
    """log P(c, x_p) + tau * sum_j log theta[c,j|x_p] for every row and parent, (n, P)."""
    v = float(vocabulary_size)
    d, nb = classes.messages.astype(np.float64), float(classes.binary_terms[c])
    pd, pt = pairs.parent_docs[c].astype(np.float64), pairs.parent_terms[c].astype(np.float64)
    log_base = np.log(doc_count.astype(np.float64) + alpha)
    seen = pairs.pairs[c]
    # tokens that are not children: naive Bayes's theta[c,j] in every SPODE
    others = b.Xo @ log_base - b.n_other * np.log(nb + alpha * v)
    g, correction = _pair_terms(seen, doc_count, alpha)
    # present parent: sum over child j in x, j != p, of log(D[c,p,j] + alpha) - log(norm)
    with_p = _dense(b.Xc @ g.T) + b.n_child[:, None] * np.log(alpha)
    self_term = np.log(pd + alpha)  # the j = p term, left out of the children
    norm_present = np.log(np.maximum(pt - pd, 0.0) + alpha * (v - 1))
    children_present = with_p - self_term[None, :] - (b.n_child[:, None] - 1) * norm_present[None, :]
    # absent parent: sum over child j in x of log(D[c,j] - D[c,p,j] + alpha) - log(N[c] - N[c,p] + alpha V)
    without_p = (b.Xc @ log_base)[:, None] + _dense(b.Xc @ correction.T)
    children_absent = without_p - b.n_child[:, None] * np.log(np.maximum(nb - pt, 0.0) + alpha * v)[None, :]
    log_denominator = np.log(d.sum() + 4 * alpha)
    prior_present = np.log(pd + alpha) - log_denominator
    prior_absent = np.log(np.maximum(d[c] - pd, 0.0) + alpha) - log_denominator
    result: FloatArray = np.where(
        b.present,
        prior_present[None, :] + b.tau[:, None] * (children_present + others[:, None]),
        prior_absent[None, :] + b.tau[:, None] * (children_absent + others[:, None]),
    )
    return result


#: Pair matrices up to this many cells are made dense before the sums: for
#: one message (a delivery filter's case) scipy's sparse overheads were most
#: of the time.
_DENSE_CELLS = 2_000_000


def _pair_terms(seen: sp.csr_matrix, doc_count: IntArray, alpha: float) -> tuple[FloatArray, FloatArray] | tuple[sp.csr_matrix, sp.csr_matrix]:
    """G[p,j] = log(1 + D[c,p,j] / alpha) and the absent-parent correction
    log(D[c,j] - D[c,p,j] + alpha) - log(D[c,j] + alpha), both zero where the
    pair was not seen; dense for small batches, sparse otherwise."""
    base = doc_count.astype(np.float64)
    if seen.shape[0] * seen.shape[1] <= _DENSE_CELLS:
        dense = seen.toarray().astype(np.float64)
        return np.log1p(dense / alpha), np.log(np.maximum(base[None, :] - dense, 0.0) + alpha) - np.log(base + alpha)[None, :]
    h = sp.coo_matrix(seen, dtype=np.float64)
    g = sp.csr_matrix((np.log1p(h.data / alpha), (h.row, h.col)), shape=seen.shape)
    at = base[h.col]
    correction = sp.csr_matrix((np.log(np.maximum(at - h.data, 0.0) + alpha) - np.log(at + alpha), (h.row, h.col)), shape=seen.shape)
    return g, correction


def _dense(product: object) -> FloatArray:
    """A product that scipy gives sparse or dense, as a dense array."""
    out: FloatArray = product.toarray() if sp.issparse(product) else np.asarray(product)  # type: ignore[attr-defined]
    return out


#: How many of the best-ranked tokens SPODE tries as its one parent.
SPODE_CANDIDATES = 20


def spode_parent(
    X: sp.csr_matrix,
    is_spam: npt.NDArray[np.bool_],
    candidates: list[int],
    child: npt.NDArray[np.bool_],
    alpha: float,
    tempering: float,
    min_support: int,
    holdout: float = 0.2,
) -> int:
    """The column among ``candidates`` whose SPODE ranks the held-out tail
    best: train on the first 1 - ``holdout`` of the messages (rows of the
    0/1 matrix X, in training order), score the rest, keep the largest area
    under the ROC curve (ties: the earlier candidate). Without both classes
    in head and tail, the first candidate."""
    split = int(round(X.shape[0] * (1.0 - holdout)))
    head, tail = X[:split], X[split:]
    y_head, y_tail = is_spam[:split], is_spam[split:]
    if not candidates:
        raise ValueError("no candidate parent")
    if not (y_head.any() and not y_head.all() and y_tail.any() and not y_tail.all()):
        return candidates[0]
    doc_count = np.vstack([np.asarray(head[~y_head].sum(axis=0)).ravel(), np.asarray(head[y_head].sum(axis=0)).ravel()]).astype(np.int64)
    known = np.flatnonzero(doc_count.any(axis=0))
    lengths = np.asarray(head.sum(axis=1)).ravel()
    classes = ClassCounts(
        np.array([(~y_head).sum(), y_head.sum()], dtype=np.int64),
        np.array([lengths[~y_head].sum(), lengths[y_head].sum()], dtype=np.int64),
        np.array([lengths[~y_head].sum(), lengths[y_head].sum()], dtype=np.int64),
    )
    where = np.full(X.shape[1], -1, dtype=np.int64)
    where[known] = np.arange(known.size)
    scored = sp.csr_matrix(tail[:, known])
    best, best_auc = candidates[0], -1.0
    for p in candidates:
        holding = [head[~y_head][:, [p]], head[y_head][:, [p]]]
        parts = [head[~y_head], head[y_head]]
        pairs = PairCounts(
            parent_docs=np.array([[int(h.sum())] for h in holding], dtype=np.int64),
            parent_terms=np.array([[int((h.T @ np.asarray(x.sum(axis=1))).sum())] for h, x in zip(holding, parts)], dtype=np.int64),
            pairs=(sp.csr_matrix((holding[0].T @ parts[0])[:, known]), sp.csr_matrix((holding[1].T @ parts[1])[:, known])),
            parent_column=np.array([where[p]], dtype=np.int64),
            child=child[known],
        )
        jll, covered = joint_log_likelihood(scored, doc_count[:, known], classes, known.size, pairs, alpha, tempering, min_support)
        odds = np.where(covered, jll[:, 1] - jll[:, 0], 0.0)
        auc = _roc_area(y_tail, odds)
        if auc > best_auc:
            best, best_auc = p, auc
    return best


def _roc_area(is_spam: npt.NDArray[np.bool_], odds: FloatArray) -> float:
    """The Mann-Whitney area under the ROC curve (ties count a half)."""
    # Imported here: scipy.stats is 0.1 s of every delivery filter's start.
    from scipy.stats import rankdata

    ranks = rankdata(odds)
    n_spam, n_ham = int(is_spam.sum()), int((~is_spam).sum())
    return float((ranks[is_spam].sum() - n_spam * (n_spam + 1) / 2) / (n_spam * n_ham))
