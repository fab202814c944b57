"""``spamfilter train``, ``forget`` and ``mark``: teaching the filter."""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from typing import Annotated

import typer

from spamfilter.cli import app, exitcodes
from spamfilter.cli._common import Jobs, describe, index_length, open_filter, progress, report_refusals
from spamfilter.mail import MailItem, read_index, read_messages

_SOURCES_HELP = "Message file, mbox, Maildir, MH or folder; - for stdin."


def _labelled(spam: list[str], ham: list[str]) -> Iterator[tuple[bool, MailItem]]:
    # Open every source first so a typo fails before any training happens.
    spam_items = read_messages(spam) if spam else iter(())
    ham_items = read_messages(ham) if ham else iter(())
    yield from ((True, item) for item in spam_items)
    yield from ((False, item) for item in ham_items)


@app.command()
def train(
    ctx: typer.Context,
    spam: Annotated[list[str], typer.Option("--spam", metavar="SRC", help="Spam to learn from. " + _SOURCES_HELP)] = [],  # noqa: B006
    ham: Annotated[list[str], typer.Option("--ham", metavar="SRC", help="Ham (good mail) to learn from. " + _SOURCES_HELP)] = [],  # noqa: B006
    index: Annotated[str | None, typer.Option("--index", metavar="FILE", help="TREC index file: lines `spam PATH` / `ham PATH`.")] = None,
    jobs: Jobs = None,
) -> None:
    """Learn from labelled mail. Training the same message twice changes nothing.

    Example: spamfilter train --spam ~/Mail/Junk --ham ~/Mail/INBOX
    """
    if not (spam or ham or index):
        raise typer.BadParameter("give --spam, --ham or --index", param_hint="SRC")
    labelled = _labelled(spam, ham)
    total = None
    if index is not None:
        labelled_index = read_index(index)
        total = index_length(index)
        labelled = labelled_index if not (spam or ham) else _chain(labelled, labelled_index)
    with open_filter(ctx, jobs=jobs) as f:
        summary = f.train(progress(labelled, "training", total))
    typer.echo(describe(summary))
    raise typer.Exit(report_refusals(summary.refused))


def _chain(*streams: Iterator[tuple[bool, MailItem]]) -> Iterator[tuple[bool, MailItem]]:
    for stream in streams:
        yield from stream


@app.command()
def forget(
    ctx: typer.Context,
    sources: Annotated[list[str], typer.Argument(metavar="SRC...", help=_SOURCES_HELP)],
) -> None:
    """Untrain messages: subtract exactly what training them added.

    Example: spamfilter forget wrongly-trained.eml
    """
    items = read_messages(sources)
    with open_filter(ctx) as f:
        summary = f.forget(progress(items, "forgetting"))
    typer.echo(describe(summary))
    raise typer.Exit(report_refusals(summary.refused))


class Label(str, Enum):
    spam = "spam"
    ham = "ham"


@app.command()
def mark(
    ctx: typer.Context,
    label: Annotated[Label, typer.Argument(help="What the messages really are.")],
    sources: Annotated[list[str], typer.Argument(metavar="SRC...", help=_SOURCES_HELP)],
    jobs: Jobs = None,
) -> None:
    """Feedback: file messages under LABEL, undoing an earlier opposite label.

    Example: spamfilter mark ham false-positive.eml
    """
    is_spam = label is Label.spam
    items = read_messages(sources)
    with open_filter(ctx, jobs=jobs) as f:
        summary = f.mark(progress(((is_spam, item) for item in items), "marking"))
    typer.echo(describe(summary))
    raise typer.Exit(report_refusals(summary.refused) or exitcodes.OK)
