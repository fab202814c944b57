"""Usage errors: every one, click's own or found by a command after
parsing, prints the command's usage line, the ``Try '... --help'`` hint and
one ``Error:`` line, and exits 64."""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spamfilter.cli import app, exitcodes


def assert_usage_error(stderr: str, command: str, message: str) -> None:
    """``stderr`` is the usage error of ``command`` (its words after
    ``spamfilter``; "" for the root's options) saying ``message``."""
    path = " ".join(["spamfilter", *command.split()])
    lines = stderr.splitlines()
    assert lines[0].startswith(f"Usage: {path} [OPTIONS]"), stderr
    assert lines[1:] == [f"Try '{path} --help' for help.", "", f"Error: {message}"], stderr


#: (arguments after --db DB, the command, its message). In both, {tmp} is
#: a folder of the test, {sample} the sample mail; a module in `tty` reads
#: a terminal on stdin.
CASES = [
    (["--user", "x" * 201, "stats"], "", "--user: a model name is at most 200 printable characters"),
    (["evaluate", "--index", "{tmp}/index", "--protocol", "cv"], "evaluate", "--db: cross-validation trains a model per fold in memory; it cannot use one database"),
    (
        ["evaluate", "--index", "{tmp}/index", "--index", "{tmp}/index"],
        "evaluate",
        "Invalid value for --index: give one index: the stream, in arrival order (join several into one file)",
    ),
    (
        ["tune", "--index", "{tmp}/index", "--index", "{tmp}/index"],
        "tune",
        "Invalid value for --index: give one index: the stream, in arrival order (join several into one file)",
    ),
    (["report", "--out", "{tmp}/none/report.html"], "report", "--out {tmp}/none/report.html: no such folder {tmp}/none"),
    (["evaluate", "--index", "{tmp}/index", "--out", "{tmp}"], "evaluate", "--out {tmp}: it is a folder; give the name of a file"),
    (["top-words", "--plot", "{tmp}/none/words.png"], "top-words", "--plot {tmp}/none/words.png: no such folder {tmp}/none"),
    (["top-words", "--min-count", str(2**63)], "top-words", "a number given is too large: Python int too large to convert to SQLite INTEGER"),
    (["explain", "{sample}/train-spam.mbox"], "explain", "{sample}/train-spam.mbox: holds more than one message; explain takes one (a message file or -)"),
    (["explain", "-"], "explain", "explain reads a message on standard input when MESSAGE is -"),
    (["classify"], "classify", "Invalid value for SRC: give at least one SRC or --index"),
    (["train"], "train", "Invalid value for SRC: give --spam, --ham or --index"),
    (["db", "export", "{tmp}"], "db export", "cannot write {tmp}: it is a folder; give the name of a file"),
    (["db", "export", "{tmp}/none/counts.tsv"], "db export", "cannot write {tmp}/none/counts.tsv: No such file or directory"),
    # A part of the path that is a file: not "no such folder", not "permission denied".
    (["db", "export", "{tmp}/index/counts.tsv"], "db export", "cannot write {tmp}/index/counts.tsv: {tmp}/index is not a folder"),
    (["evaluate", "--index", "{tmp}/index", "--roc", "{tmp}/index/a/roc.png"], "evaluate", "--roc {tmp}/index/a/roc.png: {tmp}/index is not a folder"),
    (["db", "import", "--replace", "--add", "{tmp}/counts.tsv"], "db import", "give --replace or --add, not both"),
    (["db", "import", "-"], "db import", "db import - reads the counts from standard input, which is a terminal: pipe them in or give a file"),
    (["db", "import", "{tmp}/counts.tsv"], "db import", "the model of the default user is not empty: give --replace or --add"),
    # An empty --db ("$UNSET" in a script) trained the user's real database.
    (["--db", "", "train", "--ham", "{tmp}/index"], "", "--db: empty; name a database (a URL or a file)"),
    (["--config", "", "stats"], "", "--config: empty; name a config file"),
    (["serve", "--socket-mode", "9"], "serve", "Invalid value for --socket-mode: not an octal mode from 0 to 0777: 9"),
    # os.chmod took -1 as 7777: a socket every local user could write to.
    (["serve", "--socket", "{tmp}/s.sock", "--socket-mode", "-1"], "serve", "Invalid value for --socket-mode: not an octal mode from 0 to 0777: -1"),
    (["milter", "--socket-mode", "1777777"], "milter", "Invalid value for --socket-mode: not an octal mode from 0 to 0777: 1777777"),
    # A host name the resolver is never asked about ended in an internal error (70).
    (
        ["serve", "--listen", "ex..ample:7830"],
        "serve",
        "Invalid value for --listen: not a host name: a dot-separated part is empty or longer than 63 characters: 'ex..ample:7830'",
    ),
    # Arguments, not the config file: usage errors (they were 78).
    (["serve", "--allowed-ips", "garbage"], "serve", "Invalid value for '--allowed-ips': 'garbage' does not appear to be an IPv4 or IPv6 network"),
    (["serve", "--allowed-ips", ",,"], "serve", "Invalid value for '--allowed-ips': names no network: ',,'"),
    (["milter", "--allowed-ips", " , "], "milter", "Invalid value for '--allowed-ips': names no network: ' , '"),
    (["serve", "--allowed-ips", ""], "serve", "Invalid value for '--allowed-ips': names no network: ''"),
    (["milter", "--socket-group", "no-such-group-for-spamfilter"], "milter", "Invalid value for '--socket-group': no such group: no-such-group-for-spamfilter"),
    # Options that do nothing in the mode chosen were ignored without a word.
    (["evaluate", "--index", "{tmp}/index", "--protocol", "split", "--train-mode", "toe"], "evaluate", "--train-mode does nothing with --protocol split"),
    (["evaluate", "--index", "{tmp}/index", "--head", "5"], "evaluate", "--head does nothing with --protocol online"),
    (["evaluate", "--index", "{tmp}/index", "--protocol", "split", "--seed", "4"], "evaluate", "--seed does nothing with --protocol split"),
    (["evaluate", "--index", "{tmp}/index", "--train-mode", "toe", "--margin", "3"], "evaluate", "--margin does nothing with --train-mode toe"),
    (["train", "--margin", "3", "--spam", "{tmp}/index"], "train", "--margin does nothing with --train-mode teft"),
    # Options that cannot go together were exit 65, "a message could not be read".
    (
        ["tune", "--index", "{tmp}/index", "--model", "bernoulli", "--dependence", "spode"],
        "tune",
        'Invalid value: no setting to try: a dependence (spode, aode) needs the event model "multinomial-binary", no merged shared model and unseen_weight 0',
    ),
    # One place to listen: --socket won over --listen without a word.
    (
        ["serve", "--socket", "{tmp}/s.sock", "--listen", "127.0.0.1:17999"],
        "serve",
        "Invalid value for --socket: give one of --listen, --socket, --user-socket, not --listen and --socket",
    ),
    (
        ["milter", "--listen", "127.0.0.1:17999", "--socket", "{tmp}/m.sock"],
        "milter",
        "Invalid value for --socket: give one of --listen, --socket, not --listen and --socket",
    ),
    (["imap", "run", "--interval", "5"], "imap run", "Invalid value for --interval: is the wait between the runs of --loop; without --loop there is one run"),
    # Infinite waits: the daemon answered every request EX_SOFTWARE, and
    # imap run --loop stopped with an internal error.
    (["serve", "--timeout", "inf"], "serve", "Invalid value for '--timeout': Input should be less than or equal to 86400"),
    (["milter", "--timeout", "1e12"], "milter", "Invalid value for '--timeout': Input should be less than or equal to 86400"),
    (["imap", "run", "--loop", "--interval", "inf"], "imap run", "Invalid value for '--interval': Input should be less than or equal to 86400"),
    # A label of train without its source: click took the next option for
    # the source and blamed what followed ("unexpected extra argument").
    (["train", "--spam", "--ham", "{tmp}/index"], "train", "--spam needs a source (a file, folder or -) before --ham"),
    (["train", "--ham", "--spam", "{tmp}/index"], "train", "--ham needs a source (a file, folder or -) before --spam"),
    (["train", "--spam", "--index", "{tmp}/index"], "train", "--spam needs a source (a file, folder or -) before --index"),
    (["train", "--ham", "{tmp}/index", "--spam", "--jobs=1", "{tmp}/index"], "train", "--spam needs a source (a file, folder or -) before --jobs"),
    # Raised by click's parser without the command's context.
    (["--config"], "", "Option '--config' requires an argument."),
    (["classify", "--index"], "classify", "Option '--index' requires an argument."),
    (["db", "export", "--help=x"], "db export", "Option '--help' does not take a value."),
]

