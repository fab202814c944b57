"""The spamd protocol (SPAMC/SPAMD 1.x) that SpamAssassin's ``spamc`` speaks:
request heads, replies, the score line, and a small client. Standard library
only, so a delivery script that talks to ``spamfilter serve`` starts fast.

A request is a command line, header lines, an empty line and the message::

    CHECK SPAMC/1.5\\r\\n
    User: alice\\r\\n
    Content-length: 1234\\r\\n
    \\r\\n
    <1234 bytes>

and a reply a status line (``SPAMD/1.5 <sysexits code> <name>``), header
lines, an empty line and, for most commands, a body of ``Content-length``
bytes. An error reply is the status line alone (with an explanation after
the name) and an empty line; the server then closes the connection.

The score line. spamd answers ``Spam: True ; 15.0 / 5.0``: a score and the
threshold above which the message is spam. spamfilter's score is the
logit of the message's calibrated P(spam), log(p / (1 - p)), and the
threshold the configured spam bound on it (``spam_min``: logit of
``spam_cutoff``, or the Bayes rule's bound from the costs), so the line says
``True`` exactly when ``spamfilter classify`` says spam (logit p > spam_min). An
unsure message is ``False``: spamd has no third verdict. The numbers are
natural-log odds, not SpamAssassin points: with the default costs the
threshold is log(10 / 0.2 - 1) = 3.89, a message at P(spam) = 0.999 scores
6.9. Besides ``Spam`` every verdict reply carries ``Verdict`` (spam, ham or
unsure), ``Probability`` (the calibrated P(spam)), ``Log-odds`` (the
model's own, for ranking), ``Model`` (``model_id``) and ``Event-model``
(the event model it scored with) headers, which spamc ignores and
``spamfilter filter --connect`` reads.
"""

from __future__ import annotations

import hashlib
import math
import re
import socket
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spamfilter.config import absolute_db_url, host_name_problem
from spamfilter.errors import ProtocolError
from spamfilter.verdicts import Decision

#: The protocol version the server answers with.
VERSION = "1.5"
#: The default spamd port.
DEFAULT_PORT = 783

# sysexits.h codes used in replies (spamc prints them, spamd sends them).
EX_OK = 0
EX_USAGE = 64
EX_DATAERR = 65
EX_NOUSER = 67
EX_UNAVAILABLE = 69
EX_SOFTWARE = 70
EX_IOERR = 74
EX_TEMPFAIL = 75
EX_PROTOCOL = 76
EX_NOPERM = 77
EX_TOOBIG = 98

EX_NAMES = {
    EX_OK: "EX_OK",
    EX_USAGE: "EX_USAGE",
    EX_DATAERR: "EX_DATAERR",
    EX_NOUSER: "EX_NOUSER",
    EX_UNAVAILABLE: "EX_UNAVAILABLE",
    EX_SOFTWARE: "EX_SOFTWARE",
    EX_IOERR: "EX_IOERR",
    EX_TEMPFAIL: "EX_TEMPFAIL",
    EX_PROTOCOL: "EX_PROTOCOL",
    EX_NOPERM: "EX_NOPERM",
    EX_TOOBIG: "EX_TOOBIG",
}

#: Commands that carry a message.
MESSAGE_COMMANDS = frozenset({"CHECK", "SYMBOLS", "REPORT", "REPORT_IFSPAM", "PROCESS", "HEADERS", "TELL"})
COMMANDS = MESSAGE_COMMANDS | {"PING", "SKIP"}

#: A request head (command line and header lines) may not be longer, and may
#: have at most MAX_HEADERS header lines (spamd's limit).
MAX_HEAD = 8192
MAX_HEADERS = 255

_COMMAND_RE = re.compile(r"([A-Z_]+) SPAMC/(\d{1,3}\.\d{1,3})")
# Unix user names, and mail addresses for servers that key users by them.
_USER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@+-]{0,63}")
_TARGETS = ("local", "remote")
#: The request headers read (by their lower-case names): each may come once.
#: With two Content-length headers the last one won, and a proxy in front
#: that took the first would frame the request differently from us.
_READ_HEADERS = {
    "content-length": "Content-length",
    "user": "User",
    "message-class": "Message-class",
    "set": "Set",
    "remove": "Remove",
    "user-model": "User-model",
    "compress": "Compress",
}
_DECISIONS = frozenset(d.value for d in Decision)


