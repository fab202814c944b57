"""Learning from the user's moves (contrib/dovecot) on a real Dovecot with
Pigeonhole's IMAPSieve.

The Dovecot runs the contrib files as shipped: the configuration snippet
(its two folders pointed into the server's own), both sieve scripts
(compiled with sievec, as the snippet says) and spamfilter-learn, whose
settings file each scenario writes. Each scenario checks the model exactly
(tests/twin_models.py): its counts must equal those of a copy of the same
model to which the test applied what the moves mean itself, or nothing.
Pigeonhole runs the pipe before Dovecot answers the COPY or MOVE; the
tests poll for the learning anyway (at most 30 s), and where a move must
change nothing, a later move whose learning shows is the barrier: the
pipes of one session run in the order of its commands.
"""

from __future__ import annotations

import email
import os
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dovecot import DOVECOT_BINARY, Dovecot, ImapUser
from imapclient import IMAPClient
from test_daemon import Daemon
from twin_models import TwinModels, copy_sqlite

from spamfilter.mail import read_messages

CONTRIB = Path(__file__).resolve().parents[2] / "contrib" / "dovecot"
SIEVE_MODULES = (
    Path("/usr/lib/dovecot/modules/lib95_imap_sieve_plugin.so"),
    Path("/usr/lib/dovecot/modules/sieve/lib90_sieve_extprograms_plugin.so"),
    Path("/usr/bin/sievec"),
)
#: The snippet's folders, and where the test server has them.
SHIPPED_PATHS = {"/etc/dovecot/sieve/": "{workdir}/sieve/", "/usr/lib/dovecot/sieve-pipe": "{workdir}/sieve-pipe"}
SPAM, HAM = True, False


# -- the server --------------------------------------------------------------------


@dataclass(frozen=True)
class Sieve:
    """A Dovecot with the contrib setup, and a spamfilter its mail user can run."""

    server: Dovecot
    spamfilter: Path

    @property
    def settings(self) -> Path:
        return self.server.workdir / "sieve-pipe" / "spamfilter-learn.conf"

    def configure(self, model: TwinModels, *, spamfilter: Path | None = None, server: str = "", per_user: bool = False, timeout: int = 20) -> None:
        """Write spamfilter-learn.conf (read at each run)."""
        self.settings.write_text(
            f"SPAMFILTER={spamfilter or self.spamfilter}\n"
            f"SPAMFILTER_DB={model.url}\n"
            f"SPAMFILTER_CONFIG={model.config}\n"
            f"SPAMFILTER_SERVER={server}\n"
            f"PER_USER={'yes' if per_user else 'no'}\n"
            f"TIMEOUT={timeout}\n"
        )

    def model(self, trained: str, tmp_path: Path, *, mail_user_writes: bool = True) -> TwinModels:
        """A copy of ``trained`` that the mail user may write (or, with
        ``mail_user_writes`` False, not even read), and its expected copy."""
        folder = self.server.workdir / f"model-{tmp_path.name}"
        folder.mkdir(mode=0o755 if mail_user_writes else 0o700)
        config = self.server.workdir / "config.toml"
        config.touch(mode=0o644)
        url = copy_sqlite(trained, folder / "model.db")
        if mail_user_writes and os.geteuid() == 0:
            for path in (folder, folder / "model.db"):
                os.chown(path, self.server.mail_uid, self.server.mail_gid)
        return TwinModels(url, copy_sqlite(trained, tmp_path / "expected.db"), config)

    def user(self) -> ImapUser:
        user = self.server.add_user()
        with self.server.client(user) as imap:
            imap.create_folder("Junk")
            imap.create_folder("Trash")
        return user

    def move_into_junk(self, user: ImapUser, message: bytes) -> None:
        """APPEND ``message`` to the INBOX, then MOVE it into Junk."""
        self.server.append(user, "INBOX", [message])
        with self.server.client(user, "INBOX") as imap:
            imap.move([_uid(imap, message)], "Junk")

    def log_from(self, offset: int) -> str:
        with self.server.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def log_size(self) -> int:
        return self.server.log_path.stat().st_size


