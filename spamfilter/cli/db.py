"""``spamfilter stats`` and the ``spamfilter db`` maintenance group."""

from __future__ import annotations

import io
import json
import os
import stat
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from spamfilter.cli import app, exitcodes, fail, state, usage_error
from spamfilter.cli._common import TableOrJson, is_tty_stdin, open_filter
from spamfilter.counts import MAX_COUNT
from spamfilter.errors import ModelNotEmpty, StoreInconsistent
from spamfilter.filter import Filter, upgrade_database
from spamfilter.locations import not_a_folder
from spamfilter.tools.counts_file import read_counts_lines
from spamfilter.tools.maintenance import ImportSummary, Maintenance


@app.command()
def stats(ctx: typer.Context, fmt: Annotated[TableOrJson, typer.Option("--format", help="table or json.")] = TableOrJson.table) -> None:
    """Show how much the model has learnt and where it is stored.

    Example: spamfilter stats --format json
    """
    with open_filter(ctx, create=False) as f:
        s = f.stats()
        whose = s.classifying_model(f.config.store.shared_model, f.config.store.shared_min_messages)
    if fmt is TableOrJson.json:
        typer.echo(json.dumps(asdict(s)))
        return
    size = "-" if s.size_bytes is None else f"{s.size_bytes / 1e6:.1f} MB"
    rows = [
        ("", "spam", "ham"),
        ("messages", str(s.spam_messages), str(s.ham_messages)),
        ("distinct tokens", str(s.spam_tokens), str(s.ham_tokens)),
        ("token occurrences", str(s.spam_terms), str(s.ham_terms)),
    ]
    for name, a, b in rows:
        typer.echo(f"{name:<18} {a:>12} {b:>12}")
    typer.echo(f"{'vocabulary':<18} {s.tokens:>12}")
    typer.echo(f"{'model':<18} {s.event_model}, alpha={s.alpha:g}" + (f", user {s.user}" if s.user else ""))
    if whose is not None:
        typer.echo(f"{'classified by':<18} {whose}")
    if s.calibration_changed:
        whose_training = "training" if s.classified_by == s.user else "training the shared model (no --user)"
        typer.echo(f"{'calibration':<18} recorded under other settings ({'; '.join(s.calibration_changed)}): not read until {whose_training} records under these;")
        typer.echo(f"{'':<18} scores are the model's own, bounded to [0.01, 0.99]")
    elif s.calibration_messages:
        typer.echo(f"{'calibration':<18} scores read off {s.calibration_messages:,.0f} recorded message{'' if round(s.calibration_messages) == 1 else 's'} (decayed)")
    else:
        typer.echo(f"{'calibration':<18} no record yet: scores are the model's own, bounded to [0.01, 0.99]")
    typer.echo(f"{'database':<18} {s.database} ({size})")


db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command()
def upgrade(ctx: typer.Context) -> None:
    """Create or upgrade the database schema to this version's revision.

    Example: spamfilter --db sqlite:///tokens.db db upgrade
    """
    s = state(ctx)
    done = upgrade_database(s.config, s.db_url, create_dirs=s.create_dirs)
    if done.before == done.after:
        typer.echo(f"schema already at revision {done.after}")
    else:
        typer.echo(f"schema upgraded from {done.before or 'empty'} to revision {done.after}")
        if done.before is not None and done.free_bytes is not None and done.free_bytes >= FREE_SPACE_WORTH_TELLING:
            typer.echo(f"{_size(done.free_bytes)} of the file is free space now; `spamfilter db vacuum` gives it back to the disk")


#: Free space in a SQLite file after an upgrade worth a line about ``db vacuum``.
FREE_SPACE_WORTH_TELLING = 1_000_000


def _size(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.1f} MB"


def _whose(user: str) -> str:
    return f"user {user}" if user else "the default user"


