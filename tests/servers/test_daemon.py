"""``spamfilter serve`` against Debian's real ``spamc``, and against raw sockets
for what spamc never sends (broken requests, trickling clients, huge bodies)."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spamfilter import spamd
from spamfilter.answers import Verdict
from spamfilter.config import Config, load_config
from spamfilter.daemon.pool import FilterPool
from spamfilter.errors import ProtocolError
from spamfilter.filter import Filter
from spamfilter.mail import MailItem, filter_fields, with_filter_headers
from spamfilter.mail.sources import delivered

SPAMC = shutil.which("spamc")
pytestmark = pytest.mark.skipif(SPAMC is None and os.environ.get("CI") != "true", reason="spamc is not installed")

HANG = 60.0  # seconds: only to turn a hang into a failure
# What the start-up line says of the processes serving by default (one per core).
_PROCESSES = f"; {os.cpu_count()} processes" if (os.cpu_count() or 1) > 1 else ""


def _corpus(corpora_dir: Path) -> tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]:
    """300 training messages (150 spam, 150 ham) and 200 others to test on."""
    root = corpora_dir / "spamassassin"
    spam: list[tuple[bool, MailItem]] = []
    ham: list[tuple[bool, MailItem]] = []
    for line in (root / "index").read_text().splitlines():
        label, rel = line.split()
        bucket = spam if label == "spam" else ham
        if len(bucket) < 250:
            path = root / rel
            bucket.append((label == "spam", MailItem(str(path), path.read_bytes())))
    train = spam[:150] + ham[:150]
    test = [m for pair in zip(spam[150:250], ham[150:250]) for m in pair]
    return train, test


@pytest.fixture(scope="module")
def corpus(corpora_dir: Path) -> tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]:
    return _corpus(corpora_dir)


def _write_config(path: Path, text: str = "") -> Path:
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, corpus: tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]) -> tuple[str, Path]:
    """A database trained on the 300 training messages, and a config under
    which a user without a model of their own gets the shared one."""
    d = tmp_path_factory.mktemp("daemon")
    url = f"sqlite:///{d / 'model.db'}"
    config = _write_config(d / "config.toml", '[store]\nshared_model = "fallback"\n')
    with Filter.open(load_config(config), url) as f:
        f.train(corpus[0])
    return url, config


class Daemon:
    """A ``spamfilter serve`` process, its log, and spamc pointed at it."""

    def __init__(self, log: Path, db_url: str, config: Path, *args: str) -> None:
        self.log_path = log
        cmd = [sys.executable, "-m", "spamfilter", "--db", db_url, "--config", str(config), "serve", *args]
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + HANG
        while (m := re.search(r"listening on (\S+)", self.log())) is None:
            if self.proc.poll() is not None or time.monotonic() >= deadline:
                self.proc.kill()  # never left running behind a failed test
                self.proc.wait()
                raise AssertionError(f"the daemon did not start: {self.log()}")
            time.sleep(0.05)
        self.address = spamd.parse_address(m.group(1))
        if self.address.path:
            self.where = ["-U", self.address.path]
        else:
            self.where = ["-d", self.address.host, "-p", str(self.address.port)]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def logged(self, text: str, at_least: int) -> int:
        """How often ``text`` is in the log, once it is there ``at_least``
        times (the daemon logs a request just after answering it, so the
        last line may come a moment after spamc returned) or HANG passed."""
        deadline = time.monotonic() + HANG
        while (n := self.log().count(text)) < at_least and time.monotonic() < deadline:
            time.sleep(0.05)
        return n

    def spamc(self, *args: str, message: bytes) -> subprocess.CompletedProcess[bytes]:
        assert SPAMC is not None
        return subprocess.run([SPAMC, *self.where, "-t", "60", *args], input=message, capture_output=True, timeout=HANG)

    def raw(self, data: bytes, *, shut: bool = True) -> bytes:
        """Send ``data`` on a fresh connection; everything the server answers."""
        with spamd.connect(self.address, HANG) as sock:
            sock.sendall(data)
            if shut:
                sock.shutdown(socket.SHUT_WR)
            return _read_all(sock)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(HANG)


def _read_all(sock: socket.socket) -> bytes:
    out = bytearray()
    try:
        while chunk := sock.recv(1 << 16):
            out += chunk
    except ConnectionResetError:
        pass
    return bytes(out)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, trained: tuple[str, Path]) -> Iterator[Daemon]:
    """The trained model served on a free loopback port in per-user mode (a
    user without a model of their own gets the shared one), learning
    allowed, requests over 1 MB not scanned, 3 s to send a request."""
    d = Daemon(tmp_path_factory.mktemp("log") / "serve.log", *trained, "--listen", "127.0.0.1:0", "--per-user", "--allow-tell", "--max-size", "1000000", "--timeout", "3")
    yield d
    assert d.stop() == 0
    assert "internal error" not in d.log()


def _classify(trained: tuple[str, Path], items: list[MailItem], user: str | None = None) -> list[Verdict]:
    with Filter.open(load_config(trained[1]), trained[0], user) as f:
        verdicts = list(f.classify(items))
    assert all(isinstance(v, Verdict) for v in verdicts)
    return verdicts  # type: ignore[return-value]


def _threshold(trained: tuple[str, Path]) -> float:
    with Filter.open(load_config(trained[1]), trained[0]) as f:
        return f.thresholds.spam_min


def _spamd_score(v: Verdict) -> float:
    """The score of the ``Spam`` line: the logit of the calibrated P(spam),
    as the daemon sends it, to 4 places."""
    p = min(max(v.score, 1e-300), 1.0 - 1e-16)
    return float(f"{math.log(p / (1.0 - p)):.4f}".replace("-0.0000", "0.0000"))


def _check_line(v: Verdict, threshold: float) -> str:
    """What ``spamc -c`` prints for verdict ``v``: the score and the threshold, to 1 place."""
    return f"{_spamd_score(v):.1f}/{threshold:.1f}\n"


def test_what_the_command_line_calls_temporary_the_daemon_answers_as_temporary() -> None:
    # A database server that did not answer was "try later" (75) for
    # `filter` but a permanent I/O error (74) in the daemon's reply, which
    # `spamc -x` passes on to the mail system.
    from spamfilter.cli import exitcodes
    from spamfilter.daemon.replies import error_code

    temporary = [cls for cls, code in exitcodes._BY_ERROR if code == exitcodes.STORE_BUSY]
    assert len(temporary) >= 2
    for cls in temporary:
        assert error_code(cls("down")) == spamd.EX_TEMPFAIL, cls


def test_a_score_that_rounds_to_zero_is_sent_without_a_sign() -> None:
    """spamc prints "-0.0000" as 0.0 but "-0.0001" as -0.0: the Spam line
    never carries a negative zero, so spamc -c shows what classify rounds to."""
    from spamfilter.verdicts import Decision

    def score_of(p: float) -> str:
        line = dict(spamd.verdict_headers(Decision.UNSURE, p, 0.0, 3.9))["Spam"]
        return line.split(";")[1].split("/")[0].strip()

    assert score_of(0.5 - 1e-12) == "0.0000"
    assert score_of(0.5 + 1e-12) == "0.0000"
    assert score_of(0.4999) == "-0.0004"


# -- spamc against the daemon ---------------------------------------------------


@pytest.mark.corpus
def test_spamc_check_gives_classifys_verdicts_on_200_messages(
    daemon: Daemon, trained: tuple[str, Path], corpus: tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]
) -> None:
    items = [item for _, item in corpus[1]]
    expected = _classify(trained, items)
    threshold = _threshold(trained)
    spam_seen = 0
    for item, v in zip(items, expected):
        r = daemon.spamc("-c", message=item.raw)
        # spamc prints score/threshold with one decimal, and exits 1 for spam.
        assert r.stdout.decode() == _check_line(v, threshold), item.source
        assert r.returncode == (1 if v.verdict == "spam" else 0), item.source
        spam_seen += v.verdict == "spam"
    assert 50 < spam_seen < 150  # both verdicts were exercised
    assert daemon.logged("CHECK user=", 200) >= 200


@pytest.mark.corpus
def test_spamc_process_and_headers_write_what_filter_writes(
    daemon: Daemon, trained: tuple[str, Path], corpus: tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]
) -> None:
    items = [item for _, item in corpus[1][:6]]
    for item, v in zip(items, _classify(trained, items)):
        expected = with_filter_headers(item.raw, filter_fields(v.verdict, v.score, v.log_odds, "multinomial-binary"))
        assert daemon.spamc(message=item.raw).stdout == expected
        assert daemon.spamc("--headers", message=item.raw).stdout == expected
    # And the command itself, once, writes the same bytes.
    item = items[0]
    cli = subprocess.run(
        [sys.executable, "-m", "spamfilter", "--db", trained[0], "--config", str(trained[1]), "filter"], input=item.raw, capture_output=True, timeout=HANG
    )
    assert cli.stdout == daemon.spamc(message=item.raw).stdout


def test_spamc_headers_gives_the_body_once_when_filtering_dropped_a_field_from_it(daemon: Daemon) -> None:
    # In a CRLF message a field at the start of a body line is dropped (a
    # CRLF parser may read it as a header); HEADERS sent the whole filtered
    # message, and spamc appended its own copy of the body after it.
    raw = b"From: a@example.org\r\nSubject: x\r\n\r\nX-Spam-Flag: YES\r\nhello body\r\n"
    out = daemon.spamc("--headers", message=raw).stdout
    assert out.count(b"hello body") == 1
    head, _, body = out.partition(b"\r\n\r\n")
    assert body == b"X-Spam-Flag: YES\r\nhello body\r\n"  # spamc's own body: HEADERS cannot change it
    assert b"X-Spam-Status: " in head and b"Subject: x" in head


@pytest.mark.corpus
def test_spamc_report_and_symbols(daemon: Daemon, trained: tuple[str, Path], corpus: tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]) -> None:
    items = [item for _, item in corpus[1][:2]]
    verdicts = _classify(trained, items)
    for item, v in zip(items, verdicts):
        report = daemon.spamc("-R", message=item.raw).stdout.decode()
        first, rest = report.split("\n", 1)
        assert first == f"{_spamd_score(v):.1f}/{_threshold(trained):.1f}"
        assert rest.startswith(f"spamfilter verdict: {v.verdict}\n")
        assert f"log-odds = {v.log_odds:+.4f}" in rest
        symbols = daemon.spamc("-y", message=item.raw).stdout.decode()
        assert symbols == f"SPAMFILTER_{v.verdict.upper()}"
        only_spam = daemon.spamc("-r", message=item.raw).stdout.decode()
        assert only_spam == (first + "\n" + rest if v.verdict == "spam" else "")
    assert daemon.spamc("-K", message=b"").stdout.startswith(b"SPAMD/1.5 0")


def test_a_spamc_1_2_report_reads_as_exim_reads_it(
    daemon: Daemon, trained: tuple[str, Path], corpus: tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]
) -> None:
    # Exim's spam condition sends REPORT SPAMC/1.2 and takes a reply only
    # in one of two shapes (its spam.c sscanf patterns); with Content-length
    # first and more headers after Spam, it read none and deferred the mail.
    item = corpus[1][0][1]
    [v] = _classify(trained, [item])
    reply = daemon.raw(f"REPORT SPAMC/1.2\r\nUser: nobody\r\nContent-length: {len(item.raw)}\r\n\r\n".encode() + item.raw)
    m = re.match(rb"SPAMD/\S{1,7} 0 EX_OK\r\nSpam: \S+ ; (-?[0-9.]+) / (-?[0-9.]+)\r\n\r\n", reply)
    assert m is not None, reply[:200]
    assert (float(m.group(1)), float(m.group(2))) == (round(_spamd_score(v), 4), round(_threshold(trained), 4))
    assert reply[m.end() :].startswith(f"spamfilter verdict: {v.verdict}\n".encode())
    # 1.3 and later keep the Content-length and the other headers.
    newer = daemon.raw(f"REPORT SPAMC/1.5\r\nContent-length: {len(item.raw)}\r\n\r\n".encode() + item.raw)
    assert newer.startswith(b"SPAMD/1.5 0 EX_OK\r\nContent-length: ") and b"\r\nVerdict: " in newer


def test_old_clients_get_the_message_back_in_spamds_shapes(daemon: Daemon) -> None:
    # PROCESS before 1.3 got the Spam line and no Content-length; spamd
    # sends a 1.2 client the Content-length alone and an older one nothing
    # but the status line before the message.
    message = b"Subject: hello\r\n\r\nsee you at noon\r\n"
    framed = b"Content-length: %d\r\n\r\n" % len(message) + message
    new = daemon.raw(b"PROCESS SPAMC/1.5\r\n" + framed)
    head, _, body = new.partition(b"\r\n\r\n")
    assert head.startswith(b"SPAMD/1.5 0 EX_OK\r\nContent-length: %d\r\n" % len(body)) and body.startswith(b"X-Spam-")
    assert daemon.raw(b"PROCESS SPAMC/1.2\r\n" + framed) == b"SPAMD/1.5 0 EX_OK\r\nContent-length: %d\r\n\r\n" % len(body) + body
    assert daemon.raw(b"PROCESS SPAMC/1.1\r\n" + framed) == b"SPAMD/1.5 0 EX_OK\r\n" + body
    # Over --max-size, given back unscanned in the same shapes.
    big = b"Subject: big\r\n\r\n" + b"x" * 1_100_000
    framed_big = b"Content-length: %d\r\n\r\n" % len(big) + big
    assert daemon.raw(b"PROCESS SPAMC/1.1\r\n" + framed_big) == b"SPAMD/1.5 0 EX_OK\r\n" + big
    assert daemon.raw(b"PROCESS SPAMC/1.2\r\n" + framed_big) == b"SPAMD/1.5 0 EX_OK\r\n" + framed_big
    assert daemon.raw(b"HEADERS SPAMC/1.1\r\n" + framed_big) == b"SPAMD/1.5 0 EX_OK\r\nSubject: big\r\n\r\n"
    symbols = daemon.raw(b"SYMBOLS SPAMC/1.2\r\n" + framed)
    assert re.fullmatch(rb"SPAMD/1.5 0 EX_OK\r\nSpam: \S+ ; \S+ / \S+\r\n\r\nSPAMFILTER_[A-Z]+\r\n", symbols), symbols


@pytest.mark.corpus
def test_spamc_tell_learns_relearns_and_forgets_in_the_users_model(
    daemon: Daemon, trained: tuple[str, Path], corpus: tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]
) -> None:
    url, config = trained
    message = corpus[1][10][1].raw

    def carol() -> tuple[int, int]:
        with Filter.open(load_config(config), url, "carol") as f:
            s = f.stats()
        return s.spam_messages, s.ham_messages

    def shared() -> tuple[int, int]:
        with Filter.open(load_config(config), url) as f:
            s = f.stats()
        return s.spam_messages, s.ham_messages

    before = shared()
    steps = [
        ("spam", b"Message successfully un/learned\n", (1, 0)),
        ("spam", b"Message was already un/learned\n", (1, 0)),
        ("ham", b"Message successfully un/learned\n", (0, 1)),
        ("forget", b"Message successfully un/learned\n", (0, 0)),
        ("forget", b"Message was already un/learned\n", (0, 0)),
    ]
    for learn, said, counts in steps:
        r = daemon.spamc("-u", "carol", "-L", learn, message=message)
        assert (r.returncode, r.stdout) == (0, said)
        assert carol() == counts
    assert shared() == before  # other models untouched
    assert "TELL user=carol verdict=learned=spam" in daemon.log()
    assert "TELL accepted" in daemon.log().splitlines()[0]


def test_tell_is_refused_unless_allowed(tmp_path: Path, trained: tuple[str, Path]) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    d = Daemon(tmp_path / "log", url, _write_config(tmp_path / "c.toml"), "--listen", "127.0.0.1:0")
    try:
        message = b"Subject: hello\n\nsome words here\n"
        warning, listening = d.log().splitlines()[:2]
        assert warning.startswith("spamfilter serve: warning: no such database: ")  # nothing trained yet
        assert listening.endswith("; TELL refused (--allow-tell to accept)")
        r = d.spamc("-L", "spam", message=message)
        assert r.stdout == b"Message was already un/learned\n"
        reply = d.raw(b"TELL SPAMC/1.5\r\nMessage-class: spam\r\nSet: local\r\nContent-length: %d\r\n\r\n" % len(message) + message)
        assert reply.startswith(b"SPAMD/1.5 77 EX_NOPERM")
        with Filter.open(load_config(tmp_path / "c.toml"), url) as f:
            assert (f.stats().spam_messages, f.stats().ham_messages) == (0, 0)
        # Not trained: every verdict is refused with 69 and spamc passes the message through.
        assert d.spamc(message=message).stdout == message
        assert d.raw(b"CHECK SPAMC/1.5\r\nContent-length: %d\r\n\r\n" % len(message) + message).startswith(b"SPAMD/1.5 69 ")
    finally:
        assert d.stop() == 0
    # spamc said "already learned": only the daemon's log tells what happened.
    refused = "warning: TELL user=(default) verdict=refused "
    assert d.log().count(refused) == 2
    assert "; not learned: TELL is refused (spamfilter serve --allow-tell accepts it)" in d.log()
    unscanned = [line for line in d.log().splitlines() if "verdict=error=69" in line]
    assert len(unscanned) == 2
    assert all(line.startswith("spamfilter serve: warning: ") and "; not scanned: the model needs at least one trained spam" in line for line in unscanned)


def test_unix_socket_is_private_and_sighup_rereads_the_config(tmp_path: Path, trained: tuple[str, Path]) -> None:
    config = _write_config(tmp_path / "c.toml", "[decision]\nspam_cutoff = 0.9\nham_cutoff = 0.1\n")
    path = tmp_path / "spamd.sock"
    d = Daemon(tmp_path / "log", trained[0], config, "--socket", str(path))
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        message = b"Subject: cheap meds\n\nbuy cheap meds now\n"
        assert d.spamc("-c", message=message).stdout.decode().endswith("/2.2\n")  # logit(0.9)
        config.write_text("[decision]\nspam_cutoff = 0.99\nham_cutoff = 0.1\n")
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + HANG
        while "configuration reloaded" not in d.log():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert d.spamc("-c", message=message).stdout.decode().endswith("/4.6\n")  # logit(0.99)
        config.write_text("[decision\n")  # broken: the old one stays
        d.proc.send_signal(signal.SIGHUP)
        while "reload failed" not in d.log():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert d.spamc("-c", message=message).stdout.decode().endswith("/4.6\n")
    finally:
        assert d.stop() == 0
    assert not path.exists()


def test_listening_beyond_loopback_needs_an_allow_list(tmp_path: Path, trained: tuple[str, Path]) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "spamfilter", "--db", trained[0], "--config", str(trained[1]), "serve", "--listen", "0.0.0.0:0"], capture_output=True, timeout=HANG
    )
    assert r.returncode == 78
    assert b"--allowed-ips" in r.stderr


@pytest.mark.parametrize("command", ["serve", "milter"])
def test_an_address_another_server_holds_is_try_again_not_a_bad_config(tmp_path: Path, trained: tuple[str, Path], command: str) -> None:
    # Exit 78 ("the configuration is invalid") sent the admin to the config
    # file for a port an old process still held; it is EX_TEMPFAIL (75).
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "spamfilter", "--db", trained[0], "--config", str(trained[1]), command, "--listen", f"127.0.0.1:{port}", "--processes", "1"],
            capture_output=True,
            timeout=HANG,
        )
    assert r.returncode == 75
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use".encode() in r.stderr
    assert b"Traceback" not in r.stderr
    # A Unix socket another server answers on is the same case.
    path = tmp_path / "busy.sock"
    with socket.socket(socket.AF_UNIX) as held:
        held.bind(str(path))
        held.listen()
        r = subprocess.run(
            [sys.executable, "-m", "spamfilter", "--db", trained[0], "--config", str(trained[1]), command, "--socket", str(path), "--processes", "1"],
            capture_output=True,
            timeout=HANG,
        )
    assert r.returncode == 75
    assert f"another server is listening on {path}".encode() in r.stderr


def test_tell_refuses_what_is_not_mail_whether_learning_or_forgetting(daemon: Daemon) -> None:
    # Learning it was refused (EX_DATAERR); forgetting it answered
    # "unchanged", as for mail that was never learned.
    # (spamc itself prints "already un/learned" for any refusal of a TELL.)
    junk = bytes(range(256)) * 16
    for header in (b"Message-class: spam\r\nSet: local", b"Remove: local"):
        request = b"TELL SPAMC/1.5\r\nUser: dave\r\n" + header + b"\r\nContent-length: %d\r\n\r\n" % len(junk) + junk
        assert daemon.raw(request).startswith(b"SPAMD/1.5 65 EX_DATAERR"), header
    assert daemon.logged("not a mail message", 2) >= 2


def _ipv6_loopback() -> bool:
    """Whether this machine can listen on ::1."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_a_host_name_is_served_on_each_of_its_addresses_so_spamc_connects_first_time(
    tmp_path: Path, trained: tuple[str, Path], corpus: tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]
) -> None:
    # spamc's default host, localhost, resolves to ::1 first: a daemon on
    # 127.0.0.1 alone refuses that connection, and spamc logs the failure and
    # connects again for every message. Served on both, it connects once.
    url, config = trained
    items = [item for _, item in corpus[1][:5]]
    expected = _classify(trained, items)
    threshold = _threshold(trained)
    d = Daemon(tmp_path / "log", url, config, "--listen", "localhost:0", "--processes", "1")
    try:
        assert re.search(rf"listening on localhost:{d.address.port} \(127\.0\.0\.1, ::1\) with ", d.log())
        assert SPAMC is not None
        for item, v in zip(items, expected):
            r = subprocess.run([SPAMC, "-p", str(d.address.port), "-c"], input=item.raw, capture_output=True, timeout=HANG)  # no -d: localhost
            assert (r.stdout.decode(), r.returncode) == (_check_line(v, threshold), 1 if v.verdict == "spam" else 0), item.source
        assert d.logged("client=::1", 5) == 5  # spamc's connections: the first address it tried took them
        # both addresses answer, each on the same port
        for host in ("127.0.0.1", "::1"):
            remote = spamd.classify_remote(spamd.Address(host=host, port=d.address.port), items[0].raw, user=None, timeout=HANG)
            assert (remote.verdict, remote.log_odds) == (expected[0].verdict, pytest.approx(expected[0].log_odds, abs=1e-4))  # sent to 4 decimals
        assert (d.logged("client=127.0.0.1", 1), d.logged("client=::1", 6)) == (1, 6)
    finally:
        assert d.stop() == 0
    assert "warning" not in d.log()


