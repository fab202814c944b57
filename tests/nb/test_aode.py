"""The one-dependence maths (``spamfilter.nb.aode``) against hand computation and a loop."""

from __future__ import annotations

import math
from fractions import Fraction as F

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import logsumexp

from spamfilter.counts import ClassCounts
from spamfilter.nb import aode

# Four training messages over the tokens a, b, c (0, 1, 2):
TRAIN = [({0, 1}, 0), ({1, 2}, 0), ({0, 2}, 1), ({0, 1, 2}, 1)]


def counts(train: list[tuple[set[int], int]], parents: list[int], v: int) -> dict[str, np.ndarray]:
    """D[c], N[c] (distinct tokens), D[c,j], D[c,p], N[c,p] and D[c,p,j], by loops."""
    out = {
        "D": np.zeros(2, dtype=np.int64),
        "N": np.zeros(2, dtype=np.int64),
        "Dj": np.zeros((2, v), dtype=np.int64),
        "Dp": np.zeros((2, len(parents)), dtype=np.int64),
        "Np": np.zeros((2, len(parents)), dtype=np.int64),
        "Dpj": np.zeros((2, len(parents), v), dtype=np.int64),
    }
    for x, c in train:
        out["D"][c] += 1
        out["N"][c] += len(x)
        for j in x:
            out["Dj"][c, j] += 1
        for i, p in enumerate(parents):
            if p in x:
                out["Dp"][c, i] += 1
                out["Np"][c, i] += len(x)
                for j in x:
                    out["Dpj"][c, i, j] += 1
    return out


