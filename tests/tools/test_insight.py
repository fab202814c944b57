"""top-words, explain and their plots: hand-computed rankings, explanations
that add up to the classifier's own log-odds, and the command-line shapes.

The tiny model (header tokens and bigrams off, so the only meta token is
``content-type:text/plain``, "ct" below), 3 spam and 4 ham bodies:

    spam  cash prize cash cash | cash winner | cash prize money
    ham   meeting notes today agenda | lunch meeting | lunch money | notes

    token    D spam  D ham   N spam  N ham      (D: messages containing it, N: occurrences)
    ct          3      4        3      4
    cash        3      0        5      0
    prize       2      0        2      0
    winner      1      0        1      0
    money       1      1        1      1
    meeting     0      2        0      2
    notes       0      2        0      2
    today       0      1        0      1
    agenda      0      1        0      1
    lunch       0      2        0      2

    V = 10; messages 3 / 4; sum of D: spam 10, ham 13; sum of N: spam 12, ham 13.
"""

from __future__ import annotations

import csv
import io
import json
import math
import struct
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spamfilter.answers import Verdict
from spamfilter.cli import app, exitcodes
from spamfilter.cli.insight import explanation_lines
from spamfilter.config import Config, ModelConfig, StoreConfig, TokenizerConfig
from spamfilter.errors import NotTrainedError
from spamfilter.filter import Filter
from spamfilter.mail import MailItem, read_messages
from spamfilter.tools.insight import Insight
from spamfilter.tools.report import printable

REPO = Path(__file__).resolve().parents[2]
EVENT_MODELS = ["bernoulli", "multinomial", "multinomial-binary"]

SPAM_BODIES = ["cash prize cash cash", "cash winner", "cash prize money"]
HAM_BODIES = ["meeting notes today agenda", "lunch meeting", "lunch money", "notes"]
CT = "content-type:text/plain"
# token: (D spam, D ham, N spam, N ham), counted by hand from the bodies above
COUNTS = {
    CT: (3, 4, 3, 4),
    "cash": (3, 0, 5, 0),
    "prize": (2, 0, 2, 0),
    "winner": (1, 0, 1, 0),
    "money": (1, 1, 1, 1),
    "meeting": (0, 2, 0, 2),
    "notes": (0, 2, 0, 2),
    "today": (0, 1, 0, 1),
    "agenda": (0, 1, 0, 1),
    "lunch": (0, 2, 0, 2),
}
MESSAGES = (3, 4)  # spam, ham
SUM_D = (10, 13)
SUM_N = (12, 13)
V = 10


def body(text: str) -> MailItem:
    return MailItem(text, f"\n{text}\n".encode())


def tiny_config(event_model: str, alpha: float, url: str = "sqlite://") -> Config:
    return Config(
        store=StoreConfig(url=url),
        model=replace(ModelConfig(), event_model=event_model, alpha=alpha),  # type: ignore[arg-type]
        tokenizer=replace(TokenizerConfig(), header_tokens=False, bigrams=False),
    )


@pytest.fixture(scope="module")
def tiny() -> Iterator[Filter]:
    with Filter.open(tiny_config("multinomial-binary", 1.0)) as f:
        f.train([(True, body(b)) for b in SPAM_BODIES] + [(False, body(b)) for b in HAM_BODIES])
        yield f


def with_model(f: Filter, event_model: str, alpha: float = 1.0, **settings: float) -> Filter:
    config = tiny_config(event_model, alpha)
    return Filter(f.store, replace(config, model=replace(config.model, **settings)))  # type: ignore[arg-type]


def hand_score(event_model: str, alpha: float, token: str) -> float:
    """log P(token|spam) - log P(token|ham) from the table above."""
    ds, dh, ns, nh = COUNTS[token]
    if event_model == "bernoulli":
        return math.log((ds + alpha) / (MESSAGES[0] + 2 * alpha)) - math.log((dh + alpha) / (MESSAGES[1] + 2 * alpha))
    if event_model == "multinomial":
        return math.log((ns + alpha) / (SUM_N[0] + alpha * V)) - math.log((nh + alpha) / (SUM_N[1] + alpha * V))
    return math.log((ds + alpha) / (SUM_D[0] + alpha * V)) - math.log((dh + alpha) / (SUM_D[1] + alpha * V))


