"""Tests of spamfilter.mail: finding, splitting, identifying and parsing mail."""

from __future__ import annotations

import email.message
import hashlib
import io
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spamfilter.errors import MailParseError, MailSourceError
from spamfilter.mail import FILTER_HEADERS, MailItem, NestingTooDeepDefect, digest_bytes, former_digest, parse_message, read_index, read_messages, with_filter_headers
from spamfilter.mail.sources import delivered, mbox_messages

MAX_BYTES = 1 << 20

MSG_A = b"From: a@example.com\nSubject: first\n\nbody one\n"
MSG_B = b"From: b@example.com\nSubject: second\n\nFrom the desk of B\n>From quoted once\n"
MSG_C = b"From: c@example.com\nSubject: third\n\nlast body\n"

MULTIPART = (
    b"From: x@example.com\n"
    b"To: y@example.com\n"
    b"Subject: =?utf-8?q?caf=C3=A9?=\n"
    b"MIME-Version: 1.0\n"
    b'Content-Type: multipart/alternative; boundary="BOUND"\n'
    b"\n"
    b"preamble\n"
    b"--BOUND\n"
    b"Content-Type: text/plain; charset=utf-8\n"
    b"Content-Transfer-Encoding: quoted-printable\n"
    b"\n"
    b"caf=C3=A9 au lait\n"
    b"--BOUND\n"
    b"Content-Type: text/html; charset=iso-8859-1\n"
    b"Content-Transfer-Encoding: base64\n"
    b"\n"
    b"PGI+Y2Fm6SBhdSBsYWl0PC9iPg==\n"
    b"--BOUND--\n"
)


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def sources(items: list[MailItem], root: Path) -> list[str]:
    """Sources relative to `root`, so assertions do not depend on tmp_path."""
    return [str(Path(item.source).relative_to(root)) for item in items]


# --- mbox -------------------------------------------------------------------


def test_mbox_with_three_messages_gives_numbered_items_with_exact_bytes(tmp_path: Path) -> None:
    box = write(
        tmp_path / "box.mbox",
        b"From a@example.com Mon Jan  1 00:00:00 2024\n" + MSG_A + b"\n"
        b"From b@example.com Tue Jan  2 00:00:00 2024\n"
        b"From: b@example.com\nSubject: second\n\n>From the desk of B\n>>From quoted once\n"
        b"\n"
        b"From c@example.com Wed Jan  3 00:00:00 2024\n" + MSG_C + b"\n",
    )

    items = list(read_messages([str(box)]))

    assert [item.source for item in items] == [f"{box}:1", f"{box}:2", f"{box}:3"]
    # Envelope lines gone, the separating blank line belongs to no message,
    # and one level of mboxrd quoting is undone.
    assert [item.raw for item in items] == [MSG_A, MSG_B, MSG_C]


def test_mbox_with_crlf_line_ends_splits_and_keeps_crlf(tmp_path: Path) -> None:
    box = write(
        tmp_path / "crlf.mbox",
        b"From a@x Mon Jan  1 00:00:00 2024\r\nSubject: one\r\n\r\n>From here\r\n\r\nFrom b@x Mon Jan  1 00:00:01 2024\r\nSubject: two\r\n\r\nbody\r\n",
    )

    items = list(read_messages([str(box)]))

    assert [item.raw for item in items] == [b"Subject: one\r\n\r\nFrom here\r\n", b"Subject: two\r\n\r\nbody\r\n"]


def test_mbox_with_cr_only_line_ends_splits_as_filter_reads_it(tmp_path: Path) -> None:
    # Old Mac mail programs end lines with CR alone: split on LF alone, the
    # file was one envelope line and each message was refused as empty.
    one = b"From a@x Mon Jan  1 00:00:00 2024\rSubject: one\r\rbody one\r"
    box = write(tmp_path / "cr.mbox", one + b"\rFrom b@x Mon Jan  1 00:00:01 2024\rSubject: two\r\rbody two\r")

    from_file = list(read_messages([str(box)]))
    from_stdin = list(read_messages(["-"], stdin=io.BytesIO(box.read_bytes())))

    assert [item.raw for item in from_file] == [b"Subject: one\r\rbody one\r", b"Subject: two\r\rbody two\r"]
    assert [item.raw for item in from_stdin] == [item.raw for item in from_file]
    # one message alone has the digest `filter` gives it, so it can be marked
    single = write(tmp_path / "one.eml", one)
    assert [item.digest for item in read_messages([str(single)])] == [delivered("-", one).digest]
    assert parse_message(from_file[1], max_bytes=1 << 20)["subject"] == "two"
    # A blank line ends a message before any "From " line, dated or not, as in an LF mbox.
    undated = write(tmp_path / "undated.mbox", b"From alice@x.org\rSubject: one\r\rbody one\r\rFrom bob@x.org\rSubject: two\r\rbody two\r")
    assert [item.raw for item in read_messages([str(undated)])] == [b"Subject: one\r\rbody one\r", b"Subject: two\r\rbody two\r"]


