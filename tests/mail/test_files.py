"""Files spamfilter writes beside the user's: `db export` never writes
through a planted link, a database file it fills is owner-only, and a
database made read-only for a while is writable again once its mode is."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import TextIO

import pytest
from typer.testing import CliRunner

from spamfilter.cli import app, exitcodes
from spamfilter.tools.config_file import update_config_file
from spamfilter.tools.maintenance import Maintenance

HEADER = "# spamfilter counts v2"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_export_never_writes_through_a_link_at_the_temporary_or_at_file(sample_db: str, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    victim.chmod(0o644)
    out = tmp_path / "out.tsv"
    # The name the temporary used to have, and FILE itself, as links.
    (tmp_path / "out.tsv.part").symlink_to(victim)
    for _ in range(2):
        result = CliRunner().invoke(app, ["--db", sample_db, "db", "export", str(out)])
        assert result.exit_code == 0, result.output
        assert victim.read_text() == "keep me\n" and mode(victim) == 0o644
        assert not out.is_symlink() and out.read_text(encoding="utf-8").startswith(HEADER)
        assert mode(out) == 0o600
        out.unlink()
        out.symlink_to(victim)
    # No temporary is left behind; the planted links are untouched.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tsv", "out.tsv.part", "victim.txt"]
    assert (tmp_path / "out.tsv.part").is_symlink()


def test_export_to_a_fifo_or_a_device_writes_into_it_and_never_replaces_it(sample_db: str, tmp_path: Path) -> None:
    # A file renamed over FILE would have removed a device node (run as
    # root, `db export /dev/full` did) or the /dev/stdout link.
    reference = tmp_path / "counts.tsv"
    assert CliRunner().invoke(app, ["--db", sample_db, "db", "export", str(reference)]).exit_code == 0
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    try:
        result = CliRunner().invoke(app, ["--db", sample_db, "db", "export", str(fifo)])
        out, _ = reader.communicate(timeout=60)
    finally:
        reader.kill()
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert out == reference.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counts.tsv", "pipe"]


def test_export_into_a_missing_folder_is_a_usage_error(sample_db: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["--db", sample_db, "db", "export", str(tmp_path / "no" / "out.tsv")])
    assert result.exit_code == exitcodes.USAGE
    assert not (tmp_path / "no").exists()


def test_export_to_a_folder_is_a_usage_error_and_leaves_nothing(sample_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It was an internal error (70, IsADirectoryError), after reading every count."""
    folder = tmp_path / "exports"
    folder.mkdir()
    for given in (folder, f"{folder}/"):
        result = CliRunner().invoke(app, ["--db", sample_db, "db", "export", str(given)])
        assert result.exit_code == exitcodes.USAGE, result.output
        assert f"cannot write {given}: it is a folder" in result.stderr
    # A FILE that becomes a folder while the counts are written.
    out = tmp_path / "out.tsv"
    export_counts = Maintenance.export_counts

    def then_a_folder(self: Maintenance, fh: TextIO) -> int:
        n = export_counts(self, fh)
        out.mkdir()
        (out / "keep").touch()
        return n

    monkeypatch.setattr(Maintenance, "export_counts", then_a_folder)
    result = CliRunner().invoke(app, ["--db", sample_db, "db", "export", str(out)])
    assert result.exit_code == exitcodes.USAGE, result.output
    assert f"cannot write {out}: " in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exports", "out.tsv"] and [p.name for p in out.iterdir()] == ["keep"]
    assert list(folder.iterdir()) == []


def test_an_empty_file_given_as_the_database_becomes_owner_only(sample: Path, tmp_path: Path) -> None:
    db = tmp_path / "given.db"
    db.touch()
    db.chmod(0o644)
    result = CliRunner().invoke(app, ["--db", f"sqlite:///{db}", "train", "--spam", str(sample / "train-spam.mbox")])
    assert result.exit_code == 0, result.output
    assert mode(db) == 0o600
    for sidecar in (tmp_path / "given.db-wal", tmp_path / "given.db-shm"):
        assert not sidecar.exists() or mode(sidecar) == 0o600


