"""One-dependence counts between the store and ``spamfilter.nb.aode``: keeping
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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from spamfilter.config import ModelConfig
from spamfilter.counts import IntArray
from spamfilter.errors import StoreInconsistent
from spamfilter.nb import aode
from spamfilter.store import StoreTransaction
from spamfilter.store.pairs import PAIR_COLUMNS, Pairs, ParentRow
from spamfilter.vectorizer import Vocabulary, count_matrix

#: More than the most parents a model may have (``[model] aode_parents``): a
#: (child, parent) pair's key in ``pair_sums`` and ``merged`` is child * _SLOTS + parent.
_SLOTS = 1 << 16

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


def _records(parent: IntArray, ham: IntArray, spam: IntArray) -> Pairs:
    return np.stack([parent, ham, spam], axis=1).astype(np.int64).reshape(-1, PAIR_COLUMNS)


def pair_sums(
    parents: Sequence[str], children: set[str], docs: Sequence[dict[str, int]], labels: Sequence[int], signs: Sequence[int]
) -> tuple[list[ParentRow], dict[str, Pairs]]:
    """The signed change that training (+1) or untraining (-1) the messages
    ``docs`` makes to D[c,p] and N[c,p] (store rows, unchanged parents left
    out) and to each child's D[c,p,j] (packed records in parent order, zero
    changes left out; children the docs do not hold left out). ``parents``
    in index (token) order; the parents are children too."""
    kids = Vocabulary([*parents, *(t for doc in docs for t in doc if t in children)])
    X = count_matrix(docs, kids, binary=True)
    lengths = np.fromiter(map(len, docs), dtype=np.float64, count=len(docs))
    labels_ = np.asarray(labels, dtype=np.int64)
    signs_ = np.asarray(signs, dtype=np.float64)
    held = sp.csr_matrix(X[:, : len(parents)])
    parent_counts = np.zeros((len(parents), 4), dtype=np.int64)
    entries = []
    for c in (0, 1):
        signed = sp.diags(np.where(labels_ == c, signs_, 0.0)) @ held
        parent_counts[:, c] = np.rint(np.asarray(signed.sum(axis=0)).ravel()).astype(np.int64)
        parent_counts[:, 2 + c] = np.rint(signed.T @ lengths).astype(np.int64)
        pair = sp.coo_matrix(signed.T @ X)
        entries.append((pair.col.astype(np.int64) * _SLOTS + pair.row, pair.data, c))
    # one key per (child, parent): child-major, so each child's records are a run in parent order
    keys, inverse = np.unique(np.concatenate([k for k, _, _ in entries]), return_inverse=True)
    split = len(entries[0][0])
    counts = [np.bincount(inverse[:split], weights=entries[0][1], minlength=keys.size), np.bincount(inverse[split:], weights=entries[1][1], minlength=keys.size)]
    ham, spam = (np.rint(x).astype(np.int64) for x in counts)
    keep = (ham != 0) | (spam != 0)
    keys, ham, spam = keys[keep], ham[keep], spam[keep]
    child, parent = np.divmod(keys, _SLOTS)
    starts = np.flatnonzero(np.diff(child, prepend=-1))
    ends = np.append(starts[1:], child.size)
    changes = {kids.tokens[int(child[a])]: _records(parent[a:b], ham[a:b], spam[a:b]) for a, b in zip(starts.tolist(), ends.tolist())}
    parent_rows: list[ParentRow] = [(parents[p], int(a), int(b), int(t0), int(t1)) for p, (a, b, t0, t1) in enumerate(parent_counts.tolist()) if a or b or t0 or t1]
    return parent_rows, changes


def merged(old: Mapping[str, Pairs], changes: Mapping[str, Pairs]) -> dict[str, Pairs]:
    """Each changed child's packed counts plus its change, zero counts
    dropped, in parent order (all children at once)."""
    names = list(changes)
    parts = [old[t] for t in names] + [changes[t] for t in names]
    if not names:
        return {}
    packed = np.concatenate(parts)
    owner = np.repeat(np.tile(np.arange(len(names)), 2), [len(r) for r in parts])
    keys, inverse = np.unique(owner * _SLOTS + packed[:, 0], return_inverse=True)
    ham = np.rint(np.bincount(inverse, weights=packed[:, 1], minlength=keys.size)).astype(np.int64)
    spam = np.rint(np.bincount(inverse, weights=packed[:, 2], minlength=keys.size)).astype(np.int64)
    if (ham < 0).any() or (spam < 0).any():
        raise StoreInconsistent("a one-dependence count would fall below zero: `spamfilter db reselect` rebuilds them")
    child, parent = np.divmod(keys, _SLOTS)
    keep = (ham != 0) | (spam != 0)
    bounds = np.searchsorted(child[keep], np.arange(len(names) + 1))
    records = _records(parent[keep], ham[keep], spam[keep])
    return {t: records[bounds[i] : bounds[i + 1]] for i, t in enumerate(names)}


def apply_delta(tx: StoreTransaction, docs: Sequence[dict[str, int]], labels: Sequence[int], signs: Sequence[int]) -> None:
    """Keep the owner's one-dependence counts with a training step (nothing without parents)."""
    if not docs:
        return
    tx.pairs.lock(exclusive=False)
    parents, _, _ = tx.pairs.parents()
    if not parents:
        return
    old = tx.pairs.children(list(dict.fromkeys(t for doc in docs for t in doc)), for_update=True)
    parent_rows, changes = pair_sums(parents, set(old), docs, labels, signs)
    tx.pairs.put_children(merged(old, changes))
    tx.pairs.add_parents(parent_rows)


