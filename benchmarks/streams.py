"""The shared corpora as cached token matrices, scored with the library's counts and scorer.

Each stream (benchmarks/long_stream.py's STREAMS) is parsed and tokenized
once with the configured tokenizer and cached in results/tokens-<tag>.pickle;
``Corpus`` turns it into two sparse matrices over its own vocabulary, and
``split_scores`` / ``online_scores`` score it with the library's in-memory
counts (`memcounts.MemoryCounts`) and its one scorer (`scorer.Scorer`), so
every benchmark here runs the filter's own arithmetic: the online scores
equal `evaluation.run_online`'s (benchmarks/forgetting.py --check). As the
filter does, a message is trained once however many copies of it (by its
digest) a stream holds: before 2026-11-29 every copy was, and the Enron
streams hold about 3,000 repeated messages.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.long_stream import STREAMS, stream
from spamfilter.config import ONLINE_TRAIN_MODE, TUNE_MARGIN, Config, ModelConfig, TrainMode, counts_occurrences
from spamfilter.errors import MailParseError
from spamfilter.mail import parse_message
from spamfilter.nb import decision
from spamfilter.nb.learning import wants_training
from spamfilter.nb.memcounts import MemoryCounts
from spamfilter.nb.scorer import Scorer
from spamfilter.tokenizer import Tokenizer, is_header_line
from spamfilter.vectorizer import batch_vocabulary, count_matrix, term_counts
from spamfilter.verdicts import Decision, Label

Doc = dict[str, int]


def tokenized(config: Config, name: str, limit: int | None) -> tuple[list[Doc], np.ndarray, list[str]]:
    """The stream's messages as token counts (unreadable ones left out),
    labels and digests (the filter's identity of a message), cached (a
    concatenated stream from its parts' caches)."""
    if len(STREAMS[name]) > 1 and limit is None:
        parts = [tokenized(config, part, None) for part in STREAMS[name]]
        return [d for docs, _, _ in parts for d in docs], np.concatenate([y for _, y, _ in parts]), [g for _, _, ds in parts for g in ds]
    tag = f"{name}-{limit or 'all'}-{hashlib.sha1(repr(config.tokenizer).encode()).hexdigest()[:8]}-v3"
    cache = Path("results") / f"tokens-{tag}.pickle"
    cache.parent.mkdir(exist_ok=True)
    if cache.exists():
        docs, labels, digests = pickle.loads(cache.read_bytes())
        return docs, np.array(labels, dtype=bool), digests
    tokenizer = Tokenizer(config.tokenizer)
    docs, labels, digests = [], [], []
    for is_spam, item in stream(name, limit):
        try:
            docs.append(term_counts(tokenizer.tokenize(parse_message(item, max_bytes=config.tokenizer.max_bytes))))
        except MailParseError:
            continue
        labels.append(bool(is_spam))
        digests.append(item.digest)
    cache.write_bytes(pickle.dumps((docs, labels, digests)))
    return docs, np.array(labels, dtype=bool), digests


class Corpus:
    """One stream's tokens as two sparse matrices over its own vocabulary."""

    def __init__(self, config: Config, name: str) -> None:
        self.load(*tokenized(config, name, None))

    @classmethod
    def of_docs(cls, docs: list[dict[str, int]], y: np.ndarray, digests: list[str]) -> Corpus:
        """A corpus of these token counts, labels and digests."""
        c = cls.__new__(cls)
        c.load(docs, y, digests)
        return c

    def load(self, docs: list[dict[str, int]], y: np.ndarray, digests: list[str]) -> None:
        self.y = y
        #: Each message's digest as a small integer (equal for copies).
        self.identity = np.unique(np.array(digests), return_inverse=True)[1] if digests else np.zeros(0, dtype=np.int64)
        vocabulary = batch_vocabulary(docs)
        self.terms = count_matrix(docs, vocabulary)
        self.binary = count_matrix(docs, vocabulary, binary=True)
        self.tokens = vocabulary.tokens
        self.header = np.fromiter(map(is_header_line, self.tokens), dtype=bool, count=len(self.tokens))

    def X(self, m: ModelConfig) -> sp.csr_matrix:
        return self.terms if counts_occurrences(m.event_model) else self.binary


def learned_counts(c: Corpus, rows: np.ndarray) -> MemoryCounts:
    """The counts of learning ``rows`` (indices, in order, or a boolean
    mask), each message once: its first copy, as `train` learns it."""
    rows = np.flatnonzero(rows) if rows.dtype == bool else np.asarray(rows)
    first = rows[np.sort(np.unique(c.identity[rows], return_index=True)[1])]
    return MemoryCounts.of(c.binary[first], c.terms[first], c.y[first])


def split_scores(c: Corpus, m: ModelConfig, head: int | None = None, stop: int | None = None, *, trained: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Train on messages [0, head) (default: the first half; ``trained``:
    these rows instead), score [head, stop) (default: to the end):
    (log-odds, labels)."""
    head = c.y.size // 2 if head is None else head
    rows = np.arange(head) if trained is None else trained
    counts = learned_counts(c, rows)
    evidence = counts.evidence(c.X(m)[head:stop], c.header, histogram=m.event_model == "bernoulli", unseen=m.unseen_weight > 0)
    return Scorer(m).log_odds(evidence), c.y[head:stop]


def online_scores(
    c: Corpus, m: ModelConfig, thresholds: decision.Thresholds, mode: TrainMode = ONLINE_TRAIN_MODE, margin: float = TUNE_MARGIN
) -> tuple[np.ndarray, np.ndarray]:
    """Score each message with the counts of those learned before it, then
    learn it if the library's online rule (``mode``, ``margin``) says so:
    (log-odds, which messages were trained). Before both classes are known
    a message scores 0 and is unsure, as in ``Filter.learn_online``; a copy
    of a message learned before is scored (by counts that hold it) and not
    learned again."""
    n, V = c.binary.shape
    learned: set[int] = set()
    counts = MemoryCounts(V)
    scorer = Scorer(m)
    out = np.zeros(n)
    trained = np.zeros(n, dtype=bool)
    Xm = c.X(m)
    for i in range(n):
        lo, hi = c.binary.indptr[i], c.binary.indptr[i + 1]
        label = Label.of(bool(c.y[i]))
        verdict = Decision.UNSURE
        if counts.messages.all():
            out[i] = float(scorer.log_odds(counts.evidence(Xm[i], c.header, histogram=m.event_model == "bernoulli", unseen=m.unseen_weight > 0))[0])
            verdict = Decision.of_code(int(decision.decide(out[i : i + 1], thresholds)[0]))
        if int(c.identity[i]) not in learned and wants_training(mode, label, verdict, out[i], thresholds.ham_max, thresholds.spam_min, margin):
            counts.add(c.binary.indices[lo:hi], c.terms.data[lo:hi], int(label))
            trained[i] = True
            learned.add(int(c.identity[i]))
    return out, trained