# -- which model answers ------------------------------------------------------------


def _spamc_user() -> str:
    """The user spamc names in its requests when not told (-u)."""
    return pwd.getpwuid(os.geteuid()).pw_name


@pytest.mark.corpus
def test_serve_without_options_scores_whatever_user_spamc_names_with_the_default_model(
    tmp_path: Path, trained: tuple[str, Path], corpus: tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]
) -> None:
    # The default config: shared_model "none", so the user spamc runs as,
    # who has no model, would get no verdict if the User header chose it.
    url, config = trained[0], _write_config(tmp_path / "c.toml")
    with Filter.open(load_config(config), url, _spamc_user()) as f:
        assert (f.stats().spam_messages, f.stats().ham_messages) == (0, 0)
    items = [item for _, item in corpus[1][:20]]
    expected = _classify((url, config), items)
    threshold = _threshold((url, config))
    assert {v.verdict for v in expected} >= {"spam", "ham"}
    d = Daemon(tmp_path / "log", url, config, "--listen", "127.0.0.1:0")
    try:
        for item, v in zip(items, expected):
            r = d.spamc("-c", message=item.raw)
            assert (r.stdout.decode(), r.returncode) == (_check_line(v, threshold), 1 if v.verdict == "spam" else 0), item.source
        named = d.spamc("-u", "nobody", "-c", message=items[0].raw)
        assert named.stdout.decode() == _check_line(expected[0], threshold)
    finally:
        assert d.stop() == 0
    log = d.log()
    assert log.splitlines()[0] == (
        f"spamfilter serve: listening on {d.address} with one model for every request, whatever user it names: "
        f"the default model; database {url}{_PROCESSES}; TELL refused (--allow-tell to accept)"
    )
    assert log.count("CHECK user=(default) verdict=") == 21
    assert "warning" not in log


