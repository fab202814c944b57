"""``spamfilter milter``: the filter as a milter, for Postfix
(``smtpd_milters``) and Sendmail (``INPUT_MAIL_FILTER``).

Each message the MTA receives is scored at the end of its DATA, and the
MTA is told to add ``X-Spam-Status`` and ``X-Spam-Score`` (and
``X-Spam-Flag: YES`` for spam), the same fields with the same values as
``spamfilter filter`` writes, and to delete every field of those names
that came with the message, so a sender cannot forge a verdict. With
``reject_above`` a spam whose log-odds are above it is refused at SMTP
time instead (``550 5.7.1``), so the sending server, not the recipient,
holds it.

The model is held as ``spamfilter serve`` holds it (``spamfilter.daemon.pool``):
one model for every message unless per-user mode is on, and then the
model of the envelope recipients' local part (``<Alice@example.org>``:
user ``alice``), when all recipients share one; a message to several
users, whose fields all of them get, is scored with the default model.

Nothing is lost: a message over ``max_size`` bytes is accepted unscanned
(its forged verdict fields still deleted), one that is not mail accepted
unscanned, and on any error while scoring the MTA is answered as
``on_error`` says, accept (the default) or tempfail (the sender tries again
later), with a warning in the log. A broken connection or a protocol error
leaves the message to the MTA's own default (Postfix's
``milter_default_action``).

Logging (logger ``spamfilter.milter``): at start the address, the mode and
model, the database; then one line per message with the MTA's queue id,
user, verdict, log-odds, what the MTA was told (``none`` when it hung
up before the answer), size and milliseconds; never message content.
SIGTERM (`stop`) stops accepting connections, closes those between
messages and lets each message in flight finish; SIGHUP (`reload`) reads
the configuration again.
"""

from __future__ import annotations

import logging
import math
import os
import select
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from spamfilter import spamd
from spamfilter.answers import Refusal, Verdict
from spamfilter.config import Config
from spamfilter.daemon import listen, milter
from spamfilter.daemon.pool import FilterPool, reload_config
from spamfilter.errors import ConfigError, NotTrainedError, ProtocolError, SpamfilterError
from spamfilter.mail import MailItem, filter_fields
from spamfilter.verdicts import Decision

logger = logging.getLogger("spamfilter.milter")

OnError = Literal["accept", "tempfail"]
_REJECT_CODE = ("550", "5.7.1")

#: Seconds a message waits for a database another process keeps locked
#: (a migration, a tool holding an exclusive lock) before it is answered
#: as ``--on-error`` says (or ``--timeout``, if shorter): well within the MTA's wait for the reply to the
#: end of the message (Postfix's milter_content_timeout, 300 s; the
#: R:60s of the Sendmail example in docs/integration.md).
DATABASE_WAIT = 30.0


@dataclass(frozen=True, slots=True)
class MilterOptions:
    """How the milter listens and what it answers.

    address: a TCP host and port, or a Unix socket path.
    socket_mode, socket_group: the Unix socket's permissions and group (the
        MTA's user must be able to connect: Postfix's is ``postfix``).
    workers: messages scored at the same time.
    max_connections: MTA connections served at once (more wait).
    max_size: longer messages are accepted unscanned.
    timeout: seconds the MTA may stay silent on a connection.
    allowed_ips: MTA networks allowed over TCP; empty means loopback only,
        and then the milter must listen on a loopback address.
    reject_above: refuse (550) a spam whose log-odds are above this (a
        finite number; unsure and ham are never refused); None: never
        refuse, only mark.
    on_error: what the MTA is told when scoring fails: accept the message
        unscanned, or tempfail it.
    """

    address: spamd.Address
    socket_mode: int = 0o600
    socket_group: str = ""
    workers: int = 4
    max_connections: int = 256
    max_size: int = 512_000
    timeout: float = 600.0
    allowed_ips: tuple[str, ...] = ()
    reject_above: float | None = None
    on_error: OnError = "accept"


