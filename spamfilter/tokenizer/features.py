"""Continuous message features, taken from the tokenizer's own pass.

A message's feature vector has a fixed order (``FEATURE_NAMES``); each value
is a log-count or a share, so every feature lies in [0, ~20] whatever the
message:

    size         log(1 + bytes of the raw message)
    urls         log(1 + URLs: url:scheme: tokens, text and HTML links)
    url_hosts    log(1 + distinct url:host: tokens, parent domains included)
    html         share of the text parts that are text/html, 0 with none
    upper        share of upper-case letters among the ASCII letters of the
                 body text (before case folding, URLs included; HTML as
                 its text), 0 with no letters
    attachments  log(1 + parts that are attachments)
    received     log(1 + Received header lines)

Nothing is parsed twice: the counts come from the token list, the header
list the parser already built, and ``TextShape``, which the tokenizer fills
while it reads the body text.

Values are fixed-point integers, ``round(x * SCALE)``: the model keeps the
sums n, sum x and sum x^2 per class (``spamfilter.nb.gaussian``), and integer
sums make training and untraining exact additions and subtractions, so
forgetting a message restores the stored sums bit for bit (float sums would
not: (a + b) - b is not always a). A step of 1/1024 is far below any
difference between two messages that matters.
"""

from __future__ import annotations

import email.message
import math
from dataclasses import dataclass

#: The features, in the order of every vector.
FEATURE_NAMES: tuple[str, ...] = ("size", "urls", "url_hosts", "html", "upper", "attachments", "received")

#: What each feature's value measures, in the order of ``FEATURE_NAMES``
#: (axis labels of the report's density plots).
FEATURE_UNITS: tuple[str, ...] = (
    "log(1 + bytes)",
    "log(1 + URLs)",
    "log(1 + distinct URL hosts)",
    "share of text parts in HTML",
    "share of upper-case letters",
    "log(1 + attachments)",
    "log(1 + Received lines)",
)

#: Fixed-point scale of the stored values: x is kept as round(x * SCALE).
SCALE = 1024

_UPPER = str.maketrans("", "", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = str.maketrans("", "", "abcdefghijklmnopqrstuvwxyz")


@dataclass(slots=True)
class TextShape:
    """What the tokenizer counts in the body text as it reads it: ASCII
    letters and upper-case ASCII letters."""

    letters: int = 0
    upper: int = 0

    def add(self, text: str) -> None:
        """Count the letters of ``text`` (two C-speed passes, no Python loop)."""
        upper = len(text) - len(text.translate(_UPPER))
        lower = len(text) - len(text.translate(_LOWER))
        self.upper += upper
        self.letters += upper + lower


def message_features(message: email.message.Message, tokens: list[str], size: int, shape: TextShape) -> tuple[int, ...]:
    """The fixed-point feature vector of one message (see the module docstring)."""
    urls = hosts_seen = html = text_types = attachments = 0
    hosts: set[str] = set()
    for token in tokens:
        if not token.startswith(("url:", "content-type:", "attachment:type:")):
            continue
        if token.startswith("url:scheme:"):
            urls += 1
        elif token.startswith("url:host:"):
            hosts.add(token)
        elif token.startswith("content-type:text/"):
            text_types += 1
            html += token == "content-type:text/html"
        elif token.startswith("attachment:type:"):
            attachments += 1
    hosts_seen = len(hosts)
    received = len(message.get_all("received") or ())
    values = (
        math.log1p(size),
        math.log1p(urls),
        math.log1p(hosts_seen),
        html / text_types if text_types else 0.0,
        shape.upper / shape.letters if shape.letters else 0.0,
        math.log1p(attachments),
        math.log1p(received),
    )
    return tuple(round(x * SCALE) for x in values)
