"""Tokenizer: exact tokens for hand-written messages, robustness on broken and
hostile mail, and token hygiene over the real corpora.

Messages are written here as byte literals and parsed the way
``spamfilter.mail.parse_message`` does (stdlib parser, compat32 policy).
"""

from __future__ import annotations

import base64
import email
import email.message
import email.policy
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spamfilter.config import TokenizerConfig
from spamfilter.errors import MailParseError
from spamfilter.mail import MailItem, parse_message, read_index
from spamfilter.tokenizer import Tokenizer, mime, received_tokens, url_tokens
from spamfilter.tokenizer import html as html_text

MAX_BYTES = 200_000
# The longest token the tokenizer makes by design is a namespace prefix plus
# a 100-character host or domain ("url:host:" + 100 = 109).
MAX_TOKEN_LENGTH = 200


def parse(raw: bytes) -> email.message.Message:
    return email.message_from_bytes(raw, policy=email.policy.compat32)


# The exact-token tests below are about the unigram rules; bigrams (on by
# default) have tests of their own.
UNIGRAMS = TokenizerConfig(bigrams=False)


def tokenize(raw: bytes, **config: object) -> list[str]:
    config.setdefault("bigrams", False)
    return Tokenizer(TokenizerConfig(**config)).tokenize(parse(raw))  # type: ignore[arg-type]


def problems(tokens: list[str]) -> list[tuple[str, str]]:
    """(reason, token) for every token that breaks the hygiene rules."""
    found: list[tuple[str, str]] = []
    for token in tokens:
        if not token:
            found.append(("empty", token))
        if any(c.isspace() for c in token):
            found.append(("whitespace", token))
        if "\x00" in token:
            found.append(("NUL", token))
        try:
            token.encode("utf-8")
        except UnicodeEncodeError:
            found.append(("lone surrogate", token))
        if len(token) > MAX_TOKEN_LENGTH:
            found.append(("too long", token[:80]))
    return found


def is_subsequence(needles: list[str], haystack: list[str]) -> bool:
    it = iter(haystack)
    return all(n in it for n in needles)


# -- a plain message ---------------------------------------------------------

PLAIN = b"""From: Alice Smith <Alice@Example.COM>
To: bob@example.org, carol@mail.example.net
Subject: Cheap offers today
Message-ID: <abc123@mx.example.com>
Date: Mon, 1 Jan 2024 10:00:00 +0000

Hello Bob, we offer an extraordinarilylongwordhere and call 5551234567 for $100 now ok.
"""


def test_plain_message_gives_header_then_body_tokens_in_order() -> None:
    assert tokenize(PLAIN) == [
        # one header:<name> per header present, in message order
        "header:from",
        "header:to",
        "header:subject",
        "header:message-id",
        "header:date",
        # Subject words
        "subject:cheap",
        "subject:offers",
        "subject:today",
        # From: address lower-cased, its domain, the display-name words
        "from:addr:alice@example.com",
        "from:domain:example.com",
        "from:name:alice",
        "from:name:smith",
        # To: how many recipients, and their domains (sorted)
        "to:count:2",
        "to:domain:example.org",
        "to:domain:mail.example.net",
        "message-id:domain:mx.example.com",
        "content-type:text/plain",
        # body: lower-cased; "we", "an", "ok" too short; 27 letters -> skip;
        # a 10-digit phone number -> num:10; "$100" kept whole
        "hello",
        "bob",
        "offer",
        "skip:e:20",
        "and",
        "call",
        "num:10",
        "for",
        "$100",
        "now",
    ]


def test_date_header_gives_only_its_header_token() -> None:
    toks = tokenize(PLAIN)
    assert [t for t in toks if "2024" in t or "jan" in t or t.startswith("date:")] == []


def test_words_are_lower_cased_and_shorter_than_three_dropped() -> None:
    assert Tokenizer(UNIGRAMS).words("The CAT sat on a Mat") == ["the", "cat", "sat", "mat"]


def test_words_keep_inner_apostrophes_hyphens_and_dots() -> None:
    assert Tokenizer(UNIGRAMS).words("DON'T e-mail u.s.a. -- 'quoted'") == ["don't", "e-mail", "u.s.a", "quoted"]


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("abcdefghijklmnopqrst", ["abcdefghijklmnopqrst"]),  # 20 = max_word_length: kept
        ("abcdefghijklmnopqrstu", ["skip:a:20"]),  # 21
        ("Z" * 39, ["skip:z:30"]),
        ("q" * 40, ["skip:q:40"]),
        ("x" * 1234, ["skip:x:1230"]),
    ],
)
def test_word_longer_than_max_word_length_becomes_skip_with_first_char_and_length_floor_10(word: str, expected: list[str]) -> None:
    assert Tokenizer(UNIGRAMS).words(word) == expected