def reselect(tx: StoreTransaction, m: ModelConfig) -> Selection:
    """Choose the parents and children for ``m`` and rebuild every pair
    count from the ledger (exact: the counts become those of the messages
    the ledger holds).

    AODE's parents: the ``m.aode_parents`` tokens of largest mutual
    information with the class among those in at least ``m.aode_min_support``
    messages. SPODE's one parent: of the first ``aode.SPODE_CANDIDATES`` of
    them, the one whose SPODE, trained on the first 80% of the ledger in
    training order, ranks the last 20% best. Children: the parents and the
    first ``m.aode_children`` by the same order among tokens in at least
    ``m.aode_child_support`` messages.
    """
    tx.pairs.lock(exclusive=True)
    names, ham, spam = [], [], []
    for token, ham_docs, spam_docs, _, _, _ in tx.iter_tokens():
        names.append(token)
        ham.append(ham_docs)
        spam.append(spam_docs)
    doc_count = np.array([ham, spam], dtype=np.int64).reshape(2, -1)
    docs, labels = _ledger(tx)

    def spode_parent(candidates: list[str], children: set[str]) -> str:
        vocabulary = Vocabulary([*candidates, *(t for doc in docs for t in doc)])
        child = np.array([t in children or t in candidates for t in vocabulary.tokens], dtype=bool)
        X = count_matrix(docs, vocabulary, binary=True)
        is_spam = np.asarray(labels, dtype=np.int64) == 1
        column = aode.spode_parent(X, is_spam, list(range(len(candidates))), child, m.alpha, m.tempering, m.aode_min_support)
        return vocabulary.tokens[column]

    chosen, kids = chosen_tokens(names, doc_count, tx.ledger_counts(), m, spode_parent)
    written = _put_pairs(tx, chosen, kids if chosen else [], docs, labels, len(docs))
    return Selection(chosen, len(kids) if chosen else 0, len(docs), written)


def _put_pairs(tx: StoreTransaction, parents: list[str], kids: list[str], docs: list[dict[str, int]], labels: list[int], messages: int) -> int:
    """Store the pair counts of ``parents`` and ``kids`` over the ledger's
    ``docs`` in place of the owner's (chosen when it held ``messages``);
    how many pair counts that is."""
    parent_rows, changes = pair_sums(parents, set(kids), docs, labels, [1] * len(docs)) if parents else ([], {})
    present = {row[0] for row in parent_rows}
    parent_rows += [(p, 0, 0, 0, 0) for p in parents if p not in present]
    empty = np.zeros((0, PAIR_COLUMNS), dtype=np.int64)
    tx.pairs.replace(sorted(parent_rows), {t: changes.get(t, empty) for t in kids}, messages)
    tx.bump_version()  # copies of the counts held in memory (PairCache) are stale now
    return sum(len(r) for r in changes.values())


def recount(tx: StoreTransaction) -> None:
    """Count the pairs of the parents and children chosen before again
    from the ledger as it is now (after a prune took tokens out of its
    entries); the choice and when it was made stay."""
    messages = tx.pairs.selected_at()
    if messages is None:
        return  # no selection: nothing to lock or count
    tx.pairs.lock(exclusive=True)
    parents, _, _ = tx.pairs.parents()
    docs, labels = _ledger(tx)
    _put_pairs(tx, parents, list(tx.pairs.all_children()), docs, labels, messages)


def chosen_tokens(
    names: list[str], doc_count: IntArray, messages: IntArray, m: ModelConfig, spode_parent: Callable[[list[str], set[str]], str]
) -> tuple[list[str], list[str]]:
    """The parents (in index order) and the children ``reselect`` keeps for
    ``m``, from the tokens ``names`` and their D[c,j] (2, V) over
    ``messages`` D[c] (see ``reselect``); for SPODE ``spode_parent(candidates,
    children)`` picks the one parent. ``tune`` chooses with it too."""
    ranked = aode.rank_tokens(names, doc_count, messages, m.aode_min_support)
    parents = sorted(ranked[: parents_of(m)])
    kids = list(dict.fromkeys([*parents, *aode.rank_tokens(names, doc_count, messages, m.aode_child_support)[: m.aode_children]]))
    if m.dependence == "spode" and parents:
        parents = [spode_parent(ranked[: aode.SPODE_CANDIDATES], set(kids))]
        kids = list(dict.fromkeys([*parents, *kids]))
    return parents, kids


