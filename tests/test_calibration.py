"""Calibration figures (spamfilter.nb.calibration) and the train-once split protocol."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spamfilter.cli import app
from spamfilter.config import Config
from spamfilter.mail import read_index
from spamfilter.nb.calibration import calibration, log_loss, reliability
from spamfilter.service import Filter, Verdict
from tests.test_evaluate import index  # noqa: F401  (the sample index fixture)


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
    assert report["calibration"]["log_loss"] == pytest.approx(log_loss(y, odds), rel=1e-12)
    assert sum(b["messages"] for b in report["calibration"]["bins"]) == 20


def test_split_protocol_refuses_a_head_that_leaves_nothing_to_classify(index: Path) -> None:  # noqa: F811
    result = CliRunner().invoke(app, ["evaluate", "--index", str(index), "--protocol", "split", "--head", "60"])
    assert result.exit_code == 65, result.output
    assert "leaves nothing" in result.output
