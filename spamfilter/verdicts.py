"""The names of the two classes and the three verdicts: ``Label`` (ham,
spam) and ``Decision`` (spam, ham, unsure).

Plain Python, no numpy: a delivery client that asks a daemon for the
verdict (``spamfilter filter --connect``) names it without loading the
maths.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class Label(IntEnum):
    """A message's class; its value indexes the first axis of every count array."""

    HAM = 0
    SPAM = 1

    @classmethod
    def of(cls, is_spam: bool) -> Label:
        return cls.SPAM if is_spam else cls.HAM

    @property
    def decision(self) -> Decision:
        """The verdict naming this class ("ham", "spam")."""
        return _BY_CODE[self]


class Decision(StrEnum):
    """A verdict: what the filter calls a message. A ``str``, so it prints,
    compares and serialises as its name ("spam", "ham", "unsure")."""

    HAM = "ham"
    SPAM = "spam"
    UNSURE = "unsure"

    @property
    def code(self) -> int:
        """``decision.decide``'s code, also the label stored for IMAP state:
        the class's `Label` for ham and spam, `UNSURE_CODE` for unsure."""
        return _BY_CODE.index(self)

    @classmethod
    def of_code(cls, code: int) -> Decision:
        """Inverse of `code`."""
        return _BY_CODE[code]


#: The code of an unsure verdict, after the two classes'.
UNSURE_CODE = len(Label)
_BY_CODE = (Decision.HAM, Decision.SPAM, Decision.UNSURE)

HAM = Label.HAM
SPAM = Label.SPAM
