"""The ``spamfilter`` command: a thin Typer shell over ``spamfilter.filter``.

Each command parses its options, calls one library function and renders the
result. Library errors become one line on stderr and an exit code from
``spamfilter.cli.exitcodes``; no traceback reaches the user (set
``SPAMFILTER_DEBUG=1`` to see one).
"""

from __future__ import annotations

import errno
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, BinaryIO, NoReturn, get_args, get_origin

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from spamfilter import __version__
from spamfilter.cli import exitcodes
from spamfilter.cli._streams import flushed, stdout_to_devnull, usable_streams
from spamfilter.config import Config, load_config, valid_model_name
from spamfilter.errors import SpamfilterError
from spamfilter.locations import not_a_folder


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

    #: The most of a message held in memory. A longer one is not filtered:
    #: `read` stops there and `pass_through` copies the rest in pieces (but
    #: not from a device such as /dev/zero, which `filter` refuses).
    limit = 64 << 20

    def read(self) -> bytes:
        """The message (read once), or its first `limit` + 1 bytes when it
        is longer than `limit` (see `complete`)."""
        if self._raw is None:
            self._raw = self._source.read(self.limit + 1)
        return self._raw

    @property
    def passes_through(self) -> bool:
        """Whether this run writes the message (``filter`` without ``--verdict-only``)."""
        return self._pass_through

    @property
    def complete(self) -> bool:
        """Whether `read` holds the whole message."""
        return self._raw is not None and len(self._raw) <= self.limit

    def write(self, pieces: Iterable[bytes | memoryview]) -> None:
        """Deliver the filtered message (or the verdict line)."""
        self._written = True
        for piece in pieces:
            _write_all(self._sink, piece)
        self._sink.flush()

    def pass_through(self) -> None:
        """Write the message through unchanged, unless something was
        delivered already. What was not read yet is copied in pieces."""
        if not self._pass_through or self._written:
            return
        self._written = True
        try:
            if self._raw is not None:
                _write_all(self._sink, self._raw)
            elif self._source.isatty():
                return
            from spamfilter.mail.sources import is_device_stream

            if is_device_stream(self._source):
                return  # /dev/zero never ends: nothing to pass on
            while chunk := self._source.read(1 << 16):
                _write_all(self._sink, chunk)
            self._sink.flush()
        except (OSError, ValueError):
            # stdout or stdin is gone (closed pipe): the exit code still
            # tells the MTA that nothing was delivered.
            pass


def _write_all(sink: BinaryIO, data: bytes | memoryview) -> None:
    """Write all of ``data``: a raw file (stdout with PYTHONUNBUFFERED set)
    may take only part of it (a file at its size limit, a signal), which
    a lone ``write`` would leave unwritten without a word."""
    view = memoryview(data).cast("B")
    while view:
        n = sink.write(view)
        if n is None:  # a non-blocking descriptor that is full
            raise BlockingIOError(errno.EAGAIN, "the output would block")
        view = view[n:]


def _command_at(group: TyperGroup, argv: Sequence[str]) -> int:
    """Where in ``argv`` the command is named: the first argument that is
    neither a root option nor its value (``len(argv)`` if none is)."""
    takes_value = {name for param in group.params if isinstance(param, TyperOption) and not param.is_flag and not param.count for name in param.opts}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-"):
            break
        i += 2 if arg in takes_value else 1
    return min(i, len(argv))


def _runs_filter(argv: Sequence[str], i: int) -> bool:
    """Whether ``argv``, its command at ``i`` (`_command_at`), runs
    ``filter`` in its mail-writing mode: neither ``--verdict-only`` nor
    ``--help`` follows."""
    if i >= len(argv) or argv[i] != "filter":
        return False
    return not any(arg in ("--verdict-only", "--help") for arg in argv[i + 1 :])


def _value_name(param: TyperArgument | TyperOption) -> str:
    """How --help names a value: the metavar given, else the choices, N for
    a whole number, X for a real one, TEXT otherwise (Typer's own labels,
    ``<list[str]>`` or ``<int range>``, describe Python, not the command)."""
    if param.metavar is not None:
        return param.metavar
    desc = param.type_descriptor
    if desc.is_choice and desc.choices:
        return "|".join(str(c.value if isinstance(c, Enum) else c) for c in desc.choices)
    kind = param.bare_type()
    if "int" in kind:
        return "N"
    if "float" in kind:
        return "X"
    return "TEXT"


