"""``spamfilter milter``: the filter for Postfix and Sendmail, as a milter."""

from __future__ import annotations

import math
from enum import Enum
from typing import Annotated

import typer

from spamfilter.cli import app, state
from spamfilter.cli._daemons import AllowedIps, Listen, Processes, SocketGroup, SocketMode, SocketPath, ip_list, listen_address, run
from spamfilter.config import load_config


class OnError(str, Enum):
    accept = "accept"
    tempfail = "tempfail"


def _finite_or_none(value: float | None) -> float | None:
    """``--reject-above`` is a log-odds: nan or inf is a usage error (64)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite log-odds, not {value}")
    return value


RejectAbove = Annotated[
    float | None,
    typer.Option(
        "--reject-above",
        metavar="LOGODDS",
        callback=_finite_or_none,
        help="Refuse (550 5.7.1) a spam whose log-odds are above this, instead of marking it (unsure mail is never refused).",
    ),
]


@app.command()
def milter(
    ctx: typer.Context,
    listen: Listen = "127.0.0.1:8895",
    socket_path: SocketPath = None,
    socket_mode: SocketMode = "0600",
    socket_group: SocketGroup = "",
    allowed_ips: AllowedIps = "",
    reject_above: RejectAbove = None,
    on_error: Annotated[
        OnError, typer.Option("--on-error", help="What the MTA is told when a message cannot be scored: accept it unscanned, or tempfail it.")
    ] = OnError.accept,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Messages scored at the same time, per process.")] = 4,
    processes: Processes = None,
    max_connections: Annotated[int, typer.Option("--max-connections", min=1, help="MTA connections served at once, per process.")] = 256,
    max_size: Annotated[int, typer.Option("--max-size", metavar="BYTES", min=1, help="Longer messages are accepted unscanned.")] = 512_000,
    timeout: Annotated[float, typer.Option("--timeout", metavar="SECONDS", min=0.1, max=86_400, help="Time the MTA may stay silent on a connection.")] = 600.0,
    per_user: Annotated[
        bool | None,
        typer.Option(
            "--per-user/--one-model",
            help="Score with the model of the envelope recipients' local part (when they share one), a user without one following [store] shared_model; "
            "--one-model: the default model for every message. Default: [daemon] per_user in the config (false).",
        ),
    ] = None,
) -> None:
    """Filter mail inside Postfix or Sendmail as a milter: each message gets
    the X-Spam-Status and X-Spam-Score fields (and X-Spam-Flag: YES for spam)
    that `spamfilter filter` writes, fields of those names that came with it
    are deleted, and with --reject-above a spam is refused at SMTP time. A
    message that cannot be scored is answered as --on-error says. The
    start-up line on stderr says the address, the mode and the model; then
    one line per message. SIGTERM finishes the messages in flight and exits;
    SIGHUP reads the config again.

    Example: spamfilter milter --listen 127.0.0.1:8895 (Postfix: smtpd_milters = inet:127.0.0.1:8895)
    """
    from spamfilter.daemon.milter_server import DATABASE_WAIT, MilterOptions, MilterServer
    from spamfilter.daemon.pool import FilterPool

    s = state(ctx)
    address, mode = listen_address(ctx, listen, socket_path, socket_mode, 8895)
    options = MilterOptions(
        address=address,
        socket_mode=mode,
        socket_group=socket_group,
        workers=workers,
        max_connections=max_connections,
        max_size=max_size,
        timeout=timeout,
        allowed_ips=ip_list(allowed_ips),
        reject_above=reject_above,
        on_error="tempfail" if on_error is OnError.tempfail else "accept",
    )
    pool = FilterPool(s.config, s.db_url, s.user, per_user=per_user, waits_within=min(timeout, DATABASE_WAIT))
    run(MilterServer(options, pool, lambda: load_config(s.config_path)), "milter", processes or s.config.daemon.processes)
