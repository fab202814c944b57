"""Where mail comes from: files, mboxes, Maildir and MH folders, TREC
indexes and standard input, read into `MailItem` values (see the package's
docstring for the sources understood)."""

from __future__ import annotations

import io
import itertools
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO, Final, Literal

from spamfilter.errors import MailSourceError
from spamfilter.mail.identity import _ENVELOPE_PREFIX, _LINE_BREAK_RE, digest_bytes
from spamfilter.mail.lines import LINE_PIECE, cr_pieces, line_pieces

#: The path that means "one message on standard input", and that message's source.
STDIN_SOURCE: Final = "-"

# An mbox envelope line in the usual asctime form, e.g.
# "From MAILER-DAEMON Fri Jul  8 12:08:34 2011". A "From " line that is not
# preceded by a blank line only starts a new message when it looks like this:
# careless writers (and mboxes glued together by hand) leave body lines such
# as "From now on, ..." unquoted, and splitting on those would cut real
# messages in two, while an envelope line is rarely typed into a body.
_ENVELOPE_RE: Final = re.compile(
    rb"From \S+ +(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) +"
    rb"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} +\d{1,2}:\d\d"
)

#: The most of one message a file, folder or mbox gives (`filter` reads as
#: much): a longer one is refused unread and the run goes on. An 800 MB
#: file took 868 MB, and under a memory limit ended the run before the
#: messages after it. One message on standard input (a pipe of a mail
#: server, learn on move) is read whole.
MAX_MESSAGE_BYTES: Final = 64 << 20
_TOO_LONG: Final = f"larger than {MAX_MESSAGE_BYTES >> 20} MiB, not read"

_BLANK_LINES: Final = (b"\n", b"\r\n")
#: The blank line of an mbox whose lines end in CR alone (`mbox_messages`).
_CR_BLANK: Final = (b"\r",)
#: A ">" before any more ">" and "From ": the one mboxrd quoting put there
#: when it starts a line (`_unquote_lines`). The pattern starts with the
#: character, so the search skips to each ">" (a lookbehind first made it
#: try every byte: 20 times slower).
_QUOTED_FROM_RE: Final = re.compile(rb">(?=>*From )")

# UW-IMAP (c-client, Pine) keeps folder state in a pseudo-message at the top of
# an mbox: "Subject: DON'T DELETE THIS MESSAGE -- FOLDER INTERNAL DATA" with an
# X-IMAP header. It is not mail and would be learnt as ham; the Nazario
# phishing corpus dropped it when splitting its mboxes (phishing1.mbox starts
# with one), so read_messages drops it too.
_UW_IMAP_RE: Final = re.compile(rb"^X-IMAP(?:base)?:", re.MULTILINE)
_UW_IMAP_SUBJECT_RE: Final = re.compile(rb"^Subject:[^\n]*FOLDER INTERNAL DATA", re.MULTILINE)

_DirKind = Literal["maildir", "mh", "plain"]


@dataclass(frozen=True, slots=True)
class MailItem:
    """One message as read from a source, not yet parsed.

    Attributes
    ----------
    source : str
        Where the message came from, for people: the file path; ``path:N`` for
        the N-th message (1-based) of an mbox file holding more than one
        (``-:N`` on standard input); ``-`` for one message on standard
        input; ``folder/cur/name`` for a Maildir message.
    raw : bytes
        The message bytes. For a message split out of an mbox the envelope
        (``From ``) line is removed and mboxrd quoting undone; otherwise the
        bytes are exactly those stored.
    known_digest : str or None
        ``digest_bytes(raw)`` when the reader has computed it already (the
        IMAP sync looks messages up by digest before it classifies them),
        so that no message is hashed twice.
    """

    source: str
    # Left out of repr: a message can be megabytes, and items end up in
    # assertion messages and tracebacks.
    raw: bytes = field(repr=False)
    known_digest: str | None = field(default=None, repr=False, compare=False)
    #: Why a file found inside a folder could not be read (its ``raw`` is
    #: then empty): the message is refused when parsed, and the run goes on.
    unreadable: str | None = field(default=None, repr=False, compare=False)

    @property
    def unreadable_reason(self) -> str | None:
        """Why the message is refused unread ("<source>: cannot read it:
        <why>"), or None for a message that was read."""
        return None if self.unreadable is None else f"{self.source}: cannot read it: {self.unreadable}"

    @property
    def digest(self) -> str:
        """The message's identity, ``digest_bytes(self.raw)``."""
        return self.known_digest if self.known_digest is not None else digest_bytes(self.raw)


