"""One client connection of ``spamfilter serve``, read and written without
ever blocking: the server's event loop owns every socket, so a client that
sends nothing, trickles, or does not read its reply holds a file descriptor
and a few buffers, never a thread.

A connection goes through these states:

- ``HEAD``: bytes until the empty line that ends the request head;
- ``BODY``: the message's ``Content-length`` bytes, kept in memory up to the
  server's max size; a longer message is not scanned, so PROCESS spools it
  (to give it back) and the other commands keep only its first max-size
  bytes (HEADERS gives back its header block);
- ``WORK``: a whole request, with a scoring thread or the writer; the loop
  does not watch the socket meanwhile;
- ``SEND``: the reply, written as fast as the client takes it;
- ``LINGER``: the reply is out and our side shut down; what the client
  still sends is read and dropped until it closes (or a short time passes),
  so it reads the reply instead of a reset.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import socket
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from typing import IO

from spamfilter import spamd
from spamfilter.errors import ProtocolError

#: spamc sends at most 256 MB; a longer announced message is refused unread.
HARD_MAX_SIZE = 256 << 20
#: Bytes read from a socket (or a spool) at a time.
CHUNK = 1 << 16
#: Seconds a client has, after its reply, to close its side.
LINGER_SECONDS = 2.0


class State(enum.Enum):
    HEAD = "head"
    BODY = "body"
    WORK = "work"
    SEND = "send"
    LINGER = "linger"


class Connection:
    """What one client has sent and is owed.

    sock: the client's socket, non-blocking. who: its address, for the log.
    started: when it was accepted; active: when a byte last came or went;
    deadline: when the loop gives up on it (the request must be whole by
    ``started + timeout``; a reply may go out slowly, but not stand still
    for ``timeout``: a large PROCESS reply to a slow reader is not cut).
    """

    def __init__(self, sock: socket.socket, who: str, now: float, timeout: float, max_size: int) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.who = who
        self.started = self.active = now
        self.deadline = now + timeout
        self.timeout = timeout
        self.max_size = max_size
        self.state = State.HEAD
        self.request: spamd.Request | None = None
        self._head = bytearray()
        self.body = bytearray()
        self.got = 0
        #: Bytes read from the client so far, for ``Sockets.quietest``.
        self.received = 0
        #: The message came without a Content-length (``to_the_end``).
        self.unframed = False
        #: An oversized PROCESS message, to give back unscanned.
        self.spool: IO[bytes] | None = None
        #: Why the spool could not take the message (a full or read-only
        #: temporary directory), or None: the rest of it is read and dropped,
        #: and the answer is EX_TEMPFAIL.
        self.spool_error: str | None = None
        #: The spool was dropped because the server's spool budget was spent.
        self.spool_full = False
        #: Bytes of the server's spool budget this connection holds.
        self.spooled = 0
        self._out: deque[memoryview] = deque()
        self._out_file: IO[bytes] | None = None
        #: What the request's log line says, once the reply is out.
        self.outcome = ""
        self.log_odds: float | None = None
        self.owner = ""
        self.why = ""
        #: Set when the server stops while this client has sent nothing:
        #: it is given a moment to send, then closed without a warning.
        self.idle_at_stop = False

    @property
    def size(self) -> int:
        return 0 if self.request is None or self.request.content_length is None else self.request.content_length

    @property
    def to_the_end(self) -> bool:
        """The message runs to the end of the client's input: a request
        without ``Content-length`` (protocol 1.0 has none), as spamd reads it."""
        r = self.request
        return r is not None and r.content_length is None and r.command in spamd.MESSAGE_COMMANDS

    @property
    def silent(self) -> bool:
        """No byte of a request has come yet."""
        return self.state is State.HEAD and not self._head

    @property
    def oversized(self) -> bool:
        return self.size > self.max_size

    # -- reading -------------------------------------------------------------

    def feed_head(self, data: bytes) -> bytes | None:
        """Take bytes of the head; once it is whole, parse it into
        ``request`` and return the bytes read past it. ``data`` empty means
        the client closed. Raises ``ProtocolError``."""
        if data and self.idle_at_stop:
            # It began in time: the whole request timeout again.
            self.idle_at_stop = False
            self.deadline = self.started + self.timeout
        if not data:
            # Before protocol 1.5 a PING had no empty line after it.
            line = bytes(self._head).rstrip(b"\r\n")
            if self._head.endswith(b"\n") and b"\n" not in line and line.split(b" ")[0] in (b"PING", b"SKIP"):
                self.request = spamd.parse_head(line)
                return b""
            raise ProtocolError("connection closed before the end of the request head")
        self._head += data
        line_end = self._head.find(b"\n")
        if line_end >= 0 and spamd.is_bare_request(bytes(self._head[:line_end]).rstrip(b"\r")):
            # spamd answers a PING or SKIP before protocol 1.5 at its
            # request line: a client may wait for the PONG without sending
            # an empty line or closing (health monitors do). A 1.0
            # request's message starts on the next line.
            self.request = spamd.parse_head(bytes(self._head[:line_end]).rstrip(b"\r"))
            rest = bytes(self._head[line_end + 1 :])
            self._head = bytearray()
            return rest
        ends = [(i, n) for i, n in ((self._head.find(b"\r\n\r\n"), 4), (self._head.find(b"\n\n"), 2)) if i >= 0]
        if not ends:
            if len(self._head) > spamd.MAX_HEAD:
                raise ProtocolError(f"request head over {spamd.MAX_HEAD} bytes")
            return None
        at, n = min(ends)
        self.request = spamd.parse_head(bytes(self._head[:at]))
        rest = bytes(self._head[at + n :])
        self._head = bytearray()
        if self.size > HARD_MAX_SIZE:
            raise ProtocolError(f"message of {self.size} bytes is over {HARD_MAX_SIZE}", spamd.EX_TOOBIG)
        return rest

    def start_spool(self) -> None:
        """Keep the oversized message in a spool (memory, then a temporary file)."""
        self.spool = tempfile.SpooledTemporaryFile(max_size=CHUNK)  # noqa: SIM115 - closed in close()

    def feed_body(self, data: bytes) -> bool:
        """Take message bytes; True once all ``Content-length`` are here.
        ``data`` empty means the client closed. Raises ``ProtocolError``."""
        if self.to_the_end:
            return self._feed_to_the_end(data)
        size = self.size
        if not data and self.got < size:
            raise ProtocolError(f"connection closed after {self.got} of {size} message bytes")
        if self.got + len(data) > size:
            raise ProtocolError("more bytes than Content-length")
        self.got += len(data)
        if self.spool is not None:
            try:
                self.spool.write(data)
                if self.got == size:
                    self.spool.flush()  # a full disk shows here, not in the reply
            except OSError as exc:
                self._drop_spool(exc)
        elif self.spool_error is None and len(self.body) < self.max_size:
            self.body += data[: self.max_size - len(self.body)]
        return self.got == size

    def _feed_to_the_end(self, data: bytes) -> bool:
        """``feed_body`` for a message without a length: it is whole when
        the client closes its side, and then has the length it came with.
        Nothing is spooled, so one over ``max_size`` cannot be given back
        (``unframed``)."""
        assert self.request is not None
        if not data:
            self.request = dataclasses.replace(self.request, content_length=self.got)
            self.unframed = True
            return True
        self.got += len(data)
        if self.got > HARD_MAX_SIZE:
            raise ProtocolError(f"message over {HARD_MAX_SIZE} bytes", spamd.EX_TOOBIG)
        # Past the spool limit (``spool_error``) nothing more is kept.
        if self.spool_error is None and len(self.body) < self.max_size:
            self.body += data[: self.max_size - len(self.body)]
        return False

    def _drop_spool(self, exc: OSError) -> None:
        """The spool failed (no temporary directory, a full disk): say why,
        and read the rest of the message without keeping it."""
        self.spool_error = str(exc.strerror or exc)
        self.drop_spool()

    def drop_spool(self) -> None:
        """Close and forget the spool (the rest of the message is read and
        not kept); closing flushes it, which fails again on the disk that
        failed its write."""
        if self.spool is not None:
            with contextlib.suppress(OSError):
                self.spool.close()
            self.spool = None

    def nothing_more(self) -> None:
        """Raise ``ProtocolError`` if bytes wait beyond the message: spamc
        shuts its side down after it, so they mean a wrong Content-length."""
        try:
            extra = self.sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        if extra:
            raise ProtocolError("more bytes than Content-length")

    # -- writing -------------------------------------------------------------

    def reply(self, pieces: Sequence[bytes | memoryview], now: float, then_spool: bool = False) -> None:
        """Send ``pieces`` (then the spooled message, with ``then_spool``)."""
        self.state = State.SEND
        self.deadline = now + self.timeout
        self._out.extend(memoryview(p) for p in pieces if len(p))
        if then_spool and self.spool is not None:
            self.spool.seek(0)
            self._out_file = self.spool

    def send(self) -> bool:
        """Write what the socket takes now; True once all is out."""
        while True:
            if not self._out and self._out_file is not None:
                chunk = self._out_file.read(CHUNK * 16)
                if chunk:
                    self._out.append(memoryview(chunk))
                else:
                    self._out_file = None
            if not self._out:
                return True
            try:
                n = self.sock.send(self._out[0])
            except (BlockingIOError, InterruptedError):
                return False
            if n:
                self.deadline = time.monotonic() + self.timeout
            if n < len(self._out[0]):
                self._out[0] = self._out[0][n:]
                return False
            self._out.popleft()

    def linger(self, now: float) -> None:
        """The reply is out: shut our side, then read until the client closes."""
        self.state = State.LINGER
        self.deadline = now + LINGER_SECONDS
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self) -> None:
        self.drop_spool()
        self._out.clear()
        self._out_file = None
        try:
            self.sock.close()
        except OSError:
            pass
