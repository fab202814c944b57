"""`spamfilter filter` never loses, alters or lets a sender forge mail.

Failures that happen before the command body runs (config, usage) are
tested through the real ``spamfilter`` command in a subprocess; the others
with CliRunner or on the library functions.
"""

from __future__ import annotations

import email
import email.policy
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from spamfilter.answers import Refusal, Verdict
from spamfilter.cli import app, exitcodes
from spamfilter.config import Config
from spamfilter.filter import Filter
from spamfilter.mail import MailItem, digest_bytes, filtered_pieces, with_filter_headers
from spamfilter.tokenizer import Tokenizer
from spamfilter.tokenizer.features import TextShape

REPO = Path(__file__).resolve().parents[2]
MESSAGE = b"From: a@example.com\r\nSubject: keep me\r\n\r\nThis body must survive.\nbare LF, then CRLF\r\n"
SPAM_FIELDS = [("X-Spam-Status", "Yes, verdict=spam score=0.999"), ("X-Spam-Score", "0.999"), ("X-Spam-Flag", "YES")]
HAM_FIELDS = [("X-Spam-Status", "No, verdict=ham score=0.001"), ("X-Spam-Score", "0.001")]


def spamfilter(tmp_path: Path, *args: str, stdin: bytes = MESSAGE) -> tuple[int, bytes, bytes]:
    """The installed command's entry point, in a fresh process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAMFILTER_")}
    env["SPAMFILTER_DB"] = f"sqlite:///{tmp_path / 'tokens.db'}"
    env["HOME"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from spamfilter.cli import main; sys.exit(main())", *args],
        input=stdin,
        capture_output=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


# -- 1. every failure passes the message through ------------------------------


@pytest.mark.parametrize(
    ("config_text", "code"),
    [("[model\nalpha =\n", exitcodes.CONFIG_ERROR), ("[model]\nalpha = -1\n", exitcodes.CONFIG_ERROR), (None, exitcodes.CONFIG_ERROR)],
    ids=["unparsable", "alpha-negative", "missing-file"],
)
def test_filter_passes_the_message_through_on_a_config_error(tmp_path: Path, config_text: str | None, code: int) -> None:
    config = tmp_path / "config.toml"
    if config_text is not None:
        config.write_text(config_text)
    rc, out, err = spamfilter(tmp_path, "--config", str(config), "filter", "--always-zero")
    assert rc == code == 78, err
    assert out == MESSAGE
    assert err.startswith(b"spamfilter: ") and err.count(b"\n") == 1


def test_filter_passes_the_message_through_on_a_broken_default_config(tmp_path: Path) -> None:
    (tmp_path / ".config" / "spamfilter").mkdir(parents=True)
    (tmp_path / ".config" / "spamfilter" / "config.toml").write_text("[decision]\nspam_cutoff = 7\n")
    rc, out, err = spamfilter(tmp_path, "filter")
    assert rc == exitcodes.CONFIG_ERROR, err
    assert out == MESSAGE


@pytest.mark.parametrize("args", [["filter", "--bogus"], ["--bogus", "filter"], ["filter", "extra-argument"], ["--db", "x", "--user", "u", "filter", "-z"]])
def test_filter_passes_the_message_through_on_a_usage_error(tmp_path: Path, args: list[str]) -> None:
    rc, out, err = spamfilter(tmp_path, *args)
    assert rc == exitcodes.USAGE == 64, err
    assert out == MESSAGE


def test_filter_pass_through_streams_a_message_it_never_read(tmp_path: Path) -> None:
    big = b"Subject: big\n\n" + b"0123456789abcdef\n" * 400_000  # 6.8 MB, larger than any pipe buffer
    rc, out, _ = spamfilter(tmp_path, "filter", "--no-such-option", stdin=big)
    assert rc == exitcodes.USAGE
    assert out == big


@pytest.mark.parametrize("verdict_only", [False, True])
def test_filter_passes_a_message_over_its_memory_limit_through_unfiltered(tmp_path: Path, verdict_only: bool) -> None:
    # Only the first `Delivery.limit` bytes are held (1 MiB here, 64 MiB in
    # the product): a longer message, or a stream that never ends, is
    # copied through in pieces, unfiltered, and the exit says so.
    big = b"Subject: big\nX-Spam-Flag: YES\n\n" + b"0123456789abcdef\n" * 200_000  # 3.4 MB
    code = "import sys; from spamfilter.cli import Delivery, main; Delivery.limit = 1 << 20; sys.exit(main())"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAMFILTER_")} | {"SPAMFILTER_DB": f"sqlite:///{tmp_path / 'tokens.db'}", "HOME": str(tmp_path)}
    args = ["filter", "--verdict-only"] if verdict_only else ["filter"]
    proc = subprocess.run([sys.executable, "-c", code, *args], input=big, capture_output=True, env=env, cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == exitcodes.DATA_ERROR == 65
    assert proc.stdout == (b"" if verdict_only else big)
    assert proc.stderr.decode() == "spamfilter: not filtered: the message is larger than 1 MiB\n"
    assert not (tmp_path / "tokens.db").exists()


def _limited_output(limit: int) -> Callable[[], None]:
    """For Popen: files this process writes stop at ``limit`` bytes, and
    writing past it fails (EFBIG) instead of killing it (SIGXFSZ)."""

    def setup() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return setup


@pytest.mark.parametrize("unbuffered", ["1", ""], ids=["PYTHONUNBUFFERED", "buffered"])
def test_filter_output_cut_short_by_a_file_size_limit_exits_74(tmp_path: Path, unbuffered: str) -> None:
    # With PYTHONUNBUFFERED stdout is the raw file: a write that took part
    # of the message was taken for all of it, and filter exited 2.
    big = MESSAGE + b"filler words in the body\n" * 12_000  # 300 KB
    spamfilter(tmp_path, "train", "--spam", "-", stdin=b"Subject: pills\n\ncheap pills\n")
    spamfilter(tmp_path, "train", "--ham", "-", stdin=b"Subject: lunch\n\nlunch at noon\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPAMFILTER_", "PYTHONUNBUFFERED"))} | {
        "SPAMFILTER_DB": f"sqlite:///{tmp_path / 'tokens.db'}",
        "HOME": str(tmp_path),
    }
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    with open(tmp_path / "out.eml", "wb") as out:
        proc = subprocess.run(
            [sys.executable, "-c", "import sys; from spamfilter.cli import main; sys.exit(main())", "filter"],
            input=big,
            stdout=out,
            stderr=subprocess.PIPE,
            env=env,
            cwd=tmp_path,
            timeout=120,
            check=False,
            preexec_fn=_limited_output(100_000),
        )
    assert proc.returncode == exitcodes.OUTPUT_ERROR == 74, proc.stderr
    assert (tmp_path / "out.eml").stat().st_size == 100_000
    assert proc.stderr.decode().endswith("spamfilter: cannot write the output: File too large\n")


@pytest.mark.parametrize("args", [["stats"], ["filter"], ["filter", "--verdict-only"], ["--version"], ["--help"]])
def test_output_that_cannot_be_written_exits_74_with_one_line(tmp_path: Path, args: list[str]) -> None:
    # A closed stdout, and a full disk: Python's own flush at exit made
    # that exit 120 with an "Exception ignored" message, or exit 0.
    spamfilter(tmp_path, "train", "--spam", "-", stdin=b"Subject: pills\n\ncheap pills\n")
    spamfilter(tmp_path, "train", "--ham", "-", stdin=b"Subject: lunch\n\nlunch at noon\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAMFILTER_")} | {"SPAMFILTER_DB": f"sqlite:///{tmp_path / 'tokens.db'}", "HOME": str(tmp_path)}
    command = [sys.executable, "-c", "import sys; from spamfilter.cli import main; sys.exit(main())", *args]
    outputs = ["closed"] + (["/dev/full"] if Path("/dev/full").is_char_device() else [])
    for output in outputs:
        with open(output if output != "closed" else os.devnull, "wb") as sink:
            proc = subprocess.run(
                command,
                input=MESSAGE,
                stdout=subprocess.DEVNULL if output == "closed" else sink,
                stderr=subprocess.PIPE,
                env=env,
                timeout=120,
                check=False,
                preexec_fn=(lambda: os.close(1)) if output == "closed" else None,
            )
        assert proc.returncode == exitcodes.OUTPUT_ERROR == 74, (output, proc.stderr)
        assert proc.stderr.decode().count("\n") == 1 and "spamfilter: cannot write the output" in proc.stderr.decode(), proc.stderr


@pytest.mark.parametrize("args", [["filter"], ["filter", "--verdict-only"], ["classify", "-"]])
def test_a_reader_that_leaves_is_an_error_for_filter_only(tmp_path: Path, args: list[str]) -> None:
    # The program reading filter's output closed its end of the pipe: the
    # message was not delivered, so filter must not exit 0 (or with a
    # verdict). classify | head is the reader's choice, not an error.
    spamfilter(tmp_path, "train", "--spam", "-", stdin=b"Subject: pills\n\ncheap pills\n")
    spamfilter(tmp_path, "train", "--ham", "-", stdin=b"Subject: lunch\n\nlunch at noon\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAMFILTER_")} | {"SPAMFILTER_DB": f"sqlite:///{tmp_path / 'tokens.db'}", "HOME": str(tmp_path)}
    command = [sys.executable, "-c", "import sys; from spamfilter.cli import main; sys.exit(main())", *args]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    try:
        proc = subprocess.run(command, input=MESSAGE, stdout=write_end, stderr=subprocess.PIPE, env=env, cwd=tmp_path, timeout=120, check=False)
    finally:
        os.close(write_end)
    if args[0] == "filter":
        assert proc.returncode == exitcodes.OUTPUT_ERROR == 74, proc.stderr
        what = "the verdict" if "--verdict-only" in args else "the message"
        assert proc.stderr.decode() == f"spamfilter: cannot write {what}: the program reading it closed the pipe\n"
    else:
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == b""


def test_other_commands_and_verdict_only_write_nothing_on_errors(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[model]\nalpha = -1\n")
    for args in (["filter", "--verdict-only"], ["stats"], ["filter", "--help", "--bogus"]):
        rc, out, _ = spamfilter(tmp_path, "--config", str(config), *args)
        assert rc in (exitcodes.CONFIG_ERROR, exitcodes.USAGE), args
        assert MESSAGE not in out, args


def test_filter_passes_the_message_through_on_an_internal_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Filter, items: object) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Filter, "classify", broken)
    monkeypatch.delenv("SPAMFILTER_DEBUG", raising=False)
    result = CliRunner().invoke(app, ["--db", f"sqlite:///{tmp_path / 'db'}", "filter"], input=MESSAGE)
    assert result.exit_code == exitcodes.INTERNAL == 70
    assert result.stdout_bytes == MESSAGE
    assert "internal error: RuntimeError: a bug" in result.stderr


def test_running_out_of_memory_is_said_so_not_called_a_bug(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Under a mail server's per-process limit a very large message moved
    # into Junk ran out of memory: "internal error: MemoryError:" was all
    # the log said.
    def out_of_memory(self: Filter, items: object) -> object:
        raise MemoryError

    monkeypatch.setattr(Filter, "mark", out_of_memory)
    monkeypatch.delenv("SPAMFILTER_DEBUG", raising=False)
    result = CliRunner().invoke(app, ["--db", f"sqlite:///{tmp_path / 'db'}", "mark", "--one-message", "spam", "-"], input=MESSAGE)
    assert result.exit_code == exitcodes.INTERNAL
    assert "out of memory: this run needs more memory than the process may use" in result.stderr
    assert "internal error" not in result.stderr


# -- 2. one message's failure is a refusal -------------------------------------


@pytest.fixture
def tokenizer_times_out_on_marked_mail(monkeypatch: pytest.MonkeyPatch) -> None:
    """nltk's regexps raise TimeoutError past their CPU-time guard (a 50 MB
    text did); here the messages that say "slow-marker" do."""
    tokenize = Tokenizer.tokenize

    def slow(self: Tokenizer, message: email.message.Message, shape: TextShape | None = None) -> list[str]:
        if "slow-marker" in str(message.get_payload()):
            raise TimeoutError("regular-expression match exceeded its 5.0s time limit")
        return tokenize(self, message, shape)

    monkeypatch.setattr(Tokenizer, "tokenize", slow)


@pytest.mark.usefixtures("tokenizer_times_out_on_marked_mail")
def test_a_message_that_fails_to_tokenize_is_refused_and_the_run_goes_on(tmp_path: Path) -> None:
    slow = MailItem("slow.eml", b"Subject: x\n\nslow-marker words\n")
    spam = MailItem("spam.eml", b"Subject: cheap pills\n\nbuy cheap pills now\n")
    ham = MailItem("ham.eml", b"Subject: lunch\n\nlunch on friday\n")
    with Filter.open(Config(), f"sqlite:///{tmp_path / 'db'}") as f:
        summary = f.train([(True, spam), (True, slow), (False, ham)])
        assert (summary.trained_spam, summary.trained_ham) == (1, 1)
        assert summary.refused == (Refusal("slow.eml", "cannot be read: TimeoutError: regular-expression match exceeded its 5.0s time limit"),)
        results = list(f.classify([spam, slow, ham]))
    assert [type(r) for r in results] == [Verdict, Refusal, Verdict]
    assert [r.verdict for r in results if isinstance(r, Verdict)] == ["spam", "ham"]


@pytest.mark.usefixtures("tokenizer_times_out_on_marked_mail")
def test_classify_exits_65_and_filter_passes_through_when_tokenizing_fails(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'db'}"
    tmp_path = tmp_path / "mail"  # the messages apart from the database file
    tmp_path.mkdir()
    (tmp_path / "spam.eml").write_bytes(b"Subject: cheap pills\n\nbuy cheap pills now\n")
    (tmp_path / "ham.eml").write_bytes(b"Subject: lunch\n\nlunch on friday\n")
    (tmp_path / "slow.eml").write_bytes(b"Subject: x\n\nslow-marker\n")
    runner = CliRunner()
    result = runner.invoke(app, ["--db", db, "train", "--spam", str(tmp_path / "spam.eml"), "--spam", str(tmp_path / "slow.eml"), "--ham", str(tmp_path / "ham.eml")])
    assert result.exit_code == exitcodes.DATA_ERROR, result.output
    assert result.stdout.startswith("trained 1 spam, 1 ham")
    result = runner.invoke(app, ["--db", db, "classify", "--format", "tsv", str(tmp_path)])
    assert result.exit_code == exitcodes.DATA_ERROR
    assert len(result.stdout.splitlines()) == 3  # the header and two verdicts
    assert "skipped" in result.stderr and "slow.eml: cannot be read: TimeoutError" in result.stderr
    slow = b"Subject: x\r\n\r\nslow-marker\r\n"
    result = runner.invoke(app, ["--db", db, "filter"], input=slow)
    assert result.exit_code == exitcodes.DATA_ERROR
    assert result.stdout_bytes == slow


# -- 3, 4, 6. only the added lines and forged fields differ ---------------------


def added_block(fields: list[tuple[str, str]], eol: bytes) -> bytes:
    return b"".join(f"{n}: {v}".encode() + eol for n, v in fields)


# A line holding a lone CR ends the header for a CRLF parser, not for
# procmail, which reads on to the first LF LF: the field is in its header.
FORGED_PAST_CRLF_BLANK = b"From: a@b\n\r\nX-Spam-Flag: YES\n\nbody\n"
# The price: procmail reads a CRLF message as all header, so a field of ours
# at the start of a body line goes too.
CRLF_FIELD_IN_BODY = b"Subject: x\r\n\r\nX-Spam-Flag: NO\r\nbody\r\n"
# A CRLF parser reads their bodies without that line now: other digests.
BODY_CHANGED = (FORGED_PAST_CRLF_BLANK, CRLF_FIELD_IN_BODY)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            b"X-Spam-Flag: NO\rFrom: a@example.com\rSubject: classic mac\r\rThis body must survive filtering.\rSecond line.\r",
            added_block(SPAM_FIELDS, b"\r") + b"From: a@example.com\rSubject: classic mac\r\rThis body must survive filtering.\rSecond line.\r",
            id="CR-only-forged-first",
        ),
        pytest.param(
            b"From: a@example.com\rSubject: classic mac\r\rbody\r", added_block(SPAM_FIELDS, b"\r") + b"From: a@example.com\rSubject: classic mac\r\rbody\r", id="CR-only"
        ),
        pytest.param(b"Subject: x\r\nFrom: a@b\n\nbody\n", added_block(SPAM_FIELDS, b"\r\n") + b"Subject: x\r\nFrom: a@b\n\nbody\n", id="LF-with-one-early-CRLF"),
        pytest.param(
            b"Subject: x\r\n\r\nline\r\nbinary\n\x00\xff\nend\r\n",
            added_block(SPAM_FIELDS, b"\r\n") + b"Subject: x\r\n\r\nline\r\nbinary\n\x00\xff\nend\r\n",
            id="CRLF-with-bare-LF",
        ),
        pytest.param(b"Subject: x\r\n\nbody\r\n", added_block(SPAM_FIELDS, b"\r\n") + b"Subject: x\r\n\nbody\r\n", id="CRLF-then-LF-blank-line"),
        pytest.param(
            b"From MAILER-DAEMON Fri Jul  8 12:08:34 2011\nSubject: x\nX-Spam-Status: No\n\tfolded\nTo: b\n\nbody",
            b"From MAILER-DAEMON Fri Jul  8 12:08:34 2011\n" + added_block(SPAM_FIELDS, b"\n") + b"Subject: x\nTo: b\n\nbody",
            id="mbox-envelope-folded-forgery",
        ),
        pytest.param(
            b"Subject: hello\rX-Spam-Status: No, verdict=ham score=0.000000\rX-Spam-Flag: NO\nTo: b\n\nbody\n",
            added_block(SPAM_FIELDS, b"\n") + b"Subject: hello\nTo: b\n\nbody\n",
            id="forged-after-bare-CR",
        ),
        pytest.param(b"Subject: a\rX-Spam-Flag: NO\n\nbody", added_block(SPAM_FIELDS, b"\n") + b"Subject: a\n\nbody", id="forged-between-CR-and-blank-line"),
        pytest.param(
            b"Subject: hi\nno colon here\nX-Spam-Status: No\n\nbody\n", added_block(SPAM_FIELDS, b"\n") + b"Subject: hi\nno colon here\n\nbody\n", id="colon-less-line"
        ),
        pytest.param(
            b"Subject: hi\nX-Spam-Flag\x00: NO\n\nbody\n", added_block(SPAM_FIELDS, b"\n") + b"Subject: hi\nX-Spam-Flag\x00: NO\n\nbody\n", id="NUL-in-field-name"
        ),
        pytest.param(b"Subject: no body", added_block(SPAM_FIELDS, b"\n") + b"Subject: no body", id="no-line-break"),
        pytest.param(b"", added_block(SPAM_FIELDS, b"\n"), id="empty"),
        pytest.param(b"Subject: x\n\nX-Spam-Flag: NO\nbody\n", added_block(SPAM_FIELDS, b"\n") + b"Subject: x\n\nX-Spam-Flag: NO\nbody\n", id="field-in-body"),
        pytest.param(FORGED_PAST_CRLF_BLANK, added_block(SPAM_FIELDS, b"\n") + b"From: a@b\n\r\n\nbody\n", id="forged-past-CRLF-blank-line"),
        pytest.param(CRLF_FIELD_IN_BODY, added_block(SPAM_FIELDS, b"\r\n") + b"Subject: x\r\n\r\nbody\r\n", id="CRLF-field-in-body"),
    ],
)
def test_filtered_output_is_the_input_with_fields_added_at_the_top_and_forged_ones_removed(raw: bytes, expected: bytes) -> None:
    out = with_filter_headers(raw, SPAM_FIELDS)
    assert out == expected
    assert digest_bytes(out) == digest_bytes(without_added(out, SPAM_FIELDS))
    assert (digest_bytes(out) == digest_bytes(raw)) is (raw not in BODY_CHANGED)
    assert with_filter_headers(out, SPAM_FIELDS) == out  # filtering twice changes nothing more


def python_email_reads(out: bytes, name: str) -> list[str]:
    msg = email.message_from_bytes(out, policy=email.policy.compat32)
    return [str(v) for v in msg.get_all(name, [])]


def procmail_tool(name: str) -> str:
    """The path of a program of the Debian package procmail."""
    path = shutil.which(name)
    if path is None and os.environ.get("CI") != "true":
        pytest.skip(f"{name} (Debian package procmail) is not installed")
    assert path is not None, f"{name} (Debian package procmail) is needed in CI"
    return path


@pytest.fixture(scope="module")
def formail() -> str:
    return procmail_tool("formail")


def formail_reads(formail: str, out: bytes, name: str) -> list[str]:
    proc = subprocess.run([formail, "-x", name], input=out, capture_output=True, timeout=30, check=True)
    return [line.strip() for line in proc.stdout.decode("latin-1").splitlines()]


FORGERIES = {
    "bare-CR": b"Subject: hello\rX-Spam-Status: No, forged\rX-Spam-Flag: NO\nFrom: a@b\n\nbody\n",
    "colon-less": b"Subject: hello\nnot a header\nX-Spam-Status: No, forged\n\nbody\n",
    "NUL-name": b"Subject: hello\nX-Spam-Flag\x00: NO\nX-Spam-Status: No, forged\n\nbody\n",
    "CR-then-CRLF-blank": b"Subject: hello\r\r\nX-Spam-Status: No, forged\n\nbody\n",
    "CRLF-lowercase": b"Subject: hello\r\nx-spam-status: No, forged\r\n\r\nbody\r\n",
    "mbox": b"From a@b Mon Jan  1 00:00:00 2024\nX-Spam-Status: No, forged\nSubject: x\n\nbody\n",
    "mbox-bare-CR": b"From a@b Mon Jan  1 00:00:00 2024\rX-Spam-Status: No, forged\nSubject: x\n\nbody\n",
    "space-before-colon": b"Subject: hello\nX-Spam-Status : No, forged\n\nbody\n",
    "after-CRLF-blank": b"Subject: hello\n\r\nX-Spam-Status: No, forged\n\nbody\n",
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_parsers_read_the_real_verdict_and_never_a_forged_one(name: str, formail: str) -> None:
    raw = FORGERIES[name]
    out = with_filter_headers(raw, SPAM_FIELDS)
    assert b"forged" not in out
    assert python_email_reads(out, "X-Spam-Status") == [SPAM_FIELDS[0][1]]
    assert python_email_reads(out, "X-Spam-Flag") == ["YES"]
    assert "forged" not in " ".join(formail_reads(formail, out, "X-Spam-Status"))
    assert formail_reads(formail, out, "X-Spam-Flag") == ["YES"]
    if name != "mbox-bare-CR":
        # (There formail takes the envelope line to run to the LF, over the
        # fields added after its CR, where Python's parser starts the header.)
        assert formail_reads(formail, out, "X-Spam-Status") == [SPAM_FIELDS[0][1]]


@pytest.fixture(scope="module")
def procmail() -> str:
    return procmail_tool("procmail")


def procmail_files(procmail: str, message: bytes, home: Path) -> str:
    """Where the README's procmail rule files ``message``: "Junk" or "inbox"."""
    rc = home / "procmailrc"
    rc.write_text(f"MAILDIR={home}\n:0\n* ^X-Spam-Flag: YES\nJunk/\n:0\ninbox/\n")
    subprocess.run([procmail, "-m", str(rc)], input=message, capture_output=True, timeout=30, check=True)
    (folder,) = [name for name in ("Junk", "inbox") if (home / name / "new").is_dir() and any((home / name / "new").iterdir())]
    shutil.rmtree(home / folder)
    return folder


