"""``spamfilter imap run``: filter and learn from IMAP folders."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Column

from spamfilter.cli import app, exitcodes, given_on_command_line, state
from spamfilter.cli._common import TableOrJson, open_filter, tsv_field
from spamfilter.errors import ConfigError, ImapUnavailable, StoreBusyError
from spamfilter.imap.summary import Event, RunSummary
from spamfilter.imap.sync import run_account

imap_app = typer.Typer(help="Filter mail on an IMAP server in place.", no_args_is_help=True)
app.add_typer(imap_app, name="imap")


class _Display:
    """Prints events (always in a dry run, else with --verbose; to stderr
    when ``to_stderr``, so that stdout holds only the JSON summary) and, on
    a terminal, shows a progress bar per folder with the counts so far."""

    _PROGRESS = ("scanned", "fetched")

    def __init__(self, verbose: bool, dry_run: bool, to_stderr: bool = False) -> None:
        self.verbose = verbose or dry_run
        self.to_stderr = to_stderr
        console = Console(stderr=True)
        self.counts: dict[str, int] = {}
        self.bar: Progress | None = None
        self.tasks: dict[str, TaskID] = {}
        if console.is_terminal:
            self.bar = Progress(
                TextColumn("{task.description}", table_column=Column(no_wrap=True)),
                BarColumn(bar_width=20),
                MofNCompleteColumn(table_column=Column(no_wrap=True)),
                TimeElapsedColumn(),
                # Last, and the one cut short on a narrow terminal (the
                # folder, bar, counts and time take about 60 columns).
                TextColumn("{task.fields[counts]}", table_column=Column(no_wrap=True, overflow="ellipsis", max_width=max(10, console.width - 60))),
                console=console,
                transient=True,
            )
            self.bar.start()

    def __call__(self, event: Event) -> None:
        if event.kind not in self._PROGRESS:
            self.counts[event.kind] = self.counts.get(event.kind, 0) + 1
            uid = f" uid {event.uid}" if event.uid else ""
            if self.verbose:
                prefix = "would be " if event.dry_run and event.kind not in ("classified",) else ""
                typer.echo(f"{event.folder}{uid}: {prefix}{event.kind} {event.detail}", err=self.to_stderr)
            elif event.kind == "refused":
                # Counted in the summary's errors, and never read again: named
                # once, on stderr, as every command names what it skipped.
                typer.echo(f"spamfilter: skipped {tsv_field(event.folder)}{uid}: {tsv_field(event.detail)}", err=True)
        if self.bar is None:
            return
        if event.kind == "scanned":
            task = self.tasks.get(event.folder)
            if task is not None:
                self.bar.update(task, total=int(event.detail), completed=0)
            elif event.detail != "0":  # a folder with nothing new gets no empty bar
                self.tasks[event.folder] = self.bar.add_task(event.folder, total=int(event.detail), counts="")
        elif event.kind == "fetched" and event.folder in self.tasks:
            self.bar.advance(self.tasks[event.folder], int(event.detail))
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(self.counts.items()))
        for task in self.tasks.values():
            self.bar.update(task, counts=counts)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _render(summary: RunSummary, account: str, fmt: TableOrJson, dry_run: bool) -> None:
    if fmt is TableOrJson.json:
        typer.echo(json.dumps({"account": account, "dry_run": dry_run, **summary.as_dict()}))
        return
    would = " (dry run: nothing was changed)" if dry_run else ""
    typer.echo(
        f"{account}: {summary.seen} new messages; classified {summary.spam} spam, {summary.ham} ham, "
        f"{summary.unsure} unsure; moved {summary.moved}; flagged {summary.flagged}; "
        f"trained {summary.trained_spam} spam, {summary.trained_ham} ham; errors {summary.errors}{would}"
    )
    if summary.created:
        typer.echo(f"{account}: {'would create' if dry_run else 'created'} folders {', '.join(summary.created)}")


@imap_app.command()
def run(
    ctx: typer.Context,
    account: Annotated[str | None, typer.Option("--account", metavar="NAME", help="The [imap.NAME] account (default: the first).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Change nothing on the server or in the database; print what would be done.")] = False,
    loop: Annotated[bool, typer.Option("--loop", help="Run again every --interval seconds until interrupted.")] = False,
    interval: Annotated[float, typer.Option("--interval", min=1, max=86_400, help="Seconds between runs with --loop.")] = 300,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Classify at most N new messages per run.")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Print every action.")] = False,
    fmt: Annotated[TableOrJson, typer.Option("--format", help="Summary as a table line or json.")] = TableOrJson.table,
) -> None:
    """Train from the training folders, learn from what you moved, then
    classify new mail in the classify folders and move or flag the spam.

    Example: IMAP_PASSWORD=... spamfilter imap run --account home --dry-run
    (with password_env = "IMAP_PASSWORD" in [imap.home])
    """
    s = state(ctx)
    if not loop and given_on_command_line(ctx, "interval"):
        raise typer.BadParameter("is the wait between the runs of --loop; without --loop there is one run", param_hint="--interval")
    try:
        acct = s.config.imap_account(account)
    except ConfigError as exc:
        if account is None or not s.config.imap:
            raise  # no account at all: the config's fault (78)
        raise typer.BadParameter(str(exc), param_hint="--account") from None
    # A dry run writes nothing, so it does not create the database either.
    with open_filter(ctx, create=not dry_run) as f:
        while True:
            display = _Display(verbose, dry_run, to_stderr=fmt is TableOrJson.json)
            try:
                summary = run_account(f, acct, dry_run=dry_run, limit=limit, on_event=display)
            except (ImapUnavailable, StoreBusyError) as exc:
                if not loop:
                    raise
                # A server away for a while, or another run of the account
                # (from cron, by hand) or a database busy meanwhile, does
                # not end the loop.
                typer.echo(f"spamfilter: {exc}; next try in {interval:g} s", err=True)
            else:
                _render(summary, acct.name, fmt, dry_run)
                if not loop:
                    break
            finally:
                display.stop()
            time.sleep(interval)
    if summary.errors:
        raise typer.Exit(exitcodes.DATA_ERROR)
