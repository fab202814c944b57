"""``spamfilter serve``: a resident filter that answers the spamd protocol.

Every request is scored and learned with one model, the default one,
whatever ``User`` the client names, unless per-user mode is on
(``spamfilter.daemon.pool`` says which model answers a request).

One process holds one ``Filter`` per model (user) for its whole life, so
each request is scored from the filter's in-memory count cache; the cache
is keyed by the store's model versions, so training done by the daemon
itself (TELL) or by any other process (``spamfilter train``, ``imap run``,
another daemon process) is seen by the next request, exactly.

How the work is split, so that no client can hold up another:

- One event loop (this thread) owns every socket: it accepts, reads each
  request until it is whole (within ``timeout`` seconds in all) and writes
  each reply as fast as the client takes it (``connection``). An idle or
  trickling client costs a file descriptor, never a thread. At
  ``max_connections`` the connection that has been quiet longest without a
  whole request (a second at least) is closed to admit the new one.
- ``workers`` threads score whole requests with the scoring pool's filters.
- One writer thread learns (TELL) with filters of its own
  (``FilterPool.for_writing``), whose wait for a lock another process holds
  is bounded by ``timeout``: a TELL that cannot get the database in that
  time is answered ``EX_TEMPFAIL``, and scoring never waits behind it
  (SQLite in WAL mode lets readers read while another process writes).
- ``prefork`` runs this whole server in one process per core on a shared
  listening socket.

Nothing a client sends can stop the server: a protocol error gets an error
reply (``SPAMD/1.5 76 EX_PROTOCOL ...``), then the connection is shut down
and drained, so the client reads the reply rather than a reset.

Messages longer than ``max_size`` are not scanned, as spamc does with its
own ``-s``: PROCESS gives the message back unchanged (without a ``Spam``
line; it is spooled to a temporary file, at most ``spool_limit`` bytes for
all connections at once, beyond which such a request gets
``EX_TEMPFAIL``), HEADERS its header block, the other commands an
``EX_TOOBIG`` reply.

SIGTERM (``stop``): the connections waiting in the listen backlog are
accepted too, the socket is closed, and every accepted request is answered
before the server returns. SIGHUP (``reload``): the configuration is read
again; filters in use are closed once their request is done, without
waiting for them.

Logging (``logging`` module, logger ``spamfilter.daemon``): at start the
mode, the model, the database and whether TELL is accepted; one line per
request with the command, user, verdict, log-odds, size and milliseconds,
a warning with the reason when a request is not scanned or learned
(spamc passes such a message through, and reports a TELL as done whatever
the answer); never message content.
"""

from __future__ import annotations

import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from spamfilter import spamd
from spamfilter.config import Config
from spamfilter.daemon import listen, replies
from spamfilter.daemon.connection import CHUNK, Connection, State
from spamfilter.daemon.pool import FilterPool, reload_config
from spamfilter.daemon.replies import Answer
from spamfilter.errors import ConfigError, ProtocolError

logger = logging.getLogger("spamfilter.daemon")

