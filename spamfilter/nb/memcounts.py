"""The store's sums kept in memory, for runs that score many settings over cached tokens.

A ``MemoryCounts`` holds, over a fixed vocabulary of V token columns, what
the store holds after training the same messages: per token and class the
messages containing it D[c,j] and its occurrences N[c,j], and the class
totals (messages, occurrences, distinct tokens per message summed, the
vocabulary seen and, for the Bernoulli model, the histogram of D[c,:]).
``evidence`` hands the scorer a batch over the columns seen so far, as the
filter's count cache does, so a benchmark or ``tune`` scores with exactly
the filter's arithmetic (``spamfilter.nb.scorer``) without a database.

Rows are messages as two sparse matrices over the V columns: ``binary``
(0/1, token present) and ``terms`` (occurrence counts).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from spamfilter.counts import ClassCounts, IntArray, TokenCounts, Totals
from spamfilter.nb.scorer import Evidence

BoolArray = npt.NDArray[np.bool_]


class MemoryCounts:
    """Token and class counts over V columns, grown message by message or in bulk."""

    def __init__(self, vocabulary_size: int) -> None:
        self.doc = np.zeros((2, vocabulary_size), dtype=np.int64)
        self.term = np.zeros((2, vocabulary_size), dtype=np.int64)
        self.messages = np.zeros(2, dtype=np.int64)
        #: Per class, the occurrences and the distinct tokens of its messages
        #: summed (the store's class totals, kept as each message is added).
        self.terms = np.zeros(2, dtype=np.int64)
        self.binary_terms = np.zeros(2, dtype=np.int64)
        #: Which columns some trained message holds (the store's vocabulary).
        self.seen = np.zeros(vocabulary_size, dtype=bool)
        self._seen_count = 0

    @classmethod
    def of(cls, binary: sp.csr_matrix, terms: sp.csr_matrix, is_spam: BoolArray) -> MemoryCounts:
        """The counts after training every row (``is_spam`` per row) at once."""
        n = binary.shape[0]
        onehot = sp.csr_matrix((np.ones(n), (np.asarray(is_spam, dtype=np.int64), np.arange(n))), shape=(2, n))
        counts = cls(binary.shape[1])
        counts.doc = np.rint(np.asarray((onehot @ binary).todense())).astype(np.int64)
        counts.term = np.rint(np.asarray((onehot @ terms).todense())).astype(np.int64)
        counts.messages = np.array([n - int(np.sum(is_spam)), int(np.sum(is_spam))], dtype=np.int64)
        counts.terms, counts.binary_terms = counts.term.sum(axis=1), counts.doc.sum(axis=1)
        counts.seen = counts.doc.sum(axis=0) > 0
        counts._seen_count = int(counts.seen.sum())
        return counts

    def add(self, columns: IntArray, occurrences: npt.NDArray[np.float64], label: int) -> None:
        """Train one message of class ``label`` holding ``columns`` (distinct)
        with these occurrence counts."""
        added = np.rint(occurrences).astype(np.int64)
        self.doc[label, columns] += 1
        self.term[label, columns] += added
        self.messages[label] += 1
        self.terms[label] += int(added.sum())
        self.binary_terms[label] += len(columns)
        self._seen_count += int((~self.seen[columns]).sum())
        self.seen[columns] = True

    def totals(self, *, histogram: bool = True) -> Totals:
        """The class totals, with the histogram of D[c,:] over the seen
        columns that the Bernoulli absent-token sum needs (O(V); empty
        without ``histogram``, which only the multinomial models can do
        without)."""
        rows = []
        seen = self.doc[:, self.seen] if histogram else np.zeros((2, 0), dtype=np.int64)
        for c in (0, 1):
            k, n = np.unique(seen[c], return_counts=True)
            rows.append(np.stack([k, n], axis=1).astype(np.int64))
        classes = ClassCounts(messages=self.messages.copy(), terms=self.terms.copy(), binary_terms=self.binary_terms.copy())
        return Totals(classes, vocabulary_size=self._seen_count, histogram=(rows[0], rows[1]))

    def known(self, X: sp.csr_matrix) -> IntArray:
        """The columns X's rows hold that the counts have seen, ascending."""
        present = np.unique(sp.csr_matrix(X).indices)
        known: IntArray = present[self.seen[present]].astype(np.int64)
        return known

    def evidence(self, X: sp.csr_matrix, header: BoolArray | None = None, *, histogram: bool = True, unseen: bool = False) -> Evidence:
        """The scorer's batch for the rows of X (n, V): the columns they hold
        that the counts have seen (in column order; the others are unknown
        tokens, and with ``unseen`` how many each row holds, of its body and
        of its header lines, is ``Evidence.unseen``, for ``[model]
        unseen_weight``), their counts and X over them; ``header`` (V,)
        marks the header-line columns."""
        X = sp.csr_matrix(X)
        known = self.known(X)
        # X's entries of the known columns, renumbered, each row's in X's
        # order (the message's, as count_matrix builds it and as the
        # filter's own matrix keeps it): max_tokens breaks ties between
        # equally strong tokens by that order.
        n = X.shape[0]
        kept = self.seen[X.indices]
        rows = np.repeat(np.arange(n), np.diff(X.indptr))[kept]
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        sub = sp.csr_matrix((X.data[kept], np.searchsorted(known, X.indices[kept]), indptr), shape=(n, known.size))
        counted = None
        if unseen:
            lines = np.zeros(X.shape[1], dtype=bool) if header is None else header
            counted = np.stack([X @ (~self.seen & ~lines).astype(np.float64), X @ (~self.seen & lines).astype(np.float64)], axis=1)
        counts = TokenCounts(self.doc[:, known], self.term[:, known])
        return Evidence(counts, self.totals(histogram=histogram), sub, None if header is None else header[known], unseen=counted)
