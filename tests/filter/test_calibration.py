"""Calibration figures (spamfilter.nb.calibration) and the train-once split protocol."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit, logit
from typer.testing import CliRunner

from spamfilter.answers import Verdict
from spamfilter.cli import app
from spamfilter.config import Config, TrainMode
from spamfilter.filter import Filter
from spamfilter.filter.training import Training
from spamfilter.mail import MailItem, read_index
from spamfilter.nb.calibration import MAP_BINS, MAP_EDGES, PRIOR_BOUND, PRIOR_WEIGHT, CalibrationMap, calibration, log_loss, recorded, reliability, score_bins
from tests.tools.test_evaluate import index  # noqa: F401  (the sample index fixture)


def test_log_loss_is_the_mean_negative_log_probability_of_the_true_class() -> None:
    y = np.array([True, False, True])
    odds = np.array([2.0, -1.0, -3.0])
    expected = (math.log1p(math.exp(-2.0)) + math.log1p(math.exp(-1.0)) + math.log1p(math.exp(3.0))) / 3
    assert log_loss(y, odds) == pytest.approx(expected, rel=1e-12)


def test_log_loss_charges_a_confident_error_its_log_odds_without_overflow() -> None:
    assert log_loss(np.array([True]), np.array([-900.0])) == pytest.approx(900.0, rel=1e-12)
    assert log_loss(np.array([False]), np.array([-900.0])) == pytest.approx(0.0, abs=1e-300)


def test_tails_count_what_they_hold_and_each_class_share() -> None:
    # P: 0.001 (ham), 0.005 (spam), 0.5 (ham), 0.995 (spam), 0.999 (ham), 0.9999 (spam)
    p = np.array([0.001, 0.005, 0.5, 0.995, 0.999, 0.9999])
    y = np.array([False, True, False, True, False, True])
    c = calibration(y, np.log(p) - np.log1p(-p))
    assert (c.low_tail, c.high_tail) == (2, 3)
    assert c.low_tail_spam_pct == pytest.approx(50.0)
    assert c.ham_in_low_tail_pct == pytest.approx(100 / 3)
    assert c.high_tail_ham_pct == pytest.approx(100 / 3)
    assert c.spam_in_high_tail_pct == pytest.approx(200 / 3)
    assert c.brier == pytest.approx(float(np.mean((p - y) ** 2)), rel=1e-9)


def test_a_score_at_the_bound_counts_in_its_tail_and_bin() -> None:
    # The score's bound comes back from expit as 0.010000000000000002 (and
    # its mirror): printed 0.01, so in the "<= 0.01" tail and its bin.
    bound = np.array([-PRIOR_BOUND, PRIOR_BOUND])
    assert expit(-PRIOR_BOUND) > 0.01
    c = calibration(np.array([True, False]), bound)
    assert (c.low_tail, c.high_tail) == (1, 1)
    assert (c.low_tail_spam_pct, c.high_tail_ham_pct) == (100.0, 100.0)
    counts = [(b.low, b.high, b.messages) for b in reliability(np.array([True, False]), expit(bound)) if b.messages]
    assert counts == [(0.001, 0.01, 1), (0.9, 0.99, 1)]


def test_reliability_bins_cover_every_message_once_and_ece_weighs_them() -> None:
    rng = np.random.default_rng(3)
    p = rng.uniform(size=500)
    y = rng.uniform(size=500) < p
    bins = reliability(y, p)
    assert sum(b.messages for b in bins) == 500
    assert sum(b.spam for b in bins) == int(y.sum())
    c = calibration(y, np.log(p) - np.log1p(-p))
    by_hand = sum(b.messages * abs(b.mean_probability - b.spam / b.messages) for b in bins if b.messages) / 500
    assert c.ece == pytest.approx(by_hand, rel=1e-9)
    # a perfectly calibrated source stays well within the sampling noise
    assert c.ece < 0.1


def test_split_protocol_equals_train_then_classify_by_hand(index: Path) -> None:  # noqa: F811
    stream = list(read_index(str(index)))
    result = CliRunner().invoke(
        app, ["evaluate", "--index", str(index), "--protocol", "split", "--head", "40", "--format", "json", "--out", str(index.parent / "split.tsv")]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    with Filter.open(Config(), "sqlite://") as f:
        f.train(stream[:40])
        verdicts = [v for v in f.classify(item for _, item in stream[40:])]
    assert all(isinstance(v, Verdict) for v in verdicts)
    rows = (index.parent / "split.tsv").read_text().splitlines()[1:]
    assert [float(r.split("\t")[3]) for r in rows] == [v.log_odds for v in verdicts if isinstance(v, Verdict)]
    assert report["trained"] == 40 and report["protocol"] == "split 40"
    y = np.array([s for s, _ in stream[40:]])
    odds = np.array([v.log_odds for v in verdicts if isinstance(v, Verdict)])
    scores = np.array([v.score for v in verdicts if isinstance(v, Verdict)])
    assert report["raw_log_loss"] == pytest.approx(log_loss(y, odds), rel=1e-12)
    assert report["calibration"]["log_loss"] == pytest.approx(log_loss(y, logit(scores)), rel=1e-9)
    assert sum(b["messages"] for b in report["calibration"]["bins"]) == 20


def test_split_protocol_refuses_a_head_that_leaves_nothing_to_classify(index: Path) -> None:  # noqa: F811
    result = CliRunner().invoke(app, ["evaluate", "--index", str(index), "--protocol", "split", "--head", "60"])
    assert result.exit_code == 65, result.output
    assert "leaves nothing" in result.output


# -- the map from log-odds to a calibrated P(spam) ----------------------------

CENTRES = np.concatenate([[MAP_EDGES[0] - 0.5], (MAP_EDGES[:-1] + MAP_EDGES[1:]) / 2, [MAP_EDGES[-1] + 0.5]])


def test_with_no_history_the_score_is_the_models_own_probability_bounded() -> None:
    m = CalibrationMap()
    odds = np.array([-200.0, -31.0, -4.0, -1.0, 0.0, 2.0, 3.0, 31.0, 200.0])
    # at the bins' centres exactly; beyond the outer centres the ends hold
    assert m.probability(odds) == pytest.approx(expit(np.clip(odds, -PRIOR_BOUND, PRIOR_BOUND)), rel=1e-12)
    assert m.probability(np.array([1e6]))[0] == pytest.approx(0.99, rel=1e-12)
    assert m.probability(np.array([-1e6]))[0] == pytest.approx(0.01, rel=1e-12)


def test_a_thick_bin_gives_the_share_of_spam_seen_there_with_the_prior_added() -> None:
    w = np.zeros((2, MAP_BINS))
    b = int(score_bins(np.array([0.0]))[0])
    w[0, b], w[1, b] = 160.0, 240.0  # at log-odds 0, 60% was spam (between the neighbours' 0.27 and 0.73)
    p = CalibrationMap(w).probability(np.array([CENTRES[b]]))[0]
    assert p == pytest.approx((240.0 + PRIOR_WEIGHT * 0.5) / (400.0 + PRIOR_WEIGHT), rel=1e-12)
    # n spam and no ham at the top: P(ham) is the prior's share, bounded
    w = np.zeros((2, MAP_BINS))
    w[1, -1] = 1000.0
    top = CalibrationMap(w).probability(np.array([500.0]))[0]
    assert 1.0 - top == pytest.approx(PRIOR_WEIGHT * 0.01 / (1000.0 + PRIOR_WEIGHT), rel=1e-9)


def test_the_map_is_non_decreasing_whatever_the_history() -> None:
    rng = np.random.default_rng(5)
    grid = np.linspace(-40, 40, 2001)
    for _ in range(20):
        w = rng.exponential(5.0, size=(2, MAP_BINS)) * (rng.random((2, MAP_BINS)) < 0.5)
        p = CalibrationMap(w).probability(grid)
        assert (np.diff(p) >= -1e-15).all()
        assert ((p > 0) & (p < 1)).all()


def test_pool_adjacent_violators_averages_a_bin_that_contradicts_its_neighbour() -> None:
    w = np.zeros((2, MAP_BINS))
    lo, hi = (int(b) for b in score_bins(np.array([1.0, 2.0])))
    w[1, lo], w[0, lo] = 98.0, 0.0  # at 1 nat all spam ...
    w[1, hi], w[0, hi] = 0.0, 98.0  # ... at 2 nats all ham: pooled
    p = CalibrationMap(w).probability(np.array([CENTRES[lo], CENTRES[hi]]))
    pooled = (98.0 + PRIOR_WEIGHT * (expit(CENTRES[lo]) + expit(CENTRES[hi]))) / (2 * (98.0 + PRIOR_WEIGHT))
    assert p == pytest.approx([pooled, pooled], rel=1e-12)


def test_recording_in_one_batch_equals_recording_one_message_at_a_time() -> None:
    rng = np.random.default_rng(2)
    odds = rng.normal(0, 15, 300)
    y = rng.random(300) < 0.4
    W = rng.random((2, MAP_BINS))
    decay, added = recorded(odds, y, half_life=50.0)
    one = W.copy()
    for i in range(300):
        d, a = recorded(odds[i : i + 1], y[i : i + 1], half_life=50.0)
        one = d * one + a
    assert decay * W + added == pytest.approx(one, rel=1e-12)
    assert decay == pytest.approx(0.5**6, rel=1e-12)
    assert added.sum() == pytest.approx(sum(0.5 ** (k / 50.0) for k in range(300)), rel=1e-12)


@pytest.fixture(scope="module")
def spamassassin(corpora_dir: Path) -> list[tuple[bool, MailItem]]:
    """600 spamassassin messages, a spam and a ham in turn, in the index's order."""
    stream = list(read_index(str(corpora_dir / "spamassassin" / "index")))
    spam, ham = [x for x in stream if x[0]][:300], [x for x in stream if not x[0]][:300]
    return [x for pair in zip(spam, ham) for x in pair]