@pytest.mark.corpus
def test_serve_says_at_start_when_its_model_cannot_score_and_refuses_a_database_it_cannot_open(
    tmp_path: Path, corpus: tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]
) -> None:
    config = _write_config(tmp_path / "c.toml")
    message = corpus[1][0][1].raw
    # A plain path names a SQLite file; this one does not exist yet.
    missing = tmp_path / "new.db"
    d = Daemon(tmp_path / "log1", str(missing), config, "--listen", "127.0.0.1:0", "--processes", "1")
    try:
        assert (d.spamc("-c", message=message).stdout, d.logged("not scanned", 1)) == (b"0/0\n", 1)
    finally:
        assert d.stop() == 0
    lines = d.log().splitlines()
    assert lines[0] == f"spamfilter serve: warning: no such database: {missing}: every message is passed back unscanned until `spamfilter train` trains the model"
    assert lines[1].startswith(f"spamfilter serve: listening on {d.address} with one model for every request")
    assert f"; database sqlite:///{missing};" in lines[1]
    assert not any("Running upgrade" in line for line in lines)  # the schema's creation is not the daemon's news
    # A model with spam but no ham.
    url = f"sqlite:///{tmp_path / 'half.db'}"
    with Filter.open(load_config(config), url) as f:
        f.train([(True, item) for is_spam, item in corpus[0][:10] if is_spam])
    d = Daemon(tmp_path / "log2", url, config, "--listen", "127.0.0.1:0", "--processes", "1")
    assert d.stop() == 0
    first = d.log().splitlines()[0]
    assert first.startswith("spamfilter serve: warning: the model has ") and first.endswith(
        " spam and 0 ham trained: every message is passed back unscanned until `spamfilter train` gives it both"
    ), first
    # A database it cannot open at all, or could never create: no start.
    for db, says in [("nosuchdialect://x", "cannot use database nosuchdialect://x"), (str(tmp_path / "no" / "folder.db"), "and its folder does not exist")]:
        cmd = [sys.executable, "-m", "spamfilter", "--db", db, "--config", str(config), "serve", "--listen", "127.0.0.1:0"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG)
        assert r.returncode == 74, r.stderr
        assert "listening" not in r.stderr
        assert r.stderr.startswith("spamfilter: ") and says in r.stderr, r.stderr
    assert not (tmp_path / "no").exists()