def test_procmail_files_by_the_verdict_not_by_a_flag_forged_past_a_crlf_blank_line(tmp_path: Path, procmail: str) -> None:
    """To a CRLF parser the line holding a lone CR ends the header; procmail
    reads on to the LF LF, and met the forged flag in the header."""
    raw = FORGED_PAST_CRLF_BLANK
    assert procmail_files(procmail, raw, tmp_path) == "Junk"  # the forgery works on procmail
    (tmp_path / "spam.eml").write_bytes(b"Subject: cheap pills\n\nbuy cheap pills now\n")
    (tmp_path / "ham.eml").write_bytes(b"Subject: minutes\n\nthe meeting minutes attached\n")
    assert spamfilter(tmp_path, "train", "--spam", "spam.eml", "--ham", "ham.eml")[0] == 0
    code, out, _ = spamfilter(tmp_path, "filter", stdin=raw)
    assert code == exitcodes.UNSURE
    assert b"X-Spam-Status: No, verdict=unsure" in out and b"X-Spam-Flag" not in out
    assert procmail_files(procmail, out, tmp_path) == "inbox"


# -- the property: nothing but the added and forged lines changes ---------------

LINE_ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])
TEXT = st.binary(max_size=12).map(lambda b: re.sub(rb"(?i)x-spam-", b"", b))
FORGED = st.sampled_from([b"X-Spam-Status: No, forged", b"x-spam-flag:NO", b"X-SPAM-SCORE \t: 0.0", b"X-Spam-Status: No,\n\tforged"])


