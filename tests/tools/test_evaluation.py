"""Evaluation metrics against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spamfilter.tools.evaluation import ErrorRates, error_rates, lam_pct, roc_area, sm_at_hm


def pairwise_auc(is_spam: list[bool], score: list[float]) -> float:
    """AUC by its definition: over all (spam, ham) pairs, 1 when the spam
    scores higher, 1/2 on a tie, 0 otherwise; averaged."""
    spam = [s for s, y in zip(score, is_spam) if y]
    ham = [s for s, y in zip(score, is_spam) if not y]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in spam for b in ham)
    return wins / (len(spam) * len(ham))


# -- roc_area ----------------------------------------------------------------


def test_roc_area_counts_a_tied_pair_as_one_half() -> None:
    # spam {0.9, 0.1}, ham {0.9, 0.5}; pairs (spam, ham):
    #   0.9 vs 0.9 tie 1/2, 0.9 vs 0.5 win 1, 0.1 vs 0.9 loss 0, 0.1 vs 0.5 loss 0
    # -> 1.5 / 4
    y = np.array([1, 0, 1, 0], dtype=bool)
    s = np.array([0.9, 0.9, 0.1, 0.5])
    assert roc_area(y, s) == 0.375


def test_roc_area_with_several_ties() -> None:
    # spam {3, 2, 2}, ham {2, 1}:
    #   3: 1 + 1;  2: 1/2 + 1;  2: 1/2 + 1  -> 5 of 6 pairs
    y = np.array([True, True, True, False, False])
    s = np.array([3.0, 2.0, 2.0, 2.0, 1.0])
    assert roc_area(y, s) == pytest.approx(5 / 6, rel=1e-12)


def test_roc_area_is_one_for_a_perfect_ranking() -> None:
    y = np.array([False, True, False, True, True])
    s = np.array([-3.0, 10.0, 0.5, 0.6, 40.0])
    assert roc_area(y, s) == 1.0


def test_roc_area_is_zero_for_a_reversed_ranking() -> None:
    y = np.array([False, True, False, True, True])
    s = np.array([3.0, -10.0, 0.5, 0.4, -40.0])
    assert roc_area(y, s) == 0.0


def test_roc_area_is_one_half_when_every_score_ties() -> None:
    y = np.array([True, False, False, True, False])
    assert roc_area(y, np.full(5, 7.0)) == 0.5


def test_roc_area_depends_only_on_the_order_of_scores() -> None:
    y = np.array([1, 0, 1, 0, 1, 1, 0], dtype=bool)
    log_odds = np.array([2.0, -1.0, 0.5, 0.5, -3.0, 9.0, 1.5])
    probability = 1.0 / (1.0 + np.exp(-log_odds))
    assert roc_area(y, probability) == roc_area(y, log_odds) == pytest.approx(pairwise_auc(y.tolist(), log_odds.tolist()), rel=1e-12)


def test_roc_area_accepts_lists_of_ints() -> None:
    assert roc_area([1, 0, 1, 0], [0.9, 0.9, 0.1, 0.5]) == 0.375  # type: ignore[arg-type]


def test_roc_area_handles_infinite_log_odds() -> None:
    y = np.array([True, False, True])
    assert roc_area(y, np.array([np.inf, -np.inf, np.inf])) == 1.0


@pytest.mark.parametrize("is_spam", [[True, True, True], [False, False], []], ids=["only-spam", "only-ham", "empty"])
def test_roc_area_needs_both_classes(is_spam: list[bool]) -> None:
    with pytest.raises(ValueError, match="at least one spam and one ham"):
        roc_area(np.array(is_spam, dtype=bool), np.zeros(len(is_spam)))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.sampled_from([-2.0, -0.5, 0.0, 0.5, 1.0, 3.0])), min_size=2, max_size=40).filter(lambda pairs: len({y for y, _ in pairs}) == 2)
)
def test_roc_area_equals_the_pairwise_definition(pairs: list[tuple[bool, float]]) -> None:
    y = [p[0] for p in pairs]
    s = [p[1] for p in pairs]
    assert roc_area(np.array(y), np.array(s)) == pytest.approx(pairwise_auc(y, s), rel=1e-12, abs=1e-12)


# -- error_rates -------------------------------------------------------------


def test_error_rates_on_a_hand_example_with_unsure_verdicts() -> None:
    # 4 spam: spam, spam, unsure, ham -> 1/4 as ham, 1/4 unsure
    # 5 ham:  ham, ham, ham, unsure, spam -> 1/5 as spam, 1/5 unsure
    # correct: 2 spam + 3 ham of 9
    is_spam = np.array([True, True, True, True, False, False, False, False, False])
    verdicts = ["spam", "spam", "unsure", "ham", "ham", "ham", "ham", "unsure", "spam"]
    rates = error_rates(is_spam, verdicts)
    assert rates.ham_as_spam == 20.0
    assert rates.spam_as_ham == 25.0
    assert rates.ham_unsure == 20.0
    assert rates.spam_unsure == 25.0
    assert rates.accuracy == pytest.approx(500 / 9, rel=1e-12)


def test_error_rates_all_correct() -> None:
    rates = error_rates(np.array([True, False, True]), ["spam", "ham", "spam"])
    assert rates == ErrorRates(ham_as_spam=0.0, spam_as_ham=0.0, ham_unsure=0.0, spam_unsure=0.0, accuracy=100.0)


def test_error_rates_all_unsure() -> None:
    rates = error_rates(np.array([True, False]), ["unsure", "unsure"])
    assert rates == ErrorRates(ham_as_spam=0.0, spam_as_ham=0.0, ham_unsure=100.0, spam_unsure=100.0, accuracy=0.0)


def test_error_rates_of_an_absent_class_are_zero() -> None:
    rates = error_rates(np.array([True, True, True, True]), ["spam", "ham", "ham", "unsure"])
    assert rates == ErrorRates(ham_as_spam=0.0, spam_as_ham=50.0, ham_unsure=0.0, spam_unsure=25.0, accuracy=25.0)


def test_error_rates_of_no_messages_are_zero() -> None:
    rates = error_rates(np.array([], dtype=bool), [])
    assert rates == ErrorRates(ham_as_spam=0.0, spam_as_ham=0.0, ham_unsure=0.0, spam_unsure=0.0, accuracy=0.0)


# -- lam_pct, sm_at_hm -------------------------------------------------------


def test_lam_of_equal_smoothed_rates_is_that_rate() -> None:
    # (1 + 0.5) / (9 + 1) = 0.15 for both classes -> logistic average 15%
    assert lam_pct(1, 9, 1, 9) == pytest.approx(15.0, rel=1e-12)


def test_lam_of_opposite_logits_is_fifty_percent() -> None:
    # ham (0 + 0.5) / 100 = 0.005, spam (99 + 0.5) / 100 = 0.995: logits cancel
    assert lam_pct(0, 99, 99, 99) == pytest.approx(50.0, rel=1e-12)


def test_lam_smoothing_keeps_a_perfect_run_above_zero() -> None:
    # 0.5 / 1001 for both classes
    assert lam_pct(0, 1000, 0, 1000) == pytest.approx(100 * 0.5 / 1001, rel=1e-12)


def test_sm_at_hm_uses_the_score_of_the_k_plus_first_highest_ham() -> None:
    # 1000 ham scored 0..999: 0.1% allows k = 1 ham above the threshold,
    # which is the second-highest ham, 998; one spam of four is at or below it.
    is_spam = np.array([False] * 1000 + [True] * 4)
    score = np.concatenate([np.arange(1000.0), [998.5, 999.5, 1000.0, 998.0]])
    assert sm_at_hm(is_spam, score, 0.1) == 25.0


def test_sm_at_hm_with_few_ham_puts_the_threshold_at_the_highest_ham() -> None:
    # 10 ham: k = floor(10 * 0.1 / 100) = 0, threshold = 5.0
    is_spam = np.array([False] * 10 + [True] * 5)
    score = np.concatenate([np.linspace(-4.0, 5.0, 10), [5.0, 5.5, 6.0, -9.0, 7.0]])
    assert sm_at_hm(is_spam, score, 0.1) == 40.0


def test_sm_at_hm_reads_a_tie_along_the_roc_curve_as_1_roca_does() -> None:
    # 2,000 ham, 8 of them at the top score 1.0 with 600 of 1,000 spam (a
    # filter whose probability saturates): 0.1% allows k = 2 ham misfiled,
    # a quarter of the 8 tied, so a quarter of the tied spam passes too.
    # Every tied spam used to count as let through: 100%.
    is_spam = np.array([False] * 2000 + [True] * 1000)
    ham = np.concatenate([np.full(8, 1.0), np.linspace(0.0, 0.5, 1992)])
    spam = np.concatenate([np.full(600, 1.0), np.linspace(0.2, 0.9, 400)])
    assert sm_at_hm(is_spam, np.concatenate([ham, spam]), 0.1) == pytest.approx(100.0 * (400 + 0.75 * 600) / 1000)
    # Scores ranked the same way but told apart: the spam above the tied
    # ham are all caught, the rest judged against the third-highest ham.
    spread = np.concatenate([ham[:8] + np.arange(8) * 1e-3, ham[8:], spam[:600] + 0.5, spam[600:]])
    assert sm_at_hm(is_spam, spread, 0.1) == pytest.approx(100.0 * 400 / 1000)


def test_sm_at_hm_needs_both_classes() -> None:
    with pytest.raises(ValueError):
        sm_at_hm(np.array([True, True]), np.array([1.0, 2.0]))


def test_windowed_roca_ranks_each_window_on_its_own() -> None:
    from spamfilter.tools.evaluation import WindowRoca, windowed_roca

    # window 1 (messages 0-3): spam 5, 1 vs ham 2, 0 -> pairs (5>2, 5>0, 1<2, 1>0): 3 of 4 -> 25%
    # window 2 (4-7): spam 9 vs ham 3, 9 (tie), 1 -> 1 + 0.5 + 1 of 3 -> 1-ROCA 16.67%
    # window 3 (8-9): two ham, no spam -> undefined
    is_spam = [True, False, True, False, False, True, False, False, False, False]
    score = [5.0, 2.0, 1.0, 0.0, 3.0, 9.0, 9.0, 1.0, 4.0, -4.0]
    got = windowed_roca(np.array(is_spam), np.array(score), 4)
    assert [(w.start, w.end, w.spam, w.ham) for w in got] == [(0, 4, 2, 2), (4, 8, 1, 3), (8, 10, 0, 2)]
    assert got[0].one_minus_roca == pytest.approx(25.0)
    assert got[1].one_minus_roca == pytest.approx(100 / 6)
    assert got[2] == WindowRoca(8, 10, 0, 2, None)


def test_default_window_is_ten_thousand_on_long_streams_and_a_fifth_on_short_ones() -> None:
    from spamfilter.tools.evaluation import default_window

    assert [default_window(n) for n in (1, 7, 6046, 19_999, 20_000, 75_419)] == [1, 2, 1210, 4000, 10_000, 10_000]


def test_windowed_roca_needs_a_positive_window() -> None:
    from spamfilter.tools.evaluation import windowed_roca

    with pytest.raises(ValueError):
        windowed_roca(np.array([True, False]), np.array([1.0, 0.0]), 0)
