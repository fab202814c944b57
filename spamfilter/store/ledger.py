"""The ledger's format: a message's own token counts (and features) as one blob."""

from __future__ import annotations

import operator
import re
import struct
import zlib
from itertools import chain, compress, repeat
from typing import Final

import numpy as np
import numpy.typing as npt

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

# The fourth format stores a bigram ("bi:" + a + "+" + b, the tokenizer's)
# whose two words are tokens of the same message as the two words'
# positions in the message's token list instead of its text: half of a
# message's distinct tokens are bigrams, and their text is most of an
# entry. ``\x04``, then zlib (level 6) of: the length of a second-format
# body (uint32), the number of such bigrams (uint32), the width of their
# numbers (one byte, 2 or 4), the second-format body of every other token
# (the message's own words first, then any bigram that could not be paired,
# as text) with the counts of all, the paired bigrams' last, in that order;
# then the bigrams' positions (``_pair_deltas``). A bigram is rebuilt as
# "bi:" + a + "+" + b from the very a and b its text was split into, so an
# entry gives back exactly the tokens it was given; an entry without such
# bigrams stays in the second format.
_LEDGER_V4: Final = b"\x04"
_V4_HEAD: Final = struct.Struct("<IIB")
_V4_LEVEL: Final = 6
_POSITIONS: Final = {2: "<u2", 4: "<u4"}
_BIGRAM: Final = "bi:"


def pack_ledger_entry(counts: dict[str, int], features: tuple[int, ...] = ()) -> bytes:
    """``pack_token_counts``, preceded by the feature vector when there is one."""
    if not features:
        return pack_token_counts(counts)
    return _LEDGER_V3 + ",".join(map(str, features)).encode("ascii") + b"\0" + pack_token_counts(counts)


class DamagedEntry(ValueError):
    """A ledger entry that none of the formats can read (a damaged row or page)."""


def unpack_features(blob: bytes) -> tuple[int, ...]:
    """The feature vector of a ledger entry; () for an entry without one.
    Raises ``DamagedEntry``."""
    if not isinstance(blob, bytes):
        raise DamagedEntry(f"{type(blob).__name__} where the entry's bytes belong")
    if not blob.startswith(_LEDGER_V3):
        return ()
    try:
        head = blob[1 : blob.index(b"\0")]
        return tuple(map(int, head.split(b",")))
    except ValueError as exc:
        raise DamagedEntry(f"unreadable features: {exc}") from exc


def pack_token_counts(counts: dict[str, int]) -> bytes:
    """Encode a message's token counts for the ledger: the fourth format
    when some of its tokens are bigrams of two of its own tokens, else the
    second: ``\x02`` then, zlib compressed, the tokens one a line
    (backslash and newline escaped: the tokenizer emits neither, but the
    ledger must give back whatever it was given), a NUL, and the
    comma-separated counts unless all are 1 (a message without tokens is a
    lone NUL)."""
    is_bigram = list(map(str.startswith, counts, repeat(_BIGRAM)))
    if not any(is_bigram):
        return _pack_v2(list(counts), list(counts.values()))
    names = list(compress(counts, map(operator.not_, is_bigram)))
    bigrams = list(compress(counts, is_bigram))
    position = dict(zip(names, range(len(names))))
    words = [t[len(_BIGRAM) :].partition("+") for t in bigrams]
    first = list(map(position.get, map(operator.itemgetter(0), words), repeat(-1)))
    second = list(map(position.get, map(operator.itemgetter(2), words), repeat(-1)))
    if -1 in first or -1 in second or not all(map(operator.itemgetter(1), words)):
        # kept as text: decoding rebuilds only "bi:" + a + "+" + b, so a
        # "bi:" token without a "+" (or a word not among the message's) stays text
        pairable = [i >= 0 and j >= 0 and sep == "+" for i, j, (_, sep, _) in zip(first, second, words)]
        names += [t for t, ok in zip(bigrams, pairable) if not ok]
        bigrams = list(compress(bigrams, pairable))
        first = list(compress(first, pairable))
        second = list(compress(second, pairable))
    if not bigrams:
        return _pack_v2(names, list(map(counts.__getitem__, names)))
    pairs = _pair_deltas(np.array(first, dtype=np.int64), np.array(second, dtype=np.int64))
    width = 2 if int(pairs.max()) < 1 << 16 else 4
    text = _names_and_counts(names, list(map(counts.__getitem__, chain(names, bigrams))))
    body = _V4_HEAD.pack(len(text), len(bigrams), width) + text + pairs.astype(_POSITIONS[width]).tobytes()
    return _LEDGER_V4 + zlib.compress(body, _V4_LEVEL)


