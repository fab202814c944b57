"""Gaussian message features end to end: stored sums, forget, mark, scoring."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from spamfilter.analysis import Analysed
from spamfilter.answers import Verdict
from spamfilter.config import Config, ConfigError, ModelConfig, validate
from spamfilter.filter import Filter
from spamfilter.nb import model
from spamfilter.nb.gaussian import feature_log_odds, gaussian_estimate
from spamfilter.tokenizer.features import FEATURE_NAMES, SCALE
from tests.filter.test_service import HAM, LABELLED, SPAM, UNSEEN, log_odds, open_filter, query


def sums(f: Filter) -> list[tuple[object, ...]]:
    return query(f.store, "SELECT label, feature, n, total, total_sq FROM feature_stats ORDER BY label, feature")


def vectors(f: Filter, items: list) -> list[tuple[int, ...]]:  # type: ignore[type-arg]
    out = [f.analyser.one(item) for item in items]
    return [a.features for a in out if isinstance(a, Analysed)]


def test_training_stores_the_integer_sums_of_the_vectors(tmp_path: Path) -> None:
    with open_filter(tmp_path, "a") as f:
        f.train(LABELLED)
        got = sums(f)
        for label, items in ((0, HAM), (1, SPAM)):
            x = np.array(vectors(f, items), dtype=np.int64)
            want = [(label, i, len(items), int(x[:, i].sum()), int((x[:, i] ** 2).sum())) for i in range(len(FEATURE_NAMES))]
            assert [r for r in got if r[0] == label] == want


def test_incremental_equals_batch_and_forget_restores_exactly(tmp_path: Path) -> None:
    with open_filter(tmp_path, "batch") as batch, open_filter(tmp_path, "one", batch_size=1) as one:
        batch.train(LABELLED)
        one.train(LABELLED)
        assert sums(batch) == sums(one)
        before = sums(batch)
        batch.train([(True, UNSEEN[1])])
        assert sums(batch) != before
        batch.forget([UNSEEN[1]])
        assert sums(batch) == before
        # mark moves the vector between the classes, and back.
        batch.mark([(True, HAM[0])])
        moved = {(r[0], r[1]): r[2] for r in sums(batch)}
        assert moved[(0, 0)] == len(HAM) - 1 and moved[(1, 0)] == len(SPAM) + 1
        batch.mark([(False, HAM[0])])
        assert sums(batch) == before


def test_features_add_the_gaussian_log_odds(tmp_path: Path) -> None:
    with open_filter(tmp_path, "plain") as plain:
        plain.train(LABELLED)
        base = log_odds(plain, UNSEEN)
        stats = [r for r in sums(plain)]
        x = np.array(vectors(plain, UNSEEN), dtype=np.float64) / SCALE
    with open_filter(tmp_path, "gauss", features=True, feature_weight=0.5) as g:
        g.train(LABELLED)
        with_features = log_odds(g, UNSEEN)
    n = np.zeros((2, 7), dtype=np.int64)
    total, total_sq = n.copy(), n.copy()
    for label, i, k, s1, s2 in stats:
        n[label, i], total[label, i], total_sq[label, i] = k, s1, s2  # type: ignore[index]
    params = gaussian_estimate(model.FeatureStats(n, total, total_sq), SCALE)
    expected = np.array(base) + feature_log_odds(x, params, 0.5).sum(axis=1)
    assert with_features == pytest.approx(expected.tolist(), rel=1e-12, abs=1e-12)
    assert with_features != pytest.approx(base)


def test_feature_weight_must_be_in_range() -> None:
    with pytest.raises(ConfigError, match="feature_weight"):
        validate(Config(model=replace(ModelConfig(), feature_weight=-1.0)))
    with pytest.raises(ConfigError, match="feature_weight"):
        validate(Config(model=replace(ModelConfig(), feature_weight=float("nan"))))


def test_explain_shows_each_feature_and_still_adds_up(tmp_path: Path) -> None:
    from spamfilter.tools.insight import Insight

    with open_filter(tmp_path, "gauss", features=True) as g:
        g.train(LABELLED)
        classified = log_odds(g, UNSEEN)
        for item, odds in zip(UNSEEN, classified):
            e = Insight(g).explain(item)
            shown = {c.token: c.contribution for c in e.tokens if c.token is not None and c.token.startswith("feature:")}
            assert sorted(shown) == sorted(f"feature:{name}" for name in FEATURE_NAMES)
            assert any(v != 0 for v in shown.values())
            assert e.prior + sum(c.contribution for c in e.tokens) == pytest.approx(e.log_odds, abs=1e-9)
            assert e.log_odds == pytest.approx(odds, abs=1e-9)
    with open_filter(tmp_path, "plain") as plain:
        plain.train(LABELLED)
        assert not any(c.token and c.token.startswith("feature:") for c in Insight(plain).explain(UNSEEN[0]).tokens)


def test_a_message_reads_the_same_after_filter_added_its_fields(tmp_path: Path) -> None:
    # The fields `filter` adds (about 150 bytes) moved a long message's
    # max_bytes window and changed its size feature: trained from the folder
    # it was filtered into, it taught other tokens and features than it came
    # with, and scored otherwise (+5.66 against +7.22 with features on).
    from spamfilter.mail import MailItem, filter_fields, with_filter_headers

    words = " ".join(f"word{i}" for i in range(60_000)).encode()
    long = MailItem("long", b"From: a@b.example\nSubject: a long one\n\n" + words + b"\n")
    small = UNSEEN[0]
    with open_filter(tmp_path, "f", features=True) as f:
        f.train(LABELLED)
        for item in (long, small):
            (verdict,) = f.classify([item])
            assert isinstance(verdict, Verdict)
            fields = filter_fields(verdict.verdict, verdict.score, verdict.log_odds, "multinomial-binary")
            filtered = MailItem("filtered", with_filter_headers(item.raw, fields))
            assert filtered.raw != item.raw and filtered.digest == item.digest
            assert f.tokens(filtered) == f.tokens(item)
            assert log_odds(f, [filtered]) == log_odds(f, [item])
