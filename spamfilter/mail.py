"""Read mail from files, folders, mailboxes and TREC indexes; parse and identify it.

Everything here works on raw bytes until `parse_message` hands a stdlib
`email.message.Message` to the tokenizer. The readers only find and split
messages; they never decode or judge them, so a broken message still reaches
`parse_message`, which is the one place that says "this is not mail".

Sources understood by `read_messages`:

- ``-``: standard input, read as a regular file is (below): an mbox when it
  starts with ``From `` (sources ``-:1``, ``-:2``, ...), otherwise one message.
- a Maildir folder (``cur`` and ``new`` subfolders): ``cur`` then ``new``,
  each sorted by file name.
- an MH folder (``.mh_sequences``, or only numeric file names): numeric order.
- any other folder: walked recursively in sorted order; every regular file is
  read as below, and a Maildir or MH folder met on the way is read as such.
- a regular file: an mbox when it starts with ``From `` (split into
  messages, sources ``path:1``, ``path:2``, ...; an mbox holding a single
  message gives it the source ``path``), otherwise one message.

Hidden files and folders (names starting with ``.``) are skipped everywhere.

Examples
--------
>>> for item in read_messages(["inbox.mbox"]):  # doctest: +SKIP
...     msg = parse_message(item, max_bytes=1 << 20)
"""

from __future__ import annotations

import email
import email.errors
import email.message
import email.parser
import email.policy
import hashlib
import io
import itertools
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, Final, Literal

from spamfilter.counts import Decision
from spamfilter.errors import MailParseError, MailSourceError
from spamfilter.headers import FILTER_HEADERS

__all__ = [
    "FILTER_HEADERS",
    "STDIN_SOURCE",
    "MailItem",
    "NestingTooDeepDefect",
    "digest_bytes",
    "filter_fields",
    "parse_message",
    "read_index",
    "read_messages",
]

#: The path that means "one message on standard input", and that message's source.
STDIN_SOURCE: Final = "-"

_ENVELOPE_PREFIX: Final = b"From "

# An mbox envelope line in the usual asctime form, e.g.
# "From MAILER-DAEMON Fri Jul  8 12:08:34 2011". A "From " line that is not
# preceded by a blank line only starts a new message when it looks like this:
# careless writers (and mboxes glued together by hand) leave body lines such
# as "From now on, ..." unquoted, and splitting on those would cut real
# messages in two, while an envelope line is rarely typed into a body.
_ENVELOPE_RE: Final = re.compile(
    rb"From \S+ +(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) +"
    rb"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} +\d{1,2}:\d\d"
)

_BLANK_LINES: Final = (b"\n", b"\r\n")

# UW-IMAP (c-client, Pine) keeps folder state in a pseudo-message at the top of
# an mbox: "Subject: DON'T DELETE THIS MESSAGE -- FOLDER INTERNAL DATA" with an
# X-IMAP header. It is not mail and would be learnt as ham; the Nazario
# phishing corpus dropped it when splitting its mboxes (phishing1.mbox starts
# with one), so read_messages drops it too.
_UW_IMAP_RE: Final = re.compile(rb"^X-IMAP(?:base)?:", re.MULTILINE)
_UW_IMAP_SUBJECT_RE: Final = re.compile(rb"^Subject:[^\n]*FOLDER INTERNAL DATA", re.MULTILINE)

_FILTER_NAMES: Final = b"|".join(re.escape(name.encode("ascii")) for name in FILTER_HEADERS)