def _pack_v2(names: list[str], values: list[int]) -> bytes:
    """A second-format entry: ``\x02`` and, at zlib level 1, ``_names_and_counts``."""
    return _LEDGER_V2 + zlib.compress(_names_and_counts(names, values), 1)


def _names_and_counts(names: list[str], values: list[int]) -> bytes:
    """The second format's body: the names one a line, escaped if they must
    be, then a NUL and the counts unless all are 1 (no names: a lone NUL)."""
    text = "\n".join(names)
    if "\\" in text or "\0" in text or text.count("\n") != max(len(names) - 1, 0):
        text = "\n".join(_escape(token) for token in names)
    body = text.encode("utf-8") if names else b"\0"
    if any(n != 1 for n in values):
        body += b"\0" + ",".join(map(str, values)).encode("ascii")
    return body


def _pair_deltas(first: npt.NDArray[np.int64], second: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Bigram (i, j) positions as small numbers: each i from the previous
    j, each j from its i, zigzag-coded (in running text a bigram's first
    word is the one before's second, so most are 0 or 2)."""
    before = np.concatenate([[0], second[:-1]])
    deltas = np.empty(2 * first.size, dtype=np.int64)
    deltas[0::2] = first - before
    deltas[1::2] = second - first
    zigzag: npt.NDArray[np.int64] = (deltas << 1) ^ (deltas >> 63)
    return zigzag


def _pair_positions(zigzag: npt.NDArray[np.int64]) -> tuple[list[int], list[int]]:
    """Inverse of ``_pair_deltas``."""
    deltas = (zigzag >> 1) ^ -(zigzag & 1)
    # i_k = j_(k-1) + d_2k and j_k = i_k + d_2k+1: a running sum of all deltas.
    positions = np.cumsum(deltas)
    return positions[0::2].tolist(), positions[1::2].tolist()


def unpack_token_counts(blob: bytes) -> dict[str, int]:
    """Inverse of ``pack_token_counts``; also reads the first and third
    formats. Raises ``DamagedEntry`` for bytes none of them can read."""
    try:
        return _unpack_token_counts(bytes(blob))
    except (zlib.error, UnicodeDecodeError, ValueError, struct.error, IndexError, TypeError) as exc:
        # TypeError: text where the bytes belong (SQLite keeps any type).
        raise DamagedEntry(f"{type(exc).__name__}: {exc}") from exc


def _unpack_token_counts(blob: bytes) -> dict[str, int]:
    if blob.startswith(_LEDGER_V3):
        blob = blob[blob.index(b"\0") + 1 :]
    if blob.startswith(_LEDGER_V4):
        return _unpack_v4(zlib.decompress(blob[1:]))
    if not blob.startswith(_LEDGER_V2):
        return _unpack_v1(blob)
    return _counted(*_names_and_values(zlib.decompress(blob[1:])))


def _unpack_v4(body: bytes) -> dict[str, int]:
    size, n_pairs, width = _V4_HEAD.unpack_from(body)
    start = _V4_HEAD.size
    names, values = _names_and_values(body[start : start + size])
    zigzag = np.frombuffer(body, dtype=_POSITIONS[width], count=2 * n_pairs, offset=start + size).astype(np.int64)
    first, second = _pair_positions(zigzag)
    names += [f"{_BIGRAM}{names[i]}+{names[j]}" for i, j in zip(first, second)]
    return _counted(names, values)


def _counted(names: list[str], values: list[int] | None) -> dict[str, int]:
    """Each name with its count (None: every count is 1)."""
    return dict.fromkeys(names, 1) if values is None else dict(zip(names, values))


def _names_and_values(body: bytes) -> tuple[list[str], list[int] | None]:
    """Inverse of ``_names_and_counts``: the names, and their counts (None: all 1)."""
    if body == b"\0":
        return [], None
    raw_names, _, numbers = body.partition(b"\0")
    text = raw_names.decode("utf-8")
    names = text.split("\n")
    if "\\" in text:
        names = [_unescape(name) for name in names]
    return names, (list(map(int, numbers.split(b","))) if numbers else None)


def _unpack_v1(blob: bytes) -> dict[str, int]:
    text = zlib.decompress(blob).decode("utf-8")
    result: dict[str, int] = {}
    if text:
        for line in text.split("\n"):
            token, _, n = line.rpartition("\t")
            result[_unescape(token) if "\\" in token else token] = int(n)
    return result
