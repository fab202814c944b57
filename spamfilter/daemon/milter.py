"""The milter protocol (Sendmail's mail filter protocol, versions 2 to 6),
the filter's side, as Postfix (``smtpd_milters``) and Sendmail speak it.

Written here on the standard library rather than over pymilter: pymilter
is a C extension over Sendmail's libmilter, so installing spamfilter would
need libmilter's headers and a C compiler, and libmilter runs its own
threads and signal handling inside the process, which would fight the
daemon's own (SIGHUP rereads the config, SIGTERM finishes the messages in
flight). The part of the protocol a filter that only adds and removes
header fields needs is small: a few commands, a few replies, one
negotiation.

The wire. Both sides send packets: a 4-byte big-endian length, then that
many bytes, a command letter and its data. Strings are NUL-terminated.
The MTA drives; the filter answers every command but the macros, ABORT,
QUIT and QUIT_NC. One connection carries one SMTP session, a message after
another::

    O  negotiate: version, actions, protocol steps (uint32 each)
    D  macros for the next command (no reply)
    C  connect   H  helo   M  MAIL FROM   R  RCPT TO   T  DATA
    L  header field: name NUL value NUL     N  end of header
    B  body chunk                            E  end of message
    A  abort the message (RSET; no reply)    Q  quit   K  quit, new session

Replies: ``c`` continue, ``a`` accept, ``t`` tempfail, ``y`` a reply code
(``550 5.7.1 ...``: a rejection with our text), and before the final reply
of a message its edits: ``i`` insert a field at an index, ``h`` add one at
the end (version 2), ``m`` change the index-th field of a name (1-based
among fields of that name; an empty value deletes it).

What we negotiate: the actions to add and change header fields (refused
if the MTA offers neither), and that the MTA skips what we never read
(connect, HELO, unknown commands, DATA) when it offers to. With
``SMFIP_HDR_LEADSPC`` (version 6) header values arrive with the spaces
after the colon, so the message is rebuilt byte for byte, and the values we
write carry their own space; without it the MTA strips one and adds one.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

from spamfilter.errors import ProtocolError
from spamfilter.headers import FILTER_HEADERS

# Commands (MTA -> filter).
OPTNEG, MACRO, CONNECT, HELO, MAIL, RCPT, DATA = b"O", b"D", b"C", b"H", b"M", b"R", b"T"
HEADER, EOH, BODY, EOB, ABORT, QUIT, QUIT_NC, UNKNOWN = b"L", b"N", b"B", b"E", b"A", b"Q", b"K", b"U"
# Replies (filter -> MTA).
CONTINUE, ACCEPT, TEMPFAIL, REPLYCODE = b"c", b"a", b"t", b"y"
ADDHEADER, INSHEADER, CHGHEADER = b"h", b"i", b"m"

#: Actions: add (and insert) header fields; change or delete them.
ACT_ADDHDRS = 0x01
ACT_CHGHDRS = 0x10
#: Protocol steps the filter can ask the MTA to leave out, and the header
#: values' leading space.
STEP_NOCONNECT = 0x01
STEP_NOHELO = 0x02
STEP_NOUNKNOWN = 0x100
STEP_NODATA = 0x200
STEP_HDR_LEADSPC = 0x100000
_SKIPPED = STEP_NOCONNECT | STEP_NOHELO | STEP_NOUNKNOWN | STEP_NODATA

#: The versions spoken: 2 (Sendmail 8.11 on) up to 6 (Sendmail 8.14 on, Postfix).
MIN_VERSION, MAX_VERSION = 2, 6
#: Longest packet accepted. Body chunks are at most 64 KiB (Sendmail's and
#: Postfix's MILTER_CHUNK_SIZE); a header field at most what the MTA allows.
MAX_PACKET = 1 << 20
#: Commands that get no reply.
NO_REPLY = frozenset({MACRO, ABORT, QUIT, QUIT_NC})

#: The stages macros come with, in the order a session goes through them;
#: those from MAIL on belong to one message.
_STAGES = (CONNECT, HELO, UNKNOWN, MAIL, RCPT, DATA, HEADER, EOH, BODY, EOB)
_MESSAGE_STAGES = _STAGES[3:]


def read_packet(stream: BinaryIO) -> tuple[bytes, bytes] | None:
    """The next packet's command letter and data; None at the end of the
    stream between packets. Raises ``ProtocolError`` on a short or
    oversized packet; OSError (a timeout included) from the stream."""
    head = stream.read(4)
    if not head:
        return None
    if len(head) < 4:
        raise ProtocolError("connection closed inside a packet length")
    (length,) = struct.unpack(">I", head)
    if not 1 <= length <= MAX_PACKET:
        raise ProtocolError(f"packet of {length} bytes (1 to {MAX_PACKET})")
    body = stream.read(length)
    if len(body) < length:
        raise ProtocolError(f"connection closed after {len(body)} of {length} packet bytes")
    return body[:1], body[1:]


def packet(code: bytes, data: bytes = b"") -> bytes:
    """One packet: length, command letter, data."""
    return struct.pack(">I", len(code) + len(data)) + code + data


def strings(data: bytes) -> list[bytes]:
    """The NUL-terminated strings of ``data`` (a last one without its NUL too)."""
    parts = data.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return parts


@dataclass(frozen=True, slots=True)
class Negotiated:
    """What both sides agreed on: the version, the actions the filter may
    take and the protocol steps it asked for."""

    version: int
    actions: int
    steps: int

    @property
    def leading_space(self) -> bool:
        """Header values carry the space after the colon, both ways."""
        return bool(self.steps & STEP_HDR_LEADSPC)

    def reply(self) -> bytes:
        return packet(OPTNEG, struct.pack(">III", self.version, self.actions, self.steps))


def negotiate(data: bytes) -> Negotiated:
    """Our answer to the MTA's offer (an OPTNEG packet's data): the highest
    version both speak, the header actions, and the steps we can do without.
    Raises ``ProtocolError`` when the offer does not allow filtering."""
    if len(data) < 12:
        raise ProtocolError(f"negotiation of {len(data)} bytes, not 12")
    version, actions, steps = struct.unpack(">III", data[:12])
    if version < MIN_VERSION:
        raise ProtocolError(f"milter protocol version {version}; {MIN_VERSION} to {MAX_VERSION} are spoken")
    wanted = ACT_ADDHDRS | ACT_CHGHDRS
    if actions & wanted != wanted:
        raise ProtocolError("the MTA does not let filters add and change header fields")
    return Negotiated(min(version, MAX_VERSION), wanted, steps & (_SKIPPED | STEP_HDR_LEADSPC))


@dataclass(slots=True)
class Message:
    """One message as the MTA hands it over: envelope recipients, header
    fields and body, kept only up to ``max_size`` bytes in all
    (``oversize`` says it was longer; then only the verdict fields' names
    are kept, to delete forged ones)."""

    max_size: int
    recipients: list[str] = field(default_factory=list)
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    size: int = 0
    oversize: bool = False

    def add_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        if not self.oversize:
            self.headers.append((name, value))
        elif _is_verdict_field(name):
            self.headers.append((name, b""))

    def add_body(self, chunk: bytes) -> None:
        self._count(len(chunk))
        if not self.oversize:
            self.body += chunk

    def _count(self, n: int) -> None:
        self.size += n
        if self.size > self.max_size and not self.oversize:
            self.oversize = True
            self.body = bytearray()
            # Unscanned, the message needs only its verdict fields' names
            # (to delete them), not a copy of every field: 6 MB of short
            # fields held 80 MB.
            self.headers = [(name, b"") for name, _ in self.headers if _is_verdict_field(name)]

    def raw(self, leading_space: bool) -> bytes:
        """The message rebuilt: each field as ``name: value`` (the space as
        it came with ``leading_space``), lines ended as the body's first line
        is (CRLF when it has none, as SMTP sends them), an empty line, the body."""
        first = self.body.find(b"\n")
        eol = b"\n" if first >= 0 and not self.body[:first].endswith(b"\r") else b"\r\n"
        sep = b":" if leading_space else b": "
        lines = [name + sep + _line_ends(value, eol) + eol for name, value in self.headers]
        return b"".join(lines) + eol + bytes(self.body)

    def verdict_fields(self) -> dict[str, int]:
        """How many fields of each `FILTER_HEADERS` name came with the message."""
        found: dict[str, int] = {}
        for name, _ in self.headers:
            canonical = _VERDICT_FIELDS.get(name.decode("latin-1").strip().lower())
            if canonical is not None:
                found[canonical] = found.get(canonical, 0) + 1
        return found


_VERDICT_FIELDS = {n.lower(): n for n in FILTER_HEADERS}


def _is_verdict_field(name: bytes) -> bool:
    return name.decode("latin-1").strip().lower() in _VERDICT_FIELDS


def _line_ends(value: bytes, eol: bytes) -> bytes:
    """A folded value's line breaks (LF or CRLF, as MTAs pass them) as ``eol``."""
    if b"\n" not in value:
        return value
    return value.replace(b"\r\n", b"\n").replace(b"\n", eol)