def test_the_tiny_model_has_the_hand_counted_tokens(tiny: Filter) -> None:
    tokens = [tiny.tokens(body(b)) for b in SPAM_BODIES + HAM_BODIES]
    assert tokens[0] == [CT, "cash", "prize", "cash", "cash"]
    assert {t for ts in tokens for t in ts} == set(COUNTS)
    s = tiny.stats()
    assert (s.spam_messages, s.ham_messages, s.tokens) == (*MESSAGES, V)
    assert (s.spam_terms, s.ham_terms) == SUM_N


def test_top_words_multinomial_binary_laplace_by_hand(tiny: Filter) -> None:
    # theta = (D + 1) / (sum D + V): spam denominator 20, ham 23
    got = Insight(tiny).top_words(10, min_count=1)
    expected = [
        ("cash", 3, 0, math.log(4 / 20) - math.log(1 / 23)),
        ("prize", 2, 0, math.log(3 / 20) - math.log(1 / 23)),
        ("winner", 1, 0, math.log(2 / 20) - math.log(1 / 23)),
        ("money", 1, 1, math.log(2 / 20) - math.log(2 / 23)),
        (CT, 3, 4, math.log(4 / 20) - math.log(5 / 23)),
        # the ties are listed by token
        ("agenda", 0, 1, math.log(1 / 20) - math.log(2 / 23)),
        ("today", 0, 1, math.log(1 / 20) - math.log(2 / 23)),
        ("lunch", 0, 2, math.log(1 / 20) - math.log(3 / 23)),
        ("meeting", 0, 2, math.log(1 / 20) - math.log(3 / 23)),
        ("notes", 0, 2, math.log(1 / 20) - math.log(3 / 23)),
    ]
    assert [(w.token, w.spam_count, w.ham_count) for w in got] == [e[:3] for e in expected]
    assert [w.score for w in got] == pytest.approx([e[3] for e in expected], rel=1e-12)


@pytest.mark.parametrize("alpha", [1.0, 0.1])
@pytest.mark.parametrize("event_model", EVENT_MODELS)
def test_top_words_order_and_scores_by_hand_for_each_model(tiny: Filter, event_model: str, alpha: float) -> None:
    f = with_model(tiny, event_model, alpha)
    column = 2 if event_model == "multinomial" else 0
    for spam in (True, False):
        sign = 1.0 if spam else -1.0
        expected = sorted(COUNTS, key=lambda t: (-sign * hand_score(event_model, alpha, t), t))
        got = Insight(f).top_words(4, spam=spam, min_count=1)
        assert [w.token for w in got] == expected[:4]
        assert [w.score for w in got] == pytest.approx([sign * hand_score(event_model, alpha, t) for t in expected[:4]], rel=1e-12)
        assert [(w.spam_count, w.ham_count) for w in got] == [COUNTS[t][column : column + 2] for t in expected[:4]]


@pytest.mark.parametrize("event_model", EVENT_MODELS)
def test_min_count_leaves_out_rare_tokens(tiny: Filter, event_model: str) -> None:
    f = with_model(tiny, event_model)
    column = 2 if event_model == "multinomial" else 0
    for min_count in (1, 2, 3, 6):
        kept = {t for t, c in COUNTS.items() if c[column] + c[column + 1] >= min_count}
        got = Insight(f).top_words(100, min_count=min_count)
        assert {w.token for w in got} == kept
        assert all(w.spam_count + w.ham_count >= min_count for w in got)
    # multinomial counts occurrences: cash (5) stays at 4, it has only 3 messages
    assert ("cash" in {w.token for w in Insight(f).top_words(100, min_count=4)}) == (event_model == "multinomial")


def test_top_words_needs_both_classes() -> None:
    with Filter.open(tiny_config("multinomial-binary", 1.0)) as f:
        f.train([(True, body("cash prize"))])
        with pytest.raises(NotTrainedError):
            Insight(f).top_words()


# -- explain ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_filter(sample: Path) -> Iterator[Filter]:
    with Filter.open(Config(store=StoreConfig(url="sqlite://"))) as f:
        spam = read_messages([str(sample / "train-spam.mbox")])
        ham = read_messages([str(sample / "train-ham.mbox")])
        f.train([(True, m) for m in spam] + [(False, m) for m in ham])
        yield f


