"""The ledger's format: a message's own token counts (and features) as one blob."""

from __future__ import annotations

import re
import zlib
from typing import Final

# A token is free text to the store: escape backslash, newline and NUL so
# one line holds one token (in the first ledger format tabs needed no escape,
# as the count followed the last tab on its line).
#
# The counts file of ``db export`` (tools/counts_file.escape_token) escapes a
# different set on purpose. This one is part of what databases already hold,
# so it cannot change, and escapes NUL, the ledger's own separator; it is on
# the training path, so a message is escaped only when a token needs it; and
# it reads any unknown escape as the character itself. The counts file is
# text a person may edit: tab separates its fields, carriage return and a
# leading "#" would be lost to text tools and comments, and an unknown
# escape there is a mistake to report.
_ESCAPE_SEQUENCE = re.compile(r"\\(.)", re.DOTALL)


def _escape(token: str) -> str:
    return token.replace("\\", "\\\\").replace("\n", "\\n").replace("\0", "\\0")


_UNESCAPED: Final = {"n": "\n", "0": "\0"}


def _unescape(token: str) -> str:
    return _ESCAPE_SEQUENCE.sub(lambda m: _UNESCAPED.get(m.group(1), m.group(1)), token)


# Ledger entries. The first format (zlib level 6 of "token<TAB>count" lines)
# cost 240 us a message, 8% of training; the second keeps the tokens and the
# counts apart, writes only the counts that are not 1 (most tokens occur once
# in a message), and compresses at level 1: 110 us and a smaller blob on
# spamassassin mail (2,590 against 2,609 bytes a message). Entries of the
# first format stay readable (a zlib stream starts with 0x78), so databases
# written before need no rewrite and forget them exactly.
_LEDGER_V2: Final = b"\x02"

# The third format is the second behind the message's feature vector (the
# fixed-point integers of ``tokenizer.features``): ``\x03``, the values as
# comma-separated ASCII, a NUL, then a whole second-format entry. Forgetting
# subtracts exactly the vector training added; an entry of the earlier
# formats has none, and forgetting it leaves the feature sums alone, as its
# training did (it was trained before the sums existed).
_LEDGER_V3: Final = b"\x03"


def pack_ledger_entry(counts: dict[str, int], features: tuple[int, ...] = ()) -> bytes:
    """``pack_token_counts``, preceded by the feature vector when there is one."""
    if not features:
        return pack_token_counts(counts)
    return _LEDGER_V3 + ",".join(map(str, features)).encode("ascii") + b"\0" + pack_token_counts(counts)


def unpack_features(blob: bytes) -> tuple[int, ...]:
    """The feature vector of a ledger entry; () for an entry without one."""
    if not blob.startswith(_LEDGER_V3):
        return ()
    head = blob[1 : blob.index(b"\0")]
    return tuple(map(int, head.split(b",")))


def pack_token_counts(counts: dict[str, int]) -> bytes:
    """Encode a message's token counts for the ledger: ``\x02`` then, zlib
    compressed, the tokens one a line (backslash and newline escaped: the
    tokenizer emits neither, but the ledger must give back whatever it was
    given), a NUL, and the comma-separated counts unless all are 1 (a
    message without tokens is a lone NUL)."""
    text = "\n".join(counts)
    if "\\" in text or "\0" in text or text.count("\n") != max(len(counts) - 1, 0):
        text = "\n".join(_escape(token) for token in counts)
    body = text.encode("utf-8") if counts else b"\0"
    if any(n != 1 for n in counts.values()):
        body += b"\0" + ",".join(map(str, counts.values())).encode("ascii")
    return _LEDGER_V2 + zlib.compress(body, 1)


def unpack_token_counts(blob: bytes) -> dict[str, int]:
    """Inverse of ``pack_token_counts``; also reads the first and third formats."""
    if blob.startswith(_LEDGER_V3):
        blob = blob[blob.index(b"\0") + 1 :]
    if not blob.startswith(_LEDGER_V2):
        return _unpack_v1(blob)
    body = zlib.decompress(blob[1:])
    if body == b"\0":
        return {}
    raw_names, _, numbers = body.partition(b"\0")
    text = raw_names.decode("utf-8")
    names = text.split("\n")
    if "\\" in text:
        names = [_unescape(name) for name in names]
    if numbers:
        return dict(zip(names, map(int, numbers.split(b","))))
    return dict.fromkeys(names, 1)


def _unpack_v1(blob: bytes) -> dict[str, int]:
    text = zlib.decompress(blob).decode("utf-8")
    result: dict[str, int] = {}
    if text:
        for line in text.split("\n"):
            token, _, n = line.rpartition("\t")
            result[_unescape(token) if "\\" in token else token] = int(n)
    return result