def test_max_word_length_comes_from_config() -> None:
    assert Tokenizer(TokenizerConfig(max_word_length=5)).words("short longer") == ["short", "skip:l:0"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("12", []),  # too short
        ("100 2002", ["100", "2002"]),  # up to 4 digits kept
        ("12345", ["num:5"]),
        ("5551234567", ["num:10"]),
        ("9" * 30, ["num:20"]),  # length capped at 20
        ("$5 $100", ["$5", "$100"]),  # a money sign stays on a short number
        ("$19.99 3,500", ["$19.99", "3,500"]),  # 4 digits each: kept
        ("$1,000,000", ["num:$7"]),  # 7 digits, separators not counted
        ("192.168.100.200", ["num:12"]),
    ],
)
def test_numbers_keep_up_to_four_digits_longer_become_num_digit_count(text: str, expected: list[str]) -> None:
    assert Tokenizer(UNIGRAMS).words(text) == expected


# -- encodings ---------------------------------------------------------------


@pytest.mark.parametrize(
    "subject",
    [
        b"=?utf-8?b?" + base64.b64encode("Café crème".encode()) + b"?=",
        b"=?iso-8859-1?q?Caf=E9_cr=E8me?=",
        b"=?UTF-8?Q?Caf=C3=A9?= =?UTF-8?Q?_cr=C3=A8me?=",
        "Café crème".encode("utf-8"),  # raw 8-bit UTF-8
        "Café crème".encode("latin-1"),  # raw 8-bit latin-1
    ],
    ids=["rfc2047-b-utf8", "rfc2047-q-latin1", "rfc2047-two-words", "raw-utf8", "raw-latin1"],
)
def test_subject_is_decoded_into_real_words(subject: bytes) -> None:
    toks = tokenize(b"Subject: " + subject + b"\n\nbody\n")
    assert [t for t in toks if t.startswith("subject:")] == ["subject:café", "subject:crème"]


def test_raw_8bit_bytes_in_from_name_are_decoded() -> None:
    toks = tokenize("From: José Núñez <jose@example.es>\n\nhi\n".encode("latin-1"))
    assert [t for t in toks if t.startswith("from:name:")] == ["from:name:josé", "from:name:núñez"]


def test_mixed_raw_8bit_and_encoded_word_subject_decodes_both() -> None:
    toks = tokenize(b"Subject: caf\xc3\xa9 =?utf-8?q?na=C3=AFve?=\n\nbody\n")
    assert [t for t in toks if t.startswith("subject:")] == ["subject:café", "subject:naïve"]


def test_unknown_body_charset_still_gives_the_words() -> None:
    raw = b"Subject: x\nContent-Type: text/plain; charset=x-foo\nContent-Transfer-Encoding: 8bit\n\nCheap na\xc3\xafve caf\xc3\xa9 deals\n"
    toks = tokenize(raw)
    assert "charset:x-foo" in toks
    assert toks[-4:] == ["cheap", "naïve", "café", "deals"]


@pytest.mark.parametrize("charset", ["utf-8", "koi8-r", "windows-1251"])
def test_cyrillic_body_gives_cyrillic_words(charset: str) -> None:
    body = "Привет, дешёвые ЛЕКАРСТВА!\n" if charset != "koi8-r" else "Привет, дешевые ЛЕКАРСТВА!\n"
    raw = f"Subject: x\nContent-Type: text/plain; charset={charset}\n\n".encode() + body.encode(charset)
    expected = ["привет", "дешёвые" if charset != "koi8-r" else "дешевые", "лекарства"]
    assert tokenize(raw)[-3:] == expected


def test_chinese_and_japanese_runs_give_overlapping_character_bigrams() -> None:
    raw = "Subject: x\nContent-Type: text/plain; charset=utf-8\n\n免费发票 and カタカナ\n".encode()
    assert tokenize(raw)[-7:] == ["免费", "费发", "发票", "カタ", "タカ", "カナ", "and"]


def test_iso_2022_jp_body_gives_bigrams() -> None:
    raw = b"Subject: x\nContent-Type: text/plain; charset=iso-2022-jp\n\n" + "日本語です\n".encode("iso-2022-jp")
    assert tokenize(raw)[-4:] == ["日本", "本語", "語で", "です"]


def test_encoded_chinese_subject_gives_prefixed_bigrams() -> None:
    raw = b"Subject: =?utf-8?b?" + base64.b64encode("免费发票".encode()) + b"?=\n\n"
    assert [t for t in tokenize(raw) if t.startswith("subject:")] == ["subject:免费", "subject:费发", "subject:发票"]


# -- HTML --------------------------------------------------------------------