# One header field whose name is in FILTER_HEADERS, matched at a line start:
# the field's line, its folded continuation lines and the line break after
# them (group 1). CR, LF and CRLF all end a line here, as they do for
# Python's email parser: "Subject: hi\rX-Spam-Flag: NO" holds two fields
# for it, one for procmail, which only splits at LF.
_FILTER_FIELD_RE: Final = re.compile(
    rb"(?:" + _FILTER_NAMES + rb")[ \t]*:[^\r\n]*(?:(?:\r\n|\r|\n)[ \t][^\r\n]*)*(\r\n|\r|\n|\Z)",
    re.IGNORECASE,
)
# Where such a field may start: at the very beginning, or after a CR or LF.
_FILTER_FIELD_START_RE: Final = re.compile(
    rb"(?:(?<=[\r\n])|(?<![\x00-\xff]))(?:" + _FILTER_NAMES + rb")[ \t]*:", re.IGNORECASE
)
# An empty line when CR, LF and CRLF each end a line (group 1 ends the line
# before it).
_EMPTY_LINE_RE: Final = re.compile(rb"(\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n)")
_LINE_BREAK_RE: Final = re.compile(rb"\r\n|\r|\n")

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

# digest_bytes and with_filter_headers work through a message's body in
# pieces of this size rather than on whole copies of the message.
_CHUNK: Final = 1 << 20

_DirKind = Literal["maildir", "mh", "plain"]


@dataclass(frozen=True, slots=True)
class MailItem:
    """One message as read from a source, not yet parsed.

    Attributes
    ----------
    source : str
        Where the message came from, for people: the file path; ``path:N`` for
        the N-th message (1-based) of an mbox file holding more than one
        (``-:N`` on standard input); ``-`` for one message on standard
        input; ``folder/cur/name`` for a Maildir message.
    raw : bytes
        The message bytes. For a message split out of an mbox the envelope
        (``From ``) line is removed and mboxrd quoting undone; otherwise the
        bytes are exactly those stored.
    known_digest : str or None
        ``digest_bytes(raw)`` when the reader has computed it already (the
        IMAP sync looks messages up by digest before it classifies them),
        so that no message is hashed twice.
    """

    source: str
    # Left out of repr: a message can be megabytes, and items end up in
    # assertion messages and tracebacks.
    raw: bytes = field(repr=False)
    known_digest: str | None = field(default=None, repr=False, compare=False)

    @property
    def digest(self) -> str:
        """The message's identity, ``digest_bytes(self.raw)``."""
        return self.known_digest if self.known_digest is not None else digest_bytes(self.raw)


class NestingTooDeepDefect(email.errors.MessageDefect):
    """The MIME parts nest deeper than the parser can follow (or are so
    many, in so many lines, that following them would take seconds).

    `parse_message` then keeps the headers and leaves the whole body as one
    text payload, so the message can still be classified.
    """


def read_messages(
    paths: Sequence[str], *, stdin: BinaryIO | None = None, on_empty: Callable[[str], None] | None = None
) -> Iterator[MailItem]:
    """Yield every message found in `paths`, one at a time, in a stable order.

    All paths are checked before anything is read, so a mistyped path fails
    at once instead of after minutes of work. Only one message is held in
    memory at a time, also when splitting a large mbox file.

    Parameters
    ----------
    paths : sequence of str
        Files, folders or ``-`` (see the module docstring for what each kind
        of path yields). ``-`` may be given at most once.
    stdin : binary stream, optional
        What ``-`` reads; ``sys.stdin.buffer`` if None. Like a file, it is an
        mbox when its first line is an envelope (``From ``) line, and split
        into messages ``-:1``, ``-:2``, ... (``-`` when it holds one);
        otherwise it is one message, its bytes kept as they are.
    on_empty : callable, optional
        Called with each path that turned out to hold no message (an empty
        folder or file), once its reading is over, so a caller can warn.

    Returns
    -------
    iterator of MailItem

    Raises
    ------
    MailSourceError
        At call time when a path does not exist, cannot be read or ``-``
        is repeated; while iterating when a file cannot be read.
    TypeError
        `paths` is a single string instead of a sequence of them.

    Examples
    --------
    >>> [item.source for item in read_messages(["box.mbox"])]  # doctest: +SKIP
    ['box.mbox:1', 'box.mbox:2']
    """
    # A lone str is a Sequence[str] too, and would be read letter by letter.
    if isinstance(paths, str):
        raise TypeError("read_messages takes a sequence of paths, not one path string")
    if list(paths).count(STDIN_SOURCE) > 1:
        raise MailSourceError("standard input ('-') can be read only once; give it once")
    for path in paths:
        if path != STDIN_SOURCE:
            _check_readable(path)
    return _iter_sources(list(paths), stdin, on_empty)


