"""Decoding what the stdlib parser leaves raw: header words, part payloads, charsets.

Mail lies about its encoding all the time: charsets that do not exist
("x-unknown", "unicode-1-1-utf-7" from old mailers), us-ascii labels on 8-bit
text, raw 8-bit bytes in headers, truncated base64. Every function here turns
such input into clean ``str`` (no lone surrogates, no NULs) and never raises.
"""

from __future__ import annotations

import binascii
import codecs
import email.errors
import email.header
import email.message
import email.utils
import encodings
import encodings.aliases
import re
from functools import cache

# Labels seen in real mail that codecs does not know, or that name a subset
# of what is actually sent (a message labelled iso-8859-1 is very often
# cp1252: "smart quotes" in 0x80-0x9f).
_CHARSET_ALIASES = {
    "x-unknown": "utf-8",
    "unknown-8bit": "utf-8",
    "x-user-defined": "cp1252",
    "iso-8859-1": "cp1252",
    "latin1": "cp1252",
    "latin-1": "cp1252",
    "us-ascii": "utf-8",
    "ascii": "utf-8",
    "ks_c_5601-1987": "cp949",
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "windows-874": "cp874",
    "x-mac-roman": "mac_roman",
}

# An RFC 2047 encoded word: =?charset?b-or-q?text?=. Not decoded with
# email.header.decode_header: its pattern ends a word with a lazy ".*?" up to
# "?=", so every "=?" never closed rescans the rest of the line (a 400 KB
# From of "=?a?q?x " took over 6 minutes), and it returns plain text around
# encoded words as raw-unicode-escape bytes ("Привет" came back as
# "\\u041f\\u0440..."). This pattern cannot run past the next "?" (encoded
# text holds none), so one pass is linear.
_ENCODED_WORD = re.compile(r"=\?([^?\r\n]*)\?([bBqQ])\?([^?\r\n]*)\?=")

# Headers whose parameters are parsed (Content-Type, Content-Disposition)
# longer than this are not parsed: the stdlib's parameter splitter is
# quadratic (it recounts quotes from the start for every ";"), and 50 KB of
# ";" after a quote took 7 s. Real ones are a few hundred characters.
_MAX_PARAM_HEADER = 8192

# Codecs Python has that no mail charset needs and that cost more than a
# pass over the text: punycode and idna decode in quadratic time (190 KB of
# "-9999..." took 7.6 s, an idna Subject 21 s); the escape codecs and
# "undefined" turn text into other text or fail.
_REFUSED_CODECS = frozenset({"punycode", "idna", "unicode_escape", "raw_unicode_escape", "undefined"})

# A lone surrogate (which UTF-7 decodes "+2AA-" into) cannot be encoded, so
# it would fail every later step: the store's driver, the digest, a write.
_SURROGATE = re.compile("[\ud800-\udfff]")
# The surrogates ``message_from_bytes`` escapes 8-bit bytes as, and the rest.
_FOREIGN_SURROGATE = re.compile("[\ud800-\udc7f\udd00-\udfff]")

_DECODE_ERRORS = (UnicodeError, LookupError, ValueError, TypeError, binascii.Error, AssertionError, IndexError)


def codec_for(charset: str | None) -> str | None:
    """A codec name Python knows for a declared charset, or None (also for
    the codecs of ``_REFUSED_CODECS``).

    Only names Python ships a codec or an alias for are looked up: the
    standard library remembers every name it was asked for and did not
    know, for the life of the process, so a daemon asked for made-up
    charsets grew by about 180 KB a message."""
    if not charset:
        return None
    label = charset.strip().strip("\"'").lower()
    label = _CHARSET_ALIASES.get(label, label)
    normal = encodings.normalize_encoding(label)
    if normal not in _known_codec_names() and normal.replace(".", "_") not in _known_codec_names():
        return None
    try:
        name = codecs.lookup(label).name
    except (LookupError, ValueError):  # ValueError: a NUL in the label
        return None
    return None if name.replace("-", "_") in _REFUSED_CODECS else name