HTML_MESSAGE = b"""Subject: hi
Content-Type: text/html; charset=utf-8

<html><head><title>Title words</title><style>.hidden { color: white }</style></head>
<body><script type="text/javascript">var secretvar = evilfunction();</script>
<p>Caf&eacute; &amp; cr&#232;me <b>special</b> price</p>
<img src="http://img.tracker.example.com/pixel.gif">
<a href="https://www.shop.example.co.uk/buy/cheap-pills?id=42">Click here</a>
<!-- hidden comment words -->
<STYLE>unclosedstyle
"""


def test_html_part_gives_tag_markers_link_tokens_and_decoded_visible_text() -> None:
    assert tokenize(HTML_MESSAGE) == [
        "header:subject",
        "header:content-type",
        "content-type:text/html",
        "charset:utf-8",
        "html:tag:a",
        "html:tag:b",
        "html:tag:body",
        "html:tag:html",
        "html:tag:img",
        "html:tag:p",
        "url:scheme:http",
        "url:host:img.tracker.example.com",
        "url:host:tracker.example.com",
        "url:host:example.com",
        "url:path:pixel",
        "url:path:gif",
        "url:scheme:https",
        "url:host:www.shop.example.co.uk",
        "url:host:shop.example.co.uk",
        "url:host:example.co.uk",
        "url:host:co.uk",
        "url:path:buy",
        "url:path:cheap",
        "url:path:pills",
        "café",
        "crème",
        "special",
        "price",
        "click",
        "here",
    ]


def test_html_script_style_head_and_comment_content_never_become_tokens() -> None:
    toks = set(tokenize(HTML_MESSAGE))
    hidden = {"title", "words", "hidden", "color", "white", "var", "secretvar", "evilfunction", "comment", "unclosedstyle"}
    assert toks & hidden == set()


def test_unclosed_script_openings_are_dropped_in_linear_time() -> None:
    # 20,000 openings, none closed (160 KB): a scan restarting at each opening
    # would be quadratic and hang here; the linear one takes milliseconds.
    page = html_text.extract("<p>visible</p>" + "<script>var x = 1;" * 20_000)
    assert page.text.split() == ["visible"]
    assert page.tags == ("p",)


def test_unclosed_comment_openings_are_dropped_in_linear_time() -> None:
    page = html_text.extract("before <!--" + "<!-- hidden " * 40_000)
    assert page.text.split() == ["before"]


def test_many_closed_scripts_are_all_dropped() -> None:
    page = html_text.extract("<script>bad()</script>good " * 20_000)
    assert page.text.split() == ["good"] * 20_000


def test_lone_angle_bracket_before_a_huge_run_of_blanks_is_scanned_in_linear_time() -> None:
    # Regression: "<\s*(/?)\s*" tried every split of the blanks between the
    # two \s* before failing: 40,000 blanks took 22 s.
    page = html_text.extract("<" + " " * 50_000 + "= 3 <b>bold words</b><a href=http://x.example.com>")
    assert page.tags == ("a", "b")
    assert page.links == ("http://x.example.com",)
    assert page.text.split() == ["<", "=", "3", "bold", "words"]


def test_dotted_capital_i_before_a_script_keeps_the_text_after_it() -> None:
    # Regression: offsets from markup.lower() ("İ" lower-cases to 2 chars)
    # were used to cut markup, eating the visible text after the script.
    page = html_text.extract("İSTANBUL İndirim <script>evil()</script>visible text here")
    assert page.text.split() == ["İSTANBUL", "İndirim", "visible", "text", "here"]


def test_non_ascii_lookalike_of_style_does_not_hide_the_rest_of_the_part() -> None:
    # Regression: "<ſtyle>" (long s) matched <style> case-insensitively under
    # Unicode rules and, never closed, dropped everything after it.
    page = html_text.extract("<ſtyle>buy cheap pills now")
    assert page.text == "<ſtyle>buy cheap pills now"


def test_html_entities_are_decoded_in_text_and_links() -> None:
    page = html_text.extract('<a href="http://a.example/?x=1&amp;y=2">Fish &amp; Chips &#8364;5 &euro;</a>')
    assert page.links == ("http://a.example/?x=1&y=2",)
    assert page.text == "Fish & Chips €5 €"


def test_url_tokens_for_ip_host_and_mailto() -> None:
    assert url_tokens("HTTP://user@192.168.1.10:8080/a/Bcd") == ["url:scheme:http", "url:ip", "url:path:bcd"]
    assert url_tokens("mailto:x@Spam.Example?subject=hi") == ["url:scheme:mailto", "url:mailto:spam.example"]


def test_url_path_piece_longer_than_20_becomes_skip() -> None:
    assert url_tokens("http://a.example/" + "k" * 33) == ["url:scheme:http", "url:host:a.example", "url:path:skip:30"]


