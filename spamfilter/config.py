"""Settings: ``config.toml`` read into frozen dataclasses.

Nothing is read at import time. ``load_config(path)`` returns the defaults
below overlaid with whatever the file sets; every value is range-checked and a
bad one raises ``ConfigError`` naming the key. The repository's ``config.toml``
documents every key with its default (a test keeps the two in step).
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import quote, unquote

from spamfilter.errors import ConfigError
from spamfilter.locations import default_config_path, default_location_url, environment_db_url

EventModel = Literal["bernoulli", "multinomial", "multinomial-binary"]
EVENT_MODELS: tuple[str, ...] = get_args(EventModel)
Dependence = Literal["none", "spode", "aode"]
DEPENDENCES: tuple[str, ...] = get_args(Dependence)


class TrainMode(StrEnum):
    """Which messages of a labelled stream are trained (``spamfilter.nb.learning``)."""

    teft = "teft"  # every message: train on everything
    toe = "toe"  # train on error: misfiled or unsure
    tune = "tune"  # errors, and messages within a margin of a decision bound


#: The margin of ``TrainMode.tune`` in nats of log-odds. Online (1-ROCA %,
#: teft -> 12 nats): every corpus as one stream 0.157 -> 0.092, enron1 to
#: enron6 as one 0.060 -> 0.049, spamassassin 0.260 -> 0.250, csdmc2010
#: 0.075 -> 0.064. Smaller margins train less and lose on the short
#: streams (4 nats: spamassassin 0.295, csdmc2010 0.097); larger ones
#: drift back towards teft.
TUNE_MARGIN = 12.0

#: What an online run trains by default (``Filter.learn_online``,
#: ``evaluation.run_online``, ``spamfilter evaluate``).
ONLINE_TRAIN_MODE = TrainMode.tune


# The event models' two differences that matter outside the maths of
# spamfilter.nb.model (which message counts they read, and whether absent
# tokens count), each stated once.
def counts_occurrences(event_model: str) -> bool:
    """Whether the model counts every occurrence of a token ("multinomial")
    rather than the messages containing it (then a message is a set of
    tokens: its matrix row is 0/1)."""
    return event_model == "multinomial"


def has_absent_term(event_model: str) -> bool:
    """Whether the tokens a message lacks are evidence too ("bernoulli").
    Their sum needs a model's whole histogram of token counts, which two
    models' counts cannot simply add up to: such a model cannot be merged
    with the shared one (``shared_model = "merge"``)."""
    return event_model == "bernoulli"


ImapSecurity = Literal["tls", "starttls", "none"]
IMAP_SECURITY: tuple[str, ...] = get_args(ImapSecurity)
SpamAction = Literal["move", "keyword", "report"]
SPAM_ACTIONS: tuple[str, ...] = get_args(SpamAction)
SharedModel = Literal["none", "fallback", "merge"]
SHARED_MODELS: tuple[str, ...] = get_args(SharedModel)
TrainedAction = Literal["leave", "move"]
TRAINED_ACTIONS: tuple[str, ...] = get_args(TrainedAction)
Stemmer = Literal["none", "porter", "snowball-english"]
STEMMERS: tuple[str, ...] = get_args(Stemmer)


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Where the token counts live and how the store behaves.

    url: SQLAlchemy URL; empty means the per-user default database
        (``$XDG_DATA_HOME/spamfilter/spamfilter.db``).
    busy_timeout: seconds a writer waits for a lock held by another process.
    write_deadline: seconds a training batch (or opening the database) keeps
        being tried again, with growing pauses, while other processes hold the
        database; ``filter`` uses 0 (tempfail at once, the MTA retries).
    batch_size: messages per training transaction and per scoring query.
    user: whose model to use ("" = the default model, which is also the
        shared model other users can fall back to or merge with).
    shared_model: how a user's model uses the shared one: "none", "fallback"
        (the shared model classifies until the user has trained
        shared_min_messages of both spam and ham), or "merge" (counts added).
    """

    url: str = ""
    busy_timeout: float = 30.0
    write_deadline: float = 600.0
    batch_size: int = 200
    user: str = ""
    shared_model: SharedModel = "none"
    shared_min_messages: int = 20

    def within(self, seconds: float) -> StoreConfig:
        """These settings with every wait for another process's lock
        (``busy_timeout``, ``write_deadline``) bounded by ``seconds``."""
        return replace(self, busy_timeout=min(self.busy_timeout, seconds), write_deadline=min(self.write_deadline, seconds))


