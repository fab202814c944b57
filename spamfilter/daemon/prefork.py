"""Serving from more than one process: ``spamfilter serve --processes N``
(and ``milter``).

Python runs one thread at a time, so the threads of one server share one
core. With N processes the parent binds the listening socket, then forks N
workers that each run the whole server (event loop, scoring threads,
writer) on that socket; the kernel hands each new connection to one of
them. Each worker holds its own filters and count caches, kept right by
the store's model versions as for any two processes: what one worker
learns (TELL) is used by every worker's next request.

The parent only supervises. SIGTERM and SIGINT go on to the workers (each
answers what it has accepted, then exits), SIGHUP too (each reads the
configuration again). A worker that ends otherwise is replaced, at most
five times a minute. A worker whose parent is gone (killed with SIGKILL)
sees the pipe between them close and stops the same way.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Protocol

logger = logging.getLogger("spamfilter.daemon")


class Forkable(Protocol):
    """A bound server that can serve from a forked process."""

    #: Whether this process removes a Unix socket's path when it stops.
    owns_socket: bool
    #: Appended to the server's log lines (the worker).
    label: str

    def announce(self, processes: int = 1) -> None: ...

    def serve(self, *, parent: int | None = None, announce: bool = True) -> None: ...

    def stop(self) -> None: ...

    def reload(self) -> None: ...

    def close_listener(self) -> None: ...


_RESTARTS_PER_MINUTE = 5


def serve(server: Forkable, processes: int) -> int:
    """Run ``server`` (bound) until SIGTERM or SIGINT, in this process or in
    ``processes`` forked ones; SIGHUP reloads its configuration. The exit
    status: 0, or 70 when workers kept ending."""
    if processes <= 1:
        _handle_signals(server)
        server.serve()
        return 0

    return _supervise(processes, functools.partial(_work, server), lambda: server.announce(processes), server.close_listener)


def _work(server: Forkable, index: int, parent: int) -> int:
    """A forked worker: its signals' handlers first (the signals sent
    since the fork are held until then), then serve."""
    server.owns_socket = False
    server.label = f" worker={index}"
    _handle_signals(server)
    _signals_ready()
    server.serve(parent=parent, announce=False)
    return 0


def _handle_signals(server: Forkable) -> None:
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    signal.signal(signal.SIGINT, lambda *_: server.stop())
    signal.signal(signal.SIGHUP, lambda *_: server.reload())


def _supervise(count: int, work: Callable[[int, int], int], started: Callable[[], None], stopping: Callable[[], None]) -> int:
    """Fork ``count`` workers running ``work(index, parent_pipe)``; pass
    signals on; replace a worker that ends before a stop. ``started`` runs
    here once they all are, ``stopping`` when the stop comes (closing this
    process's listening socket)."""
    asked = {"stop": False, "reload": False}
    signal.signal(signal.SIGTERM, lambda *_: asked.update(stop=True))
    signal.signal(signal.SIGINT, lambda *_: asked.update(stop=True))
    signal.signal(signal.SIGHUP, lambda *_: asked.update(reload=True))
    read_end, write_end = os.pipe()
    workers: dict[int, int] = {}
    for index in range(count):
        workers[_fork(index, work, read_end, write_end)] = index
    started()
    status, stopped, ended = 0, False, list[float]()
    while workers:
        if asked["stop"] and not stopped:
            stopped = True
            stopping()
            _signal_all(workers, signal.SIGTERM)
        if asked["reload"]:
            asked["reload"] = False
            _signal_all(workers, signal.SIGHUP)
        pid, how = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.05)
            continue
        index = workers.pop(pid)
        if stopped:
            continue
        now = time.monotonic()
        ended = [t for t in ended if now - t < 60] + [now]
        logger.error("worker %d (pid %d) ended with status %d", index, pid, os.waitstatus_to_exitcode(how))
        if len(ended) > _RESTARTS_PER_MINUTE:
            logger.error("workers keep ending: stopping")
            status, asked["stop"] = 70, True
            continue
        workers[_fork(index, work, read_end, write_end)] = index
    os.close(read_end)
    os.close(write_end)
    return status


#: The signals a worker answers; held back from a new worker until it has
#: its own handlers (``_signals_ready``).
_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def _signals_ready() -> None:
    """A worker has its handlers: let the signals held since its fork in."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)


def _fork(index: int, work: Callable[[int, int], int], read_end: int, write_end: int) -> int:
    """Fork a worker running ``work``. Its signals are held from before the
    fork until ``work`` has installed its handlers and calls
    ``_signals_ready``: a SIGHUP (the default action ends a process) sent
    in between reached the parent's handlers or killed the new worker."""
    parent = os.getpid()
    sys.stderr.flush()
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        pid = os.fork()
    finally:
        if os.getpid() == parent:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
    if pid:
        return pid
    code = 70
    try:
        os.close(write_end)
        code = work(index, read_end)
    except BaseException:  # noqa: BLE001 - a worker must end here, whatever happened
        logger.exception("worker %d failed", index)
    finally:
        sys.stderr.flush()
        os._exit(code)


def _signal_all(workers: dict[int, int], signum: int) -> None:
    for pid in workers:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