def test_mbox_from_line_after_text_splits_only_when_it_looks_like_an_envelope(tmp_path: Path) -> None:
    box = write(
        tmp_path / "box",
        b"From a@x Mon Jan  1 00:00:00 2024\nSubject: one\n\nsee you\nFrom now on, no quoting\nFrom b@x Fri Jul  8 12:08:34 2011\nSubject: two\n\nbody\n",
    )

    items = list(read_messages([str(box)]))

    assert [item.raw for item in items] == [b"Subject: one\n\nsee you\nFrom now on, no quoting\n", b"Subject: two\n\nbody\n"]


def test_mbox_from_line_after_blank_line_always_starts_a_message(tmp_path: Path) -> None:
    box = write(tmp_path / "box", b"From a@x Mon Jan  1 00:00:00 2024\nSubject: one\n\nhi\n\nFrom someone\nSubject: two\n")

    items = list(read_messages([str(box)]))

    assert [item.raw for item in items] == [b"Subject: one\n\nhi\n", b"Subject: two\n"]


def test_file_starting_with_envelope_line_is_an_mbox_of_one(tmp_path: Path) -> None:
    eml = write(tmp_path / "0001.eml", b"From a@x  Sat Nov 27 15:33:27 2004\n" + MSG_A)

    items = list(read_messages([str(eml)]))

    assert items == [MailItem(str(eml), MSG_A)]


def test_mbox_skips_uw_imap_folder_internal_data_message(tmp_path: Path) -> None:
    box = write(
        tmp_path / "pine.mbox",
        b"From MAILER-DAEMON Tue Nov 15 11:01:01 2005\n"
        b"Date: 15 Nov 2005 11:01:01 -0500\n"
        b"From: Mail System Internal Data <MAILER-DAEMON@monkey.org>\n"
        b"Subject: DON'T DELETE THIS MESSAGE -- FOLDER INTERNAL DATA\n"
        b"X-IMAP: 1118793345 0000000456\n"
        b"\n"
        b"This text is part of the internal format of your mail folder.\n"
        b"\n"
        b"From a@x Mon Jan  1 00:00:00 2024\n" + MSG_A + b"\n"
        b"From b@x Mon Jan  1 00:00:00 2024\n" + MSG_C,
    )

    items = list(read_messages([str(box)]))

    # The real messages keep their position in the file as their number.
    assert items == [MailItem(f"{box}:2", MSG_A), MailItem(f"{box}:3", MSG_C)]
    # With one real message the file holds one message, named by its path.
    box.write_bytes(box.read_bytes().split(b"\nFrom b@x")[0])
    assert list(read_messages([str(box)])) == [MailItem(str(box), MSG_A)]


def test_mbox_is_read_one_message_at_a_time(tmp_path: Path) -> None:
    body = b"x" * 79 + b"\n"
    message = b"Subject: big\n\n" + body * 100  # about 8 KB
    n_messages = 2000  # about 16 MB in all
    box = tmp_path / "big.mbox"
    with box.open("wb") as f:
        for i in range(n_messages):
            f.write(b"From a@x Mon Jan  1 00:00:00 2024\n" + message + b"\n")

    tracemalloc.start()
    try:
        count = 0
        for item in read_messages([str(box)]):
            assert item.raw == message
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert count == n_messages
    assert peak < 1_000_000  # a few messages' worth, not the 16 MB file


def test_a_line_longer_than_the_message_cap_is_not_held_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Lines were read whole before the cap applied: one of 400 MB held 911
    # MB, and under a memory limit ended the run before the messages after
    # it. A file whose lines end in CR alone was one line, the whole file.
    from spamfilter.mail import sources

    monkeypatch.setattr(sources, "MAX_MESSAGE_BYTES", 1 << 20)  # (and lines of 1 MiB pieces)
    envelope = b"From a@x Mon Jan  1 00:00:00 2024\n"
    small = b"Subject: small\n\nhello\n"
    box = write(tmp_path / "long.mbox", envelope + small + b"\n" + envelope + b"Subject: long\n\n" + b"x" * (6 << 20) + b"\n\n" + envelope + small)
    cr_box = write(tmp_path / "cr.mbox", (envelope + small + b"\n").replace(b"\n", b"\r") * 120_000)  # 7 MB, no LF
    tracemalloc.start()
    try:
        items = list(read_messages([str(box)]))
        _, peak_long = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        cr_items = sum(1 for item in read_messages([str(cr_box)]) if item.raw == small.replace(b"\n", b"\r"))
        _, peak_cr = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(i.source.rsplit("/", 1)[-1], i.raw, i.unreadable is not None) for i in items] == [
        ("long.mbox:1", small, False),
        ("long.mbox:2", b"", True),
        ("long.mbox:3", small, False),
    ]
    assert cr_items == 120_000
    # a few pieces of 1 MiB each, whatever the file: not the file, nor a
    # line object for each of its lines
    assert peak_long < 5 << 20 and peak_cr < 7 << 20, (peak_long, peak_cr)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([b"From a@x Mon Jan  1 00:00:00 2024", b"From b", b">From c", b"", b"Subject: s", b"x" * 250, b"y" * 99 + b"\r", b"body"]), max_size=14),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
)
def test_lines_read_in_pieces_give_the_messages_whole_lines_give(body: list[bytes], eol: bytes) -> None:
    from spamfilter.mail import lines

    data = b"From a@x Mon Jan  1 00:00:00 2024" + eol + eol.join(body)

    def read(piece: int) -> list[tuple[str, bytes, str | None]]:
        lines.LINE_PIECE = piece
        try:
            return [(i.source, i.raw, i.unreadable) for i in mbox_messages(lines.line_pieces(io.BytesIO(data)), "box")]
        finally:
            lines.LINE_PIECE = 1 << 20

    # (a piece always holds enough of a line to tell an envelope line: the
    # real one is 1 MiB)
    whole = read(1 << 20)
    for piece in (64, 99, 100, 101, 128):
        assert read(piece) == whole


