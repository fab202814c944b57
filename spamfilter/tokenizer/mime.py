"""Decoding what the stdlib parser leaves raw: header words, part payloads, charsets.

Mail lies about its encoding all the time: charsets that do not exist
("x-unknown", "unicode-1-1-utf-7" from old mailers), us-ascii labels on 8-bit
text, raw 8-bit bytes in headers, truncated base64. Every function here turns
such input into clean ``str`` (no lone surrogates, no NULs) and never raises.
"""

from __future__ import annotations

import binascii
import codecs
import email.header
import email.message
import email.errors

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

_DECODE_ERRORS = (UnicodeError, LookupError, ValueError, TypeError, binascii.Error, AssertionError, IndexError)


def codec_for(charset: str | None) -> str | None:
    """A codec name Python knows for a declared charset, or None."""
    if not charset:
        return None
    label = charset.strip().strip("\"'").lower()
    label = _CHARSET_ALIASES.get(label, label)
    try:
        return codecs.lookup(label).name
    except LookupError:
        return None


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
    return text


def unescape_surrogates(value: str) -> str:
    """Header strings from ``message_from_bytes`` carry 8-bit bytes as lone
    surrogates; turn them back into bytes and decode those properly."""
    try:
        value.encode("utf-8")
        return _clean(value)
    except UnicodeEncodeError:
        raw = value.encode("utf-8", errors="surrogateescape")
        return decode_bytes(raw)


def decode_header(value: object) -> str:
    """A header value as text: RFC 2047 encoded words decoded, 8-bit bytes
    decoded as UTF-8 or cp1252, never raising."""
    if isinstance(value, email.header.Header):
        try:
            value = str(value)
        except _DECODE_ERRORS:
            value = value.encode()
    text = unescape_surrogates(str(value))
    if "=?" not in text:
        return text
    try:
        parts = email.header.decode_header(text)
    except (email.errors.HeaderParseError, *_DECODE_ERRORS):
        return text
    pieces: list[str] = []
    for chunk, charset in parts:
        if isinstance(chunk, bytes):
            pieces.append(decode_bytes(chunk, charset))
        else:
            pieces.append(chunk)
    return "".join(pieces)


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
    return payload[:limit]


def part_text(part: email.message.Message, limit: int) -> str:
    """A text part's content as ``str`` in its (possibly mislabelled) charset."""
    try:
        charset = part.get_content_charset()
    except _DECODE_ERRORS:
        charset = None
    return decode_bytes(part_payload(part, limit), charset)


def content_type(part: email.message.Message) -> str:
    """The part's lower-case MIME type; ``text/plain`` when missing or broken."""
    try:
        return part.get_content_type()
    except _DECODE_ERRORS:
        return "text/plain"


def filename(part: email.message.Message) -> str | None:
    """An attachment's file name, decoded, or None."""
    try:
        name = part.get_filename()
    except _DECODE_ERRORS:
        return None
    return decode_header(name) if name else None
