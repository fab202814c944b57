"""``spamfilter serve``: the resident filter behind ``spamc``."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from spamfilter.cli import app, state
from spamfilter.config import Config, load_config
from spamfilter.errors import ConfigError, ProtocolError


@app.command()
def serve(
    ctx: typer.Context,
    listen: Annotated[str, typer.Option("--listen", metavar="HOST:PORT", help="TCP address to listen on.")] = "127.0.0.1:783",
    socket_path: Annotated[Path | None, typer.Option("--socket", metavar="PATH", help="Listen on this Unix socket instead of TCP.")] = None,
    socket_mode: Annotated[str, typer.Option("--socket-mode", metavar="OCTAL", help="Permissions of the Unix socket.")] = "0600",
    socket_group: Annotated[str, typer.Option("--socket-group", metavar="GROUP", help="Group of the Unix socket.")] = "",
    allowed_ips: Annotated[
        str, typer.Option("--allowed-ips", metavar="NETS", help="Comma-separated client networks allowed over TCP (default: loopback only; needed to listen elsewhere).")
    ] = "",
    workers: Annotated[int, typer.Option("--workers", min=1, help="Threads scoring requests, per process.")] = 4,
    processes: Annotated[
        int | None, typer.Option("--processes", min=1, max=64, help="Processes serving requests, each with the model in memory (default: [daemon] processes, 0 = one per core).")
    ] = None,
    max_connections: Annotated[
        int, typer.Option("--max-connections", min=1, help="Connections held at once, per process; beyond, the quietest without a whole request is closed.")
    ] = 256,
    max_size: Annotated[int, typer.Option("--max-size", metavar="BYTES", min=1, help="Longer messages are passed back unscanned.")] = 512_000,
    timeout: Annotated[
        float, typer.Option("--timeout", metavar="SECONDS", min=0.1, help="Time a client has to send its request, and a TELL to get the database.")
    ] = 30.0,
    spool_limit: Annotated[
        int, typer.Option("--spool-limit", metavar="BYTES", min=1, help="Oversized PROCESS messages spooled at once (to give back unscanned); beyond, EX_TEMPFAIL.")
    ] = 256 << 20,
    allow_tell: Annotated[bool, typer.Option("--allow-tell", help="Accept TELL: learning with spamc -L spam|ham|forget.")] = False,
    per_user: Annotated[
        bool | None,
        typer.Option(
            "--per-user/--one-model",
            "--user-header/--no-user-header",
            help="Let the request's User header (spamc sends the user it runs as, or -u NAME) choose the model, a user without one following [store] shared_model; "
            "--one-model: the default model for every request. Default: [daemon] per_user in the config (false). The second pair are older names.",
        ),
    ] = None,
) -> None:
    """Serve the filter to spamc (SpamAssassin's client) and other clients of
    the spamd protocol, with the default model (the one `spamfilter train`
    trains) unless --per-user. The start-up line on stderr says the mode, the
    model, the database and whether TELL is accepted; then one line per
    request, a warning when a message is not scanned or learned. Idle or
    slow clients never hold up others, and scoring never waits for a
    training write. SIGTERM answers every accepted request and exits;
    SIGHUP reads the config again.

    Example: spamfilter serve --socket /run/spamfilter/spamd.sock & spamc -U /run/spamfilter/spamd.sock -c < message.eml
    """
    # Over 60 lines: most of this command is its options' declarations.
    from spamfilter import spamd
    from spamfilter.daemon import prefork
    from spamfilter.daemon.server import Server, ServeOptions
    from spamfilter.filterpool import FilterPool

    s = state(ctx)
    try:
        mode = int(socket_mode, 8)
        address = spamd.Address(path=str(socket_path)) if socket_path is not None else spamd.parse_address(listen)
    except ValueError:
        raise typer.BadParameter(f"not an octal mode: {socket_mode}", param_hint="--socket-mode") from None
    except ProtocolError as exc:
        raise typer.BadParameter(str(exc), param_hint="--listen") from None
    options = ServeOptions(
        address=address,
        socket_mode=mode,
        socket_group=socket_group,
        workers=workers,
        max_connections=max_connections,
        max_size=max_size,
        timeout=timeout,
        allowed_ips=tuple(a for a in allowed_ips.split(",") if a.strip()),
        allow_tell=allow_tell,
        spool_limit=spool_limit,
    )
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(_LogLine())
    logging.basicConfig(level=logging.INFO, handlers=[stderr])
    # The daemon logs a line per request (INFO): the root handler above
    # shows them all, in place of the CLI's warnings-only one.
    package_logger = logging.getLogger("spamfilter")
    package_logger.setLevel(logging.INFO)
    for handler in list(package_logger.handlers):
        package_logger.removeHandler(handler)

    def reload_config() -> Config:
        return load_config(s.config_path)

    server = Server(options, FilterPool(s.config, s.db_url, s.user, per_user=per_user), reload_config)
    try:
        server.bind()
    except ConfigError:
        server.pool.close()
        raise
    count = processes or s.config.daemon.processes or os.cpu_count() or 1
    status = prefork.serve(server, count)
    if status:
        raise typer.Exit(status)


class _LogLine(logging.Formatter):
    """``spamfilter serve: message``; a warning or an error says so first
    (``spamfilter serve: warning: ...``), so it can be told from the rest."""

    def format(self, record: logging.LogRecord) -> str:
        level = f"{record.levelname.lower()}: " if record.levelno >= logging.WARNING else ""
        return f"spamfilter serve: {level}{super().format(record)}"