def _plain_value(param: TyperArgument | TyperOption, value: Any) -> tuple[bool, Any]:
    """(True, what Typer's coercion would make of ``value``) where that is
    plain: nothing given for a parameter that is not required; text for a
    ``str``; the parameter's own default where it is of the annotated type
    (a number, a flag or an Enum member the command was not given: what a
    user types is text, which Typer converts and checks); texts for a
    ``list[str]`` (none only where not required); the text of a member's
    value for a case-sensitive Enum. (False, None) for anything else,
    which Typer coerces."""
    desc = param.type_descriptor
    annotation: Any = desc.annotation
    if desc.parameter_info.parser is not None:
        return False, None
    if value is None:
        return (not param.required), (() if param.multiple or param.nargs == -1 else None)
    if annotation is str and type(value) is str:
        return True, value
    if isinstance(annotation, type) and type(value) is annotation and type(param.default) is annotation and value == param.default:
        return True, value  # the parameter's own default (a number, a flag, an Enum member)
    listed = isinstance(value, (tuple, list)) and (bool(value) or not param.required)
    if get_origin(annotation) is list and get_args(annotation) == (str,) and listed and all(type(v) is str for v in value):
        return True, list(value)
    if isinstance(annotation, type) and issubclass(annotation, Enum) and type(value) is str and desc.parameter_info.case_sensitive:
        member = next((m for m in annotation if m.value == value), None)
        if member is None:
            # Said here: Typer's own check words it "Value error, ..."
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(repr(m.value) for m in annotation)}.", param=param)
        return True, member
    return False, None


def _process_plainly(param: TyperArgument | TyperOption, ctx: Any, value: Any) -> tuple[bool, Any]:
    """(True, the processed value) for a value ``_plain_value`` takes: the
    parameter's callback runs on it as after coercing; (False, None)
    otherwise. Typer builds a pydantic validator for each parameter it
    coerces, and importing pydantic was a third of the start-up of
    ``filter --connect`` (docs/benchmarks.md)."""
    plain, value = _plain_value(param, value)
    if not plain:
        return False, None
    if param.callback is not None:
        value = param.callback(ctx, param, value)
    return True, value


class _PlainArgument(TyperArgument):
    """An argument shown in --help by its metavar as written (``SRC...``,
    ``[FILE|-]``), without Typer's braces and Python type."""

    def process_value(self, ctx: Any, value: Any) -> Any:
        done, plain = _process_plainly(self, ctx, value)
        return plain if done else super().process_value(ctx, value)

    def _usage_display_name(self) -> str:
        return _value_name(self)

    def _rich_display_name(self) -> str:
        return _value_name(self)

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


class _PlainOption(TyperOption):
    """An option shown in --help as ``--name VALUE`` (see `_value_name`)."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return _value_name(self)

    def process_value(self, ctx: Any, value: Any) -> Any:
        done, plain = _process_plainly(self, ctx, value)
        return plain if done else super().process_value(ctx, value)


def _plain_help_option(option: Any) -> Any:
    """A command's ``--help`` option (made when first asked for) as a ``_PlainOption``."""
    if type(option) is TyperOption:
        option.__class__ = _PlainOption
    return option


def _parse_in(ctx: Any, parse: Callable[[Any, list[str]], list[str]], args: list[str]) -> list[str]:
    """``parse(ctx, args)``, a command's parsing, its usage errors tied to
    ``ctx``: the parser raises some without it ("Option '--spam' requires
    an argument.", "does not take a value"), and those printed only their
    ``Error:`` line, without the usage line and the --help hint."""
    try:
        return parse(ctx, args)
    except typer.TyperException as exc:
        if getattr(exc, "ctx", ctx) is None:
            exc.ctx = ctx  # type: ignore[attr-defined]
            exc.cmd = ctx.command  # type: ignore[attr-defined]
        raise