def _require_sieve() -> None:
    missing = [str(p) for p in (DOVECOT_BINARY, *SIEVE_MODULES) if not p.is_file()]
    if missing:
        reason = f"dovecot-imapd and dovecot-sieve are not installed ({', '.join(missing)} missing)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def _runs_as_mail_user(server: Dovecot, command: Path) -> bool:
    """Whether the mail user can run ``command`` from a shell with an empty
    environment, as the pipe runs spamfilter-learn."""
    ids: dict[str, object] = {}
    if os.geteuid() == 0:
        ids = {"user": server.mail_uid, "group": server.mail_gid, "extra_groups": []}
    result = subprocess.run(["/bin/sh", "-c", '"$0" mark --help', str(command)], env={}, cwd="/", capture_output=True, timeout=120, **ids)
    return result.returncode == 0


def _mail_user_spamfilter(server: Dovecot) -> Path:
    """A ``spamfilter`` command for the mail user: this interpreter, or,
    when the mail user cannot reach it (tests run as root with a Python
    under /root, which only root may enter), a virtual environment of the
    system's Python of the same version that uses this one's packages."""
    command = server.workdir / "bin" / "spamfilter"
    command.parent.mkdir(mode=0o755)

    def point_at(python: str) -> bool:
        command.write_text(f'#!/bin/sh\nexec {python} -m spamfilter "$@"\n')
        command.chmod(0o755)
        return _runs_as_mail_user(server, command)

    if point_at(sys.executable):
        return command
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    system = Path(f"/usr/bin/python{version}")
    if system.is_file():
        venv = server.workdir / "venv"
        subprocess.run([str(system), "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
        site = venv / "lib" / f"python{version}" / "site-packages"
        (site / "spamfilter-tests.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
        if point_at(str(venv / "bin" / "python")):
            return command
    pytest.fail(f"uid {server.mail_uid} cannot run spamfilter with {sys.executable} (nor with {system})")


@pytest.fixture(scope="module")
def sieve() -> Iterator[Sieve]:
    _require_sieve()
    snippet = (CONTRIB / "90-spamfilter-learn.conf").read_text()
    for shipped, ours in SHIPPED_PATHS.items():
        assert shipped in snippet
        snippet = snippet.replace(shipped, ours)
    with Dovecot.start(extra_config=snippet) as server:
        scripts, programs = server.workdir / "sieve", server.workdir / "sieve-pipe"
        scripts.mkdir(mode=0o755)
        programs.mkdir(mode=0o755)
        for name in ("report-spam.sieve", "report-ham.sieve"):
            shutil.copy(CONTRIB / name, scripts / name)
            subprocess.run(["sievec", "-c", str(server.config_path), str(scripts / name)], check=True, capture_output=True)
        shutil.copy(CONTRIB / "spamfilter-learn", programs / "spamfilter-learn")
        assert os.access(programs / "spamfilter-learn", os.X_OK)
        yield Sieve(server, _mail_user_spamfilter(server))


@pytest.fixture
def inbox(sample: Path) -> list[bytes]:
    """The sample's 20 inbox messages (read only)."""
    return [item.raw for item in read_messages([str(sample / "inbox.mbox")])]


@pytest.fixture
def log_start(sieve: Sieve) -> Iterator[int]:
    """The Dovecot log's size before the test; after it, the log must show
    no error (a failed pipe, a sieve error, the learner's stderr)."""
    start = sieve.log_size()
    yield start
    assert "Error:" not in sieve.log_from(start)


def _uid(imap: IMAPClient, message: bytes) -> int:
    """The UID of ``message`` in the selected folder (by its Message-ID)."""
    message_id = email.message_from_bytes(message)["Message-ID"]
    uids = imap.search(["HEADER", "Message-ID", message_id])
    assert len(uids) == 1, uids
    return int(uids[0])


def _in_folder(sieve: Sieve, user: ImapUser, folder: str) -> list[tuple[bytes, tuple[bytes, ...]]]:
    """Each message in ``folder`` (LF line ends) and its flags."""
    return [(raw.replace(b"\r\n", b"\n"), flags) for _, raw, flags in sieve.server.folder_messages(user, folder)]


# -- moves and copies ----------------------------------------------------------------


def test_move_into_junk_learns_spam_and_keeps_the_message(sieve: Sieve, sample_db: str, tmp_path: Path, inbox: list[bytes], log_start: int) -> None:
    model = sieve.model(sample_db, tmp_path)
    sieve.configure(model)
    user = sieve.user()
    sieve.move_into_junk(user, inbox[0])
    model.expect(SPAM, inbox[0])
    model.wait_as_expected()
    # Learning only reads it: the message is in Junk, not marked \Deleted.
    assert _in_folder(sieve, user, "Junk") == [(inbox[0], ())]
    assert _in_folder(sieve, user, "INBOX") == []


def test_out_of_junk_is_ham_but_into_trash_is_nothing(sieve: Sieve, sample_db: str, tmp_path: Path, inbox: list[bytes], log_start: int) -> None:
    model = sieve.model(sample_db, tmp_path)
    sieve.configure(model)
    user = sieve.user()
    deleted, wanted = inbox[1], inbox[2]
    sieve.server.append(user, "INBOX", [deleted, wanted])
    with sieve.server.client(user, "INBOX") as imap:
        imap.move(imap.search("ALL"), "Junk")
    model.expect(SPAM, deleted)
    model.expect(SPAM, wanted)
    model.wait_as_expected()
    with sieve.server.client(user, "Junk") as imap:
        imap.move([_uid(imap, deleted)], "Trash")
        imap.move([_uid(imap, wanted)], "INBOX")
    # Once the second move's learning shows, the first one's would have.
    model.expect(HAM, wanted)
    model.wait_as_expected()
    assert _in_folder(sieve, user, "Trash") == [(deleted, ())]
    assert _in_folder(sieve, user, "INBOX") == [(wanted, ())]


def test_copy_into_junk_learns_spam_again_is_success_and_append_learns_nothing(sieve: Sieve, sample_db: str, tmp_path: Path, inbox: list[bytes], log_start: int) -> None:
    model = sieve.model(sample_db, tmp_path)
    sieve.configure(model)
    user = sieve.user()
    appended, copied, last = inbox[3], inbox[4], inbox[5]
    sieve.server.append(user, "Junk", [appended])
    sieve.server.append(user, "INBOX", [copied, last])
    with sieve.server.client(user, "INBOX") as imap:
        imap.copy([_uid(imap, copied)], "Junk")
        # Learned already: spamfilter-learn exits 0 (log_start checks that
        # Dovecot logged no failure).
        imap.copy([_uid(imap, copied)], "Junk")
        imap.copy([_uid(imap, last)], "Junk")
    model.expect(SPAM, copied)
    model.expect(SPAM, last)
    model.wait_as_expected()
    assert sorted(_in_folder(sieve, user, "Junk")) == sorted([(appended, ()), (copied, ()), (copied, ()), (last, ())])
    assert len(_in_folder(sieve, user, "INBOX")) == 2


def test_per_user_mode_teaches_the_imap_users_own_model(sieve: Sieve, sample_db: str, tmp_path: Path, inbox: list[bytes], log_start: int) -> None:
    model = sieve.model(sample_db, tmp_path)
    sieve.configure(model, per_user=True)
    user = sieve.user()
    sieve.move_into_junk(user, inbox[6])
    model.expect(SPAM, inbox[6], user=user.name)
    model.wait_as_expected(user=user.name)
    assert model.as_expected()  # the default model is as it was


def test_learning_goes_through_the_daemon_when_one_is_set(sieve: Sieve, sample_db: str, tmp_path: Path, inbox: list[bytes], log_start: int) -> None:
    # As root the tests run the mail processes as nobody, who cannot even
    # read this database: only the daemon can have learned. Its log says so
    # in any case.
    model = sieve.model(sample_db, tmp_path, mail_user_writes=False)
    daemon = Daemon(tmp_path / "serve.log", model.url, model.config, "--listen", "127.0.0.1:0", "--allow-tell")
    try:
        sieve.configure(model, server=str(daemon.address))
        user = sieve.user()
        sieve.move_into_junk(user, inbox[7])
        model.expect(SPAM, inbox[7])
        model.wait_as_expected()
        assert daemon.logged("TELL user=(default) verdict=learned=spam", 1) == 1
    finally:
        assert daemon.stop() == 0


def test_a_learner_that_hangs_is_stopped_and_the_move_stands(sieve: Sieve, sample_db: str, tmp_path: Path, inbox: list[bytes]) -> None:
    model = sieve.model(sample_db, tmp_path)
    hangs = sieve.server.workdir / "bin" / "hangs"
    hangs.write_text("#!/bin/sh\nsleep 600\n")
    hangs.chmod(0o755)
    sieve.configure(model, spamfilter=hangs, timeout=1)
    start = sieve.log_size()
    user = sieve.user()
    sieve.move_into_junk(user, inbox[8])
    assert _in_folder(sieve, user, "Junk") == [(inbox[8], ())]
    assert _in_folder(sieve, user, "INBOX") == []
    log = sieve.log_from(start)
    assert "Terminated with non-zero exit code 124" in log  # timeout's
    assert "failed to execute to program `spamfilter-learn'" in log
    assert model.as_expected()


def test_a_locked_database_is_given_up_before_the_timeout_saying_why(sieve: Sieve, sample_db: str, tmp_path: Path, inbox: list[bytes]) -> None:
    # Another process writes for longer than the move may wait: mark gives
    # up on its own (TIMEOUT - 3 s) and says why in Dovecot's log, instead
    # of being killed silently by timeout (exit 124).
    model = sieve.model(sample_db, tmp_path)
    sieve.configure(model, timeout=7)
    holder = sqlite3.connect(model.url.removeprefix("sqlite:///"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        start = sieve.log_size()
        user = sieve.user()
        sieve.move_into_junk(user, inbox[9])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert _in_folder(sieve, user, "Junk") == [(inbox[9], ())]
    log = sieve.log_from(start)
    assert "the database stayed locked by another process" in log
    assert "exit code 124" not in log
    assert model.as_expected()  # not learned, and nothing half-written


def test_a_message_that_starts_with_a_from_line_is_learned_as_one(sieve: Sieve, sample_db: str, tmp_path: Path, inbox: list[bytes], log_start: int) -> None:
    # It was split as an mbox: one move learned three spam.
    head, _, body = inbox[10].partition(b"\n\n")
    message = b"From someone@example.org Thu Jan  1 00:00:00 2026\n" + head + b"\n\nFrom the desk of the editor\n\nFrom now on, read this.\n" + body
    model = sieve.model(sample_db, tmp_path)
    sieve.configure(model)
    user = sieve.user()
    sieve.move_into_junk(user, message)
    model.expect(SPAM, message)  # one message, as the expected model learns it
    model.wait_as_expected()


class _Learner:
    """contrib's spamfilter-learn in a folder of its own, calling a fake
    spamfilter that leaves a mark when it runs."""

    def __init__(self, folder: Path) -> None:
        self.script = folder / "spamfilter-learn"
        shutil.copy(CONTRIB / "spamfilter-learn", self.script)
        self.marker = folder / "ran"
        self.fake = folder / "fake-spamfilter"
        self.fake.write_text(f"#!/bin/sh\ntouch {self.marker}\n")
        self.fake.chmod(0o755)

    def run(self, settings: str, *args: str) -> subprocess.CompletedProcess[bytes]:
        (self.script.parent / "spamfilter-learn.conf").write_text(f"SPAMFILTER={self.fake}\n{settings}")
        return subprocess.run(["sh", str(self.script), *args], input=b"Subject: x\n\nbody\n", capture_output=True, timeout=60)


def test_per_user_mode_without_a_user_learns_nothing(tmp_path: Path) -> None:
    # The sieve scripts pass imap.user; without one, PER_USER=yes taught the
    # model every user shares, without a word.
    learner = _Learner(tmp_path)
    for args in (["spam", ""], ["spam"]):
        done = learner.run("PER_USER=yes\n", *args)
        assert done.returncode == 64 and b"PER_USER=yes but no user given" in done.stderr
    assert not learner.marker.exists()
    done = learner.run("PER_USER=yes\n", "spam", "alice")
    assert done.returncode == 0 and learner.marker.exists()  # with a user it runs


def test_a_timeout_that_is_not_whole_seconds_is_a_setting_error(tmp_path: Path) -> None:
    # "20s" made the shell's arithmetic fail with its own message (exit 2),
    # and 0 would let timeout(1) wait for ever.
    learner = _Learner(tmp_path)
    for timeout in ("20s", "", "0", "08", "-5", "1.5", "abc"):
        done = learner.run(f"TIMEOUT={timeout}\n", "spam")
        assert done.returncode == 78 and b"not a whole number of seconds" in done.stderr, timeout
    assert not learner.marker.exists()
    done = learner.run("TIMEOUT=7\n", "spam")
    assert done.returncode == 0 and learner.marker.exists()
