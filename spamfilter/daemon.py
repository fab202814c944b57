"""``spamfilter serve``: a resident filter that answers the spamd protocol.

Every request is scored and learned with one model, the default one,
whatever ``User`` the client names, unless per-user mode is on
(``spamfilter.filterpool`` says which model answers a request).

One process holds one ``Filter`` per model (user) for its whole life, so
each request is scored from the filter's in-memory count cache; the cache
is keyed by the store's model versions, so training done by the daemon
itself (TELL) or by any other process (``spamfilter train``, ``imap run``)
is seen by the next request, exactly. Each filter is used under its own
lock (``spamfilter.filterpool``): the requests of one user run one at a
time while those of different users run side by side.

Every connection gets a thread of its own (at most ``max_connections`` at
once), which reads the request within ``timeout`` seconds in all (a client
that trickles its bytes is cut off when the time is up, and holds no
scoring slot while it trickles), then waits for one of ``workers`` scoring
slots. Nothing a client sends can stop the server: a protocol error gets an
error reply (``SPAMD/1.5 76 EX_PROTOCOL ...``) and the connection is closed.

Messages longer than ``max_size`` are not scanned, as spamc does with its
own ``-s``: PROCESS gives the message back unchanged (without a ``Spam``
line), HEADERS its header block, the other commands an ``EX_TOOBIG`` reply.

Logging (``logging`` module, logger ``spamfilter.daemon``): at start the
mode, the model, the database and whether TELL is accepted; one line per
request with the command, user, verdict, log-odds, size and milliseconds,
a warning with the reason when a request is not scanned or not learned
(spamc passes such a message through, and reports a TELL as done whatever
the answer); never message content.
"""

from __future__ import annotations

import grp
import logging
import os
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network, ip_address, ip_network

from spamfilter import spamd
from spamfilter.config import Config
from spamfilter.counts import Decision
from spamfilter.errors import (
    ConfigError,
    MailParseError,
    NotTrainedError,
    ProtocolError,
    SpamfilterError,
    StoreBusyError,
    StoreError,
)
from spamfilter.mail import MailItem, filter_fields, filtered_pieces
from spamfilter.insight import Explanation, Insight
from spamfilter.filterpool import FilterPool
from spamfilter.service import Filter, Refusal, Verdict

logger = logging.getLogger("spamfilter.daemon")

