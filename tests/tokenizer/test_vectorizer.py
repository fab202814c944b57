"""Vectorizer: vocabulary order and growth, exact document-term matrices."""

from __future__ import annotations

from collections import Counter

import numpy as np
import scipy.sparse as sp

from spamfilter.counts import TokenCounts
from spamfilter.vectorizer import Vocabulary, batch_vocabulary, count_matrix, indexed_matrix, term_counts, unseen_counts


def test_vocabulary_numbers_tokens_in_first_seen_order_without_repeats() -> None:
    vocabulary = Vocabulary(["free", "money", "free", "now"])
    assert vocabulary.tokens == ["free", "money", "now"]
    assert vocabulary.index == {"free": 0, "money": 1, "now": 2}
    assert len(vocabulary) == 3


def test_vocabulary_add_returns_existing_column_or_appends() -> None:
    vocabulary = Vocabulary(["free", "money"])
    assert vocabulary.add("money") == 1
    assert len(vocabulary) == 2
    assert vocabulary.add("meeting") == 2
    assert vocabulary.tokens == ["free", "money", "meeting"]
    assert vocabulary.index["meeting"] == 2


def test_vocabulary_membership() -> None:
    vocabulary = Vocabulary(["subject:free"])
    assert "subject:free" in vocabulary
    assert "free" not in vocabulary
    assert 3 not in vocabulary


def test_empty_vocabulary() -> None:
    vocabulary = Vocabulary()
    assert len(vocabulary) == 0
    assert vocabulary.tokens == []


def test_term_counts_counts_each_distinct_token() -> None:
    assert term_counts(["free", "money", "free", "free"]) == {"free": 3, "money": 1}
    assert term_counts([]) == {}


def test_batch_vocabulary_is_union_in_first_seen_order() -> None:
    docs = [{"free": 2, "money": 1}, {}, {"meeting": 1, "free": 4}]
    assert batch_vocabulary(docs).tokens == ["free", "money", "meeting"]


DOCS = [{"free": 2, "money": 1}, {}, {"meeting": 1, "free": 1, "not-in-vocabulary": 5}, {"money": 3, "meeting": 2}]
VOCABULARY = Vocabulary(["free", "money", "meeting"])


def test_count_matrix_holds_the_counts() -> None:
    X = count_matrix(DOCS, VOCABULARY)
    assert X.shape == (4, 3)
    np.testing.assert_array_equal(X.toarray(), [[2, 1, 0], [0, 0, 0], [1, 0, 1], [0, 3, 2]])


def test_binary_count_matrix_holds_presence() -> None:
    X = count_matrix(DOCS, VOCABULARY, binary=True)
    np.testing.assert_array_equal(X.toarray(), [[1, 1, 0], [0, 0, 0], [1, 0, 1], [0, 1, 1]])


def test_tokens_outside_the_vocabulary_are_dropped() -> None:
    X = count_matrix([{"not-in-vocabulary": 5, "other": 1}], VOCABULARY)
    assert X.nnz == 0
    assert X.shape == (1, 3)


def test_empty_document_gives_an_all_zero_row() -> None:
    X = count_matrix([{}], VOCABULARY)
    np.testing.assert_array_equal(X.toarray(), [[0, 0, 0]])


def test_count_matrix_is_float_csr_with_one_row_per_document() -> None:
    X = count_matrix(DOCS, VOCABULARY)
    assert isinstance(X, sp.csr_matrix)
    assert X.dtype == np.float64
    assert X.nnz == 6
    np.testing.assert_array_equal(X.indptr, [0, 2, 2, 4, 6])


def test_row_does_not_depend_on_token_order_in_the_document() -> None:
    a = count_matrix([{"free": 2, "money": 1}], VOCABULARY).toarray()
    b = count_matrix([{"money": 1, "free": 2}], VOCABULARY).toarray()
    np.testing.assert_array_equal(a, b)


def test_no_documents_give_zero_rows() -> None:
    assert count_matrix([], VOCABULARY).shape == (0, 3)


def test_empty_vocabulary_gives_zero_columns() -> None:
    X = count_matrix([{"free": 1}, {}], Vocabulary())
    assert X.shape == (2, 0)
    assert X.nnz == 0


def test_tokens_to_matrix_end_to_end() -> None:
    messages = [["free", "money", "free"], ["meeting", "at", "noon"], ["free", "meeting"]]
    docs = [term_counts(tokens) for tokens in messages]
    vocabulary = batch_vocabulary(docs)
    assert vocabulary.tokens == ["free", "money", "meeting", "at", "noon"]
    np.testing.assert_array_equal(count_matrix(docs, vocabulary).toarray(), [[2, 1, 0, 0, 0], [0, 0, 1, 1, 1], [1, 0, 1, 0, 0]])


def test_count_matrix_accepts_counters() -> None:
    X = count_matrix([Counter(["free", "free", "money"])], VOCABULARY)
    np.testing.assert_array_equal(X.toarray(), [[2, 1, 0]])


def test_indexed_matrix_and_unseen_counts_keep_only_what_keep_allows() -> None:
    # The count cache's ids; "b" and "hd:x" are rows whose counts went to
    # zero (an untrained message): dropped from X, counted as unseen.
    index = {"a": 0, "b": 1, "c": 2, "hd:x": 3, "hd:y": 4}
    counts = TokenCounts(np.array([[1, 0, 0, 0, 2], [0, 0, 3, 0, 0]]), np.array([[1, 0, 0, 0, 2], [0, 0, 4, 0, 0]]))
    docs = [{"c": 2, "b": 1, "a": 3, "new": 5}, {"hd:x": 1, "hd:y": 1, "hd:new": 2}, {}]
    X, ids = indexed_matrix(docs, index, counts.known_at)
    assert ids.tolist() == [0, 2, 4]
    assert X.shape == (3, 3)
    assert X.toarray().tolist() == [[3.0, 2.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    assert X.indices[: X.indptr[1]].tolist() == [1, 0]  # the message's own order: c, then a
    binary, _ = indexed_matrix(docs, index, counts.known_at, binary=True)
    assert binary.toarray().tolist() == [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    unseen = unseen_counts(docs, index, counts.known_at, lambda t: t.startswith("hd:"))
    assert unseen.tolist() == [[1.0 + 5.0, 0.0], [0.0, 1.0 + 2.0], [0.0, 0.0]]
    assert unseen_counts(docs, index, counts.known_at, lambda t: t.startswith("hd:"), binary=True).tolist() == [[2.0, 0.0], [0.0, 2.0], [0.0, 0.0]]
    assert counts.known_at(np.array([], dtype=np.int64)).tolist() == []
