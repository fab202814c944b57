"""Read mail from files, folders, mailboxes and TREC indexes; parse and identify it.

Everything here works on raw bytes until `parse_message` hands a stdlib
`email.message.Message` to the tokenizer. The readers only find and split
messages; they never decode or judge them, so a broken message still reaches
`parse_message`, which is the one place that says "this is not mail".

Sources understood by `read_messages`:

- ``-``: standard input, read as a regular file is (below): an mbox when it
  starts with ``From `` (sources ``-:1``, ``-:2``, ...), otherwise one message.
- a Maildir folder (``cur`` and ``new`` subfolders): ``cur`` then ``new``,
  each sorted by file name.
- an MH folder (``.mh_sequences``, or only numeric file names): numeric order.
- any other folder: walked recursively in sorted order; every regular file is
  read as below, and a Maildir or MH folder met on the way is read as such.
- a regular file: an mbox when it starts with ``From `` (split into
  messages, sources ``path:1``, ``path:2``, ...; an mbox holding a single
  message gives it the source ``path``), otherwise one message.

Hidden files and folders (names starting with ``.``) are skipped everywhere.

Examples
--------
>>> for item in read_messages(["inbox.mbox"]):  # doctest: +SKIP
...     msg = parse_message(item, max_bytes=1 << 20)
"""

from __future__ import annotations

from spamfilter.headers import FILTER_HEADERS
from spamfilter.mail.identity import digest_bytes, filter_fields, filtered_pieces, former_digest, with_filter_headers, without_filter_fields, without_mailbox_annotations
from spamfilter.mail.index import read_index
from spamfilter.mail.parse import NestingTooDeepDefect, not_mail, parse_message
from spamfilter.mail.sources import STDIN_SOURCE, MailItem, read_messages

__all__ = [
    "FILTER_HEADERS",
    "STDIN_SOURCE",
    "MailItem",
    "NestingTooDeepDefect",
    "digest_bytes",
    "former_digest",
    "filter_fields",
    "filtered_pieces",
    "not_mail",
    "parse_message",
    "read_index",
    "read_messages",
    "with_filter_headers",
    "without_filter_fields",
    "without_mailbox_annotations",
]