HEADER_TEXT = st.binary(max_size=12).map(lambda b: re.sub(rb"(?i)x-spam-|[\r\n]", b"", b))


@st.composite
def messages(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """(message, the message without its forged fields), line endings mixed."""
    envelope = draw(st.sampled_from([b"", b"From a@b Mon Jan  1 00:00:00 2024"]))
    lines: list[tuple[bytes, bool]] = []  # (line, is forged)
    if envelope:
        lines.append((envelope + draw(st.sampled_from([b"\n", b"\r\n"])), False))
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            lines.append((draw(FORGED) + draw(LINE_ENDS), True))
        else:
            name = draw(st.sampled_from([b"Subject", b"To", b"a"])) + draw(st.sampled_from([b": ", b":", b" "]))
            lines.append((name + draw(HEADER_TEXT) + draw(LINE_ENDS), False))
    blank = draw(st.sampled_from([b"\n", b"\r\n", b""]))
    # Without a blank line the body is header too, and procmail reads on
    # past a CRLF one (to the first LF LF): field names in the body only
    # after an LF blank line (`crlf_blank_messages` has the others).
    body_piece = st.one_of(TEXT, LINE_ENDS, st.just(b"X-Spam-Flag: NO")) if blank == b"\n" else st.one_of(HEADER_TEXT, LINE_ENDS)
    lines.append((blank + draw(st.lists(body_piece, max_size=8).map(b"".join)), False))
    # A line ending in CR before one starting with LF would end in CRLF.
    lines = [(line + b"\n" if line.endswith(b"\r") and lines[i + 1][0].startswith(b"\n") else line, forged) for i, (line, forged) in enumerate(lines[:-1])] + lines[-1:]
    clean = b""
    for i, (line, forged) in enumerate(lines):
        if not forged:
            clean += line
        elif clean.endswith(b"\r") and line.endswith(b"\n"):
            # After a bare CR a forged field ending in (CR)LF takes the CR with
            # it and leaves its own line break: the next line stays a line of
            # its own for parsers that split at LF only.
            clean = clean[:-1] + (b"\r\n" if line.endswith(b"\r\n") else b"\n")
    return b"".join(line for line, _ in lines), clean


# Lines indented too: after a forged field past the header they are the
# body's own (code, a quoted bounce), not its continuation, and stay.
BODY_LINE = st.binary(min_size=1, max_size=12).map(lambda b: re.sub(rb"(?i)x-spam-|[\r\n]", b"", b) or b"text")


@st.composite
def crlf_blank_messages(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """(message, the message without the fields procmail would read), for a
    header ending at a CRLF empty line: procmail reads on to the first LF
    LF, and sees a field at the start of each line after an LF up to there
    (or right after a field removed before it)."""
    raw = draw(st.sampled_from([b"Subject: x\r\n", b"Subject: x\n", b""])) + b"\r\n"
    clean = raw
    dropped_last = False
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["forged", "text", "empty"]))
        if kind == "empty" and raw.endswith(b"\r"):
            kind = "text"  # a CR then an LF is one CRLF line end, not an empty line
        if kind == "empty":
            line = b"\n"
        else:
            line = (b"X-Spam-Flag: NO" if kind == "forged" else draw(BODY_LINE)) + draw(LINE_ENDS)
        seen = b"\n\n" not in raw and (raw.endswith(b"\n") or dropped_last)
        dropped_last = kind == "forged" and seen
        raw += line
        if not dropped_last:
            clean += line
    return raw, clean