@cache
def _known_codec_names() -> frozenset[str]:
    """Every codec name and alias the standard library's codecs know, normalised."""
    import pkgutil  # noqa: PLC0415 (only when mail names a charset)

    modules = {m.name for m in pkgutil.iter_modules(encodings.__path__)}
    return frozenset(encodings.aliases.aliases) | frozenset(encodings.aliases.aliases.values()) | frozenset(modules)


def decode_bytes(data: bytes, charset: str | None = None) -> str:
    """Bytes to text: the declared charset if it decodes cleanly, else UTF-8,
    else cp1252 with replacement characters. Never raises.

    Rationale: UTF-8 is self-validating, so a clean UTF-8 decode is almost
    never a wrong guess; cp1252 maps every byte but five, so it is the last resort.
    """
    codec = codec_for(charset)
    if codec is not None and codec not in ("utf-8", "cp1252"):
        try:
            return _clean(data.decode(codec))
        except _DECODE_ERRORS:
            pass
    try:
        return _clean(data.decode("utf-8"))
    except UnicodeDecodeError:
        pass
    if codec is not None and codec != "utf-8":
        try:
            return _clean(data.decode(codec, errors="replace"))
        except _DECODE_ERRORS:
            pass
    return _clean(data.decode("cp1252", errors="replace"))


def _clean(text: str) -> str:
    if "\x00" in text:
        text = text.replace("\x00", " ")
    if not text.isascii() and _SURROGATE.search(text) is not None:
        text = _SURROGATE.sub("\ufffd", text)
    return text


def unescape_surrogates(value: str) -> str:
    """Header strings from ``message_from_bytes`` carry 8-bit bytes as lone
    surrogates; turn them back into bytes and decode those properly."""
    try:
        value.encode("utf-8")
        return _clean(value)
    except UnicodeEncodeError:
        # Other surrogates than escaped bytes (text decoded from UTF-7
        # earlier) cannot go back to bytes: they become U+FFFD first.
        raw = _FOREIGN_SURROGATE.sub("\ufffd", value).encode("utf-8", errors="surrogateescape")
        return decode_bytes(raw)


def decode_header(value: object) -> str:
    """A header value as text: RFC 2047 encoded words decoded, 8-bit bytes
    decoded as UTF-8 or cp1252, never raising."""
    if isinstance(value, email.header.Header):
        # compat32 wraps a header holding 8-bit bytes in a Header whose str()
        # turns every such byte into U+FFFD ("café" became "caf\ufffd\ufffd");
        # its chunks still carry the bytes as surrogate escapes.
        chunks = getattr(value, "_chunks", None)
        if isinstance(chunks, list):
            value = "".join(chunk for chunk, _ in chunks if isinstance(chunk, str))
        else:
            try:
                value = str(value)
            except _DECODE_ERRORS:
                value = value.encode()
    text = unescape_surrogates(str(value))
    if "=?" not in text:
        return text
    return _decode_encoded_words(text)


def _decode_encoded_words(text: str) -> str:
    """Replace the encoded words of ``text`` by their text, as RFC 2047 says:
    white space between two encoded words is dropped, and adjacent words in
    one charset are decoded together (mailers split a character across two).
    A word that does not decode stays as it is; the rest of ``text`` is kept."""
    out: list[str] = []
    run = bytearray()
    run_charset: str | None = None
    pos = 0
    for m in _ENCODED_WORD.finditer(text):
        data = _encoded_word_bytes(m.group(2), m.group(3))
        if data is None:
            continue
        gap = text[pos : m.start()]
        charset = m.group(1).partition("*")[0].lower()  # "utf-8*en": RFC 2231 language
        adjacent = run_charset is not None and (not gap or gap.isspace())
        if not (adjacent and charset == run_charset):
            if run_charset is not None:
                out.append(decode_bytes(bytes(run), run_charset))
            run.clear()
            if not adjacent:
                out.append(gap)
            run_charset = charset
        run += data
        pos = m.end()
    if run_charset is not None:
        out.append(decode_bytes(bytes(run), run_charset))
    out.append(text[pos:])
    return "".join(out)