# Selector tags of the sockets that are not clients.
_LISTENER, _WAKE, _PARENT = "listener", "wake", "parent"
_READ, _WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
#: Seconds a connection must have been quiet before it may be closed to
#: make room for another (at ``max_connections``).
QUIET_SECONDS = 1.0
_NO_SOCKET = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # closed: wakes nothing
_NO_SOCKET.close()


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How the server listens and what it allows.

    address: a TCP host and port, or a Unix socket path.
    socket_mode, socket_group: the Unix socket's permissions (0600: only the
        daemon's user may connect) and optionally its group.
    workers: threads scoring requests at the same time (per process).
    max_connections: connections held at once (per process); beyond, the
        quietest one without a whole request is closed.
    max_size: longer messages are passed back unscanned.
    timeout: seconds a client has to send its whole request (and to take
        its reply); also how long a TELL may wait for the database.
    allowed_ips: client networks allowed over TCP; empty means loopback
        only, and then the server must listen on a loopback address.
    allow_tell: accept TELL (learning), like spamd's --allow-tell.
    spool_limit: bytes of oversized PROCESS messages spooled at once.
    """

    address: spamd.Address
    socket_mode: int = 0o600
    socket_group: str = ""
    workers: int = 4
    max_connections: int = 256
    max_size: int = 512_000
    timeout: float = 30.0
    allowed_ips: tuple[str, ...] = ()
    allow_tell: bool = False
    spool_limit: int = 256 << 20


class Server:
    """The spamd-protocol server; ``bind`` then ``serve`` (until ``stop``)."""

    def __init__(self, options: ServeOptions, pool: FilterPool, load_config: Callable[[], Config] | None = None) -> None:
        o = options
        if min(o.workers, o.max_connections, o.max_size, o.spool_limit) < 1 or o.timeout <= 0:
            raise ConfigError("workers, max connections, max size, spool limit and timeout must be positive")
        self.options = options
        self.pool = pool
        #: Filters that learn (TELL), apart from those that score.
        self.writers = pool.for_writing(options.timeout)
        self._load_config = load_config
        self._allowed = listen.allowed_networks(options.allowed_ips)
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._listener: socket.socket | None = None
        self.address: spamd.Address | None = None
        #: Whether this process removes the Unix socket when it stops (a
        #: forked worker leaves that to the process that made it).
        self.owns_socket = True
        #: Appended to each request's log line (the worker, when forked).
        self.label = ""
        # Made by serve, in the process that serves (after a fork).
        self._wake_r, self._wake_w = _NO_SOCKET, _NO_SOCKET
        self._sel: selectors.BaseSelector = selectors.DefaultSelector()
        self._conns: set[Connection] = set()
        self._events: dict[Connection, int] = {}
        self._listening = False
        self._paused_until = 0.0
        self._spooled = 0
        self._scoring: queue.SimpleQueue[Connection | None] = queue.SimpleQueue()
        self._learning: queue.SimpleQueue[Connection | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[tuple[Connection, Answer]] = queue.SimpleQueue()

    # -- lifetime -----------------------------------------------------------

    def bind(self) -> spamd.Address:
        """Open the listening socket (``spamfilter.daemon.listen``); the
        address it listens on (the real port when port 0 was asked for).
        Raises ``ConfigError``."""
        o = self.options
        try:
            self._listener, self.address = listen.bind(o.address, o.socket_mode, o.socket_group, o.allowed_ips)
            self._listener.listen(128)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {o.address}: {exc.strerror or exc}") from None
        return self.address

    def stop(self) -> None:
        """Stop accepting; ``serve`` returns once every accepted request is
        answered. Safe to call from a signal handler."""
        self._stop.set()
        self._wake()

    def reload(self) -> None:
        """Read the configuration again (SIGHUP); on an error the old one
        stays. Safe from a signal handler."""
        self._reload.set()
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"!")
        except OSError:
            pass  # full: the loop wakes anyway

    def announce(self, processes: int = 1) -> None:
        """The start-up line: where, which models, whether TELL is accepted."""
        tell = "TELL accepted" if self.options.allow_tell else "TELL refused (--allow-tell to accept)"
        many = f"; {processes} processes" if processes > 1 else ""
        logger.info("listening on %s with %s%s; %s", self.address, self.pool.describe(), many, tell)

    def close_listener(self) -> None:
        """Close the listening socket (and remove a Unix socket's path)."""
        if self._listener is not None:
            if self._listening:
                self._sel.unregister(self._listener)
                self._listening = False
            self._listener.close()
            self._listener = None
        if self.owns_socket and self.options.address.path:
            listen.remove_socket(self.options.address.path)

    def serve(self, *, parent: int | None = None, announce: bool = True) -> None:
        """Answer requests until ``stop`` (or until the pipe ``parent`` is
        closed: the process that forked this one is gone); then answer what
        was accepted, close the socket and the filters."""
        if self._listener is None:
            self.bind()
        if announce:
            self.announce()
        self._sel.close()  # made before a fork: this process's own, from here on
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        threads = [threading.Thread(target=self._score_requests, daemon=True) for _ in range(self.options.workers)]
        threads.append(threading.Thread(target=self._learn_requests, daemon=True))
        for t in threads:
            t.start()
        self._sel.register(self._wake_r, _READ, _WAKE)
        if parent is not None:
            self._sel.register(parent, _READ, _PARENT)
        try:
            self._loop(parent)
        finally:
            for conn in list(self._conns):
                self._close(conn)
            for _ in range(self.options.workers):
                self._scoring.put(None)
            self._learning.put(None)
            for t in threads:
                t.join(self.options.timeout + 60)
            self.close_listener()
            self.pool.close()
            self.writers.close()
            self._sel.close()
            self._wake_r.close()
            self._wake_w.close()
            logger.info("stopped")

    def _loop(self, parent: int | None) -> None:
        draining_until: float | None = None
        while True:
            now = time.monotonic()
            if self._stop.is_set() and draining_until is None:
                if parent is not None:
                    self._sel.unregister(parent)
                self._accept_backlog(now)
                logger.info("stopping: finishing %d connections", len(self._conns))
                draining_until = now + self.options.timeout + 60
            if draining_until is not None and (not self._conns or now > draining_until):
                return
            if self._reload.is_set():
                self._reload.clear()
                self._reread_config()
            self._watch_listener(now, draining_until is None)
            for key, mask in self._sel.select(self._wait(now)):
                if key.data is _LISTENER:
                    self._accept(time.monotonic())
                elif key.data is _WAKE:
                    while _drained(self._wake_r):
                        pass
                elif key.data is _PARENT:
                    self._stop.set()
                else:
                    self._ready(key.data, mask, time.monotonic())
            self._answered(time.monotonic())
            self._expire(time.monotonic())

    def _wait(self, now: float) -> float:
        """Seconds until the next deadline (at most one)."""
        deadlines = [c.deadline for c in self._conns if c.state is not State.WORK]
        return min([1.0, *(d - now for d in deadlines)]) if deadlines else 1.0

    def _reread_config(self) -> None:
        reload_config((self.pool, self.writers), self._load_config, logger)

    def _watch_listener(self, now: float, accepting: bool) -> None:
        """Watch the listening socket while there is room (or a connection
        that may be closed to make room)."""
        want = (
            accepting
            and self._listener is not None
            and now >= self._paused_until
            and (len(self._conns) < self.options.max_connections or self._quietest(now) is not None)
        )
        if want and not self._listening:
            assert self._listener is not None
            self._sel.register(self._listener, _READ, _LISTENER)
        elif self._listening and not want:
            assert self._listener is not None
            self._sel.unregister(self._listener)
        self._listening = want

    def _accept(self, now: float, *, drain: bool = False) -> None:
        listener = self._listener
        for _ in range(64):
            if listener is None:
                return
            if not drain and len(self._conns) >= self.options.max_connections and not self._make_room(now):
                return
            try:
                sock, peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # Out of file descriptors, say: try again a moment later.
                logger.warning("accept failed: %s", exc.strerror or exc)
                self._paused_until = now + 0.1
                return
            self._admit(sock, peer, now)

    def _accept_backlog(self, now: float) -> None:
        """Accept every connection waiting in the backlog (a client there has
        connected already and may have sent its request), then close the
        listening socket: each of them gets an answer, not a reset."""
        while self._listener is not None:
            before = len(self._conns)
            self._accept(now, drain=True)
            if len(self._conns) == before:
                break
        self.close_listener()

    def _admit(self, sock: socket.socket, peer: object, now: float) -> None:
        who = f"{peer[0]}" if isinstance(peer, tuple) else "unix"
        conn = Connection(sock, who, now, self.options.timeout, self.options.max_size)
        self._conns.add(conn)
        if isinstance(peer, tuple) and not listen.is_allowed(str(peer[0]), self._allowed):
            logger.warning("refused %s: not in the allowed networks", who)
            self._reply(conn, [spamd.reply_head(spamd.EX_NOPERM, text="not allowed")], now)
            return
        self._watch(conn, _READ)

    def _quietest(self, now: float) -> Connection | None:
        """The connection without a whole request that has been quiet longest,
        if for ``QUIET_SECONDS`` at least (a new one has its chance to speak)."""
        idle = [c for c in self._conns if c.state in (State.HEAD, State.BODY, State.LINGER)]
        quietest = min(idle, key=lambda c: c.active) if idle else None
        if quietest is None or (quietest.state is not State.LINGER and now - quietest.active < QUIET_SECONDS):
            return None
        return quietest

    def _make_room(self, now: float) -> bool:
        victim = self._quietest(now)
        if victim is None:
            return False
        if victim.state is not State.LINGER:
            logger.warning(
                "%s: closed after %.1f s without a whole request, to make room for another client (%d connections)",
                victim.who,
                time.monotonic() - victim.started,
                len(self._conns),
            )
        self._close(victim)
        return True

    # -- one connection -----------------------------------------------------

    def _watch(self, conn: Connection, events: int) -> None:
        had = self._events.get(conn, 0)
        if events == had:
            return
        if not had:
            self._sel.register(conn.sock, events, conn)
        elif not events:
            self._sel.unregister(conn.sock)
        else:
            self._sel.modify(conn.sock, events, conn)
        self._events[conn] = events

    def _close(self, conn: Connection) -> None:
        self._watch(conn, 0)
        self._events.pop(conn, None)
        self._conns.discard(conn)
        self._spooled -= conn.spooled
        conn.spooled = 0
        conn.close()

    def _ready(self, conn: Connection, mask: int, now: float) -> None:
        if conn not in self._conns:
            return
        if mask & _WRITE and conn.state is State.SEND:
            self._send(conn, now)
        elif mask & _READ:
            self._read(conn, now)

    def _read(self, conn: Connection, now: float) -> None:
        try:
            data = conn.sock.recv(CHUNK * 4)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(conn, exc)
            return
        conn.active = now
        if conn.state is State.LINGER:
            if not data:
                self._close(conn)
            return
        try:
            if conn.state is State.HEAD:
                rest = conn.feed_head(data)
                if rest is not None:
                    self._headed(conn, rest, now)
            elif conn.feed_body(data):
                self._whole(conn, now)
        except ProtocolError as exc:
            logger.warning("%s: protocol error: %s", conn.who, exc)
            self._reply(conn, [spamd.reply_head(exc.code, text=str(exc))], now)

    def _lost(self, conn: Connection, exc: OSError) -> None:
        if conn.state is not State.LINGER:
            logger.warning("%s: connection lost: %s", conn.who, exc.strerror or exc)
        self._close(conn)

    def _headed(self, conn: Connection, rest: bytes, now: float) -> None:
        """The head is whole: answer PING, end SKIP, or read the message."""
        r = conn.request
        assert r is not None
        if r.command == "PING":
            self._reply(conn, [f"SPAMD/{spamd.VERSION} 0 PONG\r\n".encode("ascii")], now)
            return
        if r.command == "SKIP":
            self._close(conn)
            return
        if conn.oversized and r.command == "PROCESS":
            if self._spooled + conn.size > self.options.spool_limit:
                why = f"not scanned: {self._spooled} bytes spooled already, the limit is {self.options.spool_limit}"
                self._answer(conn, replies.error(spamd.EX_TEMPFAIL, "spool full, not scanned", why=why), now)
                return
            self._spooled += conn.size
            conn.spooled = conn.size
            conn.start_spool()
        conn.state = State.BODY
        if conn.feed_body(rest) if rest else conn.size == 0:
            self._whole(conn, now)

    def _whole(self, conn: Connection, now: float) -> None:
        """The message is whole: answer it here, or hand it to a thread."""
        conn.nothing_more()
        r = conn.request
        assert r is not None
        if r.command == "TELL" and not self.options.allow_tell:
            why = "not learned: TELL is refused (spamfilter serve --allow-tell accepts it)"
            # spamc says "Message was already un/learned" all the same.
            answer = replies.error(spamd.EX_NOPERM, "TELL is not enabled (spamfilter serve --allow-tell)", why=why)
            answer.outcome = "refused"
            self._answer(conn, answer, now)
        elif conn.oversized and r.command == "PROCESS":
            self._answer(conn, Answer([spamd.reply_head(spamd.EX_OK, [("Content-length", str(conn.size))])], "unscanned"), now, spool=True)
        elif conn.oversized:
            self._answer(conn, replies.unscanned(r, conn.size, self.options.max_size, bytes(conn.body)), now)
        else:
            conn.state = State.WORK
            self._watch(conn, 0)
            (self._learning if r.command == "TELL" else self._scoring).put(conn)

    def _answer(self, conn: Connection, answer: Answer, now: float, *, spool: bool = False) -> None:
        """Send ``answer`` to a request; its log line once it is out."""
        assert conn.request is not None
        conn.outcome, conn.log_odds, conn.why = answer.outcome, answer.log_odds, answer.why
        conn.owner = answer.owner or self.pool.owner(conn.request.user)
        self._reply(conn, answer.pieces, now, spool=spool)

    def _reply(self, conn: Connection, pieces: replies.Pieces, now: float, *, spool: bool = False) -> None:
        conn.reply(pieces, now, then_spool=spool)
        self._send(conn, now)

    def _send(self, conn: Connection, now: float) -> None:
        try:
            done = conn.send()
        except OSError as exc:
            self._lost(conn, exc)
            return
        conn.active = now
        if not done:
            self._watch(conn, _WRITE)
            return
        if conn.outcome:
            self._log(conn, now)
        conn.linger(now)
        self._watch(conn, _READ)

    def _answered(self, now: float) -> None:
        """Send what the threads have answered."""
        while True:
            try:
                conn, answer = self._done.get_nowait()
            except queue.Empty:
                return
            if conn in self._conns:
                self._answer(conn, answer, now)

    def _expire(self, now: float) -> None:
        for conn in [c for c in self._conns if c.state is not State.WORK and now >= c.deadline]:
            if conn.state in (State.HEAD, State.BODY):
                logger.warning("%s: request not complete after %.0f s, connection closed", conn.who, self.options.timeout)
            elif conn.state is State.SEND:
                logger.warning("%s: reply not taken after %.0f s, connection closed", conn.who, self.options.timeout)
            self._close(conn)

    # -- the threads --------------------------------------------------------

    def _score_requests(self) -> None:
        while (conn := self._scoring.get()) is not None:
            self._done.put((conn, self._answer_from(conn, self.pool)))
            self._wake()

    def _learn_requests(self) -> None:
        """TELLs, one at a time; one that waited past ``timeout`` for the
        writes before it is not tried (its client may be gone)."""
        while (conn := self._learning.get()) is not None:
            assert conn.request is not None
            if time.monotonic() - conn.active > self.options.timeout:
                owner = self.writers.owner(conn.request.user)
                why = f"not learned: waited over {self.options.timeout:.0f} s for the database"
                answer = replies.error(spamd.EX_TEMPFAIL, "database busy, not learned: try again later", owner, why)
            else:
                answer = self._answer_from(conn, self.writers)
            self._done.put((conn, answer))
            self._wake()

    def _answer_from(self, conn: Connection, pool: FilterPool) -> Answer:
        assert conn.request is not None
        try:
            return replies.from_pool(conn.request, bytes(conn.body), pool)
        except Exception:  # noqa: BLE001 - the server outlives any one request's failure
            logger.exception("%s: internal error", conn.who)
            return replies.error(spamd.EX_SOFTWARE, "internal error")

    def _log(self, conn: Connection, now: float) -> None:
        """The request's line; a warning, ending in its why, when it has one."""
        assert conn.request is not None
        odds = "-" if conn.log_odds is None else f"{conn.log_odds:+.2f}"
        ms = (now - conn.started) * 1000
        why = f"; {conn.why}" if conn.why else ""
        logger.log(
            logging.WARNING if conn.why else logging.INFO,
            "%s user=%s verdict=%s log_odds=%s bytes=%d ms=%.1f client=%s%s%s",
            conn.request.command,
            conn.owner or "(default)",
            conn.outcome,
            odds,
            conn.size,
            ms,
            conn.who,
            self.label,
            why,
        )


def _drained(sock: socket.socket) -> bool:
    """Read what waits on the wake-up socket; True while there may be more."""
    try:
        return len(sock.recv(4096)) == 4096
    except OSError:
        return False
