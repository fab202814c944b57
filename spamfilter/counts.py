"""The counts that cross from the store to the model: one shape, named fields.

Only raw integer counts are ever stored; everything the model estimates is
derived from these values when it scores. Every per-class array has the class
on its first axis, indexed by ``Label`` (``HAM = 0``, ``SPAM = 1``).

    TokenCounts   per token j of a list of m tokens, each (2, m):
                  doc_count[c, j]  = D[c,j], class-c messages containing j
                  term_count[c, j] = N[c,j], occurrences of j in class c
    ClassCounts   per class, each (2,):
                  messages     = D[c], trained messages
                  terms        = N[c], token occurrences (sum_j N[c,j])
                  binary_terms = distinct tokens summed over messages (sum_j D[c,j])
    FeatureStats  per class c and feature i, each (2, F): n, sum x, sum x^2
                  of the fixed-point message features (Gaussian NB)
    Totals        a model's ClassCounts, its vocabulary size V and the
                  per-class histogram H[c,k] of how many tokens occur in
                  exactly k class-c messages (for the exact Bernoulli
                  absent-token sum, see ``spamfilter.nb.model``)

Deltas (what a training step adds, negative to untrain) have the same types.
``Label`` names the two classes (``spamfilter.verdicts``).
This module is the base layer under both ``store`` and ``model``: it imports
nothing from the package.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from spamfilter.verdicts import HAM, SPAM, Label

IntArray = npt.NDArray[np.int64]


#: The largest count or class total the store keeps: 2^62 - 1.
#:
#: A 64-bit signed column (SQLite INTEGER, PostgreSQL bigint) and numpy's
#: int64 hold 2^63 - 1. Keeping every count at or below half of that
#: leaves the other half as headroom: ham plus spam of a token, or a
#: count plus what one training adds before the store checks the result,
#: never passes 2^63 - 1. (Past it, SQLite silently stores the sum as an
#: inexact REAL and PostgreSQL refuses the statement.) A count file at
#: 2^63 - 4 used to import, and the next training turned a total into a
#: REAL no command could read. At a billion token occurrences trained a
#: second, 2^62 takes 146 years to reach.
MAX_COUNT = 2**62 - 1


def _pair(values: npt.ArrayLike | None = None) -> IntArray:
    array = np.zeros(2, dtype=np.int64) if values is None else np.asarray(values, dtype=np.int64)
    if array.shape != (2,):
        raise ValueError(f"a per-class count needs shape (2,), not {array.shape}")
    return array


@dataclass(frozen=True, slots=True)
class ClassCounts:
    """Per-class totals (or their change), each field shape (2,): messages,
    terms (token occurrences) and binary_terms (distinct tokens per message,
    summed)."""

    messages: IntArray
    terms: IntArray
    binary_terms: IntArray

    @classmethod
    def zeros(cls) -> ClassCounts:
        return cls(_pair(), _pair(), _pair())

    @classmethod
    def of_message(cls, label: Label, counts: dict[str, int], sign: int = 1) -> ClassCounts:
        """What training (sign +1) or untraining (-1) one message adds."""
        out = cls.zeros()
        out.messages[label] = sign
        out.terms[label] = sign * sum(counts.values())
        out.binary_terms[label] = sign * len(counts)
        return out

    def __add__(self, other: ClassCounts) -> ClassCounts:
        return ClassCounts(self.messages + other.messages, self.terms + other.terms, self.binary_terms + other.binary_terms)

    def __sub__(self, other: ClassCounts) -> ClassCounts:
        return ClassCounts(self.messages - other.messages, self.terms - other.terms, self.binary_terms - other.binary_terms)

    def __neg__(self) -> ClassCounts:
        return ClassCounts(-self.messages, -self.terms, -self.binary_terms)

    @classmethod
    def from_table(cls, table: npt.ArrayLike) -> ClassCounts:
        """From a (3, 2) table with rows messages, terms, binary_terms."""
        rows = np.asarray(table, dtype=np.int64)
        if rows.shape != (3, 2):
            raise ValueError(f"a class-count table needs shape (3, 2), not {rows.shape}")
        return cls(rows[0].copy(), rows[1].copy(), rows[2].copy())

    def table(self) -> IntArray:
        """The counts as a (3, 2) table, rows messages, terms, binary_terms,
        for reports that compare them field by field."""
        return np.stack([self.messages, self.terms, self.binary_terms])

    def any(self) -> bool:
        """Whether any count is non-zero."""
        return bool(self.messages.any() or self.terms.any() or self.binary_terms.any())

    def of_class(self, label: int) -> tuple[int, int, int]:
        """(messages, terms, binary_terms) of one class, as Python ints."""
        return int(self.messages[label]), int(self.terms[label]), int(self.binary_terms[label])


@dataclass(frozen=True, slots=True)
class TokenCounts:
    """Counts of m tokens (columns), each field shape (2, m): doc_count
    D[c,j] (messages containing token j) and term_count N[c,j] (its
    occurrences)."""

    doc_count: IntArray
    term_count: IntArray

    @classmethod
    def zeros(cls, m: int) -> TokenCounts:
        return cls(np.zeros((2, m), dtype=np.int64), np.zeros((2, m), dtype=np.int64))

    def __len__(self) -> int:
        return int(self.doc_count.shape[1])

    def __add__(self, other: TokenCounts) -> TokenCounts:
        return TokenCounts(self.doc_count + other.doc_count, self.term_count + other.term_count)

    def __sub__(self, other: TokenCounts) -> TokenCounts:
        return TokenCounts(self.doc_count - other.doc_count, self.term_count - other.term_count)

    def take(self, columns: npt.ArrayLike) -> TokenCounts:
        """The counts of the given columns (indices or a boolean mask), in that order."""
        index = np.asarray(columns)
        return TokenCounts(self.doc_count[:, index], self.term_count[:, index])

    def known(self) -> npt.NDArray[np.bool_]:
        """(m,) whether each token is in some message: D[0,j] + D[1,j] > 0."""
        result: npt.NDArray[np.bool_] = (self.doc_count[HAM] + self.doc_count[SPAM]) > 0
        return result

    def known_at(self, columns: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """``known()`` of the given columns only (a batch's, of a large cache)."""
        result: npt.NDArray[np.bool_] = (self.doc_count[HAM, columns] + self.doc_count[SPAM, columns]) > 0
        return result

    def any_negative(self) -> int | None:
        """The first column with a negative count, or None."""
        bad = np.flatnonzero((self.doc_count < 0).any(axis=0) | (self.term_count < 0).any(axis=0))
        return int(bad[0]) if bad.size else None

    def sums(self) -> ClassCounts:
        """Per class, the summed occurrences (terms) and presences
        (binary_terms) of these tokens; messages is 0."""
        return ClassCounts(_pair(), self.term_count.sum(axis=1), self.doc_count.sum(axis=1))


@dataclass(frozen=True, slots=True)
class Totals:
    """A whole model's aggregates, read once per scoring call.

    classes: the per-class ClassCounts D[c], N[c] and binary N[c].
    vocabulary_size: V, tokens with a non-zero message count in either class.
    histogram: per class c an (K_c, 2) array of rows (k, H[c,k]): how many
        vocabulary tokens occur in exactly k class-c messages (k = 0 included).
    """

    classes: ClassCounts
    vocabulary_size: int
    histogram: tuple[IntArray, IntArray]

    def changed(self, classes: ClassCounts, histogram: dict[tuple[int, int], int]) -> Totals:
        """These totals after a write that added ``classes`` to the class
        totals and ``histogram`` ((label, k) -> tokens) to the histogram, as
        the store did; the vocabulary size follows the histogram."""
        rows: list[IntArray] = []
        for label in (HAM, SPAM):
            buckets = dict(zip(self.histogram[label][:, 0].tolist(), self.histogram[label][:, 1].tolist()))
            for (c, k), n in histogram.items():
                if c == label:
                    buckets[k] = buckets.get(k, 0) + n
            kept = sorted((k, n) for k, n in buckets.items() if n != 0)
            rows.append(np.array(kept, dtype=np.int64).reshape(-1, 2))
        return Totals(self.classes + classes, int(rows[HAM][:, 1].sum()), (rows[HAM], rows[SPAM]))

    @property
    def messages(self) -> IntArray:
        """D[c], shape (2,)."""
        return self.classes.messages

    @property
    def terms(self) -> IntArray:
        """N[c] of the ``multinomial`` model, shape (2,)."""
        return self.classes.terms

    @property
    def binary_terms(self) -> IntArray:
        """N[c] of the ``multinomial-binary`` model, shape (2,)."""
        return self.classes.binary_terms


@dataclass(frozen=True, slots=True)
class FeatureStats:
    """Per-class sufficient statistics of the F continuous message features,
    each field (2, F) of integers: n[c, i] messages, total[c, i] = sum of
    the fixed-point values x, total_sq[c, i] = sum of x * x. Integer sums
    add and subtract exactly, so untraining restores them bit for bit."""

    n: IntArray
    total: IntArray
    total_sq: IntArray

    @classmethod
    def zeros(cls, f: int) -> FeatureStats:
        return cls(*(np.zeros((2, f), dtype=np.int64) for _ in range(3)))

    @classmethod
    def of_message(cls, label: int, features: tuple[int, ...], sign: int = 1) -> FeatureStats:
        """What training (sign +1) or untraining (-1) one message's vector adds."""
        out = cls.zeros(len(features))
        x = np.asarray(features, dtype=np.int64)
        out.n[label] = sign
        out.total[label] = sign * x
        out.total_sq[label] = sign * x * x
        return out

    def __add__(self, other: FeatureStats) -> FeatureStats:
        return FeatureStats(self.n + other.n, self.total + other.total, self.total_sq + other.total_sq)

    def __sub__(self, other: FeatureStats) -> FeatureStats:
        return FeatureStats(self.n - other.n, self.total - other.total, self.total_sq - other.total_sq)

    def any(self) -> bool:
        """Whether any statistic is non-zero."""
        return bool(self.n.any() or self.total.any() or self.total_sq.any())


def histogram_delta(old: TokenCounts, new: TokenCounts) -> dict[tuple[int, int], int]:
    """How the (label, doc_count) -> tokens histogram changes when the
    tokens' counts go from ``old`` to ``new``: each token leaves the bucket
    of its old message count and joins the one of its new count, in each
    class, as long as it is in the vocabulary (in some message) at all."""
    delta: dict[tuple[int, int], int] = {}
    for counts, sign in ((old, -1), (new, 1)):
        in_vocabulary = counts.known()
        for label in (HAM, SPAM):
            # A token whose count did not change adds -1 and +1 to the same
            # bucket; the caller drops the zeros.
            uniq, n = np.unique(counts.doc_count[label][in_vocabulary], return_counts=True)
            for k, c in zip(uniq.tolist(), n.tolist()):
                delta[(int(label), k)] = delta.get((int(label), k), 0) + sign * c
    return delta