def test_plain_text_urls_and_email_addresses_become_url_and_email_tokens() -> None:
    raw = b"Subject: x\n\nVisit www.pills.example.com/order or write to sales@deals.example.net today\n"
    # URLs and addresses are taken out of the text first, so their pieces
    # ("pills", "sales", "deals") do not also count as body words.
    assert tokenize(raw) == [
        "header:subject",
        "content-type:text/plain",
        "url:host:www.pills.example.com",
        "url:host:pills.example.com",
        "url:host:example.com",
        "url:path:order",
        "email:domain:deals.example.net",
        "visit",
        "write",
        "today",
    ]


# -- attachments -------------------------------------------------------------

ZIP_PAYLOAD = base64.encodebytes(b"PK\x03\x04" + bytes(range(256)) * 3)

ATTACHMENT_MESSAGE = (
    b"""Subject: your invoice
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="XX"

--XX
Content-Type: text/plain

see attached invoice
--XX
Content-Type: application/zip; name="invoice 2024.zip"
Content-Transfer-Encoding: base64
Content-Disposition: attachment; filename="invoice 2024.zip"

"""
    + ZIP_PAYLOAD
    + b"--XX--\n"
)


def test_base64_zip_attachment_gives_type_ext_and_name_tokens_and_payload_is_not_tokenized() -> None:
    toks = tokenize(ATTACHMENT_MESSAGE)
    assert toks[toks.index("content-type:application/zip") :] == [
        "content-type:application/zip",
        "encoding:base64",
        "attachment:type:application/zip",
        "attachment:ext:zip",
        "attachment:name:invoice",
        "attachment:name:2024",
        "meta:parts:2",
    ]
    assert not any(t.startswith("skip:") for t in toks)


def test_attachment_only_message_is_marked_no_text() -> None:
    raw = b"Subject: x\nContent-Type: application/octet-stream\nContent-Transfer-Encoding: base64\n\n" + base64.encodebytes(b"\x00\x01binary")
    assert tokenize(raw)[-4:] == ["content-type:application/octet-stream", "encoding:base64", "attachment:type:application/octet-stream", "meta:no-text"]


# -- special headers ---------------------------------------------------------


def test_mailbox_annotations_give_no_tokens() -> None:
    # Written by the mail store or client (read, flagged, UID, keywords):
    # absent on delivery, present once the message was read in a folder; in
    # csdmc2010 X-Mozilla-Status tells the classes apart by how each was kept.
    annotations = b"Status: RO\nX-Status: A\nX-Keywords: $Junk NonJunk\nX-UID: 42\nX-IMAPbase: 1 2\nContent-Length: 9\nLines: 1\nX-Mozilla-Status: 0001\nX-Mozilla-Status2: 00000000\nX-Mozilla-Keys: junk\nReplied: today\n"
    plain = b"Subject: hi\nX-Campaign: spring\n\nbody text\n"
    head, body = plain.split(b"\n\n")
    assert tokenize(head + b"\n" + annotations + b"\n" + body) == tokenize(plain)
    assert "header:x-campaign" in tokenize(plain)


def test_filter_own_headers_give_no_tokens_and_dkim_signature_only_its_header_token() -> None:
    raw = b"""Subject: hi
X-Spam-Status: Yes, score=9.1 required=5.0 tests=LOTS
X-Spam-Score: 9.1
x-spam-flag: YES
DKIM-Signature: v=1; a=rsa-sha256; d=example.com; s=sel;
	b=abcdefghijklmnopqrstuvwxyzABCDEF0123456789
X-Campaign: spring sale

body text
"""
    assert tokenize(raw) == [
        "header:subject",
        "header:dkim-signature",
        "header:x-campaign",
        "x-campaign:spring",
        "x-campaign:sale",
        # "hi" is too short to give subject:hi
        "content-type:text/plain",
        "body",
        "text",
    ]


def test_received_gives_ip_prefixes_and_host_domains() -> None:
    assert received_tokens("from mail.spam.example.net (unknown [203.0.113.45]) by mx.example.org") == [
        "received:ip:203",
        "received:ip:203.0",
        "received:ip:203.0.113",
        "received:mail.spam.example.net",
        "received:spam.example.net",
        "received:example.net",
        "received:mx.example.org",
        "received:example.org",
    ]


def test_received_chain_of_many_labels_is_scanned_in_linear_time() -> None:
    # Regression: "(label\.)+" rescanned to the end of the line from every
    # label; 40 KB took 14 s.
    assert received_tokens("a." * 40_000 + "1 from ok.example.com") == ["received:ok.example.com", "received:example.com"]


def test_subject_with_many_unclosed_encoded_word_openers_decodes_in_linear_time() -> None:
    # Regression: the stdlib's encoded-word pattern rescans to the end of the
    # line from each "=?" never closed; a 400 KB From took over 6 minutes.
    raw = b"Subject: =?utf-8?q?caf=C3=A9?= " + b"=?a?q?x " * 20_000 + b"\n\nbody\n"
    subject = [t for t in tokenize(raw) if t.startswith("subject:")]
    assert subject == ["subject:café"]