def recipient_user(recipients: Iterable[str]) -> str | None:
    """The local part (lower case) the envelope recipients share, or None
    when there is none or they differ. ``<Alice@example.org>`` -> ``alice``,
    and so does ``<alice+lists@example.org>``: an address extension after
    "+" is the user's, as Postfix delivers it with ``recipient_delimiter =
    +``. A local part that is not UTF-8 names no user (a model could not
    be named after it)."""
    users = set()
    for rcpt in recipients:
        address = rcpt.strip().removeprefix("<").removesuffix(">")
        local = address.rpartition("@")[0] if "@" in address else address
        try:
            local.encode("utf-8")
        except UnicodeEncodeError:
            return None
        local = local.strip('"')
        users.add((local.partition("+")[0] or local).lower())
    users.discard("")
    return users.pop() if len(users) == 1 else None


def edits(message: Message, fields: Iterable[tuple[str, str]], agreed: Negotiated) -> list[bytes]:
    """The packets that delete the verdict fields that came with ``message``
    and add ``fields`` at the top of the header (at its end before
    version 6, which has no insert).

    Each name's fields are deleted from the last to the first, so every
    index names a field still there, whether the MTA counts the deleted
    ones afterwards or not.
    """
    out: list[bytes] = []
    for name, count in message.verdict_fields().items():
        encoded = name.encode("ascii")
        out.extend(packet(CHGHEADER, struct.pack(">I", i) + encoded + b"\0\0") for i in range(count, 0, -1))
    space = " " if agreed.leading_space else ""
    added = [(n.encode("ascii"), (space + v).encode("utf-8")) for n, v in fields]
    if agreed.version >= 6:
        # Each insert goes to the top: the last field first.
        out.extend(packet(INSHEADER, struct.pack(">I", 0) + n + b"\0" + v + b"\0") for n, v in reversed(added))
    else:
        out.extend(packet(ADDHEADER, n + b"\0" + v + b"\0") for n, v in added)
    return out