def _encoded_word_bytes(encoding: str, data: str) -> bytes | None:
    encoded = data.encode("utf-8", errors="replace")
    try:
        if encoding in "bB":
            # Padding is often missing; extra "=" is ignored.
            return binascii.a2b_base64(encoded + b"==")
        return binascii.a2b_qp(encoded, header=True)
    except binascii.Error:
        return None


def part_payload(part: email.message.Message, limit: int) -> bytes:
    """The transfer-decoded bytes of a leaf part (base64, quoted-printable),
    at most ``limit`` of them. Broken encodings give what could be decoded."""
    try:
        payload = part.get_payload(decode=True)
    except _DECODE_ERRORS:
        raw = part.get_payload(decode=False)
        payload = raw.encode("utf-8", errors="surrogateescape") if isinstance(raw, str) else b""
    if not isinstance(payload, bytes):
        return b""
    if any(isinstance(d, email.errors.InvalidBase64LengthDefect) for d in part.defects):
        # Base64 cut to 4n+1 characters: the stdlib hands back the encoded
        # text, which would become one skip: token. The last character holds
        # under a byte, so everything before it decodes.
        try:
            payload = binascii.a2b_base64(payload[:-1] + b"==")
        except binascii.Error:
            pass
    return payload[:limit]


def params_parseable(part: email.message.Message, *headers: str) -> bool:
    """Whether the parameters of ``headers`` (default Content-Type) may be
    parsed: false when one is too long for the stdlib's quadratic parser."""
    for name in headers or ("content-type",):
        value = part.get(name)
        if value is not None and len(str(value)) > _MAX_PARAM_HEADER:
            return False
    return True


def _charset_param(part: email.message.Message) -> object:
    """The charset parameter as the parser gives it (a str, or an RFC 2231
    (charset, language, value) tuple), or None, also when the parameters
    are too long or too broken to parse."""
    if not params_parseable(part):
        return None
    try:
        return part.get_param("charset")
    except _DECODE_ERRORS:  # TypeError from malformed RFC 2231 continuations
        return None


def declared_charset(part: email.message.Message) -> str | None:
    """The charset parameter as written, or None (also when the parameters
    are too long or too broken to parse)."""
    value = _charset_param(part)
    return value if isinstance(value, str) else None


def part_text(part: email.message.Message, limit: int) -> str:
    """A text part's content as ``str`` in its (possibly mislabelled) charset."""
    return decode_bytes(part_payload(part, limit), _content_charset(part))


def _content_charset(part: email.message.Message) -> str | None:
    """The part's charset parameter, lower case, as the standard library's
    ``get_content_charset`` gives it, but for an RFC 2231 value
    (charset*=utf-8''utf-8) read as written rather than decoded in the
    charset it names (an unbounded codec lookup; see `codec_for`)."""
    value = _charset_param(part)
    if isinstance(value, tuple):
        value = value[2]
    if not isinstance(value, str) or not value.isascii():
        return None
    return value.lower()


def content_type(part: email.message.Message) -> str:
    """The part's lower-case MIME type; ``text/plain`` when missing or broken."""
    try:
        return part.get_content_type()
    except _DECODE_ERRORS:
        return "text/plain"


def filename(part: email.message.Message) -> str | None:
    """An attachment's file name, decoded, or None."""
    if not params_parseable(part, "content-disposition", "content-type"):
        return None
    try:
        value = part.get_param("filename", None, "content-disposition")
        if value is None:
            value = part.get_param("name", None, "content-type")
    except _DECODE_ERRORS:
        return None
    if isinstance(value, tuple):
        # RFC 2231 (filename*=charset''text): decoded here, as `decode_bytes`
        # does, not by the standard library's unbounded codec lookup.
        charset, _, text = value
        name = decode_bytes(text.encode("raw-unicode-escape", errors="replace"), charset or None).strip()
    elif isinstance(value, str):
        name = email.utils.collapse_rfc2231_value(value).strip()
    else:
        return None
    return decode_header(name) if name else None