def test_huge_content_type_parameters_are_not_parsed() -> None:
    # Regression: the stdlib's parameter splitter recounts quotes from the
    # start for every ";" (50 KB took 7 s); such a header is not parsed.
    raw = b'Subject: x\nContent-Type: text/plain; charset="' + b";" * 100_000 + b"\n\nstill read\n"
    assert tokenize(raw) == ["header:subject", "header:content-type", "content-type:text/plain", "still", "read"]


def test_deeply_nested_address_comments_do_not_crash() -> None:
    # Regression: email.utils.parseaddr recurses once per "(" and raised
    # RecursionError out of tokenize.
    raw = b"From: " + b"(" * 5000 + b"\nTo: " + b"(a " * 5000 + b"\n\nbody text\n"
    assert tokenize(raw) == ["header:from", "header:to", "from:no-address", "from:no-name", "to:count:0", "content-type:text/plain", "body", "text"]


def test_very_long_content_type_gives_a_bounded_token() -> None:
    raw = b"Subject: x\nContent-Type: text/" + b"x" * 5000 + b"\n\nbody\n"
    content_type = [t for t in tokenize(raw) if t.startswith("content-type:")]
    assert content_type == ["content-type:text/" + "x" * 95]


def test_raw_non_latin_subject_beside_an_encoded_word_keeps_its_letters() -> None:
    # Regression: email.header.decode_header returned the plain text around
    # an encoded word as raw-unicode-escape bytes: "Привет" became "\\u041f...".
    toks = tokenize("Subject: Привет мир =?utf-8?q?caf=C3=A9?=\n\nx\n".encode())
    assert [t for t in toks if t.startswith("subject:")] == ["subject:привет", "subject:мир", "subject:café"]


@pytest.mark.parametrize(
    ("header", "decoded"),
    [
        ("=?utf-8?q?caf=C3=A9?=\n =?utf-8?q?_cr=C3=A8me?=", "café crème"),  # blank between words dropped
        ("=?utf-8?q?caf=C3?= =?utf-8?q?=A9?=", "café"),  # a character split across two words
        ("=?utf-8?b?w6k?= x =?iso-8859-1?q?=E9?=", "é x é"),  # base64 without padding; text kept
        ("=?utf-8*en?Q?x_y?=", "x y"),  # RFC 2231 language suffix
        ("=?utf-8?b?w?= ok", "=?utf-8?b?w?= ok"),  # undecodable word left as it is
        ("a=?b@example.com", "a=?b@example.com"),  # not an encoded word
    ],
)
def test_decode_header_follows_rfc_2047(header: str, decoded: str) -> None:
    assert mime.decode_header(header) == decoded


def test_address_with_equals_question_mark_is_kept_whole() -> None:
    toks = tokenize(b"From: a=?b@example.com\n\nx\n")
    assert toks[1:4] == ["from:addr:a=?b@example.com", "from:domain:example.com", "from:no-name"]


def test_unicode_line_separator_in_recipient_domain_is_dropped() -> None:
    toks = tokenize(b"To: bob@\xe2\x80\xa8example.org\n\nx\n")
    assert [t for t in toks if t.startswith("to:")] == ["to:count:1", "to:domain:example.org"]


def test_nul_in_charset_and_transfer_encoding_neither_crashes_nor_reaches_tokens() -> None:
    # Regression: codecs.lookup raised ValueError on the NUL, and a NUL in
    # Content-Transfer-Encoding went into the encoding: token.
    raw = b"Subject: x\nContent-Type: text/plain; charset=\x00utf-8\nContent-Transfer-Encoding: 8\x00bit\n\nplain words\n"
    assert tokenize(raw)[3:] == ["content-type:text/plain", "charset:utf-8", "encoding:8bit", "plain", "words"]


def test_nul_in_charset_of_8bit_part_in_multipart_does_not_crash() -> None:
    # Regression: walking the parts called get_payload() on each leaf, which
    # decodes 8-bit text with the charset parameter and raised ValueError.
    raw = b'Subject: x\nContent-Type: multipart/mixed; boundary="b"\n\n--b\nContent-Type: text/plain; charset=\x00utf-8\n\ncaf\xc3\xa9 cr\xc3\xa8me\n--b--\n'
    assert tokenize(raw)[-3:] == ["charset:utf-8", "café", "crème"]


def test_malformed_rfc_2231_charset_parameter_does_not_crash() -> None:
    # Regression: get_param raised TypeError sorting "charset*" beside "charset*0*".
    raw = b"Subject: x\nContent-Type: text/plain; charset*0*=utf-8''x; charset*=y\n\nwords here\n"
    assert tokenize(raw) == ["header:subject", "header:content-type", "content-type:text/plain", "words", "here"]


