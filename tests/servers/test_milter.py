"""``spamfilter milter`` against real MTA sides: Debian's ``miltertest`` (the
milter client of the Trusted Domain Project, driven by Lua scripts written
here) and a private Postfix on loopback (``tests/postfix.py``)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import smtplib
import socket
import sqlite3
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from email import message_from_bytes
from pathlib import Path

import pytest
from postfix import POSTFIX, Postfix, free_port

from spamfilter.answers import Verdict
from spamfilter.daemon import milter
from spamfilter.mail import MailItem, filter_fields
from tests.servers.test_daemon import _classify, _write_config, corpus, trained  # noqa: F401  (fixtures)

MILTERTEST = shutil.which("miltertest")
IN_CI = os.environ.get("CI") == "true"
needs_miltertest = pytest.mark.skipif(MILTERTEST is None and not IN_CI, reason="miltertest is not installed")
HANG = 60.0  # seconds: only to turn a hang into a failure
Corpus = tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]


class Milter:
    """A ``spamfilter milter`` process on a free loopback port, and its log."""

    def __init__(self, log: Path, db_url: str, config: Path, *args: str) -> None:
        self.log_path = log
        where = [] if "--socket" in args else ["--listen", "127.0.0.1:0"]
        cmd = [sys.executable, "-m", "spamfilter", "--db", db_url, "--config", str(config), "milter", *where, *args]
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + HANG
        while (m := re.search(r"listening on (?:127\.0\.0\.1:(\d+)|(/\S+)) with", self.log())) is None:
            if self.proc.poll() is not None or time.monotonic() >= deadline:
                self.stop(kill=True)
                raise AssertionError(f"the milter did not start: {self.log()}")
            time.sleep(0.05)
        self.port = int(m.group(1) or 0)
        self.path = m.group(2) or ""
        self.socket = f"unix:{self.path}" if self.path else f"inet:127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, *, kill: bool = False) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        return self.proc.wait(HANG)


@pytest.fixture
def start_milter(tmp_path: Path) -> Iterator[type[Milter]]:
    """Starts milters (``start_milter(db_url, config, *args)``); each is
    stopped after the test, and must have exited 0 without an internal error."""
    started: list[Milter] = []

    def start(db_url: str, config: Path, *args: str) -> Milter:
        m = Milter(tmp_path / f"milter{len(started)}.log", db_url, config, *args)
        started.append(m)
        return m

    yield start  # type: ignore[misc]
    codes = [m.stop() for m in started]
    assert codes == [0] * len(started), [m.log() for m in started]
    assert not any("internal error" in m.log() for m in started)


# -- miltertest ------------------------------------------------------------------


def lua_string(data: bytes) -> str:
    """``data`` as a Lua string literal (every byte but printable ASCII as ``\\ddd``)."""
    return '"' + "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:03d}" for b in data) + '"'


def split_message(raw: bytes) -> tuple[list[tuple[bytes, bytes]], bytes] | None:
    """The header fields (name, value after the colon, folded lines kept)
    and the body of an LF message, as an MTA hands them to a milter (an
    mbox ``From `` line is no field: left out); None when the header has
    another line that is no field (then no MTA would)."""
    if raw.startswith(b"From "):
        raw = raw[raw.find(b"\n") + 1 :]
    end = raw.find(b"\n\n")
    if end < 0 or b"\r" in raw:
        return None
    fields: list[tuple[bytes, bytes]] = []
    for line in raw[:end].split(b"\n"):
        if line[:1] in (b" ", b"\t") and fields:
            fields[-1] = (fields[-1][0], fields[-1][1] + b"\n" + line)
        elif re.fullmatch(rb"[!-9;-~]+:.*", line, re.S):
            name, _, value = line.partition(b":")
            fields.append((name, value))
        else:
            return None
    return fields, raw[end + 2 :]


_LUA_PROLOGUE = """
conn = mt.connect(SOCKET, 100, 0.1)
if conn == nil then error("cannot connect to the milter") end
if mt.negotiate(conn, VERSION, nil, nil) ~= nil then error("negotiation failed") end
local lead = mt.test_option(conn, SMFIP_HDR_LEADSPC)
local function ok(err) if err ~= nil then error(err) end end
local function text(v) if v == nil then return "-" end return v end
local function send(n, rcpt, fields, body)
  ok(mt.mailfrom(conn, "<sender@example.org>"))
  ok(mt.rcptto(conn, rcpt))
  for _, f in ipairs(fields) do
    local value = f[2]
    if not lead then value = (value:gsub("^[ \\t]+", "")) end
    ok(mt.header(conn, f[1], value))
  end
  ok(mt.eoh(conn))
  for i = 1, #body, 65535 do ok(mt.bodystring(conn, body:sub(i, i + 65534))) end
  ok(mt.eom(conn))
  local reply = mt.getreply(conn)
  local said = "continue"
  if reply == SMFIR_REPLYCODE then said = "replycode" elseif reply == SMFIR_TEMPFAIL then said = "tempfail"
  elseif reply == SMFIR_ACCEPT then said = "accept" elseif reply ~= SMFIR_CONTINUE then said = tostring(reply) end
  print(table.concat({"RESULT", n, said,
    text(mt.getheader(conn, "X-Spam-Status", 0)), text(mt.getheader(conn, "X-Spam-Score", 0)),
    text(mt.getheader(conn, "X-Spam-Flag", 0)), tostring(mt.eom_check(conn, MT_HDRDELETE, "X-Spam-Flag")),
    tostring(mt.eom_check(conn, MT_HDRINSERT, "X-Spam-Status"))}, "\\t"))