def test_train_records_each_batch_as_the_model_before_it_scored_it(any_db_url: str, spamassassin: list[tuple[bool, MailItem]]) -> None:
    config = Config()
    config = replace(config, store=replace(config.store, batch_size=100))
    with Filter.open(config, any_db_url) as f:
        f.train(spamassassin[:100])
        with f.store.begin(write=False) as tx:
            assert not tx.calibration_history(MAP_BINS).any()  # the first batch had no model to score it
            n = int(tx.totals().messages.sum())
        before = [v for v in f.classify(item for _, item in spamassassin[100:200])]
        f.train(spamassassin[100:200])
        with f.store.begin(write=False) as tx:
            history = tx.calibration_history(MAP_BINS)
            grown = n / int(tx.totals().messages.sum())
    odds = np.array([v.log_odds for v in before if isinstance(v, Verdict)])
    y = np.array([s for s, _ in spamassassin[100:200]])
    # the model went from 100 messages to 200: what the 100-message model
    # said weighs half as much as the model now
    assert grown == pytest.approx(0.5)
    _, expected = recorded(odds, y, grown=grown)
    assert history == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert history.sum() == pytest.approx(recorded(odds, y)[1].sum() / 2, rel=1e-9)
    with Filter.open(config, any_db_url) as f:
        assert f.stats().calibration_messages == pytest.approx(float(expected.sum()), rel=1e-9)
    assert history[1].sum() > 0 and history[0].sum() > 0