def test_attachment_extension_never_holds_blanks() -> None:
    raw = b'Subject: x\nContent-Type: application/octet-stream; name="scan.p df"\n\nJVBERi0=\n'
    assert tokenize(raw)[-4:] == ["attachment:type:application/octet-stream", "attachment:ext:pdf", "attachment:name:scan", "meta:no-text"]


# -- options -----------------------------------------------------------------


def test_header_tokens_off_gives_unprefixed_subject_words_then_body() -> None:
    assert tokenize(PLAIN, header_tokens=False) == [
        "cheap",
        "offers",
        "today",
        "content-type:text/plain",
        "hello",
        "bob",
        "offer",
        "skip:e:20",
        "and",
        "call",
        "num:10",
        "for",
        "$100",
        "now",
    ]


LIST_MAIL = (
    b"List-Id: Fans of Widgets <widgets.lists.example.org>\n"
    b"List-Unsubscribe: <mailto:widgets-leave@lists.example.org>\n"
    b"Sender: widgets-admin@lists.example.org\n"
    b"Precedence: bulk\n"
    b"X-BeenThere: widgets@lists.example.org\n"
    b"Organization: Widget Works\n"
    b"Subject: gears\n\nnew gears\n"
)


def test_list_header_words_are_kept_when_asked() -> None:
    toks = tokenize(LIST_MAIL, list_header_words=True)
    assert toks[:14] == [
        "header:list-id",
        "list-id:fans",
        "list-id:widgets",
        "list-id:skip:w:20",
        "header:list-unsubscribe",
        "list-unsubscribe:mailto",
        "list-unsubscribe:widgets-leave",
        "list-unsubscribe:lists.example.org",
        "header:sender",
        "sender:widgets-admin",
        "sender:lists.example.org",
        "header:precedence",
        "precedence:bulk",
        "header:x-beenthere",
    ]


def test_list_header_words_off_by_default_keeps_only_the_list_headers_names() -> None:
    assert (
        tokenize(LIST_MAIL)
        == tokenize(LIST_MAIL, list_header_words=False)
        == [
            "header:list-id",
            "header:list-unsubscribe",
            "header:sender",
            "header:precedence",
            "header:x-beenthere",
            "header:organization",
            "organization:widget",
            "organization:works",
            "header:subject",
            "subject:gears",
            "content-type:text/plain",
            "new",
            "gears",
        ]
    )


def test_bigrams_add_pairs_of_adjacent_plain_words() -> None:
    raw = b"Subject: x\n\nCheap pills, order NOW today\n"
    toks = tokenize(raw, bigrams=True)
    assert toks[toks.index("cheap") :] == ["cheap", "pills", "order", "now", "today", "bi:cheap+pills", "bi:pills+order", "bi:order+now", "bi:now+today"]


def test_bigrams_skip_namespaced_tokens() -> None:
    assert Tokenizer(TokenizerConfig(bigrams=True)).words("call 5551234567 now") == ["call", "num:10", "now", "bi:call+now"]


def test_bigrams_are_off_by_default() -> None:
    assert not any(t.startswith("bi:") for t in tokenize(PLAIN))


def test_porter_stemmer_option_applies_nltks_porter_stemmer() -> None:
    from nltk.stem.porter import PorterStemmer

    raw = b"Subject: Offers\n\noffers running discounted pills cheaper generously\n"
    words = ["offers", "running", "discounted", "pills", "cheaper", "generously"]
    toks = tokenize(raw, stemmer="porter")
    assert toks[-6:] == ["offer", "run", "discount", "pill", "cheaper", "gener"]
    assert toks[-6:] == [PorterStemmer().stem(w) for w in words]
    assert "subject:offer" in toks


def test_snowball_stemmer_option_applies_nltks_english_snowball_stemmer() -> None:
    from nltk.stem.snowball import EnglishStemmer

    raw = b"Subject: x\n\noffers running generously fairly\n"
    toks = tokenize(raw, stemmer="snowball-english")
    assert toks[-4:] == ["offer", "run", "generous", "fair"]
    assert toks[-4:] == [EnglishStemmer().stem(w) for w in ["offers", "running", "generously", "fairly"]]


def test_stemming_is_off_by_default() -> None:
    assert TokenizerConfig().stemmer == "none"
    assert tokenize(b"Subject: x\n\noffers running\n")[-2:] == ["offers", "running"]


# -- broken mail -------------------------------------------------------------