#: spamc sends at most 256 MB; a longer announced message is refused unread.
HARD_MAX_SIZE = 256 << 20
_LOOPBACK = (ip_network("127.0.0.0/8"), ip_network("::1/128"))
_Network = IPv4Network | IPv6Network
_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How the server listens and what it allows.

    address: a TCP host and port, or a Unix socket path.
    socket_mode, socket_group: the Unix socket's permissions (0600: only the
        daemon's user may connect) and optionally its group.
    workers: requests scored or learned at the same time.
    max_connections: connections served at once (more wait in the backlog).
    max_size: longer messages are passed back unscanned.
    timeout: seconds a client has to send its whole request.
    allowed_ips: client networks allowed over TCP; empty means loopback
        only, and then the server must listen on a loopback address.
    allow_tell: accept TELL (learning), like spamd's --allow-tell.
    """

    address: spamd.Address
    socket_mode: int = 0o600
    socket_group: str = ""
    workers: int = 4
    max_connections: int = 64
    max_size: int = 512_000
    timeout: float = 30.0
    allowed_ips: tuple[str, ...] = ()
    allow_tell: bool = False


def _networks(allowed: tuple[str, ...]) -> tuple[_Network, ...]:
    try:
        return tuple(ip_network(a.strip(), strict=False) for a in allowed if a.strip())
    except ValueError as exc:
        raise ConfigError(f"allowed ips: {exc}") from None


def _is_loopback_host(host: str) -> bool:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise ConfigError(f"cannot resolve {host!r}: {exc}") from None
    return all(ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


class Server:
    """The spamd-protocol server; ``bind`` then ``serve`` (until ``stop``)."""

    def __init__(
        self,
        options: ServeOptions,
        pool: FilterPool,
        load_config: Callable[[], Config] | None = None,
    ) -> None:
        if options.workers < 1 or options.max_connections < 1 or options.max_size < 1 or options.timeout <= 0:
            raise ConfigError("workers, max connections, max size and timeout must be positive")
        self.options = options
        self.pool = pool
        self._load_config = load_config
        self._allowed = _networks(options.allowed_ips) or _LOOPBACK
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._work = threading.Semaphore(options.workers)
        self._slots = threading.BoundedSemaphore(options.max_connections)
        self._threads: set[threading.Thread] = set()
        self._threads_lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.address: spamd.Address | None = None

    # -- lifetime -----------------------------------------------------------

    def bind(self) -> spamd.Address:
        """Open the listening socket; the address it listens on (the real
        port when port 0 was asked for). Raises ``ConfigError``."""
        a = self.options.address
        try:
            if a.path:
                self._listener = self._bind_unix(a.path)
                self.address = a
            else:
                if not self.options.allowed_ips and not _is_loopback_host(a.host):
                    raise ConfigError(
                        f"{a.host} is not a loopback address: name the client networks allowed to connect (--allowed-ips)"
                    )
                family = socket.AF_INET6 if ":" in a.host else socket.AF_INET
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((a.host, a.port))
                except BaseException:
                    sock.close()
                    raise
                self._listener = sock
                host, port = sock.getsockname()[:2]
                self.address = spamd.Address(host=str(host), port=int(port))
            self._listener.listen(128)
            self._listener.settimeout(0.2)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {a}: {exc.strerror or exc}") from None
        return self.address

    def _bind_unix(self, path: str) -> socket.socket:
        if os.path.lexists(path):
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                raise ConfigError(f"{path} exists and is not a socket")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)  # left by a daemon that is gone
            else:
                raise ConfigError(f"another server is listening on {path}")
            finally:
                probe.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Created with no access for others, then given its mode: there is
        # no moment at which another user could connect.
        old = os.umask(0o177)
        try:
            sock.bind(path)
        except BaseException:
            sock.close()
            raise
        finally:
            os.umask(old)
        if self.options.socket_group:
            try:
                gid = grp.getgrnam(self.options.socket_group).gr_gid
            except KeyError:
                sock.close()
                os.unlink(path)
                raise ConfigError(f"no such group: {self.options.socket_group}") from None
            os.chown(path, -1, gid)
        os.chmod(path, self.options.socket_mode)
        return sock

    def stop(self) -> None:
        """Stop accepting; ``serve`` returns once the requests in flight are done.
        Safe to call from a signal handler."""
        self._stop.set()

    def reload(self) -> None:
        """Read the configuration again before the next connection is taken
        (SIGHUP); on an error the old one stays. Safe from a signal handler."""
        self._reload.set()

    def serve(self) -> None:
        """Accept connections until ``stop``; then finish the requests in
        flight, close the socket and the filters."""
        if self._listener is None:
            self.bind()
        listener = self._listener
        assert listener is not None
        tell = "TELL accepted" if self.options.allow_tell else "TELL refused (--allow-tell to accept)"
        logger.info("listening on %s with %s; %s", self.address, self.pool.describe(), tell)
        try:
            while not self._stop.is_set():
                if self._reload.is_set():
                    self._reload.clear()
                    self._reread_config()
                if not self._slots.acquire(timeout=0.2):
                    continue
                try:
                    conn, peer = listener.accept()
                except (TimeoutError, InterruptedError):
                    self._slots.release()
                    continue
                except OSError as exc:
                    self._slots.release()
                    logger.warning("accept failed: %s", exc)
                    time.sleep(0.1)
                    continue
                thread = threading.Thread(target=self._serve_connection, args=(conn, peer), daemon=True)
                with self._threads_lock:
                    self._threads.add(thread)
                thread.start()
        finally:
            listener.close()
            if self.options.address.path:
                try:
                    os.unlink(self.options.address.path)
                except OSError:
                    pass
            logger.info("stopping: finishing %d connections", len(self._threads))
            deadline = time.monotonic() + self.options.timeout + 60
            while True:
                with self._threads_lock:
                    running = next(iter(self._threads), None)
                if running is None or time.monotonic() > deadline:
                    break
                running.join(timeout=max(deadline - time.monotonic(), 0))
            self.pool.close()
            logger.info("stopped")

    def _reread_config(self) -> None:
        if self._load_config is None:
            return
        try:
            config = self._load_config()
        except SpamfilterError as exc:
            logger.error("reload failed, keeping the old configuration: %s", exc)
            return
        self.pool.replace(config)
        logger.info("configuration reloaded; %s", self.pool.describe())

    # -- one connection -----------------------------------------------------

    def _serve_connection(self, conn: socket.socket, peer: object) -> None:
        who = f"{peer[0]}" if isinstance(peer, tuple) else "unix"
        started = time.monotonic()
        try:
            if isinstance(peer, tuple) and not self._peer_allowed(str(peer[0])):
                logger.warning("refused %s: not in the allowed networks", who)
                _send_quietly(conn, spamd.reply_head(spamd.EX_NOPERM, text="not allowed"))
                return
            self._answer_connection(conn, who, started)
        except ProtocolError as exc:
            logger.warning("%s: protocol error: %s", who, exc)
            _send_quietly(conn, spamd.reply_head(exc.code, text=str(exc)))
        except TimeoutError:
            logger.warning("%s: request not complete after %.0f s, connection closed", who, self.options.timeout)
        except OSError as exc:
            logger.warning("%s: connection lost: %s", who, exc.strerror or exc)
        except Exception:  # noqa: BLE001 - the server outlives any one request's failure
            logger.exception("%s: internal error", who)
            _send_quietly(conn, spamd.reply_head(spamd.EX_SOFTWARE, text="internal error"))
        finally:
            conn.close()
            self._slots.release()
            with self._threads_lock:
                self._threads.discard(threading.current_thread())

    def _peer_allowed(self, host: str) -> bool:
        addr = ip_address(host.split("%")[0])
        if addr.version == 6 and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        return any(addr in net for net in self._allowed)

    def _answer_connection(self, conn: socket.socket, who: str, started: float) -> None:
        deadline = started + self.options.timeout
        request, rest = _read_head(conn, deadline)
        if request.command == "PING":
            conn.sendall(f"SPAMD/{spamd.VERSION} 0 PONG\r\n".encode("ascii"))
            return
        if request.command == "SKIP":
            return
        assert request.content_length is not None
        size = request.content_length
        owner = self.pool.owner(request.user)
        if size > HARD_MAX_SIZE:
            raise ProtocolError(f"message of {size} bytes is over {HARD_MAX_SIZE}", spamd.EX_TOOBIG)
        if size > self.options.max_size:
            self._pass_unscanned(conn, request, rest, deadline)
            self._log(request, owner, "unscanned", None, size, started, who)
            return
        raw = _read_body(conn, rest, size, deadline)
        if request.command == "TELL" and not self.options.allow_tell:
            conn.sendall(spamd.reply_head(spamd.EX_NOPERM, text="TELL is not enabled (spamfilter serve --allow-tell)"))
            # spamc says "Message was already un/learned" all the same.
            why = "not learned: TELL is refused (spamfilter serve --allow-tell accepts it)"
            self._log(request, owner, "refused", None, size, started, who, why)
            return
        conn.settimeout(self.options.timeout)
        why = ""
        with self._work:
            try:
                # Opening the user's model can fail too (a busy or damaged
                # database): that is an answer with its error code, not an
                # internal error.
                with self.pool.lease(request.user) as (owner, f):
                    pieces, outcome, log_odds = self._answer(request, raw, f)
            except SpamfilterError as exc:
                code = _error_code(exc)
                pieces, outcome, log_odds = [spamd.reply_head(code, text=str(exc))], f"error={code}", None
                why = ("not learned: " if request.command == "TELL" else "not scanned: ") + self.pool.unscored(owner, exc)
        for piece in pieces:
            conn.sendall(piece)
        self._log(request, owner, outcome, log_odds, size, started, who, why)

    def _answer(self, request: spamd.Request, raw: bytes, f: Filter) -> tuple[list[bytes | memoryview], str, float | None]:
        """The reply's pieces, what to log as the outcome, and the log-odds."""
        item = MailItem("-", raw)
        if request.command == "TELL":
            return self._tell(request, item, f)
        if request.command in ("REPORT", "REPORT_IFSPAM"):
            e = Insight(f).explain(item)
            verdict = Verdict(item.source, e.digest, e.score, e.log_odds, e.verdict)
            show = request.command == "REPORT" or e.verdict is Decision.SPAM
            body = _report(e, f) if show else b""
        else:
            result = next(iter(f.classify([item])))
            if isinstance(result, Refusal):
                raise MailParseError(result.reason)
            verdict = result
        headers = spamd.verdict_headers(verdict.verdict, verdict.score, verdict.log_odds, f.thresholds.spam_min)
        if request.command == "CHECK":
            return [spamd.reply_head(spamd.EX_OK, headers)], verdict.verdict, verdict.log_odds
        if request.command == "SYMBOLS":
            body = f"SPAMFILTER_{verdict.verdict.upper()}".encode("ascii")
        pieces: list[bytes | memoryview]
        if request.command in ("PROCESS", "HEADERS"):
            fields = filter_fields(verdict.verdict, verdict.score, verdict.log_odds, f.config.model.event_model)
            pieces = filtered_pieces(raw, fields)
            if request.command == "HEADERS":
                pieces = _header_part(pieces, raw)
        elif request.command in ("SYMBOLS", "REPORT", "REPORT_IFSPAM"):
            pieces = [body]
        else:
            raise AssertionError(request.command)
        length = sum(len(p) for p in pieces)
        head = spamd.reply_head(spamd.EX_OK, [("Content-length", str(length)), *headers])
        return [head, *pieces], verdict.verdict, verdict.log_odds

    def _tell(self, request: spamd.Request, item: MailItem, f: Filter) -> tuple[list[bytes | memoryview], str, float | None]:
        headers: list[tuple[str, str]] = []
        done: list[str] = []
        if request.set_local:
            summary = f.mark([(request.message_class == "spam", item)])
            if summary.refused:
                raise MailParseError(summary.refused[0].reason)
            if summary.trained_spam + summary.trained_ham + summary.relabelled:
                headers.append(("DidSet", "local"))
                done.append(f"learned={request.message_class}")
        if request.remove_local:
            if f.forget([item]).forgotten:
                headers.append(("DidRemove", "local"))
                done.append("forgotten")
        return [spamd.reply_head(spamd.EX_OK, headers)], " ".join(done) or "unchanged", None

    def _pass_unscanned(self, conn: socket.socket, request: spamd.Request, rest: bytes, deadline: float) -> None:
        size = request.content_length or 0
        if request.command == "PROCESS":
            # Kept in memory up to max_size, on disk beyond.
            with tempfile.SpooledTemporaryFile(max_size=self.options.max_size) as spool:
                _copy_body(conn, rest, size, deadline, spool.write)
                spool.seek(0)
                conn.sendall(spamd.reply_head(spamd.EX_OK, [("Content-length", str(size))]))
                while chunk := spool.read(1 << 20):
                    conn.sendall(chunk)
            return
        prefix = bytearray()
        limit = self.options.max_size

        def keep_prefix(chunk: bytes) -> None:
            if len(prefix) < limit:
                prefix.extend(chunk[: limit - len(prefix)])

        _copy_body(conn, rest, size, deadline, keep_prefix)
        start = spamd.body_start(bytes(prefix)) if request.command == "HEADERS" else None
        if start is None:
            conn.sendall(spamd.reply_head(spamd.EX_TOOBIG, text=f"message over {limit} bytes, not scanned"))
        else:
            conn.sendall(spamd.reply_head(spamd.EX_OK, [("Content-length", str(start))]) + bytes(prefix[:start]))

    def _log(
        self, request: spamd.Request, owner: str, outcome: str, log_odds: float | None, size: int, started: float, who: str, why: str = ""
    ) -> None:
        """The request's line; a warning, ending in ``why``, when there is a why."""
        odds = "-" if log_odds is None else f"{log_odds:+.2f}"
        ms = (time.monotonic() - started) * 1000
        logger.log(
            logging.WARNING if why else logging.INFO,
            "%s user=%s verdict=%s log_odds=%s bytes=%d ms=%.1f client=%s%s",
            request.command, owner or "(default)", outcome, odds, size, ms, who, f"; {why}" if why else "",
        )