def test_the_pool_warms_the_default_model_before_the_first_request_and_writes_nothing(tmp_path: Path, trained: tuple[str, Path]) -> None:
    url, config = trained
    before = _export(url, config)
    pool = FilterPool(load_config(config), url, None)
    try:
        assert pool.readiness() is None
        with pool.lease(None) as (_, f):
            assert f.scoring.cache.view is None  # nothing read yet
        pool.warm()
        with pool.lease(None) as (_, f):
            assert f.scoring.cache.view is not None and f.scoring.cache.view.totals.vocabulary_size > 1000
            assert len(f.scoring.cache) > 10  # the warm-up message's known tokens
    finally:
        pool.close()
    assert _export(url, config) == before
    # A database that is not there yet is neither warmed nor created, nor
    # one that went away after the start-up check.
    missing = tmp_path / "none.db"
    pool = FilterPool(load_config(config), f"sqlite:///{missing}", None)
    try:
        assert pool.readiness() is not None
        pool.warm()
    finally:
        pool.close()
    assert not missing.exists()
    gone = tmp_path / "gone.db"
    shutil.copy(url.removeprefix("sqlite:///"), gone)
    pool = FilterPool(load_config(config), f"sqlite:///{gone}", None)
    try:
        assert pool.readiness() is None
        gone.unlink()
        pool.warm()
    finally:
        pool.close()
    assert not gone.exists()


@pytest.mark.corpus
def test_per_user_mode_scores_with_the_user_headers_model_and_warns_of_a_user_without_one(
    tmp_path: Path, corpus: tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]
) -> None:
    config = _write_config(tmp_path / "c.toml", "[daemon]\nper_user = true\n")
    url = f"sqlite:///{tmp_path / 'users.db'}"
    seed = corpus[0][:20] + corpus[0][150:170]
    with Filter.open(load_config(config), url) as f:
        f.train(seed)
    with Filter.open(load_config(config), url, "erin") as f:
        f.train([(not is_spam, item) for is_spam, item in seed])  # erin calls spam what others call ham
    items = [item for _, item in corpus[1][:6]]
    erin = _classify((url, config), items, "erin")
    default = _classify((url, config), items)
    assert [v.verdict for v in erin] != [v.verdict for v in default]
    threshold = _threshold((url, config))
    d = Daemon(tmp_path / "log", url, config, "--listen", "127.0.0.1:0")
    try:
        for item, v in zip(items, erin):
            assert d.spamc("-u", "erin", "-c", message=item.raw).stdout.decode() == _check_line(v, threshold)
        # The user spamc runs as has no model, and shared_model is "none".
        r = d.spamc("-c", message=items[0].raw)
        assert (r.stdout, r.returncode) == (b"0/0\n", 0)
        assert d.spamc(message=items[0].raw).stdout == items[0].raw
    finally:
        assert d.stop() == 0
    lines = d.log().splitlines()
    # Said at start: a user without a model of their own goes unscanned.
    assert lines[0].startswith('spamfilter serve: warning: per-user mode with store.shared_model = "none": mail for a user without')
    assert lines[1].startswith(f"spamfilter serve: listening on {d.address} with per-user models: ")
    assert '(shared_model = "none"); the default model when it names none' in lines[1]
    assert lines[1].endswith("; TELL refused (--allow-tell to accept)")
    assert sum(line.startswith("spamfilter serve: CHECK user=erin verdict=") for line in lines) == 6
    warnings = [line for line in lines[1:] if line.startswith("spamfilter serve: warning: ")]
    assert len(warnings) == 2
    user = _spamc_user()
    for line, command in zip(warnings, ["CHECK", "PROCESS"]):
        assert line.startswith(f"spamfilter serve: warning: {command} user={user} verdict=error=69 "), line
        assert line.endswith(f'(it has 0 spam and 0 ham); the model of user {user} (per-user mode, shared_model = "none")'), line
        assert "; not scanned: the model needs at least one trained spam and one trained ham" in line


