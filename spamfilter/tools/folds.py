"""How ``tune`` cuts a labelled stream: read once, then time-ordered
folds, each a training head of every message before a held-out block, with
the counts, totals, feature densities and one-dependence counts the store
would hold after training that head (``time_ordered_folds``, ``head_pairs``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from spamfilter.analysis import Analysed, Analyser, analyse_labelled
from spamfilter.answers import Refusal
from spamfilter.config import Config, ModelConfig
from spamfilter.counts import FeatureStats, IntArray
from spamfilter.errors import EvaluationError
from spamfilter.filter import dependence
from spamfilter.mail import MailItem
from spamfilter.nb import aode
from spamfilter.nb import model as nb
from spamfilter.nb.gaussian import GaussianParams, gaussian_estimate
from spamfilter.nb.memcounts import MemoryCounts
from spamfilter.tokenizer import is_header_line
from spamfilter.tokenizer.features import SCALE
from spamfilter.tools.evaluation import BoolArray, FloatArray
from spamfilter.vectorizer import Vocabulary, count_matrix, unseen_counts
from spamfilter.verdicts import HAM, SPAM

Reading = Callable[[Iterable[tuple[bool, MailItem]]], Iterable[tuple[bool, MailItem]]]


@dataclass(frozen=True, slots=True)
class Fold:
    """The stream cut in two: the counts the store would hold after training
    the head, the head's 0/1 matrix (n_head, V) over its tokens, and the
    held-out tail's labels and matrices (n_valid, V); the Gaussian feature
    densities of the head and the tail's feature vectors (n_valid, F)."""

    counts: nb.TokenCounts
    stats: nb.Totals
    tokens: list[str]
    head_y: BoolArray
    head_binary: sp.csr_matrix
    valid_y: BoolArray
    valid_terms: sp.csr_matrix
    valid_binary: sp.csr_matrix
    gaussian: GaussianParams
    valid_features: FloatArray
    #: Which tokens are header lines, with ``[model] header_apart``; else None.
    header: npt.NDArray[np.bool_] | None = None
    #: The tail's tokens the head never had (``scorer.Evidence.unseen``),
    #: as occurrences and as 0/1, each (n_valid, 2).
    valid_unseen_terms: FloatArray | None = None
    valid_unseen_binary: FloatArray | None = None


def time_ordered_folds(
    config: Config,
    labelled: Sequence[tuple[bool, MailItem]],
    holdout: float,
    folds: int,
    jobs: int,
    reading: Reading | None,
    *,
    unseen: bool = False,
    refused: list[Refusal] | None = None,
) -> list[Fold]:
    """Read the stream once and cut it into ``folds`` time-ordered
    validation blocks that together hold its last ``holdout`` share, each
    with the training head of every message before it (forward chaining:
    each block is later mail to the model that scores it). The heads need
    spam and ham, and so do the blocks together. With ``unseen`` each block
    also counts its tokens its head never had (``Fold.valid_unseen_terms``),
    for settings with ``[model] unseen_weight``. A message that does not
    read as mail is left out, and added to ``refused``."""
    docs, labels, vectors = _read(config, labelled, jobs, reading, refused)
    y = np.array(labels, dtype=bool)
    n_valid = max(1, int(round(len(docs) * holdout)))
    start = len(docs) - n_valid
    bounds = sorted({start + round(i * n_valid / folds) for i in range(folds + 1)})
    valid_y = y[start:]
    if not (y[:start].any() and (~y[:start]).any() and valid_y.any() and (~valid_y).any()):
        raise EvaluationError("to tune, both the training head and the held-out tail of the index need spam and ham")
    features = np.array(vectors, dtype=np.int64).reshape(len(vectors), -1)
    return [_fold(config, docs, y, features, a, b, unseen) for a, b in zip(bounds[:-1], bounds[1:])]


def _fold(config: Config, docs: Sequence[dict[str, int]], y: BoolArray, features: IntArray, split: int, stop: int, unseen: bool = False) -> Fold:
    """Messages [0, split) as the training head, [split, stop) held out
    (with ``unseen``, the tail's unseen tokens counted)."""
    train_y, valid_y = y[:split], y[split:stop]
    vocabulary = Vocabulary(t for d in docs[:split] for t in d)
    head_binary = count_matrix(docs[:split], vocabulary, binary=True)
    # The counts the store would hold after training the head.
    trained = MemoryCounts.of(head_binary, count_matrix(docs[:split], vocabulary), train_y)
    return Fold(
        nb.TokenCounts(doc_count=trained.doc, term_count=trained.term),
        trained.totals(),
        vocabulary.tokens,
        train_y,
        head_binary,
        valid_y,
        count_matrix(docs[split:stop], vocabulary),
        count_matrix(docs[split:stop], vocabulary, binary=True),
        gaussian_estimate(_feature_stats(features[:split], train_y), SCALE),
        features[split:stop] / SCALE,
        np.fromiter(map(is_header_line, vocabulary.tokens), dtype=bool, count=len(vocabulary.tokens)) if config.model.header_apart else None,
        *(_unseen(docs[split:stop], vocabulary) if unseen else (None, None)),
    )