def vectorised(
    train: list[tuple[set[int], int]], parents: list[int], tests: list[set[int]], v: int, alpha: float, tempering: float, min_support: int, child: set[int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    k = counts(train, parents, v)
    cols = sorted(set().union(*tests))
    X = sp.csr_matrix(np.array([[1.0 if j in x else 0.0 for j in cols] for x in tests]))
    pairs = aode.PairCounts(
        k["Dp"],
        k["Np"],
        (sp.csr_matrix(k["Dpj"][0][:, cols]), sp.csr_matrix(k["Dpj"][1][:, cols])),
        np.array([cols.index(p) if p in cols else -1 for p in parents], dtype=np.int64),
        np.array([child is None or j in child for j in cols], dtype=bool),
    )
    classes = ClassCounts(k["D"], k["N"], k["N"])
    return aode.joint_log_likelihood(X, k["Dj"][:, cols], classes, v, pairs, alpha, tempering, min_support)


def test_a_hand_computed_example() -> None:
    # Laplace (alpha = 1), both a and b as parents, no tempering, m' = 1.
    # P(c, x_p) = (D[c, x_p] + 1) / (4 + 4); children given a present parent
    # (D[c,p,j] + 1) / (N[c,p] - D[c,p] + 2), given an absent one
    # (D[c,j] - D[c,p,j] + 1) / (N[c] - N[c,p] + 3).
    #
    # x = {a, b}: SPODE_a ham 2/8 * (1+1)/(2-1+2), spam 3/8 * (1+1)/(5-2+2);
    #             SPODE_b ham 3/8 * (1+1)/(4-2+2), spam 2/8 * (1+1)/(3-1+2).
    ham_ab = (F(2, 8) * F(2, 3) + F(3, 8) * F(2, 4)) / 2
    spam_ab = (F(3, 8) * F(2, 5) + F(2, 8) * F(2, 4)) / 2
    assert (ham_ab, spam_ab) == (F(17, 96), F(11, 80))
    # x = {a, c}: SPODE_a (present) ham 2/8 * (0+1)/(2-1+2), spam 3/8 * (2+1)/(5-2+2);
    #             SPODE_b (absent)  ham 1/8 * (1-1+1)/(4-4+3) * (1-1+1)/3,
    #                               spam 2/8 * (2-1+1)/(5-3+3) * (2-1+1)/5.
    ham_ac = (F(2, 8) * F(1, 3) + F(1, 8) * F(1, 3) * F(1, 3)) / 2
    spam_ac = (F(3, 8) * F(3, 5) + F(2, 8) * F(2, 5) * F(2, 5)) / 2
    assert (ham_ac, spam_ac) == (F(7, 144), F(53, 400))
    # x = {c}: both parents absent; the two classes come out equal.
    ham_c = (F(2, 8) * F(2, 5) + F(1, 8) * F(1, 3)) / 2
    spam_c = (F(1, 8) * F(1, 3) + F(2, 8) * F(2, 5)) / 2

    jll, covered = vectorised(TRAIN, [0, 1], [{0, 1}, {0, 2}, {2}], 3, 1.0, 0.0, 1)
    assert covered.all()
    want = [(ham_ab, spam_ab), (ham_ac, spam_ac), (ham_c, spam_c)]
    assert jll == pytest.approx(np.log(np.array(want, dtype=float)), abs=1e-12)
    assert jll[0, 1] - jll[0, 0] == pytest.approx(math.log(1056 / 1360), abs=1e-12)
    assert jll[2, 1] - jll[2, 0] == pytest.approx(0.0, abs=1e-12)


def test_support_threshold_leaves_out_parent_values_seen_too_rarely() -> None:
    # m' = 2: a and b are each in 3 of the 4 messages, so "present" has
    # support and "absent" (1 message) has not.
    jll, covered = vectorised(TRAIN, [0, 1], [{0, 1}, {2}, {0, 2}], 3, 1.0, 0.0, 2)
    assert covered.tolist() == [True, False, True]
    assert jll[1].tolist() == [0.0, 0.0]
    # {a, c}: only SPODE_a (a present) is left.
    assert jll[2] == pytest.approx(np.log([float(F(2, 8) * F(1, 3)), float(F(3, 8) * F(3, 5))]), abs=1e-12)


def loop_log_likelihood(
    train: list[tuple[set[int], int]], parents: list[int], x: set[int], v: int, alpha: float, tempering: float, min_support: int, child: set[int]
) -> list[float]:
    """The module docstring's formulas term by term."""
    k = counts(train, parents, v)
    total = k["D"].sum()
    tau = len(x) ** -tempering
    out = []
    for c in (0, 1):

        def naive(j: int) -> float:
            return math.log((k["Dj"][c, j] + alpha) / (k["N"][c] + alpha * v))

        terms = []
        for i, p in enumerate(parents):
            if p in x:
                if k["Dp"][:, i].sum() < min_support:
                    continue
                prior = math.log((k["Dp"][c, i] + alpha) / (total + 4 * alpha))
                children = sum(math.log((k["Dpj"][c, i, j] + alpha) / (k["Np"][c, i] - k["Dp"][c, i] + alpha * (v - 1))) if j in child else naive(j) for j in x if j != p)
            else:
                if total - k["Dp"][:, i].sum() < min_support:
                    continue
                prior = math.log((k["D"][c] - k["Dp"][c, i] + alpha) / (total + 4 * alpha))
                children = sum(math.log((k["Dj"][c, j] - k["Dpj"][c, i, j] + alpha) / (k["N"][c] - k["Np"][c, i] + alpha * v)) if j in child else naive(j) for j in x)
            terms.append(prior + tau * children)
        out.append(float(logsumexp(terms) - math.log(len(terms))))
    return out


def test_matches_the_formulas_term_by_term_with_tempering_and_children() -> None:
    rng = np.random.default_rng(7)
    v = 14
    train = [(set(rng.choice(v, size=int(rng.integers(1, 7)), replace=False).tolist()), int(rng.integers(0, 2))) for _ in range(60)]
    parents = [0, 3, 5, 8]
    child = set(range(v)) - {6, 9, 11}
    tests = [set(rng.choice(v, size=int(rng.integers(1, 8)), replace=False).tolist()) for _ in range(12)]
    jll, covered = vectorised(train, parents, tests, v, 0.3, 0.55, 4, child)
    assert covered.all()
    for x, row in zip(tests, jll):
        assert row == pytest.approx(loop_log_likelihood(train, parents, x, v, 0.3, 0.55, 4, child), abs=1e-9)


def test_no_parents_means_no_row_is_covered() -> None:
    X = sp.csr_matrix(np.ones((2, 3)))
    pairs = aode.PairCounts(
        np.zeros((2, 0), dtype=np.int64),
        np.zeros((2, 0), dtype=np.int64),
        (sp.csr_matrix((0, 3)), sp.csr_matrix((0, 3))),
        np.zeros(0, dtype=np.int64),
        np.ones(3, dtype=bool),
    )
    classes = ClassCounts(np.array([2, 2]), np.array([4, 5]), np.array([4, 5]))
    jll, covered = aode.joint_log_likelihood(X, np.ones((2, 3), dtype=np.int64), classes, 3, pairs, 1.0, 0.0, 1)
    assert not covered.any() and not jll.any()


def test_mutual_information_of_a_perfect_and_an_independent_token() -> None:
    messages = np.array([10, 10])
    # in every spam and no ham: I = H(class) = log 2; in half of each class: 0
    mi = aode.mutual_information(np.array([[0, 5], [10, 5]]), messages)
    assert mi == pytest.approx([math.log(2), 0.0], abs=1e-12)


def test_rank_tokens_by_information_above_the_support() -> None:
    doc_count = np.array([[0, 5, 1, 0], [10, 5, 6, 2]])
    ranked = aode.rank_tokens(["perfect", "neutral", "strong", "rare"], doc_count, np.array([10, 10]), 3)
    assert ranked == ["perfect", "strong", "neutral"]


def test_spode_parent_is_the_one_that_ranks_the_tail_best() -> None:
    # Columns: 0 = B (noise), 1 = A, 2 = x. x means spam where A is present
    # and ham where it is absent: only a SPODE with parent A can read x.
    rng = np.random.default_rng(3)
    rows = []
    y = rng.random(400) < 0.5
    for spam in y:
        a, b = rng.random() < 0.5, rng.random() < 0.5
        x = (spam and a) or (not spam and not a)
        rows.append([float(b), float(a), float(x), 1.0])  # column 3: in every message
    X = sp.csr_matrix(np.array(rows))
    child = np.ones(4, dtype=bool)
    assert aode.spode_parent(X, y, [0, 1], child, 1.0, 0.0, 1) == 1
    assert aode.spode_parent(X, y, [1, 0], child, 1.0, 0.0, 1) == 1
    # with only one class in the tail there is nothing to rank: the first candidate
    assert aode.spode_parent(X, np.r_[y[:320], np.ones(80, dtype=bool)], [0, 1], child, 1.0, 0.0, 1) == 0


def test_dense_and_sparse_pair_sums_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    v = 30
    train = [(set(rng.choice(v, size=int(rng.integers(2, 9)), replace=False).tolist()), int(rng.integers(0, 2))) for _ in range(80)]
    tests = [set(rng.choice(v, size=int(rng.integers(1, 10)), replace=False).tolist()) for _ in range(15)]
    dense, _ = vectorised(train, [1, 4, 7], tests, v, 0.2, 0.5, 3, set(range(v)) - {2, 3})
    monkeypatch.setattr(aode, "_DENSE_CELLS", 0)
    sparse, _ = vectorised(train, [1, 4, 7], tests, v, 0.2, 0.5, 3, set(range(v)) - {2, 3})
    assert sparse == pytest.approx(dense, abs=1e-12)
