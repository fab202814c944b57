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
  whole request (a second at least) is closed to admit the new one, or,
  none quiet that long, the slowest sender under 1 KiB a second
  (``Sockets.quietest``).
- ``workers`` threads score whole requests with the scoring pool's filters.
- One writer thread learns (TELL) with filters of its own
  (``FilterPool.for_writing``), whose wait for a lock another process holds
  is bounded by ``timeout``: a TELL that cannot get the database in that
  time is answered ``EX_TEMPFAIL`` (one queued behind it waits its turn
  first, up to ``timeout`` too), and scoring never waits behind it
  (SQLite in WAL mode lets readers read while another process writes).
- ``prefork`` runs this whole server in one process per core on a shared
  listening socket. A forked process takes a new connection only while one
  of its scoring threads is free, and one at a time: connections then wait
  in the kernel's backlog, which every process takes from, rather than in
  the queue of a process that is busy while another is idle (measured:
  the p99 of 8 concurrent clients 12% lower; docs/benchmarks.md, "Under
  load").

Nothing a client sends can stop the server: a protocol error gets an error
reply (``SPAMD/1.5 76 EX_PROTOCOL ...``), then the connection is shut down
and drained, so the client reads the reply rather than a reset.

Messages longer than ``max_size`` are not scanned, as spamc does with its
own ``-s``: PROCESS gives the message back unchanged (without a ``Spam``
line; it is spooled to a temporary file, at most ``spool_limit`` bytes for
all connections at once, counted as they come: a request announcing more
than is left, or whose bytes would go past it, gets ``EX_TEMPFAIL``),
HEADERS its header block, the other commands an ``EX_TOOBIG`` reply. A TELL the daemon accepts is learned up to
``TELL_MAX_SIZE`` (64 MiB) whatever ``max_size`` says.

SIGTERM (``stop``): the connections waiting in the listen backlog are
accepted too, the socket is closed, and every accepted request is answered
before the server returns; a client that has sent nothing yet has
``STOP_GRACE`` seconds to begin, not the whole timeout. SIGHUP (``reload``): the configuration is read
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
from spamfilter.daemon.sockets import LISTENER, PARENT, READ, WAKE, WRITE, Sockets
from spamfilter.errors import ConfigError, ProtocolError

logger = logging.getLogger("spamfilter.daemon")

#: Seconds a client that has sent nothing is still given once the server stops.
STOP_GRACE = 2.0
#: Bytes of a TELL (with --allow-tell) taken whatever --max-size says: as
#: many as `spamfilter filter` holds of a message.
TELL_MAX_SIZE = 64 << 20
_LARGE_TELLS_BUSY = "too many large messages at once, not learned: try again later"


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How the server listens and what it allows.

    address: a TCP host and port, or a Unix socket path.
    socket_mode, socket_group: the Unix socket's permissions (0600: only the
        daemon's user may connect) and optionally its group.
    workers: threads scoring requests at the same time (per process). Two:
        one long request does not hold up the next, and scoring is CPU
        work under one interpreter lock, so more threads only take turns
        (with 4, the p99 of 8 concurrent clients was a fifth higher at the
        same throughput; docs/benchmarks.md, "Under load").
    max_connections: connections held at once (per process); beyond, the
        quietest one without a whole request is closed.
    max_size: longer messages are passed back unscanned.
    timeout: seconds a client has to send its whole request (and to take
        its reply); also how long a TELL may wait for the database.
    allowed_ips: client networks allowed over TCP; empty means loopback
        only, and then the server must listen on a loopback address.
    allow_tell: accept TELL (learning), like spamd's --allow-tell.
    spool_limit: bytes of oversized PROCESS messages spooled, and of TELLs
        over ``max_size`` held in memory, at once.
    """

    address: spamd.Address
    socket_mode: int = 0o600
    socket_group: str = ""
    workers: int = 2
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
        self.address: spamd.Address | None = None
        #: Appended to each request's log line (the worker, when forked).
        self.label = ""
        self.sockets = Sockets(o.max_connections, o.timeout, o.address.path)
        self._scoring: queue.SimpleQueue[Connection | None] = queue.SimpleQueue()
        self._learning: queue.SimpleQueue[Connection | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[tuple[Connection, Answer]] = queue.SimpleQueue()
        #: Requests handed to the scoring threads and not answered yet
        #: (read and written by the event loop only).
        self._scoring_now = 0

    # -- lifetime -----------------------------------------------------------

    def bind(self) -> spamd.Address:
        """Open the listening socket (``spamfilter.daemon.listen``); the
        address it listens on (the real port when port 0 was asked for).
        Raises ``ConfigError``, or ``AddressInUse`` when another server
        holds the address."""
        o = self.options
        try:
            self.sockets.listeners, self.address = listen.bind_all(o.address, o.socket_mode, o.socket_group, o.allowed_ips)
            for listener in self.sockets.listeners:
                # Forked processes take a connection only when they can
                # score it: the rest wait in the backlog.
                listener.listen(listen.BACKLOG)
        except OSError as exc:
            raise listen.cannot_listen(o.address, exc) from None
        return self.address

    def stop(self) -> None:
        """Stop accepting; ``serve`` returns once every accepted request is
        answered. Safe to call from a signal handler."""
        self._stop.set()
        self.sockets.wake()

    def reload(self) -> None:
        """Read the configuration again (SIGHUP); on an error the old one
        stays. Safe from a signal handler."""
        self._reload.set()
        self.sockets.wake()

    @property
    def owns_socket(self) -> bool:
        """Whether this process removes the Unix socket when it stops (a
        forked worker leaves that to the process that made it)."""
        return self.sockets.owns_socket

    @owns_socket.setter
    def owns_socket(self, value: bool) -> None:
        self.sockets.owns_socket = value

    def announce(self, processes: int = 1) -> None:
        """The start-up line: where, which models, whether TELL is accepted."""
        tell = "TELL accepted" if self.options.allow_tell else "TELL refused (--allow-tell to accept)"
        many = f"; {processes} processes" if processes > 1 else ""
        where = str(self.address)
        if len(self.sockets.listeners) > 1:
            where += " (" + ", ".join(str(sock.getsockname()[0]) for sock in self.sockets.listeners) + ")"
        logger.info("listening on %s with %s%s; %s", where, self.pool.describe(), many, tell)

    def close_listener(self) -> None:
        """Close the listening socket (and remove a Unix socket's path)."""
        self.sockets.close_listener()

    def serve(self, *, parent: int | None = None, announce: bool = True) -> None:
        """Answer requests until ``stop`` (or until the pipe ``parent`` is
        closed: the process that forked this one is gone); then answer what
        was accepted, close the socket and the filters."""
        if not self.sockets.listeners:
            self.bind()
        if announce:
            self.announce()
        self.pool.warm()
        self.sockets.start(parent)  # the selector made before a fork: this process's own, from here on
        threads = [threading.Thread(target=self._score_requests, daemon=True) for _ in range(self.options.workers)]
        threads.append(threading.Thread(target=self._learn_requests, daemon=True))
        for t in threads:
            t.start()
        try:
            self._loop(parent)
        finally:
            for _ in range(self.options.workers):
                self._scoring.put(None)
            self._learning.put(None)
            for t in threads:
                t.join(self.options.timeout + 60)
            self.sockets.close()
            self.pool.close()
            self.writers.close()
            logger.info("stopped")

    def _loop(self, parent: int | None) -> None:
        draining_until: float | None = None
        while True:
            now = time.monotonic()
            if self._stop.is_set() and draining_until is None:
                if parent is not None:
                    self.sockets.sel.unregister(parent)
                self._accept_backlog(now)
                self.sockets.hurry_silent(now, STOP_GRACE)
                logger.info("stopping: finishing %d connections", len(self.sockets.conns))
                draining_until = now + self.options.timeout + 60
            if draining_until is not None and (not self.sockets.conns or now > draining_until):
                return
            if self._reload.is_set():
                self._reload.clear()
                self._reread_config()
            self.sockets.watch_listener(now, draining_until is None and self._has_room(parent))
            for key, mask in self.sockets.sel.select(self.sockets.wait(now)):
                if key.data is LISTENER:
                    self._accept(key.fileobj, time.monotonic(), most=1 if parent is not None else 64)  # type: ignore[arg-type]
                elif key.data is WAKE:
                    self.sockets.woken()
                elif key.data is PARENT:
                    self._stop.set()
                else:
                    self._ready(key.data, mask, time.monotonic())
            self._answered(time.monotonic())
            self.sockets.expire(time.monotonic())

    def _has_room(self, parent: int | None) -> bool:
        """Whether to take new connections now: always in a process of its
        own; a forked one (``parent``) only while a scoring thread is free,
        so a connection that would wait here is taken by a process that can
        answer it at once (see the module docstring)."""
        return parent is None or self._scoring_now < self.options.workers

    def _reread_config(self) -> None:
        reload_config((self.pool, self.writers), self._load_config, logger)

    def _accept(self, listener: socket.socket, now: float, *, drain: bool = False, most: int = 64) -> None:
        for sock, peer in self.sockets.accept(listener, now, drain=drain, most=most):
            self._admit(sock, peer, now)

    def _accept_backlog(self, now: float) -> None:
        """Accept every connection waiting in the backlogs (a client there has
        connected already and may have sent its request), then close the
        listening sockets: each of them gets an answer, not a reset."""
        for listener in self.sockets.listeners:
            while True:
                before = len(self.sockets.conns)
                self._accept(listener, now, drain=True)
                if len(self.sockets.conns) == before:
                    break
        self.sockets.close_listener()

    def _admit(self, sock: socket.socket, peer: object, now: float) -> None:
        who = f"{peer[0]}" if isinstance(peer, tuple) else "unix"
        conn = Connection(sock, who, now, self.options.timeout, self.options.max_size)
        self.sockets.conns.add(conn)
        if isinstance(peer, tuple) and not listen.is_allowed(str(peer[0]), self._allowed):
            logger.warning("refused %s: not in the allowed networks", who)
            self._reply(conn, [spamd.reply_head(spamd.EX_NOPERM, text="not allowed")], now)
            return
        self.sockets.watch(conn, READ)

    # -- one connection -----------------------------------------------------

    def _ready(self, conn: Connection, mask: int, now: float) -> None:
        if conn not in self.sockets.conns:
            return
        if mask & WRITE and conn.state is State.SEND:
            self._send(conn, now)
        elif mask & READ:
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
        conn.received += len(data)
        if conn.state is State.LINGER:
            if not data:
                self.sockets.drop(conn)
            return
        if not data and conn.silent:
            # Connected and closed without a byte: a health check (nc -z),
            # or another serve seeing whether this one listens.
            self.sockets.drop(conn)
            return
        try:
            if conn.state is State.HEAD:
                rest = conn.feed_head(data)
                if rest is not None:
                    self._headed(conn, rest, now)
            elif self._feed(conn, data):
                self._whole(conn, now)
        except ProtocolError as exc:
            logger.warning("%s: protocol error: %s", conn.who, exc)
            self._reply(conn, [spamd.reply_head(exc.code, text=str(exc))], now)
        except Exception as exc:  # noqa: BLE001 - one request's fault ends that connection, not the loop
            logger.error("%s: internal error reading the request, connection closed: %s: %s", conn.who, type(exc).__name__, exc)
            self._reply(conn, [spamd.reply_head(spamd.EX_SOFTWARE, text="internal error")], now)

    def _lost(self, conn: Connection, exc: OSError) -> None:
        if conn.state is State.SEND and conn.outcome and conn.request is not None:
            # Answered, and what was done is logged: a TELL whose client
            # left before the reply was learned all the same.
            conn.why = "; ".join(filter(None, [conn.why, f"the reply was not taken: {exc.strerror or exc}"]))
            self._log(conn, time.monotonic())
        elif conn.state is not State.LINGER:
            logger.warning("%s: connection lost: %s", conn.who, exc.strerror or exc)
        self.sockets.drop(conn)

    def _headed(self, conn: Connection, rest: bytes, now: float) -> None:
        """The head is whole: answer PING, end SKIP, or read the message."""
        r = conn.request
        assert r is not None
        if r.command == "PING":
            self._reply(conn, [f"SPAMD/{spamd.VERSION} 0 PONG\r\n".encode("ascii")], now)
            return
        if r.command == "SKIP":
            self.sockets.drop(conn)
            return
        if r.command == "TELL" and self.options.allow_tell:
            # Learning is no scan to spare: large spam is learned through
            # the daemon too, where only the daemon may write the model.
            conn.max_size = max(conn.max_size, TELL_MAX_SIZE)
        if conn.oversized and r.command == "PROCESS" and not r.compressed:
            if self.sockets.spooled + conn.size > self.options.spool_limit:
                why = f"not scanned: {self.sockets.spooled} bytes spooled already, the limit is {self.options.spool_limit}"
                self._answer(conn, replies.error(spamd.EX_TEMPFAIL, "spool full, not scanned", why=why), now)
                return
            conn.start_spool()
        if self._large_tell(conn) and self.sockets.spooled + min(conn.size, conn.max_size) > self.options.spool_limit:
            why = f"not learned: {self.sockets.spooled} bytes of large messages held already, the limit is {self.options.spool_limit}"
            self._answer(conn, replies.error(spamd.EX_TEMPFAIL, _LARGE_TELLS_BUSY, why=why), now)
            return
        conn.state = State.BODY
        if self._feed(conn, rest) if rest else (conn.size == 0 and not conn.to_the_end):
            self._whole(conn, now)

    def _large_tell(self, conn: Connection) -> bool:
        """A TELL over ``--max-size``, which is kept in memory up to
        ``TELL_MAX_SIZE``: its bytes count against the spool limit too, or
        a few clients could make the daemon hold 64 MiB each."""
        r = conn.request
        # One without a length may be as large: counted as it comes too.
        return r is not None and r.command == "TELL" and self.options.allow_tell and (conn.size > self.options.max_size or conn.to_the_end or conn.unframed)

    def _feed(self, conn: Connection, data: bytes) -> bool:
        """``conn.feed_body``, charging spooled bytes (and a large TELL's,
        ``_large_tell``) to the spool limit as they come, not as announced:
        a client that announces much and sends little holds only what it
        sent. Past the limit the spool (or the TELL's body) is dropped (the
        answer is EX_TEMPFAIL) and its bytes given back."""
        held = conn.spool is not None or (self._large_tell(conn) and conn.spool_error is None)
        if held and data:
            more = len(data) if conn.spool is not None else min(conn.got + len(data), conn.max_size) - conn.spooled
            if self.sockets.spooled + more > self.options.spool_limit:
                others = self.sockets.spooled - conn.spooled
                conn.spool_error = f"spool full: {others} bytes held by others, the limit is {self.options.spool_limit}"
                conn.spool_full = True
                conn.drop_spool()
                conn.body = bytearray()  # nothing more is kept once spool_error is set
                held = False
            else:
                self.sockets.spooled += more
                conn.spooled += more
        whole = conn.feed_body(data)
        if not held or conn.spool_error is not None:
            # Dropped, at the limit or on a failed write: its bytes are free.
            self.sockets.give_back(conn)
        return whole

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
        elif conn.spool_error is not None and r.command == "TELL":
            self._answer(conn, replies.error(spamd.EX_TEMPFAIL, _LARGE_TELLS_BUSY, why=f"not learned: {conn.spool_error}"), now)
        elif conn.spool_error is not None:
            why = f"not scanned: the spool could not take the message ({conn.spool_error})"
            short = "spool full" if conn.spool_full else "could not spool the message"
            self._answer(conn, replies.error(spamd.EX_TEMPFAIL, f"{short}, not scanned", why=why), now)
        elif conn.oversized:
            if r.compressed:
                # Neither given back nor cut at a header block: it is compressed.
                answer = replies.error(spamd.EX_TOOBIG, f"message over {conn.max_size} bytes")
            elif r.command == "PROCESS" and conn.unframed:
                # Not spooled (its size was not known in time): not given back.
                answer = replies.error(spamd.EX_TOOBIG, f"message over {conn.max_size} bytes without a Content-length")
            elif r.command == "PROCESS":  # given back from the spool
                answer = Answer([replies.message_head(r.version, conn.size)], "unscanned")
            else:
                answer = replies.unscanned(r, conn.size, conn.max_size, bytes(conn.body))
            compressed = " compressed" if r.compressed else ""
            if r.command == "TELL" and self.options.allow_tell and conn.max_size > self.options.max_size:
                answer.why = f"not learned: {conn.size} bytes{compressed}, over the {TELL_MAX_SIZE >> 20} MiB a TELL may carry"
            else:
                answer.why = f"{replies.not_done(r)}: {conn.size} bytes{compressed}, over --max-size {self.options.max_size}"
            self._answer(conn, answer, now, spool=r.command == "PROCESS" and not r.compressed and not conn.unframed)
        else:
            conn.state = State.WORK
            self.sockets.watch(conn, 0)
            if r.command == "TELL":
                self._learning.put(conn)
            else:
                self._scoring_now += 1
                self._scoring.put(conn)

    def _answer(self, conn: Connection, answer: Answer, now: float, *, spool: bool = False) -> None:
        """Send ``answer`` to a request; its log line once it is out."""
        self._record(conn, answer)
        self._reply(conn, answer.pieces, now, spool=spool)

    def _record(self, conn: Connection, answer: Answer) -> None:
        """What the request's log line says: ``answer``'s outcome, whose
        model, and why (if it was not scanned or learned)."""
        assert conn.request is not None
        conn.outcome, conn.log_odds, conn.why = answer.outcome, answer.log_odds, answer.why
        conn.owner = answer.owner or self.pool.owner(conn.request.user)

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
            self.sockets.watch(conn, WRITE)
            return
        if conn.outcome:
            self._log(conn, now)
        # Given back whole: the spool's bytes are free while the client
        # takes its time to close.
        conn.drop_spool()
        self.sockets.give_back(conn)
        conn.linger(now)
        self.sockets.watch(conn, READ)

    def _answered(self, now: float) -> None:
        """Send what the threads have answered."""
        while True:
            try:
                conn, answer = self._done.get_nowait()
            except queue.Empty:
                return
            if conn.request is not None and conn.request.command != "TELL":
                self._scoring_now -= 1
            if conn in self.sockets.conns:
                self._answer(conn, answer, now)
            elif conn.request is not None:
                # What was done is logged even so: a TELL the client did not
                # wait for was learned all the same.
                self._record(conn, answer)
                conn.why = "; ".join(filter(None, [conn.why, "the client left before the reply"]))
                self._log(conn, now)

    # -- the threads --------------------------------------------------------

    def _score_requests(self) -> None:
        while (conn := self._scoring.get()) is not None:
            self._done.put((conn, self._answer_from(conn, self.pool)))
            self.sockets.wake()

    def _learn_requests(self) -> None:
        """TELLs, one at a time; one that waited past ``timeout`` for the
        writes before it is not tried (its client may be gone)."""
        while (conn := self._learning.get()) is not None:
            self._done.put((conn, self._answer_from(conn, self.writers, waited_from=conn.active)))
            self.sockets.wake()

    def _answer_from(self, conn: Connection, pool: FilterPool, waited_from: float | None = None) -> Answer:
        """The answer to a whole request, whatever fails on the way: a
        thread that raised would leave its request, and every one queued
        behind it, without an answer (a connection at work is never timed
        out)."""
        try:
            return self._worked(conn, pool, waited_from)
        except Exception:  # noqa: BLE001 - the server outlives any one request's failure
            logger.exception("%s: internal error", conn.who)
            return replies.error(spamd.EX_SOFTWARE, "internal error")

    def _worked(self, conn: Connection, pool: FilterPool, waited_from: float | None) -> Answer:
        assert conn.request is not None
        if waited_from is not None and time.monotonic() - waited_from > self.options.timeout:
            owner = pool.owner(conn.request.user)
            why = f"not learned: waited over {self.options.timeout:.0f} s for the database"
            return replies.error(spamd.EX_TEMPFAIL, "database busy, not learned: try again later", owner, why)
        raw = bytes(conn.body)
        if conn.request.compressed:
            try:
                raw = spamd.inflate(raw, conn.max_size)
            except ProtocolError as exc:
                return replies.error(exc.code, str(exc), why=f"{replies.not_done(conn.request)}: {exc}")
        return replies.from_pool(conn.request, raw, pool)

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