@dataclass(frozen=True, slots=True)
class Request:
    """A parsed request head.

    content_length: the message's size in bytes; None for PING and SKIP.
    user: the ``User`` header, or None.
    message_class: "spam" or "ham" (TELL's ``Message-class``), or None.
    set_local, remove_local: TELL's ``Set: local`` / ``Remove: local``.
    unusable_user: a ``User`` that is no user name this server can give a
        model (``EXAMPLE\\alice``, a space, a non-ASCII letter), or None.
        Only per-user mode refuses it; a one-model server has no use for it.
    own_model: ``User-model: own`` (spamfilter's own header, which spamd
        would ignore): the request is to be answered with the model of the
        ``User`` it names or refused, never with a model every user shares
        (``spamfilter --user NAME mark --connect`` sends it).
    compressed: ``Compress: zlib`` (``spamc -z``): the ``Content-length``
        bytes are the message compressed with zlib (`inflate`).
    """

    command: str
    version: str
    content_length: int | None = None
    user: str | None = None
    message_class: str | None = None
    set_local: bool = False
    remove_local: bool = False
    unusable_user: str | None = None
    own_model: bool = False
    compressed: bool = False


def inflate(data: bytes, limit: int) -> bytes:
    """The message of a ``Compress: zlib`` request, of at most ``limit``
    bytes. Raises ``ProtocolError``: not zlib data, cut short, or (with
    ``EX_TOOBIG``) over ``limit`` once inflated, which is not inflated
    further."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise ProtocolError(f"the compressed message is not zlib data ({exc})") from None
    if len(out) > limit:
        raise ProtocolError(f"message over {limit} bytes once decompressed", EX_TOOBIG)
    if not inflater.eof or inflater.unused_data:
        raise ProtocolError("the compressed message is cut short, or has bytes after its end")
    return out


def _is_count(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` takes "²" too, which int() refuses
    (a ValueError that ended the daemon, from one Content-length)."""
    return text.isascii() and text.isdigit()


def _targets(value: str, header: str) -> set[str]:
    names = {part.strip().lower() for part in value.split(",") if part.strip()}
    if not names or not names <= set(_TARGETS):
        raise ProtocolError(f"{header} must list local and/or remote")
    return names


def parse_head(head: bytes) -> Request:
    """The request in ``head``: the bytes before the empty line, lines ended
    by CRLF (a bare LF is accepted too). Raises ``ProtocolError``."""
    if len(head) > MAX_HEAD:
        raise ProtocolError(f"request head over {MAX_HEAD} bytes")
    # Latin-1 reads any byte: a header value that is not ASCII (a User
    # with an accent) is judged where it is used, not by the whole head.
    text = head.decode("latin-1")
    lines = text.replace("\r\n", "\n").split("\n")
    if len(lines) - 1 > MAX_HEADERS:
        raise ProtocolError("too many headers")
    m = _COMMAND_RE.fullmatch(lines[0])
    if m is None or m.group(1) not in COMMANDS:
        raise ProtocolError("bad request line (expected COMMAND SPAMC/1.x)")
    command, version = m.groups()
    values = _header_values(lines[1:])
    length: int | None = None
    if "content-length" in values:
        if not _is_count(values["content-length"]) or len(values["content-length"]) > 12:
            raise ProtocolError("Content-length is not a number")
        length = int(values["content-length"])
    user = values.get("user")
    unusable = None
    if user is not None and not _USER_RE.fullmatch(user):
        user, unusable = None, user
    message_class = values["message-class"].lower() if "message-class" in values else None
    if message_class not in (None, "spam", "ham"):
        raise ProtocolError("Message-class must be spam or ham")
    set_to = _targets(values["set"], "Set") if "set" in values else set()
    remove_from = _targets(values["remove"], "Remove") if "remove" in values else set()
    own_model, compressed = _flag(values, "user-model", "own"), _flag(values, "compress", "zlib")
    if compressed and length is None:
        raise ProtocolError("Compress needs a Content-length")
    if "local" in set_to and message_class is None:
        raise ProtocolError("Set: local needs a Message-class")
    if "local" in set_to and "local" in remove_from:
        # As spamd: learning a message and forgetting it in one request is
        # no request a client means.
        raise ProtocolError("Set: local and Remove: local in one request")
    return Request(command, version, length, user, message_class, "local" in set_to, "local" in remove_from, unusable, own_model, compressed)