def read_index(index_path: str) -> Iterator[tuple[bool, MailItem]]:
    """Yield ``(is_spam, item)`` for each line of a TREC spam-track index.

    Each non-empty line is ``spam <path>`` or ``ham <path>`` (label in any
    case), the path relative to the index file's folder. The path is the rest
    of the line after the first run of whitespace, so it may contain spaces;
    trailing whitespace is dropped, as it is far more often an editing slip
    than part of a file name.

    The whole index is checked (syntax, and that every message file exists)
    before the first message is read, so a broken index fails before an
    hour-long evaluation instead of during it.

    An index line names one message, so a message file is never split: a
    file that starts with an mbox envelope line (as mail saved from an mbox
    does) has that line removed and mboxrd quoting undone, giving the same
    bytes as `read_messages` gives for ``path:1``. The item's source is the
    path as written, joined to the index's folder.

    Parameters
    ----------
    index_path : str
        The index file.

    Returns
    -------
    iterator of (bool, MailItem)
        In index order; the bool is True for spam.

    Raises
    ------
    MailSourceError
        At call time when the index cannot be read, a line is malformed
        (the message names file and line number) or a message file is
        missing; while iterating when a message file cannot be read.

    Examples
    --------
    >>> for is_spam, item in read_index("corpora/spamassassin/index"):  # doctest: +SKIP
    ...     print(is_spam, item.source)
    True corpora/spamassassin/spam_2/00159.6b641c70d79fd5a69b84a94b4e88150a
    """
    entries = _load_index(index_path)
    return _iter_index(entries)


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
        its first 4 KiB are more than 30% control bytes (binary junk).
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
    raw = item.raw
    # isspace() stops at the first non-space byte, unlike strip(), which would
    # copy a whole multi-megabyte message just to test it.
    if not raw or raw.isspace():
        raise MailParseError(f"{item.source}: empty message")
    head = raw[:_SNIFF_BYTES]
    if _HEADER_START_RE.match(head) is None:
        n_control = len(head) - len(head.translate(None, _CONTROL_BYTES))
        if n_control > _MAX_CONTROL_SHARE * len(head):
            raise MailParseError(
                f"{item.source}: not a mail message (no header block, "
                f"{n_control} of the first {len(head)} bytes are control bytes)"
            )
    data = raw[:max_bytes]
    n_lines = data.count(b"\n") + data.count(b"\r") + 1
    if data.lower().count(b"multipart/") * n_lines > _MAX_BOUNDARY_TESTS:
        return _headers_only(data, NestingTooDeepDefect("too many MIME parts for the message's length; body left unparsed"))
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


def _headers_only(data: bytes, defect: email.errors.MessageDefect) -> email.message.Message:
    """The message's headers with the whole body as one text payload, and ``defect``."""
    parser = email.parser.BytesParser(policy=email.policy.compat32)
    msg = parser.parsebytes(data, headersonly=True)
    msg.defects.append(defect)
    return msg


