"""Tests of spamfilter.config: defaults, overlaying a file, range checks."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from spamfilter.config import Config, DaemonConfig, DecisionConfig, ModelConfig, StoreConfig, TokenizerConfig, config_from_dict, database_url, load_config
from spamfilter.errors import ConfigError
from spamfilter.locations import default_config_path

REPOSITORY_CONFIG = Path(__file__).resolve().parents[1] / "config.toml"


def test_defaults() -> None:
    c = Config()
    assert c.store == StoreConfig(url="", busy_timeout=30.0, batch_size=200)
    assert c.model == ModelConfig(event_model="multinomial-binary", alpha=0.1, tempering=0.55, min_evidence=0.0, max_tokens=0)
    assert c.decision == DecisionConfig(cost_ham_as_spam=10.0, cost_spam_as_ham=1.0, cost_unsure=0.2, spam_cutoff=None, ham_cutoff=None)
    assert c.tokenizer == TokenizerConfig(
        max_bytes=200_000, min_word_length=3, max_word_length=20, bigrams=True, stemmer="none", header_tokens=True, fold_case=True, list_header_words=False
    )
    assert c.daemon == DaemonConfig(per_user=False)


def test_empty_document_gives_the_defaults() -> None:
    assert config_from_dict({}) == Config()
    assert config_from_dict({"model": {}, "store": {}}) == Config()


def test_repository_config_toml_equals_the_code_defaults() -> None:
    if not REPOSITORY_CONFIG.exists():
        pytest.fail(f"{REPOSITORY_CONFIG} is missing: the repository must ship a config.toml documenting every default")
    assert load_config(REPOSITORY_CONFIG) == Config()


def test_file_overlays_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        '[model]\nevent_model = "bernoulli"\nalpha = 1\n\n'
        "[decision]\nspam_cutoff = 0.9\nham_cutoff = 0.2\n\n"
        '[store]\nurl = "sqlite:///x.db"\nbusy_timeout = 5\n\n'
        "[daemon]\nper_user = true\n"
    )
    c = load_config(path)
    assert c.model == ModelConfig(event_model="bernoulli", alpha=1.0)
    assert isinstance(c.model.alpha, float)
    assert isinstance(c.store.busy_timeout, float)
    assert c.decision == DecisionConfig(spam_cutoff=0.9, ham_cutoff=0.2)
    assert c.store == StoreConfig(url="sqlite:///x.db", busy_timeout=5.0)
    assert c.tokenizer == TokenizerConfig()
    assert c.daemon == DaemonConfig(per_user=True)


def test_missing_explicit_path_raises(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(missing)


def test_missing_default_path_gives_the_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPAMFILTER_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert default_config_path() == tmp_path / "spamfilter" / "config.toml"
    assert load_config() == Config()


def test_default_path_is_read_when_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "elsewhere.toml"
    path.write_text("[model]\nalpha = 0.5\n")
    monkeypatch.setenv("SPAMFILTER_CONFIG", str(path))
    assert load_config() == Config(model=ModelConfig(alpha=0.5))


def test_the_database_is_the_command_line_then_the_environment_then_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPAMFILTER_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    configured = Config(store=replace(Config().store, url="sqlite:///configured.db"))
    assert database_url(None, Config()) == f"sqlite:///{tmp_path}/spamfilter/spamfilter.db"
    assert database_url(None, configured) == "sqlite:///configured.db"
    # $SPAMFILTER_DB over the config file: scripts/quickstart sets it so as
    # never to write into the database a user's config names.
    monkeypatch.setenv("SPAMFILTER_DB", "sqlite:///other.db")
    assert database_url(None, configured) == "sqlite:///other.db"
    assert database_url(None, Config()) == "sqlite:///other.db"
    assert database_url("sqlite:///given.db", configured) == "sqlite:///given.db"


def test_invalid_toml_raises(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[model\nalpha = 1\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"modle": {"alpha": 1.0}}, r"unknown section \[modle\]"),
        ({"model": {"alhpa": 1.0}}, r"model\.alhpa: unknown setting"),
        ({"tokenizer": {"stemming": True}}, r"tokenizer\.stemming: unknown setting"),
        ({"daemon": {"user_header": True}}, r"daemon\.user_header: unknown setting"),
        ({"model": 3}, r"\[model\] must be a table"),
    ],
)
def test_unknown_section_or_key_raises(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_dict(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"model": {"alpha": "abc"}}, r"model\.alpha: expected a number, got 'abc'$"),
        ({"model": {"alpha": "0.1"}}, r"model\.alpha: expected a number, got '0.1'$"),
        ({"model": {"alpha": True}}, r"model\.alpha: expected a number, got True$"),
        ({"store": {"batch_size": 1.5}}, r"store\.batch_size: expected a whole number, got 1.5$"),
        ({"store": {"batch_size": True}}, r"store\.batch_size: expected a whole number, got True$"),
        ({"tokenizer": {"stemmer": 1}}, r"tokenizer\.stemmer: expected a string, got 1$"),
        ({"store": {"url": 5}}, r"store\.url: expected a string, got 5$"),
        ({"daemon": {"per_user": "yes"}}, r"daemon\.per_user: expected true or false, got 'yes'$"),
    ],
)
def test_wrong_type_raises(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_dict(data)


@pytest.mark.parametrize("alpha", [0.0, -1.0, 1e-11, float("nan"), float("inf"), 1e308])
def test_out_of_range_alpha_raises(alpha: float) -> None:
    # 1e308: every probability the same, and the log-odds NaN.
    # nan and inf are refused as no number a setting can take.
    said = r"model\.alpha must be between 1e-10 and 1e6" if math.isfinite(alpha) else r"model\.alpha: expected a finite number"
    with pytest.raises(ConfigError, match=said):
        config_from_dict({"model": {"alpha": alpha}})


def test_smallest_alpha_is_accepted() -> None:
    assert config_from_dict({"model": {"alpha": 1e-10}}).model.alpha == 1e-10


def test_unknown_event_model_raises() -> None:
    with pytest.raises(ConfigError, match=r"model\.event_model must be one of bernoulli, multinomial, multinomial-binary"):
        config_from_dict({"model": {"event_model": "poisson"}})


def test_unknown_stemmer_raises() -> None:
    with pytest.raises(ConfigError, match=r"tokenizer\.stemmer must be one of none, porter, snowball-english"):
        config_from_dict({"tokenizer": {"stemmer": "lancaster"}})
    assert config_from_dict({"tokenizer": {"stemmer": "snowball-english"}}).tokenizer.stemmer == "snowball-english"


@pytest.mark.parametrize(
    "decision",
    [
        {"spam_cutoff": 0.9},
        {"ham_cutoff": 0.2},
        {"spam_cutoff": 0.2, "ham_cutoff": 0.9},
        {"spam_cutoff": 1.0, "ham_cutoff": 0.2},
        {"spam_cutoff": 0.9, "ham_cutoff": 0.0},
        {"spam_cutoff": 1.5, "ham_cutoff": -0.5},
        {"cost_ham_as_spam": 0},
        {"cost_spam_as_ham": -1},
        {"cost_unsure": -0.1},
    ],
)
def test_out_of_range_decision_raises(decision: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match=r"decision\."):
        config_from_dict({"decision": decision})


def test_equal_cutoffs_are_accepted() -> None:
    c = config_from_dict({"decision": {"spam_cutoff": 0.5, "ham_cutoff": 0.5}})
    assert (c.decision.ham_cutoff, c.decision.spam_cutoff) == (0.5, 0.5)


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"tokenizer": {"max_bytes": 1023}}, "tokenizer.max_bytes"),
        ({"tokenizer": {"min_word_length": 0}}, "tokenizer.min_word_length"),
        ({"tokenizer": {"min_word_length": 21}}, "tokenizer.min_word_length"),
        ({"tokenizer": {"max_word_length": 101}}, "tokenizer.max_word_length"),
        ({"store": {"batch_size": 0}}, "store.batch_size"),
        ({"store": {"busy_timeout": -1}}, "store.busy_timeout"),
        ({"store": {"busy_timeout": float("inf")}}, "store.busy_timeout"),
        ({"store": {"write_deadline": float("nan")}}, "store.write_deadline"),
        ({"store": {"batch_size": 10**23}}, "store.batch_size"),
        ({"decision": {"cost_ham_as_spam": float("inf")}}, "decision.cost_ham_as_spam"),
        ({"decision": {"cost_unsure": float("inf")}}, "decision.cost_unsure"),
        ({"model": {"max_tokens": -1}}, "model.max_tokens"),
        ({"model": {"unseen_weight": -0.1}}, "model.unseen_weight"),
        ({"model": {"unseen_weight": 1.5}}, "model.unseen_weight"),
        ({"model": {"unseen_weight": 0.5, "dependence": "aode"}}, "model.dependence"),
        ({"model": {"token_cap": 2.0}}, "model.token_cap: removed"),
    ],
)
def test_other_out_of_range_values_raise(data: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        config_from_dict(data)


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"# caf\xe9\n[model]\nalpha = 1\n", "not UTF-8"),
        ("[model]\nalpha = 1\n".encode("utf-16"), "not UTF-8"),
        (b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deep"),
    ],
)
def test_a_config_file_that_is_not_toml_text_is_a_config_error(tmp_path: Path, raw: bytes, said: str) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(raw)
    with pytest.raises(ConfigError, match=f"invalid TOML: .*{said}"):
        load_config(path)


def test_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[model]\nalpha = 0\n")
    with pytest.raises(ConfigError, match=str(path)):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[model]\nalpha = 1" + "0" * 400 + "\n", r"model\.alpha: expected a finite number"),
        ("[model]\nalpha = inf\n", r"model\.alpha: expected a finite number"),
        ("[model]\ntempering = nan\n", r"model\.tempering: expected a finite number"),
        ("[store]\nbusy_timeout = -inf\n", r"store\.busy_timeout: expected a finite number"),
        ("[model]\nalpha = 1" + "0" * 5000 + "\n", "invalid TOML: .*digits"),
    ],
)
def test_a_number_no_float_can_hold_is_a_config_error(tmp_path: Path, text: str, said: str) -> None:
    # It was an internal error (exit 70), and a SIGHUP that read it ended
    # a running daemon.
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=said):
        load_config(path)


@pytest.mark.parametrize("timeout", ["1e12", "86401", "0"])
def test_an_imap_timeout_is_bounded(timeout: str) -> None:
    # 1e12 passed validation, then failed every operation (exit 70).
    account = {"host": "127.0.0.1", "security": "none", "username": "u", "password_env": "P", "timeout": float(timeout)}
    with pytest.raises(ConfigError, match=r"imap\.t\.timeout"):
        config_from_dict({"imap": {"t": account}})
    config_from_dict({"imap": {"t": {**account, "timeout": 86400.0}}})


@pytest.mark.parametrize("host", ["ex..ample.org", "a" * 64 + ".example.org", "."])
def test_an_imap_host_the_resolver_cannot_be_asked_is_a_config_error(host: str) -> None:
    # Python's IDNA encoding refused it at connect time: an internal error (70).
    account = {"host": host, "username": "u", "password_env": "P"}
    with pytest.raises(ConfigError, match=r"imap\.t\.host not a host name"):
        config_from_dict({"imap": {"t": account}})
    config_from_dict({"imap": {"t": {**account, "host": "mail.ex\u00e4mple.org"}}})


def test_a_config_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b"\xef\xbb\xbf[model]\nalpha = 0.2\n")
    assert load_config(path).model.alpha == 0.2


def test_a_database_path_that_cannot_be_made_a_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="~nosuchuser"):
        database_url("~nosuchuser-for-spamfilter/x.db", Config())
    with pytest.raises(ConfigError, match="not UTF-8"):
        database_url("/tmp/\udcff.db", Config())


def test_without_a_home_directory_there_is_no_default_config_or_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No $HOME and no password entry (a container, `env -i`): every command
    # was an internal error, even with --db.
    for name in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "SPAMFILTER_CONFIG", "SPAMFILTER_DB"):
        monkeypatch.delenv(name, raising=False)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert default_config_path() is None
    assert load_config() == Config()
    with pytest.raises(ConfigError, match="--db"):
        database_url(None, Config())
    assert database_url(str(tmp_path / "x.db"), Config()) == f"sqlite:///{tmp_path}/x.db"


def test_a_config_file_is_read_up_to_a_mebibyte(tmp_path: Path) -> None:
    # --config /dev/zero read for ever; /dev/null is still the defaults.
    long = tmp_path / "long.toml"
    long.write_text("# " + "x" * (1 << 20) + "\n")
    with pytest.raises(ConfigError, match="longer than 1 MiB, not a config file"):
        load_config(long)
    if Path("/dev/zero").exists():
        with pytest.raises(ConfigError, match="longer than 1 MiB"):
            load_config(Path("/dev/zero"))
    if Path("/dev/null").exists():
        assert load_config(Path("/dev/null")) == Config()
