"""The words of free text: the body rules' word pattern, on stdlib ``re``.

``body_words(text)`` gives the raw words in order, before the length rules
and case folding of ``Tokenizer.words``.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterable

from spamfilter.tokenizer.wordchars import DIGIT, WORD

# Body words: optional money sign on numbers; letter-led words may carry
# inner apostrophes, dots and hyphens ("don't", "e-mail", "u.s.a"). In the
# notation of the third-party ``regex`` engine, which ran it until 2026-11
# (through nltk's RegexpTokenizer):
#     \$?\d+(?:[.,]\d+)*|[^\W\d_](?:[\w'.\-]*\w)?
# Stdlib ``re`` runs it 3.5 times faster, but its \w and \d are not
# ``regex``'s: ``regex`` counts combining marks (Mn, Mc, Me), joiners and
# connector punctuation as word characters, ``re`` other numbers (No: "²",
# "½") instead, and their Unicode versions differ. On 3,000 spamassassin
# messages 20 came out with different tokens. So the two classes are
# spelled out from ``regex``'s tables (wordchars.py), and every stored count
# stays valid. The greedy ``[...]*`` backtracks only to the last word
# character of its own run, and no word starts inside that run's tail, so a
# text is matched in linear time.
# Characters beyond the Basic Multilingual Plane (emoji, historic scripts,
# mathematical letters) are stood in for by "a", "0" or " " before matching:
# a class that holds any of them makes ``re`` test every non-word character
# against each of its ranges in turn (13 times slower on plain mail).
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _char_class(ranges: Iterable[tuple[int, int]]) -> str:
    """The inside of a ``[...]`` class for the BMP part of ``ranges``."""
    out = []
    for a, b in ranges:
        if a > 0xFFFF:
            break
        b = min(b, 0xFFFF)
        out.append(re.escape(chr(a)) if a == b else re.escape(chr(a)) + "-" + re.escape(chr(b)))
    return "".join(out)


def _without(ranges: Iterable[tuple[int, int]], removed: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive code point ranges minus other ones."""
    gone = sorted(removed)
    out: list[tuple[int, int]] = []
    for a, b in ranges:
        for c, d in gone:
            if d < a or c > b:
                continue
            if c > a:
                out.append((a, c - 1))
            a = d + 1
            if a > b:
                break
        if a <= b:
            out.append((a, b))
    return out


@functools.cache
def _word_pattern() -> re.Pattern[str]:
    letter = _char_class(_without(WORD, [*DIGIT, (ord("_"), ord("_"))]))
    word, digit = _char_class(WORD), _char_class(DIGIT)
    return re.compile(rf"\$?[{digit}]+(?:[.,][{digit}]+)*|[{letter}](?:[{word}'.\-]*[{word}])?")


def _stand_in(match: re.Match[str]) -> str:
    """A BMP character of the same class as an astral one: a letter, a digit or neither."""
    cp = ord(match.group())
    for ranges, char in ((DIGIT, "0"), (WORD, "a")):
        i = bisect.bisect_right(ranges, (cp, 0x10FFFF)) - 1
        if i >= 0 and ranges[i][0] <= cp <= ranges[i][1]:
            return char
    return " "


def body_words(text: str) -> list[str]:
    """The raw words of ``text`` in order, before length rules and case folding."""
    pattern = _word_pattern()
    if _ASTRAL.search(text) is None:
        return pattern.findall(text)
    masked = _ASTRAL.sub(_stand_in, text)
    return [text[m.start() : m.end()] for m in pattern.finditer(masked)]