@db_app.command()
def check(ctx: typer.Context, fmt: Annotated[TableOrJson, typer.Option("--format", help="table or json.")] = TableOrJson.table) -> None:
    """Verify that the stored counts of the model (--user) agree with each other.

    Compares the class totals and the count histogram with sums over the
    tokens, and every token's counts with the trained-message ledger (`db
    prune` takes what it prunes out of the ledger too; skipped where counts
    the ledger does not hold remain: after `db import`, or a prune of a
    store with a one-dependence selection or from before that rewrite),
    and runs SQLite's integrity check, whose findings it lists when
    the file is damaged. A count that is not a whole number up to 2^62 - 1
    fails the first check, and is then compared with nothing. Prints each
    problem; exits 0 when there is none, 73 otherwise.

    Example: spamfilter --user alice db check --format json
    """
    with open_filter(ctx, create=False) as f:
        report = Maintenance(f.store).check()
    if fmt is TableOrJson.json:
        items = [{"name": i.name, "status": i.status, "problems": list(i.problems)} for i in report.items]
        typer.echo(json.dumps({"user": report.user, "database": report.database, "ok": report.ok, "checks": items}))
    else:
        for item in report.items:
            status, _, why = item.status.partition(" ")
            typer.echo(f"{status.upper() if status == 'failed' else status:<8} {item.name}" + (f" {why}" if why else ""))
            for problem in item.problems:
                typer.echo(f"{'':<8} {problem}")
    if not report.ok:
        failed = sum(item.status == "failed" for item in report.items)
        raise StoreInconsistent(f"{failed} check(s) failed for the model of {_whose(report.user)} in {report.database}")


@db_app.command()
def prune(
    ctx: typer.Context,
    min_count: Annotated[int, typer.Option("--min-count", metavar="N", min=0, max=MAX_COUNT, help="Prune tokens in fewer than N messages (spam and ham together).")],
    older_than: Annotated[
        int,
        typer.Option(
            "--older-than",
            metavar="DAYS",
            min=0,
            max=100_000,
            help="... that were last trained DAYS or more days ago (0: any day; a token without a date counts as old).",
        ),
    ],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would be pruned; change nothing.")] = False,
) -> None:
    """Delete rare tokens that training has not seen for a while, in one transaction.

    The class totals lose the pruned tokens' occurrences, so the model stays
    consistent (`db check` passes); forgetting a message later subtracts
    what is left of its tokens. The file keeps the freed pages for reuse;
    `spamfilter db vacuum` gives them back.

    Example: spamfilter db prune --min-count 2 --older-than 90 --dry-run
    """
    with open_filter(ctx, create=False) as f:
        s = Maintenance(f.store, f.config.store.write_deadline).prune(min_count, older_than, dry_run=dry_run)
    verb = "would prune" if s.dry_run else "pruned"
    typer.echo(
        f"{verb} {s.tokens_removed} of {s.tokens_before} tokens of {_whose(s.user)} (in fewer than {min_count} messages, last trained {older_than} or more days ago)"
    )
    if not s.dry_run and s.size_before is not None:
        wal = "" if s.checkpointed else " (with a write-ahead log that readers kept from being copied in)"
        typer.echo(
            f"database file {_size(s.size_before)} before, {_size(s.size_after)} after{wal}; "
            "the freed pages stay in the file until `spamfilter db vacuum` gives them back"
        )


@db_app.command()
def reselect(ctx: typer.Context) -> None:
    """Choose the parent and child tokens of the one-dependence model
    ([model] dependence, aode_parents, aode_children, aode_min_support) from
    the counts, and rebuild their pair counts from the trained messages, in
    one transaction. With dependence = "none" the pair counts are dropped.

    Training also chooses again, once the trained messages have grown
    [model] reselect_growth times since the last choice.

    Example: spamfilter db reselect
    """
    with open_filter(ctx, create=False) as f:
        s = Maintenance(f.store).reselect(f.config.model)
    if not s.parents:
        typer.echo(f"no parents for {_whose(f.store.owner)}: one-dependence counts dropped ({s.messages} trained messages)")
        return
    typer.echo(f"chose {len(s.parents)} parent(s) and {s.children} child tokens for {_whose(f.store.owner)}: {s.pairs} pair counts from {s.messages} trained messages")


@db_app.command()
def vacuum(ctx: typer.Context) -> None:
    """Give the space of deleted rows back to the file system (SQLite VACUUM;
    PostgreSQL VACUUM ANALYZE), for every user's model.

    Example: spamfilter db vacuum
    """
    with open_filter(ctx, create=False) as f:
        s = Maintenance(f.store).vacuum()
    if s.size_before is None:
        typer.echo(f"vacuumed {s.database}")
    else:
        typer.echo(f"vacuumed {s.database}: {_size(s.size_before)} before, {_size(s.size_after)} after")


