"""Start-up: each command imports only what it runs.

A delivery filter (``spamfilter filter < msg``) starts once per message, so
what it imports is its cost. These tests run the command line in a fresh
interpreter and check which modules it loaded (not how long it took).
"""

from __future__ import annotations

import json
import mailbox
import re
import subprocess
import sys
from pathlib import Path

import pytest

# What `filter` must leave out: the statistics, plotting, IMAP and migration
# libraries, nltk (only a stemmer needs it), and the code of other commands.
NOT_FOR_FILTER = [
    "scipy.stats",
    "sklearn",
    "matplotlib",
    "imapclient",
    "alembic",
    "nltk",
    "regex",
    "spamfilter.tools.evaluation",
    "spamfilter.tools.report",
    "spamfilter.tools.plots",
    "spamfilter.imap.sync",
    "spamfilter.imap.session",
    "spamfilter.cli.train",
    "spamfilter.cli.db",
    "spamfilter.cli.evaluate",
    "spamfilter.cli.imap",
    "spamfilter.cli.insight",
    "spamfilter.cli.tune",
]

# Runs the command line in this interpreter and prints the exit code and the
# names of the loaded modules as JSON on stderr (stdout is the filtered mail).
RUN = """
import json, sys
from spamfilter.cli import main
code = main(sys.argv[1:])
sys.stderr.write(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def run_cli(args: list[str], stdin: bytes = b"", env: dict[str, str] | None = None) -> tuple[int, set[str], bytes]:
    """Exit code, the modules loaded, and stdout of `spamfilter ARGS` in a new interpreter."""
    done = subprocess.run([sys.executable, "-c", RUN, *args], input=stdin, capture_output=True, timeout=60, env=env)
    report = json.loads(done.stderr.decode().splitlines()[-1])
    return report["code"], set(report["modules"]), done.stdout


def loaded(modules: set[str], package: str) -> list[str]:
    return sorted(m for m in modules if m == package or m.startswith(package + "."))


@pytest.fixture(scope="module")
def message(sample: Path) -> bytes:
    return bytes(next(iter(mailbox.mbox(str(sample / "inbox.mbox")))))


def run_filter(sample_db: str, message: bytes, config_dir: Path, config_text: str) -> set[str]:
    """The modules `spamfilter filter` loaded with this config; checks it filtered."""
    config = config_dir / "config.toml"
    config.write_text(config_text)
    code, modules, out = run_cli(["--config", str(config), "--db", sample_db, "filter", "--always-zero"], message)
    assert code == 0
    assert b"X-Spam-Status: " in out
    return modules


def test_filter_imports_only_what_it_runs(sample_db: str, message: bytes, tmp_path: Path) -> None:
    modules = run_filter(sample_db, message, tmp_path, "")
    # It did the work: parsed, tokenized, read the counts and scored.
    for needed in ["spamfilter.filter", "spamfilter.tokenizer", "spamfilter.store", "spamfilter.nb.model", "spamfilter.cli.deliver"]:
        assert needed in modules
    assert {name: loaded(modules, name) for name in NOT_FOR_FILTER} == {name: [] for name in NOT_FOR_FILTER}


def test_filter_answered_by_a_daemon_loads_no_maths_no_database_and_no_filter(sample_db: str, message: bytes, tmp_path: Path) -> None:
    from tests.servers.test_daemon import Daemon

    config = tmp_path / "config.toml"
    config.write_text("")
    local = run_cli(["--config", str(config), "--db", sample_db, "filter"], message)
    daemon = Daemon(tmp_path / "serve.log", sample_db, config, "--listen", "127.0.0.1:0", "--processes", "1")
    try:
        code, modules, out = run_cli(["--config", str(config), "--db", sample_db, "filter", "--connect", str(daemon.address)], message)
    finally:
        assert daemon.stop() == 0
    # The daemon's verdict, the same bytes and exit code as filtering in-process.
    assert daemon.log().count("CHECK user=") == 1
    assert (code, out) == (local[0], local[2])
    # pydantic too: Typer checks option values with it, and a text option is passed as it is
    heavy = ["numpy", "scipy", "sqlalchemy", "rich", "pydantic", "spamfilter.filter", "spamfilter.store", "spamfilter.tokenizer", "spamfilter.cli._common"]
    assert {name: loaded(modules, name) for name in heavy} == {name: [] for name in heavy}


def copy_of(sample_db: str, tmp_path: Path) -> tuple[Path, str]:
    """An empty config file and a copy of the sample database (its URL), to train into."""
    import shutil

    config = tmp_path / "config.toml"
    config.write_text("")
    db = tmp_path / "model.db"
    shutil.copy(sample_db.removeprefix("sqlite:///"), db)
    return config, f"sqlite:///{db}"


def test_classify_and_train_with_their_defaults_load_no_pydantic(sample_db: str, message: bytes, tmp_path: Path) -> None:
    # classify's --format and train's --margin have defaults that are not
    # text; Typer's coercion of them imported pydantic, 60 ms of each start.
    config, url = copy_of(sample_db, tmp_path)
    classified = run_cli(["--config", str(config), "--db", url, "classify", "-"], message)
    trained = run_cli(["--config", str(config), "--db", url, "train", "--spam", "-"], message)
    assert classified[0] == 0 and classified[2].split(b"\n")[1].split()[0] in (b"spam", b"ham", b"unsure")
    assert (trained[0], trained[2]) == (0, b"trained 1 spam, 0 ham\n")
    assert (loaded(classified[1], "pydantic"), loaded(trained[1], "pydantic")) == ([], [])
    # a number the user types is still Typer's to convert and check
    assert loaded(run_cli(["--config", str(config), "--db", url, "top-words", "--n", "3"])[1], "pydantic") != []


def test_mark_learned_by_a_daemon_loads_no_maths_no_database_and_no_filter(sample_db: str, message: bytes, tmp_path: Path) -> None:
    # What Dovecot's learn-on-move pipe runs for each moved message.
    from spamfilter.config import load_config
    from spamfilter.filter import Filter
    from tests.servers.test_daemon import Daemon

    config, url = copy_of(sample_db, tmp_path)
    with Filter.open(load_config(config), url) as f:
        before = f.stats()
    daemon = Daemon(tmp_path / "serve.log", url, config, "--listen", "127.0.0.1:0", "--processes", "1", "--allow-tell")
    try:
        code, modules, out = run_cli(["--config", str(config), "--db", url, "mark", "--connect", str(daemon.address), "spam", "-"], message)
        again = run_cli(["--config", str(config), "--db", url, "mark", "--connect", str(daemon.address), "spam", "-"], message)
    finally:
        assert daemon.stop() == 0
    assert (code, out) == (0, f"server {daemon.address}: learned 1 spam\n".encode())
    assert (again[0], again[2]) == (0, f"server {daemon.address}: learned 0 spam; 1 already trained\n".encode())
    with Filter.open(load_config(config), url) as f:
        after = f.stats()
    assert (after.spam_messages, after.ham_messages) == (before.spam_messages + 1, before.ham_messages)  # the daemon learned it
    heavy = [
        "numpy",
        "scipy",
        "sqlalchemy",
        "rich",
        "pydantic",
        "spamfilter.filter",
        "spamfilter.store",
        "spamfilter.tokenizer",
        "spamfilter.cli._common",
        "spamfilter.cli.train",
    ]
    assert {name: loaded(modules, name) for name in heavy} == {name: [] for name in heavy}


def test_filter_finds_the_per_user_daemon_of_its_own_model_and_no_other(sample_db: str, message: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3
    import tempfile

    from spamfilter.store import sqlite_path
    from tests.servers.test_daemon import Daemon

    # A short runtime folder: a Unix socket's path has at most 107 bytes.
    runtime = Path(tempfile.mkdtemp(prefix="sf-run-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    config = tmp_path / "config.toml"
    config.write_text("")
    local = run_cli(["--config", str(config), "--db", sample_db, "filter"], message)  # no daemon yet
    # The same counts in another database: a model the daemon does not serve.
    source = sqlite_path(sample_db)
    assert source is not None
    other = tmp_path / "other.db"
    with sqlite3.connect(source) as src, sqlite3.connect(other) as dst:
        src.backup(dst)
    daemon = Daemon(tmp_path / "serve.log", sample_db, config, "--user-socket", "--processes", "1")
    try:
        assert daemon.address.path == str(runtime / "spamfilter" / "spamd.sock")
        assert (runtime / "spamfilter").stat().st_mode & 0o777 == 0o700
        code, modules, out = run_cli(["--config", str(config), "--db", sample_db, "filter"], message)
        assert daemon.logged("CHECK user=", 1) == 1
        elsewhere = run_cli(["--config", str(config), "--db", f"sqlite:///{other}", "filter"], message)
        assert daemon.logged("CHECK user=", 2) == 2  # asked, and its Model was not this one
        # The same model with other cutoffs (a config `tune --write` changed,
        # the daemon not yet reloaded): its verdict is not this command's.
        strict = tmp_path / "strict.toml"
        strict.write_text("[decision]\nspam_cutoff = 0.5\nham_cutoff = 0.5\n")
        own_settings = run_cli(["--config", str(strict), "--db", sample_db, "filter"], message)
        assert daemon.logged("CHECK user=", 3) == 3
    finally:
        assert daemon.stop() == 0
    assert "spamfilter.filter" in own_settings[1]  # filtered in-process
    # Answered by the daemon without --connect: the in-process bytes and code, no filter loaded.
    assert (code, out) == (local[0], local[2])
    heavy = ["numpy", "sqlalchemy", "spamfilter.filter", "spamfilter.store"]
    assert {name: loaded(modules, name) for name in heavy} == {name: [] for name in heavy}
    # The other database was filtered in-process, with its own (equal) counts.
    assert "spamfilter.filter" in elsewhere[1]
    assert (elsewhere[0], elsewhere[2]) == (local[0], local[2])


def test_filter_does_not_wait_forever_for_a_silent_daemon_on_the_per_user_socket(sample_db: str, message: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import tempfile

    runtime = Path(tempfile.mkdtemp(prefix="sf-run-", dir="/tmp"))
    config = tmp_path / "config.toml"
    config.write_text("")
    local = run_cli(["--config", str(config), "--db", sample_db, "filter"], message)
    (runtime / "spamfilter").mkdir(mode=0o700)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(runtime / "spamfilter" / "spamd.sock"))
    silent.listen(4)  # accepts (the kernel queues the connection) and never answers
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    try:
        code, modules, out = run_cli(["--config", str(config), "--db", sample_db, "filter"], message)
    finally:
        silent.close()
    # Given up on the daemon after its timeout, filtered in-process: the same bytes.
    assert "spamfilter.filter" in modules
    assert (code, out) == (local[0], local[2])


def test_filter_with_a_stemmer_imports_nltk_and_still_not_the_rest(sample_db: str, message: bytes, tmp_path: Path) -> None:
    modules = run_filter(sample_db, message, tmp_path, '[tokenizer]\nstemmer = "porter"\n')
    assert "nltk.stem.porter" in modules
    assert loaded(modules, "spamfilter.tools.evaluation") == loaded(modules, "imapclient") == loaded(modules, "spamfilter.cli.train") == []


def test_version_imports_no_command_and_no_library(tmp_path: Path) -> None:
    code, modules, out = run_cli(["--version"])
    assert (code, out) == (0, b"spamfilter 0.1.0\n")
    heavy = ["spamfilter.cli.classify", "spamfilter.cli._common", "spamfilter.filter", "numpy", "scipy", "sqlalchemy", "nltk"]
    assert {name: loaded(modules, name) for name in heavy} == {name: [] for name in heavy}


def test_tokenizer_import_loads_neither_nltk_nor_scipy() -> None:
    code = "import sys, spamfilter.tokenizer; print(sorted(m for m in sys.modules if m.split('.')[0] in ('nltk', 'scipy', 'numpy', 'regex')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == "[]\n"


def test_help_lists_every_command_with_its_help_text() -> None:
    import typer.main

    from spamfilter.cli import COMMAND_MODULES, app

    code, modules, out = run_cli(["--help"])
    assert code == 0
    listed = re.findall(r"^  (\S+)\s+(\S.*)$", out.decode().partition("Commands:")[2], re.MULTILINE)
    assert [name for name, _ in listed] == list(COMMAND_MODULES)
    # Every command module is registered: none is defined and missing from the list.
    for module in set(COMMAND_MODULES.values()):
        __import__(f"spamfilter.cli.{module}")
    group = typer.main.get_command(app)
    assert isinstance(group, typer.main.TyperGroup)
    assert sorted(group.commands) == sorted(COMMAND_MODULES)
    for name, text in listed:
        command = group.commands[name]
        first = (command.help or "").strip().splitlines()[0]
        assert text.rstrip(".").rstrip() and first.startswith(text.removesuffix("...").rstrip())
