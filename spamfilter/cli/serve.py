"""``spamfilter serve``: the resident filter behind ``spamc``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spamfilter.cli import app, state
from spamfilter.cli._daemons import AllowedIps, Listen, Processes, SocketGroup, SocketMode, SocketPath, ip_list, listen_address, one_place, run
from spamfilter.config import load_config
from spamfilter.locations import default_socket_path, make_private_dirs, not_a_folder


@app.command()
def serve(
    ctx: typer.Context,
    listen: Listen = "localhost:783",
    socket_path: SocketPath = None,
    socket_mode: SocketMode = "0600",
    socket_group: SocketGroup = "",
    allowed_ips: AllowedIps = "",
    workers: Annotated[int, typer.Option("--workers", min=1, help="Threads scoring requests, per process.")] = 2,
    processes: Processes = None,
    max_connections: Annotated[
        int, typer.Option("--max-connections", min=1, help="Connections held at once, per process; beyond, the quietest without a whole request is closed.")
    ] = 256,
    max_size: Annotated[int, typer.Option("--max-size", metavar="BYTES", min=1, help="Longer messages are passed back unscanned.")] = 512_000,
    timeout: Annotated[
        float, typer.Option("--timeout", metavar="SECONDS", min=0.1, max=86_400, help="Time a client has to send its request, and a request to get the database.")
    ] = 30.0,
    spool_limit: Annotated[
        int,
        typer.Option(
            "--spool-limit",
            metavar="BYTES",
            min=1,
            help="Bytes of oversized PROCESS messages spooled (to give back unscanned) and of TELLs over --max-size held, at once; beyond, EX_TEMPFAIL.",
        ),
    ] = 256 << 20,
    allow_tell: Annotated[bool, typer.Option("--allow-tell", help="Accept TELL: learning with spamc -L spam|ham|forget.")] = False,
    user_socket: Annotated[
        bool,
        typer.Option(
            "--user-socket", help="Listen on $XDG_RUNTIME_DIR/spamfilter/spamd.sock, where `spamfilter filter` finds the daemon by itself (instead of --listen/--socket)."
        ),
    ] = False,
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
    SIGHUP reads the config again. A host name is served on each of its
    addresses, and localhost (the default) on 127.0.0.1 and ::1, where spamc
    without -d connects first. With --user-socket `spamfilter filter`
    uses the daemon without --connect, when it serves the model the filter
    would use.

    Example: spamfilter serve --socket /run/spamfilter/spamd.sock & spamc -U /run/spamfilter/spamd.sock -c < message.eml
    """
    from spamfilter import spamd
    from spamfilter.daemon.pool import FilterPool
    from spamfilter.daemon.server import ServeOptions, Server

    s = state(ctx)
    one_place(ctx, "listen", "socket_path", "user_socket")
    if user_socket:
        socket_path = _user_socket()
    address, mode = listen_address(ctx, listen, socket_path, socket_mode, spamd.DEFAULT_PORT)
    options = ServeOptions(
        address=address,
        socket_mode=mode,
        socket_group=socket_group,
        workers=workers,
        max_connections=max_connections,
        max_size=max_size,
        timeout=timeout,
        allowed_ips=ip_list(allowed_ips),
        allow_tell=allow_tell,
        spool_limit=spool_limit,
    )
    pool = FilterPool(s.config, s.db_url, s.user, per_user=per_user, waits_within=timeout)
    run(Server(options, pool, lambda: load_config(s.config_path)), "serve", processes or s.config.daemon.processes)


def _user_socket() -> Path:
    """The per-user socket, its folder made owner-only; a usage error without $XDG_RUNTIME_DIR."""
    path = default_socket_path()
    if path is None:
        raise typer.BadParameter("needs $XDG_RUNTIME_DIR (the per-user runtime folder) to be set", param_hint="--user-socket")
    try:
        make_private_dirs(path.parent)
    except OSError as exc:
        raise typer.BadParameter(f"cannot make {path.parent}: {not_a_folder(path) or exc.strerror}", param_hint="--user-socket") from None
    return path
