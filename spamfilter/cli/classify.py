"""``spamfilter classify``: mailboxes to verdicts."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from enum import Enum
from typing import Annotated

import typer

from spamfilter.answers import Refusal, Verdict
from spamfilter.cli import app
from spamfilter.cli._common import indexes_length, json_text, open_filter, progress, read_indexes, report_refusals, tsv_field
from spamfilter.cli.reading import Jobs, refuse_terminal_stdin
from spamfilter.mail import MailItem, read_messages


class Format(str, Enum):
    table = "table"
    jsonl = "jsonl"
    tsv = "tsv"


def _render(v: Verdict, fmt: Format) -> str:
    if fmt is Format.jsonl:
        return json.dumps({"source": json_text(v.source), "score": v.score, "log_odds": v.log_odds, "verdict": v.verdict})
    if fmt is Format.tsv:
        return f"{tsv_field(v.source)}\t{v.score:.6g}\t{v.log_odds:.6f}\t{v.verdict}"
    # Escaped as in tsv: a newline in a file name would split the row in two.
    return f"{v.verdict:<7} {v.score:8.6f} {v.log_odds:+10.2f}  {tsv_field(v.source)}"


_HEADERS = {Format.table: f"{'verdict':<7} {'score':>8} {'log_odds':>10}  source", Format.tsv: "source\tscore\tlog_odds\tverdict"}


@app.command()
def classify(
    ctx: typer.Context,
    sources: Annotated[
        list[str] | None, typer.Argument(metavar="[SRC]...", help="Message file, mbox, Maildir, MH or folder; - for stdin (an mbox when it starts with a `From ` line).")
    ] = None,
    index: Annotated[list[str], typer.Option("--index", metavar="FILE", help="Classify the messages of a TREC index (labels ignored; repeat for more).")] = [],  # noqa: B006
    fmt: Annotated[Format, typer.Option("--format", help="table, jsonl or tsv.")] = Format.table,
    jobs: Jobs = None,
) -> None:
    """Print a verdict for every message: spam, ham or unsure, with P(spam)
    (the score, calibrated on the model's own record, bounded short of 0
    and 1) and the log-odds log P(spam|x) - log P(ham|x) (rank by the
    log-odds: many messages share one score).

    Example: spamfilter classify --format jsonl ~/Mail/INBOX
    """
    if not sources and not index:
        raise typer.BadParameter("give at least one SRC or --index", param_hint="SRC")
    refuse_terminal_stdin(ctx, sources or [])

    def empty(source: str) -> None:
        typer.echo(f"spamfilter: warning: no messages in {source}", err=True)

    items: Iterator[MailItem] = read_messages(sources, on_empty=empty) if sources else iter(())
    if index:
        indexed = (item for _, item in read_indexes(index))
        items = itertools.chain(items, indexed) if sources else indexed
    refused: list[Refusal] = []
    # A progress bar only when the verdicts go to a file or a pipe: on a
    # terminal the verdict lines are the progress.
    total = None if sources else indexes_length(index)
    items = progress(items, "classifying", total, show=not sys.stdout.isatty())
    with open_filter(ctx, create=False, jobs=jobs) as f:
        headed = fmt not in _HEADERS
        for result in f.classify(items):
            if isinstance(result, Refusal):
                refused.append(result)
                continue
            if not headed:  # not before the model could score (an untrained one exits 69)
                typer.echo(_HEADERS[fmt])
                headed = True
            typer.echo(_render(result, fmt))
    raise typer.Exit(report_refusals(refused))