def digest_bytes(raw: bytes) -> str:
    """A message's identity: the same for every way it may have been stored.

    Normalisation before hashing:

    1. CRLF line ends become LF;
    2. a leading mbox envelope (``From ``) line is dropped;
    3. the fields in `FILTER_HEADERS` (any case, with their folded
       continuation lines) are dropped from the header block, which ends at
       the first empty line;
    4. trailing whitespace at the end of the message is dropped (mbox
       separators and editors add or remove final newlines).

    Parameters
    ----------
    raw : bytes
        The message bytes.

    Returns
    -------
    str
        The first 32 hex digits (128 bits) of the SHA-256 of the normalised
        bytes: plenty against accidental collisions in any mail archive,
        and half the space of the full digest in the trained-message ledger.

    Examples
    --------
    >>> digest_bytes(b"Subject: a\\r\\n\\r\\nb\\r\\n") == digest_bytes(b"Subject: a\\n\\nb")
    True
    """
    # Pure bytes operations: the email parser would cost more than the hash,
    # and would normalise things (header folding) we want to leave alone.
    # The steps are done on the fly rather than on copies: normalising a
    # 50 MB message with replace, slices and rstrip held three copies of it
    # (157 MB); now 1 MiB at a time. The fields dropped are those that
    # `filtered_pieces` drops and adds, so filtering keeps the digest.
    layout = _filter_layout(raw)
    digest = _RstrippedHash()
    view = memoryview(raw)
    kept, pos = [], layout.start
    for s, e in layout.dropped:
        kept.append(view[pos:s])
        pos = e
    kept.append(view[pos:])
    for piece in _crlf_to_lf(kept):
        digest.update(piece)
    return digest.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class _FilterLayout:
    """Where `filtered_pieces` changes a message (positions in its bytes).

    start: past a leading mbox envelope line.
    insert: where the filter's own fields go: the top of the header block,
        past any continuation lines that open it (they would otherwise fold
        into the last added field).
    dropped: (begin, end) of each run of `FILTER_HEADERS` fields to remove.
    eol: the line ending the added fields take.
    """

    start: int
    insert: int
    dropped: tuple[tuple[int, int], ...]
    eol: bytes


def _filter_layout(raw: bytes) -> _FilterLayout:
    """Find the envelope line, the insertion point, the fields a sender may
    have forged and the header block's line ending, without copying ``raw``.

    Parsers disagree on where a header block ends: Python's email parser ends
    it at the first empty line counting CR, LF and CRLF as line ends
    (``any_end``), procmail, formail and Dovecot at the first one counting LF
    and CRLF only (``lf_end``, never earlier). A field of ours is dropped
    wherever one of them would read it: before ``any_end`` at any line start;
    between the two only where an LF-only parser sees a line start (after an
    LF, or right after a field dropped just before).
    """
    start = 0
    if raw.startswith(_ENVELOPE_PREFIX):
        # The envelope line ends at its first line break, a bare CR too:
        # Python's parser ends it there, and reads what follows as fields.
        brk = _LINE_BREAK_RE.search(raw)
        start = len(raw) if brk is None else brk.end()
    lf_end = _header_end(raw, start)
    if raw[start : start + 1] in (b"\r", b"\n"):
        any_end = start
    else:
        empty = _EMPTY_LINE_RE.search(raw, start)
        any_end = lf_end if empty is None else min(empty.end(1), lf_end)
    insert = start
    while raw[insert : insert + 1] in (b" ", b"\t"):
        brk = _LINE_BREAK_RE.search(raw, insert)
        insert = len(raw) if brk is None else brk.end()
    dropped: list[tuple[int, int]] = []
    field_end = -1  # where the last field dropped ended, line break included
    for m in _FILTER_FIELD_START_RE.finditer(raw, start, lf_end):
        at = m.start()
        follows_drop = at == field_end
        if not (at < any_end or (at > 0 and raw[at - 1] == 0x0A) or follows_drop):
            continue
        field = _FILTER_FIELD_RE.match(raw, at, lf_end)
        assert field is not None  # the start pattern is a prefix of this one
        begin, field_end = at, field.end()
        if dropped and dropped[-1][1] == at:
            begin = dropped.pop()[0]
        end = field_end
        # "a\rX-Spam-Flag: NO\nTo: b" without the field and its LF would put
        # "To: b" on the line of "a" for a parser that splits at LF only, and
        # before a blank line CR and LF would glue into one CRLF: drop the
        # CR before the field instead, and keep the field's line break.
        if begin > insert and raw[begin - 1] == 0x0D and b"\n" in field.group(1):
            dropped.append((begin - 1, end - len(field.group(1))))
        else:
            dropped.append((begin, end))
    return _FilterLayout(start, insert, tuple(dropped), _header_eol(raw, start, any_end))