@settings(max_examples=300, derandomize=True, deadline=None)
@given(message=crlf_blank_messages())
def test_after_a_crlf_blank_line_the_fields_procmail_reads_are_removed_and_nothing_else(message: tuple[bytes, bytes]) -> None:
    raw, clean = message
    out = with_filter_headers(raw, SPAM_FIELDS)
    assert without_added(out, SPAM_FIELDS) == clean, (raw, out)
    assert digest_bytes(out) == digest_bytes(clean)
    assert with_filter_headers(out, SPAM_FIELDS) == out


def test_indented_body_lines_after_a_forged_field_in_a_crlf_body_are_kept() -> None:
    raw = b"From: a@b.example\r\nSubject: s\r\n\r\nThe bounce said:\r\nX-Spam-Status: Yes, hits=9\r\n    def main():\r\n        return 0\r\nEnd.\r\n"
    out = with_filter_headers(raw, SPAM_FIELDS)
    assert without_added(out, SPAM_FIELDS) == raw.replace(b"X-Spam-Status: Yes, hits=9\r\n", b"")


def without_added(out: bytes, fields: list[tuple[str, str]]) -> bytes:
    for eol in (b"\r\n", b"\n", b"\r"):
        block = added_block(fields, eol)
        if block in out:
            return out.replace(block, b"", 1)
        # A header of one folded line without a line break: the fields follow it.
        if out.endswith(eol + block[: -len(eol)]):
            return out[: -len(block)]
    raise AssertionError(f"added fields not found in {out!r}")


