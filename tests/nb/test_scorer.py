"""The one scorer over in-memory counts gives the filter's own log-odds."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from spamfilter.answers import Verdict
from spamfilter.config import Config, ModelConfig
from spamfilter.filter import Filter
from spamfilter.mail import read_index
from spamfilter.nb.memcounts import MemoryCounts
from spamfilter.nb.scorer import Scorer
from spamfilter.tokenizer import is_header_line
from spamfilter.vectorizer import batch_vocabulary, count_matrix
from tests.tools.test_evaluate import index  # noqa: F401  (the sample index fixture)


def matrices(f: Filter, stream: list) -> tuple[sp.csr_matrix, sp.csr_matrix, np.ndarray, list[str]]:
    """The stream's messages as 0/1 and occurrence rows over one vocabulary."""
    docs = [f.analyser.one(item).counts for _, item in stream]  # type: ignore[union-attr]
    vocabulary = batch_vocabulary(docs)
    terms = count_matrix(docs, vocabulary)
    return count_matrix(docs, vocabulary, binary=True), terms, np.array([s for s, _ in stream]), vocabulary.tokens


@pytest.mark.parametrize(
    "model",
    [
        ModelConfig(),
        ModelConfig(event_model="bernoulli", header_apart=False),
        ModelConfig(event_model="multinomial", max_tokens=7),
        ModelConfig(unseen_weight=0.5),
        ModelConfig(event_model="multinomial", header_apart=False, unseen_weight=1.0),
        ModelConfig(event_model="bernoulli", unseen_weight=0.5),
    ],
)
def test_memory_counts_and_the_scorer_give_the_filters_log_odds(index: Path, model: ModelConfig) -> None:  # noqa: F811
    stream = list(read_index(str(index)))
    config = Config(model=model)
    with Filter.open(config, "sqlite://") as f:
        f.train(stream[:40])
        verdicts = [v for v in f.classify(item for _, item in stream[40:])]
        binary, terms, y, tokens = matrices(f, stream)
    want = np.array([v.log_odds for v in verdicts if isinstance(v, Verdict)])
    counts = MemoryCounts.of(binary[:40], terms[:40], y[:40])
    header = np.array([is_header_line(t) for t in tokens])
    X = (terms if model.event_model == "multinomial" else binary)[40:]
    got = Scorer(model).log_odds(counts.evidence(X, header, unseen=model.unseen_weight > 0))
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    if model.unseen_weight:
        # the weight is at work: the same counts score otherwise without it
        plain = Scorer(replace(model, unseen_weight=0.0)).log_odds(counts.evidence(X, header))
        assert np.abs(got - plain).max() > 1e-3


def test_memory_counts_grown_one_message_at_a_time_equal_the_bulk_counts(index: Path) -> None:  # noqa: F811
    stream = list(read_index(str(index)))
    with Filter.open(Config(), "sqlite://") as f:
        binary, terms, y, _ = matrices(f, stream)
    bulk = MemoryCounts.of(binary, terms, y)
    grown = MemoryCounts(binary.shape[1])
    for i in range(binary.shape[0]):
        lo, hi = binary.indptr[i], binary.indptr[i + 1]
        grown.add(binary.indices[lo:hi], terms.data[lo:hi], int(y[i]))
    assert (grown.doc == bulk.doc).all() and (grown.term == bulk.term).all()
    a, b = grown.totals(), bulk.totals()
    assert (a.classes.messages == b.classes.messages).all() and (a.classes.terms == b.classes.terms).all()
    assert a.vocabulary_size == b.vocabulary_size == binary.shape[1]
    assert all((ha == hb).all() for ha, hb in zip(a.histogram, b.histogram))


@pytest.mark.parametrize("model", [ModelConfig(event_model="multinomial", max_tokens=7), ModelConfig(max_tokens=7), ModelConfig(event_model="multinomial")])
def test_memory_counts_keep_the_message_order_that_breaks_ties_between_equal_tokens(sample: Path, model: ModelConfig) -> None:
    # The sample mail has tokens of equal strength; max_tokens keeps the one
    # that comes first in the message, so the rows must keep that order.
    from spamfilter.mail.sources import read_messages

    spam = list(read_messages([str(sample / "train-spam.mbox")]))
    ham = list(read_messages([str(sample / "train-ham.mbox")]))
    inbox = list(read_messages([str(sample / "inbox.mbox")]))
    labelled = [(True, m) for m in spam] + [(False, m) for m in ham]
    with Filter.open(Config(model=model), "sqlite://") as f:
        f.train(labelled)
        want = np.array([v.log_odds for v in f.classify(inbox) if isinstance(v, Verdict)])
        binary, terms, y, tokens = matrices(f, [*labelled, *((False, m) for m in inbox)])
    n = len(labelled)
    counts = MemoryCounts.of(binary[:n], terms[:n], y[:n])
    header = np.array([is_header_line(t) for t in tokens])
    X = (terms if model.event_model == "multinomial" else binary)[n:]
    got = Scorer(model).log_odds(counts.evidence(X, header))
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