def valid_model_name(name: str) -> bool:
    """Whether ``name`` may name a user's model (``store.user``, ``--user``):
    at most 200 printable characters (longer ones outgrow PostgreSQL's index rows)."""
    return len(name) <= 200 and name.isprintable()


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The naive Bayes event model, its Lidstone smoothing strength alpha, and
    the likelihood tempering exponent (0 = textbook naive Bayes; see
    ``model.joint_log_likelihood``)."""

    event_model: EventModel = "multinomial-binary"
    alpha: float = 0.1
    tempering: float = 0.55
    min_evidence: float = 0.0
    max_tokens: int = 0
    #: Add the Gaussian log-odds of the continuous message features
    #: (``nb.gaussian.feature_log_odds``), scaled by feature_weight.
    features: bool = False
    feature_weight: float = 1.0
    #: Score the tokens of header lines (``tokenizer.is_header_line``) apart
    #: from the rest: their own tempering, and only their header_max_tokens
    #: strongest (0 = all) (``model.joint_log_likelihood``).
    header_apart: bool = True
    header_max_tokens: int = 10
    #: How much each token of a message that the model has never seen
    #: counts in the size n that tempering divides by (evidence zero; with
    #: header_apart, the body's unseen tokens in the body's n). 0: unseen
    #: tokens are left out (``model.joint_log_likelihood``). Naive Bayes
    #: only: a one-dependence model needs 0.
    unseen_weight: float = 0.0
    #: "none": naive Bayes; "aode"/"spode": one-dependence estimators over
    #: parent tokens (``spamfilter.nb.aode``), with aode_parents parents (SPODE:
    #: one) and pairs counted with aode_children child tokens (in at least
    #: aode_child_support messages), the support threshold m' =
    #: aode_min_support, chosen again when the ledger has grown
    #: reselect_growth times (0: only by ``db reselect``).
    dependence: Dependence = "none"
    aode_parents: int = 200
    aode_children: int = 20000
    aode_child_support: int = 2
    aode_min_support: int = 30
    reselect_growth: float = 2.0


@dataclass(frozen=True, slots=True)
class DecisionConfig:
    """The loss matrix of the Bayes decision rule, and optional explicit cutoffs.

    cost_ham_as_spam: loss when a ham is filed as spam (a lost message).
    cost_spam_as_ham: loss when a spam reaches the inbox.
    cost_unsure: loss of sending a message to the unsure folder for review;
        0 disables the unsure verdict.
    spam_cutoff, ham_cutoff: when both are set (probabilities, ham_cutoff <=
        spam_cutoff) they replace the cutoffs derived from the costs.
    """

    cost_ham_as_spam: float = 10.0
    cost_spam_as_ham: float = 1.0
    cost_unsure: float = 0.2
    spam_cutoff: float | None = None
    ham_cutoff: float | None = None


@dataclass(frozen=True, slots=True)
class TokenizerConfig:
    """Switches of the tokenizer (see ``spamfilter.tokenizer``)."""

    max_bytes: int = 200_000
    min_word_length: int = 3
    max_word_length: int = 20
    bigrams: bool = True
    stemmer: Stemmer = "none"
    header_tokens: bool = True
    fold_case: bool = True
    #: Words of the headers a mailing list adds (List-*, Sender, Errors-To,
    #: Precedence, X-BeenThere, ...); false keeps only their ``header:<name>``.
    list_header_words: bool = False


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    """How ``spamfilter serve`` chooses the model of a request.

    per_user: the request's ``User`` header (spamc sends the Unix user it
        runs as, or ``-u NAME``) chooses the model, and a user without one
        follows ``store.shared_model``; false: every request is scored and
        learned with the default model (``store.user``, or ``--user``).
    processes: processes that serve requests, each with the model in
        memory (0: one per core); ``serve --processes`` overrides it.
    """

    per_user: bool = False
    processes: int = 0


@dataclass(frozen=True, slots=True)
class ImapAccount:
    """One IMAP account (a ``[imap.NAME]`` table) that ``spamfilter imap run`` filters.

    host, port: the server; port 0 means 993 for ``tls``, else 143.
    security: "tls" (implicit TLS), "starttls", or "none" (only to a loopback host).
    verify: check the server's certificate (and host name); ca_file adds a CA.
    username; the password comes from the environment variable named by
        password_env, or from the output of password_command (run by the
        shell); it is never stored in the config or the database.
    classify_folders: folders whose new messages are classified.
    spam_folder: where spam goes (created if missing); unsure_folder: where
        unsure messages go ("" = leave them where they are).
    train_spam_folder, train_ham_folder: folders whose messages are trained
        as spam / ham ("" = none); trained_action "move" then files trained
        spam in spam_folder and trained ham in the first classify folder.
    spam_action: "move" to spam_folder, "keyword" ($Junk on spam, left in
        place), or "report" (change nothing on the server, only report).
    chunk_size: messages per fetch (at most 1,000: a UID list is one command
        line); chunk_bytes caps the bytes of one fetch.
    retries: reconnect attempts after a network error (1, 2, 4 ... s apart).
    timeout: seconds a network operation may take.
    """

    name: str = ""
    host: str = "localhost"
    port: int = 0
    security: ImapSecurity = "tls"
    verify: bool = True
    ca_file: str = ""
    username: str = ""
    password_env: str = ""
    password_command: str = ""
    classify_folders: tuple[str, ...] = ("INBOX",)
    spam_folder: str = "Junk"
    unsure_folder: str = ""
    train_spam_folder: str = ""
    train_ham_folder: str = ""
    trained_action: TrainedAction = "leave"
    spam_action: SpamAction = "move"
    chunk_size: int = 100
    chunk_bytes: int = 20_000_000
    retries: int = 4
    timeout: float = 60.0

    @property
    def server_port(self) -> int:
        """The port to connect to."""
        return self.port or (993 if self.security == "tls" else 143)


@dataclass(frozen=True, slots=True)
class Config:
    """All settings; pass it explicitly, never keep it in a global."""

    store: StoreConfig = field(default_factory=StoreConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    decision: DecisionConfig = field(default_factory=DecisionConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    imap: tuple[ImapAccount, ...] = ()

    def imap_account(self, name: str | None = None) -> ImapAccount:
        """The account called ``name``, or the only (first) one if None."""
        if not self.imap:
            raise ConfigError("no IMAP account is configured: add an [imap.NAME] table to the config file")
        if name is None:
            return self.imap[0]
        for account in self.imap:
            if account.name == name:
                return account
        raise ConfigError(f"no IMAP account named {name!r} (configured: {', '.join(a.name for a in self.imap)})")


def database_url(url: str | None, config: Config) -> str:
    """The database a command opens: ``url`` (``--db``), else
    ``$SPAMFILTER_DB``, else the config's ``store.url``, else
    `default_location_url` (the command line over the environment over the
    config file); a plain file path (no ``://``) names a SQLite file, as
    ``sqlite:///`` and its absolute path."""
    chosen = url or environment_db_url() or config.store.url or default_location_url()
    if chosen is None:
        raise ConfigError("no database named and no home directory to keep one in: name one with --db or $SPAMFILTER_DB")
    if "://" in chosen:
        return chosen
    try:
        path = str(Path(chosen).expanduser().absolute())
    except RuntimeError as exc:  # "~nosuchuser/x.db"
        raise ConfigError(f"database {chosen!r}: {exc}") from None
    try:
        # Quoted: in a URL "?" starts the options and "%" an escape.
        return "sqlite:///" + quote(path, safe="/")
    except UnicodeEncodeError:
        raise ConfigError(f"database {chosen!r}: the path is not UTF-8; name one that is") from None


def scoring_settings(config: Config) -> str:
    """What of ``config`` a verdict depends on (the tokenizer, the model,
    the decision's costs and cutoffs, which model a user without enough
    mail of their own is scored with), as text to compare: a daemon's
    verdict stands for the filter's own only when the two are equal."""
    s = config.store
    return repr((config.tokenizer, config.model, config.decision, s.shared_model, s.shared_min_messages))


_RELATIVE_SQLITE = re.compile(r"(sqlite(?:\+\w+)?:///)(?!/)([^?]*)(.*)", re.DOTALL)


def absolute_db_url(url: str) -> str:
    """``url`` with the path of a relative SQLite file (``sqlite:///m.db``)
    made absolute from this process's working folder: two processes in
    different folders name different files by it."""
    m = _RELATIVE_SQLITE.fullmatch(url)
    if m is None or not m.group(2):
        return url
    return m.group(1) + quote(str(Path(unquote(m.group(2))).absolute()), safe="/") + m.group(3)


_MAX_CONFIG_BYTES = 1 << 20


def load_config(path: Path | None = None) -> Config:
    """Read ``path`` (or the default config file if it exists) over the defaults.

    An explicitly given path must exist; the default one may be absent.
    """
    if path is None:
        path = default_config_path()
        if path is None:
            return Config()  # no home directory, so no per-user file
        # The per-user file is optional; a file named by $SPAMFILTER_CONFIG is not.
        try:
            present = path.exists()
        except OSError as exc:
            # A folder on the way this user may not search ($HOME another
            # user's, after `su` without `-`): whether it holds settings
            # cannot be told, so they are not silently left out.
            raise ConfigError(f"cannot tell whether the config file {path} exists: {exc.strerror} (name one with --config or $SPAMFILTER_CONFIG)") from None
        if not present and not os.environ.get("SPAMFILTER_CONFIG"):
            return Config()
    try:
        with open(path, "rb") as fh:
            # At most 1 MiB: `--config /dev/zero` read for ever (a pipe,
            # `--config <(...)`, is still read).
            raw = fh.read(_MAX_CONFIG_BYTES + 1)
        if len(raw) > _MAX_CONFIG_BYTES:
            raise ConfigError(f"{path}: longer than {_MAX_CONFIG_BYTES >> 20} MiB, not a config file")
        # "utf-8-sig": a byte order mark, as some editors write, is not TOML
        # ("Invalid statement (at line 1, column 1)").
        data = tomllib.loads(raw.decode("utf-8-sig"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: arrays or tables nested too deep") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    return config_from_dict(data, origin=str(path))


def config_from_dict(data: dict[str, Any], *, origin: str = "config") -> Config:
    """Build a validated ``Config`` from a parsed TOML document."""
    sections = {f.name: f for f in fields(Config)}
    unknown = set(data) - set(sections)
    if unknown:
        raise ConfigError(f"{origin}: unknown section [{sorted(unknown)[0]}]")
    parts: dict[str, Any] = {}
    for name in sections:
        if name == "imap":
            parts[name] = _imap_accounts(data.get("imap", {}), f"{origin}: imap")
            continue
        default = getattr(Config(), name)
        table = data.get(name, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{origin}: [{name}] must be a table")
        gone = sorted(f"{name}.{key}" for key in table if f"{name}.{key}" in REMOVED)
        if gone:
            raise ConfigError(f"{origin}: {gone[0]}: {REMOVED[gone[0]]}")
        parts[name] = _overlay(default, table, f"{origin}: {name}")
    config = Config(**parts)
    validate(config, origin)
    return config


def _imap_accounts(data: Any, where: str) -> tuple[ImapAccount, ...]:
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a table of accounts ([imap.NAME])")
    accounts = []
    for name, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{where}.{name} must be a table ([imap.{name}])")
        if "name" in table:
            raise ConfigError(f"{where}.{name}.name: unknown setting (the table's name is the account's)")
        accounts.append(_overlay(ImapAccount(name=name), table, f"{where}.{name}"))
    return tuple(accounts)


#: Settings that existed once, and why they went (a config that still sets one is told so).
REMOVED = {"model.token_cap": "removed: clipping each token's log-likelihood ratio ranked worse on every corpus measured (docs/benchmarks.md); delete the line"}


def _overlay(default: Any, table: dict[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(default)}
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in known:
            raise ConfigError(f"{where}.{key}: unknown setting")
        current = getattr(default, key)
        expected: tuple[type, ...]
        wanted: str  # said in words: alpha = "abc" wants a number, not an "int"
        if isinstance(current, tuple):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{where}.{key}: expected a list of strings, got {value!r}")
            values[key] = tuple(value)
            continue
        if isinstance(current, bool):
            expected, wanted = (bool,), "true or false"
        elif isinstance(current, int):
            expected, wanted = (int,), "a whole number"
        elif isinstance(current, float) or current is None:
            expected, wanted = (int, float), "a number"
        else:
            expected, wanted = (str,), "a string"
        if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
            raise ConfigError(f"{where}.{key}: expected {wanted}, got {value!r}")
        if float in expected and not isinstance(value, bool):
            # No setting means anything at infinity: 1e12 s or inf as a
            # timeout failed every operation, and 1 followed by 400 zeros
            # as alpha is no float at all.
            try:
                value = float(value)
            except OverflowError:
                value = math.inf
            if not math.isfinite(value):
                raise ConfigError(f"{where}.{key}: expected a finite number, got {table[key]!r}")
        values[key] = value
    return replace(default, **values)


def _validate_model(config: Config, need: Callable[[bool, str, str, object], None]) -> None:
    """The naive Bayes keys of [model] (see ``validate``)."""
    m = config.model
    need(m.event_model in EVENT_MODELS, "model.event_model", f"must be one of {', '.join(EVENT_MODELS)}", m.event_model)
    need(math.isfinite(m.alpha) and 1e-10 <= m.alpha <= 1e6, "model.alpha", "must be between 1e-10 and 1e6", m.alpha)
    need(0.0 <= m.tempering <= 1.0, "model.tempering", "must be between 0 and 1", m.tempering)
    need(0.0 <= m.min_evidence <= 50.0, "model.min_evidence", "must be between 0 and 50", m.min_evidence)
    need(0 <= m.max_tokens <= 100_000, "model.max_tokens", "must be between 0 (every token) and 100000", m.max_tokens)
    need(0 <= m.header_max_tokens <= 100_000, "model.header_max_tokens", "must be between 0 (every token) and 100000", m.header_max_tokens)
    need(0.0 <= m.unseen_weight <= 1.0, "model.unseen_weight", "must be between 0 (unseen tokens left out) and 1", m.unseen_weight)
    need(0.0 <= m.feature_weight <= 10.0, "model.feature_weight", "must be between 0 and 10", m.feature_weight)


def _validate_dependence(config: Config, need: Callable[[bool, str, str, object], None]) -> None:
    """The one-dependence keys of [model] (see ``validate``)."""
    m, s = config.model, config.store
    need(m.dependence in DEPENDENCES, "model.dependence", f"must be one of {', '.join(DEPENDENCES)}", m.dependence)
    need(1 <= m.aode_parents <= 10_000, "model.aode_parents", "must be between 1 and 10000", m.aode_parents)
    need(m.aode_parents <= m.aode_children <= 1_000_000, "model.aode_children", "must be between aode_parents and 1000000", m.aode_children)
    need(m.aode_child_support >= 1, "model.aode_child_support", "must be >= 1", m.aode_child_support)
    need(m.aode_min_support >= 1, "model.aode_min_support", "must be >= 1", m.aode_min_support)
    need(m.reselect_growth == 0 or 1.0 < m.reselect_growth <= 100.0, "model.reselect_growth", "must be 0 (only db reselect) or between 1 and 100", m.reselect_growth)
    if m.dependence != "none":
        need(m.event_model == "multinomial-binary", "model.dependence", 'needs event_model = "multinomial-binary"', m.dependence)
        need(s.shared_model != "merge", "model.dependence", 'does not combine with store.shared_model = "merge"', m.dependence)
        need(m.unseen_weight == 0, "model.dependence", "scores without unseen tokens: needs unseen_weight = 0", m.dependence)


def validate(config: Config, origin: str = "config") -> None:
    """Raise ``ConfigError`` for any value out of its range."""

    def need(ok: bool, key: str, rule: str, value: object) -> None:
        if not ok:
            raise ConfigError(f"{origin}: {key} {rule} (got {value!r})")

    m, d, t, s = config.model, config.decision, config.tokenizer, config.store
    _validate_model(config, need)
    _validate_dependence(config, need)
    need(0 < d.cost_ham_as_spam < math.inf, "decision.cost_ham_as_spam", "must be > 0 and finite", d.cost_ham_as_spam)
    need(0 < d.cost_spam_as_ham < math.inf, "decision.cost_spam_as_ham", "must be > 0 and finite", d.cost_spam_as_ham)
    need(0 <= d.cost_unsure < math.inf, "decision.cost_unsure", "must be >= 0 and finite", d.cost_unsure)
    need((d.spam_cutoff is None) == (d.ham_cutoff is None), "decision.spam_cutoff", "and ham_cutoff must be set together", d.spam_cutoff)
    if d.spam_cutoff is not None and d.ham_cutoff is not None:
        need(0 < d.ham_cutoff <= d.spam_cutoff < 1, "decision.ham_cutoff", "must satisfy 0 < ham_cutoff <= spam_cutoff < 1", (d.ham_cutoff, d.spam_cutoff))
    need(t.max_bytes >= 1024, "tokenizer.max_bytes", "must be >= 1024", t.max_bytes)
    need(1 <= t.min_word_length <= t.max_word_length, "tokenizer.min_word_length", "must be between 1 and max_word_length", t.min_word_length)
    need(t.max_word_length <= 100, "tokenizer.max_word_length", "must be <= 100", t.max_word_length)
    need(t.stemmer in STEMMERS, "tokenizer.stemmer", f"must be one of {', '.join(STEMMERS)}", t.stemmer)
    need(0 <= s.busy_timeout <= 86_400, "store.busy_timeout", "must be between 0 and 86400 seconds", s.busy_timeout)
    need(0 <= s.write_deadline <= 86_400, "store.write_deadline", "must be between 0 and 86400 seconds", s.write_deadline)
    need(1 <= s.batch_size <= 1_000_000, "store.batch_size", "must be between 1 and 1000000", s.batch_size)
    need(0 <= config.daemon.processes <= 64, "daemon.processes", "must be between 0 and 64", config.daemon.processes)
    need(s.shared_model in SHARED_MODELS, "store.shared_model", f"must be one of {', '.join(SHARED_MODELS)}", s.shared_model)
    need(s.shared_min_messages >= 0, "store.shared_min_messages", "must be >= 0", s.shared_min_messages)
    need(
        not (s.shared_model == "merge" and has_absent_term(m.event_model)),
        "store.shared_model",
        '"merge" needs a multinomial event model (the Bernoulli absent-token sum cannot be merged)',
        s.shared_model,
    )
    need(valid_model_name(s.user), "store.user", "must be printable, at most 200 characters", s.user)
    for a in config.imap:
        key = f"imap.{a.name}"
        need(bool(a.host), f"{key}.host", "must be set", a.host)
        problem = host_name_problem(a.host)
        need(problem is None, f"{key}.host", str(problem), a.host)
        need(0 <= a.port <= 65535, f"{key}.port", "must be between 0 and 65535", a.port)
        need(a.security in IMAP_SECURITY, f"{key}.security", f"must be one of {', '.join(IMAP_SECURITY)}", a.security)
        need(a.security != "none" or is_loopback(a.host), f"{key}.security", '"none" sends the password in clear text: only allowed to a loopback host', a.security)
        need(bool(a.username), f"{key}.username", "must be set", a.username)
        need(not (a.password_env and a.password_command), f"{key}.password_env", "and password_command exclude each other", a.password_env)
        need(bool(a.password_env or a.password_command), f"{key}.password_env", "or password_command must be set", "")
        need(bool(a.classify_folders) and all(a.classify_folders), f"{key}.classify_folders", "must name at least one folder", a.classify_folders)
        need(bool(a.spam_folder), f"{key}.spam_folder", "must be set", a.spam_folder)
        watched = [*a.classify_folders, a.spam_folder, a.unsure_folder, a.train_spam_folder, a.train_ham_folder]
        watched = [f for f in watched if f]
        # IMAP's INBOX is one folder however it is spelt (RFC 3501, 5.1).
        same = ["INBOX" if f.upper() == "INBOX" else f for f in watched]
        need(len(set(same)) == len(same), f"{key}", "folders must all differ (INBOX in any case is one folder)", watched)
        need(a.trained_action in TRAINED_ACTIONS, f"{key}.trained_action", f"must be one of {', '.join(TRAINED_ACTIONS)}", a.trained_action)
        need(a.spam_action in SPAM_ACTIONS, f"{key}.spam_action", f"must be one of {', '.join(SPAM_ACTIONS)}", a.spam_action)
        need(1 <= a.chunk_size <= 1000, f"{key}.chunk_size", "must be between 1 and 1000", a.chunk_size)
        need(a.chunk_bytes >= 1_000_000, f"{key}.chunk_bytes", "must be >= 1000000", a.chunk_bytes)
        need(0 <= a.retries <= 20, f"{key}.retries", "must be between 0 and 20", a.retries)
        need(0 < a.timeout <= 86_400, f"{key}.timeout", "must be more than 0 and at most 86400 seconds", a.timeout)
    names = [a.name for a in config.imap]
    need(len(set(names)) == len(names), "imap", "account names must differ", names)


def host_name_problem(host: str) -> str | None:
    """Why ``host`` cannot be looked up (an empty label, one over 63
    characters: what the system's resolver is never asked), or None."""
    try:
        host.encode("idna")
    except UnicodeError:
        return "not a host name: a dot-separated part is empty or longer than 63 characters"
    return None


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine (localhost or a loopback address)."""
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