def _error_code(exc: SpamfilterError) -> int:
    if isinstance(exc, MailParseError):
        return spamd.EX_DATAERR
    if isinstance(exc, NotTrainedError):
        return spamd.EX_UNAVAILABLE
    if isinstance(exc, StoreBusyError):
        return spamd.EX_TEMPFAIL
    if isinstance(exc, StoreError):
        return spamd.EX_IOERR
    return spamd.EX_SOFTWARE


def _send_quietly(conn: socket.socket, data: bytes) -> None:
    """Send an error reply to a client that may be gone already."""
    try:
        conn.settimeout(1.0)
        conn.sendall(data)
    except OSError:
        pass


def _recv(conn: socket.socket, n: int, deadline: float) -> bytes:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    conn.settimeout(remaining)
    return conn.recv(n)


def _read_head(conn: socket.socket, deadline: float) -> tuple[spamd.Request, bytes]:
    """The request head, parsed, and the bytes read past it."""
    data = b""
    while True:
        ends = [(i, n) for i, n in ((data.find(b"\r\n\r\n"), 4), (data.find(b"\n\n"), 2)) if i >= 0]
        if ends:
            at, n = min(ends)
            return spamd.parse_head(data[:at]), data[at + n :]
        if len(data) > spamd.MAX_HEAD:
            raise ProtocolError(f"request head over {spamd.MAX_HEAD} bytes")
        chunk = _recv(conn, 4096, deadline)
        if not chunk:
            # Before protocol 1.5 a PING had no empty line after it.
            line = data.rstrip(b"\r\n")
            if data.endswith(b"\n") and b"\n" not in line and line.split(b" ")[0] in (b"PING", b"SKIP"):
                return spamd.parse_head(line), b""
            raise ProtocolError("connection closed before the end of the request head")
        data += chunk


