"""The standard streams of a run: made usable before a command runs, and
stdout's last flush checked after it (``spamfilter.cli.main``)."""

from __future__ import annotations

import errno
import io
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import typer

from spamfilter.cli import exitcodes


class _ClosedOutput(io.RawIOBase):
    """Standard output that the caller closed (``spamfilter stats >&-``):
    every write fails, so the command says in its exit code that its output
    went nowhere."""

    #: Once the failure is reported, what is left is dropped.
    discarding = False

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self.discarding:
            return len(data)
        raise OSError(errno.EBADF, "standard output is closed")


def usable_streams() -> None:
    """Standard streams a command can rely on, set up before it runs.

    - A stream the caller closed is None in Python, and failing on it gave a
      traceback: stdin and stderr become /dev/null (an empty input; no
      messages), stdout `_ClosedOutput`.
    - With PYTHONUNBUFFERED set (or ``-u``), stdout writes to the raw file,
      whose write may take only part of what it is given, and Python's text
      layer drops the rest without a word: it gets a buffer, which writes
      everything or raises (then exit 74).
    - Under a locale whose encoding cannot spell every character (a file
      name, a token of Chinese mail, in C or Latin-1), what it cannot
      spell is written as a backslash escape, where it ended the command
      with "internal error: UnicodeEncodeError" (70)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")
    for name, mode in (("stdin", "r"), ("stderr", "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, mode, encoding="utf-8"))  # noqa: SIM115 - for the process's life
    if sys.stdout is None:
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(_ClosedOutput()), encoding="utf-8")
        return
    raw = getattr(sys.stdout, "buffer", None)
    if isinstance(raw, io.RawIOBase) and isinstance(sys.stdout, io.TextIOWrapper):
        text = sys.stdout
        encoding, errors = text.encoding, text.errors
        text.detach()  # the raw file stays open, now under a buffer
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors=errors, line_buffering=True)


def flushed(code: int) -> int:
    """``code``, or 74 when what stdout still holds cannot be written (a
    full disk, a closed stdout): Python's own flush at exit would turn that
    into exit 120 and a message about an ignored exception."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        # What is left goes nowhere, so the flush at exit succeeds.
        raw = getattr(getattr(sys.stdout, "buffer", None), "raw", None)
        if isinstance(raw, _ClosedOutput):
            raw.discarding = True
        else:
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError):
                pass
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        if code < exitcodes.USAGE:
            typer.echo(f"spamfilter: cannot write the output: {exc.strerror or exc}", err=True)
            return exitcodes.OUTPUT_ERROR
    return code


def stdout_to_devnull() -> None:
    """Point stdout at /dev/null: its reader has left (a closed pipe), and
    the interpreter's final flush must not raise again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


@contextmanager
def reader_may_leave() -> Iterator[None]:
    """Output a reader may stop taking (`evaluate ... | head`) before the
    command's other work is done: that work (files named by options, a
    config write) still happens, and the command's exit code stands."""
    try:
        yield
    except BrokenPipeError:
        stdout_to_devnull()


def write_whole(path: Path, write: Callable[[TextIO], None]) -> None:
    """Write the text file ``path`` whole or not at all: into a new file
    beside it, renamed over it once complete, so a failure (a full disk, a
    file size limit) leaves no part of a page and an older file as it was.
    A link is followed (the file it names is replaced, not the link), and
    the new file keeps the old one's mode. Written as it is, as before:
    what is not a regular file (a FIFO, a device, /dev/stdout), a file with
    other hard links, and a file in a folder this user cannot write to.
    Raises ``OSError``."""
    path = Path(os.path.realpath(path))
    try:
        st = path.stat()
    except OSError:
        st = None
    if st is not None and (not stat.S_ISREG(st.st_mode) or st.st_nlink > 1 or not os.access(path.parent, os.W_OK | os.X_OK)):
        with open(path, "w", encoding="utf-8") as fh:
            write(fh)
        return
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    # A new file: 0666 less the umask, as open() makes one.
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            write(fh)
        if st is not None:
            os.chmod(part, stat.S_IMODE(st.st_mode))
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