# --- files and folders -------------------------------------------------------


def test_plain_file_is_one_message_with_its_exact_bytes(tmp_path: Path) -> None:
    data = b"Received: by x\r\nSubject: hi\r\n\r\nFrom me, unquoted\r\n"
    eml = write(tmp_path / "msg.eml", data)

    assert list(read_messages([str(eml)])) == [MailItem(str(eml), data)]


def test_maildir_reads_cur_then_new_sorted_by_name_and_skips_tmp_and_dotfiles(tmp_path: Path) -> None:
    md = tmp_path / "Mail"
    write(md / "new" / "1700000002.b.host", b"Subject: new b\n\n")
    write(md / "new" / "1700000001.a.host", b"Subject: new a\n\n")
    write(md / "cur" / "1600000000.z.host:2,S", b"Subject: cur z\n\n")
    write(md / "cur" / ".hidden", b"Subject: hidden\n\n")
    write(md / "tmp" / "1700000003.c.host", b"Subject: in delivery\n\n")
    # A file starting with an envelope line is still one Maildir message,
    # read as the same message in an mbox reads.
    write(md / "cur" / "1600000001.y.host:2,", b"From a@x Mon Jan  1 00:00:00 2024\nSubject: y\n\n")

    items = list(read_messages([str(md)]))

    assert sources(items, md) == ["cur/1600000000.z.host:2,S", "cur/1600000001.y.host:2,", "new/1700000001.a.host", "new/1700000002.b.host"]
    assert items[1].raw == b"Subject: y\n" == next(iter(read_messages([str(md / "cur" / "1600000001.y.host:2,")]))).raw


def test_mh_folder_is_read_in_numeric_order(tmp_path: Path) -> None:
    mh = tmp_path / "inbox"
    for n in (10, 2, 1):
        write(mh / str(n), f"Subject: {n}\n\n".encode())
    write(mh / ".mh_sequences", b"unseen: 10\n")
    write(mh / ",3", b"Subject: deleted\n\n")

    items = list(read_messages([str(mh)]))

    assert sources(items, mh) == ["1", "2", "10"]
    assert [item.raw for item in items] == [b"Subject: 1\n\n", b"Subject: 2\n\n", b"Subject: 10\n\n"]


def test_folder_of_numbered_files_only_is_read_as_mh(tmp_path: Path) -> None:
    mh = tmp_path / "numbered"
    for n in (11, 9, 100):
        write(mh / str(n), b"Subject: x\n\n")

    assert sources(list(read_messages([str(mh)])), mh) == ["9", "11", "100"]


def test_plain_folder_is_walked_recursively_in_sorted_order(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    write(root / "b.eml", b"Subject: b\n\n")
    write(root / "a" / "z.eml", b"Subject: a/z\n\n")
    write(root / "a" / "box.mbox", b"From x Mon Jan  1 00:00:00 2024\nSubject: 1\n\n\nFrom y\nSubject: 2\n\n")
    write(root / ".git" / "config", b"[core]\n")
    write(root / ".hidden.eml", b"Subject: hidden\n\n")
    write(root / "maildir" / "cur" / "m1", b"Subject: m1\n\n")
    write(root / "maildir" / "new" / "m2", b"Subject: m2\n\n")
    write(root / "maildir" / "tmp" / "m3", b"Subject: m3\n\n")
    write(root / "index", b"spam b.eml\n")  # a corpus's labels: not mail

    items = list(read_messages([str(root)]))

    assert sources(items, root) == ["a/box.mbox:1", "a/box.mbox:2", "a/z.eml", "b.eml", "maildir/cur/m1", "maildir/new/m2"]
    # The blank line ending the file is the mbox separator, not message text.
    assert items[1].raw == b"Subject: 2\n"


def test_several_paths_are_read_in_the_order_given(tmp_path: Path) -> None:
    one = write(tmp_path / "one", b"Subject: 1\n\n")
    two = write(tmp_path / "two", b"Subject: 2\n\n")

    items = list(read_messages([str(two), "-", str(one)], stdin=io.BytesIO(b"Subject: in\n\n")))

    assert [item.source for item in items] == [str(two), "-", str(one)]


def test_dash_reads_one_message_from_stdin_verbatim() -> None:
    data = b"Subject: piped\n\nFrom b@x Mon Jan  1 00:00:00 2024\n"

    items = list(read_messages(["-"], stdin=io.BytesIO(data)))

    assert items == [MailItem("-", data)]


def test_stdin_starting_with_an_envelope_line_is_split_as_an_mbox() -> None:
    data = b"From a@x Mon Jan  1 00:00:00 2024\n" + MSG_A + b"\nFrom b@x Mon Jan  1 00:00:01 2024\n" + MSG_C

    items = list(read_messages(["-"], stdin=io.BytesIO(data)))

    assert items == [MailItem("-:1", MSG_A), MailItem("-:2", MSG_C)]


def test_stdin_mbox_of_one_message_is_named_dash() -> None:
    data = b"From a@x Mon Jan  1 00:00:00 2024\n" + MSG_A

    items = list(read_messages(["-"], stdin=io.BytesIO(data)))

    assert items == [MailItem("-", MSG_A)]


def test_dash_given_twice_raises_mail_source_error() -> None:
    with pytest.raises(MailSourceError, match="once"):
        read_messages(["-", "-"], stdin=io.BytesIO(b""))


def test_missing_path_raises_before_any_message_is_read(tmp_path: Path) -> None:
    good = write(tmp_path / "good.eml", b"Subject: fine\n\n")
    missing = tmp_path / "no-such-box"

    # Raised by the call itself, not by the first next(): nothing is read.
    with pytest.raises(MailSourceError, match="no-such-box"):
        read_messages([str(good), str(missing)])


def test_single_path_string_instead_of_a_list_raises_type_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="sequence of paths"):
        read_messages(str(tmp_path))


