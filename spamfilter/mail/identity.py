"""A message's identity and the header fields the filter writes.

`digest_bytes` names a message the same however it was stored (line ends,
trailing blank lines, an mbox envelope, the filter's own fields); the
filter's fields are replaced by `filtered_pieces` / `with_filter_headers`
with those `filter_fields` gives for a verdict.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from spamfilter.headers import FILTER_HEADERS, MAILBOX_HEADERS
from spamfilter.verdicts import Decision

#: How an mbox envelope line starts (the readers in sources.py split on it too).
_ENVELOPE_PREFIX: Final = b"From "


@dataclass(frozen=True, slots=True)
class _Fields:
    """The patterns that find header fields of some names (any case).

    field: one such field matched at a line start: its line, its folded
    continuation lines and the line break after them (group 1). CR, LF and
    CRLF all end a line here, as they do for Python's email parser:
    "Subject: hi\\rX-Spam-Flag: NO" holds two fields for it, one for
    procmail, which only splits at LF.
    line: the same field without its continuation lines: one past the
    header block of a CRLF message (procmail's header, everyone else's
    body), where the indented lines after it are the body's own (code, a
    quoted bounce).
    start: such a field's name and colon; it starts a field at the very
    beginning or after a CR or LF (`_FilterLayout.runs` checks). The pattern
    starts with the name, so the search skips to each candidate; with a
    lookbehind first it was tried at every byte (ten times slower).
    """

    field: re.Pattern[bytes]
    line: re.Pattern[bytes]
    start: re.Pattern[bytes]
    #: With names that share no prefix, ``start`` begins with the line break
    #: before the name (the search then skips to each CR or LF: over names
    #: of many first letters it was tried at nearly every byte, ten times
    #: slower), and ``first`` finds a field on the first line.
    first: re.Pattern[bytes] | None = None

    @classmethod
    def named(cls, names: Iterable[str], *, after_break: bool = False) -> _Fields:
        alternatives = b"|".join(re.escape(name.encode("ascii")) for name in names)
        one_line = rb"(?:" + alternatives + rb")[ \t]*:[^\r\n]*"
        end = rb"(\r\n|\r|\n|\Z)"
        name = rb"(?:" + alternatives + rb")[ \t]*:"
        return cls(
            re.compile(one_line + rb"(?:(?:\r\n|\r|\n)[ \t][^\r\n]*)*" + end, re.IGNORECASE),
            re.compile(one_line + end, re.IGNORECASE),
            re.compile(rb"[\r\n]" + name if after_break else name, re.IGNORECASE),
            re.compile(name, re.IGNORECASE) if after_break else None,
        )

    def starts(self, raw: bytes, start: int, end: int) -> Iterator[int]:
        """Where such a field's name may start in ``raw[start:end]``, in order
        (the caller checks that it starts a line)."""
        if self.first is None:
            for m in self.start.finditer(raw, start, end):
                yield m.start()
            return
        if self.first.match(raw, start, end):
            yield start
        for m in self.start.finditer(raw, start, end):
            yield m.start() + 1


#: The filter's own fields: what filtering replaces.
_FILTER: Final = _Fields.named(FILTER_HEADERS)
#: What a message's identity leaves out: the filter's fields and the
#: mailbox annotations (``headers.MAILBOX_HEADERS``).
_IDENTITY: Final = _Fields.named(FILTER_HEADERS + MAILBOX_HEADERS, after_break=True)
_MAILBOX: Final = _Fields.named(MAILBOX_HEADERS, after_break=True)
# An empty line when CR, LF and CRLF each end a line (group 1 ends the line
# before it).
_EMPTY_LINE_RE: Final = re.compile(rb"(\r\n|\r(?!\n)|\n)(?:\r\n|\r|\n)")
_LINE_BREAK_RE: Final = re.compile(rb"\r\n|\r|\n")

# digest_bytes and with_filter_headers work through a message's body in
# pieces of this size rather than on whole copies of the message.
_CHUNK: Final = 1 << 20
# `filtered_pieces` copies shorter stretches between two dropped fields
# rather than keep a view of each.
_SMALL_PIECE: Final = 4096


def digest_bytes(raw: bytes) -> str:
    """A message's identity: the same for every way it may have been stored.

    Normalisation before hashing:

    1. CRLF line ends become LF;
    2. a leading mbox envelope (``From ``) line is dropped;
    3. the fields in `FILTER_HEADERS` and `MAILBOX_HEADERS` (any case,
       with their folded continuation lines) are dropped from the header
       block, which ends at the first empty line (CR, LF or CRLF; see
       `_filter_layout`): a message keeps its identity when it is filtered,
       read or flagged in its mailbox;
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
    # `filtered_pieces` drops and adds (and the mailbox annotations), so
    # filtering keeps the digest; but
    # for those it drops past a CRLF empty line, which procmail reads as
    # header fields and every other parser as body lines. Dropping those
    # here too would make the digest of a CRLF message differ from that of
    # the same message with LF line ends (there procmail reads them as body).
    return _digest(_filter_layout(raw, lf_only_readers=False, fields=_IDENTITY))