class PlainCommand(TyperCommand):
    """A command whose ``--help`` option is a ``_PlainOption`` too (every
    command is one, or a subclass: `_plain_help`)."""

    def get_help_option(self, ctx: Any) -> Any:
        return _plain_help_option(super().get_help_option(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return _parse_in(ctx, super().parse_args, args)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except OverflowError as exc:
            if "SQLite INTEGER" not in str(exc):
                raise
            # A number given on the command line that SQLite's integers
            # cannot hold (`top-words --min-count 9223372036854775808`):
            # the options are checked for sign, not size.
            usage_error(ctx, f"a number given is too large: {exc}")


class _PlainGroup(TyperGroup):
    """A group of subcommands (``db``, ``imap``) whose ``--help`` option is a ``_PlainOption`` too."""

    def get_help_option(self, ctx: Any) -> Any:
        return _plain_help_option(super().get_help_option(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return _parse_in(ctx, super().parse_args, args)


def _plain_help(command: Any) -> None:
    """Give every parameter of ``command`` and its subcommands the plain --help look."""
    for param in command.params:
        if type(param) is TyperArgument:
            param.__class__ = _PlainArgument
        elif type(param) is TyperOption:
            param.__class__ = _PlainOption
    if type(command) is TyperCommand:
        command.__class__ = PlainCommand
    elif type(command) is TyperGroup:
        command.__class__ = _PlainGroup
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)


#: ``--connect``: the daemon that ``filter`` and ``mark`` ask first.
Connect = Annotated[
    str | None,
    typer.Option(
        "--connect", metavar="ADDR", envvar="SPAMFILTER_SERVER", help="Ask `spamfilter serve` at HOST:PORT or a socket PATH; work in-process when it does not answer."
    ),
]


#: Each command's module, in the order ``--help`` lists them. A module is
#: imported only when its command runs (``--help`` imports them all): a
#: delivery filter starts once per message and must not load the evaluation,
#: report, plotting and IMAP code, nor scipy.stats and matplotlib with them.
COMMAND_MODULES = {
    "classify": "classify",
    "filter": "deliver",
    "stats": "db",
    "evaluate": "evaluate",
    "top-words": "insight",
    "explain": "insight",
    "report": "insight",
    "train": "train",
    "forget": "train",
    "mark": "feedback",
    "tune": "tune",
    "db": "db",
    "imap": "imap",
    "serve": "serve",
    "milter": "milter",
}


class _LazyCommands(TyperGroup):
    """Lists every command, and imports a command's module only when asked for it."""

    def get_help_option(self, ctx: Any) -> Any:
        return _plain_help_option(super().get_help_option(ctx))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return _parse_in(ctx, super().parse_args, args)

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
                if name not in self.commands:
                    self.add_command(command, name)
        return super().get_command(ctx, cmd_name)


class _Group(_LazyCommands):
    """Maps errors to the documented exit codes for every subcommand, and
    guarantees that ``filter`` never loses the message."""

    delivery: Delivery | None = None
    #: Whether this run is ``filter``'s (its output is the delivery).
    filtering = False

    def main(self, args: Sequence[str] | None = None, *pos: Any, **kwargs: Any) -> Any:
        argv = list(args) if args is not None else sys.argv[1:]
        i = _command_at(self, argv)
        self.delivery = Delivery(sys.stdin.buffer, sys.stdout.buffer, pass_through=_runs_filter(argv, i))
        self.filtering = i < len(argv) and argv[i] == "filter"
        if i < len(argv) and argv[i] in ("serve", "milter") and threading.current_thread() is threading.main_thread():
            # A reload asked for while a daemon starts (a log rotation)
            # would end it, SIGHUP's default: ignored until the daemon
            # installs its own handlers.
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        try:
            result = super().main(argv, *pos, **kwargs)
        except BaseException:
            self.delivery.pass_through()
            raise
        # Without standalone mode a run ends here, with its exit code.
        self.delivery.pass_through()
        return result

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _plain_help(self)

    def add_command(self, cmd: Any, name: str | None = None) -> None:
        _plain_help(cmd)
        super().add_command(cmd, name)

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
        except OSError as exc:
            # --help and --version print here, before any command runs: to
            # a full disk or a closed stdout.
            if exc.errno not in _OUTPUT_FULL:
                raise
            fail(f"cannot write the output: {exc.strerror or exc}", exitcodes.OUTPUT_ERROR)

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
            stdout_to_devnull()
            if self.filtering:
                # `filter`: the message (or the verdict line) was not
                # delivered; the MDA must not take the exit code for a verdict.
                what = "the message" if self.delivery is not None and self.delivery.passes_through else "the verdict"
                fail(f"cannot write {what}: the program reading it closed the pipe", exitcodes.OUTPUT_ERROR)
            # `spamfilter classify big.mbox | head`: the reader left, which is
            # not an error.
            raise typer.Exit(exitcodes.OK) from None
        except (typer.Exit, typer.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, no traceback
            if os.environ.get("SPAMFILTER_DEBUG"):
                raise
            if isinstance(exc, OSError) and exc.errno in _OUTPUT_FULL:
                # Mail sources and the database have errors of their own:
                # what is left is the output (stdout, or a file named to
                # write) on a full disk.
                fail(f"cannot write the output: {exc.strerror or exc}", exitcodes.OUTPUT_ERROR)
            if isinstance(exc, MemoryError):
                # A process limit (a mail server's vsz_limit, ulimit -v)
                # below what a very large message needs: the step that ran
                # out rolled back, as every failed step does.
                fail(
                    "out of memory: this run needs more memory than the process may use (a very large message?); the step that ran out wrote nothing", exitcodes.INTERNAL
                )
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
    create_dirs: bool = False


class _StderrHandler(logging.Handler):
    """Shows the library's warnings (e.g. a busy database being tried again)
    as ``spamfilter: message`` lines on the stderr of the moment."""

    def emit(self, record: logging.LogRecord) -> None:
        typer.echo(f"spamfilter: {self.format(record)}", err=True)


def _show_warnings() -> None:
    logger = logging.getLogger("spamfilter")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler(logging.WARNING))
        logger.setLevel(logging.WARNING)
    # The PostgreSQL driver logs, as warnings with its own object's repr,
    # errors it ignores while it cleans up after one the store handles (a
    # duplicate ledger row that the transaction's retry takes care of):
    # Python's last-resort handler would print them on stderr.
    driver = logging.getLogger("psycopg")
    if not driver.handlers:
        driver.addHandler(logging.NullHandler())
        driver.propagate = False


#: Write errors that mean the output has no room (or the device failed), not a bug.
_OUTPUT_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EBADF})


def fail(message: str, code: int) -> NoReturn:
    """Print ``spamfilter: message`` on stderr, on one line, and exit with ``code``."""
    typer.echo("spamfilter: " + " ".join(line.strip() for line in message.splitlines() if line.strip()), err=True)
    raise typer.Exit(code)


def usage_error(ctx: typer.Context, message: str) -> NoReturn:
    """Exit 64 as click's own usage errors do, for a mistake a command finds
    in its arguments after parsing them: its usage line, the ``Try
    'spamfilter CMD --help'`` hint and ``Error: message`` on stderr (`_Group`
    turns click's exit code 2 into 64)."""
    ctx.fail(message)


def given_on_command_line(ctx: typer.Context, name: str) -> bool:
    """Whether the parameter ``name`` was given on the command line (not
    left at its default)."""
    return getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"


def refuse_unused(ctx: typer.Context, where: str, *names: str) -> None:
    """A usage error (64) when one of the parameters ``names`` was given on
    the command line but does nothing ``where`` (e.g. "with --protocol cv"):
    an option silently ignored reads as one obeyed."""
    for name in names:
        if given_on_command_line(ctx, name):
            usage_error(ctx, f"--{name.replace('_', '-')} does nothing {where}")


def writable_output(ctx: typer.Context, path: Path, option: str) -> None:
    """A usage error (64) now, before any work, if ``option``'s file ``path``
    cannot be written: a folder, or in a folder that does not exist or is
    not ours to write (a run of hours is not lost to a typo in its output
    path)."""
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        usage_error(ctx, f"{option} {path}: it is a folder; give the name of a file")
    if not folder.is_dir():
        usage_error(ctx, f"{option} {path}: {not_a_folder(path) or f'no such folder {folder}'}")
    # A file that exists is written in place: its own permission counts,
    # not its folder's (/dev/null, a file in a read-only folder).
    if not (os.access(path, os.W_OK) if path.exists() else os.access(folder, os.W_OK | os.X_OK)):
        usage_error(ctx, f"{option} {path}: permission denied")


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
        typer.Option(
            "--db",
            metavar="URL|FILE",
            help="Database URL, or the path of a SQLite file (default: $SPAMFILTER_DB, store.url in the config, or a SQLite file in $XDG_DATA_HOME/spamfilter, ~/.local/share/spamfilter when that is unset).",
        ),
    ] = None,
    # Text, made a Path here: Typer checks a Path option with pydantic,
    # which a delivery filter would import for this one option.
    config_file: Annotated[
        str | None,
        typer.Option(
            "--config", metavar="FILE", help="Config file (default: $SPAMFILTER_CONFIG or $XDG_CONFIG_HOME/spamfilter/config.toml, ~/.config/... when that is unset)."
        ),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option("--user", metavar="NAME", help="Use NAME's model (each user's counts are kept apart; default: store.user in the config, else the shared model)."),
    ] = None,
    create_dirs: Annotated[
        bool, typer.Option("--create-dirs", help="Let a command that writes create the missing folders of a new SQLite --db (always done for the default location).")
    ] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Train on your spam and ham, then classify or filter mail.

    Example: spamfilter train --spam Junk/ --ham INBOX.mbox && spamfilter classify new.mbox
    """
    _show_warnings()
    # Empty (--db "$UNSET" in a script): it meant the default database, the
    # user's real one, for train; refused rather than guessed.
    for name, value in (("--db", db), ("--config", config_file)):
        if value == "":
            usage_error(ctx, f"{name}: empty; name a {'database (a URL or a file)' if name == '--db' else 'config file'}")
    config = Path(config_file) if config_file is not None else None
    try:
        cfg = load_config(config)
    except SpamfilterError as exc:
        fail(str(exc), exitcodes.for_error(exc))
    if user is not None and not valid_model_name(user):
        usage_error(ctx, "--user: a model name is at most 200 printable characters")
    ctx.obj = AppState(config=cfg, db_url=db, config_path=config, user=user, create_dirs=create_dirs)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit code."""
    usable_streams()
    try:
        app(args=list(argv) if argv is not None else None, prog_name="spamfilter", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return flushed(code if isinstance(code, int) else (0 if code is None else 1))
    return flushed(0)


if __name__ == "__main__":
    sys.exit(main())