end
"""


@dataclass(frozen=True, slots=True)
class Seen:
    """What miltertest saw the milter answer for one message."""

    reply: str
    status: str
    score: str
    flag: str
    flag_deleted: bool
    inserted: bool  # at an index (version 6), not added at the end


def run_miltertest(tmp_path: Path, port: int | str, messages: list[tuple[str, list[tuple[bytes, bytes]], bytes]], version: int | None = None) -> list[Seen]:
    """Send ``messages`` (recipient, fields, body) to the milter on ``port``
    (or Unix socket path) on one connection, one after the other, offering
    protocol ``version`` (None: miltertest's own, 6); what came back for each."""
    assert MILTERTEST is not None
    where = f"unix:{port}" if isinstance(port, str) else f"inet:{port}@127.0.0.1"
    lines = [f'SOCKET = "{where}"', f"VERSION = {'nil' if version is None else version}", _LUA_PROLOGUE]
    for n, (rcpt, fields, body) in enumerate(messages):
        table = ", ".join(f"{{{lua_string(k)}, {lua_string(v)}}}" for k, v in fields)
        lines.append(f"send({n}, {lua_string(rcpt.encode())}, {{{table}}}, {lua_string(body)})")
    lines.append("mt.disconnect(conn)")
    script = tmp_path / "send.lua"
    script.write_text("\n".join(lines) + "\n")
    r = subprocess.run([MILTERTEST, "-s", str(script)], capture_output=True, timeout=HANG * 4)
    assert r.returncode == 0, r.stderr.decode(errors="replace") + r.stdout.decode(errors="replace")
    seen: dict[int, Seen] = {}
    for line in r.stdout.decode().splitlines():
        if line.startswith("RESULT\t"):
            _, n, reply, status, score, flag, deleted, inserted = line.split("\t")
            seen[int(n)] = Seen(reply, status.strip(), score.strip(), flag.strip(), deleted == "true", inserted == "true")
    assert sorted(seen) == list(range(len(messages))), r.stdout
    return [seen[n] for n in range(len(messages))]


FORGED = [(b"X-Spam-Flag", b" YES"), (b"X-Spam-Status", b" No, forged"), (b"x-spam-flag", b" YES")]


def expected_fields(v: Verdict) -> dict[str, str]:
    return dict(filter_fields(v.verdict, v.score, v.log_odds, "multinomial-binary"))


@needs_miltertest
@pytest.mark.corpus
def test_miltertest_verdicts_equal_classifys_and_forged_flags_go(tmp_path: Path, trained: tuple[str, Path], corpus: Corpus, start_milter: type[Milter]) -> None:
    split = [(item, split_message(item.raw)) for _, item in corpus[1]]
    usable = [(item, parts) for item, parts in split if parts is not None]
    assert len(usable) >= 180  # nearly every message is plain LF mail
    verdicts = _classify(trained, [item for item, _ in usable])
    # Every third message comes with forged verdict fields.
    messages = [("<user@example.test>", (FORGED if n % 3 == 0 else []) + fields, body) for n, (_, (fields, body)) in enumerate(usable)]
    m = start_milter(*trained)
    seen = run_miltertest(tmp_path, m.port, messages)
    for n, (v, s) in enumerate(zip(verdicts, seen)):
        want = expected_fields(v)
        assert (s.reply, s.status, s.score, s.flag) == ("continue", want["X-Spam-Status"], want["X-Spam-Score"], want.get("X-Spam-Flag", "-")), n
        assert s.flag_deleted == (n % 3 == 0), n
    assert 50 < sum(v.verdict == "spam" for v in verdicts) < 150  # both verdicts were exercised
    assert len(re.findall(r"^spamfilter milter: message id=\S+ user=\(default\) verdict=", m.log(), re.M)) == len(messages)


def _sent_with_limit(
    tmp_path: Path, trained: tuple[str, Path], corpus: Corpus, start_milter: type[Milter], count: int, limit: str
) -> tuple[list[Verdict], list[Seen], Milter]:
    """The first ``count`` later messages that split into header and body,
    sent through miltertest to a milter with ``--reject-above limit``:
    ``classify``'s verdicts, what miltertest saw, and the milter."""
    items = [item for _, item in corpus[1][:count] if split_message(item.raw) is not None]
    verdicts = _classify(trained, items)
    m = start_milter(*trained, "--reject-above", limit)
    seen = run_miltertest(tmp_path, m.port, [("<user@example.test>", *parts) for item in items if (parts := split_message(item.raw)) is not None])
    return verdicts, seen, m


@needs_miltertest
@pytest.mark.corpus
def test_miltertest_reject_above_gives_a_550_for_spam_only(tmp_path: Path, trained: tuple[str, Path], corpus: Corpus, start_milter: type[Milter]) -> None:
    verdicts, seen, m = _sent_with_limit(tmp_path, trained, corpus, start_milter, 20, "10")
    for v, s in zip(verdicts, seen):
        # miltertest shows a reply code's letter, not its text: the Postfix
        # test below reads the 550 5.7.1 the sender gets.
        if v.verdict == "spam" and v.log_odds > 10:
            assert (s.reply, s.status) == ("replycode", "-")
        else:
            assert (s.reply, s.status) == ("continue", expected_fields(v)["X-Spam-Status"])
    rejected = sum(v.verdict == "spam" and v.log_odds > 10 for v in verdicts)
    assert 0 < rejected < len(verdicts)
    assert m.log().count("action=reject") == rejected


@needs_miltertest
@pytest.mark.corpus
def test_a_limit_below_the_spam_cutoff_still_refuses_only_spam(tmp_path: Path, trained: tuple[str, Path], corpus: Corpus, start_milter: type[Milter]) -> None:
    verdicts, seen, _ = _sent_with_limit(tmp_path, trained, corpus, start_milter, 40, "-1000")
    assert {v.verdict for v in verdicts} >= {"spam", "ham"}
    for v, s in zip(verdicts, seen):
        assert s.reply == ("replycode" if v.verdict == "spam" else "continue"), v


def test_a_reject_limit_that_is_not_a_number_is_refused(tmp_path: Path, trained: tuple[str, Path]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spamfilter", "--db", trained[0], "--config", str(trained[1]), "milter", "--listen", "127.0.0.1:0", "--reject-above", "nan"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # An argument of the command line: a usage error (it was 78, a config error).
    assert done.returncode == 64, done.stderr
    assert "Invalid value for '--reject-above': must be a finite log-odds, not nan" in done.stderr and "Traceback" not in done.stderr


@needs_miltertest
def test_a_database_that_does_not_exist_is_not_made_by_scoring(tmp_path: Path, start_milter: type[Milter]) -> None:
    missing = tmp_path / "typo.db"
    m = start_milter(f"sqlite:///{missing}", _write_config(tmp_path / "c.toml"), "--on-error", "tempfail")
    [s] = run_miltertest(tmp_path, m.port, [("<user@example.test>", TINY, b"see you at noon\r\n")])
    assert s.reply == "tempfail"
    assert "no such database" in m.log() and not missing.exists()


def test_per_user_mode_without_a_shared_fallback_says_so_at_start(tmp_path: Path, trained: tuple[str, Path], start_milter: type[Milter]) -> None:
    m = start_milter(trained[0], _write_config(tmp_path / "c.toml", '[store]\nshared_model = "none"\n'), "--per-user")
    assert re.search(r"warning: per-user mode with store.shared_model = \"none\": mail for a user without a trained model of their own is passed back unscanned", m.log())


TINY = [(b"From", b" a@example.org"), (b"Subject", b" lunch")] + FORGED


@needs_miltertest
@pytest.mark.parametrize(("on_error", "reply", "deleted"), [("accept", "continue", True), ("tempfail", "tempfail", False)])
def test_an_unscorable_message_is_answered_as_on_error_says(tmp_path: Path, on_error: str, reply: str, deleted: bool, start_milter: type[Milter]) -> None:
    url = f"sqlite:///{tmp_path / 'typo.db'}"  # no such database: every message fails to score
    m = start_milter(url, _write_config(tmp_path / "c.toml"), "--on-error", on_error)
    [s] = run_miltertest(tmp_path, m.port, [("<user@example.test>", TINY, b"see you at noon\r\n")])
    # Accepted unscored, it still loses the verdict fields it came with: a
    # sender cannot forge a verdict by making scoring fail.
    assert (s.reply, s.status, s.flag_deleted) == (reply, "-", deleted)
    assert re.search(rf"warning: message id=- user=\(default\) verdict=error log_odds=- action={on_error} .*not scanned: ", m.log())


@needs_miltertest
def test_mail_for_a_model_not_trained_passes_unscanned_whatever_on_error_says(tmp_path: Path, trained: tuple[str, Path], start_milter: type[Milter]) -> None:
    # A model not trained is no failure that trying later would mend: with
    # --on-error tempfail such mail (to postmaster, to an alias) was put off
    # until it bounced, while the start-up line said it passes unscanned.
    from spamfilter.store import Store

    url = f"sqlite:///{tmp_path / 'empty.db'}"
    Store.open(url).close()
    m = start_milter(url, _write_config(tmp_path / "c.toml"), "--on-error", "tempfail")
    assert "every message is passed back unscanned" in m.log()
    [s] = run_miltertest(tmp_path, m.port, [("<user@example.test>", TINY, b"see you at noon\r\n")])
    assert (s.reply, s.status, s.flag_deleted) == ("continue", "-", True)
    assert re.search(r"warning: message id=- user=\(default\) verdict=unscanned log_odds=- action=accept .*not scanned: ", m.log())
    # Per-user, with no shared model to fall back on: mail for users who
    # have no model passes unscanned, and an address extension names the
    # user it extends (it named a user "alice+lists").
    shared = _write_config(tmp_path / "shared.toml", '[store]\nshared_model = "none"\n')
    per_user = start_milter(trained[0], shared, "--per-user", "--on-error", "tempfail")
    seen = run_miltertest(tmp_path, per_user.port, [(rcpt, TINY, b"see you at noon\r\n") for rcpt in ("<postmaster@example.test>", "<alice+lists@example.test>")])
    assert [(s.reply, s.status, s.flag_deleted) for s in seen] == [("continue", "-", True)] * 2
    log = per_user.log()
    assert "user=postmaster verdict=unscanned" in log and "user=alice verdict=unscanned" in log and "action=tempfail" not in log


def _locked_out(path: Path) -> sqlite3.Connection:
    """A connection that keeps every other one out of the SQLite file, readers
    too (exclusive locking mode), until it is closed."""
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("PRAGMA locking_mode = EXCLUSIVE")
    lock.execute("BEGIN EXCLUSIVE")
    return lock


@needs_miltertest
def test_a_database_locked_against_readers_gets_the_on_error_answer_soon(tmp_path: Path, trained: tuple[str, Path], start_milter: type[Milter]) -> None:
    # Before, a message waited for the lock as long as it lasted (up to the
    # store's write_deadline, 600 s), past the MTA's own wait, and every
    # message after it queued behind it.
    path = tmp_path / "model.db"
    shutil.copy(trained[0].removeprefix("sqlite:///"), path)
    m = start_milter(f"sqlite:///{path}", _write_config(tmp_path / "c.toml"), "--on-error", "tempfail", "--timeout", "2", "--processes", "1")
    body = b"see you at noon\r\n"
    # A reload closes the idle filter's connection, which would keep the
    # exclusive lock from being taken.
    m.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + HANG
    while "configuration reloaded" not in m.log():
        assert time.monotonic() < deadline, m.log()
        time.sleep(0.05)
    lock = _locked_out(path)
    try:
        seen = run_miltertest(tmp_path, m.port, [("<a@example.test>", TINY, body)] * 2)
    finally:
        lock.close()
    assert [s.reply for s in seen] == ["tempfail", "tempfail"]
    assert m.log().count("action=tempfail") == 2 and "locked" in m.log()
    [after] = run_miltertest(tmp_path, m.port, [("<a@example.test>", TINY, body)])
    assert after.reply == "continue" and after.status != "-"


@needs_miltertest
def test_messages_queued_for_a_scoring_thread_behind_a_locked_database_are_answered_within_the_same_wait(
    tmp_path: Path, trained: tuple[str, Path], start_milter: type[Milter]
) -> None:
    # Before, the wait for a scoring thread had no bound: with one thread and
    # a locked database the n-th message at once was answered after n waits
    # (past the MTA's own timeout, which then takes its default action).
    path = tmp_path / "model.db"
    shutil.copy(trained[0].removeprefix("sqlite:///"), path)
    m = start_milter(f"sqlite:///{path}", _write_config(tmp_path / "c.toml"), "--on-error", "tempfail", "--timeout", "2", "--processes", "1", "--workers", "1")
    m.proc.send_signal(signal.SIGHUP)  # close the idle filter's connection (see above)
    deadline = time.monotonic() + HANG
    while "configuration reloaded" not in m.log():
        assert time.monotonic() < deadline, m.log()
        time.sleep(0.05)
    lock = _locked_out(path)
    seen: dict[int, list[Seen]] = {}
    try:

        def send(n: int) -> None:
            (tmp_path / str(n)).mkdir()
            seen[n] = run_miltertest(tmp_path / str(n), m.port, [("<a@example.test>", TINY, b"see you at noon\r\n")])

        senders = [threading.Thread(target=send, args=(n,)) for n in range(4)]
        for t in senders:
            t.start()
        for t in senders:
            t.join(HANG * 4)
    finally:
        lock.close()
    assert sorted(seen) == [0, 1, 2, 3] and all(s.reply == "tempfail" for [s] in seen.values())
    # The one thread waits 2 s for the database; those behind it give up on
    # the thread within the same 2 s.
    assert m.log().count("action=tempfail") == 4
    assert m.log().count("not scanned: all 1 scoring threads busy for 2 s") >= 2, m.log()


@needs_miltertest
def test_a_message_over_max_size_passes_unscanned_without_forged_fields(tmp_path: Path, trained: tuple[str, Path], start_milter: type[Milter]) -> None:
    m = start_milter(*trained, "--max-size", "2000")
    big = b"word " * 1000 + b"\r\n"
    small = b"see you at noon\r\n"
    seen = run_miltertest(tmp_path, m.port, [("<a@example.test>", TINY, big), ("<a@example.test>", TINY, small)])
    assert [(s.reply, s.status == "-", s.flag_deleted) for s in seen] == [("continue", True, True), ("continue", False, True)]
    assert re.search(r"warning: .*verdict=unscanned log_odds=- action=accept bytes=5\d{3} .*; not scanned: over --max-size 2000 bytes\n", m.log())


@needs_miltertest
def test_per_user_mode_scores_with_the_recipients_model(tmp_path: Path, trained: tuple[str, Path], start_milter: type[Milter]) -> None:
    m = start_milter(*trained, "--per-user")
    body = b"see you at noon\r\n"
    run_miltertest(tmp_path, m.port, [("<Carol@example.test>", TINY, body), ("<dave@example.test>", TINY, body)])
    # Neither has a model of their own: shared_model = "fallback" scores
    # them with the default one.
    assert re.findall(r"message id=- user=(\S+) verdict=(?:spam|ham|unsure) ", m.log()) == ["carol", "dave"]


def test_a_session_after_quit_nc_goes_on_under_the_same_negotiation() -> None:
    # QUIT_NC ("quit, a new connection follows") then CONNECT on the same
    # connection, as libmilter takes it: it was "command C before the
    # negotiation", and the connection was closed.
    session = milter.Session(1 << 20, lambda *_: [milter.packet(milter.CONTINUE)])
    [offer] = session.feed(milter.OPTNEG, struct.pack(">III", 6, 0x1FF, 0x1FFFFF))
    assert offer[4:5] == milter.OPTNEG
    session.feed(milter.MACRO, b"Cj\0mx.example\0")
    assert session.feed(milter.QUIT_NC, b"") == []
    assert not session.closed and session.agreed is not None and session.macros == {}
    [reply] = session.feed(milter.CONNECT, b"client.example\0" + b"4" + struct.pack(">H", 25) + b"192.0.2.1\0")
    assert reply[4:5] == milter.CONTINUE


def test_a_messages_queue_id_ends_with_it_and_the_connections_macros_stay() -> None:
    seen: list[str] = []

    def end(session: milter.Session, message: milter.Message) -> list[bytes]:
        seen.append(session.macros.get("i", "-") + "@" + session.macros.get("j", "-"))
        return [milter.packet(milter.CONTINUE)]

    session = milter.Session(1 << 20, end)
    session.feed(milter.OPTNEG, struct.pack(">III", 6, 0x1FF, 0x1FFFFF))
    session.feed(milter.MACRO, b"Cj\0mx.example\0")
    session.feed(milter.MACRO, b"Mi\0ABC123\0")
    session.feed(milter.MAIL, b"<a@example.test>\0")
    session.feed(milter.EOB, b"hello\r\n")
    # The second message of the connection: this MTA sends its queue id
    # only at the end of the message, and the first message's is gone by then.
    session.feed(milter.MAIL, b"<b@example.test>\0")
    assert session.macros == {"j": "mx.example"}
    session.feed(milter.MACRO, b"Ei\0DEF456\0")
    session.feed(milter.EOB, b"hello\r\n")
    session.feed(milter.MAIL, b"<c@example.test>\0")
    session.feed(milter.ABORT, b"")
    session.feed(milter.EOB, b"hello\r\n")
    assert seen == ["ABC123@mx.example", "DEF456@mx.example", "-@mx.example"]


def test_the_user_is_the_local_part_all_recipients_share() -> None:
    assert milter.recipient_user(["<Carol@example.test>"]) == "carol"
    assert milter.recipient_user(["<carol@example.test>", "<CAROL@other.test>"]) == "carol"
    assert milter.recipient_user(["<carol@example.test>", "<dave@example.test>"]) is None
    assert milter.recipient_user(["<>"]) is None
    # An address extension is the user's (Postfix's recipient_delimiter = +).
    assert milter.recipient_user(["<Carol+Lists@example.test>", "<carol@example.test>"]) == "carol"
    assert milter.recipient_user(["<+tag@example.test>"]) == "+tag"


def test_recipients_whose_local_parts_are_not_utf8_name_no_user() -> None:
    # Two different undecodable local parts used to become the same user
    # ("\ufffd") and share one model.
    users = []
    for local in (b"\xff", b"\xfe"):
        session = milter.Session(1 << 20, lambda s, m: users.append(milter.recipient_user(m.recipients)) or [milter.packet(milter.CONTINUE)])
        session.feed(milter.OPTNEG, struct.pack(">III", 6, 0x1FF, 0x1FFFFF))
        session.feed(milter.RCPT, b"<" + local + b"@example.test>\0")
        session.feed(milter.EOB, b"hello\r\n")
    assert users == [None, None]
    assert milter.recipient_user(["<J\u00fcrgen@example.test>"]) == "j\u00fcrgen"


@needs_miltertest
def test_a_unix_socket_is_the_daemons_alone_and_removed_at_exit(tmp_path: Path, trained: tuple[str, Path], start_milter: type[Milter]) -> None:
    path = tmp_path / "milter.sock"
    m = start_milter(*trained, "--socket", str(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    [s] = run_miltertest(tmp_path, str(path), [("<a@example.test>", TINY, b"see you at noon\r\n")])
    assert s.reply == "continue" and s.status.startswith(("No, ", "Yes, "))
    assert m.stop() == 0
    assert not path.exists()


@needs_miltertest
def test_an_mta_of_protocol_version_2_gets_the_fields_added(tmp_path: Path, trained: tuple[str, Path], start_milter: type[Milter]) -> None:
    m = start_milter(*trained)
    body = b"see you at noon\r\n"
    [v2, v6] = [run_miltertest(tmp_path, m.port, [("<a@example.test>", TINY, body)], version)[0] for version in (2, None)]
    # Version 2 has no insert: the fields are added at the end.
    assert (v2.inserted, v6.inserted) == (False, True)
    assert (v2.status, v2.score, v2.flag, v2.flag_deleted) == (v6.status, v6.score, v6.flag, True)
    assert v2.status.startswith(("No, ", "Yes, "))


def test_sighup_rereads_the_config_and_sigterm_stops(tmp_path: Path, trained: tuple[str, Path], start_milter: type[Milter]) -> None:
    m = start_milter(*trained)
    m.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + HANG
    while "configuration reloaded" not in m.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "configuration reloaded" in m.log()
    assert m.stop() == 0
    assert m.log().rstrip().endswith("spamfilter milter: stopped")


def test_sigterm_lets_the_message_in_flight_be_answered(tmp_path: Path, trained: tuple[str, Path], start_milter: type[Milter]) -> None:
    m = start_milter(*trained)
    with socket.create_connection(("127.0.0.1", m.port), timeout=HANG) as idle, socket.create_connection(("127.0.0.1", m.port), timeout=HANG) as busy:
        offer = milter.packet(milter.OPTNEG, struct.pack(">III", 6, 0x1FF, 0x1FFFFF))
        for sock in (idle, busy):
            sock.sendall(offer)
        with idle.makefile("rb") as idle_in, busy.makefile("rb") as busy_in:
            assert [milter.read_packet(f)[0] for f in (idle_in, busy_in)] == [milter.OPTNEG, milter.OPTNEG]  # type: ignore[index]
            busy.sendall(milter.packet(milter.MAIL, b"<a@example.org>\0") + milter.packet(milter.HEADER, b"Subject\0 lunch\0"))
            assert [milter.read_packet(busy_in) for _ in range(2)] == [(milter.CONTINUE, b"")] * 2
            m.proc.send_signal(signal.SIGTERM)
            assert milter.read_packet(idle_in) is None  # closed between messages
            # The listening socket is closed already: a new MTA connection
            # is refused, not left in a backlog nobody accepts from.
            # (Each of the two processes closes its copy as it stops; the
            # one with the message in flight before it waits for it.)
            deadline = time.monotonic() + HANG
            while True:
                try:
                    socket.create_connection(("127.0.0.1", m.port), timeout=HANG).close()
                except (ConnectionRefusedError, ConnectionResetError):
                    break  # refused, or reset: it reached the backlog just before the close
                assert time.monotonic() < deadline, "still accepting while a message is in flight"
                time.sleep(0.05)
            busy.sendall(milter.packet(milter.BODY, b"see you at noon\r\n") + milter.packet(milter.EOB))
            replies = []
            while (got := milter.read_packet(busy_in)) is not None:
                replies.append(got[0])
    assert replies[0] == milter.CONTINUE and replies[-1] == milter.CONTINUE and milter.INSHEADER in replies
    assert m.stop() == 0


def test_an_mta_hanging_up_in_the_middle_of_a_message_is_logged(tmp_path: Path, trained: tuple[str, Path], start_milter: type[Milter]) -> None:
    m = start_milter(*trained, "--processes", "1")
    with socket.create_connection(("127.0.0.1", m.port), timeout=HANG) as sock, sock.makefile("rb") as got:
        sock.sendall(milter.packet(milter.OPTNEG, struct.pack(">III", 6, 0x1FF, 0x1FFFFF)))
        assert milter.read_packet(got)[0] == milter.OPTNEG  # type: ignore[index]
        sock.sendall(
            milter.packet(milter.MACRO, b"Mi\0QUEUE42\0") + milter.packet(milter.MAIL, b"<a@example.org>\0") + milter.packet(milter.HEADER, b"Subject\0 lunch\0")
        )
        assert [milter.read_packet(got) for _ in range(2)] == [(milter.CONTINUE, b"")] * 2
    deadline = time.monotonic() + HANG
    while "connection closed by the MTA in the middle of message id=QUEUE42" not in m.log():
        assert time.monotonic() < deadline, m.log()
        time.sleep(0.05)


def test_an_answer_the_mta_hung_up_before_is_not_logged_as_given(tmp_path: Path, trained: tuple[str, Path], start_milter: type[Milter]) -> None:
    # An MTA that gives up waiting (its milter timeout) closes the
    # connection and applies its own default action: the log must not say
    # the message was accepted with fields, as it does for a delivered answer.
    m = start_milter(*trained, "--processes", "1")
    for queue_id, hang_up in (("QUEUE43", True), ("QUEUE44", False)):
        with socket.create_connection(("127.0.0.1", m.port), timeout=HANG) as sock, sock.makefile("rb") as got:
            sock.sendall(milter.packet(milter.OPTNEG, struct.pack(">III", 6, 0x1FF, 0x1FFFFF)))
            assert milter.read_packet(got)[0] == milter.OPTNEG  # type: ignore[index]
            sock.sendall(
                milter.packet(milter.MACRO, b"Mi\0" + queue_id.encode() + b"\0")
                + milter.packet(milter.MAIL, b"<a@example.org>\0")
                + milter.packet(milter.HEADER, b"Subject\0 lunch\0")
                + milter.packet(milter.BODY, b"see you at noon\r\n")
            )
            assert [milter.read_packet(got) for _ in range(3)] == [(milter.CONTINUE, b"")] * 3
            if hang_up:
                # The end of the message and the hang-up in one segment (the
                # FIN rides on the corked data), so the MTA is gone before
                # any answer. Closed after the send, on a busy machine the
                # milter could answer first, and the answer was given.
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
                sock.sendall(milter.packet(milter.EOB))
                sock.shutdown(socket.SHUT_WR)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
            else:
                sock.sendall(milter.packet(milter.EOB))
                while (packet := milter.read_packet(got)) is not None and packet[0] != milter.CONTINUE:
                    pass
                assert packet is not None
        deadline = time.monotonic() + HANG
        while f"id={queue_id} " not in m.log():
            assert time.monotonic() < deadline, m.log()
            time.sleep(0.05)
    lines = {q: next(line for line in m.log().splitlines() if f"message id={q} " in line) for q in ("QUEUE43", "QUEUE44")}
    assert "action=none" in lines["QUEUE43"] and lines["QUEUE43"].endswith("; the MTA closed the connection before the answer")
    assert "action=accept" in lines["QUEUE44"] and "closed" not in lines["QUEUE44"]


def test_the_rejection_tells_the_score_from_the_limit() -> None:
    from spamfilter.daemon.milter_server import _apart

    assert _apart(28.63, 28.6) == ("+28.63", "+28.60")
    assert _apart(16.07, 10.0) == ("+16.1", "+10.0")
    assert _apart(10.0000001, 10.0) == ("+10.000000", "+10.000000")  # as far as it goes


def test_the_fields_of_each_name_are_deleted_last_first_and_ours_go_on_top() -> None:
    message = milter.Message(max_size=1000)
    for name, value in [(b"X-Spam-Flag", b" YES"), (b"Subject", b" a"), (b"x-spam-FLAG", b" YES"), (b"X-Spam-Score", b" 0")]:
        message.add_header(name, value)
    agreed = milter.Negotiated(6, milter.ACT_ADDHDRS | milter.ACT_CHGHDRS, milter.STEP_HDR_LEADSPC)
    packets = milter.edits(message, [("X-Spam-Status", "No"), ("X-Spam-Score", "0.1")], agreed)

    def unpack(p: bytes) -> tuple[bytes, int, bytes]:
        return p[4:5], struct.unpack(">I", p[5:9])[0], p[9:]

    assert [unpack(p) for p in packets] == [
        (b"m", 2, b"X-Spam-Flag\0\0"),
        (b"m", 1, b"X-Spam-Flag\0\0"),
        (b"m", 1, b"X-Spam-Score\0\0"),
        (b"i", 0, b"X-Spam-Score\0 0.1\0"),
        (b"i", 0, b"X-Spam-Status\0 No\0"),
    ]


def test_an_oversized_message_keeps_only_its_verdict_fields_names() -> None:
    # Before, every field was kept whatever the size: 6 MB of short header
    # lines from any sender held 80 MB in the milter, for a message it
    # never scans.
    message = milter.Message(max_size=1000)
    message.add_header(b"X-Spam-Flag", b" YES")
    message.add_header(b"Subject", b" a")
    for n in range(2000):
        message.add_header(b"X-Filler", b" %d" % n)
        if n == 1000:
            message.add_header(b"x-spam-FLAG", b" YES")
    message.add_header(b"X-Spam-Score", b" 0")
    message.add_body(b"body\r\n")
    assert message.oversize and message.size > 20_000 and not message.body
    assert message.headers == [(b"X-Spam-Flag", b""), (b"x-spam-FLAG", b""), (b"X-Spam-Score", b"")]
    agreed = milter.Negotiated(6, milter.ACT_ADDHDRS | milter.ACT_CHGHDRS, milter.STEP_HDR_LEADSPC)
    deletions = [p[4:5] + p[9:] for p in milter.edits(message, [], agreed)]
    assert deletions == [b"mX-Spam-Flag\0\0", b"mX-Spam-Flag\0\0", b"mX-Spam-Score\0\0"]


# -- Postfix ---------------------------------------------------------------------

needs_postfix = pytest.mark.skipif((POSTFIX is None or os.geteuid() != 0) and not IN_CI, reason="a private Postfix needs Debian's postfix and root")


def _as_sent(item: MailItem) -> MailItem | None:
    """The message as a client sends it and Postfix hands it to the milter:
    without an mbox ``From `` line (SMTP carries none) and without
    ``Return-Path`` (Postfix removes it, and writes its own on delivery);
    None unless it has LF lines of at most 990 bytes (Postfix would break a
    longer one)."""
    raw = item.raw[item.raw.find(b"\n") + 1 :] if item.raw.startswith(b"From ") else item.raw
    head, blank, body = raw.partition(b"\n\n")
    raw = b"\n".join(line for line in head.split(b"\n") if not line.lower().startswith(b"return-path:")) + blank + body
    if b"\r" in raw or max(len(line) for line in raw.split(b"\n")) > 990 or split_message(raw) is None:
        return None
    return MailItem(item.source, raw)


@needs_postfix
@pytest.mark.corpus
def test_postfix_delivers_with_the_fields_and_rejects_spam_above_the_limit(tmp_path: Path, trained: tuple[str, Path], corpus: Corpus, start_milter: type[Milter]) -> None:
    items = [sent for _, item in corpus[1] if (sent := _as_sent(item)) is not None]
    verdicts = _classify(trained, items)
    spam = next(n for n, v in enumerate(verdicts) if v.verdict == "spam" and v.log_odds > 10)
    ham = next(n for n, v in enumerate(verdicts) if v.verdict == "ham")
    marking = start_milter(*trained)
    rejecting = start_milter(*trained, "--reject-above", "10")
    mark_port, reject_port = free_port(), free_port()
    postfix = Postfix({mark_port: marking.socket, reject_port: rejecting.socket}, ["alice", "bob"], HANG)
    try:
        forged = b"X-Spam-Flag: YES\nX-Spam-Status: No, forged\nX-Spam-Flag: YES\n"
        for n in (ham, spam):
            with smtplib.SMTP("127.0.0.1", mark_port, timeout=HANG) as smtp:
                smtp.sendmail("sender@example.org", ["alice@example.test"], forged + items[n].raw)
        delivered = postfix.delivered("alice", 2)
        with smtplib.SMTP("127.0.0.1", reject_port, timeout=HANG) as smtp:
            with pytest.raises(smtplib.SMTPDataError) as refused:
                smtp.sendmail("sender@example.org", ["bob@example.test"], items[spam].raw)
            smtp.sendmail("sender@example.org", ["bob@example.test"], items[ham].raw)
        [passed] = postfix.delivered("bob", 1)
    finally:
        postfix.stop()
    assert refused.value.smtp_code == 550 and refused.value.smtp_error.startswith(b"5.7.1 Message refused as spam")
    for n in (ham, spam):
        parts = split_message(items[n].raw)
        assert parts is not None
        # The message whose body is this one's, byte for byte (smtplib
        # ends a message without CRLF with one).
        [raw] = [d for d in delivered if d.split(b"\n\n", 1)[1].rstrip(b"\n") == parts[1].rstrip(b"\n")]
        msg = message_from_bytes(raw)
        want = expected_fields(verdicts[n])
        assert msg.get_all("X-Spam-Status") == [want["X-Spam-Status"]]
        assert msg.get_all("X-Spam-Score") == [want["X-Spam-Score"]]
        assert msg.get_all("X-Spam-Flag") == (["YES"] if n == spam else None)
    assert message_from_bytes(passed).get_all("X-Spam-Status") == [expected_fields(verdicts[ham])["X-Spam-Status"]]
    assert "action=reject" in rejecting.log() and "action=reject" not in marking.log()


#: The header_checks table docs/integration.md shows: a sender's verdict
#: fields go even when the milter is not there to remove them.
FORGED_FIELDS_OUT = "/^X-Spam-(Flag|Status|Score):/ IGNORE\n"


@needs_postfix
@pytest.mark.corpus
def test_with_the_documented_header_checks_no_forged_verdict_passes_a_milter_that_is_down(
    tmp_path: Path, trained: tuple[str, Path], corpus: Corpus, start_milter: type[Milter]
) -> None:
    items = [sent for _, item in corpus[1] if (sent := _as_sent(item)) is not None]
    [verdict] = _classify(trained, items[:1])
    up = start_milter(*trained)
    up_port, down_port = free_port(), free_port()
    # milter_default_action = accept: a milter that does not answer lets mail through.
    postfix = Postfix({up_port: up.socket, down_port: f"inet:127.0.0.1:{free_port()}"}, ["alice", "bob"], HANG, header_checks=FORGED_FIELDS_OUT)
    try:
        forged = b"X-Spam-Flag: YES\nX-Spam-Status: No, forged\nx-spam-score: -99\n"
        with smtplib.SMTP("127.0.0.1", up_port, timeout=HANG) as smtp:
            smtp.sendmail("sender@example.org", ["alice@example.test"], forged + items[0].raw)
        with smtplib.SMTP("127.0.0.1", down_port, timeout=HANG) as smtp:
            smtp.sendmail("sender@example.org", ["bob@example.test"], forged + items[0].raw)
        [scanned] = postfix.delivered("alice", 1)
        [unscanned] = postfix.delivered("bob", 1)
    finally:
        postfix.stop()
    want = expected_fields(verdict)
    msg = message_from_bytes(scanned)  # the milter's own fields are kept
    assert msg.get_all("X-Spam-Status") == [want["X-Spam-Status"]] and msg.get_all("X-Spam-Score") == [want["X-Spam-Score"]]
    assert not any(name.lower().startswith("x-spam-") for name in message_from_bytes(unscanned).keys())


def test_two_processes_serve_one_socket_and_end_with_their_parent(tmp_path: Path, trained: tuple[str, Path]) -> None:
    from tests.servers.test_daemon_load import _alive, _children

    m = Milter(tmp_path / "forked.log", *trained, "--processes", "2")
    workers = _children(m.proc.pid)
    assert len(workers) == 2
    assert m.log().splitlines()[0].endswith("; 2 processes")
    # Each connection is answered, by whichever worker took it.
    offer = milter.packet(milter.OPTNEG, struct.pack(">III", 6, 0x1FF, 0x1FFFFF))
    for _ in range(6):
        with socket.create_connection(("127.0.0.1", m.port), timeout=HANG) as sock, sock.makefile("rb") as answers:
            sock.sendall(offer)
            assert milter.read_packet(answers)[0] == milter.OPTNEG  # type: ignore[index]
    m.proc.kill()
    m.proc.wait(HANG)
    deadline = time.monotonic() + HANG
    while any(_alive(p) for p in workers):
        assert time.monotonic() < deadline, "the workers outlived their parent"
        time.sleep(0.05)


def test_a_process_with_every_connection_slot_taken_leaves_new_connections_to_the_other(tmp_path: Path, trained: tuple[str, Path]) -> None:
    # Before, the full process accepted the connection all the same and
    # held it until one of its own slots was free (up to --timeout), while
    # the other process sat idle: the MTA's wait for the negotiation ran out.
    m = Milter(tmp_path / "forked.log", *trained, "--processes", "2", "--max-connections", "1")
    offer = milter.packet(milter.OPTNEG, struct.pack(">III", 6, 0x1FF, 0x1FFFFF))
    for _ in range(5):
        held: list[socket.socket] = []
        try:
            for _ in range(2):  # the second once the first is held
                sock = socket.create_connection(("127.0.0.1", m.port), timeout=30)  # far above an idle process's answer, far below --timeout
                held.append(sock)
                sock.sendall(offer)
                with sock.makefile("rb") as answers:
                    assert milter.read_packet(answers)[0] == milter.OPTNEG  # type: ignore[index]
        finally:
            for sock in held:
                sock.close()
    assert m.stop() == 0