def test_scores_are_read_off_the_history_and_the_verdict_decided_on_them(tmp_path: Path, spamassassin: list[tuple[bool, MailItem]]) -> None:
    config = Config()
    config = replace(config, store=replace(config.store, batch_size=100))
    with Filter.open(config, f"sqlite:///{tmp_path / 'c.db'}") as f:
        f.train(spamassassin[:500])
        with f.store.begin(write=False) as tx:
            calibrated = CalibrationMap(tx.calibration_history(MAP_BINS))
        verdicts = [v for v in f.classify(item for _, item in spamassassin[500:600]) if isinstance(v, Verdict)]
        # mark records nothing
        f.mark([(not s, item) for s, item in spamassassin[:20]])
        with f.store.begin(write=False) as tx:
            assert (tx.calibration_history(MAP_BINS) == calibrated.weights).all()
    odds = np.array([v.log_odds for v in verdicts])
    scores = np.array([v.score for v in verdicts])
    assert scores == pytest.approx(calibrated.probability(odds), rel=1e-12)
    assert scores.max() < 1.0 and scores.min() > 0.0
    assert (np.abs(odds) > 40).any()  # raw log-odds that expit would round to 0 or 1
    t = f.thresholds
    expected = ["spam" if x > t.spam_min else "ham" if x <= t.ham_max else "unsure" for x in calibrated.log_odds(odds)]
    assert [v.verdict.value for v in verdicts] == expected
    # The same cut on the raw log-odds, where the report draws it.
    ham_below, spam_above = f.log_odds_bounds()
    assert [v.verdict.value for v in verdicts] == ["spam" if x > spam_above else "ham" if x <= ham_below else "unsure" for x in odds]
    assert ham_below < spam_above