SETTINGS = [
    {"tempering": 0.55, "min_evidence": 0.0},  # the defaults
    {"tempering": 0.0, "min_evidence": 0.0},  # textbook naive Bayes
    {"tempering": 0.3, "min_evidence": 2.0},
    {"tempering": 1.0, "min_evidence": 4.0, "alpha": 1.0},
    {"tempering": 0.5, "min_evidence": 0.0, "max_tokens": 5},
    {"tempering": 0.5, "min_evidence": 1.0, "max_tokens": 8},
]


@pytest.mark.parametrize("header_apart", [False, True], ids=["joint", "header-apart"])
@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: ",".join(f"{k}={v:g}" for k, v in s.items()))
@pytest.mark.parametrize("event_model", EVENT_MODELS)
def test_explanation_adds_up_to_the_classifiers_log_odds(sample_filter: Filter, sample: Path, event_model: str, settings: dict[str, float], header_apart: bool) -> None:
    config = sample_filter.config
    model_config = replace(config.model, event_model=event_model, header_apart=header_apart, **settings)  # type: ignore[arg-type]
    f = Filter(sample_filter.store, replace(config, model=model_config))
    items = list(read_messages([str(sample / "inbox.mbox")])) + list(read_messages([str(sample / "train-spam.mbox")]))[:5]
    items.append(MailItem("novel", b"Subject: zyzzyva quux\n\nfrobnicate the zyzzyva\n"))
    verdicts = list(f.classify(items))
    ignored = 0
    for item, verdict in zip(items, verdicts):
        assert isinstance(verdict, Verdict)
        e = Insight(f).explain(item)
        total = e.prior + math.fsum(c.contribution for c in e.tokens)
        assert math.isclose(total, verdict.log_odds, abs_tol=1e-9), (item.source, total, verdict.log_odds)
        assert math.isclose(e.log_odds, verdict.log_odds, abs_tol=1e-9)
        assert (e.verdict, e.score) == (verdict.verdict, pytest.approx(verdict.score, abs=1e-12))
        magnitudes = [abs(c.contribution) for c in e.tokens]
        assert magnitudes == sorted(magnitudes, reverse=True)
        aggregate = [c for c in e.tokens if c.token is None]
        assert len(aggregate) == (1 if event_model == "bernoulli" else 0)
        if aggregate:
            assert (aggregate[0].spam_count, aggregate[0].ham_count) == (None, None)
            assert e.absent == f.stats().tokens - (len(e.tokens) - 1 - e.ignored)
        zeros = sum(1 for c in e.tokens if c.token is not None and c.contribution == 0.0)
        assert zeros >= e.ignored
        ignored += e.ignored
        assert e.factor == pytest.approx(max(e.events, 1) ** -settings["tempering"], rel=1e-12)
        if header_apart:
            # the selections and scales below are those of one part; the
            # parts are checked in tests/nb/test_model.py and test_header_apart.py
            continue
        if settings.get("max_tokens"):
            # at most k distinct tokens count (multinomial: each with its occurrences)
            assert sum(1 for c in e.tokens if c.token is not None) - e.ignored <= settings["max_tokens"]
    # min_evidence and max_tokens really leave tokens out, and only when set
    # header_apart keeps only the 10 strongest header-line tokens
    assert (ignored > 0) == (settings["min_evidence"] > 0 or settings.get("max_tokens", 0) > 0 or header_apart)
    assert Insight(f).explain(items[-1]).unknown >= 3  # zyzzyva, quux, frobnicate


def test_explanation_of_the_tiny_model_by_hand(tiny: Filter) -> None:
    # multinomial-binary, alpha 1, tempering 0: each present token adds its
    # score once; "never" is unknown and adds nothing.
    f = with_model(tiny, "multinomial-binary", 1.0, tempering=0.0)
    e = Insight(f).explain(body("cash money never"))
    assert e.prior == pytest.approx(math.log(3 / 4), rel=1e-12)
    expected = {t: hand_score("multinomial-binary", 1.0, t) for t in ("cash", "money", CT)}
    assert {c.token: c.contribution for c in e.tokens} == pytest.approx(expected, rel=1e-12)
    assert [c.token for c in e.tokens] == ["cash", "money", CT]
    assert e.unknown == 1 and e.events == 3 and e.factor == 1.0
    assert e.log_odds == pytest.approx(math.log(3 / 4) + sum(expected.values()), rel=1e-12)


