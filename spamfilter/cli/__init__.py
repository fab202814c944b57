"""The ``spamfilter`` command: a thin Typer shell over ``spamfilter.service``.

Each command parses its options, calls one library function and renders the
result. Library errors become one line on stderr and an exit code from
``spamfilter.cli.exitcodes``; no traceback reaches the user (set
``SPAMFILTER_DEBUG=1`` to see one).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import typer
from typer.core import TyperGroup, TyperOption

from spamfilter import __version__
from spamfilter.cli import exitcodes
from spamfilter.config import Config, load_config
from spamfilter.errors import SpamfilterError


class Delivery:
    """The message of one ``spamfilter filter`` run: read from stdin, and
    written to stdout either filtered or, on any failure, unchanged.

    `_Group.main` owns it, so the pass-through covers every way a run can
    end without the filtered message: usage and config errors raised before
    the command body runs, library errors, internal errors, Ctrl-C.
    """

    def __init__(self, source: BinaryIO, sink: BinaryIO, *, pass_through: bool) -> None:
        self._source = source
        self._sink = sink
        self._pass_through = pass_through
        self._raw: bytes | None = None
        self._written = False

    def read(self) -> bytes:
        """The whole message (read once)."""
        if self._raw is None:
            self._raw = self._source.read()
        return self._raw

    def write(self, pieces: Iterable[bytes | memoryview]) -> None:
        """Deliver the filtered message (or the verdict line)."""
        self._written = True
        for piece in pieces:
            self._sink.write(piece)
        self._sink.flush()

    def pass_through(self) -> None:
        """Write the message through unchanged, unless something was
        delivered already. What was not read yet is copied in pieces."""
        if not self._pass_through or self._written:
            return
        self._written = True
        try:
            if self._raw is not None:
                self._sink.write(self._raw)
            elif self._source.isatty():
                return
            shutil.copyfileobj(self._source, self._sink)
            self._sink.flush()
        except (OSError, ValueError):
            # stdout or stdin is gone (closed pipe): the exit code still
            # tells the MTA that nothing was delivered.
            pass


def _runs_filter(group: TyperGroup, argv: Sequence[str]) -> bool:
    """Whether ``argv`` runs ``filter`` in its mail-writing mode: the first
    argument that is neither a root option nor its value names ``filter``,
    and neither ``--verdict-only`` nor ``--help`` follows."""
    takes_value = {
        name
        for param in group.params
        if isinstance(param, TyperOption) and not param.is_flag and not param.count
        for name in param.opts
    }
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-"):
            break
        i += 2 if arg in takes_value else 1
    if i >= len(argv) or argv[i] != "filter":
        return False
    return not any(arg in ("--verdict-only", "--help") for arg in argv[i + 1 :])


class _Group(TyperGroup):
    """Maps errors to the documented exit codes for every subcommand, and
    guarantees that ``filter`` never loses the message."""

    delivery: Delivery | None = None

    def main(self, args: Sequence[str] | None = None, *pos: Any, **kwargs: Any) -> Any:
        argv = list(args) if args is not None else sys.argv[1:]
        self.delivery = Delivery(sys.stdin.buffer, sys.stdout.buffer, pass_through=_runs_filter(self, argv))
        try:
            result = super().main(argv, *pos, **kwargs)
        except BaseException:
            self.delivery.pass_through()
            raise
        # Without standalone mode a run ends here, with its exit code.
        self.delivery.pass_through()
        return result

    @staticmethod
    def _usage_code(exc: typer.TyperException) -> None:
        # Typer's usage errors exit 2 by default, which `filter` uses for
        # "unsure"; move them to EX_USAGE.
        if getattr(exc, "exit_code", None) == 2:
            setattr(exc, "exit_code", exitcodes.USAGE)

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except typer.TyperException as exc:
            self._usage_code(exc)
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.TyperException as exc:
            self._usage_code(exc)
            raise
        except SpamfilterError as exc:
            fail(str(exc), exitcodes.for_error(exc))
        except KeyboardInterrupt:
            fail("interrupted", exitcodes.INTERRUPTED)
        except BrokenPipeError:
            # `spamfilter classify big.mbox | head`: the reader left, which is
            # not an error. Point stdout at /dev/null so the interpreter's
            # final flush does not raise again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(exitcodes.OK) from None
        except (typer.Exit, typer.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, no traceback
            if os.environ.get("SPAMFILTER_DEBUG"):
                raise
            fail(f"internal error: {type(exc).__name__}: {exc} (set SPAMFILTER_DEBUG=1 for a traceback)", exitcodes.INTERNAL)


app = typer.Typer(
    cls=_Group,
    help="A naive Bayes mail filter that learns from your mail.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)


@dataclass(frozen=True, slots=True)
class AppState:
    """Global options, kept in ``ctx.obj``."""

    config: Config
    db_url: str | None
    config_path: Path | None = None
    user: str | None = None


def fail(message: str, code: int) -> None:
    """Print ``spamfilter: message`` on stderr and exit with ``code``."""
    typer.echo(f"spamfilter: {message}", err=True)
    raise typer.Exit(code)


def delivery(ctx: typer.Context) -> Delivery:
    """The message of this ``filter`` run (see `Delivery`)."""
    group = ctx.find_root().command
    if isinstance(group, _Group) and group.delivery is not None:
        return group.delivery
    return Delivery(sys.stdin.buffer, sys.stdout.buffer, pass_through=False)


def state(ctx: typer.Context) -> AppState:
    """The global options of this run."""
    obj = ctx.find_root().obj
    assert isinstance(obj, AppState)
    return obj


def _version(value: bool) -> None:
    if value:
        typer.echo(f"spamfilter {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option("--db", metavar="URL", help="Database URL (default: $SPAMFILTER_DB, store.url in the config, or a SQLite file in ~/.local/share/spamfilter)."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", metavar="FILE", help="Config file (default: $SPAMFILTER_CONFIG or ~/.config/spamfilter/config.toml)."),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option("--user", metavar="NAME", help="Use NAME's model (each user's counts are kept apart; default: store.user in the config, else the shared model)."),
    ] = None,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Train on your spam and ham, then classify or filter mail.

    Example: spamfilter train --spam Junk/ --ham INBOX.mbox && spamfilter classify new.mbox
    """
    try:
        cfg = load_config(config)
    except SpamfilterError as exc:
        fail(str(exc), exitcodes.for_error(exc))
    ctx.obj = AppState(config=cfg, db_url=db, config_path=config, user=user)


# Register the commands (each module adds its own to `app`).
from spamfilter.cli import classify as _classify  # noqa: E402,F401
from spamfilter.cli import db as _db  # noqa: E402,F401
from spamfilter.cli import evaluate as _evaluate  # noqa: E402,F401
from spamfilter.cli import imap as _imap  # noqa: E402,F401
from spamfilter.cli import insight as _insight  # noqa: E402,F401
from spamfilter.cli import serve as _serve  # noqa: E402,F401
from spamfilter.cli import train as _train  # noqa: E402,F401
from spamfilter.cli import tune as _tune  # noqa: E402,F401


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit code."""
    try:
        app(args=list(argv) if argv is not None else None, prog_name="spamfilter", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