@settings(max_examples=400, derandomize=True, deadline=None)
@given(raw=st.binary(max_size=80).map(lambda b: re.sub(rb"(?i)x-spam-", b"", b)), eol=LINE_ENDS, envelope=st.booleans())
def test_random_bytes_pass_through_byte_for_byte_but_the_added_lines(raw: bytes, eol: bytes, envelope: bool) -> None:
    raw = raw.replace(b"\n", eol)
    if envelope:
        raw = b"From a@b Mon Jan  1 00:00:00 2024\n" + raw
    for fields in (SPAM_FIELDS, HAM_FIELDS):
        out = with_filter_headers(raw, fields)
        assert without_added(out, fields) == raw
        assert digest_bytes(out) == digest_bytes(raw)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(message=messages())
def test_filtering_removes_exactly_the_forged_fields_and_adds_its_own(message: tuple[bytes, bytes]) -> None:
    raw, clean = message
    out = with_filter_headers(raw, SPAM_FIELDS)
    rest = without_added(out, SPAM_FIELDS)
    assert rest == clean, (raw, out)
    assert digest_bytes(out) == digest_bytes(raw) == digest_bytes(with_filter_headers(out, HAM_FIELDS))
    assert python_email_reads(out, "X-Spam-Status")[:1] == [SPAM_FIELDS[0][1]]
    assert "forged" not in " ".join(python_email_reads(out, "X-Spam-Status"))