@pytest.mark.parametrize(
    ("cut", "last_words"),
    [
        (17, ["hello", "world", "from"]),  # 4n characters left: decodes
        (18, ["hello", "world", "from"]),  # 4n+2: missing padding
        (16, ["hello", "world", "from"]),  # 4n+1: regression, was one skip:a:90 token
        (20, ["hello", "world"]),  # 4n+1
    ],
)
def test_truncated_base64_body_gives_the_words_before_the_cut(cut: int, last_words: list[str]) -> None:
    encoded = base64.encodebytes(b"hello world from base64 land " * 3)
    raw = b"Subject: x\nContent-Type: text/plain\nContent-Transfer-Encoding: base64\n\n" + encoded[:-cut]
    toks = tokenize(raw)
    assert toks[toks.index("encoding:base64") + 1 :] == ["hello", "world", "from", "base64", "land"] * 2 + last_words


def test_broken_mime_boundary_reads_the_body_as_text() -> None:
    raw = b'Subject: x\nContent-Type: multipart/alternative; boundary="nope"\n\n--other\nContent-Type: text/plain\n\nlost words here\n--other--\n'
    toks = tokenize(raw)
    assert is_subsequence(["lost", "words", "here"], toks)


@pytest.mark.parametrize(
    "raw",
    [b'Subject: x\nContent-Type: multipart/mixed; boundary="b"\n\n--b--\n', b"Subject: x\nContent-Type: multipart/mixed\n\n"],
    ids=["closing-boundary-only", "no-boundary"],
)
def test_multipart_without_parts_gives_only_header_and_type_tokens(raw: bytes) -> None:
    assert tokenize(raw) == ["header:subject", "header:content-type", "content-type:multipart/mixed"]


def test_nested_rfc822_message_body_is_tokenized() -> None:
    raw = b"""Subject: outer
Content-Type: multipart/mixed; boundary="b"

--b
Content-Type: text/plain

forwarded below
--b
Content-Type: message/rfc822

Subject: inner
From: x@inner.example

inner body words
--b--
"""
    toks = tokenize(raw)
    assert toks[toks.index("subject:outer") + 1 :] == [
        "content-type:text/plain",
        "forwarded",
        "below",
        "content-type:text/plain",
        "inner",
        "body",
        "words",
        "meta:parts:2",
    ]


def test_binary_junk_body_gives_clean_tokens() -> None:
    toks = tokenize(b"Subject: x\n\n" + bytes(range(256)) * 4)
    assert toks[:3] == ["header:subject", "content-type:text/plain", "num:10"]
    assert problems(toks) == []


def test_many_nested_multiparts_are_bounded() -> None:
    depth = 300
    raw = (
        b"Subject: x\n"
        + b"".join(b'Content-Type: multipart/mixed; boundary="b%d"\n\n--b%d\n' % (i, i) for i in range(depth))
        + b"Content-Type: text/plain\n\ndeep words\n"
    )
    item = MailItem("deep", raw)
    toks = Tokenizer(UNIGRAMS).tokenize(parse_message(item, max_bytes=MAX_BYTES))
    assert problems(toks) == []
    assert "deep" in toks


# -- corpora -----------------------------------------------------------------


@pytest.mark.corpus
@pytest.mark.parametrize("corpus", ["spamassassin-testdata", "nazario-phishing"])
def test_every_corpus_message_tokenizes_into_clean_tokens(corpora_dir: Path, corpus: str) -> None:
    tokenizer = Tokenizer()
    count = 0
    bad: list[tuple[str, list[tuple[str, str]]]] = []
    for _, item in read_index(str(corpora_dir / corpus / "index")):
        toks = tokenizer.tokenize(parse_message(item, max_bytes=MAX_BYTES))
        assert toks, item.source
        found = problems(toks)
        if found:
            bad.append((item.source, found[:3]))
        count += 1
    assert count > 100
    assert bad == []


# -- property tests ----------------------------------------------------------

SEEDS = [
    PLAIN,
    HTML_MESSAGE,
    ATTACHMENT_MESSAGE,
    b"Subject: =?utf-8?b?" + base64.b64encode("免费发票 Café".encode()) + b"?=\nTo: a@b.example\n\n" + "Привет мир\n".encode(),
    b"""From: "Q" <q@x.example>
Content-Type: multipart/alternative; boundary="=_1"

--=_1
Content-Type: text/plain; charset=iso-8859-1
Content-Transfer-Encoding: quoted-printable

caf=E9 cr=E8me
--=_1
Content-Type: text/html; charset=utf-8
Content-Transfer-Encoding: base64

PGEgaHJlZj0iaHR0cDovL3guZXhhbXBsZS5jb20vYSI+aGk8L2E+
--=_1--
""",
]


def tokenize_item(raw: bytes) -> list[str] | None:
    """Tokens of ``raw`` as the filter reads it, or None when it is refused as not mail."""
    try:
        message = parse_message(MailItem("fuzz", raw), max_bytes=MAX_BYTES)
    except MailParseError:
        return None
    return Tokenizer().tokenize(message)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=3000))