def _copy_body(conn: socket.socket, rest: bytes, size: int, deadline: float, sink: Callable[[bytes], object]) -> None:
    """Pass the message's ``size`` bytes (``rest`` first) to ``sink``."""
    if len(rest) > size:
        raise ProtocolError("more bytes than Content-length")
    sink(rest)
    got = len(rest)
    while got < size:
        chunk = _recv(conn, min(_CHUNK * 4, size - got), deadline)
        if not chunk:
            raise ProtocolError(f"connection closed after {got} of {size} message bytes")
        sink(chunk)
        got += len(chunk)


def _read_body(conn: socket.socket, rest: bytes, size: int, deadline: float) -> bytes:
    buf = bytearray()
    _copy_body(conn, rest, size, deadline, buf.extend)
    # spamc shuts its side down after the message: bytes waiting beyond
    # Content-length mean the length was wrong.
    try:
        conn.setblocking(False)
        extra = conn.recv(1, socket.MSG_PEEK)
    except (BlockingIOError, InterruptedError):
        extra = b""
    finally:
        conn.setblocking(True)
    if extra:
        raise ProtocolError("more bytes than Content-length")
    return bytes(buf)


def _header_part(pieces: list[bytes | memoryview], raw: bytes) -> list[bytes | memoryview]:
    """The filtered message up to where spamc will append the body of
    ``raw`` (HEADERS): ``pieces`` minus that body, which filtering never
    changes. Without a body (no empty line) the whole message."""
    start = spamd.body_start(raw)
    if start is None:
        return pieces
    whole = b"".join(pieces)
    body = memoryview(raw)[start:]
    if whole[len(whole) - len(body) :] != body:
        return [whole]
    return [memoryview(whole)[: len(whole) - len(body)]]


def _report(e: Explanation, f: Filter, n: int = 10) -> bytes:
    """The REPORT text: the verdict, the bounds and the strongest clues."""
    t = f.thresholds
    lines = [
        f"spamfilter verdict: {e.verdict}",
        f"P(spam) = {e.score:.6f}, log-odds = {e.log_odds:+.4f} (spam above {t.spam_min:+.4f}, ham at or below {t.ham_max:+.4f})",
        f"prior log-odds {e.prior:+.4f}; {e.events} token events, evidence scaled by {e.factor:.4f}",
        "",
        " contribution  token",
    ]
    for c in e.tokens[:n]:
        token = "(absent tokens)" if c.token is None else c.token
        lines.append(f"{c.contribution:+13.4f}  {token}")
    return ("\n".join(lines) + "\n").encode("utf-8", "replace")