def test_mark_moves_what_is_left_of_a_messages_record_entry_and_forget_takes_it_out(any_db_url: str, spamassassin: list[tuple[bool, MailItem]]) -> None:
    # A message trained with the wrong label stayed in the record under that
    # label after `mark` corrected it (and after `forget`), for good when
    # nothing more is recorded: a spam trained as ham kept ham at high
    # log-odds, where the score should be near 1.
    config = Config()
    config = replace(config, store=replace(config.store, batch_size=100))
    with Filter.open(config, any_db_url) as f:
        f.train(spamassassin[:300])  # the last two batches recorded
        with f.store.begin(write=False) as tx:
            before, clock = tx.calibration_history(MAP_BINS), tx.record_clock()
        assert before[0].sum() > 30 and before[1].sum() > 30 and clock < 0
        f.mark([(not s, item) for s, item in spamassassin[:300]])
        with f.store.begin(write=False) as tx:
            swapped = tx.calibration_history(MAP_BINS)
            assert tx.record_clock() == clock  # moving is no decay
        # every recorded message moved to the other class, in its own bin
        assert swapped == pytest.approx(before[::-1], rel=1e-9, abs=1e-12)
        f.mark(spamassassin[:300])
        with f.store.begin(write=False) as tx:
            assert tx.calibration_history(MAP_BINS) == pytest.approx(before, rel=1e-9, abs=1e-12)
        forgotten = f.forget(item for _, item in spamassassin[100:200])
        with f.store.begin(write=False) as tx:
            after = tx.calibration_history(MAP_BINS)
    assert forgotten.forgotten == 100
    # What the second batch left (its weight, then decayed by the third's
    # recording) is gone; the third batch's entries stay as they were.
    assert after.sum() == pytest.approx(before.sum() - _left_of_second_batch(spamassassin, config), rel=1e-6)
    assert (after <= before + 1e-12).all() and after.sum() > 0