def test_explanation_with_max_tokens_by_hand(tiny: Filter) -> None:
    # the ratios of "cash money never": cash log 4.6, money log 1.15, ct log 0.92;
    # max_tokens 2 keeps cash and money
    f = with_model(tiny, "multinomial-binary", 1.0, tempering=0.0, max_tokens=2)
    assert hand_score("multinomial-binary", 1.0, "cash") == pytest.approx(math.log(4.6), rel=1e-12)
    e = Insight(f).explain(body("cash money never"))
    assert {c.token: c.contribution for c in e.tokens} == pytest.approx({"cash": math.log(4.6), "money": math.log(1.15), CT: 0.0}, rel=1e-12)
    assert (e.events, e.ignored, e.unknown) == (2, 1, 1)
    assert e.log_odds == pytest.approx(math.log(3 / 4) + math.log(4.6) + math.log(1.15), rel=1e-12)
    verdict = next(iter(f.classify([body("cash money never")])))
    assert isinstance(verdict, Verdict) and verdict.log_odds == pytest.approx(e.log_odds, rel=1e-12)
    assert "3 known (1 left out by min_evidence, max_tokens or header_max_tokens, contributing 0), 1 never seen (ignored)" in explanation_lines(e)[4]


def test_bernoulli_absent_term_by_hand(tiny: Filter) -> None:
    # theta = (D + 1) / (messages + 2); the message "cash" has ct and cash, so
    # the absent term runs over the other 8 vocabulary tokens.
    f = with_model(tiny, "bernoulli", 1.0, tempering=0.0)
    e = Insight(f).explain(body("cash"))
    absent = 0.0
    for t, (ds, dh, _, _) in COUNTS.items():
        if t not in (CT, "cash"):
            absent += math.log(1 - (ds + 1) / 5) - math.log(1 - (dh + 1) / 6)
    by_token = {c.token: c.contribution for c in e.tokens}
    assert by_token[None] == pytest.approx(absent, rel=1e-12)
    assert by_token["cash"] == pytest.approx(math.log(4 / 5) - math.log(1 / 6), rel=1e-12)
    assert e.absent == 8


