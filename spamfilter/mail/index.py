"""Read a TREC spam-track index: the labelled messages of a corpus, by path."""

from __future__ import annotations

import os
from collections.abc import Iterator

from spamfilter.errors import MailSourceError
from spamfilter.mail.lines import line_pieces
from spamfilter.mail.sources import MailItem, is_device, mbox_messages, read_whole_or_refuse, starts_with_envelope


def read_index(index_path: str) -> Iterator[tuple[bool, MailItem]]:
    """Yield ``(is_spam, item)`` for each line of a TREC spam-track index.

    Each non-empty line is ``spam <path>`` or ``ham <path>`` (label in any
    case), the path relative to the index file's folder. The path is the rest
    of the line after the first run of whitespace, so it may contain spaces;
    trailing whitespace is dropped, as it is far more often an editing slip
    than part of a file name.

    The whole index is checked (syntax, that every message file exists and
    that no file is listed twice) before the first message is read, so a broken index fails before an
    hour-long evaluation instead of during it.

    An index line names one message, so a message file is never split: a
    file that starts with an mbox envelope line (as mail saved from an mbox
    does) has that line removed and mboxrd quoting undone, giving the same
    bytes as `read_messages` gives for ``path:1``. The item's source is the
    path as written, joined to the index's folder.

    Parameters
    ----------
    index_path : str
        The index file.

    Returns
    -------
    iterator of (bool, MailItem)
        In index order; the bool is True for spam.

    Raises
    ------
    MailSourceError
        At call time when the index cannot be read, a line is malformed
        (the message names file and line number), a message file is
        missing, or a file is listed twice (with one label or with both:
        either would train or measure it twice). A message file that cannot be read when its turn comes
        (no permission, or removed since) is an item to refuse
        (``unreadable_reason``), and the rest is still read.

    Examples
    --------
    >>> for is_spam, item in read_index("corpora/spamassassin/index"):  # doctest: +SKIP
    ...     print(is_spam, item.source)
    True corpora/spamassassin/spam_2/00159.6b641c70d79fd5a69b84a94b4e88150a
    """
    entries = _load_index(index_path)
    return _iter_index(entries)


def _load_index(index_path: str) -> list[tuple[bool, str]]:
    """Read and check a whole index: labels, syntax, message files present."""
    entries: list[tuple[bool, str]] = []
    first_line: dict[str, int] = {}
    folder = os.path.dirname(index_path)
    try:
        if is_device(index_path):
            raise MailSourceError(f"index {index_path!r} is a device or socket, not a file or pipe")
        with open(index_path, "rb") as f:
            lines = f.read().removeprefix(b"\xef\xbb\xbf").splitlines()  # a UTF-8 byte-order mark is no part of a label
    except OSError as err:
        raise MailSourceError(f"cannot read index {index_path!r}: {err.strerror}") from err
    for lineno, line in enumerate(lines, start=1):
        parts = line.split(None, 1)
        if not parts:
            continue
        label = parts[0].lower()
        if len(parts) != 2 or label not in (b"spam", b"ham"):
            text = line.decode("utf-8", "replace")
            raise MailSourceError(f"{index_path}:{lineno}: malformed index line {text!r}: expected 'spam <path>' or 'ham <path>'")
        # fsdecode: file names are bytes to the OS; surrogateescape keeps
        # names that are not valid UTF-8 openable.
        path = os.path.join(folder, os.fsdecode(parts[1].rstrip()))
        if not os.path.isfile(path):
            raise MailSourceError(f"{index_path}:{lineno}: message file {path!r} {_not_a_file(path)}")
        seen = first_line.setdefault(os.path.realpath(path), lineno)
        if seen != lineno:
            raise MailSourceError(f"{index_path}:{lineno}: message file {path!r} is listed again (first on line {seen}): an index names each message once")
        entries.append((label == b"spam", path))
    return entries


def _not_a_file(path: str) -> str:
    """What an index entry that is not a regular file is instead."""
    if os.path.isdir(path):
        return "is a folder, not a message file"
    if os.path.exists(path):
        return "is not a regular file"
    if os.path.islink(path):
        return "is a link to nothing, or a link in a loop"
    return "does not exist"


def _iter_index(entries: list[tuple[bool, str]]) -> Iterator[tuple[bool, MailItem]]:
    for is_spam, path in entries:
        yield is_spam, _read_index_message(path)


def _read_index_message(path: str) -> MailItem:
    try:
        with open(path, "rb") as f:
            if starts_with_envelope(f):
                # The mbox reader's lines (LF), not `delivered`'s (any of
                # CR, LF, CRLF): the two differ on a lone CR inside a line,
                # and an index's messages keep the bytes they were trained with.
                return next(mbox_messages(line_pieces(f), path, split=False))
            return read_whole_or_refuse(f, path)
    except OSError as err:
        # Listed and found when the index was read, unreadable now (no
        # permission, or removed since): refused like an unreadable file
        # in a folder, and the rest of the index is still read.
        return MailItem(path, b"", unreadable=err.strerror or str(err))