# -- 5. memory ---------------------------------------------------------------------


def test_filtering_a_50_mb_crlf_message_copies_nothing(tmp_path: Path) -> None:
    line = b"QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0\r\n"
    raw = b"From: a@b\r\nX-Spam-Flag: NO\r\nSubject: big\r\n\r\n" + line * (50_000_000 // len(line))
    out_path = tmp_path / "out.eml"
    with open(out_path, "wb") as sink:
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            for piece in filtered_pieces(raw, SPAM_FIELDS):
                sink.write(piece)
            digest = digest_bytes(raw)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    # Before, the output alone was a CRLF-to-LF-and-back copy of the message
    # (and a join of the pieces): over 100 MB for this one.
    assert peak - before < 10_000_000, f"{(peak - before) / 1e6:.1f} MB"
    out = out_path.read_bytes()
    assert len(out) == len(raw) - len(b"X-Spam-Flag: NO\r\n") + len(added_block(SPAM_FIELDS, b"\r\n"))
    assert out.endswith(raw[-1000:])
    assert digest_bytes(out) == digest


def test_the_readmes_procmail_recipe_files_spam_in_junk_and_ham_in_the_inbox(tmp_path: Path, procmail: str) -> None:
    # The recipe of README.md and docs/integration.md, whole, through the
    # real procmail: the filter pipe (`:0fw`), then the rule on its field.
    (tmp_path / "spam.eml").write_bytes(b"Subject: cheap pills\n\nbuy cheap pills now\n")
    (tmp_path / "ham.eml").write_bytes(b"Subject: minutes\n\nthe meeting minutes attached\n")
    assert spamfilter(tmp_path, "train", "--spam", "spam.eml", "--ham", "ham.eml")[0] == 0
    rc = tmp_path / "procmailrc"
    rc.write_text(
        f"MAILDIR={tmp_path}\nSPAMFILTER_DB=sqlite:///{tmp_path / 'tokens.db'}\n"
        f":0fw\n| {sys.executable} -m spamfilter filter --always-zero\n:0\n* ^X-Spam-Flag: YES\nJunk/\n:0\ninbox/\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAMFILTER_")} | {"HOME": str(tmp_path)}
    for raw in (b"Subject: pills\n\ncheap pills buy now\n", b"Subject: the minutes\n\nminutes of the meeting\n"):
        subprocess.run([procmail, "-m", str(rc)], input=raw, capture_output=True, env=env, timeout=60, check=True)
    (junk,) = (tmp_path / "Junk" / "new").iterdir()
    (inbox,) = (tmp_path / "inbox" / "new").iterdir()
    assert b"X-Spam-Flag: YES" in junk.read_bytes() and b"\n\ncheap pills buy now\n" in junk.read_bytes()
    assert b"X-Spam-Status: No, verdict=ham" in inbox.read_bytes() and b"X-Spam-Flag" not in inbox.read_bytes()