def reply_code(code: str, text: str) -> bytes:
    """A reply with our SMTP code and text (``550 5.7.1 text``). Sendmail
    reads ``%`` as a format character: it is doubled."""
    line = f"{code} {text}".replace("%", "%%").replace("\r", " ").replace("\n", " ")
    return packet(REPLYCODE, line.encode("utf-8") + b"\0")


#: What the filter does with a finished message: its edits and final reply.
EndOfMessage = Callable[["Session", Message], list[bytes]]


class Session:
    """One MTA connection: negotiation, the macros of the moment and the
    message being received. `feed` takes each packet and gives the packets
    to answer with; at the end of a message it asks ``end_of_message``.

    The macros kept are those the MTA sent for the current stage and the
    stages before it (``i``, the queue id, is the one logged); those of a
    message's stages end with the message, so one message's queue id is
    never logged for the next on the same connection.
    """

    def __init__(self, max_size: int, end_of_message: EndOfMessage) -> None:
        self.max_size = max_size
        self._end_of_message = end_of_message
        self.agreed: Negotiated | None = None
        self._macros: dict[bytes, dict[str, str]] = {}
        self.message: Message | None = None
        self.closed = False

    @property
    def macros(self) -> dict[str, str]:
        """The macros in force: the connection's, then the message's stages'."""
        merged: dict[str, str] = {}
        for stage in _STAGES:
            merged.update(self._macros.get(stage, {}))
        return merged

    @property
    def in_message(self) -> bool:
        """A message has begun (MAIL FROM) and not been answered yet."""
        return self.message is not None

    def feed(self, code: bytes, data: bytes) -> list[bytes]:
        """The packets that answer one command. Raises ``ProtocolError``."""
        if code == OPTNEG:
            self.agreed = negotiate(data)
            self._macros, self.message = {}, None
            return [self.agreed.reply()]
        if self.agreed is None:
            raise ProtocolError(f"command {code!r} before the negotiation")
        if code == MACRO:
            stage = self._macros.setdefault(data[:1], {})
            for name, value in zip(*[iter(strings(data[1:]))] * 2):
                stage[name.decode("utf-8", "replace").strip("{}")] = value.decode("utf-8", "replace")
            return []
        if code in (ABORT, QUIT, QUIT_NC):
            self.message = None
            self._end_message_macros()
            self.closed = code == QUIT
            if code == QUIT_NC:
                # The session ends and the MTA's next one (CONNECT) follows
                # on this connection, as libmilter has it, under the options
                # already agreed: no second negotiation.
                self._macros = {}
            return []
        return self._message_command(code, data)

    def _message_command(self, code: bytes, data: bytes) -> list[bytes]:
        if code == MAIL:
            self.message = Message(self.max_size)
        elif code in (RCPT, HEADER, BODY, EOB) and self.message is None:
            # Sendmail and Postfix always send MAIL first; a client that
            # left it out (NOMAIL is never asked for) gets a message all the same.
            self.message = Message(self.max_size)
        if code == RCPT:
            assert self.message is not None
            args = strings(data)
            if args:
                # Bytes that are not UTF-8 stay told apart (as surrogates):
                # two such addresses are not made one user.
                self.message.recipients.append(args[0].decode("utf-8", "surrogateescape"))
        elif code == HEADER:
            assert self.message is not None
            parts = strings(data)
            if len(parts) != 2:
                raise ProtocolError("a header packet without a name and a value")
            self.message.add_header(parts[0], parts[1])
        elif code == BODY:
            assert self.message is not None
            self.message.add_body(data)
        elif code == EOB:
            assert self.message is not None
            if data:
                self.message.add_body(data)
            message, self.message = self.message, None
            try:
                return self._end_of_message(self, message)
            finally:
                self._end_message_macros()
        elif code not in (CONNECT, HELO, DATA, EOH, UNKNOWN, MAIL):
            raise ProtocolError(f"unknown milter command {code!r}")
        return [packet(CONTINUE)]

    def _end_message_macros(self) -> None:
        for stage in _MESSAGE_STAGES:
            self._macros.pop(stage, None)
