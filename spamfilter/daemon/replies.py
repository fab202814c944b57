"""What the daemon answers to one complete request: a reply's pieces, and
what its log line says. No sockets here: the event loop sends the pieces.

Scoring requests (CHECK, SYMBOLS, REPORT, REPORT_IFSPAM, PROCESS, HEADERS)
are answered from the scoring pool's filters, TELL from the writing pool's
(``spamfilter.daemon.pool``). Messages over the size limit never get here:
``unscanned`` answers them from what the connection kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from spamfilter import spamd
from spamfilter.answers import Refusal, Verdict
from spamfilter.config import scoring_settings
from spamfilter.daemon.pool import FilterPool
from spamfilter.errors import AddressInUse, MailParseError, NotTrainedError, SpamfilterError, StoreBusyError, StoreError, StoreUnreachable
from spamfilter.filter import Filter
from spamfilter.mail import MailItem, filter_fields, filtered_pieces
from spamfilter.mail.sources import delivered
from spamfilter.tools.insight import Explanation, Insight
from spamfilter.verdicts import Decision

Pieces = list[bytes | memoryview]


@dataclass(slots=True)
class Answer:
    """A reply and what the request's log line says about it.

    pieces: the reply, written one after the other.
    outcome: the verdict, what TELL did, or ``error=CODE``.
    owner: whose model answered ("" the default one).
    why: why the message was not scanned or learned (a warning), or "".
    """

    pieces: Pieces
    outcome: str
    log_odds: float | None = None
    owner: str = ""
    why: str = ""


def not_done(request: spamd.Request) -> str:
    """How a log line says a request's message was not used: a TELL's not
    learned, any other's not scanned."""
    return "not learned" if request.command == "TELL" else "not scanned"


def error(code: int, text: str, owner: str = "", why: str = "") -> Answer:
    """An error reply: the status line with ``text``, nothing after it."""
    return Answer([spamd.reply_head(code, text=text)], f"error={code}", None, owner, why)


def from_pool(request: spamd.Request, raw: bytes, pool: FilterPool) -> Answer:
    """The answer of the model ``pool`` gives ``request`` to the message
    ``raw``. Opening that model can fail too (a busy or damaged database):
    that is an answer with its error code, not an internal error."""
    if request.unusable_user is not None and pool.per_user:
        # A one-model server scores whatever User is named; this one would
        # have to choose a model by it.
        return error(spamd.EX_PROTOCOL, "User is not a user name", repr(request.unusable_user), why=f"not scanned: User {request.unusable_user!r} is not a user name")
    if request.own_model and (request.unusable_user is not None or (request.user is not None and pool.owner(request.user) != request.user)):
        # `spamfilter --user alice mark --connect`: learned in the model
        # every user shares, alice's own would never have changed.
        why = f"{not_done(request)}: User {request.user} asked for their own model (User-model: own) and this server has one model for every user"
        return error(spamd.EX_UNAVAILABLE, "one model for every user here, not the User's own (spamfilter serve --per-user)", pool.owner(None), why)
    try:
        # Only learning makes a database that does not exist: scoring on a
        # mistyped --db would make an empty one and answer from it.
        with pool.lease(request.user, create=request.command == "TELL") as (owner, f):
            item = delivered("-", raw)
            if request.command == "TELL":
                return _tell(request, item, f, owner)
            return _scored(request, raw, item, f, owner)
    except SpamfilterError as exc:
        owner = pool.owner(request.user)
        return error(error_code(exc), str(exc), owner, f"{not_done(request)}: {pool.unscored(owner, exc)}")


def _scored(request: spamd.Request, raw: bytes, item: MailItem, f: Filter, owner: str) -> Answer:
    body = b""
    if request.command in ("REPORT", "REPORT_IFSPAM"):
        e = Insight(f).explain(item)
        verdict = Verdict(item.source, e.digest, e.score, e.log_odds, e.verdict)
        if request.command == "REPORT" or e.verdict is Decision.SPAM:
            body = _report(e, f)
    else:
        result = next(iter(f.classify([item])))
        if isinstance(result, Refusal):
            raise MailParseError(result.reason)
        verdict = result
    headers = spamd.verdict_headers(
        verdict.verdict,
        verdict.score,
        verdict.log_odds,
        f.thresholds.spam_min,
        spamd.model_id(f.store.url, f.store.owner, scoring_settings(f.config)),
        f.config.model.event_model,
    )
    old_client = spamd.before_1_3(request.version)
    if old_client:
        headers = headers[:1]  # the Spam line alone, as spamd answers SPAMC/1.2
    if request.command == "CHECK":
        return Answer([spamd.reply_head(spamd.EX_OK, headers)], verdict.verdict, verdict.log_odds, owner)
    pieces: Pieces
    if request.command in ("PROCESS", "HEADERS"):
        fields = filter_fields(verdict.verdict, verdict.score, verdict.log_odds, f.config.model.event_model)
        pieces = filtered_pieces(raw, fields)
        if request.command == "HEADERS":
            pieces = _header_part(pieces, raw)
    elif request.command == "SYMBOLS":
        pieces = [f"SPAMFILTER_{verdict.verdict.upper()}".encode("ascii") + (b"\r\n" if old_client else b"")]
    elif request.command in ("REPORT", "REPORT_IFSPAM"):
        pieces = [body]
    else:
        raise AssertionError(request.command)
    length = sum(len(p) for p in pieces)
    # Before 1.3 the body runs to the end of the connection, which closes
    # after a reply, and has one header: the Spam line, but for the
    # message itself, which has its Content-length from 1.2 on and nothing
    # before (as spamd answers them).
    if not old_client:
        head = spamd.reply_head(spamd.EX_OK, [("Content-length", str(length)), *headers])
    elif request.command not in ("PROCESS", "HEADERS"):
        head = spamd.reply_head(spamd.EX_OK, headers)
    else:
        head = message_head(request.version, length)
    return Answer([head, *pieces], verdict.verdict, verdict.log_odds, owner)