def test_one_model_option_overrides_the_config_under_its_old_name_too(tmp_path: Path, trained: tuple[str, Path]) -> None:
    config = _write_config(tmp_path / "c.toml", "[daemon]\nper_user = true\n")
    message = b"Subject: cheap meds\n\nbuy cheap meds now\n"
    expected = _check_line(_classify((trained[0], config), [MailItem("-", message)])[0], _threshold((trained[0], config)))
    for option in ("--one-model", "--no-user-header"):
        d = Daemon(tmp_path / f"log{option}", trained[0], config, "--listen", "127.0.0.1:0", option, "--allow-tell")
        try:
            assert d.spamc("-u", "nobody", "-c", message=message).stdout.decode() == expected
        finally:
            assert d.stop() == 0
        first = d.log().splitlines()[0]
        assert " with one model for every request, whatever user it names: the default model; " in first, option
        assert first.endswith("; TELL accepted"), option
        assert "CHECK user=(default) verdict=" in d.log()


# -- learning from many clients at once ------------------------------------------------


@pytest.mark.corpus
def test_8_concurrent_spamc_clients_with_learning_match_a_sequential_run(tmp_path: Path, corpus: tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]) -> None:
    config = _write_config(tmp_path / "c.toml")
    url = f"sqlite:///{tmp_path / 'live.db'}"
    seed = corpus[0][:10] + corpus[0][150:160]  # 10 spam, 10 ham
    with Filter.open(load_config(config), url) as f:
        f.train(seed)
    d = Daemon(tmp_path / "log", url, config, "--listen", "127.0.0.1:0", "--allow-tell", "--workers", "4")
    messages = corpus[1][:200]
    clients = [messages[i::8][:25] for i in range(8)]
    learned: list[tuple[bool, MailItem]] = []

    def client(batch: list[tuple[bool, MailItem]]) -> list[str]:
        problems = []
        for n, (is_spam, item) in enumerate(batch):
            r = d.spamc("-c", message=item.raw)
            if r.stdout == b"0/0\n" or r.returncode not in (0, 1):
                problems.append(f"{item.source}: {r.stdout!r} {r.returncode}")
            if n % 3 == 0:
                t = d.spamc("-L", "spam" if is_spam else "ham", message=item.raw)
                if t.stdout != b"Message successfully un/learned\n":
                    problems.append(f"{item.source}: {t.stdout!r}")
        return problems

    try:
        with ThreadPoolExecutor(8) as pool:
            problems = [p for ps in pool.map(client, clients) for p in ps]
        assert problems == []
        learned = [m for batch in clients for n, m in enumerate(batch) if n % 3 == 0]
        # Learning is seen by the next request: the daemon's verdict now is
        # the one a fresh process reads from the store.
        probe = [item for _, item in messages[:8]]
        fresh = _classify((url, config), probe)
        for item, v in zip(probe, fresh):
            assert d.spamc("-c", message=item.raw).stdout.decode().split("/")[0] == f"{_spamd_score(v):.1f}"
    finally:
        assert d.stop() == 0
    log = d.log()
    assert log.count("verdict=learned=") == len(learned) == 72
    assert "error" not in log and "internal" not in log
    sequential = f"sqlite:///{tmp_path / 'sequential.db'}"
    with Filter.open(load_config(config), sequential) as f:
        f.train(seed)
        # as the daemon reads a message it is sent: without an envelope line
        f.train([(is_spam, delivered(item.source, item.raw)) for is_spam, item in learned])
    # The counts and the feature sums alike; not the calibration record,
    # which `train` writes for each run and a TELL (a `mark`) does not.
    assert _export(sequential, config) == _export(url, config)


def _export(url: str, config: Path) -> str:
    """The model as `db export` writes it, without its calibration record
    (its bins, and the settings it was written under)."""
    r = subprocess.run([sys.executable, "-m", "spamfilter", "--db", url, "--config", str(config), "db", "export", "-"], capture_output=True, timeout=HANG, check=True)
    return "".join(line for line in r.stdout.decode().splitlines(keepends=True) if not line.startswith(("# calibration ", "# record-settings ")))


@pytest.mark.corpus
def test_kill_9_during_a_stream_of_tells_leaves_whole_messages(tmp_path: Path, corpus: tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]) -> None:
    config = _write_config(tmp_path / "c.toml")
    url = f"sqlite:///{tmp_path / 'k.db'}"
    # One process: the kill lands on the process that writes (with more, on their parent).
    d = Daemon(tmp_path / "log", url, config, "--listen", "127.0.0.1:0", "--allow-tell", "--processes", "1")
    stop = threading.Event()

    def stream() -> None:
        for is_spam, item in [m for pair in zip(corpus[0][:150], corpus[0][150:]) for m in pair]:
            if stop.is_set() or d.proc.poll() is not None:
                return
            d.spamc("-L", "spam" if is_spam else "ham", message=item.raw)

    worker = threading.Thread(target=stream)
    worker.start()
    deadline = time.monotonic() + HANG
    while d.log().count("TELL user=") < 15:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    d.proc.kill()
    d.proc.wait(HANG)
    stop.set()
    worker.join(HANG)
    check = subprocess.run([sys.executable, "-m", "spamfilter", "--db", url, "--config", str(config), "db", "check"], capture_output=True, timeout=HANG)
    assert check.returncode == 0, check.stdout.decode()
    with Filter.open(load_config(config), url) as f:
        s = f.stats()
    assert s.spam_messages + s.ham_messages >= 15
    # Restarted, it serves the same store.
    again = Daemon(tmp_path / "log2", url, config, "--listen", "127.0.0.1:0")
    try:
        assert again.spamc("-c", message=corpus[1][0][1].raw).stdout != b"0/0\n"
    finally:
        assert again.stop() == 0


# -- what spamc never sends --------------------------------------------------------


