"""`parse_message`: raw bytes to a stdlib message, refusing what is not mail."""

from __future__ import annotations

import email
import email.errors
import email.message
import email.parser
import email.policy
import re
from typing import Final

from spamfilter.errors import MailParseError
from spamfilter.mail.sources import MailItem

# The first line of a header block: a field name (printable ASCII but the
# colon, RFC 5322 section 3.6.8) then a colon, optionally after an mbox
# envelope line. Only used to tell mail without headers (Enron, Ling-Spam) from
# binary junk, so it need not accept every header the parser would.
_HEADER_START_RE: Final = re.compile(rb"(?:From [^\n]*\n)?[!-9;-~]+[ \t]*:")

# Bytes that do not occur in text mail in any number: C0 controls but tab,
# LF and CR, plus DEL. ESC is included although ISO-2022-JP text uses it: such
# mail has headers, and its ESC sequences are a few percent of its bytes.
_CONTROL_BYTES: Final = bytes(range(0x00, 0x09)) + b"\x0b\x0c" + bytes(range(0x0E, 0x20)) + b"\x7f"

# How much of a headerless message is looked at, and what share of control
# bytes in it makes it binary junk rather than text. Text mail, whatever its
# charset, has next to none (UTF-16 would have ~50% NULs and is not mail);
# 30% leaves a wide margin on both sides.
_SNIFF_BYTES: Final = 4096
_MAX_CONTROL_SHARE: Final = 0.30
# Compressed or encrypted data (a mailbox.gz in a mail folder, an image)
# has about 10% control bytes and half its bytes at 0x80 or above; text in
# an 8-bit charset (KOI8-R, Latin-1) may be mostly such bytes, but has no
# control bytes. Both shares above these marks: binary.
_BINARY_CONTROL_SHARE: Final = 0.03
_BINARY_HIGH_SHARE: Final = 0.25
_HIGH_BYTES: Final = bytes(range(0x80, 0x100))
# A bzip2 file starts with printable bytes ("BZh9" and the block magic
# "1AY&SY", or an empty stream's end marker), so one whose next byte is a
# colon, 1 in 256, looked like a header block.
_BZIP2_START_RE: Final = re.compile(rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)")

# The stdlib feedparser tests every line against the boundary of every
# multipart still open around it, so parsing costs lines x nesting depth:
# 600 nested multiparts then 170 KB of empty lines took 9.3 s, 200 nested
# 3.5 s (about 80 ns per test). Counting "multipart/" (every nesting level
# needs one) times line ends bounds that cost before parsing. Over the
# spamassassin, csdmc2010, nazario-phishing and spamassassin-testdata corpora
# (11,814 messages, first 200 KB each) the largest product is 7,341 (3
# multiparts, 2,447 lines); a mailing-list digest of 100 multipart messages
# in 200 KB of 60-character lines would give about 330,000. Above the cap
# the body is left unparsed, as for nesting too deep for the stack: at most
# about 0.1 s of boundary tests per message.
_MAX_BOUNDARY_TESTS: Final = 1_000_000

# A Content-Type field (any part's), folded lines included. The stdlib
# parser reads the boundary of every multipart with a parameter splitter
# that recounts quotes from the start at every ";": a 190 KB field of ";"
# after a quote took 38 s, 40 KB 1.8 s. Real fields are a few hundred
# characters; one longer than `_MAX_CONTENT_TYPE` leaves the body unparsed
# (the tokenizer does not parse such a field's parameters either).
_CONTENT_TYPE_FIELD_RE: Final = re.compile(rb"content-type[ \t]*:[^\r\n]*(?:(?:\r\n|\r|\n)[ \t][^\r\n]*)*")
_MAX_CONTENT_TYPE: Final = 8192


class NestingTooDeepDefect(email.errors.MessageDefect):
    """The MIME parts nest deeper than the parser can follow (or are so
    many, in so many lines, that following them would take seconds).

    `parse_message` then keeps the headers and leaves the whole body as one
    text payload, so the message can still be classified.
    """


def _refuse_non_mail(item: MailItem) -> None:
    """Raise ``MailParseError`` for an empty message, or one without a
    header block whose first 4 KiB are more than 30% control bytes, or
    more than 3% control bytes and 25% bytes above 0x7F (binary junk:
    compressed data, images)."""
    if item.unreadable_reason is not None:
        raise MailParseError(item.unreadable_reason)
    raw = item.raw
    # isspace() stops at the first non-space byte, unlike strip(), which would
    # copy a whole multi-megabyte message just to test it.
    if not raw or raw.isspace():
        raise MailParseError(f"{item.source}: empty message")
    head = raw[:_SNIFF_BYTES]
    if _BZIP2_START_RE.match(head):
        raise MailParseError(f"{item.source}: not a mail message (bzip2-compressed data; compressed mail must be decompressed first)")
    if _HEADER_START_RE.match(head) is None:
        n_control = len(head) - len(head.translate(None, _CONTROL_BYTES))
        if n_control > _MAX_CONTROL_SHARE * len(head):
            raise MailParseError(f"{item.source}: not a mail message (no header block, {n_control} of the first {len(head)} bytes are control bytes)")
        n_high = len(head) - len(head.translate(None, _HIGH_BYTES))
        # Headers after a byte order mark or blank lines are headers too:
        # such mail may carry a raw 8-bit part early on.
        late_header = _HEADER_START_RE.match(head.lstrip(b"\xef\xbb\xbf \t\r\n")) is not None
        if not late_header and n_control > _BINARY_CONTROL_SHARE * len(head) and n_high > _BINARY_HIGH_SHARE * len(head):
            raise MailParseError(
                f"{item.source}: not a mail message (no header block, and its first {len(head)} bytes look binary: "
                f"{n_control} control bytes, {n_high} bytes above 0x7F; compressed mail must be decompressed first)"
            )


