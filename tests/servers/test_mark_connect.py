"""``spamfilter mark --connect``: feedback through ``spamfilter serve``
(TELL), and in-process whenever the daemon does not learn the message."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from test_daemon import Daemon
from twin_models import TwinModels
from typer.testing import CliRunner

from spamfilter.cli import app
from spamfilter.mail import read_messages

SPAM, HAM = True, False


@pytest.fixture
def message(sample: Path) -> bytes:
    return next(iter(read_messages([str(sample / "inbox.mbox")]))).raw


@pytest.fixture
def twins(sample_db: str, tmp_path: Path) -> TwinModels:
    config = tmp_path / "config.toml"
    config.touch()
    return TwinModels.copy(sample_db, tmp_path / "model.db", tmp_path / "expected.db", config)


def test_the_daemon_learns_relabels_and_knows_a_message_already_learned(twins: TwinModels, tmp_path: Path, message: bytes) -> None:
    runner = CliRunner()
    daemon = Daemon(tmp_path / "serve.log", twins.url, twins.config, "--listen", "127.0.0.1:0", "--allow-tell")
    try:
        # Another --db: the command itself must not open a database.
        mark = ["--db", str(tmp_path / "elsewhere.db"), "mark", "--connect", str(daemon.address)]
        result = runner.invoke(app, [*mark, "spam", "-"], input=message)
        assert (result.exit_code, result.stdout, result.stderr) == (0, f"server {daemon.address}: learned 1 spam\n", "")
        twins.expect(SPAM, message)
        assert twins.as_expected()
        result = runner.invoke(app, [*mark, "spam", "-"], input=message)
        assert (result.exit_code, result.stdout) == (0, f"server {daemon.address}: learned 0 spam; 1 already trained\n")
        result = runner.invoke(app, [*mark, "ham", "-"], input=message)
        assert (result.exit_code, result.stdout) == (0, f"server {daemon.address}: learned 1 ham\n")
        twins.expect(HAM, message)
        assert twins.as_expected()
        assert daemon.logged("TELL user=(default) verdict=", 3) == 3
    finally:
        assert daemon.stop() == 0
    assert not (tmp_path / "elsewhere.db").exists()


def test_a_daemon_that_refuses_tell_leaves_it_to_the_command(twins: TwinModels, tmp_path: Path, message: bytes) -> None:
    daemon = Daemon(tmp_path / "serve.log", twins.url, twins.config, "--listen", "127.0.0.1:0")  # no --allow-tell
    try:
        result = CliRunner().invoke(app, ["--db", twins.url, "--config", str(twins.config), "mark", "--connect", str(daemon.address), "spam", "-"], input=message)
        assert result.exit_code == 0, result.output
        assert (
            result.stderr
            == f"spamfilter: server {daemon.address}: server answered 77 EX_NOPERM: TELL is not enabled (spamfilter serve --allow-tell); learning in-process\n"
        )
        assert result.stdout == "trained 1 spam, 0 ham\n"
        twins.expect(SPAM, message)
        assert twins.as_expected()
    finally:
        assert daemon.stop() == 0


def test_without_a_daemon_the_command_learns_and_a_repeat_is_success(twins: TwinModels, message: bytes) -> None:
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{free.getsockname()[1]}"
    free.close()  # nothing listens there now
    runner = CliRunner()
    options = ["--db", twins.url, "--config", str(twins.config)]
    result = runner.invoke(app, [*options, "mark", "--connect", address, "spam", "-"], input=message)
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"spamfilter: server {address}: ")
    assert result.stderr.endswith("; learning in-process\n")
    assert result.stdout == "trained 1 spam, 0 ham\n"
    # $SPAMFILTER_SERVER is --connect's default; a message learned already
    # with that label changes nothing, and that is success.
    result = runner.invoke(app, [*options, "mark", "spam", "-"], input=message, env={"SPAMFILTER_SERVER": address})
    assert (result.exit_code, result.stdout) == (0, "trained 0 spam, 0 ham; 1 already trained\n")
    assert "learning in-process" in result.stderr
    twins.expect(SPAM, message)
    assert twins.as_expected()


def test_with_a_timeout_a_daemon_that_hangs_leaves_time_to_learn_in_process(twins: TwinModels, message: bytes) -> None:
    # A daemon that accepts and never answers: each TELL waited 30 s, longer
    # than the learn-on-move pipe lives, so nothing was ever learned.
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen()
        address = f"127.0.0.1:{hung.getsockname()[1]}"
        options = ["--db", twins.url, "--config", str(twins.config)]
        result = CliRunner().invoke(app, [*options, "mark", "--connect", address, "--timeout", "4", "spam", "-"], input=message)
    assert result.exit_code == 0, result.output
    assert result.stderr == f"spamfilter: server {address}: timed out; learning in-process\n"
    assert result.stdout == "trained 1 spam, 0 ham\n"
    twins.expect(SPAM, message)
    assert twins.as_expected()


def test_with_a_timeout_a_locked_database_is_given_up_saying_so(twins: TwinModels, message: bytes) -> None:
    import sqlite3

    holder = sqlite3.connect(twins.url.removeprefix("sqlite:///"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process writing for longer than the pipe may wait
    try:
        result = CliRunner().invoke(app, ["--db", twins.url, "--config", str(twins.config), "mark", "--timeout", "2", "spam", "-"], input=message)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == 75, result.output
    assert "stayed locked by another process" in result.stderr
    assert twins.as_expected()  # nothing learned, nothing half-written


def test_the_daemon_learns_a_message_over_its_max_size(twins: TwinModels, tmp_path: Path, message: bytes) -> None:
    # Refused as too big, it was left to the command, which cannot write
    # where only the daemon may: large spam was never learned.
    big = message + b"\n" + b"word " * 40_000
    daemon = Daemon(tmp_path / "serve.log", twins.url, twins.config, "--listen", "127.0.0.1:0", "--allow-tell", "--max-size", "100000")
    try:
        result = CliRunner().invoke(app, ["--db", str(tmp_path / "elsewhere.db"), "mark", "--connect", str(daemon.address), "spam", "-"], input=big)
        assert (result.exit_code, result.stdout, result.stderr) == (0, f"server {daemon.address}: learned 1 spam\n", "")
        twins.expect(SPAM, big)
        twins.wait_as_expected()
    finally:
        assert daemon.stop() == 0
    assert not (tmp_path / "elsewhere.db").exists()


def test_a_users_feedback_is_not_learned_in_the_model_every_user_shares(twins: TwinModels, tmp_path: Path, message: bytes) -> None:
    # A learn-on-move pipe with PER_USER=yes and a daemon started without
    # --per-user: the daemon learned every user's moves in its one model and
    # the command said "learned 1 spam"; zed's own model never changed.
    mark = ["--db", twins.url, "--config", str(twins.config), "--user", "zed", "mark"]
    daemon = Daemon(tmp_path / "serve.log", twins.url, twins.config, "--listen", "127.0.0.1:0", "--allow-tell")
    try:
        result = CliRunner().invoke(app, [*mark, "--connect", str(daemon.address), "spam", "-"], input=message)
        assert result.exit_code == 0, result.output
        assert result.stderr == (
            f"spamfilter: server {daemon.address}: server answered 69 EX_UNAVAILABLE: "
            "one model for every user here, not the User's own (spamfilter serve --per-user); learning in-process\n"
        )
        assert result.stdout == "trained 1 spam, 0 ham\n"
        assert daemon.logged("TELL user=(default) verdict=error=69", 1) == 1
        # A name that is no user name is no more the User's own model.
        bad = b"TELL SPAMC/1.5\r\nUser: bad user\r\nUser-model: own\r\nMessage-class: spam\r\nSet: local\r\nContent-length: %d\r\n\r\n" % len(message)
        assert daemon.raw(bad + message).startswith(b"SPAMD/1.5 69 EX_UNAVAILABLE")
    finally:
        assert daemon.stop() == 0
    twins.expect(SPAM, message, user="zed")
    assert twins.as_expected(user="zed") and twins.as_expected()  # the shared model unchanged
    # The same daemon in per-user mode learns it in zed's model itself.
    daemon = Daemon(tmp_path / "serve2.log", twins.url, twins.config, "--listen", "127.0.0.1:0", "--allow-tell", "--per-user")
    try:
        result = CliRunner().invoke(app, [*mark, "--connect", str(daemon.address), "ham", "-"], input=message)
        assert (result.exit_code, result.stdout, result.stderr) == (0, f"server {daemon.address}: learned 1 ham\n", "")
    finally:
        assert daemon.stop() == 0
    twins.expect(HAM, message, user="zed")
    assert twins.as_expected(user="zed") and twins.as_expected()


def test_a_daemon_whose_one_model_is_the_users_learns_it(twins: TwinModels, tmp_path: Path, message: bytes) -> None:
    # Its one model is zed's ([store] user): `--user zed mark --connect`
    # asks for zed's own model, which is the one it serves.
    config = tmp_path / "zed.toml"
    config.write_text('[store]\nuser = "zed"\n')
    daemon = Daemon(tmp_path / "serve.log", twins.url, config, "--listen", "127.0.0.1:0", "--allow-tell")
    try:
        mark = ["--db", str(tmp_path / "elsewhere.db"), "--user", "zed", "mark", "--connect", str(daemon.address)]
        result = CliRunner().invoke(app, [*mark, "spam", "-"], input=message)
        assert (result.exit_code, result.stdout, result.stderr) == (0, f"server {daemon.address}: learned 1 spam\n", "")
        assert daemon.logged("TELL user=zed verdict=learned=spam", 1) == 1
    finally:
        assert daemon.stop() == 0
    twins.expect(SPAM, message, user="zed")
    assert twins.as_expected(user="zed") and twins.as_expected()
    assert not (tmp_path / "elsewhere.db").exists()
