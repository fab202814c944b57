"""What the commands that read mail share without loading the filter: the
``--jobs`` option and the tally of the messages read, so that a command
answered by a daemon (``mark --connect``) starts without numpy, SQLAlchemy
or the store."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Annotated, TypeVar

import typer

from spamfilter.cli import exitcodes, fail, usage_error
from spamfilter.mail.sources import STDIN_SOURCE

T = TypeVar("T")

#: The help of the SRC... arguments of the commands that read messages.
SOURCES_HELP = "Message file, mbox, Maildir, MH or folder; - for stdin (an mbox when it starts with a `From ` line)."

#: The --jobs option of the commands that read many messages (None: one
#: process per core).
Jobs = Annotated[
    int | None,
    typer.Option(
        "--jobs",
        "-j",
        min=1,
        metavar="N",
        show_default="the number of cores",
        help="Read (parse and tokenize) messages on N processes; the results are the same for any N.",
    ),
]


def refuse_terminal_stdin(ctx: typer.Context, sources: Iterable[str]) -> None:
    """A usage error (64) when a source is - and standard input is a
    terminal: a forgotten ``< file`` would otherwise wait, without a word,
    for mail typed at the keyboard."""
    if STDIN_SOURCE in sources and sys.stdin.isatty():
        usage_error(ctx, "- reads mail from standard input, which is a terminal: pipe the mail in or give a file")


class SourceTally:
    """Counts the messages a command read and the sources that held none.

    Pass `empty` as ``read_messages(..., on_empty=tally.empty.append)`` and
    wrap the stream with `count`; `check` then warns about each empty source
    and ends the run with exit 66 when no source held any message.
    """

    def __init__(self) -> None:
        self.messages = 0
        self.empty: list[str] = []

    def count(self, items: Iterable[T]) -> Iterator[T]:
        for item in items:
            self.messages += 1
            yield item

    def check(self) -> None:
        for source in self.empty:
            typer.echo(f"spamfilter: warning: no messages in {source}", err=True)
        if self.messages == 0:
            fail("no messages found in any source", exitcodes.NO_INPUT)
