"""An in-memory copy of the token counts a long run has needed so far.

Classifying a mailbox asks the store, batch after batch, for the counts of
the batch's tokens; most of them were asked for before (the common words,
the header tokens of the same senders). ``CountCache`` keeps the counts of
every token the model knows once read, together with the model's totals, all valid for one *key*: the owners whose counts make up the
model and each one's model version (``StoreTransaction.versions``). Every
transaction that changes an owner's counts increases its version, so while
the key stays the same the copy is exactly what the store holds; when it
changes the copy is dropped. A run's own training updates the copy from the
new counts the store returns (``apply``), so ``evaluate`` keeps it too.

The cache is an object owned by the ``Filter`` that opened the store, never
a module global. It holds no I/O: ``scoring`` reads the store and hands the
counts over.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from spamfilter.counts import TokenCounts, Totals
from spamfilter.tokenizer import is_header_line

ArrayT = TypeVar("ArrayT", np.int64, np.bool_)

#: Which model a copy belongs to: the owners whose counts are added up, each
#: owner's model version, and which of them the totals were read for.
CacheKey = tuple[tuple[str, ...], tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class ModelView:
    """What the cache holds for one key besides the token rows: the totals of
    the model that classifies, and whose token counts make it up (the user's,
    the shared model's, or both added)."""

    totals: Totals
    owners: tuple[str, ...]


class CountCache:
    """Token -> row of counts, for one model key (see the module docstring).

    index: token -> row; tokens: the token of each row; ``header()`` whether
    each row's token is of a header line (``tokenizer.is_header_line``),
    worked out once a token instead of for every message that has it.

    ``max_tokens`` bounds the memory: past it the copy starts afresh (a
    resident process meeting new tokens for ever must not grow for ever).
    About 100 bytes a token: the 2,000,000 default is ~200 MB.
    """

    def __init__(self, max_tokens: int = 2_000_000) -> None:
        self.max_tokens = max_tokens
        self.key: CacheKey | None = None
        self.view: ModelView | None = None
        self.index: dict[str, int] = {}
        self.tokens: list[str] = []
        self._doc = np.zeros((2, 0), dtype=np.int64)
        self._term = np.zeros((2, 0), dtype=np.int64)
        self._header = np.zeros(0, dtype=bool)

    def __len__(self) -> int:
        return len(self.index)

    def valid_for(self, key: CacheKey) -> bool:
        """Whether the copy is of the model with this key."""
        return self.key == key and self.view is not None

    def reset(self, key: CacheKey, view: ModelView) -> None:
        """Start a new copy for ``key``: no token rows yet."""
        self.key, self.view = key, view
        self.index = {}
        self.tokens = []
        self._doc = np.zeros((2, 1024), dtype=np.int64)
        self._term = np.zeros((2, 1024), dtype=np.int64)
        self._header = np.zeros(1024, dtype=bool)

    def make_room(self, docs: Sequence[Iterable[str]]) -> list[str]:
        """The tokens of ``docs`` to read from the store, after starting the
        copy afresh if holding them would pass ``max_tokens`` (then every
        token of the batch is to be read: dropping rows under a batch that
        is about to use them would score it without them)."""
        missing = self.missing(docs)
        if len(self.index) + len(missing) > self.max_tokens and self.key is not None and self.view is not None:
            self.reset(self.key, self.view)
            missing = self.missing(docs)
        return missing

    def missing(self, docs: Iterable[Iterable[str]]) -> list[str]:
        """The tokens of ``docs`` the copy has no row for, each once."""
        seen: set[str] = set()
        for doc in docs:
            seen.update(doc)
        # difference(), not difference_update(): it walks the batch's tokens
        # and looks each up in the index, where difference_update walked the
        # whole index (1.7 of 6.9 s of an online run of 600 messages).
        return list(seen.difference(self.index))

    def add(self, token_list: Sequence[str], counts: TokenCounts) -> None:
        """Rows for tokens not held yet (their counts at the current key).

        Only tokens the model knows (in some trained message) are kept: on
        3,000 spamassassin messages three quarters of the distinct tokens
        were unknown (327,000 of them, 87,000 known), and holding them too
        took the peak memory of that classify run from 154 to 187 MB, while asking for an
        unknown token again costs one more row in a batch's query."""
        known = counts.known()
        if not known.all():
            columns = np.flatnonzero(known)
            token_list = [token_list[int(j)] for j in columns]
            counts = counts.take(columns)
        start = len(self.index)
        end = start + len(token_list)
        if end > self._doc.shape[1]:
            size = max(end, 2 * self._doc.shape[1])
            self._doc = _grown(self._doc, size)
            self._term = _grown(self._term, size)
            self._header = _grown(self._header, size)
        self._doc[:, start:end] = counts.doc_count
        self._term[:, start:end] = counts.term_count
        self._header[start:end] = np.fromiter(map(is_header_line, token_list), dtype=bool, count=len(token_list))
        self.index.update(zip(token_list, range(start, end)))
        self.tokens.extend(token_list)

    def rows(self) -> TokenCounts:
        """Every row held, (2, len(self)), in row order (views, not copies)."""
        n = len(self.index)
        return TokenCounts(self._doc[:, :n], self._term[:, :n])

    def header(self) -> npt.NDArray[np.bool_]:
        """Whether each row's token is of a header line, (len(self),) (a view)."""
        return self._header[: len(self.index)]

    def clear(self) -> None:
        """Drop the copy."""
        self.key = self.view = None
        self.index, self.tokens = {}, []

    def apply(self, key_before: CacheKey, key_after: CacheKey, token_list: Sequence[str], new: TokenCounts, view: ModelView) -> None:
        """After a committed write that moved the model from ``key_before``
        to ``key_after``: keep the copy if it was of ``key_before`` (the
        written tokens get their new counts, the totals are replaced), else
        drop it."""
        if not self.valid_for(key_before):
            self.clear()
            return
        self.key, self.view = key_after, view
        index = self.index
        fresh = [j for j, t in enumerate(token_list) if t not in index]
        held = [j for j, t in enumerate(token_list) if t in index]
        if held:
            rows = np.fromiter((index[token_list[j]] for j in held), dtype=np.int64, count=len(held))
            self._doc[:, rows] = new.doc_count[:, held]
            self._term[:, rows] = new.term_count[:, held]
        if fresh:
            if len(self.index) + len(fresh) > self.max_tokens:
                self.clear()  # read afresh by the next batch
                return
            self.add([token_list[j] for j in fresh], new.take(fresh))


def _grown(array: npt.NDArray[ArrayT], size: int) -> npt.NDArray[ArrayT]:
    """``array`` with its last axis zero-padded to ``size`` rows (a copy)."""
    out = np.zeros((*array.shape[:-1], size), dtype=array.dtype)
    out[..., : array.shape[-1]] = array
    return out