def test_random_bytes_never_raise_and_give_clean_tokens(raw: bytes) -> None:
    toks = tokenize_item(raw)
    if toks is not None:
        assert problems(toks) == []


_MUTATION_BYTES = st.sampled_from(
    [
        b"\n",
        b"\r\n",
        b" ",
        b"\t",
        b":",
        b";",
        b"=?",
        b"?=",
        b"\x00",
        b"\xff",
        b"\xc3",
        b"<",
        b">",
        b'"',
        b"(",
        b"--",
        b"--XX",
        b"--=_1\n",
        b"=\n",
        b"=E9",
        b"&#",
        b"&amp;",
        b"<script>",
        b"<!--",
        b"\xe2\x80\xa8",
        b"\x1c",
    ]
) | st.binary(min_size=1, max_size=20)


@st.composite
def mutated_messages(draw: st.DrawFn) -> bytes:
    raw = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["insert", "delete", "replace", "duplicate"]))
        at = draw(st.integers(0, len(raw)))
        if kind == "insert":
            raw[at:at] = draw(_MUTATION_BYTES)
        elif kind == "delete":
            del raw[at : at + draw(st.integers(1, 40))]
        elif kind == "replace":
            raw[at : at + 1] = draw(_MUTATION_BYTES)
        else:
            raw[at:at] = raw[at : at + draw(st.integers(1, 200))] * draw(st.integers(1, 20))
    return bytes(raw)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_messages())
def test_mutated_messages_never_raise_and_give_clean_tokens(raw: bytes) -> None:
    toks = tokenize_item(raw)
    if toks is not None:
        assert problems(toks) == []


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_words_of_any_text_never_contain_whitespace(text: str) -> None:
    for config in (TokenizerConfig(), TokenizerConfig(fold_case=False, stemmer="porter")):
        assert problems(Tokenizer(config).words(text)) == []


def test_bigrams_are_on_by_default_and_join_adjacent_body_words() -> None:
    assert Tokenizer().words("cheap pills now") == ["cheap", "pills", "now", "bi:cheap+pills", "bi:pills+now"]
    assert Tokenizer().words("cheap pills", "subject:") == ["subject:cheap", "subject:pills"]


def test_header_line_tokens_are_told_from_the_rest() -> None:
    from spamfilter.tokenizer import is_header_line

    header = [
        "header:x-mailer",
        "from:domain:example.com",
        "to:name:bob",
        "reply-to:domain:a.b",
        "received:ip:10.0",
        "received:host:mx.example.com",
        "message-id:domain:example.com",
        "mailer:outlook",
        "x-spam-level:high",
        "list-id:users",
        "precedence:bulk",
    ]
    rest = [
        "header:subject",
        "subject:free",
        "content-type:text/html",
        "charset:utf-8",
        "encoding:base64",
        "attachment:ext:exe",
        "url:host:bit.ly",
        "email:domain:x.org",
        "html:tag:img",
        "skip:l:20",
        "num:12345",
        "bi:free+money",
        "meta:empty",
        "money",
        "don't",
    ]
    assert [t for t in header if is_header_line(t)] == header
    assert [t for t in rest if is_header_line(t)] == []


@pytest.mark.parametrize(
    ("markup", "shown"),
    [
        pytest.param("<html><head><title>t</title><body>cheap pills</body>", "cheap pills", id="head-never-closed"),
        pytest.param("<head><meta charset=x></head><body>cheap pills</body>", "cheap pills", id="head-closed"),
        pytest.param("<p>cheap<!-->pills", "cheap pills", id="empty-comment"),
        pytest.param("<p>cheap<!--->pills", "cheap pills", id="empty-comment-with-dash"),
        pytest.param("<p>cheap<!-- hidden --!>pills", "cheap pills", id="comment-closed-by-dash-dash-bang"),
        pytest.param("<style-box>cheap pills</style-box>", "cheap pills", id="custom-element-named-like-style"),
        pytest.param("<title-x>cheap pills</title-x><head-line>now</head-line>", "cheap pills now", id="custom-elements-named-like-title-and-head"),
    ],
)
def test_html_text_a_browser_shows_is_read(markup: str, shown: str) -> None:
    # An unclosed <head> (</head> may be left out), comment endings browsers
    # accept, and custom elements whose names start like style or title hid
    # the rest of the part from the filter.
    assert html_text.extract(markup).text.split() == shown.split()


@pytest.mark.parametrize(
    "markup", ["<head><title>t</title></head><body>x", "a<!-- hidden -->b", "a<!--!>hidden", "<style>hidden{}</style>x", "<script>hidden()</script>x", "a<!-- hidden"]
)
def test_html_what_a_browser_hides_stays_hidden(markup: str) -> None:
    assert "hidden" not in html_text.extract(markup).text