def test_a_corpus_folder_yields_its_mail_not_its_trec_index(tmp_path: Path) -> None:
    write(tmp_path / "index", b"spam data/inmail.1\nham data/inmail.2\r\nSPAM\tdata/x y\n")
    write(tmp_path / "index.byfolder", b"ham a/1\n" * 1000)  # cut at 4 KiB mid-line
    # Files named so that are not indexes: a message, and an index with one
    # line that is not an index line.
    write(tmp_path / "data" / "index", b"Subject: the index\n\nspam ham\n")
    write(tmp_path / "indexes", b"spam a/1\nSubject: hello\n")
    write(tmp_path / "data" / "inmail.1", b"Subject: one\n\nhello\n")

    assert sources(list(read_messages([str(tmp_path)])), tmp_path) == ["data/index", "data/inmail.1", "indexes"]


def test_a_mail_program_s_folder_yields_its_mail_not_its_bookkeeping(tmp_path: Path) -> None:
    # A Thunderbird profile folder and a Dovecot mbox folder: the summary,
    # index and subscription files beside the mailboxes were read as mail
    # (and trained as such); a compressed mailbox is refused as binary.
    import gzip

    root = tmp_path / "Mail"
    write(root / "Inbox", b"From x Mon Jan  1 00:00:00 2024\nSubject: in\n\nhello\n")
    write(root / "Inbox.msf", b'// <!-- <mdb:mork:z v="1.4"/> -->\n<(82=Hello)>\n')
    write(root / "Archive.sbd" / "2024", b"From x Mon Jan  1 00:00:00 2024\nSubject: old\n\nhello\n")
    write(root / "Archive.sbd" / "2024.msf", b'// <!-- <mdb:mork:z v="1.4"/> -->\n')
    for name in ("dovecot.index", "dovecot.index.log", "dovecot.list.index", "dovecot-uidlist", "dovecot-uidvalidity.65a1b2c3", "subscriptions", "popstate.dat"):
        write(root / name, b"3 V1 N2 G0\n1 :x\n")
    write(root / "old.mbox.gz", gzip.compress(b"From x Mon Jan  1 00:00:00 2024\nSubject: zipped\n\n" + bytes(range(256)) * 40, mtime=0))
    # Mailboxes whose names merely look like those: a list's archive, and a
    # folder named subscriptions below the top.
    write(root / "lists" / "dovecot-users", b"From x Mon Jan  1 00:00:00 2024\nSubject: list\n\nhello\n")
    write(root / "lists" / "subscriptions", b"From x Mon Jan  1 00:00:00 2024\nSubject: subs\n\nhello\n")

    items = list(read_messages([str(root)]))

    assert sources(items, root) == ["Archive.sbd/2024", "Inbox", "lists/dovecot-users", "lists/subscriptions", "old.mbox.gz"]
    with pytest.raises(MailParseError, match="look binary: .* compressed mail must be decompressed first"):
        parse_message(items[4], max_bytes=1 << 20)
    # A bzip2 file starts with printable bytes; one whose next (CRC) byte
    # is a colon, 1 in 256, read as a header block and was trained.
    import bz2

    plain = b"From x Mon Jan  1 00:00:00 2024\nSubject: zipped\n\nhello\n"
    packed = next(b for b in (bz2.compress(plain + b"%d" % i) for i in range(5000)) if b[10:11] == b":")
    for data in (packed, bz2.compress(plain), bz2.compress(b"")):
        with pytest.raises(MailParseError, match="bzip2-compressed data; compressed mail must be decompressed first"):
            parse_message(MailItem("box.bz2", data), max_bytes=1 << 20)
    # Mail after a byte order mark or a blank line, with a raw binary part early on, is mail.
    binary_part = b"Subject: x\nContent-Type: application/octet-stream\nContent-Transfer-Encoding: binary\n\n" + bytes(range(256)) * 24
    for lead in (b"\xef\xbb\xbf", b"\r\n"):
        assert parse_message(MailItem("lead", lead + binary_part), max_bytes=1 << 20) is not None
    # Headerless text in an 8-bit charset is still text, however many of its bytes are 8-bit.
    koi8 = MailItem("koi8", "Привет, это письмо без заголовков и в кодировке КОИ-8.\n".encode("koi8-r") * 20)
    assert parse_message(koi8, max_bytes=1 << 20).get_payload()


