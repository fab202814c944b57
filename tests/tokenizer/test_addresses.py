"""Addresses in body text are found around each "@" (``sub_addresses``)
exactly as the address pattern run over the whole text finds them."""

from __future__ import annotations

import random
import re

from spamfilter.tokenizer import _EMAIL, sub_addresses


def both(text: str) -> tuple[tuple[str, list[str]], tuple[str, list[str]]]:
    found: list[list[str]] = [[], []]

    def keep(i: int) -> object:
        def repl(m: re.Match[str]) -> str:
            found[i].append(m.group(0))
            return " "

        return repl

    whole = _EMAIL.sub(keep(0), text)  # type: ignore[arg-type]
    near = sub_addresses(text, keep(1))  # type: ignore[arg-type]
    return (whole, found[0]), (near, found[1])


def test_addresses_at_the_pattern_s_limits_are_found_as_the_whole_text_search_finds_them() -> None:
    label = "d" * 63
    longest = "@" + ".".join([label] * 9)  # one label more than the pattern takes
    cases = [
        "mail bob@example.com or ann.lee+x@mail.example.org today",
        "x" * 64 + "@a.bc",  # the longest local part
        "x" * 65 + "@a.bc",  # one more: the match starts a character later, mid-word
        "ab" + longest + " tail",
        "a@b.c@d.e f@g.h",  # a second "@" right after a match
        "a@b@c.d",  # the first "@" has no match, the second has
        "é@ü.de _@_._ -a@b.c .@x.y",
        "no address @ all, an @ sign and a@b",
        "user@host" + ".x" * 20,
        "@@@a@@b.c",
    ]
    for text in cases:
        whole, near = both(text)
        assert near == whole, text
    assert both("ab" + longest)[0][1] == ["ab@" + ".".join([label] * 9)[: 63 + 8 * 64]]


def test_random_text_gives_the_same_addresses() -> None:
    rng = random.Random(7)
    pieces = ["a", "b", "é", "_", "1", ".", "+", "-", "@", " ", "\n", "x.y", "@c.d", "@-", ".@", "a" * 30, "b" * 70]
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        whole, near = both(text)
        assert near == whole, text


class _Counting:
    """A pattern that counts the characters its searches and matches were
    given to look at (endpos - pos)."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.looked = 0

    def search(self, text: str, pos: int = 0, endpos: int | None = None) -> re.Match[str] | None:
        end = len(text) if endpos is None else min(endpos, len(text))
        self.looked += end - pos
        return self.pattern.search(text, pos, end)

    def match(self, text: str, pos: int = 0, endpos: int | None = None) -> re.Match[str] | None:
        end = len(text) if endpos is None else min(endpos, len(text))
        self.looked += min(end - pos, 64 + 1 + 63 + 8 * 64)  # an anchored match reads at most an address
        return self.pattern.match(text, pos, end)


def test_a_body_dense_with_at_signs_is_not_searched_around_each_one(monkeypatch: object) -> None:
    # "a@a@a@..." had the pattern searched over 600 characters around each
    # "@" (10 s for a 200 KB body, in the daemon too); an "@" without a
    # domain after it is now looked at no further.
    import pytest

    import spamfilter.tokenizer as tokenizer

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    for body, most in (("a@" * 20_000, 0), ("-@a.b " * 5_000, 10 * 5_000), ("é@" * 20_000, 0)):
        counting = _Counting(tokenizer._EMAIL)
        monkeypatch.setattr(tokenizer, "_EMAIL", counting)
        assert sub_addresses(body, lambda m: " ") == tokenizer._EMAIL.pattern.sub(" ", body)
        monkeypatch.undo()
        assert counting.looked <= most, (body[:6], counting.looked)