# -- the command line ---------------------------------------------------------------


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_top_words_jsonl_rows_sorted_by_score(runner: CliRunner, sample_db: str) -> None:
    result = runner.invoke(app, ["--db", sample_db, "top-words", "--n", "12", "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 12
    assert all(list(r) == ["token", "spam_count", "ham_count", "score"] for r in rows)
    scores = [r["score"] for r in rows]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0
    assert all(r["spam_count"] + r["ham_count"] >= 5 for r in rows)
    ham = runner.invoke(app, ["--db", sample_db, "top-words", "--n", "5", "--class", "ham", "--min-count", "10", "--format", "jsonl"])
    ham_rows = [json.loads(line) for line in ham.stdout.splitlines()]
    assert len(ham_rows) == 5 and all(r["ham_count"] > r["spam_count"] for r in ham_rows)
    assert all(r["spam_count"] + r["ham_count"] >= 10 for r in ham_rows)


def test_top_words_csv_and_table_carry_the_same_rows(runner: CliRunner, sample_db: str) -> None:
    jsonl = runner.invoke(app, ["--db", sample_db, "top-words", "--n", "7", "--format", "jsonl"]).stdout
    as_json = [json.loads(line) for line in jsonl.splitlines()]
    result = runner.invoke(app, ["--db", sample_db, "top-words", "--n", "7", "--format", "csv"])
    assert result.exit_code == 0
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0] == ["token", "spam_count", "ham_count", "score"]
    assert [[r[0], int(r[1]), int(r[2]), float(r[3])] for r in rows[1:]] == [list(r.values()) for r in as_json]
    table = runner.invoke(app, ["--db", sample_db, "top-words", "--n", "7"]).stdout.splitlines()
    assert table[0].split() == ["token", "spam_count", "ham_count", "score"]
    assert [line.split()[0] for line in table[1:]] == [r["token"] for r in as_json]


def test_top_words_plot_is_a_png_of_the_expected_size(runner: CliRunner, sample_db: str, tmp_path: Path) -> None:
    plot = tmp_path / "top.png"
    result = runner.invoke(app, ["--db", sample_db, "top-words", "--n", "3", "--format", "jsonl", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    # 1200 wide; 150 + 25 pixels per bar row, 3 rows
    assert png_size(plot.read_bytes()) == (1200, 225)
    result = runner.invoke(app, ["--db", sample_db, "top-words", "--n", "20", "--plot", str(plot)])
    assert png_size(plot.read_bytes()) == (1200, 650)


def test_top_words_draws_its_plot_even_when_the_reader_leaves_at_once(sample_db: str, tmp_path: Path) -> None:
    # `top-words --plot p.png | head -1`: the list went out first, the
    # reader's leaving ended the command (exit 0, as for any command but
    # filter), and the chart was never drawn.
    import os
    import subprocess
    import sys

    plot = tmp_path / "top.png"
    read, write = os.pipe()
    os.close(read)  # a reader that has left before the first line
    try:
        done = subprocess.run(
            [sys.executable, "-m", "spamfilter", "--db", sample_db, "top-words", "--n", "3", "--plot", str(plot)], stdout=write, stderr=subprocess.PIPE, timeout=60
        )
    finally:
        os.close(write)
    assert done.returncode == 0, done.stderr
    assert png_size(plot.read_bytes()) == (1200, 225)


def test_top_words_plot_into_a_missing_folder_is_a_usage_error(runner: CliRunner, sample_db: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["--db", sample_db, "top-words", "--plot", str(tmp_path / "no" / "such.png")])
    assert result.exit_code == exitcodes.USAGE
    assert "Traceback" not in result.output and "no such folder" in result.stderr
    assert result.stdout == ""  # refused before the table


def test_top_words_before_training_exits_69(runner: CliRunner, empty_db_url: str) -> None:
    result = runner.invoke(app, ["--db", empty_db_url, "top-words"])
    assert result.exit_code == exitcodes.NOT_TRAINED


def first_inbox_message(sample: Path, tmp_path: Path, n: int = 1) -> Path:
    item = list(read_messages([str(sample / "inbox.mbox")]))[n - 1]
    path = tmp_path / f"inbox-{n}.eml"
    path.write_bytes(item.raw)
    return path


@pytest.mark.parametrize("n", [1, 2])
def test_explain_json_adds_up_to_what_classify_says(runner: CliRunner, sample_db: str, sample: Path, tmp_path: Path, n: int) -> None:
    message = first_inbox_message(sample, tmp_path, n)
    result = runner.invoke(app, ["--db", sample_db, "explain", "--format", "json", str(message)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert list(data) == ["verdict", "score", "log_odds", "prior", "tokens"]
    assert all(list(t) == ["token", "contribution", "spam_count", "ham_count"] for t in data["tokens"])
    assert math.isclose(data["prior"] + math.fsum(t["contribution"] for t in data["tokens"]), data["log_odds"], abs_tol=1e-9)
    classified = json.loads(runner.invoke(app, ["--db", sample_db, "classify", "--format", "jsonl", str(message)]).stdout)
    assert math.isclose(classified["log_odds"], data["log_odds"], abs_tol=1e-9)
    assert classified["verdict"] == data["verdict"]
    # stdin gives the same answer
    piped = runner.invoke(app, ["--db", sample_db, "explain", "--format", "json", "-"], input=message.read_bytes())
    assert json.loads(piped.stdout) == data


def test_explain_table_is_plain_text_off_a_terminal(runner: CliRunner, sample_db: str, sample: Path, tmp_path: Path) -> None:
    message = first_inbox_message(sample, tmp_path)
    result = runner.invoke(app, ["--db", sample_db, "explain", str(message)])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert "\x1b[" not in result.stdout
    assert lines[0] == f"message    {message}"
    assert lines[1].split()[:2] == ["verdict", "ham"]
    header = lines.index(f"{'contribution':>12} {'spam_count':>10} {'ham_count':>10}  token")
    contributions = [float(line.split()[0]) for line in lines[header + 1 :]]
    assert len(contributions) > 20 and sum(c < 0 for c in contributions) > sum(c > 0 for c in contributions)


def test_explain_table_colours_the_direction_on_a_terminal(sample_filter: Filter, sample: Path) -> None:
    item = list(read_messages([str(sample / "inbox.mbox")]))[1]
    e = Insight(sample_filter).explain(item)
    coloured = explanation_lines(e, colour=True)
    assert e.verdict == "spam"
    assert "\x1b[31m" in "\n".join(coloured)  # red: towards spam
    assert "\x1b[34m" in "\n".join(coloured)  # blue: towards ham
    assert not any("\x1b[" in line for line in explanation_lines(e, colour=False))


def test_explain_gives_the_header_lines_their_own_tempering(sample_filter: Filter, sample: Path) -> None:
    # With the header lines scored apart (the default) each part's evidence
    # is divided by its own n ** tempering; explain (and the daemon's
    # REPORT) showed one n and one scale, the body's, for the whole.
    item = list(read_messages([str(sample / "inbox.mbox")]))[1]
    e = Insight(sample_filter).explain(item)
    t = sample_filter.config.model.tempering
    assert sample_filter.config.model.header_apart and e.header_events > 0 and e.events > 0
    assert e.header_factor == pytest.approx(e.header_events**-t) and e.factor == pytest.approx(e.events**-t)
    model_line = next(line for line in explanation_lines(e) if line.startswith("model"))
    assert model_line.endswith(
        f"{e.events} body token events count, scaled by {e.factor:.4g}; {e.header_events} header-line token events, scaled by {e.header_factor:.4g}"
    )


def test_hostile_tokens_cannot_reach_the_terminal() -> None:
    assert printable("plain:token") == "plain:token"
    assert printable("a\x1b[31mb\u202ec\x00") == "a\\x1b[31mb\\u202ec\\x00"


def test_explain_errors_exit_with_documented_codes(runner: CliRunner, sample_db: str, empty_db_url: str, sample: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty.eml"
    empty.write_bytes(b"")
    cases = [
        (["--db", sample_db, "explain", str(tmp_path / "missing.eml")], exitcodes.NO_INPUT),
        (["--db", sample_db, "explain", str(empty)], exitcodes.DATA_ERROR),
        (["--db", sample_db, "explain", str(sample / "inbox.mbox")], exitcodes.USAGE),
        (["--db", empty_db_url, "explain", str(first_inbox_message(sample, tmp_path))], exitcodes.NOT_TRAINED),
    ]
    for args, code in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == code, (args, result.output)
        if code == exitcodes.USAGE:
            # A usage error shows the usage line, the --help hint and the error.
            assert result.stderr.startswith("Usage: ") and result.stderr.splitlines()[-1].startswith("Error: "), result.stderr
        else:
            assert result.stderr.startswith("spamfilter: ") and len(result.stderr.splitlines()) == 1, result.stderr
    result = runner.invoke(app, ["--db", sample_db, "explain"])
    assert result.exit_code == exitcodes.USAGE and "Traceback" not in result.output


@pytest.mark.parametrize("command", ["top-words", "explain", "report"])
def test_insight_commands_have_help_with_an_example_and_are_in_the_readme_and_the_guide(runner: CliRunner, command: str) -> None:
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert "Example: spamfilter " + command in " ".join(result.stdout.split())
    assert f"spamfilter {command}" in (REPO / "README.md").read_text()
    assert f"spamfilter {command}" in (REPO / "docs" / "guide.md").read_text()


def test_top_words_csv_keeps_control_characters_and_newlines(tmp_path: Path) -> None:
    from spamfilter.cli.insight import WordsFormat, render_words
    from spamfilter.tools.insight import WordScore

    words = [WordScore("charset:\x1b[31m", 3, 0, 2.5), WordScore("a\nb\x1cc", 2, 1, 1.25)]
    text = "\n".join(render_words(words, WordsFormat.csv))
    rows = list(csv.reader(io.StringIO(text)))
    assert [r[0] for r in rows[1:]] == ["charset:\x1b[31m", "a\nb\x1cc"]