def former_digest(raw: bytes, digest: str | None = None) -> str | None:
    """The digest the message had before the mailbox annotations were left
    out of it (`digest_bytes` with only the filter's fields dropped), where
    that differs from its digest now; else None.

    ``digest``: the message's `digest_bytes`, when the caller has it.
    A store trained before keeps such a message under this digest;
    training, `mark` and `forget` look it up there too and move it to the
    digest it has now (`StoreTransaction.adopt_digests`).
    """
    if _annotations(raw) is None:
        return None
    former = _digest(_filter_layout(raw, lf_only_readers=False))
    return None if former == (digest or digest_bytes(raw)) else former


def without_mailbox_annotations(raw: bytes) -> bytes:
    """The message as it was delivered: without the mailbox annotations of
    its header block (``headers.MAILBOX_HEADERS``), the rest byte for byte."""
    layout = _annotations(raw)
    return raw if layout is None else raw[: layout.start] + b"".join(_kept_pieces(raw, layout))


def _annotations(raw: bytes) -> _FilterLayout | None:
    """Where the message's mailbox annotations are, or None when it has none."""
    layout = _filter_layout(raw, lf_only_readers=False, fields=_MAILBOX)
    return None if next(layout.runs(), None) is None else layout


def _digest(layout: _FilterLayout) -> str:
    """The first 32 hex digits of the SHA-256 of ``layout.raw`` without the
    envelope and the layout's fields, CRLF made LF, less its trailing white
    space."""
    digest = _RstrippedHash()
    # The kept pieces are made one at a time as the runs are found: a header
    # block of 10 MB of forged fields, one every other line, held 500,000
    # runs and 500,000 views of the message at once (160 MB).
    for piece in _crlf_to_lf(_kept_pieces(layout.raw, layout)):
        digest.update(piece)
    return digest.hexdigest()[:32]


def _kept_pieces(raw: bytes, layout: _FilterLayout) -> Iterator[memoryview]:
    """The bytes of ``raw`` past the envelope line that are not in one of
    ``layout``'s dropped runs, one piece between two runs at a time."""
    view = memoryview(raw)
    pos = layout.start
    for begin, end in layout.runs():
        yield view[pos:begin]
        pos = end
    yield view[pos:]


@dataclass(frozen=True, slots=True)
class _FilterLayout:
    """Where `filtered_pieces` changes a message (positions in its bytes).

    start: past a leading mbox envelope line.
    insert: where the filter's own fields go: the top of the header block,
        past any continuation lines that open it (they would otherwise fold
        into the last added field).
    runs(): (begin, end) of each run of `FILTER_HEADERS` fields to remove,
        found as they are asked for (``dropped``: all of them), so a message
        of many such fields is not held as as many pairs.
    eol: the line ending the added fields take.
    """

    start: int
    insert: int
    eol: bytes
    raw: bytes = field(repr=False, compare=False)
    #: Where the header block ends for Python's parser (CR, LF or CRLF ends
    #: a line), and where fields stop being looked for.
    any_end: int
    scan_end: int
    #: Where the header block ends for a parser that ends lines at LF or
    #: CRLF; past it a field is dropped without its continuation lines.
    crlf_end: int
    #: Which fields are dropped: the filter's own, or with the mailbox
    #: annotations (a message's identity).
    fields: _Fields = field(default=_FILTER, repr=False, compare=False)

    @property
    def dropped(self) -> tuple[tuple[int, int], ...]:
        return tuple(self.runs())

    def runs(self) -> Iterator[tuple[int, int]]:
        raw, insert, any_end = self.raw, self.insert, self.any_end
        run: tuple[int, int] | None = None
        field_end = -1  # where the last field dropped ended, line break included
        fields = self.fields
        for at in fields.starts(raw, self.start, self.scan_end):
            if at > 0 and raw[at - 1] not in (0x0A, 0x0D):
                continue  # inside a line
            follows_drop = at == field_end
            if not (at < any_end or (at > 0 and raw[at - 1] == 0x0A) or follows_drop):
                continue
            found = (fields.field if at < self.crlf_end else fields.line).match(raw, at, self.scan_end)
            assert found is not None  # the start pattern is a prefix of this one
            begin, field_end = at, found.end()
            if run is not None:
                if run[1] == at:
                    begin = run[0]
                else:
                    yield run
            end = field_end
            # "a\rX-Spam-Flag: NO\nTo: b" without the field and its LF would put
            # "To: b" on the line of "a" for a parser that splits at LF only, and
            # before a blank line CR and LF would glue into one CRLF: drop the
            # CR before the field instead, and keep the field's line break.
            if begin > insert and raw[begin - 1] == 0x0D and b"\n" in found.group(1):
                run = (begin - 1, end - len(found.group(1)))
            else:
                run = (begin, end)
        if run is not None:
            yield run