def _header_end(raw: bytes, start: int) -> int:
    """Where the header block that begins at ``start`` ends for a parser that
    ends lines at LF or CRLF: just past the line break of its last line, at
    the empty line, or len(raw) when no empty line follows it."""
    if raw.startswith(b"\n", start) or raw.startswith(b"\r\n", start):
        return start
    end = raw.find(b"\n\n", start)
    end_crlf = raw.find(b"\n\r\n", start, len(raw) if end < 0 else end + 2)
    if end_crlf >= 0:
        end = end_crlf
    return len(raw) if end < 0 else end + 1


def _header_eol(raw: bytes, start: int, any_end: int) -> bytes:
    """The line ending of a header block: that of its first line holding an
    LF (CRLF or LF), else CR if its lines end in CR, else that of the empty
    line after it or of the envelope line, else LF."""
    stop = any_end + 2
    nl = raw.find(b"\n", start, stop)
    if nl >= 0:
        return b"\r\n" if nl > start and raw[nl - 1] == 0x0D else b"\n"
    if raw.find(b"\r", start, stop) >= 0:
        return b"\r"
    return b"\r\n" if raw[:start].endswith(b"\r\n") else b"\n"


def _crlf_to_lf(segments: Iterable[memoryview]) -> Iterator[bytes]:
    """The bytes of ``segments`` joined, CRLF made LF, in pieces of about
    `_CHUNK` bytes; a CRLF split between pieces or segments is still one."""
    carry = b""
    for segment in segments:
        for i in range(0, len(segment), _CHUNK):
            piece = carry + segment[i : i + _CHUNK].tobytes()
            carry = b""
            if piece.endswith(b"\r"):
                piece, carry = piece[:-1], b"\r"
            yield piece.replace(b"\r\n", b"\n")
    yield carry


class _RstrippedHash:
    """SHA-256 of all the bytes given to `update`, less the white space at
    their very end (as ``bytes.rstrip`` drops it), in bounded memory.

    White space is hashed into a copy of the hash, which becomes the hash
    only once more text follows it.
    """

    def __init__(self) -> None:
        self._kept = hashlib.sha256()
        self._with_space: hashlib._Hash | None = None

    def update(self, data: bytes | memoryview) -> None:
        for i in range(0, len(data), _CHUNK):
            piece = bytes(data[i : i + _CHUNK])
            text = piece.rstrip()
            if text:
                if self._with_space is not None:
                    self._kept, self._with_space = self._with_space, None
                self._kept.update(text)
            if len(text) < len(piece):
                if self._with_space is None:
                    self._with_space = self._kept.copy()
                self._with_space.update(piece[len(text) :])

    def hexdigest(self) -> str:
        return self._kept.hexdigest()


# --- sources ---------------------------------------------------------------


