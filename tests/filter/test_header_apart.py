"""[model] header_apart end to end: classify, explain and tune score header lines apart."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from spamfilter.answers import Verdict
from spamfilter.config import Config, ModelConfig, StoreConfig
from spamfilter.filter import Filter
from spamfilter.nb import model
from spamfilter.tokenizer import is_header_line
from spamfilter.tools.insight import Insight
from spamfilter.tools.maintenance import Maintenance
from tests.filter.test_dependence import sample_mail


def open_filter(url: str, **model_keys: object) -> Filter:
    return Filter.open(Config(store=StoreConfig(url=url), model=replace(ModelConfig(), **model_keys)))  # type: ignore[arg-type]


def test_classify_and_explain_score_the_header_lines_apart(tmp_path: Path, sample: Path) -> None:
    labelled, inbox = sample_mail(sample)
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with open_filter(url) as f:
        f.train(labelled)
        joint = [v.log_odds for v in f.classify(inbox) if isinstance(v, Verdict)]
    with open_filter(url, header_apart=True, header_max_tokens=3) as f:
        verdicts = [v for v in f.classify(inbox) if isinstance(v, Verdict)]
        m = f.config.model
        for item, verdict in zip(inbox[:5], verdicts):
            counts = f.analyser.one(item).counts  # type: ignore[union-attr]
            fitted = f.scoring.fit([counts])
            tokens = fitted.tokens
            d = fitted.params.weight[model.SPAM] - fitted.params.weight[model.HAM]
            head = np.array([is_header_line(t) for t in tokens])
            strongest = np.flatnonzero(head)[np.argsort(-np.abs(d[head]), kind="stable")][:3]
            rest = np.flatnonzero(~head)
            prior = fitted.params.log_prior[model.SPAM] - fitted.params.log_prior[model.HAM]
            want = prior + d[rest].sum() * len(rest) ** -m.tempering + d[strongest].sum() * max(len(strongest), 1) ** -m.tempering
            assert verdict.log_odds == pytest.approx(want, abs=1e-9)
            e = Insight(f).explain(item)
            assert e.log_odds == pytest.approx(verdict.log_odds, abs=1e-12)
            assert e.prior + sum(c.contribution for c in e.tokens) == pytest.approx(e.log_odds, abs=1e-9)
    assert all(a != b for a, b in zip(joint, [v.log_odds for v in verdicts]))


def test_a_dependence_model_scores_with_one_tempering_whatever_header_apart_says(tmp_path: Path, sample: Path) -> None:
    labelled, inbox = sample_mail(sample)
    url = f"sqlite:///{tmp_path / 'a.db'}"
    got = {}
    for apart in (False, True):
        with open_filter(url, dependence="aode", header_apart=apart, aode_parents=12, aode_children=300, aode_min_support=3) as f:
            if not apart:
                f.train(labelled)
                Maintenance(f.store).reselect(f.config.model)
            got[apart] = [v.log_odds for v in f.classify(inbox) if isinstance(v, Verdict)]
    assert got[False] == got[True]


def test_words_the_model_never_saw_make_a_message_less_sure_only_with_an_unseen_weight(tmp_path: Path, sample: Path) -> None:
    from spamfilter.cli.insight import explanation_lines
    from spamfilter.mail import MailItem

    labelled, inbox = sample_mail(sample)
    url = f"sqlite:///{tmp_path / 'u.db'}"
    plain = inbox[0]
    novel = " ".join(f"zqx{chr(97 + i)}vbn" for i in range(20))
    padded = MailItem("padded", plain.raw.rstrip(b"\n") + f"\n{novel}\n".encode())
    odds = {}
    for weight in (0.0, 1.0):
        with open_filter(url, unseen_weight=weight) as f:
            if weight == 0.0:
                f.train(labelled)
            odds[weight] = [v.log_odds for v in f.classify([plain, padded]) if isinstance(v, Verdict)]
            e = Insight(f).explain(padded)
            assert e.log_odds == pytest.approx(odds[weight][1], abs=1e-12)
            assert e.prior + sum(c.contribution for c in e.tokens) == pytest.approx(e.log_odds, abs=1e-9)
            assert e.unknown >= 20
            assert ("weighted 1 in the size" in explanation_lines(e)[4]) == (weight == 1.0)
    prior = e.prior
    # Without the weight the new words are ignored: the same log-odds to the bit.
    assert odds[0.0][0] == odds[0.0][1]
    # With it they count in the body's size: the padded message is less sure.
    assert abs(odds[1.0][1] - prior) < abs(odds[1.0][0] - prior)
