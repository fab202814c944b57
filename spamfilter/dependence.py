"""One-dependence counts between the store and ``spamfilter.aode``: keeping
them with training, choosing the parents, and reading them for scoring.

The parents are chosen explicitly: ``reselect`` (``spamfilter db reselect``,
or training once the ledger has grown by ``[model] reselect_growth`` since
the last choice) picks them from the token counts and rebuilds every pair
count from the ledger, so after it the counts are exactly those of the
messages trained. Between choices, training, ``mark`` and ``forget`` add or
subtract each message's pairs as its ledger entry holds them
(``apply_delta``). Parents chosen with one ``[model] dependence`` stay until
the next choice: the counts are kept while parents exist, whatever the
configuration of the process that trains.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from spamfilter import aode
from spamfilter.config import ModelConfig
from spamfilter.counts import IntArray
from spamfilter.store import StoreTransaction
from spamfilter.store.pairs import PairRow, ParentRow

#: The ledger must hold this many messages, of both classes, before parents are first chosen.
FIRST_SELECTION = 50


@dataclass(frozen=True, slots=True)
class Selection:
    """What ``reselect`` chose: the parents, how many children, the ledger
    messages their counts cover, and how many pair counts it wrote."""

    parents: list[str]
    children: int
    messages: int
    pairs: int


def _matrix(docs: Sequence[dict[str, int]], index: dict[str, int]) -> sp.csr_matrix:
    """0/1 rows of the docs over ``index``'s columns (tokens not in it dropped)."""
    rows = [np.fromiter((index[t] for t in doc if t in index), dtype=np.int64) for doc in docs]
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    cols = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    return sp.csr_matrix((np.ones(cols.size), cols, indptr), shape=(len(docs), len(index)))


def pair_sums(
    parents: Sequence[str],
    children: set[str],
    docs: Sequence[dict[str, int]],
    labels: Sequence[int],
    signs: Sequence[int],
) -> tuple[list[ParentRow], list[PairRow]]:
    """The signed change of D[c,p], N[c,p] and D[c,p,j] (j a child) that
    training (+1) or untraining (-1) the messages ``docs`` makes, as store
    rows (pairs with no change left out). The parents are children too."""
    kids = list(dict.fromkeys([*parents, *(t for doc in docs for t in doc if t in children)]))
    index = {t: i for i, t in enumerate(kids)}
    X = _matrix(docs, index)
    lengths = np.fromiter(map(len, docs), dtype=np.float64, count=len(docs))
    labels_ = np.asarray(labels, dtype=np.int64)
    signs_ = np.asarray(signs, dtype=np.float64)
    held = sp.csr_matrix(X[:, : len(parents)])
    parent_counts = np.zeros((len(parents), 4), dtype=np.int64)
    totals: dict[tuple[int, int], list[int]] = {}
    for c in (0, 1):
        signed = sp.diags(np.where(labels_ == c, signs_, 0.0)) @ held
        parent_counts[:, c] = np.rint(np.asarray(signed.sum(axis=0)).ravel()).astype(np.int64)
        parent_counts[:, 2 + c] = np.rint(signed.T @ lengths).astype(np.int64)
        pair = sp.coo_matrix(signed.T @ X)
        for p, j, value in zip(pair.row.tolist(), pair.col.tolist(), pair.data.tolist()):
            totals.setdefault((j, p), [0, 0])[c] += int(round(value))
    pair_rows: list[PairRow] = [(kids[j], parents[p], h, s) for (j, p), (h, s) in sorted(totals.items()) if h or s]
    parent_rows: list[ParentRow] = [
        (parents[p], int(a), int(b), int(t0), int(t1)) for p, (a, b, t0, t1) in enumerate(parent_counts.tolist()) if a or b or t0 or t1
    ]
    return parent_rows, pair_rows