def test_folder_with_unicode_digit_names_is_not_taken_for_mh(tmp_path: Path) -> None:
    folder = tmp_path / "odd"
    write(folder / "1", b"Subject: 1\n\n")
    write(folder / "\u00b2", b"Subject: superscript two\n\n")

    assert sources(list(read_messages([str(folder)])), folder) == ["1", "\u00b2"]


def test_mail_item_repr_leaves_out_the_message_bytes() -> None:
    assert repr(MailItem("box:3", b"Subject: secret\n\n")) == "MailItem(source='box:3')"


# --- TREC index ---------------------------------------------------------------


def test_read_index_yields_labels_and_items_in_file_order(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write(corpus / "spam" / "001", b"Subject: buy\n\n")
    write(corpus / "ham" / "my mail.eml", b"Subject: lunch\n\n")
    write(corpus / "ham" / "002", b"From a@x Mon Jan  1 00:00:00 2024\nSubject: tea\n\n>From me\n\n")
    index = write(corpus / "index", b"spam spam/001\n\nHAM   ham/my mail.eml  \r\nham\tham/002\n")

    entries = list(read_index(str(index)))

    assert [(is_spam, item.source) for is_spam, item in entries] == [
        (True, str(corpus / "spam" / "001")),
        (False, str(corpus / "ham" / "my mail.eml")),
        (False, str(corpus / "ham" / "002")),
    ]
    assert [item.raw for _, item in entries] == [b"Subject: buy\n\n", b"Subject: lunch\n\n", b"Subject: tea\n\nFrom me\n"]


def test_read_index_paths_are_relative_to_the_index_folder_not_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "c" / "m", b"Subject: x\n\n")
    write(tmp_path / "c" / "index", b"ham m\n")
    monkeypatch.chdir(tmp_path)

    [(is_spam, item)] = list(read_index("c/index"))

    assert (is_spam, item.source, item.raw) == (False, "c/m", b"Subject: x\n\n")


def test_read_index_gives_the_same_bytes_as_read_messages_for_an_envelope_file(tmp_path: Path) -> None:
    eml = write(tmp_path / "m.eml", b"From a@x Mon Jan  1 00:00:00 2024\r\nSubject: x\r\n\r\n>From y\r\n")
    index = write(tmp_path / "index", b"spam m.eml\n")

    [(_, from_index)] = list(read_index(str(index)))
    [from_file] = list(read_messages([str(eml)]))

    assert from_index.raw == from_file.raw == b"Subject: x\r\n\r\nFrom y\r\n"


@pytest.mark.parametrize(("line", "lineno"), [(b"spam\n", 2), (b"junk m\n", 2), (b"spam-ish m\n", 2)])
def test_read_index_malformed_line_names_file_and_line_number(tmp_path: Path, line: bytes, lineno: int) -> None:
    write(tmp_path / "m", b"Subject: x\n\n")
    index = write(tmp_path / "index", b"ham m\n" + line + b"ham m\n")

    with pytest.raises(MailSourceError, match=rf"index:{lineno}: malformed index line"):
        read_index(str(index))


def test_read_index_missing_message_file_fails_before_any_message_is_read(tmp_path: Path) -> None:
    write(tmp_path / "m", b"Subject: x\n\n")
    index = write(tmp_path / "index", b"ham m\nspam gone.eml\n")

    with pytest.raises(MailSourceError, match=r"index:2: message file .*gone\.eml' does not exist"):
        read_index(str(index))
    (tmp_path / "folder").mkdir()
    index = write(tmp_path / "index", b"ham m\nspam folder\n")
    with pytest.raises(MailSourceError, match=r"index:2: message file .*folder' is a folder, not a message file"):
        read_index(str(index))
    # A device, a pipe or a link in a loop exists: not "does not exist".
    import os

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    for name, said in (("fifo", "is not a regular file"), ("/dev/zero", "is not a regular file"), ("loop", "is a link to nothing"), ("dangling", "is a link to nothing")):
        index = write(tmp_path / "index", b"ham m\nspam " + name.encode() + b"\n")
        with pytest.raises(MailSourceError, match=rf"index:2: message file .*{name.lstrip('/')}' {said}"):
            read_index(str(index))


@pytest.mark.parametrize("again", [b"ham m", b"spam m", b"ham ./m", b"ham link"])
def test_read_index_refuses_a_message_file_listed_twice(tmp_path: Path, again: bytes) -> None:
    # Listed twice, a message would be trained twice (or under both labels)
    # and measured twice: the index is refused before any message is read.
    write(tmp_path / "m", b"Subject: x\n\n")
    write(tmp_path / "n", b"Subject: y\n\n")
    (tmp_path / "link").symlink_to(tmp_path / "m")
    index = write(tmp_path / "index", b"ham m\nspam n\n" + again + b"\n")

    with pytest.raises(MailSourceError, match=r"index:3: message file .* is listed again \(first on line 1\)"):
        read_index(str(index))
    assert [is_spam for is_spam, _ in read_index(str(write(tmp_path / "index", b"ham m\nspam n\n")))] == [False, True]