def test_broken_requests_get_protocol_errors_and_the_daemon_keeps_answering(daemon: Daemon) -> None:
    body = b"Subject: x\n\nhello\n"
    cases = {
        b"CHECK SPAMC/1.5\r\nCompress: zlib\r\n\r\n" + body: b"SPAMD/1.5 76 EX_PROTOCOL Compress needs a Content-length",
        b"FROB SPAMC/1.5\r\nContent-length: 1\r\n\r\nx": b"SPAMD/1.5 76 EX_PROTOCOL bad request line",
        b"GET / HTTP/1.0\r\n\r\n": b"SPAMD/1.5 76 EX_PROTOCOL bad request line",
        b"\xff\xfe\x00garbage\r\n\r\n": b"SPAMD/1.5 76 EX_PROTOCOL bad request line",
        b"CHECK SPAMC/1.5\r\nContent-length: ten\r\n\r\n": b"SPAMD/1.5 76 EX_PROTOCOL Content-length is not a number",
        # A superscript two (Latin-1) is a digit to str.isdigit, not to
        # int(): its ValueError ended the daemon.
        b"CHECK SPAMC/1.5\r\nContent-length: \xb2\r\n\r\nab": b"SPAMD/1.5 76 EX_PROTOCOL Content-length is not a number",
        b"TELL SPAMC/1.5\r\nUser-model: shared\r\nContent-length: 1\r\n\r\nx": b"SPAMD/1.5 76 EX_PROTOCOL User-model must be own",
        b"CHECK SPAMC/1.5\r\nno colon\r\n\r\n": b"SPAMD/1.5 76 EX_PROTOCOL header not in",
        b"CHECK SPAMC/1.5\r\nUser: ../etc\r\nContent-length: 1\r\n\r\nx": b"SPAMD/1.5 76 EX_PROTOCOL User is not a user name",
        b"TELL SPAMC/1.5\r\nSet: local\r\nContent-length: 1\r\n\r\nx": b"SPAMD/1.5 76 EX_PROTOCOL Set: local needs a Message-class",
        # spamd refuses it; it was learned, then forgotten.
        b"TELL SPAMC/1.5\r\nMessage-class: spam\r\nSet: local\r\nRemove: local\r\nContent-length: 1\r\n\r\nx": b"SPAMD/1.5 76 EX_PROTOCOL Set: local and Remove: local in one request",
        b"CHECK SPAMC/1.5\r\nContent-length: 100\r\n\r\n" + body: b"SPAMD/1.5 76 EX_PROTOCOL connection closed after 18 of 100",
        b"CHECK SPAMC/1.5\r\nContent-length: 5\r\n\r\n" + body: b"SPAMD/1.5 76 EX_PROTOCOL more bytes than Content-length",
        b"CHECK SPAMC/1.5\r\nContent-length: 999999999999\r\n\r\n": b"SPAMD/1.5 98 EX_TOOBIG",
        b"CHECK SPAMC/1.5\r\n" + b"X: y\r\n" * 2000 + b"\r\n": b"SPAMD/1.5 76 EX_PROTOCOL request head over",
        b"CHECK SPAMC/1.5\r\nContent-length: 3\r\n": b"SPAMD/1.5 76 EX_PROTOCOL connection closed before the end",
        # Which one frames the message? The last one used to win.
        b"CHECK SPAMC/1.5\r\nContent-length: 5\r\ncontent-length: 18\r\n\r\n" + body: b"SPAMD/1.5 76 EX_PROTOCOL Content-length is given twice",
        b"CHECK SPAMC/1.5\r\nUser: a\r\nUser: b\r\nContent-length: 18\r\n\r\n" + body: b"SPAMD/1.5 76 EX_PROTOCOL User is given twice",
    }
    for request, expected in cases.items():
        assert daemon.raw(request).startswith(expected), request[:60]
    assert daemon.raw(b"PING SPAMC/1.2\r\n") == b"SPAMD/1.5 0 PONG\r\n"  # before 1.5: no empty line
    # ... and a client may wait for the answer without closing its side
    # (it used to get nothing until the request timeout).
    for line in (b"PING SPAMC/1.0\r\n", b"PING SPAMC/1.3\n"):
        with spamd.connect(daemon.address, HANG) as sock:
            sock.sendall(line)
            got = b""
            while not got.endswith(b"\r\n") and (more := sock.recv(100)):
                got += more
        assert got == b"SPAMD/1.5 0 PONG\r\n"
    assert daemon.raw(b"PING SPAMC/1.5\r\nUser: x\r\n\r\n") == b"SPAMD/1.5 0 PONG\r\n"
    assert daemon.raw(b"SKIP SPAMC/1.5\r\n\r\n") == b""
    assert daemon.proc.poll() is None


def test_a_message_without_a_length_runs_to_the_end_of_the_request_as_spamd_reads_it(daemon: Daemon) -> None:
    # Content-length is optional before and after protocol 1.0, and a 1.0
    # request has no headers at all: the message follows the request line.
    # Before, the first was refused (EX_PROTOCOL) and in the second the
    # message's own header block was read as the request's, its
    # Content-Length framing only part of the body.
    message = b"From: a@example.org\r\nSubject: cheap meds\r\nContent-Length: 4\r\n\r\nbuy cheap meds now, best prices online\r\n"

    def spam_line(reply: bytes) -> bytes:
        assert reply.startswith(b"SPAMD/1.5 0 EX_OK\r\n"), reply
        return next(line for line in reply.split(b"\r\n") if line.startswith(b"Spam: "))

    framed = spam_line(daemon.raw(b"CHECK SPAMC/1.2\r\nContent-length: %d\r\n\r\n" % len(message) + message))
    assert spam_line(daemon.raw(b"CHECK SPAMC/1.2\r\nUser: x\r\n\r\n" + message)) == framed
    assert spam_line(daemon.raw(b"CHECK SPAMC/1.0\r\n" + message)) == framed
    for request in (b"PROCESS SPAMC/1.3\r\n\r\n", b"PROCESS SPAMC/1.0\r\n"):
        # The whole message comes back, its header block with it (not the 4
        # bytes its own Content-Length field framed).
        processed = daemon.raw(request + message)
        assert processed.startswith(b"SPAMD/1.5 0 EX_OK\r\n") and b"\r\nSubject: cheap meds\r\n" in processed
        assert processed.endswith(b"\r\n\r\nbuy cheap meds now, best prices online\r\n")
    # Not spooled, such a message over --max-size cannot be given back.
    big = message + b"x" * 1_100_000 + b"\r\n"
    assert daemon.raw(b"PROCESS SPAMC/1.5\r\n\r\n" + big).startswith(b"SPAMD/1.5 98 EX_TOOBIG message over ")
    assert daemon.raw(b"CHECK SPAMC/1.5\r\n\r\n" + big) == b"SPAMD/1.5 98 EX_TOOBIG message over 1000000 bytes, not scanned\r\n\r\n"
    assert daemon.proc.poll() is None


def test_a_message_without_a_length_past_the_spool_limit_is_not_kept() -> None:
    # Refused at the spool limit, an unframed TELL was still kept in memory
    # up to 64 MiB a connection (the framed path kept nothing more).
    from spamfilter.daemon.connection import Connection

    ours, theirs = socket.socketpair()
    try:
        conn = Connection(ours, "test", time.monotonic(), 30.0, 64 << 20)
        assert conn.feed_head(b"TELL SPAMC/1.5\r\nMessage-class: spam\r\nSet: local\r\n\r\n") == b""
        assert conn.to_the_end
        assert conn.feed_body(b"x" * 1000) is False and len(conn.body) == 1000
        conn.spool_error, conn.body = "spool full", bytearray()  # as the server drops it at the limit
        assert conn.feed_body(b"y" * 100_000) is False and len(conn.body) == 0
        assert conn.feed_body(b"") is True and conn.size == 101_000
    finally:
        ours.close()
        theirs.close()


def test_compressed_requests_are_answered_as_the_message_itself(daemon: Daemon) -> None:
    # `Compress: zlib` (spamc -z, other spamd clients with zlib) was refused
    # with EX_PROTOCOL, and that mail went through unscanned.
    import zlib

    message = b"Subject: cheap meds\r\nFrom: a@example.test\r\n\r\nbuy now, click here http://x.example/\r\n"
    packed = zlib.compress(message)

    def ask(command: bytes, body: bytes, compressed: bool) -> bytes:
        head = command + b" SPAMC/1.5\r\n" + (b"Compress: zlib\r\n" if compressed else b"")
        return daemon.raw(head + b"Content-length: %d\r\n\r\n" % len(body) + body)

    for command in (b"CHECK", b"PROCESS", b"HEADERS", b"SYMBOLS"):
        plain = ask(command, message, False)
        assert plain.startswith(b"SPAMD/1.5 0 EX_OK")
        assert ask(command, packed, True) == plain, command
    assert ask(b"CHECK", b"not zlib at all", True).startswith(b"SPAMD/1.5 76 EX_PROTOCOL the compressed message is not zlib data")
    assert ask(b"CHECK", packed[:-3], True).startswith(b"SPAMD/1.5 76 EX_PROTOCOL the compressed message is cut short")
    # 50 MB of one byte is 50 KB compressed: inflated no further than --max-size.
    bomb = zlib.compress(b"a" * 50_000_000, 9)
    assert len(bomb) < 1_000_000
    assert ask(b"PROCESS", bomb, True).startswith(b"SPAMD/1.5 98 EX_TOOBIG message over 1000000 bytes once decompressed")
    assert daemon.logged("not scanned: message over 1000000 bytes once decompressed", 1)
    assert daemon.raw(b"CHECK SPAMC/1.5\r\nCompress: gzip\r\nContent-length: 1\r\n\r\nx").startswith(b"SPAMD/1.5 76 EX_PROTOCOL Compress must be zlib")
    assert daemon.proc.poll() is None