def _check_readable(path: str) -> None:
    """Raise MailSourceError unless `path` exists and can be read."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise MailSourceError(f"mail source {path!r} cannot be read: {err.strerror}") from err
    # A folder must also be searchable (x) to list and open what is in it.
    needed = os.R_OK | os.X_OK if stat.S_ISDIR(mode) else os.R_OK
    if not os.access(path, needed):
        raise MailSourceError(f"mail source {path!r} cannot be read: permission denied")


def _iter_sources(paths: list[str], stdin: BinaryIO | None, on_empty: Callable[[str], None] | None) -> Iterator[MailItem]:
    for path in paths:
        found = False
        for item in _iter_source(path, stdin):
            found = True
            yield item
        if not found and on_empty is not None:
            on_empty(path)


def _iter_source(path: str, stdin: BinaryIO | None) -> Iterator[MailItem]:
    if path == STDIN_SOURCE:
        # Looked up here, not as a default argument, so tests and callers
        # that replace sys.stdin are honoured.
        stream = sys.stdin.buffer if stdin is None else stdin
        try:
            # A pipe cannot be rewound, so the first line is read and
            # put back in front (sa-learn --mbox and bogofilter -M split
            # stdin; here the envelope line alone says so).
            first = stream.readline()
            if first.startswith(_ENVELOPE_PREFIX):
                yield from _mbox_messages(itertools.chain([first], stream), STDIN_SOURCE, split=True)
            else:
                yield MailItem(STDIN_SOURCE, first + stream.read())
        except OSError as err:
            raise MailSourceError(f"cannot read standard input: {err}") from err
    elif os.path.isdir(path):
        yield from _read_dir(path)
    else:
        yield from _read_file(path)


def _read_dir(path: str) -> Iterator[MailItem]:
    kind = _dir_kind(path)
    if kind == "maildir":
        yield from _read_maildir(path)
    elif kind == "mh":
        yield from _read_mh(path)
    else:
        yield from _walk(path)


def _list_dir(path: str) -> list[os.DirEntry[str]]:
    """The non-hidden entries of a folder, sorted by name."""
    try:
        with os.scandir(path) as entries:
            return sorted((e for e in entries if not e.name.startswith(".")), key=lambda e: e.name)
    except OSError as err:
        raise MailSourceError(f"cannot list mail folder {path!r}: {err.strerror}") from err


def _dir_kind(path: str) -> _DirKind:
    """Tell a Maildir or MH folder from an ordinary one by its layout."""
    if os.path.isdir(os.path.join(path, "cur")) and os.path.isdir(os.path.join(path, "new")):
        return "maildir"
    if os.path.isfile(os.path.join(path, ".mh_sequences")):
        return "mh"
    entries = _list_dir(path)
    # An MH folder need not have .mh_sequences (nmh writes it only once a
    # sequence exists); a folder holding only files named 1, 2, 3... reads the
    # same as MH or not, except that numeric order is the better one.
    if entries and all(_is_mh_number(e.name) and e.is_file() for e in entries):
        return "mh"
    return "plain"


def _read_maildir(path: str) -> Iterator[MailItem]:
    # tmp holds deliveries in progress, so it is never read. Each Maildir file
    # is one message by definition, so a file starting with "From " is not
    # split; its bytes stay as stored (the parser and digest_bytes both
    # ignore a leading envelope line).
    for sub in ("cur", "new"):
        for entry in _list_dir(os.path.join(path, sub)):
            if entry.is_file():
                yield MailItem(entry.path, _read_bytes(entry.path))


def _is_mh_number(name: str) -> bool:
    # isdigit() alone accepts "²" and other Unicode digits that int() refuses.
    return name.isascii() and name.isdigit()


def _read_mh(path: str) -> Iterator[MailItem]:
    # Non-numeric names in an MH folder are bookkeeping (.mh_sequences),
    # deleted messages (",12") or subfolders: none is a message here.
    numbered = [e for e in _list_dir(path) if _is_mh_number(e.name) and e.is_file()]
    for entry in sorted(numbered, key=lambda e: int(e.name)):
        yield MailItem(entry.path, _read_bytes(entry.path))


def _walk(path: str) -> Iterator[MailItem]:
    for entry in _list_dir(path):
        # Symlinked folders are not followed (as in os.walk): a link back up
        # the tree would otherwise read the same mail forever.
        if entry.is_dir(follow_symlinks=False):
            yield from _read_dir(entry.path)
        elif entry.is_file():
            yield from _read_file(entry.path)


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise MailSourceError(f"cannot read mail file {path!r}: {err.strerror}") from err


def _starts_with_envelope(f: io.BufferedReader) -> bool:
    """Whether a file just opened starts with an mbox envelope line.

    A regular file is sniffed below its buffer and rewound: after a peek,
    ``f.read()`` joined the buffered bytes to the rest, two copies of a 50 MB
    message at once. A pipe (e.g. ``<(zcat box.gz)``) cannot rewind, so it is
    peeked.
    """
    if f.seekable():
        head = f.raw.read(len(_ENVELOPE_PREFIX))
        f.raw.seek(0, io.SEEK_SET)
        return head == _ENVELOPE_PREFIX
    return f.peek(len(_ENVELOPE_PREFIX)).startswith(_ENVELOPE_PREFIX)


def _read_file(path: str) -> Iterator[MailItem]:
    """Yield the messages of one file: several for an mbox, else one."""
    try:
        with open(path, "rb") as f:
            if _starts_with_envelope(f):
                yield from _mbox_messages(f, path, split=True)
            else:
                yield MailItem(path, f.read())
    except OSError as err:
        raise MailSourceError(f"cannot read mail file {path!r}: {err.strerror}") from err


def _unquote(line: bytes) -> bytes:
    """Undo one level of mboxrd quoting: ">From " -> "From ", ">>From " -> ">From "."""
    if line.startswith(b">") and line.lstrip(b">").startswith(_ENVELOPE_PREFIX):
        return line[1:]
    return line


def _finish(lines: list[bytes]) -> bytes:
    # The blank line before the next envelope line (or at the end of the file)
    # separates messages and belongs to none of them, as in Python's mailbox.
    if lines and lines[-1] in _BLANK_LINES:
        lines.pop()
    return b"".join(lines)


def _mbox_messages(lines: Iterable[bytes], path: str, *, split: bool) -> Iterator[MailItem]:
    """Split mbox lines (envelope line first) into messages.

    Lines are read one at a time and only the current message is kept, so
    the size of the mbox does not matter. A ``From `` line starts a new
    message when it follows a blank line, or when it looks like an envelope
    line (`_ENVELOPE_RE`) even without one. A UW-IMAP folder-data
    pseudo-message in first place is skipped; later messages keep their
    position in the file as their number, and a file that yields a single
    message names it `path` alone. With ``split=False`` the first envelope
    line is dropped and every later line is message content, for a file
    known to hold one message; the source is then `path` alone too.
    """
    count = 0
    yielded = 0
    current: list[bytes] | None = None  # None until the first envelope line
    prev_blank = True
    for line in lines:
        if (
            line.startswith(_ENVELOPE_PREFIX)
            and (split or current is None)
            and (prev_blank or _ENVELOPE_RE.match(line) is not None)
        ):
            if current is not None:
                count += 1
                raw = _finish(current)
                if not (count == 1 and _is_uw_imap_folder_data(raw)):
                    yielded += 1
                    yield MailItem(f"{path}:{count}", raw)
            current = []
            prev_blank = False
            continue
        if current is None:
            # Text before the first envelope line; callers only pass files
            # starting with one, so this is unreachable in practice.
            current = []
        prev_blank = line in _BLANK_LINES
        current.append(_unquote(line))
    if current is not None:
        count += 1
        raw = _finish(current)
        if not split or yielded == 0:
            if not (split and count == 1 and _is_uw_imap_folder_data(raw)):
                yield MailItem(path, raw)
        else:
            yield MailItem(f"{path}:{count}", raw)


def _is_uw_imap_folder_data(raw: bytes) -> bool:
    """Tell UW-IMAP's folder-state pseudo-message (see `_UW_IMAP_RE`)."""
    # The pseudo-message is a few hundred bytes; its headers are in the head.
    head = raw[:2048]
    return _UW_IMAP_SUBJECT_RE.search(head) is not None and _UW_IMAP_RE.search(head) is not None


