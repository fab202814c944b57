"""``spamfilter mark``: feedback, taught to a daemon when one answers.

The command loads only the standard library, Typer and the spamd client
until it must learn in-process: with ``--connect`` (or
``$SPAMFILTER_SERVER``) and a daemon that learns every message, a run is a
fraction of a second (Dovecot's learn-on-move pipe runs one per moved
message, contrib/dovecot/)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from enum import Enum
from typing import Annotated

import typer

from spamfilter.cli import Connect, app, exitcodes, state
from spamfilter.cli.reading import SOURCES_HELP, Jobs, SourceTally, refuse_terminal_stdin
from spamfilter.errors import ProtocolError
from spamfilter.mail.sources import MailItem, read_messages
from spamfilter.spamd import parse_address, tell_remote

#: Seconds a TELL waits for the daemon without --timeout.
TELL_TIMEOUT = 30.0


class Label(str, Enum):
    spam = "spam"
    ham = "ham"


@app.command()
def mark(
    ctx: typer.Context,
    label: Annotated[Label, typer.Argument(help="What the messages really are.")],
    sources: Annotated[list[str], typer.Argument(metavar="SRC...", help=SOURCES_HELP)],
    jobs: Jobs = None,
    connect: Connect = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            min=0.0,
            help="Give up after SECONDS (exit 75, saying why): the daemon gets half of what is left, a database locked by another process the rest.",
        ),
    ] = None,
    one_message: Annotated[bool, typer.Option("--one-message", help="- is one message, even one that starts with a `From ` line (a mail server's pipe).")] = False,
) -> None:
    """Feedback: file messages under LABEL, undoing an earlier opposite label.

    With --connect (or $SPAMFILTER_SERVER) the daemon learns them (TELL, as
    `spamc -L` does; it needs `serve --allow-tell`, and the daemon chooses
    the model as it does for spamc); from the first message it does not
    learn on, they are learned in-process as without the option. A message
    learned with LABEL already is left alone, with exit 0.

    Example: spamfilter mark ham false-positive.eml
    """
    is_spam = label is Label.spam
    deadline = None if timeout is None else time.monotonic() + timeout

    def left() -> float | None:
        return None if deadline is None else max(deadline - time.monotonic(), 0.0)

    refuse_terminal_stdin(ctx, sources)
    tally = SourceTally()
    items = tally.count(read_messages(sources, on_empty=tally.empty.append, stdin_is_one=one_message))
    rest = _tell_server(connect, label, items, state(ctx).user, left) if connect else items
    if rest is None:
        tally.check()
        raise typer.Exit(exitcodes.OK)
    # Only now the filter: a run the daemon answered never loads it.
    from spamfilter.cli._common import describe, open_filter, progress, report_refusals

    with open_filter(ctx, create=True, jobs=jobs, within=left()) as f:
        summary = f.mark(progress(((is_spam, item) for item in rest), "marking"))
    tally.check()
    typer.echo(describe(summary))
    raise typer.Exit(report_refusals(summary.refused) or exitcodes.OK)


def _tell_server(address: str, label: Label, items: Iterator[MailItem], user: str | None, left: Callable[[], float | None]) -> Iterator[MailItem] | None:
    """TELL the daemon at ``address`` each message of ``items`` and print
    what it learned; None when it learned them all, else the messages from
    the first it did not learn on (see `_in_process`). ``left()``: seconds
    the command has left (None: no bound); each TELL may wait half of them
    (at most the client's usual 30 s), so a daemon that hangs leaves time to
    learn in-process."""
    try:
        where = parse_address(address)
    except ProtocolError as exc:
        return _in_process(address, exc, items)
    learned = known = 0
    rest = None
    for item in items:
        try:
            budget = left()
            wait = TELL_TIMEOUT if budget is None else min(TELL_TIMEOUT, budget / 2)
            if tell_remote(where, item.raw, is_spam=label is Label.spam, user=user, timeout=max(wait, 0.001)):
                learned += 1
            else:
                known += 1
        except (OSError, ProtocolError) as exc:
            rest = _in_process(address, exc, itertools.chain([item], items))
            break
    if learned or known:
        typer.echo(f"server {address}: learned {learned} {label.value}" + (f"; {known} already trained" if known else ""))
    return rest


def _in_process(address: str, why: Exception, items: Iterator[MailItem]) -> Iterator[MailItem]:
    """``items``, to be learned in-process, after a stderr line saying why."""
    typer.echo(f"spamfilter: server {address}: {why}; learning in-process", err=True)
    return items