#: The commands that ask `is_tty_stdin` (a CliRunner's stdin is never a terminal).
TTY = {("explain", "-"): "spamfilter.cli.insight.is_tty_stdin", ("db", "import", "-"): "spamfilter.cli.db.is_tty_stdin"}


@pytest.mark.parametrize(("args", "command", "message"), CASES, ids=[" ".join(a)[:60] for a, _, _ in CASES])
def test_every_usage_error_shows_the_usage_line(
    args: list[str], command: str, message: str, sample: Path, sample_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    shutil.copy(sample_db.removeprefix("sqlite:///"), db)
    (tmp_path / "index").write_text(f"spam {sample}/train-spam.mbox\n")
    (tmp_path / "counts.tsv").write_text("not counts\n")
    where = {"tmp": tmp_path, "sample": sample}
    tty = TTY.get(tuple(args))
    if tty is not None:
        monkeypatch.setattr(tty, lambda: True)
    result = CliRunner().invoke(app, ["--db", str(db), *(a.format(**where) for a in args)], prog_name="spamfilter")
    assert result.exit_code == exitcodes.USAGE, result.output
    assert_usage_error(result.stderr, command, message.format(**where))


def test_a_user_socket_under_a_runtime_folder_that_is_a_file_is_a_usage_error(tmp_path: Path) -> None:
    # It was an internal error (NotADirectoryError, exit 70).
    (tmp_path / "runtime").write_text("a file\n")
    result = CliRunner().invoke(
        app, ["--db", str(tmp_path / "s.db"), "serve", "--user-socket"], env={"XDG_RUNTIME_DIR": str(tmp_path / "runtime")}, prog_name="spamfilter"
    )
    assert result.exit_code == exitcodes.USAGE, result.output
    assert_usage_error(result.stderr, "serve", f"Invalid value for --user-socket: cannot make {tmp_path}/runtime/spamfilter: {tmp_path}/runtime is not a folder")


def test_filter_with_a_terminal_on_stdin_is_a_usage_error(tmp_path: Path) -> None:
    main, terminal = pty.openpty()
    try:
        command = [sys.executable, "-m", "spamfilter", "--db", str(tmp_path / "none.db"), "filter"]
        proc = subprocess.run(command, stdin=terminal, capture_output=True, text=True, timeout=120, check=False)
    finally:
        os.close(main)
        os.close(terminal)
    assert proc.returncode == exitcodes.USAGE, proc.stderr
    assert_usage_error(proc.stderr, "filter", "filter reads a message on standard input")


@pytest.mark.parametrize(
    ("args", "command"), [(["classify", "-"], "classify"), (["train", "--spam", "-"], "train"), (["mark", "ham", "-"], "mark"), (["forget", "-"], "forget")]
)
def test_mail_from_a_terminal_on_stdin_is_a_usage_error(args: list[str], command: str, sample_db: str, tmp_path: Path) -> None:
    # They waited, without a word, for mail typed at the keyboard.
    db = tmp_path / "s.db"
    shutil.copy(sample_db.removeprefix("sqlite:///"), db)
    main, terminal = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "spamfilter", "--db", str(db), *args], stdin=terminal, capture_output=True, text=True, timeout=60, check=False)
    finally:
        os.close(main)
        os.close(terminal)
    assert proc.returncode == exitcodes.USAGE, proc.stderr
    assert_usage_error(proc.stderr, command, "- reads mail from standard input, which is a terminal: pipe the mail in or give a file")