# --- TREC index ------------------------------------------------------------


def _load_index(index_path: str) -> list[tuple[bool, str]]:
    """Read and check a whole index: labels, syntax, message files present."""
    entries: list[tuple[bool, str]] = []
    folder = os.path.dirname(index_path)
    try:
        with open(index_path, "rb") as f:
            lines = f.read().splitlines()
    except OSError as err:
        raise MailSourceError(f"cannot read index {index_path!r}: {err.strerror}") from err
    for lineno, line in enumerate(lines, start=1):
        parts = line.split(None, 1)
        if not parts:
            continue
        label = parts[0].lower()
        if len(parts) != 2 or label not in (b"spam", b"ham"):
            text = line.decode("utf-8", "replace")
            raise MailSourceError(
                f"{index_path}:{lineno}: malformed index line {text!r}: "
                f"expected 'spam <path>' or 'ham <path>'"
            )
        # fsdecode: file names are bytes to the OS; surrogateescape keeps
        # names that are not valid UTF-8 openable.
        path = os.path.join(folder, os.fsdecode(parts[1].rstrip()))
        if not os.path.isfile(path):
            raise MailSourceError(f"{index_path}:{lineno}: message file {path!r} does not exist")
        entries.append((label == b"spam", path))
    return entries


def _iter_index(entries: list[tuple[bool, str]]) -> Iterator[tuple[bool, MailItem]]:
    for is_spam, path in entries:
        yield is_spam, _read_index_message(path)


