"""Tests of the private Dovecot server helper (tests/dovecot.py)."""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from dovecot import DOVECOT_BINARY, Dovecot, ImapUser, _descendants, _maildir_folder_name, _process_alive, dovecot_server  # noqa: F401
from imapclient import IMAPClient
from imapclient.exceptions import LoginError


def _message(subject: str, body: str = "Hello.") -> bytes:
    return (f"From: sender@example.com\r\nTo: user@example.com\r\nSubject: {subject}\r\nMessage-ID: <{subject.replace(' ', '-')}@example.com>\r\n\r\n{body}\r\n").encode()


@pytest.fixture(scope="module")
def server() -> Iterator[Dovecot]:
    if not DOVECOT_BINARY.is_file():
        reason = "dovecot-imapd is not installed"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with Dovecot.start() as started:
        yield started


def test_start_listens_on_two_loopback_ports(server: Dovecot) -> None:
    assert server.host == "127.0.0.1"
    assert server.port != server.tls_port
    assert server.ca_file.is_file()
    assert server.log_path.is_file()
    assert oct(server.workdir.stat().st_mode & 0o777) == oct(0o755)


def test_users_are_separate(server: Dovecot) -> None:
    alice = server.add_user()
    bob = server.add_user("bob-fixture", password="other")
    assert alice.name != bob.name
    server.append(alice, "INBOX", [_message("for alice")])

    with server.client(alice, "INBOX") as imap:
        assert len(imap.search("ALL")) == 1
    with server.client(bob) as imap:
        assert imap.select_folder("INBOX")[b"EXISTS"] == 0


def test_append_and_folder_messages_roundtrip(server: Dovecot) -> None:
    user = server.add_user()
    messages = [_message(f"note {i}", body=f"body {i}") for i in range(3)]
    server.append(user, "Train/Spam", messages, flags=[r"\Seen", "$Junk"])

    got = server.folder_messages(user, "Train/Spam")
    assert [raw for _, raw, _ in got] == messages
    uids = [uid for uid, _, _ in got]
    assert uids == sorted(uids) and len(set(uids)) == 3
    for _, _, flags in got:
        assert set(flags) == {b"\\Seen", b"$Junk"}
    assert server.folder_messages(user, "INBOX") == []


def test_hierarchy_separator_is_slash(server: Dovecot) -> None:
    user = server.add_user()
    with server.client(user) as imap:
        imap.create_folder("Train/Spam")
        listed = {name: delimiter for _, delimiter, name in imap.list_folders()}
    assert listed["Train/Spam"] == b"/"
    assert (user.maildir / ".Train.Spam").is_dir()


@pytest.mark.parametrize("folder", ["INBOX", "Train/Spam"])
def test_fill_maildir_is_seen_by_imap(server: Dovecot, folder: str) -> None:
    user = server.add_user()
    messages = [_message(f"bulk {i}", body=f"number {i}") for i in range(200)]
    server.append(user, folder, [_message("appended first")])

    new_dir = user.maildir / _maildir_folder_name(folder) / "new"
    before = len(list(new_dir.iterdir()))
    assert server.fill_maildir(user, folder, messages) == 200
    # Written straight into the Maildir (the point of the helper: no APPEND
    # round trips), not timed: the files are there before any IMAP command.
    assert len(list(new_dir.iterdir())) == before + 200

    with server.client(user) as imap:
        assert imap.select_folder(folder, readonly=True)[b"EXISTS"] == 201
    raws = {raw for _, raw, _ in server.folder_messages(user, folder)}
    assert raws == set(messages) | {_message("appended first")}


def test_fill_maildir_into_a_new_folder_without_imap_first(server: Dovecot) -> None:
    user = server.add_user()
    server.fill_maildir(user, "Train/Ham", [_message("ham 1"), _message("ham 2")])
    assert (user.maildir / ".Train.Ham" / "new").is_dir()
    with server.client(user) as imap:
        names = {name for _, _, name in imap.list_folders()}
        assert "Train/Ham" in names
        assert imap.select_folder("Train/Ham")[b"EXISTS"] == 2


def test_implicit_tls_port_verifies_with_ca_file(server: Dovecot) -> None:
    user = server.add_user()
    context = ssl.create_default_context(cafile=str(server.ca_file))
    with IMAPClient("localhost", port=server.tls_port, ssl=True, ssl_context=context) as imap:
        imap.login(user.name, user.password)
        assert imap.select_folder("INBOX")[b"EXISTS"] == 0
    with IMAPClient(server.host, port=server.tls_port, ssl=True, ssl_context=context) as imap:
        imap.login(user.name, user.password)


def test_starttls_on_plain_port(server: Dovecot) -> None:
    user = server.add_user()
    context = ssl.create_default_context(cafile=str(server.ca_file))
    with IMAPClient("localhost", port=server.port, ssl=False) as imap:
        assert b"STARTTLS" in imap.capabilities()
        imap.starttls(context)
        imap.login(user.name, user.password)


def test_wrong_password_raises_login_error(server: Dovecot) -> None:
    user = server.add_user(password="right")
    with IMAPClient(server.host, port=server.port, ssl=False) as imap:
        with pytest.raises(LoginError):
            imap.login(user.name, "wrong")
    with pytest.raises(LoginError):
        server.client(ImapUser("no-such-user", "secret", Path("/nonexistent")))


def test_stop_ends_every_process_and_removes_workdir() -> None:
    if not DOVECOT_BINARY.is_file():
        pytest.skip("dovecot-imapd is not installed")
    with Dovecot.start() as other:
        user = other.add_user()
        imap = other.client(user, "INBOX")  # an open session during stop()
        pid = int(other.pid_path.read_text())
        processes = [pid, *_descendants(pid)]
        workdir = other.workdir
    assert len(processes) > 1
    assert not any(_process_alive(process) for process in processes)
    assert not workdir.exists()
    imap.shutdown()


def test_extra_config_is_appended_with_the_workdir_filled_in() -> None:
    if not DOVECOT_BINARY.is_file():
        pytest.skip("dovecot-imapd is not installed")
    with Dovecot.start(extra_config="protocol imap {\n  mail_plugins = $mail_plugins\n}\n# in {workdir}\n") as other:
        config = other.config_path.read_text()
        assert config.endswith(f"protocol imap {{\n  mail_plugins = $mail_plugins\n}}\n# in {other.workdir}\n")
        user = other.add_user()
        other.append(user, "INBOX", [_message("extra")])
        assert len(other.folder_messages(user, "INBOX")) == 1


def test_session_fixture(dovecot_server: Dovecot) -> None:  # noqa: F811
    user = dovecot_server.add_user()
    dovecot_server.append(user, "INBOX", [_message("session")])
    assert len(dovecot_server.folder_messages(user, "INBOX")) == 1