def test_read_index_missing_index_raises_mail_source_error(tmp_path: Path) -> None:
    with pytest.raises(MailSourceError, match="no-index"):
        read_index(str(tmp_path / "no-index"))


def test_read_index_skips_a_byte_order_mark_and_refuses_a_device(tmp_path: Path) -> None:
    write(tmp_path / "m", b"Subject: x\n\n")
    write(tmp_path / "n", b"Subject: y\n\n")
    index = write(tmp_path / "index", b"\xef\xbb\xbfham m\nspam n\n")
    assert [is_spam for is_spam, _ in read_index(str(index))] == [False, True]
    with pytest.raises(MailSourceError, match="is a device or socket"):
        read_index("/dev/zero")  # read whole, it never ended


def test_a_message_with_an_envelope_line_has_one_digest_in_a_file_a_maildir_and_an_mh_folder(tmp_path: Path) -> None:
    # Maildir and MH files kept the envelope's ">From " quoting, so the same
    # message trained twice, once from each.
    raw = b"From someone@example.com Mon Jan  1 00:00:00 2024\nFrom: x@example.com\nSubject: env\n\nHello\n>From the start\nbye\n"
    plain = write(tmp_path / "plain" / "e.eml", raw)
    write(tmp_path / "md" / "cur" / "1.host:2,S", raw)
    (tmp_path / "md" / "new").mkdir()
    (tmp_path / "md" / "tmp").mkdir()
    write(tmp_path / "mh" / "1", raw)
    items = [next(iter(read_messages([str(p)]))) for p in (plain, tmp_path / "md", tmp_path / "mh")]
    assert {item.raw for item in items} == {b"From: x@example.com\nSubject: env\n\nHello\nFrom the start\nbye\n"}
    assert len({item.digest for item in items}) == 1


# --- digest -------------------------------------------------------------------------


def test_digest_is_the_first_32_hex_digits_of_sha256_of_the_normalised_message() -> None:
    raw = b"From a@x Mon Jan  1 00:00:00 2024\r\nSubject: x\r\nX-Spam-Flag: YES\r\n\r\nbody\r\n\r\n"

    expected = hashlib.sha256(b"Subject: x\n\nbody").hexdigest()[:32]
    assert digest_bytes(raw) == expected
    assert MailItem("m", raw).digest == expected
    assert digest_bytes(b"") == "e3b0c44298fc1c149afbf4c8996fb924"


def test_digest_is_equal_for_crlf_and_lf_line_ends() -> None:
    assert digest_bytes(MULTIPART.replace(b"\n", b"\r\n")) == digest_bytes(MULTIPART)


def test_digest_ignores_headers_added_by_the_filter_in_any_case_and_folding() -> None:
    header, body = MULTIPART.split(b"\n\n", 1)
    filtered = b"X-Spam-Status: Yes, score=0.99\n\ttokens=buy,now\n" + header + b"\nx-spam-score:  0.990\nX-SPAM-FLAG: YES\n\n" + body

    assert set(FILTER_HEADERS) == {"X-Spam-Status", "X-Spam-Score", "X-Spam-Flag"}
    assert digest_bytes(filtered) == digest_bytes(MULTIPART)


def test_digest_ignores_filter_header_at_the_end_of_a_header_only_message() -> None:
    assert digest_bytes(b"Subject: x\nX-Spam-Flag: YES") == digest_bytes(b"Subject: x\n")


def test_digest_ignores_envelope_line_and_trailing_whitespace() -> None:
    assert digest_bytes(b"From a@x Mon Jan  1 00:00:00 2024\n" + MSG_A + b"\n\n  \n") == digest_bytes(MSG_A)


def test_digest_keeps_other_spam_headers_and_filter_header_text_in_the_body() -> None:
    # X-Spam-Level (SpamAssassin's) is not ours; a header-like line in the
    # body is content.
    assert digest_bytes(b"Subject: x\nX-Spam-Level: ***\n\nbody\n") != digest_bytes(b"Subject: x\n\nbody\n")
    assert digest_bytes(b"Subject: x\n\nX-Spam-Flag: YES\nbody\n") != digest_bytes(b"Subject: x\n\nbody\n")


def test_digest_ignores_mailbox_annotations_and_keeps_the_former_digest() -> None:
    plain = b"From: a@example.org\nSubject: x\n\nbody\nStatus: RO\n"
    read = b"From: a@example.org\nStatus: RO\nx-status:  A\n\tfolded\nX-Mozilla-Status: 0001\nSubject: x\nX-UID: 7\nContent-Length: 17\n\nbody\nStatus: RO\n"
    assert digest_bytes(read) == digest_bytes(plain) == digest_bytes(b"From x@y Mon Jan  1 00:00:00 2024\r\n" + read.replace(b"\n", b"\r\n"))
    # The digest the message had before: the annotations kept, the filter's fields not.
    before = hashlib.sha256(read.rstrip()).hexdigest()[:32]
    assert former_digest(read) == former_digest(b"X-Spam-Flag: YES\n" + read) == before
    assert former_digest(plain) is None
    # In the body, a line like an annotation is content.
    assert digest_bytes(b"Subject: x\n\nStatus: RO\n") != digest_bytes(b"Subject: x\n\n")
    # Filtering keeps the annotations.
    assert b"Status: RO\n" in with_filter_headers(read, [("X-Spam-Flag", "YES")])