def is_bare_request(line: bytes) -> bool:
    """Whether the request line ``line`` is a whole request head, as spamd
    reads it: a PING or SKIP of a protocol before 1.5, and any request of
    protocol 1.0, have no headers (spamd answers such a PING at once, and
    reads a 1.0 request's message from the next line to the end of input)."""
    m = _COMMAND_RE.fullmatch(line.decode("latin-1"))
    if m is None or m.group(1) not in COMMANDS:
        return False
    version = tuple(int(x) for x in m.group(2).split("."))
    return version <= (1, 0) or (m.group(1) in ("PING", "SKIP") and version < (1, 5))


def _header_values(lines: list[str]) -> dict[str, str]:
    """The values of the header ``lines`` by lower-case name. One of
    `_READ_HEADERS` given twice is an error; other headers are ignored, as
    the protocol asks."""
    values: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon:
            raise ProtocolError("header not in 'Name: value' format")
        name = name.strip().lower()
        if name in _READ_HEADERS:
            if name in values:
                raise ProtocolError(f"{_READ_HEADERS[name]} is given twice")
            values[name] = value.strip()
    return values


def _flag(values: dict[str, str], name: str, expected: str) -> bool:
    """Whether header ``name`` is given; its only value is ``expected``."""
    if name not in values:
        return False
    if values[name].lower() != expected:
        raise ProtocolError(f"{_READ_HEADERS[name]} must be {expected}")
    return True


def reply_head(code: int, headers: Iterable[tuple[str, str]] = (), *, text: str = "") -> bytes:
    """A reply's status line, header lines and the empty line."""
    status = f"SPAMD/{VERSION} {code} {EX_NAMES.get(code, 'EX_SOFTWARE')}"
    if text:
        status += " " + " ".join(text.split())  # one line, whatever the text
    lines = [status, *(f"{name}: {value}" for name, value in headers), "", ""]
    return "\r\n".join(lines).encode("utf-8", "replace")


def _number(x: float) -> str:
    # spamc parses the digits itself and clamps to +-1e10: keep it finite.
    if math.isnan(x):
        x = 0.0
    # A score that rounds to zero is sent as 0.0000, never -0.0000 (which
    # spamc prints as 0.0 while it prints -0.0001 as -0.0).
    return f"{min(max(x, -1e9), 1e9):.4f}".replace("-0.0000", "0.0000")


def model_id(url: str, owner: str, settings: str = "") -> str:
    """A short name of the model of ``owner`` in the database at ``url``
    scored with ``settings`` (``config.scoring_settings``; 16 hex digits of
    a SHA-256), sent as the ``Model`` header of a verdict so that
    ``spamfilter filter`` uses a daemon it found by itself only when it
    scores with the model and the settings the filter would use (a
    relative SQLite path counts from the working folder: ``absolute_db_url``)."""
    return hashlib.sha256(f"{absolute_db_url(url)}\0{owner}\0{settings}".encode()).hexdigest()[:16]


def verdict_headers(verdict: Decision, score: float, log_odds: float, threshold: float, model: str = "", event_model: str = "") -> list[tuple[str, str]]:
    """The ``Spam`` line (see the module docstring for the mapping) and the
    ``Verdict``, ``Probability``, ``Log-odds`` and (given) ``Model`` and
    ``Event-model`` headers."""
    is_spam = "True" if verdict is Decision.SPAM else "False"
    p = min(max(score, 1e-300), 1.0 - 1e-16)
    return (
        [
            ("Spam", f"{is_spam} ; {_number(math.log(p / (1.0 - p)))} / {_number(threshold)}"),
            ("Verdict", verdict),
            ("Probability", f"{score:.6f}"),
            ("Log-odds", f"{log_odds:+.4f}"),
        ]
        + ([("Model", model)] if model else [])
        + ([("Event-model", event_model)] if event_model else [])
    )


def before(version: str, major: int, minor: int) -> bool:
    """Whether a client's protocol ``version`` is older than major.minor."""
    its_major, _, its_minor = version.partition(".")
    return (int(its_major), int(its_minor)) < (major, minor)


def before_1_3(version: str) -> bool:
    """Whether a client speaks the protocol before 1.3 (Exim's ``spam``
    condition sends ``SPAMC/1.2``): it reads a reply's ``Spam`` line only
    as the first header, with nothing after it but the empty line, and the
    body until the connection closes (spamd answers it so)."""
    return before(version, 1, 3)


