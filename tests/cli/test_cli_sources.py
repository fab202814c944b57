"""The command line's sources and arguments as a new user meets them: mboxes
on stdin, several sources per --spam/--ham, names of one-message files, which
commands may create a database, empty sources, and --help's wording."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spamfilter.cli import app, exitcodes
from spamfilter.cli.train import MissingSource, spread_values
from spamfilter.mail import read_messages, sources

REPO = Path(__file__).resolve().parents[2]
ENVELOPE = b"From sender@example.org Mon Jan  1 00:00:00 2024\n"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def mbox_of(path: Path, n: int) -> bytes:
    """The first `n` messages of the mbox at `path`, as an mbox."""
    items = list(read_messages([str(path)]))[:n]
    assert len(items) == n
    return b"\n".join(ENVELOPE + item.raw.replace(b"\nFrom ", b"\n>From ") + b"\n" for item in items)


def stats(runner: CliRunner, url: str) -> dict[str, int]:
    data: dict[str, int] = json.loads(runner.invoke(app, ["--db", url, "stats", "--format", "json"]).stdout)
    return data


# -- 1. stdin holding an mbox ---------------------------------------------------------


def test_train_from_an_mbox_on_stdin_trains_every_message(runner: CliRunner, db_url: str, sample: Path) -> None:
    spam = mbox_of(sample / "train-spam.mbox", 60)
    ham = mbox_of(sample / "train-ham.mbox", 60)
    result = runner.invoke(app, ["--db", db_url, "train", "--spam", "-"], input=spam)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "trained 60 spam, 0 ham"
    result = runner.invoke(app, ["--db", db_url, "train", "--ham", "-"], input=ham)
    assert result.stdout.strip() == "trained 0 spam, 60 ham"
    # The same messages read from the files are the ones already trained.
    result = runner.invoke(app, ["--db", db_url, "train", "--spam", str(sample / "train-spam.mbox")])
    assert result.stdout.strip() == "trained 0 spam, 0 ham; 60 already trained"


@pytest.mark.parametrize("label", ["--spam", "--ham"])
def test_a_missing_source_makes_no_new_database_or_folder(runner: CliRunner, tmp_path: Path, label: str) -> None:
    # The sources were checked only once training read them: after the new
    # database (and with --create-dirs its folders) had been made.
    db = tmp_path / "new" / "deeper" / "model.db"
    result = runner.invoke(app, ["--create-dirs", "--db", str(db), "train", label, str(tmp_path / "no-such.mbox")])
    assert result.exit_code == exitcodes.NO_INPUT == 66, result.output
    assert not (tmp_path / "new").exists()


def test_stdin_for_both_labels_is_refused_before_training(runner: CliRunner, db_url: str, sample: Path) -> None:
    # It trained the whole of stdin as spam and called the empty rest a ham.
    result = runner.invoke(app, ["--db", db_url, "train", "--spam", "-", "--ham", "-"], input=mbox_of(sample / "train-spam.mbox", 5))
    assert result.exit_code == exitcodes.NO_INPUT == 66
    assert result.stderr == "spamfilter: standard input ('-') can be read only once; give it for --spam or for --ham\n"
    stats = runner.invoke(app, ["--db", db_url, "stats", "--format", "json"])
    assert stats.exit_code == exitcodes.NO_INPUT or json.loads(stats.stdout)["spam_messages"] == 0, stats.output


def test_classify_an_mbox_on_stdin_gives_a_verdict_per_message(runner: CliRunner, sample_db: str, sample: Path) -> None:
    box = mbox_of(sample / "inbox.mbox", 20)
    result = runner.invoke(app, ["--db", sample_db, "classify", "--format", "jsonl", "-"], input=box)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["source"] for r in rows] == [f"-:{n}" for n in range(1, 21)]
    from_file = runner.invoke(app, ["--db", sample_db, "classify", "--format", "jsonl", str(sample / "inbox.mbox")])
    file_rows = [json.loads(line) for line in from_file.stdout.splitlines()]
    assert [r["log_odds"] for r in rows] == pytest.approx([r["log_odds"] for r in file_rows], rel=1e-12)


def test_mark_and_forget_read_an_mbox_on_stdin(runner: CliRunner, db_url: str, sample: Path) -> None:
    box = mbox_of(sample / "train-spam.mbox", 5)
    assert runner.invoke(app, ["--db", db_url, "mark", "spam", "-"], input=box).stdout.strip() == "trained 5 spam, 0 ham"
    assert runner.invoke(app, ["--db", db_url, "forget", "-"], input=box).stdout.strip() == "forgot 5"


def test_mark_one_message_takes_stdin_whole_even_after_a_from_line(runner: CliRunner, db_url: str, sample: Path) -> None:
    # What a mail server's pipe gives: one message, which may begin with an
    # envelope line and hold more "From " lines in its body.
    box = mbox_of(sample / "train-spam.mbox", 3)
    assert box.startswith(b"From ") and box.count(b"\nFrom ") == 2
    whole = runner.invoke(app, ["--db", db_url, "mark", "--one-message", "spam", "-"], input=box)
    assert whole.exit_code == 0, whole.output
    assert whole.stdout.strip() == "trained 1 spam, 0 ham"
    assert runner.invoke(app, ["--db", db_url, "mark", "--one-message", "spam", "-"], input=box).stdout.strip() == "trained 0 spam, 0 ham; 1 already trained"


def test_help_says_stdin_may_be_an_mbox(runner: CliRunner) -> None:
    for command in (["train"], ["classify"], ["forget"], ["mark"]):
        text = " ".join(runner.invoke(app, [*command, "--help"]).stdout.split())
        assert "- for stdin (an mbox when it starts with a `From ` line)" in text, command


# -- 2. --spam SRC... --ham SRC... ----------------------------------------------------------


def test_train_takes_several_sources_after_each_label(runner: CliRunner, db_url: str, sample: Path, tmp_path: Path) -> None:
    items = list(read_messages([str(sample / "train-spam.mbox")]))[:3]
    files = []
    for n, item in enumerate(items):
        files.append(tmp_path / f"s{n}.eml")
        files[-1].write_bytes(item.raw)
    result = runner.invoke(app, ["--db", db_url, "train", "--spam", str(files[0]), str(files[1]), "--ham", str(sample / "train-ham.mbox"), "--spam", str(files[2])])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "trained 3 spam, 60 ham"
    s = stats(runner, db_url)
    assert (s["spam_messages"], s["ham_messages"]) == (3, 60)


def test_the_guide_and_help_show_the_same_train_form(runner: CliRunner) -> None:
    guide = (REPO / "docs" / "guide.md").read_text(encoding="utf-8")
    assert "spamfilter train --spam SRC... --ham SRC..." in guide
    text = runner.invoke(app, ["train", "--help"]).stdout
    assert re.search(r"--spam SRC\.\.\. ", text) and re.search(r"--ham SRC\.\.\. ", text)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--spam", "a", "b", "--ham", "c"], ["--spam", "a", "--spam", "b", "--ham", "c"]),
        (["--spam", "-", "--ham", "c", "d"], ["--spam", "-", "--ham", "c", "--ham", "d"]),
        (["--spam=a", "b"], ["--spam=a", "--spam", "b"]),
        (["--spam", "a", "--index", "i", "b"], ["--spam", "a", "--index", "i", "b"]),
        (["--spam", "--weird-name", "b"], ["--spam", "--weird-name", "--spam", "b"]),
        (["--spam", "a", "--", "b"], ["--spam", "a", "--", "b"]),
    ],
)
def test_spread_values_repeats_the_option_before_each_value(args: list[str], expected: list[str]) -> None:
    assert spread_values(args) == expected


def test_spread_values_refuses_a_label_followed_by_an_option_of_the_command() -> None:
    with pytest.raises(MissingSource, match="^--spam needs a source \\(a file, folder or -\\) before --ham$"):
        spread_values(["--spam", "--ham", "x.eml"])
    with pytest.raises(MissingSource, match="before --index$"):
        spread_values(["--spam", "--index=i"], known={"--index"})
    # A word that is not one of the command's options is a source.
    assert spread_values(["--spam", "--weird-name"], known={"--index"}) == ["--spam", "--weird-name"]


# -- 3. a one-message mbox is named by its path -------------------------------------------


def test_a_one_message_mbox_file_is_named_by_its_path(runner: CliRunner, sample_db: str, sample: Path, tmp_path: Path) -> None:
    one = tmp_path / "one.eml"
    one.write_bytes(mbox_of(sample / "inbox.mbox", 1))
    result = runner.invoke(app, ["--db", sample_db, "classify", "--format", "jsonl", str(one)])
    assert [json.loads(line)["source"] for line in result.stdout.splitlines()] == [str(one)]
    result = runner.invoke(app, ["--db", sample_db, "explain", str(one)])
    assert result.exit_code == 0, result.output
    assert f"message    {one}" in result.stdout.splitlines()


# -- 4. which commands may create a database --------------------------------------------------


@pytest.mark.parametrize(
    "command", [["stats"], ["classify", "MSG"], ["explain", "MSG"], ["top-words"], ["report", "--out", "OUT"], ["db", "check"], ["db", "export"], ["forget", "MSG"]]
)
def test_commands_that_read_refuse_a_missing_database(runner: CliRunner, tmp_path: Path, command: list[str]) -> None:
    msg = tmp_path / "m.eml"
    msg.write_bytes(b"Subject: hello\n\nworld\n")
    db = tmp_path / "no" / "dir" / "x.db"
    args = [str(msg) if a == "MSG" else str(tmp_path / "r.html") if a == "OUT" else a for a in command]
    result = runner.invoke(app, ["--db", f"sqlite:///{db}", *args])
    assert result.exit_code == exitcodes.NO_INPUT, result.output
    assert result.stderr.strip() == f"spamfilter: no such database: {db}"
    assert not (tmp_path / "no").exists()
    # Nor a file in a folder that exists.
    result = runner.invoke(app, ["--db", f"sqlite:///{tmp_path / 'x.db'}", *args])
    assert result.exit_code == exitcodes.NO_INPUT
    assert not (tmp_path / "x.db").exists()
    # Nor write a schema into an empty file.
    empty = tmp_path / "empty.db"
    empty.touch()
    result = runner.invoke(app, ["--db", f"sqlite:///{empty}", *args])
    assert result.exit_code == exitcodes.NO_INPUT, result.output
    assert result.stderr.strip() == f"spamfilter: no spamfilter database in {empty} (an empty file)"
    assert empty.stat().st_size == 0


def test_training_creates_the_file_but_a_missing_folder_only_when_asked(runner: CliRunner, tmp_path: Path, sample: Path) -> None:
    spam = str(sample / "train-spam.mbox")
    db = tmp_path / "new" / "dir" / "x.db"
    result = runner.invoke(app, ["--db", f"sqlite:///{db}", "train", "--spam", spam])
    assert result.exit_code == exitcodes.STORE_ERROR
    assert "folder" in result.stderr and "--create-dirs" in result.stderr
    assert not (tmp_path / "new").exists()
    result = runner.invoke(app, ["--db", f"sqlite:///{db}", "--create-dirs", "train", "--spam", spam])
    assert result.exit_code == 0, result.output
    assert stats(runner, f"sqlite:///{db}")["spam_messages"] == 60
    flat = tmp_path / "flat.db"
    assert runner.invoke(app, ["--db", f"sqlite:///{flat}", "train", "--spam", spam]).exit_code == 0
    assert flat.stat().st_mode & 0o777 == 0o600


def test_the_default_database_location_is_created_with_its_folders(runner: CliRunner, tmp_path: Path, sample: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPAMFILTER_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = tmp_path / "config.toml"
    config.write_text("")
    result = runner.invoke(app, ["--config", str(config), "train", "--spam", str(sample / "train-spam.mbox")])
    assert result.exit_code == 0, result.output
    assert len(list(tmp_path.rglob("*.db"))) == 1


# -- 5. empty sources -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_an_empty_folder_is_warned_about_and_nothing_found_exits_66(runner: CliRunner, db_url: str, tmp_path: Path, sample: Path, kind: str) -> None:
    # An empty file named on the command line holds no message either (it
    # was refused as an empty message, 65, where the guide says 66).
    empty = tmp_path / "empty"
    if kind == "folder":
        empty.mkdir()
    else:
        empty.touch()
    result = runner.invoke(app, ["--db", db_url, "train", "--spam", str(empty)])
    assert result.exit_code == exitcodes.NO_INPUT
    assert result.stderr.splitlines() == [f"spamfilter: warning: no messages in {empty}", "spamfilter: no messages found in any source"]
    assert result.stdout == ""
    result = runner.invoke(app, ["--db", db_url, "train", "--spam", str(empty), "--ham", str(sample / "train-ham.mbox")])
    assert result.exit_code == 0
    assert result.stdout.strip() == "trained 0 spam, 60 ham"
    assert result.stderr.strip() == f"spamfilter: warning: no messages in {empty}"


def test_an_empty_mailbox_in_a_folder_or_on_stdin_holds_no_message(runner: CliRunner, db_url: str, tmp_path: Path, sample: Path) -> None:
    # An mbox folder's empty Trash and Sent were refused as "empty message"
    # (exit 65), and so was an empty standard input.
    mail = tmp_path / "mail"
    mail.mkdir()
    (mail / "INBOX").write_bytes((sample / "train-ham.mbox").read_bytes())
    (mail / "Trash").touch()
    (mail / "Sent").touch()
    result = runner.invoke(app, ["--db", db_url, "train", "--ham", str(mail)])
    assert (result.exit_code, result.stdout.strip(), result.stderr) == (0, "trained 0 spam, 60 ham", "")
    result = runner.invoke(app, ["--db", db_url, "train", "--spam", "-"], input=b"")
    assert result.exit_code == exitcodes.NO_INPUT
    assert result.stderr.splitlines() == ["spamfilter: warning: no messages in -", "spamfilter: no messages found in any source"]
    # A message file in a Maildir with nothing in it is still refused.
    for sub in ("cur", "new", "tmp"):
        (tmp_path / "md" / sub).mkdir(parents=True)
    (tmp_path / "md" / "cur" / "1.x:2,S").touch()
    result = runner.invoke(app, ["--db", db_url, "train", "--spam", str(tmp_path / "md")])
    assert result.exit_code == exitcodes.DATA_ERROR and "empty message" in result.stderr


def test_a_link_to_nothing_in_a_folder_is_refused_not_passed_over(runner: CliRunner, db_url: str, tmp_path: Path, sample: Path) -> None:
    mail = tmp_path / "mail"
    mail.mkdir()
    (mail / "INBOX").write_bytes((sample / "train-ham.mbox").read_bytes())
    (mail / "gone").symlink_to(tmp_path / "nonexistent")
    result = runner.invoke(app, ["--db", db_url, "train", "--ham", str(mail)])
    assert result.exit_code == exitcodes.DATA_ERROR
    assert "trained 0 spam, 60 ham" in result.stdout
    assert result.stderr == f"spamfilter: skipped {mail / 'gone'}: cannot read it: a link to a file that does not exist\n"


def test_classify_warns_about_an_empty_source_and_classifies_the_others(runner: CliRunner, db_url: str, tmp_path: Path, sample: Path) -> None:
    runner.invoke(app, ["--db", db_url, "train", "--spam", str(sample / "train-spam.mbox"), "--ham", str(sample / "train-ham.mbox")])
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["--db", db_url, "classify", str(empty)])
    assert result.exit_code == 0
    assert (result.stdout, result.stderr.strip()) == ("", f"spamfilter: warning: no messages in {empty}")
    result = runner.invoke(app, ["--db", db_url, "classify", "--format", "tsv", str(empty), str(sample / "inbox.mbox")])
    assert result.exit_code == 0
    assert result.stderr.strip() == f"spamfilter: warning: no messages in {empty}"
    assert result.stdout.splitlines()[0] == "source\tscore\tlog_odds\tverdict" and len(result.stdout.splitlines()) == 21


@pytest.mark.parametrize("layout", ["folder", "maildir", "mh"])
def test_a_message_file_that_cannot_be_read_is_refused_and_the_run_goes_on(
    runner: CliRunner, db_url: str, tmp_path: Path, sample: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    from spamfilter.mail import sources

    runner.invoke(app, ["--db", db_url, "train", "--spam", str(sample / "train-spam.mbox"), "--ham", str(sample / "train-ham.mbox")])
    root = tmp_path / "box"
    where = {"folder": root, "maildir": root / "cur", "mh": root}[layout]
    where.mkdir(parents=True)
    if layout == "maildir":
        (root / "new").mkdir()
        (root / "tmp").mkdir()
    names = ["1", "2", "3"]
    for name in names:
        (where / name).write_bytes(b"Subject: lunch\n\nsee you at noon\n")
    bad = str(where / "2")
    real_open = open

    def unreadable(path: object, *args: object, **kwargs: object) -> object:
        if str(path) == bad:  # as a file without read permission, or renamed since the listing
            raise PermissionError(13, "Permission denied", bad)
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(sources, "open", unreadable, raising=False)
    result = runner.invoke(app, ["--db", db_url, "classify", "--jobs", "1", "--format", "tsv", str(root)])
    assert result.exit_code == exitcodes.DATA_ERROR, result.output
    assert [line.split("\t")[0] for line in result.stdout.splitlines()[1:]] == [str(where / "1"), str(where / "3")]
    assert result.stderr.strip() == f"spamfilter: skipped {bad}: cannot read it: Permission denied"
    # forget does not parse, and refuses it all the same.
    result = runner.invoke(app, ["--db", db_url, "forget", str(root)])
    assert result.exit_code == exitcodes.DATA_ERROR, result.output
    assert result.stderr.strip() == f"spamfilter: skipped {bad}: cannot read it: Permission denied"


@pytest.mark.parametrize("gone", ["folder", "maildir-new"])
def test_a_subfolder_that_cannot_be_listed_is_skipped_and_the_rest_read(
    runner: CliRunner, db_url: str, sample: Path, tmp_path: Path, gone: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A subfolder without permission, or deleted by a mail client after its
    # parent was listed: refused like an unreadable file (65), where it
    # ended the whole run with 66 and nothing of the rest learned.
    runner.invoke(app, ["--db", db_url, "train", "--spam", str(sample / "train-spam.mbox"), "--ham", str(sample / "train-ham.mbox")])
    root = tmp_path / "tree"
    for name in ("a", "c"):
        (root / name).mkdir(parents=True)
        (root / name / "1").write_bytes(b"Subject: lunch " + name.encode() + b"\n\nsee you at noon\n")
    box = root / "b"
    for sub in ("cur", "new", "tmp"):
        (box / sub).mkdir(parents=True)
    (box / "cur" / "m1").write_bytes(b"Subject: lunch b\n\nsee you at noon\n")
    bad = str(box if gone == "folder" else box / "new")
    real_scandir = os.scandir

    def scandir(path: str) -> object:
        if str(path) == bad:
            raise PermissionError(13, "Permission denied", bad)
        return real_scandir(path)

    monkeypatch.setattr(sources.os, "scandir", scandir)
    if gone == "folder":  # nothing inside it can be looked at either
        monkeypatch.setattr(sources.os.path, "isdir", lambda p, real=os.path.isdir: False if str(p).startswith(bad + os.sep) else real(p))
    result = runner.invoke(app, ["--db", db_url, "classify", "--jobs", "1", "--format", "tsv", str(root)])
    assert result.exit_code == exitcodes.DATA_ERROR, result.output
    read = [line.split("\t")[0] for line in result.stdout.splitlines()[1:]]
    expected = [str(root / "a" / "1"), str(root / "c" / "1")]
    assert read == (expected if gone == "folder" else [expected[0], str(box / "cur" / "m1"), expected[1]])
    assert result.stderr.strip() == f"spamfilter: skipped {bad}: cannot read it: Permission denied"
    trained = runner.invoke(app, ["--db", db_url, "train", "--ham", str(root)])
    assert trained.exit_code == exitcodes.DATA_ERROR, trained.output
    assert re.search(r"trained 0 spam, [23] ham", trained.stdout), trained.stdout


def test_every_index_given_is_read_and_checked_before_any_is(runner: CliRunner, db_url: str, sample: Path, tmp_path: Path) -> None:
    # A repeated --index kept only the last: "trained 0 spam, 2 ham".
    items = list(read_messages([str(sample / "train-spam.mbox")]))[:3] + list(read_messages([str(sample / "train-ham.mbox")]))[:2]
    for n, item in enumerate(items):
        (tmp_path / f"m{n}.eml").write_bytes(item.raw)
    (tmp_path / "spam.index").write_text("spam m0.eml\nspam m1.eml\nspam m2.eml\n")
    (tmp_path / "ham.index").write_text("ham m3.eml\nham m4.eml\n")
    (tmp_path / "broken.index").write_text("ham m4.eml\nham no-such.eml\n")
    indexes = ["--index", str(tmp_path / "spam.index"), "--index", str(tmp_path / "ham.index")]
    broken = runner.invoke(app, ["--db", db_url, "train", *indexes, "--index", str(tmp_path / "broken.index")])
    assert broken.exit_code == exitcodes.NO_INPUT and "no-such.eml" in broken.stderr, broken.output
    assert not Path(db_url.removeprefix("sqlite:///")).exists() or stats(runner, db_url)["spam_messages"] == 0
    result = runner.invoke(app, ["--db", db_url, "train", *indexes])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "trained 3 spam, 2 ham"
    classified = runner.invoke(app, ["--db", db_url, "classify", "--format", "tsv", "--jobs", "1", *indexes])
    assert classified.exit_code == 0, classified.output
    assert [line.split("\t")[0] for line in classified.stdout.splitlines()[1:]] == [str(tmp_path / f"m{n}.eml") for n in range(5)]
    # A stream is one index: evaluate and tune refuse two rather than keep the last.
    for command in (["evaluate"], ["tune", "--folds", "1"]):
        twice = runner.invoke(app, ["--db", db_url, *command, *indexes])
        assert twice.exit_code == exitcodes.USAGE and "give one index" in twice.output, twice.output


def test_the_table_keeps_one_row_per_message_whatever_the_file_names(runner: CliRunner, sample_db: str, sample: Path, tmp_path: Path) -> None:
    # A newline or tab in a file name went into the table raw: one message, two rows.
    item = next(iter(read_messages([str(sample / "train-ham.mbox")])))
    names = ["two\nlines.eml", "a\ttab.eml", "plain.eml"]
    for name in names:
        (tmp_path / name).write_bytes(item.raw)
    result = runner.invoke(app, ["--db", sample_db, "classify", "--jobs", "1", *[str(tmp_path / n) for n in names]])
    assert result.exit_code == 0, result.output
    rows = result.stdout.splitlines()[1:]
    assert len(rows) == 3
    assert sorted(row.split("  ", 1)[1].rsplit("/", 1)[1] for row in rows) == sorted(["two\\nlines.eml", "a\\ttab.eml", "plain.eml"])


def test_an_empty_index_exits_66(runner: CliRunner, db_url: str, tmp_path: Path) -> None:
    index = tmp_path / "index"
    index.write_text("")
    result = runner.invoke(app, ["--db", db_url, "train", "--index", str(index)])
    assert result.exit_code == exitcodes.NO_INPUT
    assert result.stderr.strip() == "spamfilter: no messages found in any source"


def test_an_index_that_lists_a_message_twice_is_refused_before_anything_is_trained(runner: CliRunner, db_url: str, sample: Path, tmp_path: Path) -> None:
    # The same file as spam and again as ham was trained as spam and the
    # second line called "already trained", exit 0; evaluate scored it twice.
    items = list(read_messages([str(sample / "train-spam.mbox")]))[:2] + list(read_messages([str(sample / "train-ham.mbox")]))[:2]
    for n, item in enumerate(items):
        (tmp_path / f"m{n}.eml").write_bytes(item.raw)
    index = tmp_path / "index"
    index.write_text("spam m0.eml\nspam m1.eml\nham m2.eml\nham m3.eml\nham m0.eml\n")
    for command in (["train", "--index"], ["evaluate", "--index"], ["classify", "--index"]):
        result = runner.invoke(app, ["--db", db_url, *command, str(index)])
        assert result.exit_code == exitcodes.NO_INPUT, result.output
        assert f"index:5: message file '{tmp_path / 'm0.eml'}' is listed again (first on line 1)" in result.stderr
    assert not Path(db_url.removeprefix("sqlite:///")).exists() or stats(runner, db_url)["spam_messages"] == 0


# -- 8. --help shows metavars, not framework types ------------------------------------------


def test_help_has_no_framework_artefacts(runner: CliRunner) -> None:
    commands = [
        "",
        "train",
        "forget",
        "mark",
        "classify",
        "filter",
        "stats",
        "evaluate",
        "tune",
        "db upgrade",
        "db check",
        "db prune",
        "db vacuum",
        "db export",
        "db import",
        "imap run",
        "top-words",
        "explain",
        "report",
    ]
    for command in commands:
        text = runner.invoke(app, [*command.split(), "--help"]).stdout
        assert not re.search(r"<[a-z\[\]| ]+>|\{[A-Za-z.|]+\}|\]\.\.\.\]|list\[", text), (command, text)
    usage = runner.invoke(app, ["forget", "--help"]).stdout.splitlines()[0]
    assert usage == "Usage: root forget [OPTIONS] SRC..."
    usage = runner.invoke(app, ["mark", "--help"]).stdout.splitlines()[0]
    assert usage == "Usage: root mark [OPTIONS] spam|ham SRC..."


def test_imap_progress_keeps_the_counts_whole_on_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    import spamfilter.cli.imap as imap_cli
    from spamfilter.imap.summary import Event

    monkeypatch.setattr(imap_cli, "Console", lambda stderr=True: Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None))
    display = imap_cli._Display(verbose=False, dry_run=False)
    try:
        display(Event("scanned", "INBOX", 0, "3000", False))
        display(Event("scanned", "Junk", 0, "0", False))  # nothing new there
        display(Event("fetched", "INBOX", 0, "2500", False))
        for kind in ("classified", "moved", "flagged", "trained", "refused"):
            for uid in range(1, 801):
                display(Event(kind, "INBOX", uid, "", False))
        assert display.bar is not None
        out = Console(file=io.StringIO(), width=80, color_system=None)
        out.print(display.bar.make_tasks_table(display.bar.tasks))
        lines = out.file.getvalue().splitlines()  # type: ignore[attr-defined]
    finally:
        display.stop()
    assert len(lines) == 1 and "2500/3000" in lines[0] and lines[0].startswith("INBOX ")
    assert all(len(line) <= 80 for line in lines)


def test_classify_and_train_of_indexes_show_how_many_are_left(runner: CliRunner, db_url: str, sample: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # classify --index showed no total ("classifying 134 messages"), and
    # train counted only the index when --spam was given too.
    import io

    from rich.console import Console

    import spamfilter.cli._common as common

    screens: list[io.StringIO] = []

    def terminal(stderr: bool = True) -> Console:
        screens.append(io.StringIO())
        return Console(file=screens[-1], width=200, force_terminal=True, color_system=None)

    monkeypatch.setattr(common, "Console", terminal)
    items = list(read_messages([str(sample / "train-spam.mbox")]))[:3] + list(read_messages([str(sample / "train-ham.mbox")]))[:2]
    for n, item in enumerate(items):
        (tmp_path / f"m{n}.eml").write_bytes(item.raw)
    (tmp_path / "index").write_text("spam m0.eml\nspam m1.eml\nham m3.eml\nham m4.eml\n")
    index = ["--index", str(tmp_path / "index")]

    def shown(*args: str) -> str:
        result = runner.invoke(app, ["--db", db_url, *args])
        assert result.exit_code == 0, result.output
        return screens[-1].getvalue()

    assert "4/4" in shown("train", *index)
    assert "5 messages" in shown("train", "--spam", str(tmp_path / "m2.eml"), *index) and "/4" not in screens[-1].getvalue()
    assert "4/4" in shown("classify", "--jobs", "1", *index)
    assert "5 messages" in shown("classify", "--jobs", "1", str(tmp_path / "m2.eml"), *index)