def test_digest_differs_for_different_bodies() -> None:
    assert digest_bytes(b"Subject: x\n\nbody one\n") != digest_bytes(b"Subject: x\n\nbody two\n")


# --- parse_message ------------------------------------------------------------------


def test_parse_message_returns_headers_and_mime_parts() -> None:
    msg = parse_message(MailItem("m", MULTIPART), max_bytes=MAX_BYTES)

    assert msg["Subject"] == "=?utf-8?q?caf=C3=A9?="
    assert msg.get_content_type() == "multipart/alternative"
    parts = [part for part in msg.walk() if not part.is_multipart()]
    assert [part.get_payload(decode=True) for part in parts] == [
        # The newline before a boundary belongs to the boundary (RFC 2046).
        "café au lait".encode(),
        "<b>café au lait</b>".encode("iso-8859-1"),
    ]


def test_parse_message_reads_only_the_first_max_bytes() -> None:
    raw = b"Subject: long\n\n" + b"a" * 100 + b"b" * 100

    msg = parse_message(MailItem("m", raw), max_bytes=115)

    assert msg.get_payload() == "a" * 100


def test_parse_message_accepts_mail_without_headers() -> None:
    # Enron-Spam / Ling-Spam form: a Subject line, then the tokenised body.
    raw = b"Subject: re : meeting\nthe meeting is at 3 pm .\nthanks\n"

    msg = parse_message(MailItem("enron1/ham/0001.txt", raw), max_bytes=MAX_BYTES)

    assert msg["Subject"] == "re : meeting"
    assert msg.get_payload() == "the meeting is at 3 pm .\nthanks\n"


def test_parse_message_accepts_plain_text_without_any_header() -> None:
    msg = parse_message(MailItem("m", b"just some text\nand more\n"), max_bytes=MAX_BYTES)

    assert msg.get_payload() == "just some text\nand more\n"


@pytest.mark.parametrize("raw", [b"", b"   \r\n\n\t\n"])
def test_parse_message_rejects_empty_message_naming_its_source(raw: bytes) -> None:
    with pytest.raises(MailParseError, match=r"^box\.mbox:7: empty message$"):
        parse_message(MailItem("box.mbox:7", raw), max_bytes=MAX_BYTES)


def test_parse_message_rejects_binary_junk_without_headers() -> None:
    junk = bytes(range(256)) * 20  # 12.5% control bytes in a row of 256, then more below
    junk = b"\x00\x01\x02\x03" * 1024 + junk

    with pytest.raises(MailParseError, match=r"^img\.png: not a mail message"):
        parse_message(MailItem("img.png", junk), max_bytes=MAX_BYTES)


def test_parse_message_accepts_control_bytes_below_the_threshold() -> None:
    raw = (b"\x00" * 29 + b"a" * 71) * 40  # 29% NUL, no header block

    msg = parse_message(MailItem("m", raw), max_bytes=MAX_BYTES)

    assert isinstance(msg, email.message.Message)


def test_parse_message_accepts_binary_body_after_a_header_block() -> None:
    raw = b"Subject: attachment\n\n" + b"\x00\x01\x02" * 2000

    msg = parse_message(MailItem("m", raw), max_bytes=MAX_BYTES)

    assert msg["Subject"] == "attachment"


def test_parse_message_keeps_headers_of_mime_nested_too_deeply_to_parse() -> None:
    raw = b"Subject: nest\n"
    for depth in range(3000):
        raw += b'Content-Type: multipart/mixed; boundary="b%d"\n\n--b%d\n' % (depth, depth)
    raw += b"Content-Type: text/plain\n\nhello\n"

    msg = parse_message(MailItem("m", raw), max_bytes=MAX_BYTES)

    assert msg["Subject"] == "nest"
    assert any(isinstance(defect, NestingTooDeepDefect) for defect in msg.defects)


def test_parse_message_rejects_non_positive_max_bytes() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        parse_message(MailItem("m", MSG_A), max_bytes=0)


def check_parses_or_refuses(raw: bytes, max_bytes: int = MAX_BYTES) -> None:
    """parse_message either returns a Message or raises MailParseError."""
    try:
        msg = parse_message(MailItem("fuzz", raw), max_bytes=max_bytes)
    except MailParseError:
        return
    assert isinstance(msg, email.message.Message)


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=4000))
def test_parse_message_never_raises_anything_else_on_random_bytes(raw: bytes) -> None:
    check_parses_or_refuses(raw)


# Pieces of mail that exercise the parser's harder paths: MIME boundaries
# (closed, unclosed, nested), encodings, encoded words, folded and broken
# headers, 8-bit and control bytes.
MAIL_PIECES = [
    b"From a@x Mon Jan  1 00:00:00 2024\n",
    b"Subject: =?utf-8?b?w6k=?= =?bogus?q?x?= =?utf-8?b?!!!?=\n",
    b"Content-Type: multipart/mixed; boundary=B\n",
    b'Content-Type: multipart/alternative; boundary="C"\n',
    b"Content-Type: message/rfc822\n",
    b"Content-Type: text/plain; charset=no-such-charset\n",
    b"Content-Type: text/plain; charset*=utf-8''%E9; name*0=a; name*1=b\n",
    b"Content-Transfer-Encoding: base64\n",
    b"Content-Transfer-Encoding: quoted-printable\n",
    b"Content-Transfer-Encoding: x-uuencode\n",
    b"begin 644 f\n#86)C\n`\nend\n",
    b"--B\n",
    b"--B--\n",
    b"--C\n",
    b"--C--\n",
    b"\tfolded continuation\n",
    b"no colon header line\n",
    b": empty name\n",
    b"\n",
    b"\r\n",
    b"=E9=\n",
    b"SGVsbG8gd29ybGQ=\n",
    b"\xff\xfe\x00\x80\x1b$B\n",
]


