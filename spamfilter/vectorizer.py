"""Token lists to sparse document-term matrices.

A batch of messages becomes ``X`` of shape (n_messages, m) over a
``Vocabulary`` of m tokens: X[i, j] = occurrences of token j in message i
(multinomial), or 1 if it occurs at all (Bernoulli and binary multinomial).
The vocabulary of a scoring batch is just the union of its tokens: the model
never needs columns for tokens no message in the batch contains.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain, repeat

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp


class Vocabulary:
    """An ordered token -> column index map that grows as tokens are added."""

    def __init__(self, tokens: Iterable[str] = ()) -> None:
        self.index: dict[str, int] = {}
        self.tokens: list[str] = []
        for token in tokens:
            self.add(token)

    def add(self, token: str) -> int:
        """Column of ``token``, appending it if new."""
        column = self.index.get(token)
        if column is None:
            column = self.index[token] = len(self.tokens)
            self.tokens.append(token)
        return column

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: object) -> bool:
        return token in self.index


def term_counts(tokens: Iterable[str]) -> dict[str, int]:
    """Occurrences of each distinct token of one message."""
    return dict(Counter(tokens))


def batch_vocabulary(docs: Sequence[Mapping[str, int]]) -> Vocabulary:
    """The union of the messages' tokens, in first-seen order."""
    vocabulary = Vocabulary()
    for doc in docs:
        for token in doc:
            vocabulary.add(token)
    return vocabulary


def count_matrix(docs: Sequence[Mapping[str, int]], vocabulary: Vocabulary, *, binary: bool = False) -> sp.csr_matrix:
    """X of shape (len(docs), len(vocabulary)); tokens outside the vocabulary are dropped.

    binary=True gives 0/1 entries (Bernoulli and binary-multinomial features).
    """
    indptr = np.zeros(len(docs) + 1, dtype=np.int64)
    indices: list[int] = []
    data: list[int] = []
    index = vocabulary.index
    for i, doc in enumerate(docs):
        for token, n in doc.items():
            column = index.get(token)
            if column is not None:
                indices.append(column)
                data.append(1 if binary else n)
        indptr[i + 1] = len(indices)
    return sp.csr_matrix((np.asarray(data, dtype=np.float64), np.asarray(indices, dtype=np.int64), indptr), shape=(len(docs), len(vocabulary)))


#: Which of some token ids to keep (``TokenCounts.known_at``: those some
#: trained message has), asked of a batch's ids only, not of the whole index.
Keep = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.bool_]]


def indexed_matrix(docs: Sequence[Mapping[str, int]], index: Mapping[str, int], keep: Keep, *, binary: bool = False) -> tuple[sp.csr_matrix, npt.NDArray[np.int64]]:
    """X over the ids of a token index, for a batch scored from memory.

    Tokens of ``docs`` not in ``index`` (token -> id), and ids that
    ``keep`` says no to (tokens no trained message has), are dropped.
    Returns X of shape (len(docs), m) and ids (m,): column j of X is token
    id ids[j], ids ascending. Within a row the entries keep the message's
    token order, as ``count_matrix`` does, so X @ W sums each row in the
    same order and gives bit-identical results.

    The token -> id lookups run in C (``map`` over the dict), which made
    this about five times cheaper than ``batch_vocabulary`` plus
    ``count_matrix`` on the same batches.
    """
    lengths, ids, data = _looked_up(docs, index, binary)
    kept = ids >= 0
    kept[kept] = keep(ids[kept])
    row_of = np.repeat(np.arange(len(docs)), lengths)
    indptr = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_of[kept], minlength=len(docs)), out=indptr[1:])
    columns, inverse = np.unique(ids[kept], return_inverse=True)
    X = sp.csr_matrix((data[kept], inverse.astype(np.int64), indptr), shape=(len(docs), len(columns)))
    return X, columns


def unseen_counts(
    docs: Sequence[Mapping[str, int]], index: Mapping[str, int], keep: Keep, is_line: Callable[[str], bool], *, binary: bool = False
) -> npt.NDArray[np.float64]:
    """The token events of each doc that ``indexed_matrix`` drops (not in
    ``index``, or not kept), shape (len(docs), 2): those ``is_line``
    says no to, then those it says yes to (it is asked of the dropped
    tokens only)."""
    lengths, ids, data = _looked_up(docs, index, binary)
    dropped = ids < 0
    dropped[~dropped] = ~keep(ids[~dropped])
    tokens = list(chain.from_iterable(docs))
    line = np.zeros(ids.size, dtype=bool)
    where = np.flatnonzero(dropped)
    line[where] = np.fromiter((is_line(tokens[i]) for i in where.tolist()), dtype=bool, count=where.size)
    row_of = np.repeat(np.arange(len(docs)), lengths)
    out = np.zeros((len(docs), 2))
    for column, part in enumerate((dropped & ~line, dropped & line)):
        out[:, column] = np.bincount(row_of[part], weights=data[part], minlength=len(docs))
    return out


def _looked_up(docs: Sequence[Mapping[str, int]], index: Mapping[str, int], binary: bool) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Each doc's length, and each of its tokens' id in ``index`` (-1: not
    there) and count (1 with ``binary``), in the docs' order."""
    lengths = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
    total = int(lengths.sum())
    ids = np.fromiter(map(index.get, chain.from_iterable(docs), repeat(-1)), dtype=np.int64, count=total)
    if binary:
        data = np.ones(total, dtype=np.float64)
    else:
        data = np.fromiter(chain.from_iterable(doc.values() for doc in docs), dtype=np.float64, count=total)
    return lengths, ids, data