def test_a_forget_and_a_recording_run_at_once_leave_no_weight_below_zero(
    any_db_url: str, spamassassin: list[tuple[bool, MailItem]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # On PostgreSQL a run that only recorded scores (train --train-mode toe
    # on mail it classifies right) could commit its decay between forget's
    # read of the record and its write: forget then took out the entries'
    # weights as they were before the decay, bins went below zero, and
    # scores came out NaN.
    import threading

    from spamfilter.filter import scoring

    config = Config()
    config = replace(config, store=replace(config.store, batch_size=100))
    with Filter.open(config, any_db_url) as f:
        f.train(spamassassin[:200])
        later = spamassassin[200:300]
        # mail the model calls right: a toe run records it and learns none
        right = [
            (s, item) for (s, item), v in zip(later, f.classify(item for _, item in later)) if isinstance(v, Verdict) and v.verdict.value == ("spam" if s else "ham")
        ]
    assert len(right) > 50
    other_done = threading.Event()

    def record_elsewhere() -> None:
        with Filter.open(config, any_db_url) as g:
            g.train(right, train_mode=TrainMode.toe)
        other_done.set()

    other = threading.Thread(target=record_elsewhere)
    real = scoring.moved_entries

    def between(*args: object) -> object:
        # forget has read the record: the other run records now, if it can
        if not other.is_alive() and not other_done.is_set():
            other.start()
            other_done.wait(3.0)  # it cannot while forget holds the record
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(scoring, "moved_entries", between)
    with Filter.open(config, any_db_url) as f:
        f.forget(item for _, item in spamassassin[100:200])
    other.join(60)
    assert other_done.is_set()
    with Filter.open(config, any_db_url) as f, f.store.begin(write=False) as tx:
        with f.store.engine.connect() as conn:
            import sqlalchemy as sa

            assert conn.execute(sa.text("SELECT min(weight) FROM calibration WHERE label < 2")).scalar() >= -1e-12
        history = tx.calibration_history(MAP_BINS)
    assert np.isfinite(CalibrationMap(history).bin_log_odds).all()


def _left_of_second_batch(spamassassin: list[tuple[bool, MailItem]], config: Config) -> float:
    """The total weight the second of three training batches of 100 has in
    the record after the third: its entries' weights (the model grew from
    100 to 200 messages), decayed by the third batch's recording (from 200
    to 300)."""
    from spamfilter.nb.calibration import entry_weights

    return float(entry_weights(100, grown=100 / 200).sum() * (200 / 300) * 0.5 ** (100 / 1000.0))


def test_an_online_run_keeps_the_record_entry_of_each_message_it_trains(tmp_path: Path, spamassassin: list[tuple[bool, MailItem]]) -> None:
    with Filter.open(Config(), f"sqlite:///{tmp_path / 'c.db'}") as f:
        steps = list(f.learn_online(spamassassin[:150]))
        trained = [item for (_, item), s in zip(spamassassin[:150], steps) if s.trained]
        f.forget(trained)
        with f.store.begin(write=False) as tx:
            history = tx.calibration_history(MAP_BINS)
    # Forgetting every message the run learned leaves the record of those it
    # only scored, as decayed by every message recorded since.
    kept = np.zeros((2, MAP_BINS))
    scored = 0
    for s in steps:
        if isinstance(s.result, Verdict) and (s.result.log_odds != 0.0 or s.result.score != 0.5):
            d, a = recorded(np.array([s.result.log_odds]), np.array([s.is_spam]))
            kept = d * kept + (0.0 if s.trained else a)
            scored += 1
    assert scored > 100 and 10 < len(trained) < scored
    assert history == pytest.approx(kept, rel=1e-9, abs=1e-12)


def test_raw_bound_reads_a_cutoff_on_the_score_back_as_raw_log_odds() -> None:
    rng = np.random.default_rng(3)
    history = rng.integers(0, 30, size=(2, MAP_BINS)).astype(np.float64)
    history[0] = np.sort(history[0])[::-1]  # ham mostly at low log-odds,
    history[1] = np.sort(history[1])  # spam at high ones
    history[0, -15:] = history[1, :15] = 0
    m = CalibrationMap(history)
    raw = np.linspace(-40.0, 40.0, 80_001)
    calibrated = m.log_odds(raw)
    for cut in (-3.0, -1.39, 0.0, 2.0, 3.89):
        bound = m.raw_bound(cut)
        assert calibrated.min() < cut < calibrated.max() and math.isfinite(bound)
        assert (calibrated[raw > bound + 1e-9] > cut).all()
        assert (calibrated[raw < bound - 1e-3] <= cut + 1e-12).all()
    # No history: the model's own probability, bounded to [0.01, 0.99].
    empty = CalibrationMap()
    assert empty.raw_bound(logit(0.98)) == pytest.approx(logit(0.98), abs=1e-9)
    assert empty.raw_bound(logit(0.995)) == math.inf  # the map never says more than 0.99
    assert empty.raw_bound(logit(0.001)) == -math.inf  # nor less than 0.01


def test_an_online_run_records_every_scored_message_trained_or_not(tmp_path: Path, spamassassin: list[tuple[bool, MailItem]]) -> None:
    with Filter.open(Config(), f"sqlite:///{tmp_path / 'c.db'}") as f:
        steps = list(f.learn_online(spamassassin[:150]))
        with f.store.begin(write=False) as tx:
            history = tx.calibration_history(MAP_BINS)
    scored = [s for s in steps if isinstance(s.result, Verdict) and (s.result.log_odds != 0.0 or s.result.score != 0.5)]
    assert sum(not s.trained for s in scored) > 10  # the tune rule skipped some: they are recorded too
    W = np.zeros((2, MAP_BINS))
    for s in scored:
        assert isinstance(s.result, Verdict)
        d, a = recorded(np.array([s.result.log_odds]), np.array([s.is_spam]))
        W = d * W + a
    assert history == pytest.approx(W, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("mode", [TrainMode.toe, TrainMode.tune])
def test_messages_the_model_holds_are_not_recorded_again(tmp_path: Path, spamassassin: list[tuple[bool, MailItem]], mode: TrainMode) -> None:
    # train --train-mode toe|tune over mail trained before recorded each
    # message again, at the score of a model that had learned it: the
    # counts stayed, the scores and verdicts moved.
    with Filter.open(Config(), f"sqlite:///{tmp_path / 'c.db'}") as f:
        f.train(spamassassin[:60])
        f.train(spamassassin[60:120])  # scored by the first 60, and recorded
        with f.store.begin(write=False) as tx:
            before = tx.calibration_history(MAP_BINS)
        again = f.train(spamassassin[:120], train_mode=mode)
        flipped = f.train([(not s, item) for s, item in spamassassin[:3]], train_mode=mode)
        with f.store.begin(write=False) as tx:
            after = tx.calibration_history(MAP_BINS)
    assert before.any()
    assert (after == before).all()
    assert (again.unchanged, again.skipped, again.trained_ham + again.trained_spam) == (120, 0, 0)
    assert (flipped.conflicts, flipped.skipped) == (3, 0)


@pytest.mark.parametrize("unseen_weight", [0.0, 0.5])
def test_the_record_read_off_the_write_equals_scoring_before_it(
    tmp_path: Path, spamassassin: list[tuple[bool, MailItem]], monkeypatch: pytest.MonkeyPatch, unseen_weight: float
) -> None:
    config = Config()
    config = replace(config, store=replace(config.store, batch_size=100), model=replace(config.model, unseen_weight=unseen_weight))
    histories = []
    for from_write in (True, False):
        monkeypatch.setattr(Training, "_records_from_write", lambda self, owner, answer=from_write: answer)
        with Filter.open(config, f"sqlite:///{tmp_path / f'{from_write}.db'}") as f:
            f.train(spamassassin[:400])
            with f.store.begin(write=False) as tx:
                histories.append(tx.calibration_history(MAP_BINS))
    # three batches of 100 recorded, each weighed by the size of the model
    # that scored it against the 400 now: 100 / 400 + 200 / 400 + 300 / 400
    # = 150 messages' weight before the half-life's decay
    assert 130 < histories[0].sum() < 150
    assert histories[0] == pytest.approx(histories[1], rel=1e-9, abs=1e-12)


def test_a_record_of_other_settings_is_not_read_and_the_next_recording_starts_it_afresh(any_db_url: str, spamassassin: list[tuple[bool, MailItem]]) -> None:
    # The record maps log-odds of the settings it was written under: read
    # for another event model's log-odds (+22 for a ham-like message under
    # bernoulli) it gave scores that meant nothing.
    config = Config()
    config = replace(config, store=replace(config.store, batch_size=100))
    other = replace(config, model=replace(config.model, event_model="bernoulli", alpha=0.5))
    probe = [item for _, item in spamassassin[400:460]]
    with Filter.open(config, any_db_url) as f:
        f.train(spamassassin[:300])
        kept = f.stats()
        with f.store.begin(write=False) as tx:
            before = tx.calibration_history(MAP_BINS)
    assert kept.calibration_messages > 0 and kept.calibration_changed == ()
    with Filter.open(other, any_db_url) as g:
        changed = g.stats()
        verdicts = [v for v in g.classify(probe) if isinstance(v, Verdict)]
        # not read: the model's own probability, bounded, as with no record
        assert [v.score for v in verdicts] == pytest.approx(CalibrationMap().probability(np.array([v.log_odds for v in verdicts])).tolist(), rel=1e-12)
        assert changed.calibration_changed == ("model.alpha: 0.1 -> 0.5", "model.event_model: multinomial-binary -> bernoulli")
        assert changed.calibration_messages == 0.0
        with g.store.begin(write=False) as tx:  # kept until recording starts afresh
            assert tx.calibration_history(MAP_BINS) == pytest.approx(before, rel=1e-9, abs=1e-12)
        scored = [v.log_odds for v in g.classify(item for _, item in spamassassin[300:400])]
        g.train(spamassassin[300:400])
        with g.store.begin(write=False) as tx:
            fresh = tx.calibration_history(MAP_BINS)
        assert g.stats().calibration_changed == ()
    # Started afresh: the history holds the new batch alone.
    _, expected = recorded(np.array(scored), np.array([s for s, _ in spamassassin[300:400]]), grown=300 / 400)
    assert fresh == pytest.approx(expected, rel=1e-9, abs=1e-12)
    # ... and the old settings now find it stale in turn.
    with Filter.open(config, any_db_url) as f:
        assert f.stats().calibration_changed == ("model.alpha: 0.5 -> 0.1", "model.event_model: bernoulli -> multinomial-binary")
        # The messages trained before the change lost their entries: a
        # forget of one takes nothing from the new history.
        f.forget([spamassassin[10][1]])
        with f.store.begin(write=False) as tx:
            assert tx.calibration_history(MAP_BINS) == pytest.approx(fresh, rel=1e-9, abs=1e-12)


def test_changed_settings_names_what_differs_and_takes_a_record_of_unknown_settings_as_current() -> None:
    from spamfilter.filter.scoring import changed_settings, record_settings

    now = record_settings(Config())
    assert changed_settings(None, now) == [] and changed_settings(now, now) == []
    then = json.loads(now)
    then["model.tempering"] = 0.5
    del then["tokenizer.bigrams"]  # a setting added since: it had its default
    assert changed_settings(json.dumps(then), now) == ["model.tempering: 0.5 -> 0.55"]
    # ... so moving it off its default is a change.
    lists = record_settings(replace(Config(), tokenizer=replace(Config().tokenizer, list_header_words=True)))
    del then["tokenizer.list_header_words"]
    assert changed_settings(json.dumps(then), lists) == ["model.tempering: 0.5 -> 0.55", "tokenizer.list_header_words: False -> True"]
    # Settings that change no log-odds under the others are left out.
    m = Config().model
    for inert in (replace(m, reselect_growth=4.0), replace(m, feature_weight=0.5), replace(m, aode_min_support=5), replace(m, header_apart=False, header_max_tokens=3)):
        assert (
            changed_settings(record_settings(replace(Config(), model=inert)), record_settings(replace(Config(), model=replace(m, header_apart=inert.header_apart)))) == []
        )
    assert changed_settings(now, record_settings(replace(Config(), model=replace(m, features=True, feature_weight=0.5)))) == [
        "model.feature_weight: 1.0 -> 0.5",
        "model.features: False -> True",
    ]


def test_db_export_carries_the_record_s_settings_and_import_keeps_them(tmp_path: Path, spamassassin: list[tuple[bool, MailItem]]) -> None:
    # Without them an exported record of other settings was read as the
    # current one's after `db import`.
    from spamfilter.errors import CountsFileError
    from spamfilter.tools.maintenance import Maintenance

    config = Config()
    config = replace(config, store=replace(config.store, batch_size=100))
    other = replace(config, model=replace(config.model, alpha=0.5))
    url, counts = f"sqlite:///{tmp_path / 'a.db'}", tmp_path / "counts.tsv"
    with Filter.open(other, url) as f:
        f.train(spamassassin[:300])
        with counts.open("w") as out:
            Maintenance(f.store).export_counts(out)
    assert '# record-settings {"model.alpha": 0.5' in counts.read_text()
    with Filter.open(config, f"sqlite:///{tmp_path / 'b.db'}") as g:
        with counts.open() as lines:
            Maintenance(g.store).import_counts(lines, replace=True)
        assert g.stats().calibration_changed == ("model.alpha: 0.5 -> 0.1",)
        # A model with a record of its own settings cannot add this one.
        g.train(spamassassin[300:400])
        before = g.stats()
        with counts.open() as lines, pytest.raises(CountsFileError, match=r"written under other settings than this model's \(model.alpha: 0.1 -> 0.5\)"):
            Maintenance(g.store).import_counts(lines, replace=False)
        assert g.stats() == before
