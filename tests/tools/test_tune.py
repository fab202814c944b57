"""`spamfilter tune` and the pieces it stands on: loss-minimising cutoffs, config writing."""

from __future__ import annotations

import json
import math
import stat
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy.special import log_expit
from typer.testing import CliRunner

from spamfilter.cli import app
from spamfilter.config import Config, DecisionConfig, ModelConfig, StoreConfig, TokenizerConfig, load_config
from spamfilter.errors import ConfigError, EvaluationError
from spamfilter.filter import Filter
from spamfilter.mail import MailItem
from spamfilter.mail.sources import read_messages
from spamfilter.nb.calibration import calibrated_in_order
from spamfilter.nb.decision import best_cutoffs, thresholds_from_loss
from spamfilter.tools.config_file import check_config_writable, update_config_file
from spamfilter.tools.evaluation import roc_area
from spamfilter.tools.maintenance import Maintenance
from spamfilter.tools.tuning import MIN_COSTLY, Candidate, Grid, tune, written_keys, written_settings

LETTERS = "bcdfghjklmnpqrstvwxz"


def noise(i: int, j: int) -> str:
    """A unique made-up word per (message, slot), letters only."""
    return "q" + LETTERS[i % 20] + LETTERS[(i // 20) % 20] + LETTERS[j % 20] + "x"


def message(words: list[str]) -> MailItem:
    return MailItem("m", ("Subject: note\n\n" + " ".join(words) + "\n").encode())


def trap_stream() -> list[tuple[bool, MailItem]]:
    """80 training messages, then 20 held-out ones built so that the answer
    is known: the class words ("cheap" in 4 of 5 spam and 1 of 5 ham,
    "meeting" the other way round) carry a log ratio of about log 4 = 1.4,
    and every held-out message also carries one hapax seen once in a training
    message of the OTHER class. Its weight is log((1 + a) / a): 0.69 with
    alpha 1, below the class word, but 6.9 with alpha 0.001, above it. So
    alpha 1 classifies the tail right and alpha 0.001 gets it all wrong."""
    stream: list[tuple[bool, MailItem]] = []
    hapaxes = {True: [], False: []}  # type: dict[bool, list[str]]
    for i in range(80):
        is_spam = i % 2 == 0
        own, other = ("cheap", "meeting") if is_spam else ("meeting", "cheap")
        word = other if (i // 2) % 5 == 4 else own
        words = [noise(i, j) for j in range(5)]
        hapaxes[is_spam].append(words[0])
        stream.append((is_spam, message([word, *words])))
    for k in range(20):
        is_spam = k % 2 == 0
        own = "cheap" if is_spam else "meeting"
        stream.append((is_spam, message([own, hapaxes[not is_spam][k]])))
    return stream


def test_tune_picks_the_alpha_that_resists_hapaxes() -> None:
    # Unigrams only: the trap is built from single words. Equal costs and no
    # unsure verdict put the cut at log-odds 0: the default loss matrix's
    # unsure band (-1.39, 3.89] would hold the class words' 1.4 and make
    # every message unsure for both alphas.
    config = Config(tokenizer=TokenizerConfig(bigrams=False), decision=DecisionConfig(cost_ham_as_spam=1.0, cost_spam_as_ham=1.0, cost_unsure=1.0))
    results = tune(config, trap_stream(), Grid(event_models=["multinomial-binary"], alphas=[0.001, 1.0], temperings=[0.0]), holdout=0.2)
    by_alpha = {c.alpha: c for c in results}
    assert results[0].alpha == 1.0
    assert by_alpha[1.0].one_minus_roca == 0.0
    assert by_alpha[0.001].one_minus_roca == 100.0
    assert by_alpha[1.0].loss_per_message == 0.0
    assert by_alpha[0.001].loss_per_message > 0.0


def test_best_cutoffs_minimise_the_hand_computed_loss() -> None:
    y = np.array([0, 0, 0, 1, 0, 1, 1, 1], dtype=bool)
    s = np.array([-5, -4, -3, -1, 0, 1, 2, 3], dtype=float)
    # ham <= -2 (three ham), unsure {-1 spam, 0 ham} at 0.2 each, spam > 0.5.
    cut = best_cutoffs(y, s, cost_ham_as_spam=10, cost_spam_as_ham=1, cost_unsure=0.2)
    assert (cut.ham_max, cut.spam_min, cut.loss) == (-2.0, 0.5, pytest.approx(0.4))
    # Without unsure: letting the spam at -1 through (1) beats losing the ham at 0 (10).
    cut = best_cutoffs(y, s, cost_ham_as_spam=10, cost_spam_as_ham=1, cost_unsure=0)
    assert (cut.ham_max, cut.spam_min, cut.loss) == (0.5, 0.5, 1.0)
    # Cheap ham loss: now the cut goes below the spam at -1, filing the ham at 0 as spam.
    cut = best_cutoffs(y, s, cost_ham_as_spam=0.5, cost_spam_as_ham=1, cost_unsure=0)
    assert (cut.spam_min, cut.loss) == (-2.0, 0.5)


def test_separated_classes_get_the_cut_in_the_middle_of_the_gap() -> None:
    y = np.array([0, 0, 1, 1], dtype=bool)
    s = np.array([-3.0, -2.0, 4.0, 6.0])
    cut = best_cutoffs(y, s, cost_ham_as_spam=10, cost_spam_as_ham=1, cost_unsure=0.2)
    assert (cut.ham_max, cut.spam_min, cut.loss) == (1.0, 1.0, 0.0)


def test_update_config_file_keeps_comments_and_validates(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('# mine\n[model]\n# smoothing\nalpha = 0.1\n\n[store]\nurl = ""\n')
    update_config_file(path, {("model", "alpha"): 0.03, ("model", "event_model"): "bernoulli", ("decision", "ham_cutoff"): 0.2, ("decision", "spam_cutoff"): 0.95})
    text = path.read_text()
    assert text.startswith("# mine\n[model]\n# smoothing\nalpha = 0.03\n")
    data = tomllib.loads(text)
    assert data["model"] == {"alpha": 0.03, "event_model": "bernoulli"}
    assert data["decision"] == {"ham_cutoff": 0.2, "spam_cutoff": 0.95}
    cfg = load_config(path)
    assert (cfg.model.alpha, cfg.model.event_model, cfg.decision.spam_cutoff) == (0.03, "bernoulli", 0.95)
    with pytest.raises(ConfigError):
        update_config_file(path, {("model", "alpha"): -1.0})
    assert load_config(path).model.alpha == 0.03  # the bad value was not written


def test_update_config_file_keeps_a_changed_lines_own_comment(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[model]\nalpha = 1.0   # laplace\n\n[store]\nurl = "sqlite:////tmp/a#b.db"  # mine, "#" in it\n')
    update_config_file(path, {("model", "alpha"): 0.03, ("store", "url"): "sqlite:////tmp/c.db"})
    assert path.read_text() == '[model]\nalpha = 0.03   # laplace\n\n[store]\nurl = "sqlite:////tmp/c.db"  # mine, "#" in it\n'


def test_tune_command_writes_the_best_settings(tmp_path: Path) -> None:
    # Every held-out message of the trap is unsure at the best setting (20 >= MIN_COSTLY).
    index = write_index(tmp_path, trap_stream())
    config = tmp_path / "config.toml"
    # The configured settings are the trap's alpha 0.001, which at the loss
    # matrix's own thresholds files the 20 tail messages the wrong way: alpha 1
    # beats them on the one fold of the old protocol (--folds 1).
    config.write_text("[model]\nalpha = 0.001\ntempering = 0.0\n\n[tokenizer]\nbigrams = false\n")
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "--config",
            str(config),
            "tune",
            "--index",
            str(index),
            "--folds",
            "1",
            "--holdout",
            "0.2",
            "--model",
            "multinomial-binary",
            "--alpha",
            "1",
            "--tempering",
            "0",
            "--min-evidence",
            "0",
            "--keep-tokenizer",
            "--write",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    best = json.loads(result.stdout)["best"]  # stdout is one JSON document
    assert (best["event_model"], best["alpha"], best["tempering"]) == ("multinomial-binary", 1.0, 0.0)
    written = load_config(config)
    assert (written.model.alpha, written.model.tempering) == (1.0, 0.0)
    assert written.decision.ham_cutoff is not None and written.decision.spam_cutoff is not None
    # alpha 0.001 -> 1: the record maps the old log-odds, and says so.
    assert result.stderr.splitlines()[-2:] == [
        f"wrote the best settings to {config}",
        "a calibration record written under the old settings is not read: scores are the model's own, bounded to [0.01, 0.99], until training records under the new ones",
    ]


def test_tune_writes_the_config_when_the_reader_of_the_table_leaves(tmp_path: Path) -> None:
    # `tune ... --write | true`: the closed pipe ended the command while it
    # printed the table, exit 0, the config unchanged and nothing said.
    from tests.tools.test_evaluate import _reader_gone

    index = write_index(tmp_path, trap_stream())
    config = tmp_path / "config.toml"
    config.write_text("[model]\nalpha = 0.001\ntempering = 0.0\n\n[tokenizer]\nbigrams = false\n")
    args = ["--config", str(config), "tune", "--index", str(index), "--folds", "1", "--holdout", "0.2", "--model", "multinomial-binary"]
    args += ["--alpha", "1", "--tempering", "0", "--min-evidence", "0", "--keep-tokenizer", "--write"]
    assert _reader_gone(args, tmp_path) == 0
    assert load_config(config).model.alpha == 1.0


def test_update_config_file_keeps_crlf_lines(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(b"# mine\r\n[model]\r\nalpha = 0.1\r\n")
    update_config_file(config, {("model", "alpha"): 0.5, ("decision", "ham_cutoff"): 0.2, ("decision", "spam_cutoff"): 0.9})
    written = config.read_bytes()
    assert written.count(b"\r\n") == written.count(b"\n") and written.startswith(b"# mine\r\n[model]\r\nalpha = 0.5\r\n")
    assert load_config(config).decision.spam_cutoff == 0.9
    # Mixed: each line keeps its own end (all became CRLF), a new one takes the most common.
    config.write_bytes(b"# header comment\n[model]\nalpha = 1.0\n\n[decision]\r\ncost_unsure = 0.1\n")
    update_config_file(config, {("model", "alpha"): 0.5, ("decision", "ham_cutoff"): 0.3, ("decision", "spam_cutoff"): 0.8})
    assert config.read_bytes() == b"# header comment\n[model]\nalpha = 0.5\n\n[decision]\r\ncost_unsure = 0.1\nham_cutoff = 0.3\nspam_cutoff = 0.8\n"


def test_update_config_file_finds_headers_with_spaces_or_comments_follows_links_and_keeps_the_mode(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_text("[ model ]  # my settings\nalpha = 0.1\n")
    real.chmod(0o600)
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    check_config_writable(link, written_keys())
    update_config_file(link, {("model", "alpha"): 0.03})
    assert link.is_symlink()
    assert real.read_text() == "[ model ]  # my settings\nalpha = 0.03\n"
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    fresh = tmp_path / "new" / "config.toml"
    update_config_file(fresh, {("model", "alpha"): 0.5})
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
    assert load_config(fresh).model.alpha == 0.5


@pytest.mark.parametrize(
    "layout",
    # The [decision] ones passed this check, as its cutoffs are not set by
    # default: refused only after the whole run ("Cannot declare twice").
    [
        "model.alpha = 0.1\n",
        "model = { alpha = 0.1 }\n",
        "decision = { cost_unsure = 0.2 }\n[model]\nalpha = 0.1\n",
        "decision.cost_unsure = 0.2\n[model]\nalpha = 0.1\n",
    ],
    ids=["dotted-keys", "inline-table", "decision-inline", "decision-dotted"],
)
def test_a_config_the_line_editor_cannot_change_is_refused_before_the_run(tmp_path: Path, layout: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(layout)
    assert load_config(config).model.alpha == 0.1
    with pytest.raises(ConfigError, match="cannot be edited line by line|invalid TOML"):
        check_config_writable(config, written_keys())
    index = write_index(tmp_path, trap_stream())
    result = CliRunner().invoke(app, ["--config", str(config), "tune", "--index", str(index), "--write"])
    assert result.exit_code == 78
    assert result.stdout == ""  # refused before the run: no table
    assert config.read_text() == layout


@pytest.mark.parametrize(("option", "value"), [("--alpha", "0"), ("--alpha", "nan"), ("--tempering", "1.2"), ("--min-evidence", "-1"), ("--max-tokens", "200000")])
def test_tune_refuses_values_the_config_would_refuse(tmp_path: Path, option: str, value: str) -> None:
    index = write_index(tmp_path, trap_stream())
    result = CliRunner().invoke(app, ["--db", f"sqlite:///{tmp_path / 'db'}", "tune", "--index", str(index), option, value])
    assert result.exit_code == 64, result.output


def test_tune_tries_the_tokenizer_both_ways_when_asked() -> None:
    results = tune(Config(), trap_stream(), Grid(event_models=["multinomial-binary"], alphas=[1.0], temperings=[0.0, 0.5], bigram_options=[False, True]))
    assert sorted((c.bigrams, c.tempering) for c in results) == [(False, 0.0), (False, 0.5), (True, 0.0), (True, 0.5)]


def test_tune_refuses_a_tail_without_both_classes() -> None:
    from spamfilter.errors import EvaluationError

    stream = trap_stream()[:80] + [(False, message(["meeting"]))] * 20
    with pytest.raises(EvaluationError, match="held-out tail"):
        tune(Config(), stream, Grid(event_models=["multinomial-binary"], alphas=[1.0], temperings=[0.0]))


# -- what a new user met: 600 easy messages, every candidate at 0 loss ---------------

SPAM_WORDS = ["cheap", "viagra", "winner", "prize", "casino", "lottery", "bonus", "offer"]
HAM_WORDS = ["meeting", "agenda", "minutes", "report", "schedule", "project", "review", "budget"]


def easy_stream(n: int) -> list[tuple[bool, MailItem]]:
    """Classes that every setting separates: eight class words each, plus a
    word of noise, alternating spam and ham."""
    return [(i % 2 == 0, message([*(SPAM_WORDS if i % 2 == 0 else HAM_WORDS), noise(i, 0)])) for i in range(n)]


def test_ties_keep_the_configured_settings() -> None:
    config = Config()
    results = tune(
        config,
        easy_stream(100),
        Grid(
            event_models=["multinomial-binary", "bernoulli"], alphas=[0.01, 0.1, 1.0], temperings=[0.0, 0.5, 0.55], min_evidences=[0.0, 3.0], bigram_options=[True, False]
        ),
    )
    assert {c.loss_per_message for c in results} == {0.0}
    best = results[0]
    assert (best.event_model, best.alpha, best.tempering, best.min_evidence, best.bigrams) == ("multinomial-binary", 0.1, 0.55, 0.0, True)
    # A changed configuration is kept the same way.
    config = Config(model=ModelConfig(alpha=1.0, tempering=0.0), tokenizer=TokenizerConfig(bigrams=False))
    best = tune(config, easy_stream(100), Grid(event_models=["multinomial-binary"], alphas=[0.1, 1.0], temperings=[0.0, 0.5], bigram_options=[True, False]))[0]
    assert (best.alpha, best.tempering, best.bigrams) == (1.0, 0.0, False)


def test_tuned_cutoffs_respect_the_loss_matrix() -> None:
    from spamfilter.nb.decision import logit

    for c in tune(Config(), easy_stream(100), Grid(event_models=["multinomial-binary", "bernoulli"], alphas=[0.01, 1.0], temperings=[0.0, 0.5])):
        # default matrix: spam above P 0.98, ham at or below P 0.2
        assert c.cutoffs.spam_min >= logit(0.98) - 1e-12
        assert c.cutoffs.ham_max <= logit(0.2) + 1e-12
        assert c.cutoffs.ham_max < c.cutoffs.spam_min


def test_best_cutoffs_stay_within_the_bounds_given() -> None:
    y = np.array([0, 0, 0, 1, 0, 1, 1, 1], dtype=bool)
    s = np.array([-5, -4, -3, -1, 0, 1, 2, 3], dtype=float)
    # Unbounded: (-2, 0.5, 0.4) (test above). The spam cutoff may not go below
    # 2.7 nor the ham cutoff above -2.5: the spam at 1 and 2 become unsure too.
    cut = best_cutoffs(y, s, cost_ham_as_spam=10, cost_spam_as_ham=1, cost_unsure=0.2, spam_min_floor=2.7, ham_max_ceiling=-2.5)
    assert (cut.ham_max, cut.spam_min, cut.loss) == (-2.5, 2.7, pytest.approx(0.8))
    # Two-way with the bound at 0.5: the same cut as unbounded.
    cut = best_cutoffs(y, s, cost_ham_as_spam=10, cost_spam_as_ham=1, cost_unsure=0, spam_min_floor=0.5, ham_max_ceiling=0.5)
    assert (cut.ham_max, cut.spam_min, cut.loss) == (0.5, 0.5, 1.0)


def test_without_an_unsure_verdict_the_two_cutoffs_stay_one() -> None:
    # cost_unsure = 0 turns the unsure verdict off, and the loss matrix puts
    # both bounds at log 10. A best cut above them came back as ham_max at
    # the bound and spam_min at the cut: an unsure band for later mail
    # (tune --write wrote ham_cutoff 0.909, spam_cutoff 0.957).
    bound = thresholds_from_loss(10, 1, 0.0)
    assert bound.ham_max == bound.spam_min
    y = np.array([0, 0, 0, 1, 1, 1], dtype=bool)
    for s in (np.array([-3.0, -1, 1, 1.2, 5, 6]), np.array([-3.0, -1, 4, 4.5, 5, 6]), np.array([-9.0, -8, -7, -6, -5, -4])):
        cut = best_cutoffs(y, s, cost_ham_as_spam=10, cost_spam_as_ham=1, cost_unsure=0.0, spam_min_floor=bound.spam_min, ham_max_ceiling=bound.ham_max)
        assert cut.ham_max == cut.spam_min
        # the loss it reports is the loss of that one threshold
        ham_as_spam, spam_as_ham = int(((s > cut.spam_min) & ~y).sum()), int(((s <= cut.ham_max) & y).sum())
        assert cut.loss == pytest.approx(10 * ham_as_spam + spam_as_ham)


def write_index(tmp_path: Path, stream: list[tuple[bool, MailItem]]) -> Path:
    index_dir = tmp_path / "mail"
    index_dir.mkdir()
    lines = []
    for i, (is_spam, item) in enumerate(stream):
        (index_dir / f"{i:03d}.eml").write_bytes(item.raw)
        lines.append(f"{'spam' if is_spam else 'ham'} mail/{i:03d}.eml")
    index = tmp_path / "index"
    index.write_text("\n".join(lines) + "\n")
    return index


def test_tune_refuses_to_write_what_a_small_tail_cannot_decide(tmp_path: Path) -> None:
    index = write_index(tmp_path, easy_stream(100))
    config = tmp_path / "config.toml"
    config.write_text("# mine\n")
    result = CliRunner().invoke(
        app,
        [
            "--config",
            str(config),
            "tune",
            "--index",
            str(index),
            "--folds",
            "1",
            "--holdout",
            "0.2",
            "--model",
            "multinomial-binary",
            "--alpha",
            "1",
            "--tempering",
            "0.5",
            "--write",
        ],
    )
    assert result.exit_code == 65
    # 0 costly messages in 20 held out: at most 1 in 20, so 10 need 200 held out.
    assert result.stderr.strip() == (
        f"spamfilter: the held-out tail (20 messages) is too small to tell the settings apart: the best one "
        f"misfiled or called unsure 0 of them, and a choice needs at least {MIN_COSTLY}; "
        "hold out at least about 200 messages (an index of about 1000 at --holdout 0.2); nothing written"
    )
    assert config.read_text() == "# mine\n"
    # Without --write the candidates are still listed.
    result = CliRunner().invoke(app, ["--config", str(config), "tune", "--index", str(index), "--model", "multinomial-binary", "--alpha", "1", "--tempering", "0.5"])
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 1 + 3 * 2  # header, min_evidence 0, 2, 3 with bigrams on and off


def test_cutoffs_as_probabilities_read_back_as_the_same_log_odds() -> None:
    from spamfilter.nb.decision import Cutoffs, thresholds_from_cutoffs

    ham_cutoff, spam_cutoff = Cutoffs(ham_max=-2.5, spam_min=4.0, loss=0.0).probabilities()
    assert (ham_cutoff, spam_cutoff) == pytest.approx((1 / (1 + math.exp(2.5)), 1 / (1 + math.exp(-4.0))), rel=1e-15)
    back = thresholds_from_cutoffs(ham_cutoff, spam_cutoff)
    assert (back.ham_max, back.spam_min) == pytest.approx((-2.5, 4.0), rel=1e-12)


def test_tune_tries_max_tokens_and_scores_with_the_configured_one() -> None:
    stream = easy_stream(100)
    both = tune(Config(), stream, Grid(event_models=["multinomial-binary"], alphas=[1.0], temperings=[0.5], max_tokens_options=[0, 1]))
    assert sorted(c.max_tokens for c in both) == [0, 1]
    one = next(c for c in both if c.max_tokens == 1)
    every = next(c for c in both if c.max_tokens == 0)
    # keeping one token per message changes the log-odds the tail is scored with
    assert one.log_loss != every.log_loss
    # without the option tune keeps (and scores with) the configured max_tokens
    configured = Config(model=ModelConfig(alpha=1.0, tempering=0.5, max_tokens=1))
    [only] = tune(configured, stream, Grid(event_models=["multinomial-binary"], alphas=[1.0], temperings=[0.5]))
    assert (only.max_tokens, only.log_loss, only.one_minus_roca) == (1, one.log_loss, one.one_minus_roca)


def test_tune_command_writes_max_tokens(tmp_path: Path) -> None:
    index = write_index(tmp_path, trap_stream())
    config = tmp_path / "config.toml"
    config.write_text("[model]\nalpha = 0.001\ntempering = 0.0\n")
    args = [
        "--config",
        str(config),
        "tune",
        "--index",
        str(index),
        "--folds",
        "1",
        "--holdout",
        "0.2",
        "--model",
        "multinomial-binary",
        "--alpha",
        "1",
        "--tempering",
        "0",
        "--min-evidence",
        "0",
        "--max-tokens",
        "3",
        "--keep-tokenizer",
        "--write",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()[:2]
    assert row.startswith("* ")  # the chosen one is among the near-best
    assert header.split()[6] == "keep" and row.split()[6] == "3"  # "event model" is two words
    assert load_config(config).model.max_tokens == 3


# -- one-dependence estimators and message features ---------------------------

#: Small enough for the sample's 96 training messages (see tests/filter/test_dependence.py).
ONE_DEPENDENCE = {"aode_parents": 12, "aode_children": 300, "aode_min_support": 3, "reselect_growth": 0.0}


def sample_stream(sample: Path) -> list[tuple[bool, MailItem]]:
    """The sample's 120 training messages, spam and ham alternating."""
    spam = read_messages([str(sample / "train-spam.mbox")])
    ham = read_messages([str(sample / "train-ham.mbox")])
    return [pair for two in zip(((True, m) for m in spam), ((False, m) for m in ham)) for pair in two]


def filter_tail_odds(url: str, m: ModelConfig, labelled: list[tuple[bool, MailItem]], n_valid: int) -> np.ndarray:
    """The log-odds a Filter configured with ``m`` gives the last ``n_valid``
    messages after training the others and choosing its parents."""
    with Filter.open(Config(store=StoreConfig(url=url), model=m)) as f:
        f.train(labelled[:-n_valid])
        Maintenance(f.store).reselect(f.config.model)
        return np.array([v.log_odds for v in f.classify([item for _, item in labelled[-n_valid:]])])  # type: ignore[union-attr]


def assert_scored_as(c: Candidate, is_spam: np.ndarray, odds: np.ndarray, config: Config) -> None:
    """The candidate's figures are those of these held-out log-odds; its
    cutoffs, those of their calibrated scores (a record kept batch by batch)."""
    d = config.decision
    bounds = thresholds_from_loss(d.cost_ham_as_spam, d.cost_spam_as_ham, d.cost_unsure)
    cut = best_cutoffs(
        is_spam,
        calibrated_in_order(odds, is_spam, config.store.batch_size),
        cost_ham_as_spam=d.cost_ham_as_spam,
        cost_spam_as_ham=d.cost_spam_as_ham,
        cost_unsure=d.cost_unsure,
        spam_min_floor=bounds.spam_min,
        ham_max_ceiling=bounds.ham_max,
    )
    assert c.log_loss == pytest.approx(float(-np.mean(log_expit(np.where(is_spam, odds, -odds)))), rel=1e-9)
    assert c.one_minus_roca == pytest.approx(100 * (1 - roc_area(is_spam, odds)), abs=1e-12)
    assert (c.cutoffs.ham_max, c.cutoffs.spam_min) == pytest.approx((cut.ham_max, cut.spam_min), rel=1e-9)


@pytest.mark.parametrize(
    ("dependence", "weight", "tempering", "min_evidence"),
    [("aode", 0.0, 0.55, 0.0), ("spode", 0.0, 0.55, 0.0), ("aode", 0.0, 1.0, 1.0), ("none", 0.5, 0.55, 0.0), ("aode", 0.3, 1.0, 0.0)],
)
def test_tuned_candidates_score_the_tail_as_the_filter_does(tmp_path: Path, sample: Path, dependence: str, weight: float, tempering: float, min_evidence: float) -> None:
    # Tempering 1 divides the token evidence by each message's length, so
    # the log-odds come near 0 and the log-loss weighs every message.
    labelled = sample_stream(sample)
    base = replace(ModelConfig(), tempering=tempering, min_evidence=min_evidence, **ONE_DEPENDENCE)  # type: ignore[arg-type]
    config = Config(model=base)
    results = tune(
        config,
        labelled,
        Grid(
            event_models=["multinomial-binary"],
            alphas=[base.alpha],
            temperings=[tempering],
            min_evidences=[min_evidence],
            dependences=sorted({"none", dependence}),
            feature_weights=sorted({0.0, weight}),
        ),
    )
    found = {(c.dependence, c.feature_weight): c for c in results}
    tuned = found[(dependence, weight)]
    assert tuned.held_out == 24
    # the setting changes the scores: naive Bayes without features scores the tail otherwise
    assert tuned.log_loss != found[("none", 0.0)].log_loss
    m = replace(base, dependence=dependence, features=weight > 0, feature_weight=weight or 1.0)  # type: ignore[arg-type]
    odds = filter_tail_odds(f"sqlite:///{tmp_path / 'f.db'}", m, labelled, 24)
    assert_scored_as(tuned, np.array([is_spam for is_spam, _ in labelled[-24:]]), odds, config)


def test_dependence_and_features_are_tried_only_when_asked(sample: Path) -> None:
    labelled = sample_stream(sample)
    config = Config(model=replace(ModelConfig(), **ONE_DEPENDENCE))  # type: ignore[arg-type]
    grid = {"event_models": ["multinomial-binary", "bernoulli"], "alphas": [0.1, 1.0], "temperings": [0.0, 0.55], "min_evidences": [0.0, 2.0]}
    default = tune(config, labelled, Grid(**grid))  # type: ignore[arg-type]
    assert len(default) == 2 * 2 * 2 * 2
    assert {(c.dependence, c.feature_weight) for c in default} == {("none", 0.0)}
    assert default == tune(config, labelled, Grid(dependences=["none"], feature_weights=[0.0], **grid))  # type: ignore[arg-type]
    # AODE only with multinomial-binary: 16 + 8 rows, each with and without features
    both = tune(config, labelled, Grid(dependences=["none", "aode"], feature_weights=[0.0, 0.5], **grid))  # type: ignore[arg-type]
    assert len(both) == (16 + 8) * 2
    assert {c.event_model for c in both if c.dependence == "aode"} == {"multinomial-binary"}
    # the configured dependence and feature weight are the defaults
    configured = Config(model=replace(config.model, dependence="spode", features=True, feature_weight=0.5))
    rows = tune(configured, labelled, Grid(event_models=["multinomial-binary"], alphas=[0.1], temperings=[0.55]))
    assert [(c.dependence, c.feature_weight) for c in rows] == [("spode", 0.5)]
    with pytest.raises(EvaluationError, match="no setting to try"):
        tune(config, labelled, Grid(event_models=["bernoulli"], alphas=[0.1], temperings=[0.55], dependences=["aode"]))


def test_ties_keep_the_configured_dependence_and_features() -> None:
    config = Config(model=ModelConfig(dependence="aode", features=True, feature_weight=0.5))
    results = tune(
        config,
        easy_stream(100),
        Grid(event_models=["multinomial-binary"], alphas=[0.1], temperings=[0.55], dependences=["none", "aode"], feature_weights=[0.0, 0.5, 1.0]),
    )
    assert {c.loss_per_message for c in results} == {0.0}
    assert (results[0].dependence, results[0].feature_weight) == ("aode", 0.5)


def test_tune_command_writes_dependence_and_features(tmp_path: Path) -> None:
    index = write_index(tmp_path, trap_stream())
    config = tmp_path / "config.toml"
    trap = "[model]\nalpha = 0.001\ntempering = 0.0\naode_min_support = 5\n\n[tokenizer]\nbigrams = false\n"
    config.write_text(trap)
    args = [
        "--config",
        str(config),
        "tune",
        "--index",
        str(index),
        "--folds",
        "1",
        "--holdout",
        "0.2",
        "--model",
        "multinomial-binary",
        "--alpha",
        "1",
        "--tempering",
        "0",
        "--min-evidence",
        "0",
        "--dependence",
        "aode",
        "--feature-weight",
        "0.25",
        "--keep-tokenizer",
        "--write",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()[:2]
    assert header.split()[7:9] == ["dep", "feat"] and row.split()[7:9] == ["aode", "0.25"]  # "event model" is two words
    assert result.stdout.splitlines()[-2] == "dependence = 'aode' scores once `spamfilter db reselect` has chosen its parents"
    assert result.stdout.splitlines()[-1].startswith("a calibration record written under the old settings is not read")
    written = load_config(config).model
    assert (written.dependence, written.features, written.feature_weight, written.aode_min_support) == ("aode", True, 0.25, 5)
    # features off (weight 0) writes features = false and keeps the configured weight
    config.write_text(trap.replace("[model]\n", "[model]\nfeature_weight = 0.25\n"))
    result = CliRunner().invoke(app, [*args[:-6], "--dependence", "none", "--feature-weight", "0", "--keep-tokenizer", "--write"])
    assert result.exit_code == 0, result.output
    written = load_config(config).model
    assert (written.dependence, written.features, written.feature_weight) == ("none", False, 0.25)
    result = CliRunner().invoke(app, [*args[:-6], "--dependence", "tan"])
    assert result.exit_code == 64 and "'tan' is not one of none, spode, aode" in result.stderr


def folds_candidate(fold_losses: tuple[float, ...], configured_fold_losses: tuple[float, ...], improvement: float = 3.0) -> Candidate:
    """A candidate with only the per-fold losses and its saving set (the rest is not read)."""
    from spamfilter.nb.decision import Cutoffs

    return Candidate(
        "multinomial-binary",
        0.1,
        0.55,
        0.0,
        True,
        0.0,
        Cutoffs(0.0, 0.0, 0.0),
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
        fold_losses=fold_losses,
        configured_fold_losses=configured_fold_losses,
        improvement=improvement,
    )


def test_a_choice_must_beat_the_configured_settings_in_most_folds_and_lose_badly_in_none() -> None:
    from spamfilter.tools.tuning import require_improvement

    configured = folds_candidate((0.5, 0.5, 0.5, 0.5), (0.10, 0.10, 0.10, 0.10))
    require_improvement(folds_candidate((0.09, 0.09, 0.09, 0.105), ()), configured)  # 3 of 4, the fourth within 5%
    with pytest.raises(EvaluationError, match=r"beat the configured one in 3 of 4 time-ordered folds and lost by more than 5% in fold 4"):
        require_improvement(folds_candidate((0.09, 0.09, 0.09, 0.106), ()), configured)
    with pytest.raises(EvaluationError, match=r"beat the configured one in 2 of 4 time-ordered folds: not enough"):
        require_improvement(folds_candidate((0.09, 0.09, 0.10, 0.10), ()), configured)
    with pytest.raises(EvaluationError, match="not among those tried"):
        require_improvement(folds_candidate((0.0,), ()), None)
    # every fold won, but by a saving a few messages decide
    with pytest.raises(EvaluationError, match=r"saved 1.90 standard errors of loss per held-out message over the configured one, and a choice needs 2"):
        require_improvement(folds_candidate((0.09, 0.09, 0.09, 0.09), (), improvement=1.9), configured)


def test_the_saving_is_counted_in_standard_errors_of_the_paired_differences() -> None:
    from spamfilter.tools.tuning import paired_saving

    theirs = np.array([0.0, 1.0, 0.2, 10.0, 0.0, 1.0])
    mine = np.array([0.0, 0.0, 0.2, 0.0, 1.0, 1.0])
    saved = theirs - mine  # 0, 1, 0, 10, -1, 0: mean 5/3
    sd = np.sqrt((102 - 6 * (5 / 3) ** 2) / 5)  # the sample standard deviation of the differences
    assert saved.tolist() == [0.0, 1.0, 0.0, 10.0, -1.0, 0.0]
    assert paired_saving(mine, theirs) == pytest.approx((5 / 3) / (sd / np.sqrt(6)), rel=1e-12)
    assert paired_saving(mine, mine) == 0.0  # never differ: no evidence either way


def test_the_one_standard_error_rule_keeps_the_nearest_of_the_settings_the_mail_cannot_tell_apart() -> None:
    from spamfilter.tools.tuning import one_standard_error

    config = Config()  # multinomial-binary, alpha 0.1, tempering 0.55
    base = folds_candidate((), ())

    def cand(loss: float, **changes: object) -> Candidate:
        return replace(base, loss_per_message=loss, **changes)  # type: ignore[arg-type]

    # Ten held-out messages each; e(i) is one more unit of loss on message i.
    # The lowest loss changes three settings. Against it, one that changes
    # only alpha costs +1, +1, -1 on three messages (0.1 more on average,
    # standard error 0.18: within one); one that changes tempering +2, -1,
    # +1 (0.2 more, s.e. 0.25: within one); the configured one +2 on each
    # of two (0.4 more, s.e. 0.27: not within one).
    e = np.eye(10)
    low = np.array([0.0, 1.0, 0.0, 0.2, 0.0, 2.0, 1.0, 0.0, 0.0, 0.0])
    lowest = cand(low.mean(), event_model="multinomial", alpha=0.03, tempering=0.0)
    alpha_only = cand(low.mean() + 0.1, alpha=0.03)
    tempering_only = cand(low.mean() + 0.2, tempering=0.5)
    configured = cand(low.mean() + 0.4)
    ranked = one_standard_error(
        [(lowest, low), (alpha_only, low + e[2] + e[3] - e[5]), (tempering_only, low + 2 * e[4] - e[6] + e[7]), (configured, low + 2 * (e[8] + e[9]))], config
    )
    assert [(c.alpha, c.tempering, c.near_best) for c in ranked] == [(0.03, 0.55, True), (0.1, 0.5, True), (0.03, 0.0, True), (0.1, 0.55, False)]
    # With the configured setting within one standard error it is chosen itself.
    ranked = one_standard_error([(lowest, low), (configured, low + e[2] + e[3] - e[5])], config)
    assert ranked[0] == replace(configured, near_best=True)
    # A candidate scored only as the baseline is never the choice.
    ranked = one_standard_error([(lowest, low), (replace(configured, in_grid=False), low)], config)
    assert ranked[0].event_model == "multinomial" and not ranked[1].near_best


def test_tune_gives_each_candidate_its_saving_over_the_configured_setting() -> None:
    # Configured with alpha 0.001, which misfiles the trap stream's held-out
    # mail at the loss matrix's thresholds (1.58 per message); alpha 0.1 and
    # 1 cost 0.2 per message there, a saving far beyond two standard errors.
    config = Config()
    config = replace(config, model=replace(config.model, alpha=0.001))
    results = tune(config, trap_stream(), Grid(event_models=["multinomial-binary"], alphas=[0.001, 0.1, 1.0], temperings=[0.55]), holdout=0.2)
    by_alpha = {c.alpha: c for c in results}
    assert by_alpha[0.001].configured_fold_losses == pytest.approx((1.58,), rel=1e-9)
    assert by_alpha[0.1].loss_per_message == by_alpha[1.0].loss_per_message == pytest.approx(0.2, rel=1e-9)
    assert by_alpha[0.1].improvement > 2.0 and by_alpha[1.0].improvement > 2.0
    # the same settings against a configured alpha of 0.1: nothing saved
    unchanged = tune(Config(), trap_stream(), Grid(event_models=["multinomial-binary"], alphas=[0.1, 1.0], temperings=[0.55]), holdout=0.2)
    assert [c.improvement for c in unchanged] == [0.0, 0.0]


def test_the_configured_setting_is_judged_at_the_cutoffs_it_configures() -> None:
    # Cutoffs that leave every message unsure (0.001 and 0.9999 against
    # scores bounded to [0.01, 0.99]) cost 0.2 a message, the price of an
    # unsure verdict; the configured setting was judged at the loss
    # matrix's own thresholds instead, as if the cutoffs were not there.
    grid = Grid(event_models=["multinomial-binary"], alphas=[0.1], temperings=[0.55])
    [plain] = tune(Config(), easy_stream(100), grid, holdout=0.5)
    assert plain.configured_fold_losses[0] < 0.1
    config = Config()
    config = replace(config, decision=replace(config.decision, ham_cutoff=0.001, spam_cutoff=0.9999))
    [c] = tune(config, easy_stream(100), grid, holdout=0.5)
    assert c.configured_fold_losses == pytest.approx((config.decision.cost_unsure,), rel=1e-9)


def test_tune_scores_each_fold_with_a_model_of_the_mail_before_it() -> None:
    # Two folds over the last half: the figures of each fold are those of a
    # model trained on every message before the fold (checked through the
    # one-fold protocol on the two shorter streams), and the pooled loss is
    # the folds' losses weighted by their sizes.
    stream = easy_stream(100)
    grid = {"event_models": ["multinomial-binary"], "alphas": [0.1], "temperings": [0.55]}
    [two] = tune(Config(), stream, Grid(**grid), holdout=0.5, folds=2)  # type: ignore[arg-type]
    [first] = tune(Config(), stream[:75], Grid(**grid), holdout=25 / 75)  # type: ignore[arg-type]
    [second] = tune(Config(), stream, Grid(**grid), holdout=0.25)  # type: ignore[arg-type]
    assert two.configured_fold_losses == pytest.approx(first.configured_fold_losses + second.configured_fold_losses, rel=1e-12)
    assert two.held_out == 50 and first.held_out == second.held_out == 25


def test_tune_command_refuses_a_choice_that_does_not_beat_the_configured_settings(tmp_path: Path) -> None:
    index = write_index(tmp_path, trap_stream())
    config = tmp_path / "config.toml"
    config.write_text("[tokenizer]\nbigrams = false\n")
    result = CliRunner().invoke(
        app,
        [
            "--config",
            str(config),
            "tune",
            "--index",
            str(index),
            "--model",
            "multinomial-binary",
            "--alpha",
            "1",
            "--tempering",
            "0",
            "--min-evidence",
            "0",
            "--keep-tokenizer",
            "--write",
        ],
    )
    assert result.exit_code == 65, result.output
    assert "the best setting beat the configured one in 0 of 4 time-ordered folds" in result.stderr
    assert config.read_text() == "[tokenizer]\nbigrams = false\n"
    # the configured settings are scored as the baseline but not listed as a choice
    assert len(result.stdout.splitlines()) == 2


@pytest.mark.parametrize("event_model", ["multinomial-binary", "multinomial"])
def test_tune_tries_the_unseen_weight_and_scores_the_tail_as_the_filter_does(tmp_path: Path, sample: Path, event_model: str) -> None:
    labelled = sample_stream(sample)
    config = Config()
    grid = Grid(event_models=[event_model], alphas=[config.model.alpha], temperings=[config.model.tempering], min_evidences=[0.0], unseen_weights=[0.0, 0.5])
    found = {c.unseen_weight: c for c in tune(config, labelled, grid)}
    assert sorted(found) == [0.0, 0.5]
    # the held-out tail has tokens the head never saw, so the weight changes its scores
    assert found[0.5].log_loss != found[0.0].log_loss
    m = replace(config.model, event_model=event_model, unseen_weight=0.5)
    odds = filter_tail_odds(f"sqlite:///{tmp_path / 'f.db'}", m, labelled, 24)
    assert_scored_as(found[0.5], np.array([is_spam for is_spam, _ in labelled[-24:]]), odds, config)
    assert written_settings(found[0.5])[("model", "unseen_weight")] == 0.5


def test_the_grid_pairs_an_unseen_weight_with_naive_bayes_only() -> None:
    grid = Grid(event_models=["multinomial-binary"], alphas=[0.1], temperings=[0.55], min_evidences=[0.0], dependences=["none", "aode"], unseen_weights=[0.0, 0.5])
    pairs = sorted((m.dependence, m.unseen_weight) for m in grid.models(Config()))
    assert pairs == [("aode", 0.0), ("none", 0.0), ("none", 0.5)]


def test_one_minus_roca_is_taken_fold_by_fold() -> None:
    from spamfilter.tools.tuning import fold_one_minus_roca

    # Two folds each ranked perfectly by its own model, the second model's
    # log-odds 100 nats above the first's: pooled, the second fold's ham
    # outrank the first fold's spam.
    y = np.array([False, True, False, True, False, True, False, True])
    raw = np.array([-5.0, 5.0, -4.0, 6.0, 95.0, 105.0, 96.0, 106.0])
    assert 100.0 * (1.0 - roc_area(y, raw)) == pytest.approx(25.0)
    assert fold_one_minus_roca(y, raw, [4, 4]) == 0.0
    # Folds weigh by their size; one without both classes is left out.
    y2 = np.array([False, True, True, False, False, True, False, False])
    raw2 = np.array([-5.0, 5.0, -6.0, 1.0, 0.0, 2.0, 3.0, 4.0])
    first, second = 1.0 - roc_area(y2[:4], raw2[:4]), 1.0 - roc_area(y2[4:], raw2[4:])
    assert fold_one_minus_roca(y2, raw2, [4, 4]) == pytest.approx(100.0 * (first + second) / 2)
    assert fold_one_minus_roca(y2, raw2, [3, 5]) == pytest.approx(100.0 * ((1 - roc_area(y2[:3], raw2[:3])) * 3 + (1 - roc_area(y2[3:], raw2[3:])) * 5) / 8)
    assert fold_one_minus_roca(y2[4:], raw2[4:], [1, 3]) == pytest.approx(100.0 * (1 - roc_area(y2[5:], raw2[5:])))