def read_messages(
    paths: Sequence[str], *, stdin: BinaryIO | None = None, on_empty: Callable[[str], None] | None = None, stdin_is_one: bool = False
) -> Iterator[MailItem]:
    """Yield every message found in `paths`, one at a time, in a stable order.

    All paths are checked before anything is read, so a mistyped path fails
    at once instead of after minutes of work. Only one message is held in
    memory at a time, also when splitting a large mbox file.

    Parameters
    ----------
    paths : sequence of str
        Files, folders or ``-`` (see the module docstring for what each kind
        of path yields). ``-`` may be given at most once.
    stdin : binary stream, optional
        What ``-`` reads; ``sys.stdin.buffer`` if None. Like a file, it is an
        mbox when its first line is an envelope (``From ``) line, and split
        into messages ``-:1``, ``-:2``, ... (``-`` when it holds one);
        otherwise it is one message, its bytes kept as they are.
    on_empty : callable, optional
        Called with each path that turned out to hold no message (an empty
        folder or file), once its reading is over, so a caller can warn.
    stdin_is_one : bool
        ``-`` is one message even when its first line is an envelope line
        (what a mail server's pipe gives: one message, which may begin with
        ``From `` and hold more such lines in its body).

    Returns
    -------
    iterator of MailItem

    Raises
    ------
    MailSourceError
        At call time when a path does not exist, cannot be read or ``-``
        is repeated; while iterating when a file cannot be read.
    TypeError
        `paths` is a single string instead of a sequence of them.

    Examples
    --------
    >>> [item.source for item in read_messages(["box.mbox"])]  # doctest: +SKIP
    ['box.mbox:1', 'box.mbox:2']
    """
    # A lone str is a Sequence[str] too, and would be read letter by letter.
    if isinstance(paths, str):
        raise TypeError("read_messages takes a sequence of paths, not one path string")
    if list(paths).count(STDIN_SOURCE) > 1:
        raise MailSourceError("standard input ('-') can be read only once; give it once")
    for path in paths:
        if path != STDIN_SOURCE:
            _check_readable(path)
    return _iter_sources(list(paths), stdin, on_empty, stdin_is_one)


def _is_device_mode(mode: int) -> bool:
    """Whether a file of ``mode`` is a character or block device or a socket
    (which never end, like /dev/zero, or hold no mail)."""
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode)


def is_device(path: str) -> bool:
    """`_is_device_mode` of ``path``; False if it cannot be looked at
    (opening it then says why)."""
    try:
        return _is_device_mode(os.stat(path).st_mode)
    except OSError:
        return False


def is_device_stream(stream: BinaryIO) -> bool:
    """Whether ``stream`` reads a character or block device other than a
    terminal or /dev/null (False for a pipe, a file, or a stream with no
    descriptor)."""
    try:
        fd = stream.fileno()
        st = os.fstat(fd)
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)) or os.isatty(fd):
            return False
        return st.st_rdev != os.stat(os.devnull).st_rdev  # /dev/null ends at once: an empty input
    except (OSError, ValueError, AttributeError):
        return False


