"""HTML to visible text plus markers, with bounded regular expressions.

Nothing in an HTML part is ever run or fetched: scripts, styles and comments
are dropped, tags are reduced to their names and link targets. Spam hides in
HTML in ways plain text cannot (invisible text, image-only mail, tables of
links), so the tag names themselves are kept as evidence.

Every pattern is linear: tag bodies are bounded ("[^<>]{0,4000}") so a
megabyte-long unterminated tag cannot cause backtracking blow-ups.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

# ASCII case folding only: under Unicode rules "<\u017ftyle>" (long s) matched
# as <style> and, never closed, hid the rest of the part from the filter
# while a browser shows it.
# The tag name must end where a browser ends it (blank, "/" or ">"): with
# "\b", "<style-box>" (a custom element, shown) was taken for a style block.
_DROP_OPEN = re.compile(r"<(script|style|head|title)(?=[\s/>])|<!--", re.IGNORECASE | re.ASCII)
# Possessive "\s*+": with two plain "\s*" around "/?" a "<" followed by
# 40,000 blanks took 22 s (each split of the blanks between them was tried).
_TAG = re.compile(r"<\s*+(/?)\s*+([a-zA-Z][a-zA-Z0-9]{0,15})([^<>]{0,4000})>")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
# html.unescape converts a decimal character reference with int(), and "&#"
# followed by more than 4,300 digits raised ValueError (Python's limit on
# decimal string conversion). Long references are shortened first: leading
# zeros dropped ("&#000000065;" is still "A"), and more than 8 digits cut to
# 8, still past U+10FFFF, which unescape turns into U+FFFD either way.
_LONG_DECIMAL_REF = re.compile(r"&#(\d{9,})")
_LINK_ATTR = re.compile(r"""\b(?:href|src|action|background)\s*=\s*(?:"([^"]{0,2000})"|'([^']{0,2000})'|([^\s>]{1,2000}))""", re.IGNORECASE)

# Tags whose presence is a clue; a whitelist keeps made-up tag names (a spam
# trick to break up words: "V<xyz>iagra") from flooding the vocabulary.
_MARKER_TAGS = frozenset(
    "a img font table td form input iframe object embed map area center b i u strong "
    "blink marquee style script body html base meta div span p br hr ul li h1 h2 h3".split()
)

# Block-level tags end a word; inline tags do not (spam splits words with them).
_BREAKING_TAGS = frozenset("p br div td tr li table h1 h2 h3 h4 h5 h6 hr ul ol title body html blockquote center".split())


@dataclass(frozen=True, slots=True)
class HtmlText:
    """What an HTML part contributes: its visible text, tag names, link targets."""

    text: str
    tags: tuple[str, ...]
    links: tuple[str, ...]


def extract(markup: str) -> HtmlText:
    """Visible text of ``markup`` with entities decoded, the marker tags it uses,
    and the URLs of its links and images (in order, duplicates kept)."""
    body = _drop_blocks(markup)
    tags: set[str] = set()
    links: list[str] = []

    def replace(m: re.Match[str]) -> str:
        name = m.group(2).lower()
        if name in _MARKER_TAGS:
            tags.add(name)
        attrs = m.group(3)
        if attrs and "=" in attrs:
            for lm in _LINK_ATTR.finditer(attrs):
                links.append(_unescape(lm.group(1) or lm.group(2) or lm.group(3) or ""))
        return " " if name in _BREAKING_TAGS else ""

    text = _TAG.sub(replace, body)
    return HtmlText(_unescape(text), tuple(sorted(tags)), tuple(links))


def _unescape(text: str) -> str:
    """``html.unescape`` without its failure on very long decimal references."""
    if "&#" in text:
        text = _LONG_DECIMAL_REF.sub(_shorten_reference, text)
    return html.unescape(text)


def _drop_blocks(markup: str) -> str:
    """Remove scripts, styles, head and comments in one left-to-right pass.

    A block without its end tag runs to the end of the part (as browsers
    treat an unterminated comment); using str.find from the opening keeps
    this linear where a lazy ".*?" regex is quadratic on unclosed blocks.
    """
    # Offsets found in ``lower`` index ``markup``, so the case folding must
    # keep the length: str.lower() turns "\u0130" (the only such character)
    # into two, and each one before a script shifted the cut and ate visible
    # text after it. translate() is 100x slower on non-ASCII text, so it is
    # only the fallback.
    lower = markup.lower()
    if len(lower) != len(markup):
        lower = markup.translate(_ASCII_LOWER)
    pieces: list[str] = []
    pos = 0
    while True:
        m = _DROP_OPEN.search(markup, pos)
        if m is None:
            pieces.append(markup[pos:])
            break
        pieces.append(markup[pos : m.start()])
        pieces.append(" ")
        if m.group(0) == "<!--":
            pos = _comment_end(markup, m.end())
            continue
        name = m.group(1).lower()
        end = lower.find("</" + name, m.end())
        if name == "head":
            # </head> may be left out: the body starts at <body> all the same.
            body = lower.find("<body", m.end(), len(lower) if end < 0 else end)
            if body >= 0:
                pos = body
                continue
        if end < 0:
            break
        gt = lower.find(">", end)
        pos = len(markup) if gt < 0 else gt + 1
    return "".join(pieces)


def _comment_end(markup: str, start: int) -> int:
    """Where the comment whose "<!--" ends at ``start`` ends, as a browser
    reads it: "<!-->" and "<!--->" are whole (empty) comments, "--!>"
    closes one as "-->" does, and one never closed runs to the end."""
    if markup.startswith(">", start):
        return start + 1
    if markup.startswith("->", start):
        return start + 2
    ends = [i for i in (markup.find("-->", start), markup.find("--!>", start)) if i >= 0]
    if not ends:
        return len(markup)
    end = min(ends)
    return end + (3 if markup.startswith("-->", end) else 4)


def _shorten_reference(m: re.Match[str]) -> str:
    return "&#" + (m.group(1).lstrip("0")[:8] or "0")
