"""The sockets one event loop of ``serve`` watches, and the room they take.

One selector holds the listening socket (watched only while there is room
for another connection, or a connection that may be closed to make it), a
wake-up socket pair (the scoring threads and signal handlers write a byte
to it), the pipe to a parent process, and every client ``Connection``.

At ``max_connections`` the connection that has been quiet longest without
a whole request, for ``QUIET_SECONDS`` at least, is closed to admit a new
one; a connection past its deadline is closed. What a connection says is
``server``'s business; this module only knows when to look at it.
"""

from __future__ import annotations

import logging
import selectors
import socket
import time

from spamfilter.daemon import listen
from spamfilter.daemon.connection import Connection, State

logger = logging.getLogger("spamfilter.daemon")

# Selector tags of the sockets that are not clients.
LISTENER, WAKE, PARENT = "listener", "wake", "parent"
READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
#: Seconds a connection must have been quiet before it may be closed to
#: make room for another (at ``max_connections``).
QUIET_SECONDS = 1.0
#: Bytes a second below which a connection that is never quiet for a
#: second may still be closed to make room: a client trickling its request
#: (a byte every half second), never one that is busy sending.
MIN_RATE = 1024
_NO_SOCKET = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # closed: wakes nothing
_NO_SOCKET.close()


class Sockets:
    """The listener, the wake-up pair and the client connections of one process."""

    def __init__(self, max_connections: int, timeout: float, path: str | None) -> None:
        self.max_connections = max_connections
        self.timeout = timeout
        #: A Unix socket's path, removed when the listener closes if ``owns_socket``.
        self.path = path
        #: Whether this process removes the Unix socket when it stops (a
        #: forked worker leaves that to the process that made it).
        self.owns_socket = True
        #: The listening sockets (a host name may stand for several addresses).
        self.listeners: list[socket.socket] = []
        self.conns: set[Connection] = set()
        #: Bytes of oversized messages spooled by all connections.
        self.spooled = 0
        self.sel: selectors.BaseSelector = selectors.DefaultSelector()
        self._events: dict[Connection, int] = {}
        self._listening = False
        self._paused_until = 0.0
        self._wake_r, self._wake_w = _NO_SOCKET, _NO_SOCKET

    def start(self, parent: int | None) -> None:
        """Make this process's own selector and wake-up pair (after a fork),
        watching the pipe ``parent`` if there is one."""
        self.sel.close()
        self.sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.sel.register(self._wake_r, READ, WAKE)
        if parent is not None:
            self.sel.register(parent, READ, PARENT)

    def close(self) -> None:
        """Close every connection, the listener, the selector and the wake-up pair."""
        for conn in list(self.conns):
            self.drop(conn)
        self.close_listener()
        self.sel.close()
        self._wake_r.close()
        self._wake_w.close()

    def wake(self) -> None:
        """Make the loop's ``select`` return. Safe from a signal handler or a thread."""
        try:
            self._wake_w.send(b"!")
        except OSError:
            pass  # full: the loop wakes anyway

    def woken(self) -> None:
        """Read what waits on the wake-up socket."""
        while True:
            try:
                if len(self._wake_r.recv(4096)) < 4096:
                    return
            except OSError:
                return

    def close_listener(self) -> None:
        """Close the listening sockets (and remove a Unix socket's path)."""
        for listener in self.listeners:
            if self._listening:
                self.sel.unregister(listener)
            listener.close()
        self._listening = False
        self.listeners = []
        if self.owns_socket and self.path:
            listen.remove_socket(self.path)

    def watch_listener(self, now: float, accepting: bool) -> None:
        """Watch the listening sockets while there is room (or a connection
        that may be closed to make room)."""
        want = accepting and bool(self.listeners) and now >= self._paused_until and (len(self.conns) < self.max_connections or self.quietest(now) is not None)
        if want and not self._listening:
            for listener in self.listeners:
                self.sel.register(listener, READ, LISTENER)
        elif self._listening and not want:
            for listener in self.listeners:
                self.sel.unregister(listener)
        self._listening = want

    def accept(self, listener: socket.socket, now: float, *, drain: bool = False, most: int = 64) -> list[tuple[socket.socket, object]]:
        """The connections waiting on ``listener`` (up to ``most``), making
        room for each unless ``drain``."""
        accepted: list[tuple[socket.socket, object]] = []
        for _ in range(most):
            if not drain and len(self.conns) + len(accepted) >= self.max_connections and not self._make_room(now):
                break
            try:
                accepted.append(listener.accept())
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                # Out of file descriptors, say: try again a moment later.
                logger.warning("accept failed: %s", exc.strerror or exc)
                self._paused_until = now + 0.1
                break
        return accepted

    def quietest(self, now: float) -> Connection | None:
        """The connection to close to make room: one without a whole request
        that has been quiet longest, if for ``QUIET_SECONDS`` at least (a
        new one has its chance to speak); else, of those connected that long
        and still without a whole request, the slowest sending under
        ``MIN_RATE``. A client trickling a byte every half second is never
        quiet for a second, and 256 of them held every other client out
        until their timeout."""
        idle = [c for c in self.conns if c.state in (State.HEAD, State.BODY, State.LINGER)]
        quietest = min(idle, key=lambda c: c.active) if idle else None
        if quietest is None or quietest.state is State.LINGER or now - quietest.active >= QUIET_SECONDS:
            return quietest
        rates = {c: c.received / (now - c.started) for c in idle if now - c.started >= QUIET_SECONDS}
        slow = [c for c, rate in rates.items() if rate < MIN_RATE]
        return min(slow, key=rates.__getitem__) if slow else None

    def _make_room(self, now: float) -> bool:
        victim = self.quietest(now)
        if victim is None:
            return False
        if victim.state is not State.LINGER:
            logger.warning(
                "%s: closed after %.1f s without a whole request, to make room for another client (%d connections)",
                victim.who,
                time.monotonic() - victim.started,
                len(self.conns),
            )
        self.drop(victim)
        return True

    def watch(self, conn: Connection, events: int) -> None:
        """Select ``conn`` for ``events`` (0: not at all)."""
        had = self._events.get(conn, 0)
        if events == had:
            return
        if not had:
            self.sel.register(conn.sock, events, conn)
        elif not events:
            self.sel.unregister(conn.sock)
        else:
            self.sel.modify(conn.sock, events, conn)
        self._events[conn] = events

    def drop(self, conn: Connection) -> None:
        """Close ``conn`` and give back what it spooled."""
        self.watch(conn, 0)
        self._events.pop(conn, None)
        self.conns.discard(conn)
        self.give_back(conn)
        conn.close()

    def give_back(self, conn: Connection) -> None:
        """Return the spool budget ``conn`` holds (its spool dropped, sent or closed)."""
        self.spooled -= conn.spooled
        conn.spooled = 0

    def wait(self, now: float) -> float:
        """Seconds until the next deadline (at most one)."""
        deadlines = [c.deadline for c in self.conns if c.state is not State.WORK]
        return min([1.0, *(d - now for d in deadlines)]) if deadlines else 1.0

    def hurry_silent(self, now: float, grace: float) -> None:
        """At a stop: give each client that has sent nothing yet ``grace``
        seconds to start its request rather than the whole timeout, so an
        idle connection does not hold the stop (and the restart after it)."""
        for conn in self.conns:
            if conn.silent:
                conn.idle_at_stop = True
                conn.deadline = min(conn.deadline, now + grace)

    def expire(self, now: float) -> None:
        """Close the connections past their deadline (a request not whole
        ``timeout`` seconds after the connection came, a reply that did not
        move in ``timeout`` seconds; a lingering one at its end)."""
        for conn in [c for c in self.conns if c.state is not State.WORK and now >= c.deadline]:
            if conn.idle_at_stop and conn.silent:
                logger.info("%s: closed at the stop: no request came", conn.who)
            elif conn.state in (State.HEAD, State.BODY):
                logger.warning("%s: request not complete after %.0f s, connection closed", conn.who, self.timeout)
            elif conn.state is State.SEND:
                logger.warning("%s: reply not taken after %.0f s, connection closed", conn.who, self.timeout)
            self.drop(conn)