@dataclass(slots=True)
class _Connection:
    """An MTA connection, and whether it waits between two messages (then
    `MilterServer.stop` may close it)."""

    sock: socket.socket
    idle: bool = False


@dataclass(frozen=True, slots=True)
class _Answer:
    """What the MTA is told about one message, and what to log about it."""

    packets: list[bytes]
    action: str
    owner: str
    verdict: str = "-"
    log_odds: float | None = None
    why: str = ""


class _Listener(socketserver.ThreadingMixIn, socketserver.BaseServer):
    """A socketserver that hands each accepted connection to `MilterServer`."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = listen.BACKLOG  # socketserver's default is 5
    milter: MilterServer

    def listen_on(self, sock: socket.socket) -> None:
        """Listen on ``sock`` (bound by ``listen.bind``) in place of the
        socket socketserver made, which is closed unbound."""
        server: Any = self  # TCPServer and UnixStreamServer both keep it in .socket
        server.socket.close()
        server.socket = sock
        self.server_activate()
        # Another process may take a connection this one saw waiting:
        # accept() then fails at once instead of blocking (``serve_forever``).
        sock.setblocking(False)

    def serve_forever(self, poll_interval: float = 0.2) -> None:
        """Accept connections until the milter stops, each only once a
        connection slot is free: a process with every slot taken leaves a
        new connection in the socket's backlog, which every process of a
        ``prefork`` takes from, rather than holding it for its own slot
        while another process has one free."""
        milter = self.milter
        listening: socket.socket = cast(Any, self).socket  # TCPServer's and UnixStreamServer's
        while not milter._stopping.is_set():
            if not milter._slots.acquire(timeout=poll_interval):
                continue
            handed = False
            try:
                if not select.select([listening], [], [], poll_interval)[0]:
                    continue
                try:
                    request, peer = self.get_request()
                except OSError:
                    continue  # another process took it, or the socket is closing
                if milter._allowed(peer):
                    self.process_request(request, peer)  # its thread gives the slot back
                    handed = True
                else:
                    self.shutdown_request(request)
            finally:
                if not handed:
                    milter._slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        self.milter._serve_connection(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        logger.exception("connection from %s: internal error", client_address or "unix")


class _TCPListener(_Listener, socketserver.TCPServer):
    allow_reuse_address = True


class _TCP6Listener(_TCPListener):
    address_family = socket.AF_INET6


class _UnixListener(_Listener, socketserver.UnixStreamServer):
    pass


class MilterServer:
    """The milter; ``bind`` then ``serve`` (until ``stop``)."""

    def __init__(self, options: MilterOptions, pool: FilterPool, load_config: Callable[[], Config] | None = None) -> None:
        if options.workers < 1 or options.max_connections < 1 or options.max_size < 1 or options.timeout <= 0:
            raise ConfigError("workers, max connections, max size and timeout must be positive")
        if options.reject_above is not None and not math.isfinite(options.reject_above):
            raise ConfigError(f"--reject-above must be a finite log-odds, not {options.reject_above}")
        self.options = options
        self.pool = pool
        self._load_config = load_config
        self._networks = listen.allowed_networks(options.allowed_ips)
        self._stopping = threading.Event()
        self._reloading = threading.Event()
        self._work = threading.Semaphore(options.workers)
        self._slots = threading.BoundedSemaphore(options.max_connections)
        self._connections: dict[int, _Connection] = {}
        self._lock = threading.Lock()
        self._listener: _Listener | None = None
        self.address: spamd.Address | None = None
        #: Whether this process removes the Unix socket when it stops (a
        #: forked worker leaves that to the process that made it).
        self.owns_socket = True
        #: Appended to each message's log line (the worker, when forked).
        self.label = ""

    # -- lifetime -----------------------------------------------------------

    def bind(self) -> spamd.Address:
        """Open the listening socket; the address it listens on (the real
        port when port 0 was asked for). Raises ``ConfigError``, or
        ``AddressInUse`` when another server holds the address."""
        o = self.options
        a = o.address
        try:
            sock, self.address = listen.bind(a, o.socket_mode, o.socket_group, o.allowed_ips)
            if a.path:
                listener: _Listener = _UnixListener(a.path, socketserver.BaseRequestHandler, bind_and_activate=False)
            else:
                kind = _TCP6Listener if ":" in a.host else _TCPListener
                listener = kind((a.host, a.port), socketserver.BaseRequestHandler, bind_and_activate=False)
            listener.listen_on(sock)
        except OSError as exc:
            raise listen.cannot_listen(a, exc) from None
        listener.milter = self
        self._listener = listener
        return self.address

    def stop(self) -> None:
        """Stop (SIGTERM): ``serve`` returns once the messages in flight are
        answered. `reload` (SIGHUP): read the configuration again; on an
        error the old one stays. Both are safe to call from a signal handler."""
        self._stopping.set()

    def reload(self) -> None:
        self._reloading.set()

    def announce(self, processes: int = 1) -> None:
        """The start-up line: where, which models, what is refused."""
        o = self.options
        reject = "never" if o.reject_above is None else f"above log-odds {o.reject_above:+.2f}"
        users = "; a message's User is its envelope recipients' local part" if self.pool.per_user else ""
        many = f"; {processes} processes" if processes > 1 else ""
        logger.info("listening on %s with %s%s; reject: %s; on error: %s%s", self.address, self.pool.describe(), users, reject, o.on_error, many)

    def close_listener(self) -> None:
        """Close the listening socket (and remove a Unix socket's path)."""
        if self._listener is not None:
            self._listener.server_close()
        if self.owns_socket and self.options.address.path:
            listen.remove_socket(self.options.address.path)

    def serve(self, *, parent: int | None = None, announce: bool = True) -> None:
        """Answer the MTA until ``stop`` (or until the pipe ``parent`` is
        closed: the process that forked this one is gone); then let the
        messages in flight finish, close the socket and the filters."""
        if self._listener is None:
            self.bind()
        listener = self._listener
        assert listener is not None
        if announce:
            self.announce()
        self.pool.warm()
        if parent is not None:
            threading.Thread(target=self._watch_parent, args=(parent,), daemon=True).start()
        accepting = threading.Thread(target=listener.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        accepting.start()
        try:
            # Polled, not waited on: stop and reload run in signal handlers
            # on this thread, and an Event this thread waits on holds a
            # lock that their set() would wait for forever (a SIGTERM that
            # came at that moment left the milter running).
            while not self._stopping.is_set():
                time.sleep(0.2)
                if self._reloading.is_set():
                    self._reloading.clear()
                    self._reread_config()
        finally:
            accepting.join()  # its loop ends with _stopping
            # Closed before the drain: an MTA connecting now is refused at
            # once (and tries its other milters or its default action)
            # instead of waiting in a backlog that nobody accepts from.
            self.close_listener()
            self._drain()
            self.pool.close()
            logger.info("stopped")

    def _watch_parent(self, parent: int) -> None:
        while os.read(parent, 1):
            pass
        self.stop()

    def _drain(self) -> None:
        """Close the connections between messages; wait for the others to
        answer theirs (at most a minute, or ``timeout`` if shorter, then
        they are cut and the MTA applies its default action)."""
        deadline = time.monotonic() + min(self.options.timeout, 60.0)
        while True:
            with self._lock:
                waiting = list(self._connections.values())
                for c in waiting:
                    if c.idle:
                        _shut(c.sock, socket.SHUT_RD)
            if not waiting:
                return
            if time.monotonic() > deadline:
                for c in waiting:
                    _shut(c.sock, socket.SHUT_RDWR)
                deadline = float("inf")
            time.sleep(0.05)

    def _reread_config(self) -> None:
        reload_config((self.pool,), self._load_config, logger)

    def _allowed(self, peer: Any) -> bool:
        """Whether a new connection comes from an allowed network."""
        if isinstance(peer, tuple) and not listen.is_allowed(str(peer[0]), self._networks):
            logger.warning("refused %s: not in the allowed networks", peer[0])
            return False
        return True

    def _serve_connection(self, sock: socket.socket, peer: Any) -> None:
        who = str(peer[0]) if isinstance(peer, tuple) else "unix"
        conn = _Connection(sock)
        with self._lock:
            self._connections[id(conn)] = conn
        try:
            self._converse(conn, who)
        except ProtocolError as exc:
            logger.warning("%s: protocol error, connection closed: %s", who, exc)
        except TimeoutError:
            logger.info("%s: silent for %.0f s, connection closed", who, self.options.timeout)
        except OSError as exc:
            logger.warning("%s: connection lost: %s", who, exc.strerror or exc)
        finally:
            with self._lock:
                del self._connections[id(conn)]
            self._slots.release()

    def _converse(self, conn: _Connection, who: str) -> None:
        """Read commands and answer them until the MTA quits or hangs up."""
        conn.sock.settimeout(self.options.timeout)
        session = milter.Session(self.options.max_size, lambda s, m: self._end_of_message(s, m, who, conn.sock))
        with conn.sock.makefile("rb") as stream:
            while not session.closed:
                with self._lock:
                    conn.idle = not session.in_message
                    if conn.idle and self._stopping.is_set():
                        return
                got = milter.read_packet(stream)
                with self._lock:
                    conn.idle = False
                if got is None:
                    if session.in_message:
                        # The MTA keeps the message (it has no answer for it)
                        # and tells its sender or retries as it is set to.
                        logger.warning("%s: connection closed by the MTA in the middle of message id=%s", who, session.macros.get("i", "-"))
                    return
                replies = session.feed(*got)
                if replies:
                    conn.sock.sendall(b"".join(replies))

    # -- one message ----------------------------------------------------------

    def _end_of_message(self, session: milter.Session, message: milter.Message, who: str, sock: socket.socket) -> list[bytes]:
        """The edits and the final reply for a message received in full."""
        started = time.monotonic()
        user = milter.recipient_user(message.recipients)
        try:
            answer = self._judge(session, message, user)
        except Exception:  # noqa: BLE001 - the MTA gets an answer whatever went wrong
            logger.exception("internal error while scoring")
            answer = self._on_error(self.pool.owner(user), "internal error", session, message)
        if _hung_up(sock):
            # The MTA gave up waiting (its milter timeout): what it did
            # with the message is its own default action, not this answer.
            answer = replace(answer, action="none", why="the MTA closed the connection before the answer")
        odds = "-" if answer.log_odds is None else f"{answer.log_odds:+.2f}"
        logger.log(
            logging.WARNING if answer.why else logging.INFO,
            "message id=%s user=%s verdict=%s log_odds=%s action=%s bytes=%d ms=%.1f client=%s%s",
            session.macros.get("i", "-"),
            answer.owner or "(default)",
            answer.verdict,
            odds,
            answer.action,
            message.size,
            (time.monotonic() - started) * 1000,
            who + self.label,
            f"; {answer.why}" if answer.why else "",
        )
        return answer.packets

    def _judge(self, session: milter.Session, message: milter.Message, user: str | None) -> _Answer:
        agreed = session.agreed
        assert agreed is not None
        owner = self.pool.owner(user)
        if message.oversize:
            return _unscanned(message, agreed, owner, f"over --max-size {self.options.max_size} bytes")
        # The wait for a scoring thread counts against the wait for the
        # model: a message queued behind others waiting for a locked
        # database is answered within the same bound, not after all of them.
        wait = self.pool.waits_within
        until = None if wait is None else time.monotonic() + wait
        if not self._work.acquire(timeout=wait):
            why = f"not scanned: all {self.options.workers} scoring threads busy for {wait:g} s"
            return self._on_error(owner, why, session, message)
        try:
            with self.pool.lease(user, create=False, until=until) as (owner, f):
                result = next(iter(f.classify([MailItem("-", message.raw(agreed.leading_space))])))
                event_model = f.config.model.event_model
        except NotTrainedError as exc:
            # Not a failure to try again later: mail for a user without a
            # model (postmaster, an alias) passes unscanned, as the start-up
            # line says, whatever --on-error says.
            return _unscanned(message, agreed, owner, self.pool.unscored(owner, exc))
        except SpamfilterError as exc:
            return self._on_error(owner, "not scanned: " + self.pool.unscored(owner, exc), session, message)
        finally:
            self._work.release()
        if isinstance(result, Refusal):
            return _unscanned(message, agreed, owner, result.reason)
        return self._verdict_answer(message, agreed, owner, result, event_model)

    def _verdict_answer(self, message: milter.Message, agreed: milter.Negotiated, owner: str, v: Verdict, event_model: str) -> _Answer:
        limit = self.options.reject_above
        # Only spam is refused: a limit set below the spam cutoff does not
        # turn unsure mail into "refused as spam".
        if limit is not None and v.verdict is Decision.SPAM and v.log_odds > limit:
            score, bound = _apart(v.log_odds, limit)
            text = f"{_REJECT_CODE[1]} Message refused as spam (log-odds {score} above {bound})"
            return _Answer([milter.reply_code(_REJECT_CODE[0], text)], "reject", owner, v.verdict, v.log_odds)
        fields = filter_fields(v.verdict, v.score, v.log_odds, event_model)
        packets = milter.edits(message, fields, agreed) + [milter.packet(milter.CONTINUE)]
        return _Answer(packets, "accept", owner, v.verdict, v.log_odds)

    def _on_error(self, owner: str, why: str, session: milter.Session, message: milter.Message) -> _Answer:
        """What ``--on-error`` answers for a message that could not be
        scored: a temporary failure, or acceptance without the verdict
        fields it came with (a sender cannot forge a verdict by making
        scoring fail)."""
        if self.options.on_error == "tempfail":
            return _Answer([milter.packet(milter.TEMPFAIL)], "tempfail", owner, "error", why=why)
        try:
            assert session.agreed is not None
            deletions = milter.edits(message, [], session.agreed)
        except Exception:  # noqa: BLE001 - the message is accepted all the same
            logger.exception("internal error while deleting the verdict fields")
            deletions = []
        return _Answer([*deletions, milter.packet(milter.CONTINUE)], "accept", owner, "error", why=why)


def _unscanned(message: milter.Message, agreed: milter.Negotiated, owner: str, why: str) -> _Answer:
    """Accept ``message`` without scanning it (``why`` not): the verdict
    fields it came with deleted, none added."""
    return _Answer([*milter.edits(message, [], agreed), milter.packet(milter.CONTINUE)], "accept", owner, "unscanned", why=f"not scanned: {why}")


def _shut(sock: socket.socket, how: int) -> None:
    try:
        sock.shutdown(how)
    except OSError:
        pass


def _apart(above: float, limit: float) -> tuple[str, str]:
    """``above`` and ``limit`` written with one decimal, or as many more as
    it takes to tell them apart (+28.63 above +28.60, not +28.6 above +28.6)."""
    for places in range(1, 7):
        pair = (f"{above:+.{places}f}", f"{limit:+.{places}f}")
        if pair[0] != pair[1]:
            return pair
    return pair


def _hung_up(sock: socket.socket) -> bool:
    """Whether the peer has closed its side of ``sock``: an end of file
    waits to be read, seen without waiting and without taking any bytes
    (data still to be read is not one)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    if not poller.poll(0):
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True