def test_a_one_model_daemon_scores_whatever_user_spamc_names(
    tmp_path: Path, trained: tuple[str, Path], corpus: tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]
) -> None:
    # A winbind or LDAP name was a protocol error, so that mail went through
    # unscanned (spamc prints 0/0 and exits 0); per-user mode still refuses it.
    item = corpus[1][0][1]
    [v] = _classify(trained, [item])
    expected = _check_line(v, _threshold(trained))
    d = Daemon(tmp_path / "serve.log", *trained, "--listen", "127.0.0.1:0")
    try:
        for user in ("EXAMPLE\\alice", "alice smith", "élève", "x" * 80):
            assert d.spamc("-u", user, "-c", message=item.raw).stdout.decode() == expected, user
        assert "protocol error" not in d.log()
    finally:
        assert d.stop() == 0
    accent = "CHECK SPAMC/1.5\r\nUser: élève\r\nContent-length: 1\r\n\r\nx".encode()
    assert daemon_reply_in_per_user_mode(tmp_path, trained, accent).startswith(b"SPAMD/1.5 76 EX_PROTOCOL User is not a user name")


def test_health_checks_log_nothing_and_a_bad_user_is_logged_by_its_name(tmp_path: Path, trained: tuple[str, Path]) -> None:
    # A connection closed before its first byte logged a protocol error and
    # a lost connection (the error reply had no reader); a User refused in
    # per-user mode was logged as user=(default), a model it never touched.
    d = Daemon(tmp_path / "serve.log", *trained, "--listen", "127.0.0.1:0", "--per-user", "--processes", "1")
    try:
        for _ in range(3):
            spamd.connect(d.address, HANG).close()
        reply = d.raw(b"CHECK SPAMC/1.5\r\nUser: bad user\r\nContent-length: 1\r\n\r\nx")
        assert reply.startswith(b"SPAMD/1.5 76 EX_PROTOCOL User is not a user name")
        assert d.logged("CHECK user='bad user' verdict=error=76", 1) == 1
        assert "warning: 127.0.0.1: " not in d.log()  # no protocol error, no lost connection
    finally:
        assert d.stop() == 0


def daemon_reply_in_per_user_mode(tmp_path: Path, trained: tuple[str, Path], request: bytes) -> bytes:
    d = Daemon(tmp_path / "per-user.log", *trained, "--listen", "127.0.0.1:0", "--per-user")
    try:
        return d.raw(request)
    finally:
        assert d.stop() == 0


def test_oversized_messages_come_back_unscanned(daemon: Daemon) -> None:
    big = b"Subject: big\r\n\r\n" + b"x" * 1_500_000
    reply = daemon.raw(b"PROCESS SPAMC/1.5\r\nContent-length: %d\r\n\r\n" % len(big) + big)
    head, _, rest = reply.partition(b"\r\n\r\n")
    assert head == b"SPAMD/1.5 0 EX_OK\r\nContent-length: %d" % len(big)
    assert rest == big
    assert daemon.spamc("-s", "2000000", message=big).stdout == big
    assert daemon.logged(f"verdict=unscanned log_odds=- bytes={len(big)}", 1)
    assert re.search(rf"warning: PROCESS .*verdict=unscanned .*; not scanned: {len(big)} bytes, over --max-size 1000000\n", daemon.log())
    headers = daemon.raw(b"HEADERS SPAMC/1.5\r\nContent-length: %d\r\n\r\n" % len(big) + big)
    assert headers == b"SPAMD/1.5 0 EX_OK\r\nContent-length: 16\r\n\r\nSubject: big\r\n\r\n"
    # 100 MB for CHECK: read and dropped, never held.
    huge = 100 << 20
    with spamd.connect(daemon.address, HANG) as sock:
        sock.sendall(b"CHECK SPAMC/1.5\r\nContent-length: %d\r\n\r\n" % huge)
        chunk = b"y" * (1 << 20)
        for _ in range(100):
            sock.sendall(chunk)
        sock.shutdown(socket.SHUT_WR)
        assert _read_all(sock).startswith(b"SPAMD/1.5 98 EX_TOOBIG")
    assert daemon.raw(b"PING SPAMC/1.5\r\n\r\n") == b"SPAMD/1.5 0 PONG\r\n"


def test_a_trickling_client_is_cut_off_while_others_are_served(daemon: Daemon) -> None:
    message = b"Subject: x\n\nhello there\n"
    with spamd.connect(daemon.address, HANG) as slow:
        slow.sendall(b"CHECK SPAMC/1.5\r\n")
        answered = 0
        deadline = time.monotonic() + HANG
        closed = False
        while not closed:
            assert time.monotonic() < deadline
            try:
                slow.sendall(b"X")
                time.sleep(0.2)
                slow.setblocking(False)
                closed = slow.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed = True
            finally:
                slow.setblocking(True)
            if daemon.spamc("-c", message=message).stdout != b"0/0\n":
                answered += 1
        # The daemon kept answering while the slow client trickled (3 s --timeout).
        assert answered >= 3
    # A client that leaves mid-message.
    with spamd.connect(daemon.address, HANG) as gone:
        gone.sendall(b"PROCESS SPAMC/1.5\r\nContent-length: 1000\r\n\r\nSubject: half")
    deadline = time.monotonic() + HANG
    while "connection closed after 13 of 1000" not in daemon.log():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert daemon.spamc("-c", message=message).stdout != b"0/0\n"
    assert "request not complete after 3 s" in daemon.log()


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=255), max_size=14))
def test_any_content_length_parses_or_is_a_protocol_error(value: str) -> None:
    head = b"CHECK SPAMC/1.5\r\nContent-length: " + value.encode("latin-1")
    try:
        r = spamd.parse_head(head)
    except ProtocolError as exc:
        assert exc.code == spamd.EX_PROTOCOL
    else:
        assert r.content_length == int(value.strip())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_request_head_parses_or_is_a_protocol_error(head: bytes) -> None:
    try:
        r = spamd.parse_head(head)
    except ProtocolError as exc:
        assert exc.code in (spamd.EX_PROTOCOL,)
    else:
        assert r.command in spamd.COMMANDS


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(spamd.COMMANDS) + ["check", "PROCESSX", ""]),
    st.lists(
        st.tuples(
            st.sampled_from(["Content-length", "User", "Message-class", "Set", "Remove", "Compress", "X-Other", ""]),
            st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
        ),
        max_size=6,
    ),
)
def test_request_lines_of_known_parts_parse_consistently(command: str, headers: list[tuple[str, str]]) -> None:
    head = (f"{command} SPAMC/1.5\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers)).rstrip("\r\n").encode()
    try:
        r = spamd.parse_head(head)
    except ProtocolError:
        return
    assert r.command == command
    # A message command without a length reads its message to the end of
    # the input, as spamd does; a compressed one must have a length.
    assert r.content_length is None or r.content_length >= 0
    assert r.content_length is not None or not r.compressed
    names = [name.lower() for name, _ in headers]
    assert all(names.count(name) <= 1 for name in ("content-length", "user", "message-class", "set", "remove"))


def test_random_requests_never_stop_the_daemon(daemon: Daemon) -> None:
    import random

    rng = random.Random(11)
    for _ in range(40):
        noise = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        reply = daemon.raw(rng.choice([b"", b"CHECK SPAMC/1.5\r\n", b"TELL "]) + noise + b"\r\n\r\n")
        assert reply == b"" or reply.startswith(b"SPAMD/1.5 ")
    assert daemon.raw(b"PING SPAMC/1.5\r\n\r\n") == b"SPAMD/1.5 0 PONG\r\n"


# -- filter --connect ----------------------------------------------------------------------


def _filter(trained: tuple[str, Path], message: bytes, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "spamfilter", "--db", trained[0], "--config", str(trained[1]), "filter", *args],
        input=message,
        capture_output=True,
        timeout=HANG,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.corpus
def test_filter_connect_asks_the_daemon_and_falls_back_in_process(
    daemon: Daemon, trained: tuple[str, Path], corpus: tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]
) -> None:
    message = corpus[1][0][1].raw
    local = _filter(trained, message)
    assert local.returncode in (0, 1, 2)
    before = daemon.log().count("CHECK user=")
    remote = _filter(trained, message, env={"SPAMFILTER_SERVER": str(daemon.address)})
    assert (remote.returncode, remote.stdout, remote.stderr) == (local.returncode, local.stdout, b"")
    assert daemon.logged("CHECK user=", before + 1) == before + 1
    verdict = _filter(trained, message, "--verdict-only", "--connect", str(daemon.address))
    assert verdict.stdout == _filter(trained, message, "--verdict-only").stdout
    # A client whose own config names another event model writes the one
    # the daemon scored with.
    other = _write_config(daemon.log_path.parent / "bernoulli.toml", '[store]\nshared_model = "fallback"\n[model]\nevent_model = "bernoulli"\n')
    theirs = _filter((trained[0], other), message, "--connect", str(daemon.address))
    assert theirs.stdout == local.stdout and b"model=multinomial-binary" in theirs.stdout
    # Nobody listening: filtered in-process, the same bytes and exit code.
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    down = _filter(trained, message, "--connect", f"127.0.0.1:{port}")
    assert (down.returncode, down.stdout) == (local.returncode, local.stdout)
    assert b"filtering in-process" in down.stderr
    # A host no resolver is asked about: the same (it was exit 70).
    bad = _filter(trained, message, "--connect", "ex..ample:783")
    assert (bad.returncode, bad.stdout) == (local.returncode, local.stdout)
    assert b"not a host name" in bad.stderr and b"filtering in-process" in bad.stderr