def _unseen(docs: Sequence[dict[str, int]], vocabulary: Vocabulary) -> tuple[FloatArray, FloatArray]:
    """The token events of each doc that ``vocabulary`` lacks, of its body
    and of its header lines (``vectorizer.unseen_counts``, as the filter
    counts them): as occurrences, and as 0/1."""

    def every(ids: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        return np.ones(ids.size, dtype=bool)

    terms = unseen_counts(docs, vocabulary.index, every, is_header_line)
    return terms, unseen_counts(docs, vocabulary.index, every, is_header_line, binary=True)


def _read(
    config: Config, labelled: Sequence[tuple[bool, MailItem]], jobs: int, reading: Reading | None, refused: list[Refusal] | None = None
) -> tuple[list[dict[str, int]], list[bool], list[tuple[int, ...]]]:
    """The token counts, labels and feature vectors of the messages that
    read as mail, read on ``jobs`` processes through ``reading``."""
    stream = reading(labelled) if reading is not None else labelled
    docs: list[dict[str, int]] = []
    labels: list[bool] = []
    vectors: list[tuple[int, ...]] = []
    analyser = Analyser(config.tokenizer, config.tokenizer.max_bytes)
    for is_spam, result in analyse_labelled(analyser, stream, jobs):
        if isinstance(result, Analysed):
            docs.append(result.counts)
            labels.append(is_spam)
            vectors.append(result.features)
        elif refused is not None:
            refused.append(result)
    return docs, labels, vectors


def _feature_stats(features: IntArray, is_spam: BoolArray) -> FeatureStats:
    """The per-class sums the store keeps after training messages with these
    fixed-point feature vectors (n, F): the sum of ``FeatureStats.of_message``."""
    rows = (~is_spam, is_spam)
    count = np.stack([np.full(features.shape[1], int(r.sum())) for r in rows]).astype(np.int64)
    total = np.stack([features[r].sum(axis=0) for r in rows]).astype(np.int64)
    total_sq = np.stack([(features[r] * features[r]).sum(axis=0) for r in rows]).astype(np.int64)
    return FeatureStats(count, total, total_sq)


def head_pairs(s: Fold, m: ModelConfig) -> aode.PairCounts:
    """The one-dependence counts after training the head and
    ``dependence.reselect`` for ``m``: parents and children chosen as it
    chooses them (``dependence.chosen_tokens``; SPODE's parent on the head's
    held-out fifth). With Xp the parents' columns of the head's 0/1 rows X
    of class c, D[c,p] = column sums of Xp, N[c,p] = Xp.T @ (distinct tokens
    per message), D[c,p,j] = (Xp.T @ X)[p,j] for child j (0 for the others)."""
    column = {t: j for j, t in enumerate(s.tokens)}

    def spode_parent(candidates: list[str], children: set[str]) -> str:
        child = np.array([t in children or t in candidates for t in s.tokens], dtype=bool)
        best = aode.spode_parent(s.head_binary, s.head_y, [column[t] for t in candidates], child, m.alpha, m.tempering, m.aode_min_support)
        return s.tokens[best]

    chosen, kids = dependence.chosen_tokens(s.tokens, s.counts.doc_count, s.stats.classes.messages, m, spode_parent)
    parent_column: IntArray = np.array([column[t] for t in chosen], dtype=np.int64)
    child = np.zeros(len(s.tokens), dtype=bool)
    child[[column[t] for t in kids]] = True
    lengths = np.asarray(s.head_binary.sum(axis=1)).ravel()
    docs = np.zeros((2, len(chosen)), dtype=np.int64)
    terms = np.zeros((2, len(chosen)), dtype=np.int64)
    pairs = []
    for c, rows in ((HAM, ~s.head_y), (SPAM, s.head_y)):
        X = s.head_binary[rows]
        held = sp.csr_matrix(X[:, parent_column])
        docs[c] = np.rint(np.asarray(held.sum(axis=0)).ravel())
        terms[c] = np.rint(held.T @ lengths[rows])
        pairs.append(sp.csr_matrix(held.T @ X @ sp.diags(child.astype(np.float64))))
    return aode.PairCounts(docs, terms, (pairs[HAM], pairs[SPAM]), parent_column, child)
