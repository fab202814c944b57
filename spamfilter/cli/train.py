"""``spamfilter train``, ``forget`` and ``mark``: teaching the filter."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator, Sequence
from typing import Annotated, Any

import typer

from spamfilter.cli import PlainCommand, app, refuse_unused, usage_error
from spamfilter.cli._common import Margin, describe, indexes_length, open_filter, progress, read_indexes, report_refusals
from spamfilter.cli.reading import SOURCES_HELP, Jobs, SourceTally, refuse_terminal_stdin
from spamfilter.config import TUNE_MARGIN, TrainMode
from spamfilter.errors import MailSourceError
from spamfilter.mail import MailItem, read_messages
from spamfilter.mail.sources import STDIN_SOURCE

#: The options of `train` that take every value up to the next option.
_MANY_VALUED = ("--spam", "--ham")


class MissingSource(ValueError):
    """``--spam`` or ``--ham`` followed at once by an option, not a source."""


def spread_values(args: Sequence[str], options: Sequence[str] = _MANY_VALUED, known: Collection[str] = ()) -> list[str]:
    """``--spam a b --ham c`` -> ``--spam a --spam b --ham c``.

    Each word after one of `options` that is not an option itself (``-``,
    stdin, is a value) repeats that option, so click's repeatable options
    read the form the README documents. ``--`` ends the rewriting.
    One of `options` followed at once by another, or by one of the
    command's other options `known`, raises `MissingSource`: click would
    take that option for its source and blame what comes after it (``train
    --spam --ham x.eml``: "unexpected extra argument x.eml").
    """
    out: list[str] = []
    current: str | None = None  # the many-valued option the next value belongs to
    pending = False  # the option was just given and still needs its first value
    for i, arg in enumerate(args):
        if arg == "--":
            out.extend(args[i:])
            break
        name = arg.split("=", 1)[0]
        if pending and (name in options or name in known):
            raise MissingSource(f"{current} needs a source (a file, folder or -) before {name}")
        if name in options:
            current, pending = name, "=" not in arg
            out.append(arg)
        elif pending:
            out.append(arg)
            pending = False
        elif arg.startswith("-") and arg != "-":
            current = None
            out.append(arg)
        elif current is not None:
            out += [current, arg]
        else:
            out.append(arg)
    return out


class _SpreadCommand(PlainCommand):
    """`train`: ``--spam`` and ``--ham`` take one or more sources each."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        known = {name for param in self.get_params(ctx) for name in param.opts if name.startswith("-")}
        options = args[: args.index("--")] if "--" in args else args
        if any(arg in ctx.help_option_names for arg in options):
            # `train --spam --help`: the help, not a source named --help.
            return list(super().parse_args(ctx, ["--help"]))
        try:
            spread = spread_values(args, known=known)
        except MissingSource as exc:
            usage_error(ctx, str(exc))
        return list(super().parse_args(ctx, spread))


def _labelled(spam: list[str], ham: list[str], tally: SourceTally) -> Iterator[tuple[bool, MailItem]]:
    """The labelled messages of the sources, every source checked now, so a
    typo fails before any training happens, and before a new database is
    made (as a generator the checks ran only once it was read, after)."""
    if STDIN_SOURCE in spam and STDIN_SOURCE in ham:
        raise MailSourceError("standard input ('-') can be read only once; give it for --spam or for --ham")
    spam_items = read_messages(spam, on_empty=tally.empty.append) if spam else iter(())
    ham_items = read_messages(ham, on_empty=tally.empty.append) if ham else iter(())
    return itertools.chain(((True, item) for item in spam_items), ((False, item) for item in ham_items))


@app.command(cls=_SpreadCommand)
def train(
    ctx: typer.Context,
    spam: Annotated[list[str], typer.Option("--spam", metavar="SRC...", help="Spam to learn from: one or more sources. " + SOURCES_HELP)] = [],  # noqa: B006
    ham: Annotated[list[str], typer.Option("--ham", metavar="SRC...", help="Ham (good mail) to learn from: one or more sources. " + SOURCES_HELP)] = [],  # noqa: B006
    index: Annotated[list[str], typer.Option("--index", metavar="FILE", help="TREC index file: lines `spam PATH` / `ham PATH` (repeat for more, read in order).")] = [],  # noqa: B006
    train_mode: Annotated[
        TrainMode,
        typer.Option(
            "--train-mode",
            help="teft: learn every message; toe: only those the model, as trained so far, misfiles or is unsure of; tune: also those it scores right by less than --margin. toe and tune score the messages in the order given: an --index in arrival order.",
        ),
    ] = TrainMode.teft,
    margin: Margin = TUNE_MARGIN,
    jobs: Jobs = None,
) -> None:
    """Learn from labelled mail. Training the same message twice changes nothing.

    Example: spamfilter train --spam ~/Mail/Junk old-spam.mbox --ham ~/Mail/INBOX
    """
    if not (spam or ham or index):
        raise typer.BadParameter("give --spam, --ham or --index", param_hint="SRC")
    if train_mode is not TrainMode.tune:
        refuse_unused(ctx, f"with --train-mode {train_mode.value}", "margin")
    refuse_terminal_stdin(ctx, [*spam, *ham])
    tally = SourceTally()
    labelled = _labelled(spam, ham, tally)
    total = None
    if index:
        labelled_index = read_indexes(index)
        # Counted only when the indexes are all there is to read: the
        # messages of --spam and --ham are known only once they are read.
        total = None if spam or ham else indexes_length(index)
        labelled = labelled_index if not (spam or ham) else itertools.chain(labelled, labelled_index)
    with open_filter(ctx, create=True, jobs=jobs) as f:
        summary = f.train(progress(tally.count(labelled), "training", total), train_mode=train_mode, margin=margin)
    tally.check()
    typer.echo(describe(summary))
    raise typer.Exit(report_refusals(summary.refused))


@app.command()
def forget(ctx: typer.Context, sources: Annotated[list[str], typer.Argument(metavar="SRC...", help=SOURCES_HELP)]) -> None:
    """Untrain messages: subtract exactly what training them added.

    Example: spamfilter forget wrongly-trained.eml
    """
    refuse_terminal_stdin(ctx, sources)
    tally = SourceTally()
    items = read_messages(sources, on_empty=tally.empty.append)
    with open_filter(ctx, create=False) as f:
        summary = f.forget(progress(tally.count(items), "forgetting"))
    tally.check()
    typer.echo(describe(summary, forgetting=True))
    raise typer.Exit(report_refusals(summary.refused))