def test_filter_connect_falls_back_on_a_broken_answer(tmp_path: Path, trained: tuple[str, Path]) -> None:
    message = b"Subject: hello\n\nsome words\n"
    local = _filter(trained, message)
    answers = [
        b"SPAMD/1.5 0 EX_OK\r\nContent-length: 500\r\nSpam: True ; 1 / 2\r\nVerdict: spam\r\nProbability: 1\r\nLog-odds: 9\r\n\r\ntruncated",
        b"HTTP/1.0 200 OK\r\n\r\n",
        b"SPAMD/1.5 0 EX_OK\r\nContent-length: 3\r\n\r\nabc",  # not scanned
        b"",
        # a head cut off before its blank line: no message at all
        b"SPAMD/1.5 0 EX_OK\r\nContent-length: 4876\r\nSpam: False ; -23.4 / 3.89\r\nVerdict: ham\r\nProbability: 0\r\nLog-odds: -23.4\r\n",
        # a Content-length that is no number: whatever came is not the message
        b"SPAMD/1.5 0 EX_OK\r\nContent-length: 12abc\r\nSpam: False ; -1 / 3.89\r\nVerdict: ham\r\nProbability: 0.2\r\nLog-odds: -1\r\n\r\nXYZ",
        # numbers past what int() converts (4,300 digits): exit 70, no fallback
        b"SPAMD/1.5 0 EX_OK\r\nContent-length: " + b"9" * 5000 + b"\r\nVerdict: ham\r\n\r\n",
        b"SPAMD/1.5 " + b"0" * 5000 + b" EX_OK\r\nVerdict: ham\r\n\r\n",
    ]
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)

        def answer() -> None:
            for reply in answers:
                conn, _ = server.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(reply)

        t = threading.Thread(target=answer)
        t.start()
        for _ in answers:
            r = _filter(trained, message, "--connect", "127.0.0.1:%d" % server.getsockname()[1])
            assert (r.returncode, r.stdout) == (local.returncode, local.stdout)
            assert b"filtering in-process" in r.stderr
        t.join(HANG)


def test_a_reply_sent_a_byte_at_a_time_ends_at_the_timeout_for_the_whole_reply() -> None:
    # Each recv was within the timeout, so a server that sent a byte every
    # two seconds held a delivery for minutes (188 s for one reply).
    reply = b"SPAMD/1.5 0 EX_OK\r\nSpam: True ; 9 / 3.89\r\nVerdict: spam\r\nProbability: 0.99\r\nLog-odds: 9\r\n\r\n"
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        stop = threading.Event()

        def trickle() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(65536)
                for byte in reply:
                    if stop.wait(0.2):
                        return
                    with contextlib.suppress(OSError):
                        conn.sendall(bytes([byte]))

        t = threading.Thread(target=trickle)
        t.start()
        started = time.monotonic()
        try:
            with pytest.raises(TimeoutError):  # "timed out", or "longer than the timeout"
                spamd.classify_remote(spamd.Address(host="127.0.0.1", port=server.getsockname()[1]), b"Subject: x\n\nwords\n", user=None, timeout=1.0)
        finally:
            stop.set()
            t.join(HANG)
        assert time.monotonic() - started < HANG  # a guard against a hang, not a timing test


def test_filter_connect_with_a_user_name_spamd_cannot_carry_filters_in_process(trained: tuple[str, Path]) -> None:
    message = b"Subject: hello\n\nsome words\n"
    with pytest.raises(ProtocolError, match="cannot be sent"):
        spamd.request(("127.0.0.1", 9), "CHECK", message, user="jos\u00e9")
    db, config = trained
    args = [sys.executable, "-m", "spamfilter", "--db", db, "--config", str(config), "--user", "jos\u00e9"]
    local = subprocess.run([*args, "filter"], input=message, capture_output=True, timeout=HANG)
    r = subprocess.run([*args, "filter", "--connect", "127.0.0.1:9"], input=message, capture_output=True, timeout=HANG)
    assert (r.returncode, r.stdout) == (local.returncode, local.stdout)
    assert b"internal error" not in r.stderr


def test_a_reload_that_fails_in_any_way_keeps_the_old_configuration(caplog: pytest.LogCaptureFixture) -> None:
    # Only configuration errors were caught: anything else a reload raised
    # ended the daemon (a SIGHUP after a config edit, exit 70).
    from spamfilter.daemon.pool import reload_config

    given: list[object] = []

    class Pool:
        def replace(self, config: object) -> None:
            given.append(config)

        def describe(self) -> str:
            return "one model"

    def broken() -> Config:
        raise RuntimeError("unexpected")

    log = logging.getLogger("test-reload")
    with caplog.at_level(logging.ERROR, logger="test-reload"):
        reload_config([Pool()], broken, log)  # type: ignore[list-item]
    assert given == []
    assert "reload failed (internal error), keeping the old configuration" in caplog.text
    reload_config([Pool()], Config, log)  # type: ignore[list-item]
    assert given == [Config()]


def test_a_daemons_model_id_tells_apart_what_changes_its_verdicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `filter` takes a daemon's verdict only when the daemon names the model
    # it would open itself. The name left out which model a user without
    # enough mail is scored with (a fallback daemon answered for a filter
    # that would have said "not trained"), and a relative SQLite path named
    # every folder's file alike.
    from dataclasses import replace

    from spamfilter.config import Config, scoring_settings

    config = Config()
    fallback = replace(config, store=replace(config.store, shared_model="fallback"))
    none = replace(config, store=replace(config.store, shared_model="none"))
    fewer = replace(fallback, store=replace(fallback.store, shared_min_messages=fallback.store.shared_min_messages + 1))
    ids = {spamd.model_id("sqlite:////x.db", "alice", scoring_settings(c)) for c in (fallback, none, fewer)}
    assert len(ids) == 3
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    in_a = spamd.model_id("sqlite:///m.db", "", "s")
    assert in_a == spamd.model_id(f"sqlite:///{tmp_path}/a/m.db", "", "s")
    monkeypatch.chdir(tmp_path / "b")
    assert spamd.model_id("sqlite:///m.db", "", "s") != in_a
    assert spamd.model_id("sqlite://", "", "s") == spamd.model_id("sqlite://", "", "s")  # in memory: no path
