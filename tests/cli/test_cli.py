"""The command line: exit codes, output formats, state after each command."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from spamfilter.cli import app, exitcodes
from spamfilter.nb.calibration import PRIOR_BOUND
from spamfilter.store import SCHEMA_REVISION, Store

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def trained(runner: CliRunner, db_url: str, sample: Path) -> str:
    result = runner.invoke(app, ["--db", db_url, "train", "--spam", str(sample / "train-spam.mbox"), "--ham", str(sample / "train-ham.mbox")])
    assert result.exit_code == 0, result.output
    return db_url


def truth(sample: Path) -> dict[str, str]:
    rows = (line.split("\t") for line in (sample / "inbox-truth.tsv").read_text().splitlines() if line.strip())
    return {f"{sample / 'inbox.mbox'}:{n}": label for n, label in rows}


def stats(runner: CliRunner, db_url: str) -> dict[str, object]:
    result = runner.invoke(app, ["--db", db_url, "stats", "--format", "json"])
    assert result.exit_code == 0, result.output
    data: dict[str, object] = json.loads(result.stdout)
    return data


def test_train_reports_counts_and_stats_match(runner: CliRunner, db_url: str, sample: Path) -> None:
    result = runner.invoke(app, ["--db", db_url, "train", "--spam", str(sample / "train-spam.mbox"), "--ham", str(sample / "train-ham.mbox")])
    assert result.exit_code == 0
    assert result.stdout.strip() == "trained 60 spam, 60 ham"
    s = stats(runner, db_url)
    assert (s["spam_messages"], s["ham_messages"]) == (60, 60)
    assert isinstance(s["tokens"], int) and s["tokens"] > 500
    assert s["tokens"] <= s["spam_tokens"] + s["ham_tokens"]  # type: ignore[operator]


def test_db_takes_a_plain_file_path_as_that_sqlite_file(runner: CliRunner, tmp_path: Path, sample: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A relative path is the file under the working directory, as a shell user means it.
    # "?" and "%" are a file name's characters here, not a URL's.
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["--db", "my model?%20.db", "train", "--spam", str(sample / "train-spam.mbox"), "--ham", str(sample / "train-ham.mbox")])
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".db"] == ["my model?%20.db"]
    s = stats(runner, str(tmp_path / "my model?%20.db"))
    assert (s["spam_messages"], s["ham_messages"]) == (60, 60)


def test_a_user_name_is_checked_as_store_user_is(runner: CliRunner, db_url: str, sample: Path) -> None:
    for bad in ("x" * 201, "alice\nbob"):
        result = runner.invoke(app, ["--db", db_url, "--user", bad, "stats"])
        assert result.exit_code == exitcodes.USAGE, result.output
        assert "--user: a model name is at most 200 printable characters" in result.stderr
    assert runner.invoke(app, ["--db", db_url, "--user", "x" * 200, "train", "--spam", str(sample / "train-spam.mbox")]).exit_code == 0


def test_training_twice_is_a_no_op(runner: CliRunner, trained: str, sample: Path) -> None:
    before = stats(runner, trained)
    result = runner.invoke(app, ["--db", trained, "train", "--spam", str(sample / "train-spam.mbox")])
    assert result.exit_code == 0
    assert result.stdout.strip() == "trained 0 spam, 0 ham; 60 already trained"
    assert stats(runner, trained) == before


def test_training_with_the_other_label_is_a_conflict_not_a_change(runner: CliRunner, trained: str, sample: Path) -> None:
    before = stats(runner, trained)
    result = runner.invoke(app, ["--db", trained, "train", "--ham", str(sample / "train-spam.mbox")])
    assert result.exit_code == 0
    assert "60 trained with the other label" in result.stdout
    assert stats(runner, trained) == before


def test_classify_table_gets_every_sample_message_right(runner: CliRunner, trained: str, sample: Path) -> None:
    result = runner.invoke(app, ["--db", trained, "classify", str(sample / "inbox.mbox")])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["verdict", "score", "log_odds", "source"]
    got = {line.split()[3]: line.split()[0] for line in lines[1:]}
    assert got == truth(sample)


def test_classify_jsonl_rows_carry_score_and_log_odds(runner: CliRunner, trained: str, sample: Path) -> None:
    result = runner.invoke(app, ["--db", trained, "classify", "--format", "jsonl", str(sample / "inbox.mbox")])
    assert result.exit_code == 0
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 20
    for row in rows:
        assert set(row) == {"source", "score", "log_odds", "verdict"}
        # 120 messages trained in one batch leave no calibration record: the
        # score is the model's own probability, bounded to [0.01, 0.99]
        assert row["score"] == pytest.approx(1 / (1 + math.exp(-max(-PRIOR_BOUND, min(PRIOR_BOUND, row["log_odds"])))), rel=1e-9)
        assert row["verdict"] == ("spam" if row["log_odds"] > 0 else "ham")
    # Most spam round to exactly 1.0, but the log-odds still rank them.
    spam = [r for r in rows if r["verdict"] == "spam"]
    assert len({r["log_odds"] for r in spam}) == len(spam)


def test_classify_tsv_has_header_and_one_row_per_message(runner: CliRunner, trained: str, sample: Path) -> None:
    result = runner.invoke(app, ["--db", trained, "classify", "--format", "tsv", str(sample / "inbox.mbox")])
    lines = result.stdout.splitlines()
    assert lines[0] == "source\tscore\tlog_odds\tverdict"
    assert len(lines) == 21
    assert all(len(line.split("\t")) == 4 for line in lines)


def test_mark_moves_a_message_and_forget_restores_counts(runner: CliRunner, trained: str, sample: Path, tmp_path: Path) -> None:
    before = stats(runner, trained)
    ham = tmp_path / "ham.eml"
    ham.write_bytes(b"From: a@example.org\nSubject: lunch on friday\n\nshall we meet for lunch on friday at noon\n")
    assert runner.invoke(app, ["--db", trained, "mark", "spam", str(ham)]).stdout.strip() == "trained 1 spam, 0 ham"
    assert runner.invoke(app, ["--db", trained, "mark", "ham", str(ham)]).stdout.strip() == "trained 0 spam, 0 ham; relabelled 1"
    s = stats(runner, trained)
    assert (s["spam_messages"], s["ham_messages"]) == (60, 61)
    result = runner.invoke(app, ["--db", trained, "forget", str(ham)])
    assert result.stdout.strip() == "forgot 1"
    assert stats(runner, trained) == before
    assert runner.invoke(app, ["--db", trained, "forget", str(ham)]).stdout.strip() == "forgot 0; 1 was not trained"


def _first_message(mbox: Path, n: int) -> bytes:
    """The n-th (1-based) message of an mbox, without its envelope line."""
    from spamfilter.mail import read_messages

    return next(item.raw for i, item in enumerate(read_messages([str(mbox)]), 1) if i == n)


def test_filter_adds_headers_and_exits_with_the_verdict(runner: CliRunner, trained: str, sample: Path) -> None:
    labels = truth(sample)
    spam_n = next(int(s.rsplit(":", 1)[1]) for s, lbl in labels.items() if lbl == "spam")
    ham_n = next(int(s.rsplit(":", 1)[1]) for s, lbl in labels.items() if lbl == "ham")
    spam = b"X-Spam-Status: No, forged by the sender\n" + _first_message(sample / "inbox.mbox", spam_n)
    result = runner.invoke(app, ["--db", trained, "filter"], input=spam)
    assert result.exit_code == exitcodes.SPAM
    out = result.stdout_bytes
    assert b"X-Spam-Flag: YES\n" in out
    assert out.count(b"X-Spam-Status:") == 1
    assert b"X-Spam-Status: Yes, verdict=spam score=" in out
    # Only the filter's own fields were touched: the rest is byte-identical.
    assert out.replace(out[out.index(b"X-Spam-Status: Yes") : out.index(b"X-Spam-Flag: YES\n") + 17], b"") == spam.replace(
        b"X-Spam-Status: No, forged by the sender\n", b""
    )

    ham = _first_message(sample / "inbox.mbox", ham_n)
    result = runner.invoke(app, ["--db", trained, "filter"], input=ham)
    assert result.exit_code == exitcodes.HAM
    assert b"X-Spam-Status: No, verdict=ham" in result.stdout_bytes
    assert b"X-Spam-Flag" not in result.stdout_bytes
    assert runner.invoke(app, ["--db", trained, "filter", "--always-zero"], input=ham).exit_code == 0
    result = runner.invoke(app, ["--db", trained, "filter", "--verdict-only"], input=ham)
    assert result.stdout.split()[0] == "ham"


def test_filter_passes_mail_through_unchanged_when_untrained(runner: CliRunner, db_url: str) -> None:
    message = b"Subject: hello\n\nbody\n"
    result = runner.invoke(app, ["--db", db_url, "filter"], input=message)
    assert result.exit_code == exitcodes.NOT_TRAINED == 69
    assert result.stdout_bytes == message
    assert "needs at least one trained spam and one trained ham" in result.stderr


def test_filter_scores_a_message_with_an_envelope_line_as_classify_reads_it_from_a_file(runner: CliRunner, trained: str, tmp_path: Path) -> None:
    # procmail hands the message over with its mbox "From " line; past
    # tokenizer.max_bytes (200,000) that line used to move the cut.
    words = b" ".join(b"offer%d money%d" % (i, i % 97) for i in range(30_000))
    message = b"From someone@example.org Sat Jan  1 00:00:00 2000\nSubject: cheap offer\n\n" + words + b"\n"
    assert len(message) > 250_000
    path = tmp_path / "one.mbox"
    path.write_bytes(message)
    classified = runner.invoke(app, ["--db", trained, "classify", "--format", "jsonl", str(path)])
    filtered = runner.invoke(app, ["--db", trained, "filter", "--verdict-only"], input=message)
    [row] = [json.loads(line) for line in classified.stdout.splitlines()]
    verdict, score, log_odds = filtered.stdout.split()
    assert (verdict, float(log_odds)) == (row["verdict"], pytest.approx(row["log_odds"], abs=5e-5))
    # Nothing but the envelope line is an empty message, as for classify.
    result = runner.invoke(app, ["--db", trained, "filter"], input=b"From someone@example.org Sat Jan  1 00:00:00 2000\n")
    assert result.exit_code == 65


def test_filter_refuses_an_empty_message_with_exit_65(runner: CliRunner, trained: str) -> None:
    result = runner.invoke(app, ["--db", trained, "filter"], input=b"")
    assert result.exit_code == exitcodes.DATA_ERROR == 65
    assert result.stderr.startswith("spamfilter: not filtered:")


# (classify - with stdin closed: a source with no message, warned about)
@pytest.mark.parametrize(("args", "closed", "code"), [(["filter"], 0, 65), (["stats"], 0, 0), (["stats"], 1, 74), (["classify", "-"], 0, 0)])
def test_a_closed_standard_stream_is_no_traceback(trained: str, args: list[str], closed: int, code: int) -> None:
    import os

    # The caller closed stdin or stdout (`spamfilter stats <&-`): Python
    # starts with that stream None.
    r = subprocess.run(
        [sys.executable, "-m", "spamfilter", "--db", trained, *args],
        capture_output=closed != 1,
        stderr=subprocess.PIPE if closed == 1 else None,
        preexec_fn=lambda: os.close(closed),
        timeout=60,
    )  # noqa: PLW1509
    err = r.stderr.decode()
    assert r.returncode == code, err
    assert "Traceback" not in err and "Error" not in err
    if closed == 1:  # its output went nowhere, and it says so
        assert err == "spamfilter: cannot write the output: standard output is closed\n"


@pytest.mark.parametrize("args", [["classify", "-"], ["train", "--spam", "-"], ["forget", "-"], ["filter"]])
def test_a_device_on_stdin_is_refused_and_dev_null_is_an_empty_input(trained: str, args: list[str]) -> None:
    # `classify - < /dev/zero` read for ever into memory.
    with open("/dev/zero", "rb") as zero:
        r = subprocess.run([sys.executable, "-m", "spamfilter", "--db", trained, *args], stdin=zero, capture_output=True, timeout=60)
    assert r.returncode == exitcodes.NO_INPUT == 66
    assert r.stderr.decode() == "spamfilter: standard input is a device, not a message or a mailbox\n"
    with open(os.devnull, "rb") as null:
        r = subprocess.run([sys.executable, "-m", "spamfilter", "--db", trained, *args], stdin=null, capture_output=True, timeout=60)
    assert b"is a device" not in r.stderr and r.returncode != exitcodes.INTERNAL, r.stderr  # read as an empty input


def test_classify_goes_on_past_an_unreadable_message_and_exits_65(runner: CliRunner, trained: str, tmp_path: Path) -> None:
    folder = tmp_path / "mail"  # apart from the database file in tmp_path
    folder.mkdir()
    good = folder / "a-good.eml"
    good.write_bytes(b"Subject: meeting\n\nproject meeting notes attached\n")
    junk = folder / "b-junk.eml"
    junk.write_bytes(b"\x00\x01\x02\x03" * 100)
    (folder / "c-empty").write_bytes(b"")  # an empty mailbox: no message, not an error
    result = runner.invoke(app, ["--db", trained, "classify", str(folder)])
    assert result.exit_code == 65
    assert len(result.stdout.splitlines()) == 2  # header + the good message
    assert result.stderr.startswith(f"spamfilter: skipped {junk}: not a mail message")  # the path once
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "code"),
    [(["classify", "/no/such/file"], 66), (["classify", "--no-such-option", "x"], 64), (["classify"], 64), (["train"], 64), (["mark", "maybe", "x"], 64)],
)
def test_errors_exit_with_documented_codes_and_one_line(runner: CliRunner, db_url: str, args: list[str], code: int) -> None:
    result = runner.invoke(app, ["--db", db_url, *args])
    assert result.exit_code == code
    assert "Traceback" not in result.output


def test_classify_before_training_exits_69(runner: CliRunner, empty_db_url: str, sample: Path) -> None:
    result = runner.invoke(app, ["--db", empty_db_url, "classify", str(sample / "inbox.mbox")])
    assert result.exit_code == 69
    assert result.stdout == ""  # not even the table's header
    assert result.stderr.strip() == "spamfilter: the model needs at least one trained spam and one trained ham (it has 0 spam and 0 ham)"


def test_bad_config_exits_78_naming_the_key(runner: CliRunner, db_url: str, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[model]\nalpha = -1\n")
    result = runner.invoke(app, ["--config", str(config), "--db", db_url, "stats"])
    assert result.exit_code == 78
    assert "model.alpha" in result.stderr


def test_old_schema_exits_76_and_db_upgrade_fixes_it(runner: CliRunner, trained: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(trained)
    with engine.begin() as conn:
        for table in sa.inspect(conn).get_table_names():
            if table != "alembic_version":
                conn.execute(sa.text(f"DROP TABLE {table}"))
        conn.execute(sa.text("DELETE FROM alembic_version"))
    engine.dispose()
    # A database with a revision table but no revision is not ours to touch.
    result = runner.invoke(app, ["--db", trained, "stats"])
    assert result.exit_code == 74
    engine = sa.create_engine(trained)
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE alembic_version"))
    engine.dispose()
    result = runner.invoke(app, ["--db", trained, "db", "upgrade"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"schema upgraded from empty to revision {SCHEMA_REVISION}"
    assert runner.invoke(app, ["--db", trained, "db", "upgrade"]).stdout.strip() == f"schema already at revision {SCHEMA_REVISION}"


def test_db_upgrades_run_at_once_report_one_upgrade(tmp_path: Path) -> None:
    """Four `db upgrade`s of one old database, all waiting for the write
    lock another process holds: the first to get it upgrades and says so,
    the others find the schema at the head and say that (each used to
    report the upgrade, from the revision it read before the lock)."""
    import sqlite3
    import time

    url = f"sqlite:///{tmp_path / 'old.db'}"
    old = Store.open(url, upgrade_new=False, check=False)
    old.upgrade("0007")
    old.close()
    holder = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    runs = [
        subprocess.Popen([sys.executable, "-m", "spamfilter", "--db", url, "db", "upgrade"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)
    ]
    try:
        # Each has read revision 0007 and waits for the lock (a busy timeout
        # of 30 s); none can have upgraded yet.
        time.sleep(4)
        assert all(r.poll() is None for r in runs)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    outputs = [r.communicate(timeout=60) for r in runs]
    assert all(r.returncode == 0 for r in runs), outputs
    said = sorted(out.strip() for out, _ in outputs)
    assert said == [f"schema already at revision {SCHEMA_REVISION}"] * 3 + [f"schema upgraded from 0007 to revision {SCHEMA_REVISION}"]


def test_db_upgrade_and_vacuum_failures_exit_with_the_database_codes(runner: CliRunner, trained: str, tmp_path: Path) -> None:
    import sqlite3

    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database, whatever its name says " * 40)
    result = runner.invoke(app, ["--db", str(junk), "db", "upgrade"])
    assert (result.exit_code, result.stderr.strip()) == (74, f"spamfilter: database sqlite:///{junk}: file is not a database")
    path = trained.removeprefix("sqlite:///")
    with sqlite3.connect(path) as con:
        con.execute("UPDATE alembic_version SET version_num = '0099'")
    result = runner.invoke(app, ["--db", trained, "db", "upgrade"])
    assert result.exit_code == 74
    assert "schema revision 0099 is unknown to this spamfilter (newer?): not upgraded" in result.stderr
    with sqlite3.connect(path) as con:
        con.execute(f"UPDATE alembic_version SET version_num = '{SCHEMA_REVISION}'")
    config = tmp_path / "quick.toml"
    config.write_text("[store]\nbusy_timeout = 0.2\n")
    lock = sqlite3.connect(path, isolation_level=None)
    try:
        lock.execute("BEGIN EXCLUSIVE")
        result = runner.invoke(app, ["--config", str(config), "--db", trained, "db", "vacuum"])
    finally:
        lock.close()
    assert result.exit_code == 75, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    result = runner.invoke(app, ["--db", trained, "db", "prune", "--min-count", str(2**70), "--older-than", "0"])
    assert result.exit_code == 64


def test_db_upgrade_says_when_the_file_holds_free_space_and_vacuum_returns_it(runner: CliRunner, db_url: str, tmp_path: Path) -> None:
    """Revision 0008 rebuilds the token table; the old table's pages stay
    in the file as free space until ``db vacuum``, and ``db upgrade`` says so."""
    from alembic import command

    counts = tmp_path / "counts.tsv"
    rows = [f"token{i:06d}\t{i % 2}\t{1 - i % 2}\t{i % 2}\t{1 - i % 2}\n" for i in range(60_000)]
    counts.write_text(
        "# spamfilter counts v1 owner=\n# totals ham_messages=30000 spam_messages=30000 ham_terms=30000 spam_terms=30000 ham_binary_terms=30000 spam_binary_terms=30000\n"
        + "".join(rows)
    )
    assert runner.invoke(app, ["--db", db_url, "db", "import", "--replace", str(counts)]).exit_code == 0
    store = Store.open(db_url)
    cfg = store._alembic_config()
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0007")
    store.vacuum()
    assert store.free_bytes() == 0
    store.close()
    result = runner.invoke(app, ["--db", db_url, "db", "upgrade"])
    assert result.exit_code == 0, result.output
    first, second = result.stdout.splitlines()
    assert first == f"schema upgraded from 0007 to revision {SCHEMA_REVISION}"
    freed = float(second.split(" MB of the file is free space now")[0])
    assert freed >= 1.0 and second.endswith("`spamfilter db vacuum` gives it back to the disk")
    assert runner.invoke(app, ["--db", db_url, "db", "vacuum"]).exit_code == 0
    store = Store.open(db_url)
    assert store.free_bytes() == 0
    store.close()
    assert stats(runner, db_url)["tokens"] == 60_000
    assert runner.invoke(app, ["--db", db_url, "db", "upgrade"]).stdout.strip() == f"schema already at revision {SCHEMA_REVISION}"


def test_unreachable_database_exits_74(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--db", "sqlite:////proc/no/such/dir/x.db", "--create-dirs", "db", "upgrade"])
    assert result.exit_code == 74
    assert "Traceback" not in result.output


def _commands(group: Any, parent: Any = None, prefix: str = "") -> list[str]:
    """Every command of the app (a group of the CLI library, whose commands
    load when asked for), subcommands as "db check"."""
    ctx = group.context_class(group, parent=parent)
    out = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if hasattr(command, "list_commands"):
            out += _commands(command, ctx, f"{prefix}{name} ")
        else:
            out.append(prefix + name)
    return out


def _options(group: Any, name: str) -> list[str]:
    """The long options of one command ("db check")."""
    ctx = group.context_class(group)
    command = group
    for part in name.split():
        command = command.get_command(ctx, part)
        ctx = command.context_class(command, parent=ctx)
    return [o for param in command.params for o in getattr(param, "opts", []) + getattr(param, "secondary_opts", []) if o.startswith("--")]


def test_every_command_and_option_has_help_and_is_in_the_reference(runner: CliRunner) -> None:
    """The command reference (docs/guide.md, with docs/integration.md for the
    daemons) is checked against the app: every command, every option."""
    reference = (REPO / "docs" / "guide.md").read_text() + (REPO / "docs" / "integration.md").read_text()
    root = typer.main.get_command(app)
    commands = _commands(root)
    assert {"train", "serve", "milter", "db reselect", "imap run"} <= set(commands) and len(commands) >= 20
    for command in commands:
        result = runner.invoke(app, [*command.split(), "--help"])
        assert result.exit_code == 0, command
        assert "Example" in result.stdout, command
        assert f"spamfilter {command}" in reference, command
        missing = [o for o in _options(root, command) if o not in reference and o != "--help"]
        assert missing == [], (command, missing)


def test_python_dash_m_runs_the_same_app() -> None:
    result = subprocess.run([sys.executable, "-m", "spamfilter", "--version"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert result.stdout.startswith("spamfilter ")


def test_a_locale_that_cannot_spell_a_name_escapes_it_instead_of_failing(tmp_path: Path) -> None:
    # Under a Latin-1 locale a file name (or a token) in Chinese ended the
    # command with "internal error: UnicodeEncodeError" (70).
    folder = tmp_path / "box"
    folder.mkdir()
    (folder / "日本.eml").write_bytes(b"From: a@b\nSubject: hi\n\nhello\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAMFILTER_")} | {"PYTHONIOENCODING": "latin-1", "HOME": str(tmp_path)}
    db = f"sqlite:///{tmp_path / 'l.db'}"
    command = [sys.executable, "-c", "import sys; from spamfilter.cli import main; sys.exit(main())", "--db", db]
    for label, text in (("spam", "cheap pills"), ("ham", "lunch at noon")):
        stdin = f"Subject: {text}\n\n{text}\n".encode()
        trained = subprocess.run([*command, "train", f"--{label}", "-"], input=stdin, capture_output=True, env=env, timeout=120, check=False)
        assert trained.returncode == 0, trained.stderr
    for fmt in ("table", "jsonl"):
        proc = subprocess.run([*command, "classify", "--format", fmt, str(folder)], capture_output=True, env=env, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        assert b"\\u65e5\\u672c.eml" in proc.stdout, proc.stdout
    words = subprocess.run([*command, "top-words", "--min-count", "1"], capture_output=True, env=env, timeout=120, check=False)
    assert words.returncode == 0, words.stderr


def test_a_number_too_large_for_the_database_is_a_usage_error(runner: CliRunner, trained: str) -> None:
    result = runner.invoke(app, ["--db", trained, "top-words", "--min-count", str(2**63)])
    assert result.exit_code == exitcodes.USAGE, result.output
    assert "Error: a number given is too large: " in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        # A negative seed was numpy's ValueError, "internal error" (70).
        ["evaluate", "--index", "INDEX", "--protocol", "cv", "--seed", "-1"],
        # A huge --n ran for many minutes and gigabytes drawing the page.
        ["report", "--out", "OUT", "--n", "1001"],
    ],
)
def test_out_of_range_numbers_are_usage_errors(tmp_path: Path, args: list[str]) -> None:
    index = tmp_path / "index"
    index.write_text("spam a\nham b\n")
    args = [{"INDEX": str(index), "OUT": str(tmp_path / "r.html")}.get(a, a) for a in args]
    result = CliRunner().invoke(app, ["--db", f"sqlite:///{tmp_path / 'db'}", *args])
    assert result.exit_code == exitcodes.USAGE, result.output
    assert not (tmp_path / "r.html").exists()


def test_the_database_drivers_cleanup_warnings_do_not_reach_stderr() -> None:
    # psycopg logs "error ignored terminating <psycopg.Pipeline ...>: pipeline
    # aborted" after a duplicate ledger row the training retry handles;
    # Python's last-resort handler printed it among the command's output.
    # (In a process of its own: pytest's log capture replaces that handler.)
    script = (
        "import logging\n"
        "from spamfilter.cli import _show_warnings\n"
        "_show_warnings()\n"
        "logging.getLogger('psycopg').warning('error ignored terminating %s: pipeline aborted', '<psycopg.Pipeline>')\n"
        "logging.getLogger('spamfilter.retry').warning('the database is busy; trying again')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "pipeline aborted" not in done.stderr and "spamfilter: the database is busy; trying again" in done.stderr


def test_a_link_in_a_loop_inside_a_folder_is_skipped_and_the_rest_read(runner: CliRunner, trained: str, tmp_path: Path) -> None:
    # is_file() raised ELOOP out of the folder readers: exit 70, nothing of
    # the folder classified (or trained).
    message = b"Subject: meeting\n\nproject meeting notes attached\n"
    plain, maildir, mh = tmp_path / "plain", tmp_path / "maildir", tmp_path / "mh"
    plain.mkdir()
    (plain / "a.eml").write_bytes(message)
    for sub in ("cur", "new", "tmp"):
        (maildir / sub).mkdir(parents=True)
    (maildir / "cur" / "1.host").write_bytes(message)
    mh.mkdir()
    (mh / "1").write_bytes(message)
    for loop in (plain / "self", maildir / "new" / "self", mh / "2"):
        loop.symlink_to(loop.name)
        result = runner.invoke(app, ["--db", trained, "classify", "--format", "tsv", str(loop.parent if loop.parent != maildir / "new" else maildir)])
        assert result.exit_code == 65, result.output
        assert len(result.stdout.splitlines()) == 2  # the header and the one message
        assert result.stderr == f"spamfilter: skipped {loop}: cannot read it: Too many levels of symbolic links\n"


def test_an_index_s_message_file_unreadable_when_its_turn_comes_is_refused_and_the_rest_read(tmp_path: Path) -> None:
    # It ended the run (exit 66), after the rows before it were scored.
    from spamfilter.mail import read_index

    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(b"Subject: " + name.encode() + b"\n\nwords\n")
    index = tmp_path / "index"
    index.write_text("spam a\nham b\nspam c\n")
    items = read_index(str(index))
    first = next(items)
    (tmp_path / "b").unlink()  # gone since the index was checked
    rest = list(items)
    assert [item.unreadable_reason for _, item in [first, *rest]] == [None, f"{tmp_path / 'b'}: cannot read it: No such file or directory", None]
    assert [is_spam for is_spam, _ in [first, *rest]] == [True, False, True]


def test_one_message_on_stdin_with_an_envelope_line_is_the_message_of_the_maildir(runner: CliRunner, trained: str, tmp_path: Path) -> None:
    # `mark --one-message -` kept the mboxrd quoting a Maildir file is read
    # without: another digest, so the message was trained twice instead of relabelled.
    maildir = tmp_path / "md"
    for sub in ("cur", "new", "tmp"):
        (maildir / sub).mkdir(parents=True)
    message = maildir / "cur" / "m1"
    message.write_bytes(b"From a@b Mon Jan  1 00:00:00 2001\nSubject: quoted lines\n\nhello\n>From the start\nbye\n")
    assert runner.invoke(app, ["--db", trained, "train", "--spam", str(maildir)]).stdout.strip() == "trained 1 spam, 0 ham"
    result = runner.invoke(app, ["--db", trained, "mark", "ham", "--one-message", "-"], input=message.read_bytes())
    assert result.stdout.strip() == "trained 0 spam, 0 ham; relabelled 1", result.output


def test_a_default_config_path_that_cannot_be_searched_exits_78_naming_it(runner: CliRunner, trained: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # $HOME another user's (`su` without `-`): Path.exists() raised
    # PermissionError and every command, `filter` too, exited 70.
    default = tmp_path / "home" / ".config" / "spamfilter" / "config.toml"
    monkeypatch.delenv("SPAMFILTER_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(default.parent.parent))
    exists = Path.exists

    def searched(self: Path, **kwargs: bool) -> bool:
        if self == default:
            raise PermissionError(13, "Permission denied", str(self))
        return exists(self, **kwargs)

    monkeypatch.setattr(Path, "exists", searched)
    result = runner.invoke(app, ["--db", trained, "stats"])
    assert result.exit_code == 78
    assert result.stderr == f"spamfilter: cannot tell whether the config file {default} exists: Permission denied (name one with --config or $SPAMFILTER_CONFIG)\n"


def test_a_folder_tree_hundreds_deep_is_read_to_its_bottom(trained: str, tmp_path: Path) -> None:
    # Each level stacked two generators: RecursionError, exit 70, at about 450.
    deep = tmp_path / "deep"
    folder = deep
    for _ in range(700):  # 1,400 characters of path, within PATH_MAX
        folder = folder / "a"
    folder.mkdir(parents=True)
    (folder / "bottom.eml").write_bytes(b"Subject: meeting\n\nproject meeting notes attached\n")
    (deep / "top.eml").write_bytes(b"Subject: lunch\n\nlunch on friday\n")
    r = subprocess.run([sys.executable, "-m", "spamfilter", "--db", trained, "classify", "--format", "tsv", str(deep)], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    header, *rows = r.stdout.decode().splitlines()
    column = header.split("\t").index("source")
    assert [row.split("\t")[column] for row in rows] == [str(folder / "bottom.eml"), str(deep / "top.eml")]  # depth first, in name order


def test_a_folder_of_mboxes_named_by_year_is_read_as_mboxes(trained: str, tmp_path: Path) -> None:
    # Files named by number only made it an MH folder, and each mbox was
    # read (and trained) as one message.
    years = tmp_path / "years"
    years.mkdir()
    for year in ("2019", "2020"):
        (years / year).write_bytes(b"".join(f"From a@b Mon Jan  1 00:00:00 {year}\nSubject: note {n}\n\nwords of note {n}\n\n".encode() for n in range(3)))
    r = subprocess.run([sys.executable, "-m", "spamfilter", "--db", trained, "classify", "--format", "tsv", str(years)], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    header, *rows = r.stdout.decode().splitlines()
    column = header.split("\t").index("source")
    assert [row.split("\t")[column] for row in rows] == [f"{years / y}:{n}" for y in ("2019", "2020") for n in (1, 2, 3)]
    # numbered files that are single messages are still read as MH, in numeric order
    mh = tmp_path / "mh"
    mh.mkdir()
    for n in (10, 9):
        (mh / str(n)).write_bytes(f"Subject: message {n}\n\nwords\n".encode())
    r = subprocess.run([sys.executable, "-m", "spamfilter", "--db", trained, "classify", "--format", "tsv", str(mh)], capture_output=True, timeout=60)
    header, *rows = r.stdout.decode().splitlines()
    assert [row.split("\t")[column] for row in rows] == [str(mh / "9"), str(mh / "10")]


def test_a_skipped_file_whose_name_holds_a_newline_is_named_on_one_line(runner: CliRunner, trained: str, tmp_path: Path) -> None:
    folder = tmp_path / "mail"
    folder.mkdir()
    (folder / "good.eml").write_bytes(b"Subject: meeting\n\nproject meeting notes attached\n")
    odd = folder / "x\nspamfilter: all is well"
    odd.write_bytes(b" \n")
    result = runner.invoke(app, ["--db", trained, "classify", str(folder)])
    assert result.exit_code == 65
    assert result.stderr == f"spamfilter: skipped {folder}/x\\nspamfilter: all is well: empty message\n"


def test_filter_with_a_runtime_folder_it_cannot_search_filters_in_process(runner: CliRunner, trained: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # $XDG_RUNTIME_DIR another user's (`su` without `-`): looking for the
    # per-user daemon's socket raised PermissionError, and every message
    # went out unfiltered with exit 70.
    socket_path = tmp_path / "run" / "spamfilter" / "spamd.sock"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    is_socket = Path.is_socket

    def searched(self: Path) -> bool:
        if self == socket_path:
            raise PermissionError(13, "Permission denied", str(self))
        return is_socket(self)

    monkeypatch.setattr(Path, "is_socket", searched)
    message = b"Subject: meeting\n\nproject meeting notes attached\n"
    result = runner.invoke(app, ["--db", trained, "filter"], input=message)
    assert result.exit_code in (0, 1, 2), result.output
    assert b"X-Spam-Status: " in result.stdout_bytes and result.stdout_bytes.endswith(message.split(b"\n\n", 1)[1])


def test_forget_refuses_what_is_not_mail_as_train_does(runner: CliRunner, trained: str, tmp_path: Path) -> None:
    # forget needs no parse (a message trained under other settings can be
    # forgotten), but a binary file nobody could have trained was "not
    # trained" with exit 0, where train and mark refuse it as not mail (65).
    junk = tmp_path / "photo.png"
    junk.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 16)
    empty = tmp_path / "empty.eml"
    empty.write_bytes(b"\n\n")
    ham = tmp_path / "ham.eml"
    ham.write_bytes(b"From: a@example.org\nSubject: lunch\n\nlunch on friday?\n")
    assert runner.invoke(app, ["--db", trained, "mark", "ham", str(ham)]).exit_code == 0
    before = stats(runner, trained)
    result = runner.invoke(app, ["--db", trained, "forget", str(junk), str(ham)])
    assert result.exit_code == 65
    assert result.stdout.strip() == "forgot 1; 1 unreadable"
    assert f"skipped {junk}: not a mail message" in result.stderr
    assert stats(runner, trained)["ham_messages"] == before["ham_messages"] - 1
    # Mail that was never trained is still only "not trained".
    assert runner.invoke(app, ["--db", trained, "forget", str(ham)]).stdout.strip() == "forgot 0; 1 was not trained"
    result = runner.invoke(app, ["--db", trained, "forget", str(empty)])
    assert result.exit_code == 65
    assert "empty message" in result.stderr
    # Nothing but a refusal: forget's own words, not "trained 0 spam, 0 ham".
    assert result.stdout.strip() == "forgot 0; 1 unreadable"