def _filter_layout(raw: bytes, *, lf_only_readers: bool = True, fields: _Fields = _FILTER) -> _FilterLayout:
    """Find the envelope line, the insertion point, the fields a sender may
    have forged and the header block's line ending, without copying ``raw``.

    Parsers disagree on where a header block ends: Python's email parser ends
    it at the first empty line counting CR, LF and CRLF as line ends
    (``any_end``), formail and Dovecot at the first one counting LF and CRLF
    (``crlf_end``, never earlier), procmail at the first LF LF (``lf_end``,
    later still: to it a line holding a lone CR is not empty, and a CRLF
    message is all header). A field of ours is dropped wherever one of them
    would read it: before ``any_end`` at any line start; from there to the
    end (``lf_end``, or ``crlf_end`` without ``lf_only_readers``) where
    those parsers see a line start (after an LF, or right after a field
    dropped just before). So "From: a\n\r\nX-Spam-Flag: YES\n\nbody" loses
    the field, which a CRLF parser reads in the body and procmail in the
    header, and so would a field at a line start in the body of a CRLF
    message.
    """
    start = 0
    if raw.startswith(_ENVELOPE_PREFIX):
        # The envelope line ends at its first line break, a bare CR too:
        # Python's parser ends it there, and reads what follows as fields.
        brk = _LINE_BREAK_RE.search(raw)
        start = len(raw) if brk is None else brk.end()
    crlf_end = _header_end(raw, start)
    lf_end = _lf_header_end(raw, start) if lf_only_readers else crlf_end
    if raw[start : start + 1] in (b"\r", b"\n"):
        any_end = start
    else:
        empty = _EMPTY_LINE_RE.search(raw, start)
        any_end = crlf_end if empty is None else min(empty.end(1), crlf_end)
    insert = start
    while raw[insert : insert + 1] in (b" ", b"\t"):
        brk = _LINE_BREAK_RE.search(raw, insert)
        insert = len(raw) if brk is None else brk.end()
    return _FilterLayout(start, insert, _header_eol(raw, start, any_end), raw, any_end, lf_end, crlf_end, fields)


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


def _lf_header_end(raw: bytes, start: int) -> int:
    """`_header_end` for a parser that ends lines at LF only (procmail)."""
    if raw.startswith(b"\n", start):
        return start
    end = raw.find(b"\n\n", start)
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


#: How the names of the filter's fields start as mail writes them (the
#: filter itself writes "X-Spam-"): a message with none of these is read as
#: it is. Another casing is still left out of the tokens by name, but read
#: in the ``max_bytes`` window and the size as it came.
_FIELD_PREFIXES: Final = (b"X-Spam-", b"x-spam-", b"X-SPAM-")


def without_filter_fields(raw: bytes, limit: int) -> tuple[bytes, int]:
    """What the filter reads of a message: its first ``limit`` bytes with
    the `FILTER_HEADERS` fields left out where `digest_bytes` leaves them
    out, and its length without them. So a message reads the same before
    and after `filter` added its fields: they moved the ``max_bytes``
    window of a long message, and its size (a message feature). ``raw``
    itself, whole and not copied, when it holds none (the parser reads its
    first ``limit`` bytes as it does any message's)."""
    if not any(name in raw for name in _FIELD_PREFIXES):
        # Most mail: a few fast substring scans, not the header's layout.
        return raw, len(raw)
    layout = _filter_layout(raw, lf_only_readers=False)
    view = memoryview(raw)
    head: list[bytes] = [raw[: layout.start]]
    kept = layout.start
    dropped = 0
    pos = layout.start
    for begin, end in layout.runs():
        if kept < limit:
            piece = view[pos:begin][: limit - kept].tobytes()
            head.append(piece)
            kept += len(piece)
        dropped += end - begin
        pos = end
    if dropped == 0:
        return raw, len(raw)
    if kept < limit:
        head.append(view[pos:][: limit - kept].tobytes())
    return b"".join(head)[:limit], len(raw) - dropped


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
    parts. The message keeps its `digest_bytes`, unless a field was removed
    that a CRLF parser reads in the body.

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
    # What is kept between two runs close together is copied into pieces
    # of up to _CHUNK bytes: a view for each (about 200 bytes) made a header
    # block of forged fields, one every other line, cost 8 times its size.
    joined = bytearray()
    pos = at
    for begin, end in layout.runs():
        kept = view[pos:begin]
        if len(kept) < _SMALL_PIECE:
            joined += kept
        if joined and (len(joined) >= _CHUNK or len(kept) >= _SMALL_PIECE):
            pieces.append(bytes(joined))
            joined.clear()
        if len(kept) >= _SMALL_PIECE:
            pieces.append(kept)
        pos = end
    if joined:
        pieces.append(bytes(joined))
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
        ("X-Spam-Status", f"{'Yes' if verdict is Decision.SPAM else 'No'}, verdict={verdict} score={score:.6f} log_odds={log_odds:+.4f} model={event_model}"),
        ("X-Spam-Score", f"{score:.6f}"),
    ]
    if verdict is Decision.SPAM:
        fields.append(("X-Spam-Flag", "YES"))
    return fields


def with_filter_headers(raw: bytes, fields: Sequence[tuple[str, str]]) -> bytes:
    """`filtered_pieces` joined into one bytes object (a copy of the message)."""
    return b"".join(filtered_pieces(raw, fields))
