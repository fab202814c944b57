"""``spamfilter classify`` (mailboxes to verdicts) and ``filter`` (a delivery filter)."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from enum import Enum
from typing import Annotated

import typer

from spamfilter.cli import app, delivery, exitcodes, fail, state
from spamfilter.cli._common import Connect, Jobs, is_tty_stdin, open_filter, progress, report_refusals
from spamfilter.counts import Decision
from spamfilter.errors import ProtocolError
from spamfilter.mail import STDIN_SOURCE, MailItem, filter_fields, filtered_pieces, read_index, read_messages
from spamfilter.service import Refusal, Verdict
from spamfilter.spamd import RemoteVerdict, classify_remote, parse_address


class Format(str, Enum):
    table = "table"
    jsonl = "jsonl"
    tsv = "tsv"


def _render(v: Verdict, fmt: Format) -> str:
    if fmt is Format.jsonl:
        return json.dumps({"source": v.source, "score": v.score, "log_odds": v.log_odds, "verdict": v.verdict})
    if fmt is Format.tsv:
        return f"{v.source}\t{v.score:.6g}\t{v.log_odds:.6f}\t{v.verdict}"
    return f"{v.verdict:<7} {v.score:8.6f} {v.log_odds:+10.2f}  {v.source}"


_HEADERS = {Format.table: f"{'verdict':<7} {'score':>8} {'log_odds':>10}  source", Format.tsv: "source\tscore\tlog_odds\tverdict"}


@app.command()
def classify(
    ctx: typer.Context,
    sources: Annotated[
        list[str] | None, typer.Argument(metavar="[SRC]...", help="Message file, mbox, Maildir, MH or folder; - for stdin (an mbox when it starts with a `From ` line).")
    ] = None,
    index: Annotated[str | None, typer.Option("--index", metavar="FILE", help="Classify the messages of a TREC index (labels ignored).")] = None,
    fmt: Annotated[Format, typer.Option("--format", help="table, jsonl or tsv.")] = Format.table,
    jobs: Jobs = None,
) -> None:
    """Print a verdict for every message: spam, ham or unsure, with P(spam)
    and the log-odds log P(spam|x) - log P(ham|x) (rank by the log-odds: the
    probability rounds to 1.0 for most spam).

    Example: spamfilter classify --format jsonl ~/Mail/INBOX
    """
    if not sources and index is None:
        raise typer.BadParameter("give at least one SRC or --index", param_hint="SRC")
    items: Iterator[MailItem] = read_messages(sources) if sources else iter(())
    if index is not None:
        indexed = (item for _, item in read_index(index))
        items = itertools.chain(items, indexed) if sources else indexed
    refused: list[Refusal] = []
    # A progress bar only when the verdicts go to a file or a pipe: on a
    # terminal the verdict lines are the progress.
    items = progress(items, "classifying", show=not sys.stdout.isatty())
    with open_filter(ctx, create=False, jobs=jobs) as f:
        if fmt in _HEADERS:
            typer.echo(_HEADERS[fmt])
        for result in f.classify(items):
            if isinstance(result, Refusal):
                refused.append(result)
            else:
                typer.echo(_render(result, fmt))
    raise typer.Exit(report_refusals(refused))


_VERDICT_EXIT = {Decision.SPAM: exitcodes.SPAM, Decision.HAM: exitcodes.HAM, Decision.UNSURE: exitcodes.UNSURE}


@app.command(name="filter")
def filter_(
    ctx: typer.Context,
    always_zero: Annotated[bool, typer.Option("--always-zero", help="Exit 0 for every verdict (errors still exit 64+).")] = False,
    verdict_only: Annotated[bool, typer.Option("--verdict-only", help="Print one verdict line instead of the message.")] = False,
    connect: Connect = None,
) -> None:
    """Read one message on stdin, write it to stdout with X-Spam-Status,
    X-Spam-Score (and X-Spam-Flag: YES for spam) headers; exit 0 spam, 1 ham,
    2 unsure. On any error, usage and config errors included, the message is
    written through unchanged and the exit code is the error's (64 and up).

    With --connect (or $SPAMFILTER_SERVER) the daemon gives the verdict
    (the message written is still the one read, with the fields added);
    when none answers, or its answer is not a whole verdict, the message is
    filtered in-process as without the option.

    Example (procmail): :0fw | spamfilter filter --always-zero
    """
    if is_tty_stdin():
        fail("filter reads a message on standard input", exitcodes.USAGE)
    message = delivery(ctx)
    raw = message.read()
    if connect:
        # The daemon is asked for its verdict only (CHECK): the message
        # written is the one read here with the fields added, whatever a
        # server on that address sends back.
        remote = _ask_server(connect, raw, state(ctx).user)
        if remote is not None:
            if verdict_only:
                message.write([f"{remote.verdict} {remote.score:.6f} {remote.log_odds:+.4f}\n".encode()])
            else:
                fields = filter_fields(remote.verdict, remote.score, remote.log_odds, state(ctx).config.model.event_model)
                message.write(filtered_pieces(raw, fields))
            raise typer.Exit(exitcodes.OK if always_zero else _VERDICT_EXIT[remote.verdict])
    # On every failure below (and before this command ran) `_Group.main`
    # writes the message through unchanged. A busy database is a temporary
    # failure (75) at once: the mail system queues the message and
    # delivers it again later.
    with open_filter(ctx, create=True, write_deadline=0.0) as f:
        result = next(iter(f.classify([MailItem(STDIN_SOURCE, raw)])))
        model_name = f.config.model.event_model
    if isinstance(result, Refusal):
        fail(f"not filtered: {result.reason}", exitcodes.DATA_ERROR)
    assert isinstance(result, Verdict)
    if verdict_only:
        message.write([f"{result.verdict} {result.score:.6f} {result.log_odds:+.4f}\n".encode()])
    else:
        fields = filter_fields(result.verdict, result.score, result.log_odds, model_name)
        message.write(filtered_pieces(raw, fields))
    raise typer.Exit(exitcodes.OK if always_zero else _VERDICT_EXIT[result.verdict])


def _ask_server(address: str, raw: bytes, user: str | None) -> RemoteVerdict | None:
    """The daemon's verdict, or None after one stderr line saying why the
    message will be filtered in-process instead."""
    try:
        return classify_remote(parse_address(address), raw, user=user)
    except (OSError, ProtocolError) as exc:
        typer.echo(f"spamfilter: server {address}: {exc}; filtering in-process", err=True)
        return None