@pytest.mark.parametrize("args", [["--spam", "--help"], ["--ham", "a.eml", "--spam", "--help"], ["--help", "--spam"]])
def test_help_after_a_label_flag_is_the_help_not_a_source(args: list[str], tmp_path: Path) -> None:
    # The label flags' rewriting took `--spam --help` for a source named --help.
    result = CliRunner().invoke(app, ["--db", str(tmp_path / "none.db"), "train", *args], prog_name="spamfilter")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Usage: spamfilter train [OPTIONS]") and "Learn from labelled mail." in result.stdout
    assert not (tmp_path / "none.db").exists()


def test_an_imap_account_the_config_does_not_name_is_a_usage_error(tmp_path: Path) -> None:
    # It was a config error (78), although the config is right and the
    # argument wrong.
    config = tmp_path / "config.toml"
    config.write_text('[imap.home]\nhost = "127.0.0.1"\nsecurity = "none"\nusername = "u"\npassword_env = "P"\n')
    result = CliRunner().invoke(app, ["--db", str(tmp_path / "s.db"), "--config", str(config), "imap", "run", "--account", "work"], prog_name="spamfilter")
    assert result.exit_code == exitcodes.USAGE, result.output
    assert_usage_error(result.stderr, "imap run", "Invalid value for --account: no IMAP account named 'work' (configured: home)")


@pytest.mark.parametrize(
    ("args", "said"),
    [(["mark", "Spam", "x"], "'Spam' is not one of 'spam', 'ham'."), (["classify", "--format", "bogus", "x"], "'bogus' is not one of 'table', 'jsonl', 'tsv'.")],
)
def test_a_choice_not_among_the_choices_is_said_plainly(args: list[str], said: str) -> None:
    # Typer's own check worded it "Value error, 'Spam' is not one of ...".
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 64
    assert result.stderr.strip().endswith(said) and "Value error" not in result.stderr
