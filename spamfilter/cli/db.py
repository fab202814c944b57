"""``spamfilter stats`` and the ``spamfilter db`` maintenance group."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from spamfilter.cli import app, state
from spamfilter.cli._common import TableOrJson, open_filter
from spamfilter.config import default_db_url
from spamfilter.service import upgrade_database


@app.command()
def stats(
    ctx: typer.Context,
    fmt: Annotated[TableOrJson, typer.Option("--format", help="table or json.")] = TableOrJson.table,
) -> None:
    """Show how much the model has learnt and where it is stored.

    Example: spamfilter stats --format json
    """
    with open_filter(ctx) as f:
        s = f.stats()
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
    typer.echo(f"{'model':<18} {s.event_model}, alpha={s.alpha:g}")
    typer.echo(f"{'database':<18} {s.database} ({size})")


db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command()
def upgrade(ctx: typer.Context) -> None:
    """Create or upgrade the database schema to this version's revision.

    Example: spamfilter --db sqlite:///tokens.db db upgrade
    """
    s = state(ctx)
    url = s.db_url or s.config.store.url or default_db_url()
    before, after = upgrade_database(url, busy_timeout=s.config.store.busy_timeout)
    if before == after:
        typer.echo(f"schema already at revision {after}")
    else:
        typer.echo(f"schema upgraded from {before or 'empty'} to revision {after}")