def body_start(raw: bytes) -> int | None:
    """Where spamc takes a message's body to begin when it puts a HEADERS
    reply back together: after the first CRLF CRLF or LF LF; None if neither."""
    crlf = raw.find(b"\r\n\r\n")
    lf = raw.find(b"\n\n")
    found = [i + n for i, n in ((crlf, 4), (lf, 2)) if i >= 0]
    return min(found) if found else None


# -- addresses -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Address:
    """Where a server listens: a Unix socket ``path``, or ``host`` and ``port``."""

    host: str = ""
    port: int = 0
    path: str = ""

    def __str__(self) -> str:
        if self.path:
            return self.path
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str, default_port: int = DEFAULT_PORT) -> Address:
    """``/path``, ``unix:/path``, ``HOST:PORT``, ``[V6]:PORT``, ``HOST`` (port 783)."""
    if text.startswith("unix:"):
        text = text[5:]
        if not text:
            raise ProtocolError("empty socket path", EX_USAGE)
        return Address(path=text)
    if text.startswith("/") or text.startswith("."):
        return Address(path=text)
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\](?::(\d+))?|([^:\[\]]+)(?::(\d+))?", text)
    if m is None:
        raise ProtocolError(f"not an address: {text!r} (HOST:PORT or a socket path)", EX_USAGE)
    host = m.group(1) or m.group(3)
    port_text = m.group(2) or m.group(4)
    port = int(port_text) if port_text else default_port
    if not 0 <= port <= 65535:
        raise ProtocolError(f"port out of range in {text!r}", EX_USAGE)
    problem = host_name_problem(host)
    if problem is not None:
        raise ProtocolError(f"{problem}: {text!r}", EX_USAGE)
    return Address(host=host, port=port)


def connect(address: Address, timeout: float) -> socket.socket:
    """A connected socket to ``address``; raises OSError."""
    if address.path:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(address.path)
        except BaseException:
            sock.close()
            raise
        return sock
    return socket.create_connection((address.host, address.port), timeout=timeout)