def _tell(request: spamd.Request, item: MailItem, f: Filter, owner: str) -> Answer:
    headers: list[tuple[str, str]] = []
    done: list[str] = []
    if request.set_local:
        summary = f.mark([(request.message_class == "spam", item)])
        if summary.refused:
            raise MailParseError(summary.refused[0].reason)
        if summary.trained_spam + summary.trained_ham + summary.relabelled:
            headers.append(("DidSet", "local"))
            done.append(f"learned={request.message_class}")
    if request.remove_local:
        forgot = f.forget([item])
        if forgot.refused:
            # Binary junk is refused as a learned one is, not "unchanged".
            raise MailParseError(forgot.refused[0].reason)
        if forgot.forgotten:
            headers.append(("DidRemove", "local"))
            done.append("forgotten")
    return Answer([spamd.reply_head(spamd.EX_OK, headers)], " ".join(done) or "unchanged", None, owner)


def unscanned(request: spamd.Request, size: int, limit: int, prefix: bytes) -> Answer:
    """The answer to a message over ``limit`` bytes, of which ``prefix`` (its
    first bytes) was kept: HEADERS gets its header block, the others (PROCESS
    aside, which the connection gives back from its spool) ``EX_TOOBIG``."""
    start = spamd.body_start(prefix) if request.command == "HEADERS" else None
    if start is None:
        return error(spamd.EX_TOOBIG, f"message over {limit} bytes, not scanned")
    return Answer([message_head(request.version, start), prefix[:start]], "unscanned")


def message_head(version: str, length: int) -> bytes:
    """The head of a reply that is a message (PROCESS, HEADERS) of
    ``length`` bytes, as spamd sends it to a client of protocol
    ``version``: its Content-length from 1.2 on, the status line alone
    before."""
    if spamd.before(version, 1, 2):
        return spamd.reply_head(spamd.EX_OK)[:-2]
    return spamd.reply_head(spamd.EX_OK, [("Content-length", str(length))])


def error_code(exc: SpamfilterError) -> int:
    """The reply code of a failure: EX_TEMPFAIL for what the command line
    also calls temporary (a busy database, a database server that does not
    answer), so that a client that passes the code on (`spamc -x`) has its
    mail system try again."""
    if isinstance(exc, MailParseError):
        return spamd.EX_DATAERR
    if isinstance(exc, NotTrainedError):
        return spamd.EX_UNAVAILABLE
    if isinstance(exc, (StoreBusyError, StoreUnreachable, AddressInUse)):
        return spamd.EX_TEMPFAIL
    if isinstance(exc, StoreError):
        return spamd.EX_IOERR
    return spamd.EX_SOFTWARE


def _header_part(pieces: Sequence[bytes | memoryview], raw: bytes) -> Pieces:
    """The filtered message up to where spamc will append the body of
    ``raw`` (HEADERS): ``pieces`` minus that body. Without a body (no
    empty line) the whole message. Where filtering removed a field from the
    body (a CRLF message; `filtered_pieces`), only the filtered header block
    goes back: spamc appends the body it has, so sending the filtered one
    too would give the body twice."""
    start = spamd.body_start(raw)
    if start is None:
        return list(pieces)
    whole = b"".join(pieces)
    body = memoryview(raw)[start:]
    if whole[len(whole) - len(body) :] != body:
        own = spamd.body_start(whole)
        return [whole if own is None else memoryview(whole)[:own]]
    return [memoryview(whole)[: len(whole) - len(body)]]


def _report(e: Explanation, f: Filter, n: int = 10) -> bytes:
    """The REPORT text: the verdict, the bounds and the strongest clues."""
    t = f.thresholds
    lines = [
        f"spamfilter verdict: {e.verdict}",
        f"P(spam) = {e.score:.6f} (spam above {1 / (1 + math.exp(-t.spam_min)):.4f}, ham at or below {1 / (1 + math.exp(-t.ham_max)):.4f}), log-odds = {e.log_odds:+.4f}",
        f"prior log-odds {e.prior:+.4f}; {e.tempering()}",
        "",
        " contribution  token",
    ]
    for c in e.tokens[:n]:
        token = "(absent tokens)" if c.token is None else c.token
        lines.append(f"{c.contribution:+13.4f}  {token}")
    return ("\n".join(lines) + "\n").encode("utf-8", "replace")
