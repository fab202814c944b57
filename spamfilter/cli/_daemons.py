"""What the long-running commands (``serve``, ``milter``) share: their
listening options, their log lines on stderr, and how they run (in one
process or forked, ``spamfilter.daemon.prefork``, which also handles the
signals that stop them and reload their config)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Protocol

import typer

from spamfilter import spamd
from spamfilter.cli import given_on_command_line
from spamfilter.daemon import prefork
from spamfilter.daemon.prefork import Forkable
from spamfilter.errors import AddressInUse, ConfigError, ProtocolError, StoreError

if TYPE_CHECKING:
    from spamfilter.daemon.pool import FilterPool


def _networks_given(ctx: typer.Context, text: str) -> str:
    """``--allowed-ips`` checked as the command line's: a usage error (64)."""
    from spamfilter.daemon.listen import allowed_networks

    if given_on_command_line(ctx, "allowed_ips") and not ip_list(text):
        # "--allowed-ips ''" or ",,": named no network, and listened on
        # loopback only without a word.
        raise typer.BadParameter(f"names no network: {text!r}")
    try:
        allowed_networks(ip_list(text))
    except ConfigError as exc:
        raise typer.BadParameter(str(exc).removeprefix("allowed ips: ")) from None
    return text


def _group_given(name: str) -> str:
    """``--socket-group`` checked as the command line's: a usage error (64)."""
    import grp

    if name:
        try:
            grp.getgrnam(name)
        except KeyError:
            raise typer.BadParameter(f"no such group: {name}") from None
    return name


#: The options every daemon takes for where it listens.
Listen = Annotated[str, typer.Option("--listen", metavar="HOST:PORT", help="TCP address to listen on.")]
SocketPath = Annotated[Path | None, typer.Option("--socket", metavar="PATH", help="Listen on this Unix socket instead of TCP.")]
SocketMode = Annotated[str, typer.Option("--socket-mode", metavar="OCTAL", help="Permissions of the Unix socket.")]
SocketGroup = Annotated[str, typer.Option("--socket-group", metavar="GROUP", callback=_group_given, help="Group of the Unix socket.")]
AllowedIps = Annotated[
    str,
    typer.Option(
        "--allowed-ips",
        metavar="NETS",
        callback=_networks_given,
        help="Comma-separated client networks allowed over TCP (default: loopback only; needed to listen elsewhere).",
    ),
]


Processes = Annotated[
    int | None, typer.Option("--processes", min=1, max=64, help="Processes serving, each with the model in memory (default: [daemon] processes; 0 there: one per core).")
]


class Daemon(Forkable, Protocol):
    """What `run` needs of a server: its pool, and its lifetime."""

    pool: FilterPool

    def bind(self) -> spamd.Address: ...


def listen_address(ctx: typer.Context, listen: str, socket_path: Path | None, socket_mode: str, default_port: int) -> tuple[spamd.Address, int]:
    """Where to listen (``--socket``, else ``--listen``; both given is a
    usage error, `one_place`) and the socket's mode from its octal text; a
    bad one is a usage error."""
    one_place(ctx, *[name for name in _PLACES if name in ctx.params])
    try:
        mode = int(socket_mode, 8)
        if not 0 <= mode <= 0o777:
            # os.chmod takes -1 as 7777 (set-id bits, and writable by all)
            raise ValueError(socket_mode)
        address = spamd.Address(path=str(socket_path)) if socket_path is not None else spamd.parse_address(listen, default_port)
    except ValueError:
        raise typer.BadParameter(f"not an octal mode from 0 to 0777: {socket_mode}", param_hint="--socket-mode") from None
    except ProtocolError as exc:
        raise typer.BadParameter(str(exc), param_hint="--listen") from None
    return address, mode


#: The option each listening parameter is given as.
_PLACES = {"listen": "--listen", "socket_path": "--socket", "user_socket": "--user-socket"}


def one_place(ctx: typer.Context, *names: str) -> None:
    """Refuse more than one of the listening options ``names`` given on the
    command line (``--socket`` won over ``--listen`` without a word)."""
    given = [n for n in names if given_on_command_line(ctx, n) and ctx.params.get(n) not in (None, False)]
    if len(given) > 1:
        raise typer.BadParameter(f"give one of {', '.join(_PLACES[n] for n in names)}, not {' and '.join(_PLACES[n] for n in given)}", param_hint=_PLACES[given[-1]])


def ip_list(text: str) -> tuple[str, ...]:
    """``--allowed-ips``: comma-separated networks."""
    return tuple(a for a in text.split(",") if a.strip())


def run(server: Daemon, command: str, processes: int) -> None:
    """Log to stderr, listen (the filters are closed if that fails), and
    serve until SIGTERM, rereading the config on SIGHUP, from ``processes``
    processes (0: one per core)."""
    log_to_stderr(command)
    try:
        # A database the daemon cannot open refuses the start; an empty or
        # untrained model starts with a warning, since it is trained by
        # another command, and meanwhile mail passes unscanned.
        warning = server.pool.readiness()
        server.bind()
    except (ConfigError, AddressInUse, StoreError):
        server.pool.close()
        raise
    if warning:
        logging.getLogger("spamfilter.daemon").warning(warning)
    status = prefork.serve(server, processes or os.cpu_count() or 1)
    if status:
        raise typer.Exit(status)


def log_to_stderr(command: str) -> None:
    """Show the daemon's lines (INFO and up) on stderr as
    ``spamfilter COMMAND: message``, in place of the CLI's warnings-only
    handler; a warning or an error says so first
    (``spamfilter COMMAND: warning: ...``), so it can be told from the rest."""
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(_LogLine(command))
    logging.basicConfig(level=logging.INFO, handlers=[stderr])
    # Alembic reports each schema step at INFO: a daemon creating a database says nothing of it.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    package_logger = logging.getLogger("spamfilter")
    package_logger.setLevel(logging.INFO)
    for handler in list(package_logger.handlers):
        package_logger.removeHandler(handler)


class _LogLine(logging.Formatter):
    def __init__(self, command: str) -> None:
        super().__init__()
        self._prefix = f"spamfilter {command}: "

    def format(self, record: logging.LogRecord) -> str:
        level = f"{record.levelname.lower()}: " if record.levelno >= logging.WARNING else ""
        return f"{self._prefix}{level}{super().format(record)}"
