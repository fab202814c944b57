"""Helpers shared by the command modules: opening the filter, progress, output."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from enum import Enum
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, SpinnerColumn, Task, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from spamfilter.answers import Refusal, TrainSummary
from spamfilter.cli import exitcodes, state
from spamfilter.filter import Filter
from spamfilter.mail import MailItem, read_index
from spamfilter.tools.counts_file import escape_field

T = TypeVar("T")


class TableOrJson(str, Enum):
    """The --format choice of the commands that print one summary."""

    table = "table"
    json = "json"


def jobs_or_default(jobs: int | None) -> int:
    """The processes that read mail in a long run: ``--jobs``, or one per core."""
    return jobs if jobs is not None else (os.cpu_count() or 1)


#: The --margin option of the commands that learn in a train mode
#: (``config.TrainMode.tune``).
Margin = Annotated[
    float, typer.Option("--margin", min=0.0, metavar="NATS", help="--train-mode tune: also learn a message scored right by less than this many nats of log-odds.")
]


@contextmanager
def open_filter(ctx: typer.Context, *, create: bool, jobs: int | None = 1, write_deadline: float | None = None, within: float | None = None) -> Iterator[Filter]:
    """The filter on the database chosen by --db / config / default.

    ``create``: whether the command may create a SQLite database that does
    not exist (commands that only read say no: exit 66); its folder only
    with --create-dirs or at the default location. Long runs read mail on
    ``jobs`` processes (None: one per core); ``write_deadline``: see
    ``Filter.open``; ``within``: seconds the command has left, which bound
    how long it waits for a database another process holds locked (the
    store's ``busy_timeout`` and ``write_deadline``)."""
    s = state(ctx)
    jobs = jobs_or_default(jobs)
    config = s.config
    if within is not None:
        config = replace(config, store=config.store.within(within))
        write_deadline = None if write_deadline is None else min(write_deadline, within)
    with Filter.open(config, s.db_url, s.user, create=create, create_dirs=s.create_dirs, jobs=jobs, write_deadline=write_deadline) as f:
        yield f


class _Rate(ProgressColumn):
    """Messages per second so far."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.0f} msg/s")


def progress(items: Iterable[T], label: str, total: int | None = None, *, show: bool = True) -> Iterator[T]:
    """Yield ``items`` while showing a progress bar (messages/s, and the time
    left when ``total`` is known) on stderr when it is a terminal and
    ``show`` holds; silent otherwise."""
    console = Console(stderr=True)
    if not (show and console.is_terminal):
        yield from items
        return
    columns: list[ProgressColumn] = [SpinnerColumn(), TextColumn(label)]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn(), _Rate(), TimeRemainingColumn()]
    else:
        columns += [TextColumn("{task.completed} messages"), _Rate()]
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(label, total=total)
        for item in items:
            yield item
            bar.advance(task)


def report_refusals(refused: Iterable[Refusal]) -> int:
    """One stderr line per refused message; the exit code the run should end with."""
    n = 0
    for r in refused:
        # One line whatever the file is named: a newline in a name would
        # start a line that reads like a message of its own.
        typer.echo(f"spamfilter: skipped {tsv_field(r.source)}: {tsv_field(r.why)}", err=True)
        n += 1
    return exitcodes.DATA_ERROR if n else exitcodes.OK


def describe(summary: TrainSummary, *, forgetting: bool = False) -> str:
    """One human line for a train / mark / forget summary (``forgetting``:
    forget's, which says "forgot 0" rather than "trained 0 spam, 0 ham"
    when it forgot nothing)."""
    parts = []
    if summary.trained_spam or summary.trained_ham or not (forgetting or summary.forgotten or summary.unknown):
        parts.append(f"trained {summary.trained_spam} spam, {summary.trained_ham} ham")
    if summary.relabelled:
        parts.append(f"relabelled {summary.relabelled}")
    if summary.unchanged:
        parts.append(f"{summary.unchanged} already trained")
    if summary.skipped:
        parts.append(f"{summary.skipped} left out (scored right by a margin)")
    if summary.conflicts:
        parts.append(f"{summary.conflicts} trained with the other label (left as they were; use `spamfilter mark`)")
    if forgetting or summary.forgotten or summary.unknown:
        parts.append(f"forgot {summary.forgotten}")
    if summary.unknown:
        parts.append(f"{summary.unknown} {'was' if summary.unknown == 1 else 'were'} not trained")
    if summary.refused:
        parts.append(f"{len(summary.refused)} unreadable")
    return "; ".join(parts)


def is_tty_stdin() -> bool:
    """Whether stdin is a terminal (then reading a message from it is a mistake)."""
    return sys.stdin.isatty()


def read_indexes(names: list[str]) -> Iterator[tuple[bool, MailItem]]:
    """The labelled messages of each TREC index in turn, every index
    checked (``read_index``) before the first message is read."""
    return itertools.chain.from_iterable([read_index(name) for name in names])


def one_stream(indexes: list[str]) -> str:
    """The one --index of a command that reads a stream in order (given
    twice, the option would keep only the last without a word)."""
    if len(indexes) != 1:
        raise typer.BadParameter("give one index: the stream, in arrival order (join several into one file)", param_hint="--index")
    return indexes[0]


def index_length(path: str) -> int | None:
    """Messages in a TREC index (its non-blank lines), for the progress bar;
    None if it cannot be read (reading it properly reports the error) or is
    not a regular file (a pipe read here would be empty to the run; a
    device may never end)."""
    try:
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return None


def indexes_length(paths: list[str]) -> int | None:
    """Messages in all these TREC indexes (``index_length``), None if any
    one cannot be counted."""
    lengths = [index_length(path) for path in paths]
    return None if None in lengths else sum(n or 0 for n in lengths)


def json_text(text: str) -> str:
    """``text`` for a JSON string: a file name that is not UTF-8 (lone
    surrogates, which strict JSON readers refuse) with its bytes as
    ``\\xNN`` and a backslash doubled, as ``tsv_field`` writes them, so
    that two names never read the same."""
    return _bytes_as_hex(text.replace("\\", "\\\\"))


def tsv_field(text: str) -> str:
    """``text`` as one field of a TSV row: backslash, tab, newline and
    carriage return escaped (as in a counts file), so a file name holding
    them cannot break the row or the file into more, and the bytes of a
    name that is not UTF-8 as ``\\xNN``."""
    return _bytes_as_hex(escape_field(text))


def _bytes_as_hex(text: str) -> str:
    """A file name that is not UTF-8 comes as lone surrogates: its bytes, as \\xNN."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