def _check_readable(path: str) -> None:
    """Raise MailSourceError unless `path` exists and can be read."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise MailSourceError(f"mail source {path!r} cannot be read: {err.strerror}") from err
    if _is_device_mode(mode):
        # /dev/zero never ends and a disk is not a mailbox; a pipe
        # (`<(zcat box.gz)`) is read, and standard input is "-".
        raise MailSourceError(f"mail source {path!r} is a device or socket, not a file, folder or pipe")
    # A folder must also be searchable (x) to list and open what is in it.
    needed = os.R_OK | os.X_OK if stat.S_ISDIR(mode) else os.R_OK
    if not os.access(path, needed):
        raise MailSourceError(f"mail source {path!r} cannot be read: permission denied")


def _iter_sources(paths: list[str], stdin: BinaryIO | None, on_empty: Callable[[str], None] | None, stdin_is_one: bool) -> Iterator[MailItem]:
    for path in paths:
        found = False
        for item in _iter_source(path, stdin, stdin_is_one):
            found = True
            yield item
        if not found and on_empty is not None:
            on_empty(path)


def _iter_source(path: str, stdin: BinaryIO | None, stdin_is_one: bool = False) -> Iterator[MailItem]:
    if path == STDIN_SOURCE:
        # Looked up here, not as a default argument, so tests and callers
        # that replace sys.stdin are honoured.
        stream = sys.stdin.buffer if stdin is None else stdin
        if is_device_stream(stream):
            # `spamfilter classify - < /dev/zero` read for ever; a terminal
            # is a device too, and the commands say so before reading.
            raise MailSourceError("standard input is a device, not a message or a mailbox")
        try:
            # A pipe cannot be rewound, so the first line is read and
            # put back in front (sa-learn --mbox and bogofilter -M split
            # stdin; here the envelope line alone says so).
            first = stream.readline(LINE_PIECE)
            if not first and not stdin_is_one:
                return  # an empty mailbox: no message (the caller warns)
            if first.startswith(_ENVELOPE_PREFIX) and not stdin_is_one:
                yield from mbox_messages(itertools.chain([first], line_pieces(stream)), STDIN_SOURCE)
            else:
                # One message: with an envelope line (a Maildir file piped
                # in) read as `filter` and a Maildir folder read it, so it
                # has the same digest.
                yield delivered(STDIN_SOURCE, _read_rest(first, stream))
        except OSError as err:
            raise MailSourceError(f"cannot read standard input: {err}") from err
    elif os.path.isdir(path):
        yield from _read_dir(path)
    elif _is_empty_file(path):
        # A file named on the command line with nothing in it holds no
        # message (the caller warns, and exits 66 if no source held one);
        # so does one in a plain folder (an mbox folder's empty Trash or
        # Sent); in a Maildir or MH folder, an empty file is a message
        # file with nothing in it, refused like other non-mail.
        return
    else:
        yield from _read_file(path)


def _read_rest(first: bytes, stream: BinaryIO) -> bytes:
    """``first`` and the rest of ``stream``, holding one copy of the message
    (``first + stream.read()`` held two at once: a 150 MB message moved
    into Junk ran out of a mail server's 512 MB per-process limit)."""
    buffer = io.BytesIO()
    buffer.write(first)
    while chunk := stream.read(1 << 20):
        buffer.write(chunk)
    return buffer.getvalue()  # the buffer's own bytes, not a copy


def _is_empty_file(path: str) -> bool:
    try:
        return os.path.isfile(path) and os.path.getsize(path) == 0
    except OSError:
        return False


def _read_dir(path: str, at_root: bool = True) -> Iterator[MailItem]:
    kind = _dir_kind(path)
    yield from _walk(path, at_root) if kind == "plain" else _read_mail_folder(path, kind)


def _read_mail_folder(path: str, kind: _DirKind) -> Iterator[MailItem]:
    """A Maildir or MH folder's messages."""
    return _read_maildir(path) if kind == "maildir" else _read_mh(path)


def _list_dir(path: str) -> list[os.DirEntry[str]]:
    """The non-hidden entries of a folder, sorted by name."""
    try:
        with os.scandir(path) as entries:
            return sorted((e for e in entries if not e.name.startswith(".")), key=lambda e: e.name)
    except OSError as err:
        raise MailSourceError(f"cannot list mail folder {path!r}: {err.strerror}") from err


def _dir_kind(path: str) -> _DirKind:
    """Tell a Maildir or MH folder from an ordinary one by its layout."""
    if os.path.isdir(os.path.join(path, "cur")) and os.path.isdir(os.path.join(path, "new")):
        return "maildir"
    if os.path.isfile(os.path.join(path, ".mh_sequences")):
        return "mh"
    entries = _list_dir(path)
    # An MH folder need not have .mh_sequences (nmh writes it only once a
    # sequence exists); a folder holding only files named 1, 2, 3... reads the
    # same as MH or not, except that numeric order is the better one. Not
    # when one of them starts with an envelope line: mboxes named by year
    # (2019, 2020) are read as mboxes, not each as one message.
    if entries and all(_is_mh_number(e.name) and _is_file(e) for e in entries) and not any(_starts_an_mbox(e.path) for e in entries):
        return "mh"
    return "plain"


def _starts_an_mbox(path: str) -> bool:
    """Whether the file at ``path`` starts with an mbox envelope line."""
    try:
        with open(path, "rb") as f:
            return starts_with_envelope(f)
    except OSError:
        return False


def _is_file(entry: os.DirEntry[str]) -> bool:
    """``entry.is_file()``, True where asking fails (a link in a loop, or
    into a folder this user cannot search): reading it then refuses it as
    an unreadable file, and the rest of the folder is still read."""
    try:
        return entry.is_file()
    except OSError:
        return not entry.is_dir(follow_symlinks=False)


def _read_maildir(path: str) -> Iterator[MailItem]:
    # tmp holds deliveries in progress, so it is never read. Each Maildir file
    # is one message by definition, so a file starting with "From " is not
    # split; it is read as a delivered message (`delivered`: the envelope
    # line removed, mboxrd quoting undone), so it has the digest it has in
    # the mbox it was copied from, or as a file of its own.
    for sub in ("cur", "new"):
        try:
            entries = _list_dir(os.path.join(path, sub))
        except MailSourceError as err:
            yield _unlisted(os.path.join(path, sub), err)
            continue
        for entry in entries:
            if _is_file(entry):
                yield _item_in_folder(entry.path)


def _is_mh_number(name: str) -> bool:
    # isdigit() alone accepts "²" and other Unicode digits that int() refuses.
    return name.isascii() and name.isdigit()


def _read_mh(path: str) -> Iterator[MailItem]:
    # Non-numeric names in an MH folder are bookkeeping (.mh_sequences),
    # deleted messages (",12") or subfolders: none is a message here.
    numbered = [e for e in _list_dir(path) if _is_mh_number(e.name) and _is_file(e)]
    for entry in sorted(numbered, key=lambda e: int(e.name)):
        yield _item_in_folder(entry.path)


#: Files a mail program keeps beside the mailboxes, by name: Thunderbird's
#: filter rules and POP state, Dovecot's UID and keyword lists.
_BOOKKEEPING: Final = frozenset({"msgFilterRules.dat", "popstate.dat", "dovecot-uidlist", "dovecot-keywords"})


def _is_bookkeeping(name: str, at_root: bool) -> bool:
    """Whether a file in a mail folder is a mail program's own, not mail:
    Thunderbird's summary files (``Inbox.msf`` beside the ``Inbox`` mbox)
    and the files of `_BOOKKEEPING`, Dovecot's indexes
    (``dovecot.index``, ``dovecot.index.log``, ``dovecot.list.index``...)
    and UID validity file, and, in the folder walked itself, the folder
    list of Dovecot's and UW-IMAP's mbox layout (``subscriptions``). An
    mbox may be named ``dovecot-users`` (a mailing list's): names are
    matched whole or by these prefixes only."""
    return (
        name.endswith(".msf")
        or name in _BOOKKEEPING
        or name.startswith(("dovecot.index", "dovecot.list.index", "dovecot-uidvalidity"))
        or (at_root and name == "subscriptions")
    )


#: A line of a TREC spam-track index: a label and the path of a message.
_TREC_LINE: Final = re.compile(rb"(?i)(spam|ham)[ \t]+\S[^\r\n]*")


def _is_trec_index(path: str) -> bool:
    """Whether the file at ``path``, named ``index...``, is the labels of a
    corpus (``spam data/inmail.1`` lines), not a message: such a folder is
    read with ``--index``, and its index file is not mail to score."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    lines = head.splitlines()
    if len(head) == 4096:
        lines = lines[:-1]  # the last may be cut short
    return bool(lines) and all(_TREC_LINE.fullmatch(line) for line in lines)


def _walk(path: str, at_root: bool = True) -> Iterator[MailItem]:
    """The mail of a plain folder and the folders in it, depth first in
    name order; the folders being read are kept on a list, not in nested
    calls, so a tree thousands of folders deep is read like any other
    (nested generators ran out of Python's recursion limit at about 450)."""
    folders = [iter(_list_dir(path))]
    while folders:
        entry = next(folders[-1], None)
        if entry is None:
            folders.pop()
            continue
        root = at_root and len(folders) == 1
        if _is_bookkeeping(entry.name, root) and not entry.is_dir(follow_symlinks=False):
            continue
        if entry.name.startswith("index") and entry.is_file(follow_symlinks=False) and _is_trec_index(entry.path):
            continue
        # Symlinked folders are not followed (as in os.walk): a link back up
        # the tree would otherwise read the same mail forever.
        if entry.is_dir(follow_symlinks=False):
            try:
                kind = _dir_kind(entry.path)
                if kind == "plain":
                    folders.append(iter(_list_dir(entry.path)))
                else:
                    yield from _read_mail_folder(entry.path, kind)
            except MailSourceError as err:
                # A subfolder that cannot be listed (no permission, or
                # deleted by a mail client meanwhile) is refused like an
                # unreadable file: the rest of the tree is still read.
                yield _unlisted(entry.path, err)
        elif _is_file(entry):
            if not _is_empty_file(entry.path):  # an empty mailbox holds no message
                try:
                    yield from _read_file(entry.path)
                except MailSourceError as err:
                    yield _unlisted(entry.path, err)
        elif entry.is_symlink() and not os.path.exists(entry.path):
            # A link to nothing is a file that cannot be read: refused,
            # not passed over without a word.
            yield MailItem(entry.path, b"", unreadable="a link to a file that does not exist")


def _unlisted(path: str, err: MailSourceError) -> MailItem:
    """An item to refuse for a file or subfolder of a folder being read
    that could not be read or listed."""
    return MailItem(path, b"", unreadable=str(err.__cause__.strerror if isinstance(err.__cause__, OSError) else err))


def delivered(source: str, raw: bytes) -> MailItem:
    """One message as a delivery agent hands it over (procmail's pipe,
    spamc): without the mbox envelope line a local delivery may put first
    (and with mboxrd quoting undone), as reading the same message from a
    mailbox file gives it, so it scores, and is known by its digest, the
    same however it came. A message that is nothing but that line is empty."""
    if not raw.startswith(_ENVELOPE_PREFIX):
        return MailItem(source, raw)
    # What `mbox_messages` makes of a file of one message, on the bytes
    # rather than a list of their lines: 10 MB of empty lines made 10
    # million line objects, 900 MB for one message (a TELL may carry 64 MiB).
    brk = _LINE_BREAK_RE.search(raw)
    if brk is None:
        return MailItem(source, b"")
    message = _unquote_lines(memoryview(raw)[brk.end() :], cr_lines=brk.group() == b"\r")
    # The blank line at the end belongs to no message (`_Gathered.finish`): a line
    # that is only its line break, CR alone in a file whose lines end so.
    last = b"\r\n" if message.endswith(b"\r\n") else message[-1:]
    at = len(message) - len(last)
    if last in (_CR_BLANK if brk.group() == b"\r" else _BLANK_LINES) and (at == 0 or message[at - 1] in b"\r\n"):
        message = message[:at]
    return MailItem(source, message)


def _unquote_lines(data: bytes | memoryview, *, cr_lines: bool = False) -> bytes:
    """Undo one level of mboxrd quoting on every line of ``data`` at once
    (`_unquote` of each line). Lines end at LF, as `mbox_messages` reads
    them, or at CR alone with ``cr_lines`` (a file whose lines end so): a
    lone CR inside an LF line starts no line there, so ``a\\r>From`` keeps
    its ">" as it does in an mbox, and the message keeps its digest."""
    starts = (10, 13) if cr_lines else (10,)

    def unquoted(m: re.Match[bytes]) -> bytes:
        at = m.start()
        return b"" if at == 0 or data[at - 1] in starts else b">"

    return _QUOTED_FROM_RE.sub(unquoted, data)


def _item_in_folder(path: str) -> MailItem:
    """One message file found in a Maildir or MH folder, read as `delivered`
    (an envelope line and its quoting undone). One that cannot be read (no
    permission, or renamed by a mail client since the folder was listed)
    is an item to refuse, not the end of the run: the folder itself was
    readable."""
    try:
        with open(path, "rb") as f:
            item = read_whole_or_refuse(f, path)
    except OSError as err:
        return MailItem(path, b"", unreadable=err.strerror or str(err))
    return item if item.unreadable is not None else delivered(path, item.raw)


def starts_with_envelope(f: io.BufferedReader) -> bool:
    """Whether a file just opened starts with an mbox envelope line.

    A regular file is sniffed below its buffer and rewound: after a peek,
    ``f.read()`` joined the buffered bytes to the rest, two copies of a 50 MB
    message at once. A pipe (e.g. ``<(zcat box.gz)``) cannot rewind, so it is
    peeked.
    """
    if f.seekable():
        head = f.raw.read(len(_ENVELOPE_PREFIX))
        f.raw.seek(0, io.SEEK_SET)
        return head == _ENVELOPE_PREFIX
    return f.peek(len(_ENVELOPE_PREFIX)).startswith(_ENVELOPE_PREFIX)


def _read_file(path: str) -> Iterator[MailItem]:
    """Yield the messages of one file: several for an mbox, else one."""
    try:
        with open(path, "rb") as f:
            if starts_with_envelope(f):
                yield from mbox_messages(line_pieces(f), path)
            else:
                yield read_whole_or_refuse(f, path)
    except OSError as err:
        raise MailSourceError(f"cannot read mail file {path!r}: {err.strerror}") from err


def _unquote(line: bytes) -> bytes:
    """Undo one level of mboxrd quoting: ">From " -> "From ", ">>From " -> ">From "."""
    if line.startswith(b">") and line.lstrip(b">").startswith(_ENVELOPE_PREFIX):
        return line[1:]
    return line


def mbox_messages(lines: Iterable[bytes], path: str, *, split: bool = True) -> Iterator[MailItem]:
    """Split mbox lines (envelope line first) into messages.

    Lines are read one at a time and only the current message is kept, so
    the size of the mbox does not matter. A ``From `` line starts a new
    message when it follows a blank line, or when it looks like an envelope
    line (`_ENVELOPE_RE`) even without one. A UW-IMAP folder-data
    pseudo-message in first place is skipped; later messages keep their
    position in the file as their number, and a file that yields a single
    message names it `path` alone. With ``split=False`` the first envelope
    line is dropped and every later line is message content, for a file
    known to hold one message; the source is then `path` alone too.

    An mbox whose lines end in CR alone (old Mac mail programs) is split
    on CR (`cr_pieces`), and its blank line is a lone CR: split on LF
    alone, every message in it was refused as empty. A line may come in
    pieces (`line_pieces`): the rest of a line is never a line start.
    """
    it = iter(lines)
    first = next(it, None)
    if first is None:
        return
    cr_only = b"\r" in first.removesuffix(b"\r\n")
    blank = _CR_BLANK if cr_only else _BLANK_LINES
    ends = (b"\r", b"\n") if cr_only else (b"\n",)
    count = yielded = 0
    current: _Gathered | None = None  # None until the first envelope line
    prev_blank = at_line_start = True
    in_envelope = False  # in the rest of a long envelope line
    for line in cr_pieces(itertools.chain([first], it)) if cr_only else itertools.chain([first], it):
        starts_line, at_line_start = at_line_start, line.endswith(ends)
        if not starts_line:
            # The rest of a line longer than LINE_PIECE: content (or the
            # envelope line's), and not a blank line.
            prev_blank, last = False, b""
            if current is None or in_envelope:
                continue
        elif line.startswith(_ENVELOPE_PREFIX) and (split or current is None) and (prev_blank or _ENVELOPE_RE.match(line) is not None):
            if current is not None:
                count += 1
                raw = current.finish(blank)
                if not (count == 1 and _is_uw_imap_folder_data(raw)):
                    yielded += 1
                    yield _whole_or_refused(f"{path}:{count}", raw, current.too_long)
            current, prev_blank, in_envelope = _Gathered(), False, not at_line_start
            continue
        else:
            in_envelope = False
            if current is None:
                current = _Gathered()  # text before the first envelope line: callers pass none
            prev_blank = line in blank
            line = last = _unquote(line) if line[:1] == b">" else line
        # Added here, not by a method: a call a line was most of the reading.
        current.last = last
        if not current.too_long:
            current.data += line
            if len(current.data) > MAX_MESSAGE_BYTES:
                current.too_long, current.data = True, bytearray()
    if current is not None:
        count += 1
        raw = current.finish(blank)
        if not split or yielded == 0:
            if not (split and count == 1 and _is_uw_imap_folder_data(raw)):
                yield _whole_or_refused(path, raw, current.too_long)
        else:
            yield _whole_or_refused(f"{path}:{count}", raw, current.too_long)


class _Gathered:
    """One message of an mbox as its lines come (`mbox_messages` adds
    them): its bytes (not a list of its lines: a line object each made a
    message of 10 MB of empty lines cost 900 MB), dropped once past
    `MAX_MESSAGE_BYTES` (``too_long``: it is refused at its end), and its
    last line (the rest of a long line counts as none: not a blank line)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.too_long = False
        self.last = b""

    def finish(self, blank: tuple[bytes, ...]) -> bytes:
        """The message's bytes. The blank line before the next envelope
        line (or at the end of the file) separates messages and belongs to
        none of them, as in Python's mailbox."""
        if self.last in blank:
            del self.data[-len(self.last) :]
        return bytes(self.data)


def read_whole_or_refuse(f: BinaryIO, path: str) -> MailItem:
    """The one message of an open file, or one refused unread when it is
    longer than `MAX_MESSAGE_BYTES` (only that much more is read)."""
    raw = f.read(MAX_MESSAGE_BYTES + 1)
    return _whole_or_refused(path, raw, len(raw) > MAX_MESSAGE_BYTES)


def _whole_or_refused(source: str, raw: bytes, too_long: bool) -> MailItem:
    return MailItem(source, b"", unreadable=_TOO_LONG) if too_long else MailItem(source, raw)


def _is_uw_imap_folder_data(raw: bytes) -> bool:
    """Tell UW-IMAP's folder-state pseudo-message (see `_UW_IMAP_RE`)."""
    # The pseudo-message is a few hundred bytes; its headers are in the head.
    head = raw[:2048]
    return _UW_IMAP_SUBJECT_RE.search(head) is not None and _UW_IMAP_RE.search(head) is not None