@db_app.command(name="export")
def export_counts(ctx: typer.Context, path: Annotated[str, typer.Argument(metavar="[FILE|-]", help="Where to write (default: - for stdout).")] = "-") -> None:
    """Write the model's counts (--user) as UTF-8 text: a header, the class
    totals and the column names, then one line per token: token, ham_docs,
    spam_docs, ham_terms, spam_terms, separated by tabs, sorted by token
    (backslash, tab, newline and carriage return in tokens escaped, and a
    leading #). The trained-message ledger is not written:
    imported counts cannot be forgotten message by message. A store whose
    tokens do not add up to its totals (a damaged file) is refused (74),
    and FILE is left as it was.

    Example: spamfilter db export counts.tsv
    """
    if path != "-" and Path(path).is_dir():
        usage_error(ctx, f"cannot write {path}: it is a folder; give the name of a file")
    with open_filter(ctx, create=False) as f:
        if path == "-":
            sys.stdout.flush()
            out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n")
            try:
                n = Maintenance(f.store).export_counts(out)
                out.flush()
            finally:
                out.detach()
            typer.echo(f"exported {n} tokens of {_whose(f.store.owner)}", err=True)
            return
        target = Path(path)
        if _written_in_place(target):
            try:
                with open(target, "w", encoding="utf-8", newline="\n") as fh:
                    n = Maintenance(f.store).export_counts(fh)
            except OSError as exc:
                fail(f"cannot write {path}: {exc.strerror or exc}", exitcodes.OUTPUT_ERROR)
            typer.echo(f"exported {n} tokens of {_whose(f.store.owner)} to {path}", err=True)
            return
        try:
            # A new file of a name no one else can have chosen (O_EXCL, so a
            # link planted in the folder is never followed), owner-only (the
            # counts say a lot about someone's mail), then renamed over
            # FILE: a link at FILE is replaced, not written through.
            fd, part = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
        except OSError as exc:
            usage_error(ctx, f"cannot write {path}: {not_a_folder(target) or exc.strerror}")
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                n = Maintenance(f.store).export_counts(fh)
            try:
                os.replace(part, target)
            except OSError as exc:  # e.g. FILE became a folder meanwhile
                usage_error(ctx, f"cannot write {path}: {exc.strerror}")
        except BaseException:
            Path(part).unlink(missing_ok=True)
            raise
    typer.echo(f"exported {n} tokens of {_whose(f.store.owner)} to {path}")


def _written_in_place(path: Path) -> bool:
    """Whether ``path`` is something that exists and is neither a file nor
    a folder (a FIFO, a device, /dev/stdout's link to one): written to as it
    is, never replaced by a file renamed over it (which would remove the
    device node, run as root)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@db_app.command(name="import")
def import_counts(
    ctx: typer.Context,
    path: Annotated[str, typer.Argument(metavar="FILE|-", help="A file written by `db export`, or - for stdin.")],
    replace: Annotated[
        bool, typer.Option("--replace", help="Replace the model (tokens, totals and ledger); this or --add is needed when the model is not empty.")
    ] = False,
    add: Annotated[bool, typer.Option("--add", help="Add the counts to the model.")] = False,
) -> None:
    """Read counts written by `db export` into the model (--user), in one
    transaction. Each line is checked before its counts are written (a bad
    or truncated file exits 65 naming the line, and changes nothing): tokens
    once each, in the export's order, without NUL, at most 1,000 bytes;
    counts and totals below 2^62. Imported counts have no ledger, so they cannot be
    forgotten message by message.

    Example: spamfilter --db sqlite:///new.db db import --replace counts.tsv
    """
    if replace and add:
        usage_error(ctx, "give --replace or --add, not both")
    if path == "-" and is_tty_stdin():
        usage_error(ctx, "db import - reads the counts from standard input, which is a terminal: pipe them in or give a file")
    with open_filter(ctx, create=True) as f:
        try:
            result = _import_into(ctx, f, path, True if replace else False if add else None)
        except BaseException:
            # A failed import into a new path leaves no empty database behind.
            f.store.remove_if_unused()
            raise
    how = "replacing it" if result.replaced else "added"
    typer.echo(f"imported {result.tokens} tokens, {result.spam_messages} spam and {result.ham_messages} ham messages into the model of {_whose(result.user)} ({how})")


def _import_into(ctx: typer.Context, f: Filter, path: str, replace: bool | None) -> ImportSummary:
    """``db import``'s work on the open filter."""
    try:
        fh = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}", exitcodes.NO_INPUT)
    try:
        return Maintenance(f.store).import_counts(read_counts_lines(fh), replace=bool(replace), into_empty=replace is None)
    except ModelNotEmpty:
        usage_error(ctx, f"the model of {_whose(f.store.owner)} is not empty: give --replace or --add")
    finally:
        if path != "-":
            fh.close()
