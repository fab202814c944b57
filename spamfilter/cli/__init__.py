"""The ``spamfilter`` command: a thin Typer shell over ``spamfilter.service``.

Each command parses its options, calls one library function and renders the
result. Library errors become one line on stderr and an exit code from
``spamfilter.cli.exitcodes``; no traceback reaches the user (set
``SPAMFILTER_DEBUG=1`` to see one).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from spamfilter import __version__
from spamfilter.cli import exitcodes
from spamfilter.config import Config, load_config
from spamfilter.errors import SpamfilterError


#: Each command's module, in the order ``--help`` lists them. A module is
#: imported only when its command runs (``--help`` imports them all): a
#: delivery filter starts once per message and must not load the evaluation,
#: report, plotting and IMAP code, nor scipy.stats and matplotlib with them.
COMMAND_MODULES = {
    "classify": "classify", "filter": "classify", "stats": "db", "evaluate": "evaluate",
    "top-words": "insight", "explain": "insight", "report": "insight",
    "train": "train", "forget": "train", "mark": "train", "tune": "tune",
    "db": "db", "imap": "imap",
}


class _LazyCommands(TyperGroup):
    """Lists every command, and imports a command's module only when asked for it."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMAND_MODULES)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        module = COMMAND_MODULES.get(cmd_name)
        if cmd_name not in self.commands and module is not None:
            # The module adds its commands to `app`; build them as click commands.
            importlib.import_module(f"{__name__}.{module}")
            built = typer.main.get_command(app)
            assert isinstance(built, TyperGroup)
            for name, command in built.commands.items():
                self.commands.setdefault(name, command)
        return super().get_command(ctx, cmd_name)


class _Group(_LazyCommands):
    """Maps errors to the documented exit codes for every subcommand."""

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
