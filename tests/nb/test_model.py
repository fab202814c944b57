"""Tests of spamfilter.nb.model against numbers worked out by hand.

The toy corpus is Manning, Raghavan & Schuetze, Introduction to Information
Retrieval (2008), ch. 13, Table 13.1, with class c ("China") as SPAM:

    d1  Chinese Beijing Chinese        c     (spam)
    d2  Chinese Chinese Shanghai       c     (spam)
    d3  Chinese Macao                  c     (spam)
    d4  Tokyo Japan Chinese            not c (ham)
    d5  Chinese Chinese Chinese Tokyo Japan   (to classify)

Counts, vocabulary order Chinese, Beijing, Shanghai, Macao, Tokyo, Japan (V = 6):

    N[spam,j] = 5 1 1 1 0 0   N[spam] = 8    D[spam,j] = 3 1 1 1 0 0   D[spam] = 3
    N[ham,j]  = 1 0 0 0 1 1   N[ham]  = 3    D[ham,j]  = 1 0 0 0 1 1   D[ham]  = 1
    distinct tokens per message summed: spam 2+2+2 = 6, ham 3

Histogram of message counts (k, tokens with count k), k = 0 included:
    spam: (0, 2) Tokyo Japan, (1, 3) Beijing Shanghai Macao, (3, 1) Chinese
    ham:  (0, 3) Beijing Shanghai Macao, (1, 3) Chinese Tokyo Japan
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction as F

import numpy as np
import pytest
import scipy.sparse as sp

from spamfilter.counts import ClassCounts
from spamfilter.errors import NotTrainedError, StoreInconsistent
from spamfilter.nb import decision, model
from spamfilter.nb.model import HAM, SPAM, UNSURE

VOCAB = ["Chinese", "Beijing", "Shanghai", "Macao", "Tokyo", "Japan"]
DOCS = {SPAM: np.array([3, 1, 1, 1, 0, 0]), HAM: np.array([1, 0, 0, 0, 1, 1])}
TERMS = {SPAM: np.array([5, 1, 1, 1, 0, 0]), HAM: np.array([1, 0, 0, 0, 1, 1])}

# d5 = Chinese x3, Tokyo, Japan: the three columns it touches.
D5_COLUMNS = [VOCAB.index(t) for t in ("Chinese", "Tokyo", "Japan")]
D5_COUNTS = [3, 1, 1]

STATS = model.Totals(
    ClassCounts(messages=np.array([1, 3]), terms=np.array([3, 8]), binary_terms=np.array([3, 6])),
    vocabulary_size=6,
    histogram=(np.array([[0, 3], [1, 3]]), np.array([[0, 2], [1, 3], [3, 1]])),
)


def flog(x: F) -> float:
    """log of an exact fraction, without rounding it to a float first."""
    return math.log(x.numerator) - math.log(x.denominator)


def per_class(values: dict[int, np.ndarray], columns: list[int]) -> np.ndarray:
    """A (2, m) count array, row HAM then SPAM, for the given vocabulary columns."""
    return np.stack([values[HAM][columns], values[SPAM][columns]]).astype(np.int64)


def token_counts(columns: list[int]) -> model.TokenCounts:
    return model.TokenCounts(doc_count=per_class(DOCS, columns), term_count=per_class(TERMS, columns))


def d5_matrix(binary: bool) -> sp.csr_matrix:
    return sp.csr_matrix(np.array([[1.0, 1.0, 1.0] if binary else [float(n) for n in D5_COUNTS]]))


def score_d5(event_model: str, alpha: float) -> np.ndarray:
    params = model.estimate(event_model, token_counts(D5_COLUMNS), STATS, alpha)
    return model.joint_log_likelihood(d5_matrix(params.binary), params)


# -- the IIR example, each event model -----------------------------------------
#
# Each case: P(spam) * P(d5|spam) and P(ham) * P(d5|ham) as exact fractions.
#
# multinomial, alpha = 1:  theta = (N[c,j] + 1) / (N[c] + 6)
#   spam: Chinese 6/14 = 3/7, Tokyo = Japan = 1/14;  ham: 2/9 each
# multinomial, alpha = 1/2:  theta = (N[c,j] + 1/2) / (N[c] + 3)
#   spam: Chinese 5.5/11 = 1/2, Tokyo = Japan = 1/22;  ham: 1.5/6 = 1/4 each
# multinomial-binary, alpha = 1:  theta = (D[c,j] + 1) / (binary_terms[c] + 6), x in {0, 1}
#   spam: Chinese 4/12 = 1/3, Tokyo = Japan = 1/12;  ham: 2/9 each
# bernoulli, alpha = 1:  theta = (D[c,j] + 1) / (D[c] + 2), every vocabulary word counts
#   spam: Chinese 4/5, Beijing = Shanghai = Macao 2/5, Tokyo = Japan 1/5
#   ham:  Chinese = Tokyo = Japan 2/3, Beijing = Shanghai = Macao 1/3
# bernoulli, alpha = 1/2:  theta = (D[c,j] + 1/2) / (D[c] + 1)
#   spam: Chinese 7/8, Beijing = Shanghai = Macao 3/8, Tokyo = Japan 1/8
#   ham:  Chinese = Tokyo = Japan 3/4, Beijing = Shanghai = Macao 1/4
IIR_CASES = [
    ("multinomial", 1.0, F(3, 4) * F(3, 7) ** 3 * F(1, 14) * F(1, 14), F(1, 4) * F(2, 9) ** 3 * F(2, 9) * F(2, 9)),
    ("multinomial", 0.5, F(3, 4) * F(1, 2) ** 3 * F(1, 22) ** 2, F(1, 4) * F(1, 4) ** 5),
    ("multinomial-binary", 1.0, F(3, 4) * F(1, 3) * F(1, 12) ** 2, F(1, 4) * F(2, 9) ** 3),
    (
        # present: Chinese, Tokyo, Japan; absent: Beijing, Shanghai, Macao
        "bernoulli",
        1.0,
        F(3, 4) * F(4, 5) * F(1, 5) * F(1, 5) * (1 - F(2, 5)) ** 3,
        F(1, 4) * F(2, 3) ** 3 * (1 - F(1, 3)) ** 3,
    ),
    ("bernoulli", 0.5, F(3, 4) * F(7, 8) * F(1, 8) ** 2 * (1 - F(3, 8)) ** 3, F(1, 4) * F(3, 4) ** 3 * (1 - F(1, 4)) ** 3),
]


@pytest.mark.parametrize(("event_model", "alpha", "spam_joint", "ham_joint"), IIR_CASES)
def test_iir_example_joint_log_likelihood_and_log_odds(event_model: str, alpha: float, spam_joint: F, ham_joint: F) -> None:
    jll = score_d5(event_model, alpha)
    assert jll.shape == (1, 2)
    assert jll[0, SPAM] == pytest.approx(flog(spam_joint), rel=1e-12)
    assert jll[0, HAM] == pytest.approx(flog(ham_joint), rel=1e-12)
    odds = model.log_odds(jll)
    assert odds[0] == pytest.approx(flog(spam_joint / ham_joint), rel=1e-12)
    posterior = spam_joint / (spam_joint + ham_joint)
    assert decision.spam_probability(odds)[0] == pytest.approx(float(posterior), rel=1e-12)


def test_iir_example_verdicts_match_the_book() -> None:
    # The book: multinomial assigns d5 to China (0.0003 vs 0.0001), Bernoulli
    # to not-China (0.005 vs 0.022).
    assert float(F(3, 4) * F(3, 7) ** 3 * F(1, 14) ** 2) == pytest.approx(0.0003, abs=0.00005)
    assert float(F(1, 4) * F(2, 3) ** 6) == pytest.approx(0.022, abs=0.0005)
    assert model.log_odds(score_d5("multinomial", 1.0))[0] > 0
    assert model.log_odds(score_d5("bernoulli", 1.0))[0] < 0


def test_log_prior_is_log_message_share() -> None:
    prior = model.log_prior(STATS)
    assert prior[SPAM] == pytest.approx(math.log(3 / 4), rel=1e-12)
    assert prior[HAM] == pytest.approx(math.log(1 / 4), rel=1e-12)


@pytest.mark.parametrize(("event_model", "numerator", "denominator"), [("multinomial", TERMS, {SPAM: 8, HAM: 3}), ("multinomial-binary", DOCS, {SPAM: 6, HAM: 3})])
def test_multinomial_weights_are_laplace_smoothed_log_theta(event_model: str, numerator: dict[int, np.ndarray], denominator: dict[int, int]) -> None:
    # weight[c, j] = log((N[c,j] + 1) / (N[c] + 6)); e.g. multinomial spam
    # Chinese log(6/14), Beijing log(2/14), Tokyo log(1/14).
    columns = list(range(6))
    params = model.estimate(event_model, token_counts(columns), STATS, 1.0)
    assert params.binary is (event_model == "multinomial-binary")
    for c in (HAM, SPAM):
        expected = [flog(F(int(n) + 1, denominator[c] + 6)) for n in numerator[c]]
        assert params.weight[c].tolist() == pytest.approx(expected, rel=1e-12)
        assert params.bias[c] == pytest.approx(flog(F(int(STATS.messages[c]), 4)), rel=1e-12)


def test_bernoulli_weights_are_log_odds_of_presence() -> None:
    params = model.estimate("bernoulli", token_counts(list(range(6))), STATS, 1.0)
    assert params.binary
    for c in (HAM, SPAM):
        theta = [F(int(d) + 1, int(STATS.messages[c]) + 2) for d in DOCS[c]]
        assert params.weight[c].tolist() == pytest.approx([flog(t / (1 - t)) for t in theta], rel=1e-12)
    # e.g. Chinese in spam: log(4/5) - log(1/5) = log 4
    assert params.weight[SPAM, 0] == pytest.approx(math.log(4), rel=1e-12)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.01])
def test_bernoulli_absent_sum_from_histogram_equals_sum_over_all_six_words(alpha: float) -> None:
    a = F(alpha)
    direct = [sum(flog(1 - (int(d) + a) / (int(STATS.messages[c]) + 2 * a)) for d in DOCS[c]) for c in (HAM, SPAM)]
    # alpha = 1 by hand: spam log(1/5) + 3 log(3/5) + 2 log(4/5); ham 3 log(1/3) + 3 log(2/3)
    if alpha == 1.0:
        assert direct[SPAM] == pytest.approx(math.log(1 / 5) + 3 * math.log(3 / 5) + 2 * math.log(4 / 5), rel=1e-12)
        assert direct[HAM] == pytest.approx(3 * math.log(1 / 3) + 3 * math.log(2 / 3), rel=1e-12)
    assert model.bernoulli_absent_sum(STATS, alpha).tolist() == pytest.approx(direct, rel=1e-12)
    params = model.estimate("bernoulli", token_counts(D5_COLUMNS), STATS, alpha)
    assert params.bias.tolist() == pytest.approx([math.log(1 / 4) + direct[HAM], math.log(3 / 4) + direct[SPAM]], rel=1e-12)


def test_unknown_event_model_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown event model"):
        model.estimate("poisson", token_counts(D5_COLUMNS), STATS, 1.0)


# -- not trained -------------------------------------------------------------


@pytest.mark.parametrize("messages", [[0, 3], [1, 0], [0, 0]])
@pytest.mark.parametrize("event_model", ["bernoulli", "multinomial", "multinomial-binary"])
def test_not_trained_error_when_a_class_has_no_messages(messages: list[int], event_model: str) -> None:
    stats = model.Totals(ClassCounts(messages=np.array(messages), terms=STATS.terms, binary_terms=STATS.binary_terms), vocabulary_size=6, histogram=STATS.histogram)
    with pytest.raises(NotTrainedError, match="at least one trained spam and one trained ham"):
        model.estimate(event_model, token_counts(D5_COLUMNS), stats, 1.0)


@pytest.mark.parametrize("messages", [[-5, 3], [4, -1]])
def test_negative_message_counts_are_a_damaged_store_not_an_untrained_one(messages: list[int]) -> None:
    stats = model.Totals(ClassCounts(messages=np.array(messages), terms=STATS.terms, binary_terms=STATS.binary_terms), vocabulary_size=6, histogram=STATS.histogram)
    with pytest.raises(StoreInconsistent, match="negative"):
        model.estimate("multinomial-binary", token_counts(D5_COLUMNS), stats, 1.0)


@pytest.mark.parametrize("event_model", ["multinomial", "multinomial-binary"])
def test_a_model_of_messages_without_tokens_estimates_without_a_warning(event_model: str) -> None:
    # `db import` of totals and no token lines, or a prune of every token.
    stats = model.Totals(
        ClassCounts(messages=np.array([1, 1]), terms=np.array([0, 0]), binary_terms=np.array([0, 0])), vocabulary_size=0, histogram=(np.zeros((0, 2)), np.zeros((0, 2)))
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        params = model.estimate(event_model, token_counts([]), stats, 1.0)
    assert params.weight.shape == (2, 0) and np.all(np.isfinite(params.log_prior))


# -- decision ------------------------------------------------------------------


def test_two_way_threshold_for_costs_10_1_is_logit_10_over_11() -> None:
    t = decision.thresholds_from_loss(10.0, 1.0, 0.0)
    # logit(10/11) = log((10/11) / (1/11)) = log 10
    assert t.ham_max == pytest.approx(math.log(10), rel=1e-12)
    assert t.spam_min == t.ham_max


def test_unsure_band_for_cost_0_2_is_logit_0_2_to_logit_0_98() -> None:
    t = decision.thresholds_from_loss(10.0, 1.0, 0.2)
    # c_u / c_sh = 0.2 -> logit = log(1/4); 1 - c_u / c_hs = 0.98 -> logit = log 49
    assert t.ham_max == pytest.approx(math.log(0.25), rel=1e-12)
    assert t.spam_min == pytest.approx(math.log(49), rel=1e-12)


@pytest.mark.parametrize("cost_unsure", [10 / 11, 0.95, 1.0, 5.0])
def test_unsure_costing_at_least_10_over_11_gives_the_two_way_rule(cost_unsure: float) -> None:
    t = decision.thresholds_from_loss(10.0, 1.0, cost_unsure)
    assert t == decision.thresholds_from_loss(10.0, 1.0, 0.0)


def test_unsure_just_below_10_over_11_keeps_a_narrow_band() -> None:
    t = decision.thresholds_from_loss(10.0, 1.0, 0.9)
    # (0.9, 1 - 0.09) = (0.9, 0.91): logit 9 and logit(91/9)
    assert t.ham_max == pytest.approx(math.log(9), rel=1e-12)
    assert t.spam_min == pytest.approx(math.log(91 / 9), rel=1e-12)
    assert t.ham_max < t.spam_min


def test_thresholds_from_cutoffs_are_their_logits() -> None:
    t = decision.thresholds_from_cutoffs(0.2, 0.9)
    assert t.ham_max == pytest.approx(math.log(0.25), rel=1e-12)
    assert t.spam_min == pytest.approx(math.log(9), rel=1e-12)


def test_decide_with_unsure_band_including_boundaries() -> None:
    t = decision.Thresholds(ham_max=-1.0, spam_min=2.0)
    odds = np.array([-np.inf, -5.0, -1.0, np.nextafter(-1.0, 0.0), 0.0, 2.0, np.nextafter(2.0, 3.0), 80.0, np.inf])
    expected = [HAM, HAM, HAM, UNSURE, UNSURE, UNSURE, SPAM, SPAM, SPAM]
    assert decision.decide(odds, t).tolist() == expected


def test_decide_two_way_is_ham_on_equality() -> None:
    t = decision.thresholds_from_loss(10.0, 1.0, 0.0)
    odds = np.array([t.ham_max, np.nextafter(t.ham_max, np.inf), np.nextafter(t.ham_max, -np.inf)])
    assert decision.decide(odds, t).tolist() == [HAM, SPAM, HAM]


# -- no saturation -------------------------------------------------------------


def test_log_odds_keep_ranking_where_probability_saturates() -> None:
    jll = np.array([[-100.0, -20.0], [-100.0, -60.0], [-100.0, -99.0]])
    odds = model.log_odds(jll)
    assert odds.tolist() == [80.0, 40.0, 1.0]
    probability = decision.spam_probability(odds)
    assert probability[0] == 1.0
    assert probability[1] == 1.0
    assert probability[2] == pytest.approx(1 / (1 + math.exp(-1)), rel=1e-12)
    assert np.argsort(-odds).tolist() == [0, 1, 2]


def test_repeated_spam_token_gives_distinct_odds_past_saturation() -> None:
    # Multinomial, alpha = 1, one token "Beijing" repeated n times in a message:
    # L = log(3) + n * (log(2/14) - log(1/9)) = log 3 + n log(9/7).
    params = model.estimate("multinomial", token_counts([VOCAB.index("Beijing")]), STATS, 1.0)
    X = sp.csr_matrix(np.array([[300.0], [400.0]]))
    odds = model.log_odds(model.joint_log_likelihood(X, params))
    expected = [math.log(3) + n * math.log(9 / 7) for n in (300, 400)]
    assert odds.tolist() == pytest.approx(expected, rel=1e-12)
    assert odds[0] > 37 and odds[1] > odds[0]
    assert decision.spam_probability(odds).tolist() == [1.0, 1.0]


def test_min_evidence_drops_weak_tokens_before_tempering() -> None:
    import scipy.sparse as sp

    params = model.NBParams(weight=np.array([[-1.0, -2.0, -1.0], [-0.5, 1.0, -5.0]]), bias=np.log([0.5, 0.5]), log_prior=np.log([0.5, 0.5]), binary=True)
    X = sp.csr_matrix(np.array([[1.0, 1.0, 1.0]]))
    # differences 0.5, 3, -4: with min_evidence 3 only tokens 2 and 3 count,
    # so n = 2 and the evidence per class is the sum over those two / sqrt(2).
    jll = model.joint_log_likelihood(X, params, tempering=0.5, min_evidence=3.0)
    expected = np.log(0.5) + np.array([-2.0 - 1.0, 1.0 - 5.0]) / np.sqrt(2.0)
    assert jll[0].tolist() == pytest.approx(expected.tolist(), rel=1e-12)
    # without it all three count, n = 3
    jll = model.joint_log_likelihood(X, params, tempering=0.5)
    expected = np.log(0.5) + np.array([-4.0, -4.5]) / np.sqrt(3.0)
    assert jll[0].tolist() == pytest.approx(expected.tolist(), rel=1e-12)


def test_decide_codes_name_the_verdicts_and_the_labels() -> None:
    from spamfilter.verdicts import Decision, Label

    codes = decision.decide(np.array([-5.0, 0.0, 5.0]), decision.Thresholds(ham_max=-1.0, spam_min=1.0))
    assert [Decision.of_code(int(c)) for c in codes] == [Decision.HAM, Decision.UNSURE, Decision.SPAM]
    assert [label.decision for label in Label] == [Decision.HAM, Decision.SPAM]
    assert [d.code for d in Decision] == [Label.HAM, Label.SPAM, model.UNSURE]
    assert f"{Decision.UNSURE:<7}|" == "unsure |"


def test_the_event_models_differ_in_what_they_count_and_whether_absent_tokens_count() -> None:
    from spamfilter.config import EVENT_MODELS, counts_occurrences, has_absent_term

    assert [m for m in EVENT_MODELS if counts_occurrences(m)] == ["multinomial"]
    assert [m for m in EVENT_MODELS if has_absent_term(m)] == ["bernoulli"]


def three_token_params() -> model.NBParams:
    # weight differences spam - ham: 0.5, 3, -4
    return model.NBParams(weight=np.array([[-1.0, -2.0, -1.0], [-0.5, 1.0, -5.0]]), bias=np.log([0.5, 0.5]), log_prior=np.log([0.5, 0.5]), binary=True)


def test_max_tokens_keeps_the_most_significant_tokens_of_each_message() -> None:
    import scipy.sparse as sp

    params = three_token_params()
    X = sp.csr_matrix(np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))
    jll = model.joint_log_likelihood(X, params, tempering=0.5, max_tokens=1)
    # row 0 keeps token 3 (|-4|): n = 1; row 1 keeps token 2 (|3|); row 2 has one token anyway
    expected = np.log(0.5) + np.array([[-1.0, -5.0], [-2.0, 1.0], [-1.0, -0.5]])
    assert jll.ravel().tolist() == pytest.approx(expected.ravel().tolist(), rel=1e-12)
    # k = 2 on row 0 keeps tokens 2 and 3, as min_evidence 3 does
    two = model.joint_log_likelihood(X[:1], params, tempering=0.5, max_tokens=2)
    assert two.tolist() == model.joint_log_likelihood(X[:1], params, tempering=0.5, min_evidence=3.0).tolist()
    # k at least the message's size changes nothing
    assert model.joint_log_likelihood(X, params, 0.5, max_tokens=3).tolist() == model.joint_log_likelihood(X, params, 0.5).tolist()


def test_max_tokens_breaks_ties_by_the_lower_column() -> None:
    import scipy.sparse as sp

    params = model.NBParams(weight=np.array([[0.0, 0.0, 0.0], [2.0, -2.0, 2.0]]), bias=np.zeros(2), log_prior=np.zeros(2), binary=True)
    X = sp.csr_matrix(np.array([[1.0, 1.0, 1.0]]))
    selected = model.evidence_features(X, params, 0.0, max_tokens=2)
    assert selected.toarray().tolist() == [[1.0, 1.0, 0.0]]
    assert model.log_odds(model.joint_log_likelihood(X, params, max_tokens=2)).tolist() == [0.0]


def test_log_odds_terms_show_the_selected_contributions() -> None:
    import scipy.sparse as sp

    params = three_token_params()
    X = sp.csr_matrix(np.array([[1.0, 1.0, 1.0]]))
    # multinomial form: log theta is the weight, no absent term; ratios 0.5, 3, -4
    terms = model.log_odds_terms(X, params, params.weight, tempering=0.5, max_tokens=2)
    f = 2.0**-0.5
    assert terms.token.tolist() == pytest.approx([0.0, 3.0 * f, -4.0 * f], rel=1e-12)
    assert (terms.used.tolist(), terms.events, terms.absent) == ([False, True, True], 2.0, 0.0)
    odds = model.log_odds(model.joint_log_likelihood(X, params, 0.5, 0.0, 2))
    assert terms.prior + terms.token.sum() + terms.absent == pytest.approx(odds[0], abs=1e-12)


def random_binary_model(seed: int, m: int) -> tuple[model.TokenCounts, model.Totals, model.NBParams]:
    """A multinomial-binary model of m tokens with random counts (40 ham, 50 spam)."""
    doc_count = np.random.default_rng(seed).integers(0, 30, size=(2, m))
    counts = model.TokenCounts(doc_count, doc_count)
    empty = np.zeros((0, 2), dtype=np.int64)
    stats = model.Totals(ClassCounts(np.array([40, 50]), doc_count.sum(axis=1), doc_count.sum(axis=1)), 400, (empty, empty))
    return counts, stats, model.estimate("multinomial-binary", counts, stats, 0.1)


def test_header_lines_apart_have_their_own_selection_and_tempering() -> None:
    m = 12
    counts, stats, params = random_binary_model(5, m)
    header = np.zeros(m, dtype=bool)
    header[[1, 4, 5, 7, 9]] = True
    X = sp.csr_matrix(np.array([[1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1], [1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 1]], dtype=np.float64))
    jll = model.joint_log_likelihood(X, params, 0.55, header=header, header_max_tokens=2)
    d = params.weight[SPAM] - params.weight[HAM]
    prior = params.log_prior[SPAM] - params.log_prior[HAM]
    row = X.toarray()[0].astype(bool)
    rest = np.flatnonzero(row & ~header)
    head = np.flatnonzero(row & header)
    strongest = head[np.argsort(-np.abs(d[head]), kind="stable")][:2]
    want = prior + d[rest].sum() * len(rest) ** -0.55 + d[strongest].sum() * 2**-0.55
    assert jll[0, SPAM] - jll[0, HAM] == pytest.approx(want, abs=1e-12)
    # the second message has no header-line token: as without the mask, to the bit
    alone = model.joint_log_likelihood(X[1], params, 0.55)
    assert (jll[1] == alone[0]).all()
    # term by term, the parts add up to the same log-odds
    terms = model.log_odds_terms(X[:1], params, model.token_log_likelihood("multinomial-binary", counts, stats, 0.1), 0.55, header=header, header_max_tokens=2)
    assert terms.prior + terms.token.sum() + terms.absent == pytest.approx(want, abs=1e-12)
    assert (terms.events, terms.header_events) == (len(rest), 2.0)
    assert terms.header_factor == pytest.approx(2**-0.55)


@pytest.mark.parametrize("event_model", ["multinomial", "multinomial-binary", "bernoulli"])
@pytest.mark.parametrize("k", [0, 1, 3])
def test_header_lines_apart_by_entries_equal_the_sparse_parts_to_the_bit(event_model: str, k: int) -> None:
    rng = np.random.default_rng(17)
    m, n = 40, 25
    doc_count = rng.integers(0, 4, size=(2, m))  # few distinct counts: many ties
    term_count = doc_count * rng.integers(1, 3, size=(2, m))
    counts = model.TokenCounts(doc_count, term_count)
    hist = [np.stack(np.unique(doc_count[c], return_counts=True), axis=1).astype(np.int64) for c in (0, 1)]
    stats = model.Totals(ClassCounts(np.array([10, 12]), term_count.sum(axis=1), doc_count.sum(axis=1)), m, (hist[0], hist[1]))
    params = model.estimate(event_model, counts, stats, 0.5)
    dense = (rng.random((n, m)) < 0.3) * (1 if params.binary else rng.integers(1, 4, size=(n, m)))
    dense[3] = 0  # an empty message
    X = sp.csr_matrix(dense.astype(np.float64))
    header = rng.random(m) < 0.4
    fast = model.joint_log_likelihood(X, params, 0.55, header=header, header_max_tokens=k)
    head, rest = model.split_columns(X, header)
    slow = model._tempered_evidence(rest, params, 0.55, 0.0, 0, absent=True) + model._tempered_evidence(head, params, 0.55, 0.0, k, absent=False) + params.log_prior
    assert (fast == slow).all()


def test_unseen_tokens_count_in_the_size_of_the_part_they_join_and_nowhere_else() -> None:
    m = 10
    _, _, params = random_binary_model(11, m)
    d = params.weight[SPAM] - params.weight[HAM]
    prior = params.log_prior[SPAM] - params.log_prior[HAM]
    header = np.zeros(m, dtype=bool)
    header[[2, 6]] = True
    X = sp.csr_matrix(np.array([[1, 1, 1, 0, 1, 0, 1, 1, 0, 0], [0, 1, 0, 1, 1, 1, 0, 0, 0, 1]], dtype=np.float64))
    unseen = np.array([3.0, 0.0])
    row = X.toarray()[0].astype(bool)
    rest, head = np.flatnonzero(row & ~header), np.flatnonzero(row & header)
    # Header lines apart: the 3 unseen events join the body's size only.
    apart = model.joint_log_likelihood(X, params, 0.55, header=header, unseen=unseen)
    want = prior + d[rest].sum() * (len(rest) + 3) ** -0.55 + d[head].sum() * len(head) ** -0.55
    assert apart[0, SPAM] - apart[0, HAM] == pytest.approx(want, abs=1e-12)
    # A row without unseen tokens scores to the bit as with none given.
    assert (apart[1] == model.joint_log_likelihood(X, params, 0.55, header=header)[1]).all()
    # The sparse path (with a selection) adds them the same way.
    selected = model.joint_log_likelihood(X, params, 0.55, min_evidence=1e-9, header=header, unseen=unseen)
    assert selected[0, SPAM] - selected[0, HAM] == pytest.approx(want, abs=1e-12)
    # Scored together: one size for every token.
    whole = model.joint_log_likelihood(X, params, 0.55, unseen=unseen)
    assert whole[0, SPAM] - whole[0, HAM] == pytest.approx(prior + d[row].sum() * (row.sum() + 3) ** -0.55, abs=1e-12)
    # Untempered, they change nothing: their evidence is zero.
    assert (model.joint_log_likelihood(X, params, 0.0, unseen=unseen) == model.joint_log_likelihood(X, params, 0.0)).all()
    # Term by term, the same log-odds.
    terms = model.log_odds_terms(X[:1], params, params.weight, 0.55, header=header, unseen=3.0)
    assert terms.prior + terms.token.sum() + terms.absent == pytest.approx(want, abs=1e-12)
    assert terms.factor == pytest.approx((len(rest) + 3) ** -0.55)