def test_a_database_the_user_made_0644_keeps_its_mode(sample_db: str, tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    shutil.copy(sample_db.removeprefix("sqlite:///"), db)
    db.chmod(0o644)
    assert CliRunner().invoke(app, ["--db", f"sqlite:///{db}", "stats"]).exit_code == 0
    assert mode(db) == 0o644


def without_root_privileges() -> list[str]:
    """A command prefix under which file permissions apply: as root, drop
    the capabilities that bypass them (root would write a 0400 file)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: file permissions cannot be tested")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


def test_train_works_again_once_a_database_read_while_0400_is_0600_again(sample_db: str, sample: Path, tmp_path: Path) -> None:
    db = tmp_path / "model.db"
    shutil.copy(sample_db.removeprefix("sqlite:///"), db)
    url = f"sqlite:///{db}"
    message = (sample / "train-spam.mbox").read_bytes().split(b"\nFrom ")[0]
    spamfilter = [*without_root_privileges(), sys.executable, "-m", "spamfilter", "--db", url]

    def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([*spamfilter, *args], input=stdin, capture_output=True, timeout=60)

    db.chmod(0o400)
    filtered = run("filter", "--always-zero", stdin=message)
    assert filtered.returncode == 0, filtered.stderr
    assert b"X-Spam-Status:" in filtered.stdout
    # What the read left: SQLite gives -wal and -shm the file's mode.
    assert mode(tmp_path / "model.db-shm") == 0o400
    db.chmod(0o600)
    for _ in range(2):
        trained = run("train", "--ham", "-", stdin=b"From: a@example.org\nSubject: lunch\n\nSee you at noon " + os.urandom(4).hex().encode() + b"\n")
        assert trained.returncode == 0, trained.stderr
        assert trained.stdout.startswith(b"trained 0 spam, 1 ham"), trained.stdout
    shm = tmp_path / "model.db-shm"
    assert not shm.exists() or mode(shm) == 0o600


def test_folders_spamfilter_creates_are_owner_only_whatever_the_umask(sample: Path, tmp_path: Path) -> None:
    """Under umask 000 they were 0777: anyone could replace the 0600 database inside."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPAMFILTER_", "XDG_"))}
    env["HOME"] = str(home)
    spam = str(sample / "train-spam.mbox")

    def train(*options: str) -> None:
        result = subprocess.run([sys.executable, "-m", "spamfilter", *options, "train", "--spam", spam], env=env, umask=0, capture_output=True, timeout=120)
        assert result.returncode == 0, result.stderr

    train()  # the default location, ~/.local/share/spamfilter/spamfilter.db
    made = [home / ".local", home / ".local" / "share", home / ".local" / "share" / "spamfilter"]
    assert {str(p): mode(p) for p in made} == {str(p): 0o700 for p in made}
    assert mode(made[-1] / "spamfilter.db") == 0o600
    train("--db", f"sqlite:///{tmp_path / 'a' / 'b' / 'model.db'}", "--create-dirs")
    assert (mode(tmp_path / "a"), mode(tmp_path / "a" / "b"), mode(tmp_path / "a" / "b" / "model.db")) == (0o700, 0o700, 0o600)


def test_the_config_folder_tune_creates_is_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    config = tmp_path / "config" / "spamfilter" / "config.toml"
    before = os.umask(0)
    try:
        update_config_file(config, {("model", "alpha"): 0.5})
    finally:
        os.umask(before)
    assert (mode(tmp_path / "config"), mode(config.parent)) == (0o700, 0o700)
    assert "alpha = 0.5" in config.read_text()


def test_a_message_longer_than_the_limit_is_refused_unread_and_the_rest_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # One 800 MB message was held whole (868 MB), and under a memory limit
    # ended the run before the messages after it. Now each source gives at
    # most MAX_MESSAGE_BYTES of one message (here made small), as `filter`.
    from spamfilter.mail import read_index, read_messages, sources

    monkeypatch.setattr(sources, "MAX_MESSAGE_BYTES", 2000)
    small = b"Subject: small\n\ncheap pills\n"
    big = b"Subject: big\n\n" + b"x" * 3000 + b"\n"
    folder = tmp_path / "cur"
    folder.mkdir()
    (folder / "1.small").write_bytes(small)
    (folder / "2.big").write_bytes(big)
    (folder / "3.big-envelope").write_bytes(b"From a@b Mon Jan  1 00:00:00 2024\n" + big)
    mbox = tmp_path / "box.mbox"
    mbox.write_bytes(b"".join(b"From a@b Mon Jan  1 00:00:00 2024\n" + m + b"\n" for m in (small, big, small)))
    (tmp_path / "index").write_text(f"spam {folder / '1.small'}\nspam {folder / '2.big'}\nham {mbox}\n")
    read = [*read_messages([str(folder), str(mbox), str(folder / "2.big")]), *(item for _, item in read_index(str(tmp_path / "index")))]
    refused = [item.source for item in read if item.unreadable is not None]
    assert refused == [str(folder / "2.big"), str(folder / "3.big-envelope"), f"{mbox}:2", str(folder / "2.big"), str(folder / "2.big"), str(mbox)]
    assert all(item.raw == b"" and item.unreadable_reason and "larger than" in item.unreadable_reason for item in read if item.unreadable is not None)
    assert [item.raw for item in read if item.unreadable is None] == [small] * 4
    assert read_messages([str(mbox)]).__next__().raw == small