def _ledger(tx: StoreTransaction, *, skip_damaged: bool = False) -> tuple[list[dict[str, int]], list[int]]:
    """The token counts and labels of the owner's ledger, in training order
    (``skip_damaged``: an entry that cannot be read is left out, for ``db
    check``, which lists those itself; else it raises)."""
    docs, labels = [], []
    for label, counts in tx.iter_ledger(on_damaged=(lambda _digest, _why: None) if skip_damaged else None):
        docs.append(counts)
        labels.append(label)
    return docs, labels


def differences(tx: StoreTransaction) -> list[str] | None:
    """How the stored one-dependence counts differ from the ledger's (empty:
    they agree); None without parents."""
    parents, docs_, terms = tx.pairs.parents()
    if not parents:
        return None
    stored = tx.pairs.all_children()
    docs, labels = _ledger(tx, skip_damaged=True)
    parent_rows, changes = pair_sums(parents, set(stored), docs, labels, [1] * len(docs))
    expected = {row[0]: list(row[1:]) for row in parent_rows}
    out = []
    for i, p in enumerate(parents):
        have = [int(docs_[0, i]), int(docs_[1, i]), int(terms[0, i]), int(terms[1, i])]
        if have != expected.get(p, [0, 0, 0, 0]):
            out.append(f"parent {p!r}: stored {have}, ledger {expected.get(p, [0, 0, 0, 0])}")
    empty = np.zeros((0, PAIR_COLUMNS), dtype=np.int64)
    for token in sorted(stored):
        if not np.array_equal(stored[token], changes.get(token, empty)):
            out.append(f"child {token!r}: stored {stored[token].tolist()}, ledger {changes.get(token, empty).tolist()}")
    return out


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
    return reselect(tx, m)


def parents_of(m: ModelConfig) -> int:
    """How many parents ``m`` asks for: K for AODE, one for SPODE."""
    return 1 if m.dependence == "spode" else m.aode_parents


class PairCache:
    """The parents and the child rows read so far, for one model key (the
    ``CountCache`` key: owners and their model versions, which every
    training step and every choice of parents moves), so a batch or a
    resident process reads each child once. Tokens asked for that are not
    children are remembered too."""

    def __init__(self) -> None:
        self.key: object = None
        self.parents: tuple[list[str], IntArray, IntArray] | None = None
        self.children: dict[str, Pairs] = {}
        self.not_children: set[str] = set()

    def rows(self, tx: StoreTransaction, owner: str, key: object, columns: Sequence[str]) -> tuple[tuple[list[str], IntArray, IntArray], dict[str, Pairs]]:
        """The parents and the child rows among ``columns``, reading only what is not held for ``key``."""
        pairs = tx.pairs_of(owner)
        if key is None or key != self.key or self.parents is None:
            self.key, self.parents, self.children, self.not_children = key, pairs.parents(), {}, set()
        if self.parents[0]:
            missing = [t for t in columns if t not in self.children and t not in self.not_children]
            if missing:
                found = pairs.children(missing)
                self.children.update(found)
                self.not_children.update(t for t in missing if t not in found)
        return self.parents, {t: self.children[t] for t in columns if t in self.children}


def pair_counts(tx: StoreTransaction, owner: str, columns: Sequence[str], cache: PairCache | None = None, key: object = None) -> aode.PairCounts:
    """The one-dependence counts for a batch whose token columns are ``columns``
    (through ``cache`` when given, valid while ``key`` is the same)."""
    (parents, docs, terms), found = (cache or PairCache()).rows(tx, owner, key, columns)
    where = {t: i for i, t in enumerate(columns)}
    records = list(found.values())
    cols = np.repeat(np.fromiter((where[t] for t in found), dtype=np.int64, count=len(found)), [len(r) for r in records])
    packed = np.concatenate(records) if records else np.zeros((0, PAIR_COLUMNS), dtype=np.int64)
    shape = (len(parents), len(columns))
    out = [sp.csr_matrix((packed[:, 1 + c].astype(np.float64), (packed[:, 0], cols)), shape=shape) for c in (0, 1)]
    column: IntArray = np.array([where.get(p, -1) for p in parents], dtype=np.int64)
    child = np.array([t in found for t in columns], dtype=bool)
    return aode.PairCounts(docs, terms, (out[0], out[1]), column, child)