def apply_delta(tx: StoreTransaction, docs: Sequence[dict[str, int]], labels: Sequence[int], signs: Sequence[int]) -> None:
    """Keep the owner's one-dependence counts with a training step (nothing without parents)."""
    parents, _, _ = tx.pairs.parents()
    if parents and docs:
        children = tx.pairs.children_among(list(dict.fromkeys(t for doc in docs for t in doc)))
        tx.pairs.add(*pair_sums(parents, children, docs, labels, signs))


def reselect(tx: StoreTransaction, parents: int, children: int, min_support: int) -> Selection:
    """Choose the parents and children (the tokens of largest mutual
    information with the class among those in at least ``min_support``
    messages: the first ``parents``, the first ``children``) and rebuild
    every pair count from the ledger (exact: the counts become those of
    the messages the ledger holds)."""
    names, ham, spam = [], [], []
    for token, ham_docs, spam_docs, _, _, _ in tx.iter_tokens():
        names.append(token)
        ham.append(ham_docs)
        spam.append(spam_docs)
    doc_count = np.array([ham, spam], dtype=np.int64).reshape(2, -1)
    ranked = aode.rank_tokens(names, doc_count, tx.ledger_counts(), min_support)
    chosen, kids = sorted(ranked[:parents]), ranked[: max(children, parents)]
    docs, labels = [], []
    for label, counts in tx.iter_ledger():
        docs.append(counts)
        labels.append(label)
    parent_rows, pair_rows = pair_sums(chosen, set(kids), docs, labels, [1] * len(docs)) if chosen else ([], [])
    present = {row[0] for row in parent_rows}
    parent_rows += [(p, 0, 0, 0, 0) for p in chosen if p not in present]
    tx.pairs.replace(sorted(parent_rows), sorted(kids), pair_rows, len(docs))
    return Selection(chosen, len(kids), len(docs), len(pair_rows))


def reselect_if_due(tx: StoreTransaction, m: ModelConfig) -> Selection | None:
    """``reselect`` when the ledger has grown ``m.reselect_growth`` times
    since the last choice (the first once it holds ``FIRST_SELECTION``
    messages of both classes); None when not due or growth is 0."""
    if m.dependence == "none" or m.reselect_growth <= 0:
        return None
    tracked = tx.ledger_counts()
    before = tx.pairs.selected_at()
    wanted = FIRST_SELECTION if before is None else max(before + 1, int(np.ceil(before * m.reselect_growth)))
    if int(tracked.sum()) < wanted or not tracked.all():
        return None
    return reselect(tx, parents_of(m), m.aode_children, m.aode_min_support)


def parents_of(m: ModelConfig) -> int:
    """How many parents ``m`` asks for: K for AODE, one for SPODE."""
    return 1 if m.dependence == "spode" else m.aode_parents


def pair_counts(tx: StoreTransaction, owner: str, columns: Sequence[str]) -> aode.PairCounts:
    """The one-dependence counts for a batch whose token columns are ``columns``."""
    pairs = tx.pairs_of(owner)
    parents, docs, terms = pairs.parents()
    where = {t: i for i, t in enumerate(columns)}
    slot = {p: i for i, p in enumerate(parents)}
    children = pairs.children_among(list(columns)) if parents else set()
    rows = [r for r in pairs.pair_rows(sorted(children)) if r[1] in slot]
    r_ = np.fromiter((slot[r[1]] for r in rows), dtype=np.int64, count=len(rows))
    j_ = np.fromiter((where[r[0]] for r in rows), dtype=np.int64, count=len(rows))
    out = [
        sp.csr_matrix((np.fromiter((r[2 + c] for r in rows), dtype=np.float64, count=len(rows)), (r_, j_)), shape=(len(parents), len(columns)))
        for c in (0, 1)
    ]
    column: IntArray = np.array([where.get(p, -1) for p in parents], dtype=np.int64)
    child = np.array([t in children for t in columns], dtype=bool)
    return aode.PairCounts(docs, terms, (out[0], out[1]), column, child)
