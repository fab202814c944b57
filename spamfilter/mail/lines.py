"""Reading a mailbox file's lines in bounded pieces (`line_pieces`), and
splitting a file whose lines end in CR alone (`cr_pieces`), for the mbox
reader (`sources.mbox_messages`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from typing import BinaryIO, Final

#: The most of one line the mbox reader takes at a time: a longer line
#: comes in pieces, so a line of 400 MB (a damaged file, a body never
#: broken into lines) costs no more memory than the message cap. Whole
#: lines were read first: 911 MB for one such line, and under a memory
#: limit the run ended before the messages after it.
LINE_PIECE: Final = 1 << 20

#: A line and its line break (CR, LF or CRLF), or a last line without one.
_LINE_RE: Final = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def line_pieces(stream: BinaryIO) -> Iterator[bytes]:
    """The lines of ``stream`` (each ending at LF), a line longer than
    `LINE_PIECE` in pieces of that size, for `mbox_messages`."""
    # (a C iterator over readline: a generator's frame cost a tenth of the reading)
    return iter(functools.partial(stream.readline, LINE_PIECE), b"")


def cr_pieces(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """``pieces`` of a file whose lines end in CR alone, split after each
    line break. What follows a piece's last CR waits for the next piece
    (an envelope line cut there would not be told), unless it is a
    `LINE_PIECE` long already; so does a CR at its very end, which may be
    the first half of a CRLF."""
    carry = b""
    for piece in pieces:
        data = carry + piece
        carry = b""
        # One line at a time: a list of a 1 MiB piece's lines of a few bytes
        # each held five times the piece.
        for m in _LINE_RE.finditer(data):
            if m.end() == len(data) and not data.endswith(b"\n") and m.end() - m.start() < LINE_PIECE:
                carry = m.group()
            else:
                yield m.group()
    if carry:
        yield carry