@settings(max_examples=400, deadline=None, database=None)
@given(st.lists(st.one_of(st.sampled_from(MAIL_PIECES), st.binary(max_size=40)), max_size=40), st.integers(min_value=1, max_value=2000))
def test_parse_message_never_raises_anything_else_on_mail_like_bytes(pieces: list[bytes], max_bytes: int) -> None:
    check_parses_or_refuses(b"".join(pieces), max_bytes)


def test_parse_message_never_raises_anything_else_on_truncated_mail() -> None:
    for raw in (MULTIPART, MULTIPART.replace(b"\n", b"\r\n")):
        for cut in range(len(raw) + 1):
            check_parses_or_refuses(raw[:cut])
            check_parses_or_refuses(raw, max_bytes=cut or 1)


# --- corpora ------------------------------------------------------------------------


@pytest.mark.corpus
@pytest.mark.parametrize("corpus", ["spamassassin-testdata", "nazario-phishing"])
def test_every_corpus_message_is_read_and_parsed(corpora_dir: Path, corpus: str) -> None:
    index = corpora_dir / corpus / "index"
    n_lines = sum(1 for line in index.read_bytes().splitlines() if line.strip())

    count = 0
    for _, item in read_index(str(index)):
        msg = parse_message(item, max_bytes=MAX_BYTES)
        assert isinstance(msg, email.message.Message)
        count += 1

    assert count == n_lines


@pytest.mark.corpus
def test_nazario_mboxes_hold_the_same_messages_as_its_index(corpora_dir: Path) -> None:
    # The corpus's messages/ were split out of mbox/ by another program: the
    # same identities prove the splitting, unquoting and digest agree with it.
    corpus = corpora_dir / "nazario-phishing"

    from_mbox = [item.digest for item in read_messages([str(corpus / "mbox")])]
    from_index = [item.digest for _, item in read_index(str(corpus / "index"))]

    assert len(from_mbox) == len(from_index) == 1307
    assert sorted(from_mbox) == sorted(from_index)


def test_malformed_rfc2231_boundary_keeps_the_headers_and_records_a_defect() -> None:
    raw = b"Content-Type: multipart/mixed; boundary*0*=utf-8''b; boundary*;1=c\nSubject: invoice\n\n--b\nhello\n"
    msg = parse_message(MailItem("m", raw), max_bytes=1 << 16)
    assert msg["Subject"] == "invoice"
    assert [str(d) for d in msg.defects] == ["body left unparsed: TypeError"]


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_is_not_a_mail_source(device: str) -> None:
    # /dev/zero would be read for ever; standard input is "-".
    if not Path(device).exists():
        pytest.skip(f"no {device}")
    with pytest.raises(MailSourceError, match="is a device or socket, not a file, folder or pipe"):
        read_messages([device])


def test_a_delivered_message_is_unquoted_where_a_line_starts_only() -> None:
    # One level of mboxrd quoting comes off at each line start (LF, CRLF)
    # and nowhere else: not inside a line, not in HTML's ">", not after a
    # lone CR inside an LF line; the same bytes read as an mbox give the
    # same message, so the same digest.
    raw = b"From a@x Mon Jan  1 00:00:00 2024\n>From one\n>>From two\nx>From not at a start\n<p>>From</p> <b>>>From</b>\r\n>From crlf\r>From cr\n>From\n>>>From three\n"
    assert delivered("-", raw).raw == (b"From one\n>From two\nx>From not at a start\n<p>>From</p> <b>>>From</b>\r\nFrom crlf\r>From cr\n>From\n>>From three\n")
    assert [m.raw for m in mbox_messages(io.BytesIO(raw), "-")] == [delivered("-", raw).raw]


@pytest.mark.parametrize(
    "raw",
    [
        b"From a@x Mon Jan  1 00:00:00 2024\nSubject: s\n\nline one\r>From here on\n",
        b"From a@x Mon Jan  1 00:00:00 2024\r\nSubject: s\r\n\r\nline one\r>From here\r\n>From there\r\n",
        b"From a@x Mon Jan  1 00:00:00 2024\rSubject: s\r\rline one\r>From here on\r>>From two\r",
    ],
)
def test_a_message_delivered_and_the_same_in_an_mbox_are_one_message(raw: bytes) -> None:
    # A Maildir file (read as delivered) and an mbox of the same bytes: the
    # same message, so one digest, trained once (a lone CR before ">From"
    # in an LF file gave two digests).
    from_mbox = [m.raw for m in mbox_messages(io.BytesIO(raw), "-")]
    assert from_mbox == [delivered("-", raw).raw]
    assert digest_bytes(from_mbox[0]) == digest_bytes(delivered("-", raw).raw)
