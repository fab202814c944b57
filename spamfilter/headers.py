"""Header fields that say nothing of a message itself.

Two modules that may not import each other need them: ``mail`` leaves them
out of a message's digest, and ``tokenizer`` takes no evidence from them.

- ``FILTER_HEADERS``: the fields spamfilter writes into the mail it
  filters. A filtered message keeps the identity it had before, and the
  filter does not learn from its own verdicts (or a filtered message would
  vouch for itself).
- ``MAILBOX_HEADERS``: the fields a mail store or client writes into a
  stored message to keep its state in the mailbox (read, replied, flagged,
  its IMAP UID and keywords, its length in an mbox file). They come and go
  while the message sits in a folder: a message classified on delivery has
  none of them, the same message trained later from the folder where it was
  read has them, and marking it read changes them. So they are neither part
  of its identity (``train`` and ``mark`` find it whatever its state) nor
  evidence: in a corpus they say how its collector kept each class (in
  csdmc2010 ``X-Mozilla-Status: 0001`` is on 763 spam and 3 ham, ``0000``
  on 1,206 ham and 1 spam). SpamAssassin's Bayes
  ignores the same annotations ("Annotations from IMAP, POP, and MH").
"""

from __future__ import annotations

from typing import Final

#: The fields, as written; matched in any case.
FILTER_HEADERS: Final = ("X-Spam-Status", "X-Spam-Score", "X-Spam-Flag")

#: Mailbox annotations (see the module docstring): mbox and MH state
#: (Status, X-Status, Content-Length, Lines, Replied, Forwarded), IMAP state
#: in mbox files (X-UID, X-Keywords, X-IMAP, X-IMAPbase, X-Flags, X-UIDL)
#: and Thunderbird's (X-Mozilla-Status, X-Mozilla-Status2, X-Mozilla-Keys).
MAILBOX_HEADERS: Final = (
    "Status",
    "X-Status",
    "Content-Length",
    "Lines",
    "Replied",
    "Forwarded",
    "X-UID",
    "X-UIDL",
    "X-Keywords",
    "X-IMAP",
    "X-IMAPbase",
    "X-Flags",
    "X-Mozilla-Status",
    "X-Mozilla-Status2",
    "X-Mozilla-Keys",
)
