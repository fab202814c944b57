"""Message features: computed in the tokenizer's pass, fixed order, fixed point."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from spamfilter.analysis import Analysed, Analyser
from spamfilter.answers import Refusal, Verdict
from spamfilter.config import Config, TokenizerConfig
from spamfilter.filter import Filter
from spamfilter.mail import MailItem, read_messages
from spamfilter.tokenizer.features import FEATURE_NAMES, SCALE

RAW = (
    b"Received: from a.example.org by b.example.net\n"
    b"Received: from c.example.org by a.example.org\n"
    b"Subject: hello\n"
    b"MIME-Version: 1.0\n"
    b'Content-Type: multipart/mixed; boundary="XX"\n'
    b"\n"
    b"--XX\n"
    b"Content-Type: text/plain\n"
    b"\n"
    b"BUY now at http://shop.example.com/x and http://shop.example.com/y\n"
    b"--XX\n"
    b"Content-Type: text/html\n"
    b"\n"
    b'<p>Abc <a href="https://other.test/z">here</a></p>\n'
    b"--XX\n"
    b"Content-Type: application/pdf\n"
    b'Content-Disposition: attachment; filename="a.pdf"\n'
    b"\n"
    b"JVBERi0=\n"
    b"--XX--\n"
)


def q(x: float) -> int:
    return round(x * SCALE)


def test_features_of_a_hand_made_message() -> None:
    a = Analyser(TokenizerConfig(), 10_000_000).one(MailItem("m", RAW))
    assert isinstance(a, Analysed)
    assert len(a.features) == len(FEATURE_NAMES) == 7
    # Body letters, URLs included: the plain part, then the HTML's "Abc here".
    plain = "BUY now at http://shop.example.com/x and http://shop.example.com/y"
    letters = sum(c.isascii() and c.isalpha() for c in plain) + len("Abchere")
    upper = 3 + 1
    assert letters == 56
    assert dict(zip(FEATURE_NAMES, a.features)) == {
        "size": q(math.log1p(len(RAW))),
        "urls": q(math.log1p(3)),
        # shop.example.com, example.com, other.test
        "url_hosts": q(math.log1p(3)),
        "html": q(1 / 2),
        "upper": q(upper / letters),
        "attachments": q(math.log1p(1)),
        "received": q(math.log1p(2)),
    }


def test_features_survive_the_worker_processes() -> None:
    items = [MailItem(f"m{i}", RAW + b"x" * i) for i in range(300)]
    from spamfilter.analysis import analyse

    analyser = Analyser(TokenizerConfig(), 10_000_000)
    here = list(analyse(analyser, items, jobs=1))
    there = list(analyse(analyser, items, jobs=2))
    assert here == there
    assert len({a.features for a in here if isinstance(a, Analysed)}) > 1


def test_classify_computes_the_features_only_when_a_setting_scores_them(sample_db: str, sample: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import spamfilter.analysis

    def refuse(*args: object) -> tuple[int, ...]:
        raise AssertionError("message_features was called")

    monkeypatch.setattr(spamfilter.analysis, "message_features", refuse)
    inbox = list(read_messages([str(sample / "inbox.mbox")]))
    assert len(inbox) == 20
    off = Config()
    with Filter.open(off, sample_db) as f:
        assert all(isinstance(v, Verdict) for v in f.classify(inbox))  # never called
    on = replace(off, model=replace(off.model, features=True))
    with Filter.open(on, sample_db) as f:
        results = list(f.classify(inbox))
    assert results and all(isinstance(r, Refusal) and "message_features was called" in r.reason for r in results)