# -- client --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """A server's reply: the sysexits ``code``, its header fields (names in
    lower case), the body, and what the status line says after the code's
    name (an error's explanation)."""

    code: int
    headers: dict[str, str]
    body: bytes
    text: str = ""


def _recv(sock: socket.socket, size: int, deadline: float) -> bytes:
    """``sock.recv(size)``, within the whole reply's ``deadline`` (a
    ``time.monotonic()`` time): a server sending a byte now and then kept a
    delivery waiting for minutes, each wait within the socket's timeout."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the reply took longer than the timeout")
    sock.settimeout(left)
    return sock.recv(size)


def _read_reply(sock: socket.socket, limit: int, timeout: float) -> Reply:
    deadline = time.monotonic() + timeout
    data = bytearray()
    while b"\r\n\r\n" not in data:
        chunk = _recv(sock, 65536, deadline)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_HEAD and b"\r\n\r\n" not in data[:MAX_HEAD]:
            raise ProtocolError("reply head too long")
    head, sep, rest = bytes(data).partition(b"\r\n\r\n")
    lines = head.decode("utf-8", "replace").split("\r\n")
    m = re.match(r"SPAMD/\d+\.\d+ ([0-9]{1,3})\b", lines[0])
    if m is None:
        raise ProtocolError("bad reply line")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    code = int(m.group(1))
    if code != EX_OK:
        words = lines[0][m.end() :].split(None, 1)  # the code's name, then why
        text = words[1] if len(words) == 2 and words[0].startswith("EX_") else " ".join(words)
        return Reply(code, headers, b"", text[:200])
    if not sep:
        # A head cut off (the server died, or something else answered):
        # what came is no whole answer, and its message must not be used.
        raise ProtocolError("the reply ended inside its head")
    length_text = headers.get("content-length")
    if length_text is None:
        return Reply(code, headers, rest)
    if not _is_count(length_text) or len(length_text) > 18:
        raise ProtocolError(f"bad Content-length in the reply: {length_text[:20]!r}")
    length = int(length_text)
    if length > limit:
        raise ProtocolError("reply larger than asked for")
    body = bytearray(rest)
    while len(body) < length:
        chunk = _recv(sock, min(1 << 20, length - len(body)), deadline)
        if not chunk:
            raise ProtocolError(f"reply ended after {len(body)} of {length} bytes")
        body += chunk
    if len(body) != length:
        raise ProtocolError("reply longer than its Content-length")
    return Reply(code, headers, bytes(body))


def request(address: Address, command: str, message: bytes, *, user: str | None = None, headers: Sequence[tuple[str, str]] = (), timeout: float = 30.0) -> Reply:
    """Send one request and read the whole reply. Raises OSError (no server,
    a timeout, a broken connection) or ``ProtocolError`` (not a spamd reply,
    or a body of another length than announced)."""
    fields = [*headers]
    if user:
        if not _USER_RE.fullmatch(user):
            # The daemon refuses such a name too; say so before connecting,
            # so the caller falls back instead of failing.
            raise ProtocolError(f"the user name {user!r} cannot be sent to a spamd server")
        fields.append(("User", user))
    fields.append(("Content-length", str(len(message))))
    head = "".join(f"{n}: {v}\r\n" for n, v in fields)
    with connect(address, timeout) as sock:
        sock.sendall(f"{command} SPAMC/{VERSION}\r\n{head}\r\n".encode("ascii"))
        sock.sendall(message)
        sock.shutdown(socket.SHUT_WR)
        # PROCESS adds a few header lines; anything much longer is not ours.
        return _read_reply(sock, limit=len(message) + 65536, timeout=timeout)


def _answered_ok(reply: Reply) -> Reply:
    """``reply``, if the server did what was asked; else ``ProtocolError``."""
    if reply.code != EX_OK:
        said = f"server answered {reply.code} {EX_NAMES.get(reply.code, '')}".rstrip()
        raise ProtocolError(f"{said}: {reply.text}" if reply.text else said, reply.code)
    return reply


@dataclass(frozen=True, slots=True)
class RemoteVerdict:
    """A server's verdict on a message."""

    verdict: Decision
    score: float
    log_odds: float
    #: The ``Model`` header (``model_id``), "" when the server sent none.
    model: str = ""
    #: The ``Event-model`` header (the server's ``[model] event_model``),
    #: "" when the server sent none (spamd does not).
    event_model: str = ""


def classify_remote(address: Address, message: bytes, *, user: str | None, timeout: float = 30.0) -> RemoteVerdict:
    """CHECK ``message`` on the server at ``address``: its verdict, never a
    message (a client that writes the mail writes the one it has, with the
    fields for this verdict added). Raises OSError or ``ProtocolError``
    unless the server answered with a whole, scanned verdict."""
    reply = _answered_ok(request(address, "CHECK", message, user=user, timeout=timeout))
    verdict = reply.headers.get("verdict")
    if verdict not in _DECISIONS or "spam" not in reply.headers:
        raise ProtocolError("the server did not scan the message")
    try:
        score, log_odds = float(reply.headers["probability"]), float(reply.headers["log-odds"])
    except (KeyError, ValueError):
        raise ProtocolError("the server's verdict has no probability or log-odds") from None
    if not (0.0 <= score <= 1.0 and math.isfinite(log_odds)):
        raise ProtocolError("the server's verdict is out of range")
    return RemoteVerdict(Decision(verdict), score, log_odds, reply.headers.get("model", ""), reply.headers.get("event-model", ""))


def tell_remote(address: Address, message: bytes, *, is_spam: bool, user: str | None, timeout: float = 30.0) -> bool:
    """TELL the server at ``address`` that ``message`` is spam (or ham), as
    ``spamc -L spam|ham`` does (``Message-class``, ``Set: local``): it learns
    the message with that label, moving it out of the other class if needed.

    True when the server changed the model (``DidSet: local``), False when it
    had the message with that label already. Raises OSError or
    ``ProtocolError`` when the server did not answer that it learned it
    (no server, TELL not allowed, an unreadable message, a busy database,
    or, for a ``user``, a server that would learn it with a model every user
    shares: ``User-model: own``).
    """
    fields = [("Message-class", "spam" if is_spam else "ham"), ("Set", "local")]
    if user:
        fields.append(("User-model", "own"))
    reply = _answered_ok(request(address, "TELL", message, user=user, headers=fields, timeout=timeout))
    return reply.headers.get("didset", "").strip().lower() == "local"