def _read_index_message(path: str) -> MailItem:
    try:
        with open(path, "rb") as f:
            if _starts_with_envelope(f):
                return next(_mbox_messages(f, path, split=False))
            return MailItem(path, f.read())
    except OSError as err:
        raise MailSourceError(f"cannot read mail file {path!r}: {err.strerror}") from err


def filtered_pieces(raw: bytes, fields: Sequence[tuple[str, str]]) -> list[bytes | memoryview]:
    """The message with `FILTER_HEADERS` fields removed and ``fields`` added,
    as pieces to write one after the other; all but the added lines are
    views of ``raw``, so a message of any size is not copied.

    The added fields go at the top of the header block, after an mbox
    envelope line, as SpamAssassin's spamd puts its own: every parser reads
    them there, also one that ends the header early at a line it cannot
    read (no colon, a NUL in a field name). They take the line ending of the
    header block. Fields of the same names that came with the message are
    removed wherever a parser could read them (see `_filter_layout`), so a
    sender cannot pre-set ``X-Spam-Status: No``. Every other byte is kept as
    it was: line endings, mixed or not, a missing final line break, binary
    parts.

    Examples
    --------
    >>> b"".join(filtered_pieces(b"Subject: a\\r\\nX-Spam-Flag: NO\\r\\n\\r\\nb", [("X-Spam-Flag", "YES")]))
    b'X-Spam-Flag: YES\\r\\nSubject: a\\r\\n\\r\\nb'
    """
    layout = _filter_layout(raw)
    eol = layout.eol
    added = eol.join(f"{name}: {value}".encode("utf-8") for name, value in fields)
    at = layout.insert
    if at > 0 and raw[at - 1 : at] not in (b"\r", b"\n"):
        # A header of one folded line and no line break: the fields go on
        # lines of their own after it.
        added = eol + added
    else:
        added += eol
    view = memoryview(raw)
    pieces: list[bytes | memoryview] = [view[:at], added]
    pos = at
    for begin, end in layout.dropped:
        pieces.append(view[pos:begin])
        pos = end
    pieces.append(view[pos:])
    return pieces


def filter_fields(verdict: Decision, score: float, log_odds: float, event_model: str) -> list[tuple[str, str]]:
    """The `FILTER_HEADERS` fields a filtered message gets for a verdict,
    P(spam) ``score`` and ``log_odds``: what both ``spamfilter filter`` and
    the daemon's PROCESS write.

    Examples
    --------
    >>> filter_fields(Decision.HAM, 0.01, -4.59512, "multinomial-binary")[1]
    ('X-Spam-Score', '0.010000')
    """
    fields = [
        (
            "X-Spam-Status",
            f"{'Yes' if verdict is Decision.SPAM else 'No'}, verdict={verdict} "
            f"score={score:.6f} log_odds={log_odds:+.4f} model={event_model}",
        ),
        ("X-Spam-Score", f"{score:.6f}"),
    ]
    if verdict is Decision.SPAM:
        fields.append(("X-Spam-Flag", "YES"))
    return fields


def with_filter_headers(raw: bytes, fields: Sequence[tuple[str, str]]) -> bytes:
    """`filtered_pieces` joined into one bytes object (a copy of the message)."""
    return b"".join(filtered_pieces(raw, fields))