def not_mail(item: MailItem) -> str | None:
    """Why ``parse_message`` would refuse ``item`` before parsing it (empty,
    unreadable, or binary junk without a header block), or None."""
    try:
        _refuse_non_mail(item)
    except MailParseError as exc:
        return str(exc)
    return None


def parse_message(item: MailItem, *, max_bytes: int) -> email.message.Message:
    """Parse one message with the stdlib parser, refusing what is not mail.

    The compat32 policy is used because it is the fastest and never raises on
    malformed headers; problems are recorded in ``msg.defects`` instead.
    Mail without any header (Enron-Spam, Ling-Spam: a ``Subject:`` line and
    a body) parses as a message whose body starts where the headers stop.

    Parameters
    ----------
    item : MailItem
        The message to parse.
    max_bytes : int
        Only the first `max_bytes` bytes are parsed: the cap on work per
        message, so a message with a huge attachment costs no more than a
        large one. Must be positive.

    Returns
    -------
    email.message.Message
        When the MIME parts nest too deeply for the parser, or so many
        multiparts meet so many lines that parsing would take seconds, the
        headers with the unparsed body as a text payload and a
        `NestingTooDeepDefect` in ``defects``.

    Raises
    ------
    MailParseError
        The message is empty or whitespace only, or has no header block and
        its first 4 KiB look binary (``_refuse_non_mail``).
    ValueError
        `max_bytes` is not positive.

    Examples
    --------
    >>> msg = parse_message(MailItem("-", b"Subject: hi\\n\\nbody\\n"), max_bytes=1024)
    >>> msg["Subject"]
    'hi'
    """
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    _refuse_non_mail(item)
    data = item.raw[:max_bytes]
    costly = _too_costly_to_parse(data)
    if costly is not None:
        return _headers_only(data, costly)
    try:
        return email.message_from_bytes(data, policy=email.policy.compat32)
    except (TypeError, ValueError, LookupError) as exc:
        # Malformed RFC 2231 parameters (e.g. "boundary*0*=utf-8''b;
        # boundary*;1=c") make the parser's boundary lookup raise instead of
        # recording a defect. Keep the headers; the body is left unparsed.
        return _headers_only(data, email.errors.MessageDefect(f"body left unparsed: {type(exc).__name__}"))
    except RecursionError:
        # The feedparser recurses once per nested multipart; about 1,000
        # levels (55 KB of crafted headers) exhaust Python's stack. Such a
        # message is hostile mail, not junk, so keep what can be read of it
        # rather than refusing it.
        return _headers_only(data, NestingTooDeepDefect("MIME parts nest too deeply; body left unparsed"))


def _too_costly_to_parse(data: bytes) -> email.errors.MessageDefect | None:
    """Why parsing the body of ``data`` would take seconds, or None: so many
    multiparts in so many lines (`_MAX_BOUNDARY_TESTS`), or a Content-Type
    field too long for the parser's parameter splitter (`_MAX_CONTENT_TYPE`)."""
    n_lines = data.count(b"\n") + data.count(b"\r") + 1
    lower = data.lower()
    if lower.count(b"multipart/") * n_lines > _MAX_BOUNDARY_TESTS:
        return NestingTooDeepDefect("too many MIME parts for the message's length; body left unparsed")
    # Found with find (a fast search), then measured where one starts a line.
    at = lower.find(b"content-type")
    while at >= 0:
        if at == 0 or lower[at - 1] in b"\r\n":
            field = _CONTENT_TYPE_FIELD_RE.match(lower, at)
            if field is not None and field.end() - at > _MAX_CONTENT_TYPE:
                return email.errors.MessageDefect("a Content-Type field too long to parse; body left unparsed")
        at = lower.find(b"content-type", at + 1)
    return None


def _headers_only(data: bytes, defect: email.errors.MessageDefect) -> email.message.Message:
    """The message's headers with the whole body as one text payload, and ``defect``."""
    parser = email.parser.BytesParser(policy=email.policy.compat32)
    msg = parser.parsebytes(data, headersonly=True)
    msg.defects.append(defect)
    return msg
