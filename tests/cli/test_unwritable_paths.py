"""A file to write whose path runs through a file (``notes.txt/config.toml``):
the error names that file as not a folder (ENOTDIR), not as a permission
or a missing folder, with the exit code of the file's kind."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spamfilter.cli import app, exitcodes


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("not a folder\n")
    return path


def test_tune_write_to_a_config_under_a_file_says_it_is_not_a_folder(a_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPAMFILTER_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(a_file))
    index = tmp_path / "index"
    index.write_text("")
    result = CliRunner().invoke(app, ["tune", "--index", str(index), "--write"])
    assert result.exit_code == exitcodes.OUTPUT_ERROR, result.output
    assert result.stderr == f"spamfilter: cannot write {a_file}/spamfilter/config.toml: {a_file} is not a folder\n"
    assert result.stdout == ""  # refused before the run


@pytest.mark.parametrize("create_dirs", [[], ["--create-dirs"]], ids=["", "--create-dirs"])
def test_a_database_under_a_file_says_it_is_not_a_folder(a_file: Path, create_dirs: list[str]) -> None:
    db = a_file / "sub" / "x.db"
    result = CliRunner().invoke(app, ["--db", str(db), *create_dirs, "train", "--spam", "-"], input="Subject: hi\n\nhello\n")
    assert result.exit_code == exitcodes.STORE_ERROR, result.output
    # Not "folder ... does not exist (--create-dirs creates it)": it would not.
    assert result.stderr == f"spamfilter: cannot create database {db}: {a_file} is not a folder\n"


@pytest.mark.parametrize("command", [["stats"], ["train", "--spam", "-"]], ids=["stats", "train"])
def test_a_database_that_is_a_folder_says_so(tmp_path: Path, command: list[str]) -> None:
    # SQLite said only "unable to open database file".
    result = CliRunner().invoke(app, ["--db", str(tmp_path), *command], input="Subject: hi\n\nhello\n")
    assert result.exit_code == exitcodes.STORE_ERROR, result.output
    assert result.stderr == f"spamfilter: database {tmp_path}: it is a folder; name a database file (e.g. {tmp_path / 'spamfilter.db'})\n"


def test_a_wal_database_in_a_folder_this_user_cannot_write_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A reader of a WAL database must create its -shm beside it: in another
    # user's folder (or on a read-only file system) SQLite said only "unable
    # to open database file". Root writes anywhere, so the folder's answer
    # to access(2) is what is simulated here (a read-only mount gives it).
    import os

    from spamfilter.store import engine

    db = tmp_path / "model.db"
    assert CliRunner().invoke(app, ["--db", str(db), "train", "--spam", "-"], input="Subject: hi\n\nhello\n").exit_code == 0
    assert not db.with_name("model.db-shm").exists()  # the last connection took it away
    real = os.access
    monkeypatch.setattr(engine.os, "access", lambda p, mode: False if Path(p) == tmp_path and mode == os.W_OK else real(p, mode))
    result = CliRunner().invoke(app, ["--db", str(db), "stats"])
    assert result.exit_code == exitcodes.STORE_ERROR, result.output
    assert result.stderr.startswith(f"spamfilter: database {db}: this user cannot write to its folder {tmp_path} (no permission, or a read-only file system)")
    assert "sqlite:///" in result.stderr and "immutable=1" in result.stderr
    # Opened read-only as the message says, it is read.
    result = CliRunner().invoke(app, ["--db", f"sqlite:///{db}?immutable=1", "stats", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert '"spam_messages": 1' in result.stdout
