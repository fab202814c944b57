"""``spamfilter filter``: a delivery filter, one message on stdin.

This module loads only what a run answered by a daemon needs (the spamd
client and the header fields, no numpy, SQLAlchemy or filter code), so that
``filter --connect`` costs little more than Python's start; the in-process
path imports the filter when it runs.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from spamfilter.cli import Connect, app, delivery, exitcodes, fail, state, usage_error
from spamfilter.config import database_url, scoring_settings
from spamfilter.errors import ProtocolError
from spamfilter.locations import default_socket_path
from spamfilter.mail.identity import filter_fields, filtered_pieces
from spamfilter.spamd import Address, RemoteVerdict, classify_remote, model_id, parse_address
from spamfilter.verdicts import Decision

#: Seconds a daemon found on the per-user socket has to answer before the
#: message is filtered in-process (a daemon named with --connect has 30).
OWN_DAEMON_TIMEOUT = 10.0

_VERDICT_EXIT = {Decision.SPAM: exitcodes.SPAM, Decision.HAM: exitcodes.HAM, Decision.UNSURE: exitcodes.UNSURE}


@app.command(name="filter")
def filter_(
    ctx: typer.Context,
    always_zero: Annotated[bool, typer.Option("--always-zero", help="Exit 0 for every verdict (errors still exit 64+).")] = False,
    verdict_only: Annotated[bool, typer.Option("--verdict-only", help="Print one verdict line instead of the message.")] = False,
    connect: Connect = None,
) -> None:
    """Read one message on stdin, write it to stdout with X-Spam-Status,
    X-Spam-Score (and X-Spam-Flag: YES for spam) headers; exit 0 spam, 1 ham,
    2 unsure. On any error, usage and config errors included, the message is
    written through unchanged and the exit code is the error's (64 and up).

    With --connect (or $SPAMFILTER_SERVER) the daemon gives the verdict
    (the message written is still the one read, with the fields added);
    when none answers, or its answer is not a whole verdict, the message is
    filtered in-process as without the option. Without it, a daemon on the
    per-user socket (`serve --user-socket`) answers when it scores with the
    model this command would use (same database and user).

    Example (procmail): :0fw | spamfilter filter --always-zero
    """
    _check_stdin(ctx)
    message = delivery(ctx)
    raw = message.read()
    if not message.complete:
        fail(f"not filtered: the message is larger than {message.limit >> 20} MiB", exitcodes.DATA_ERROR)
    remote = _ask_server(connect, raw, state(ctx).user) if connect else _ask_own_daemon(ctx, raw)
    if remote is not None:
        # The daemon is asked for its verdict only (CHECK): the message
        # written is the one read here with the fields added, whatever a
        # server on that address sends back.
        if verdict_only:
            message.write([f"{remote.verdict} {remote.score:.6f} {remote.log_odds:+.4f}\n".encode()])
        else:
            # The event model the server scored with, not this config's.
            fields = filter_fields(remote.verdict, remote.score, remote.log_odds, remote.event_model or "unknown")
            message.write(filtered_pieces(raw, fields))
        raise typer.Exit(exitcodes.OK if always_zero else _VERDICT_EXIT[remote.verdict])
    # On every failure below (and before this command ran) `_Group.main`
    # writes the message through unchanged. A busy database is a temporary
    # failure (75) at once: the mail system queues the message and
    # delivers it again later. The filter's code is loaded only here: a run
    # that a daemon answered never loads it.
    from spamfilter.answers import Refusal, Verdict
    from spamfilter.cli._common import open_filter
    from spamfilter.mail.sources import STDIN_SOURCE, delivered

    with open_filter(ctx, create=True, write_deadline=0.0) as f:
        result = next(iter(f.classify([delivered(STDIN_SOURCE, raw)])))
        model_name = f.config.model.event_model
    if isinstance(result, Refusal):
        fail(f"not filtered: {result.reason}", exitcodes.DATA_ERROR)
    assert isinstance(result, Verdict)
    if verdict_only:
        message.write([f"{result.verdict} {result.score:.6f} {result.log_odds:+.4f}\n".encode()])
    else:
        fields = filter_fields(result.verdict, result.score, result.log_odds, model_name)
        message.write(filtered_pieces(raw, fields))
    raise typer.Exit(exitcodes.OK if always_zero else _VERDICT_EXIT[result.verdict])


def _check_stdin(ctx: typer.Context) -> None:
    """Refuse a terminal (a usage error) or a device on stdin: /dev/zero
    holds no message, and passed through it never ended."""
    if sys.stdin.isatty():
        usage_error(ctx, "filter reads a message on standard input")
    from spamfilter.mail.sources import is_device_stream

    if is_device_stream(sys.stdin.buffer):
        fail("standard input is a device, not a message or a mailbox", exitcodes.NO_INPUT)


def _ask_server(address: str, raw: bytes, user: str | None) -> RemoteVerdict | None:
    """The daemon's verdict, or None after one stderr line saying why the
    message will be filtered in-process instead."""
    try:
        return classify_remote(parse_address(address), raw, user=user)
    except (OSError, ProtocolError) as exc:
        typer.echo(f"spamfilter: server {address}: {exc}; filtering in-process", err=True)
        return None


def _ask_own_daemon(ctx: typer.Context, raw: bytes) -> RemoteVerdict | None:
    """The verdict of a daemon on the per-user socket (``serve
    --user-socket``) that scores with the model this command would use (the
    same database and user, by the ``Model`` its reply names); None, without
    a word, when there is no such daemon."""
    path = default_socket_path()
    try:
        if path is None or not path.is_socket():
            return None
    except OSError:
        # A runtime folder this user may not search ($XDG_RUNTIME_DIR
        # another user's, after `su` without `-`): no daemon of its own.
        return None
    s = state(ctx)
    owner = s.user if s.user is not None else s.config.store.user
    try:
        remote = classify_remote(Address(path=str(path)), raw, user=s.user, timeout=OWN_DAEMON_TIMEOUT)
    except (OSError, ProtocolError):
        return None
    return remote if remote.model == model_id(database_url(s.db_url, s.config), owner, scoring_settings(s.config)) else None
