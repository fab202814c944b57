"""Mail to tokens: ``Tokenizer(config).tokenize(message) -> list[str]``.

A token is a plain word from the body ("viagra", "meeting"), or evidence from
elsewhere carried in its own namespace so it can never collide with a body
word: ``subject:free``, ``from:domain:example.com``, ``url:host:bit.ly``,
``html:tag:img``, ``attachment:ext:exe``, ``skip:l:20`` (SpamBayes's idea).
Every prefix is declared once below.

The list keeps repeats (the multinomial model counts them); the Bernoulli and
binary models use each token once per message.

Choices and why
---------------
* Case is folded. Keeping it (as bogofilter does) moved online 1-ROCA on
  spamassassin from 0.412% to 0.403% (textbook model, 2026-11-25): within
  noise, for a larger vocabulary. ``fold_case = false`` keeps case.
* Adjacent body words also give a bigram token ``bi:first+second``
  (``bigrams``, on by default). Online with tempering 0.5 it lowered 1-ROCA
  on spamassassin from 0.44% to 0.34%, on enron1 from 0.32% to 0.21%, on
  csdmc2010 from 0.14% to 0.12%, for about twice the tokens per message.
* Words shorter than ``min_word_length`` (3) are dropped: they are mostly
  stop words and HTML debris. Longer than ``max_word_length`` become
  ``skip:<first char>:<length rounded down to 10>``: base64 runs, hashes and
  glued-together junk are evidence by their shape, not their spelling.
* Numbers keep up to 4 digits ("2002", "100"); longer ones become
  ``num:<digits>`` (phone and order numbers are unique per message, their
  length is not). A money sign stays on the number: "$100" differs from "100".
* Runs of CJK ideographs and kana (no spaces between words) become
  overlapping character bigrams, so Chinese and Japanese mail gets tokens
  at all; other scripts (Cyrillic, Greek, Arabic...) split on non-word
  characters like Latin.
* Headers: each header name present gives ``header:<name>``; Subject words,
  From/To/Reply-To addresses and names, Received hosts and IP prefixes,
  Message-ID domains, mailer names and content types get their own
  namespaces; other headers give ``<name>:<word>``. Signature and trace
  headers made of random strings (DKIM-Signature, ...) are skipped, and so
  are the headers spamfilter itself adds when filtering.
* The words of the headers mailing lists add (List-*, Sender, Errors-To,
  Precedence, X-BeenThere, X-Mailman-Version, X-Loop, Mailing-List,
  X-Mailing-List) name the list: ``list_header_words = false`` leaves them
  out and keeps ``header:<name>``. On the spamassassin half split (train on
  the older half, classify the newer) it took 1-ROCA from 1.36% to 0.88%,
  online unchanged (0.339% -> 0.340%): lists there carried spam too, and a
  list's spam then counted against its later ham. On csdmc2010, whose lists
  carry only ham, the split went from 0.74% to 1.78%. Alone it would not be
  worth it; with the header lines' evidence scored apart from the text's
  (``[model] header_apart``, ``is_header_line``) leaving the list words out
  beat bogofilter on both splits (0.47% and 0.25% against 0.53% and 0.48%)
  and took online 1-ROCA from 0.339% to 0.260% and from 0.121% to 0.075%,
  so both are the defaults (docs/benchmarks.md, "Token classes and later
  mail").
"""

from __future__ import annotations

import email.message
import email.utils
import re
from collections.abc import Callable, Iterable, Iterator

from spamfilter.config import Stemmer, TokenizerConfig
from spamfilter.headers import FILTER_HEADERS, MAILBOX_HEADERS
from spamfilter.tokenizer import html as html_text
from spamfilter.tokenizer import mime
from spamfilter.tokenizer.features import TextShape
from spamfilter.tokenizer.words import body_words

# -- token namespaces ------------------------------------------------------
SUBJECT = "subject:"
FROM = "from:"
TO = "to:"
REPLY_TO = "reply-to:"
RECEIVED = "received:"
MESSAGE_ID = "message-id:"
MAILER = "mailer:"
HEADER = "header:"
CONTENT_TYPE = "content-type:"
CHARSET = "charset:"
ENCODING = "encoding:"
ATTACHMENT = "attachment:"
URL = "url:"
EMAIL = "email:"
HTML = "html:"
SKIP = "skip:"
NUMBER = "num:"
BIGRAM = "bi:"
META = "meta:"

#: Namespaces whose tokens come from header lines other than the Subject's
#: words (``is_header_line``), and the ones that do not: the Subject, MIME
#: parts, the body's URLs, addresses, HTML and words.
_HEADER_LINE_NAMESPACES = frozenset(p[:-1] for p in (FROM, TO, REPLY_TO, RECEIVED, MESSAGE_ID, MAILER, HEADER))
_TEXT_NAMESPACES = frozenset(p[:-1] for p in (SUBJECT, CONTENT_TYPE, CHARSET, ENCODING, ATTACHMENT, URL, EMAIL, HTML, SKIP, NUMBER, BIGRAM, META))


def is_header_line(token: str) -> bool:
    """Whether ``token`` comes from a header line other than the Subject's
    words: ``header:<name>`` (but ``header:subject``), From, To, Reply-To,
    Received, Message-ID and mailer tokens, and the ``<name>:<word>`` of
    other headers. ``[model] header_apart`` scores these apart from the rest."""
    namespace, colon, _ = token.partition(":")
    if not colon:
        return False
    if namespace in _HEADER_LINE_NAMESPACES:
        return token != HEADER + "subject"
    return namespace not in _TEXT_NAMESPACES


#: Headers that give no token, not even their name: those spamfilter writes
#: when filtering (and other filters' verdicts of the same name), or a
#: filtered message would vouch for itself; and the mailbox annotations a
#: store or client writes (read, flagged, UID: ``headers.MAILBOX_HEADERS``),
#: which a message on delivery does not have and the same message trained
#: from a folder does.
_NO_EVIDENCE = frozenset(name.lower() for name in FILTER_HEADERS + MAILBOX_HEADERS)

# Headers that are random per message (signatures, trace ids) or are
# handled by a dedicated routine below.
_SKIP_HEADERS = frozenset(
    {
        "dkim-signature",
        "domainkey-signature",
        "arc-seal",
        "arc-message-signature",
        "x-google-dkim-signature",
        "authentication-results",
        "arc-authentication-results",
        "date",
        "delivered-to",
        "references",
        "in-reply-to",
        "thread-index",
        "x-ms-tnef-correlator",
        "x-gmail-labels",
        "x-gm-thrid",
        "resent-date",
    }
)
_SPECIAL_HEADERS = frozenset(
    {"subject", "from", "to", "cc", "reply-to", "received", "message-id", "x-mailer", "user-agent", "content-type", "content-transfer-encoding", "mime-version"}
)
#: Headers a mailing list adds; ``list_header_words = false`` keeps only their
#: names. Every header whose name starts with "list-" counts too.
LIST_HEADERS = frozenset({"sender", "errors-to", "precedence", "x-beenthere", "x-mailman-version", "x-loop", "mailing-list", "x-mailing-list"})
_MAX_HEADER_WORDS = 60
_MAX_RECEIVED = 8

_URL = re.compile(r"\b(?:(?:https?|ftp)://|www\.)[^\s<>\"'()]{1,500}", re.IGNORECASE)
_EMAIL = re.compile(r"\b[\w.+\-]{1,64}@([\w\-]{1,63}(?:\.[\w\-]{1,63}){1,8})")
#: ``_EMAIL``'s domain alone (matched right after an "@").
_EMAIL_DOMAIN = re.compile(r"[\w\-]{1,63}(?:\.[\w\-]{1,63}){1,8}")
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]{2,}")
#: Deletes the ASCII digits: an ASCII word's digits are counted as what this leaves out.
_ASCII_DIGITS = str.maketrans("", "", "0123456789")
_IPV4 = re.compile(r"\b(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\b")
# At most 10 dots: with "+" a Received line of "a.a.a.a..." was rescanned
# to its end from every label, quadratic (40 KB took 14 s).
_HOSTNAME = re.compile(r"\b[a-z0-9](?:[a-z0-9\-]{0,62}\.){1,10}[a-z]{2,24}\b")
_STEM_CACHE_LIMIT = 200_000


def load_stemmer(name: Stemmer) -> Callable[[str], str] | None:
    """nltk's stemmer named by ``[tokenizer] stemmer``, or None for "none".

    nltk is imported here and only here, when a stemmer is on. Importing any
    nltk module runs nltk's package ``__init__``, which loads all of nltk
    (scipy.stats and, when installed, scikit-learn among it): 0.7 s and
    about 100 MB on top of each start, so the default delivery filter leaves
    it out. Long runs (train, classify, evaluate, imap run) pay it once.
    """
    if name == "porter":
        from nltk.stem.porter import PorterStemmer

        stem: Callable[[str], str] = PorterStemmer().stem
        return stem
    if name == "snowball-english":
        from nltk.stem.snowball import EnglishStemmer

        stem = EnglishStemmer().stem
        return stem
    return None


class Tokenizer:
    """Turns a parsed message into a list of tokens (see module docstring).

    Instances keep a stemming cache when a ``stemmer`` is on; create one per
    process or thread and reuse it.
    """

    def __init__(self, config: TokenizerConfig | None = None) -> None:
        self.config = config or TokenizerConfig()
        self._stemmer = load_stemmer(self.config.stemmer)
        self._stem_cache: dict[str, str] = {}

    # -- public -------------------------------------------------------------

    def tokenize(self, message: email.message.Message, shape: TextShape | None = None) -> list[str]:
        """All tokens of ``message``, repeats kept, in document order; with
        ``shape``, also counts the body text's letters into it (for
        ``features.message_features``)."""
        out: list[str] = []
        if self.config.header_tokens:
            self._headers(message, out)
        else:
            subject = message.get("subject")
            if subject is not None:
                out.extend(self.words(mime.decode_header(subject)))
        self._body(message, out, shape)
        return out

    def words(self, text: str, prefix: str = "") -> list[str]:
        """Normalised words of free text (the body rules), each with ``prefix``."""
        cfg = self.config
        lo, hi = cfg.min_word_length, cfg.max_word_length
        if cfg.fold_case:
            text = text.lower()
        result: list[str] = []
        if _CJK_RUN.search(text):
            for run in _CJK_RUN.findall(text):
                result.extend(prefix + run[i : i + 2] for i in range(len(run) - 1))
            text = _CJK_RUN.sub(" ", text)
        stem = self._stem if self._stemmer is not None else None
        for word in body_words(text):
            n = len(word)
            first = word[0]
            if first.isdigit() or first == "$":
                # Digits, not characters: "$19.99" and "3,500" have 4 and stay.
                digits = n - len(word.translate(_ASCII_DIGITS)) if word.isascii() else sum(c.isdigit() for c in word)
                if digits > 4 and word.replace(",", "").replace(".", "").lstrip("$").isdigit():
                    word = NUMBER + ("$" if first == "$" else "") + str(min(digits, 20))
                    result.append(prefix + word)
                    continue
                if n > hi:
                    result.append(prefix + SKIP + "num:" + str(n // 10 * 10))
                    continue
                if n >= lo or first == "$":
                    result.append(prefix + word)
                continue
            if n < lo:
                continue
            if n > hi:
                result.append(prefix + SKIP + first + ":" + str(n // 10 * 10))
                continue
            # The pattern starts a word with a letter and ends it with a word
            # character, so there is no punctuation left to strip here.
            result.append(prefix + (stem(word) if stem else word))
        if cfg.bigrams and not prefix:
            plain = [w for w in result if ":" not in w]
            result += [f"{BIGRAM}{a}+{b}" for a, b in zip(plain, plain[1:])]
        return result

    # -- headers ------------------------------------------------------------

    def _headers(self, message: email.message.Message, out: list[str]) -> None:
        seen: set[str] = set()
        received = 0
        for name, value in message.items():
            key = name.strip().lower()
            if not key or key in _NO_EVIDENCE:
                continue
            if key not in seen:
                seen.add(key)
                if len(key) <= 40:
                    out.append(HEADER + key)
            if key in _SKIP_HEADERS:
                continue
            if not self.config.list_header_words and (key in LIST_HEADERS or key.startswith("list-")):
                continue
            text = mime.decode_header(value)
            if key == "received":
                received += 1
                if received <= _MAX_RECEIVED:
                    out.extend(received_tokens(text))
            elif key not in _SPECIAL_HEADERS:
                out.extend(self.words(text, key[:30] + ":")[:_MAX_HEADER_WORDS])
        subject = message.get("subject")
        if subject is not None:
            text = mime.decode_header(subject)
            out.extend(self.words(text, SUBJECT))
            out.extend(_punctuation_runs(text, SUBJECT))
        for key, prefix in (("from", FROM), ("reply-to", REPLY_TO)):
            address = message.get(key)
            if address is not None:
                out.extend(self._address_tokens(mime.decode_header(address), prefix))
        recipients = [mime.decode_header(v) for k in ("to", "cc") for v in (message.get_all(k) or [])]
        if recipients:
            addresses = [a for _, a in _getaddresses(recipients) if a]
            out.append(TO + "count:" + _bucket(len(addresses)))
            for domain in sorted({_domain(a) for a in addresses[:50]} - {""}):
                out.append(TO + "domain:" + domain)
        message_id = message.get("message-id")
        if message_id is not None:
            out.append(MESSAGE_ID + _message_id_shape(_squeeze(mime.decode_header(message_id))))
        for key in ("x-mailer", "user-agent"):
            mailer = message.get(key)
            if mailer is not None:
                out.extend(self.words(mime.decode_header(mailer), MAILER))

    def _address_tokens(self, value: str, prefix: str) -> Iterator[str]:
        try:
            name, address = email.utils.parseaddr(value)
        except RecursionError:
            name, address = "", ""
        address = _squeeze(address).lower()
        if address:
            yield prefix + "addr:" + address[:80]
            domain = _domain(address)
            if domain:
                yield prefix + "domain:" + domain
        else:
            yield prefix + "no-address"
        if name:
            yield from self.words(name, prefix + "name:")
        else:
            yield prefix + "no-name"

    # -- body ---------------------------------------------------------------

    def _body(self, message: email.message.Message, out: list[str], shape: TextShape | None = None) -> None:
        limit = self.config.max_bytes
        scanned = 0
        text_parts = 0
        parts = 0
        for part in _leaves(message):
            parts += 1
            ctype = mime.content_type(part)
            out.append(CONTENT_TYPE + _squeeze(ctype)[:100])
            charset = mime.declared_charset(part)
            if charset is not None:
                out.append(CHARSET + _squeeze(charset).strip("\"'").lower()[:30])
            cte = part.get("content-transfer-encoding")
            if cte is not None:
                out.append(ENCODING + _squeeze(str(cte)).lower()[:30])
            name = mime.filename(part)
            maintype = ctype.partition("/")[0]
            if name is not None or maintype not in ("text", "multipart", "message"):
                out.extend(self._attachment_tokens(ctype, name))
                continue
            if scanned >= limit:
                out.append(META + "truncated")
                continue
            text = mime.part_text(part, limit - scanned)
            scanned += len(text)
            text_parts += 1
            if ctype == "text/html":
                page = html_text.extract(text)
                out.extend(HTML + "tag:" + t for t in page.tags)
                for link in page.links:
                    out.extend(url_tokens(link))
                text = page.text
            if shape is not None:
                shape.add(text)
            self._text(text, out)
        if parts > 1:
            out.append(META + "parts:" + _bucket(parts))
        if text_parts == 0:
            out.append(META + "no-text")

    def _text(self, text: str, out: list[str]) -> None:
        # One pass of each pattern takes the tokens and blanks the match,
        # and only over text that can hold one (every URL match has "://"
        # or "www.", every address an "@"): a finditer and a sub over every
        # text part were a quarter of the time spent here.
        if "://" in text or "www." in text.lower():

            def url(m: re.Match[str]) -> str:
                out.extend(url_tokens(m.group(0)))
                return " "

            text = _URL.sub(url, text)
        if "@" in text:

            def address(m: re.Match[str]) -> str:
                out.append(EMAIL + "domain:" + m.group(1).lower()[:100])
                return " "

            text = sub_addresses(text, address)
        out.extend(self.words(text))

    def _attachment_tokens(self, ctype: str, name: str | None) -> Iterator[str]:
        yield ATTACHMENT + "type:" + _squeeze(ctype)[:100]
        if name:
            stem, dot, ext = name.lower().rpartition(".")
            ext = _squeeze(ext)  # "scan.p df" must not give "ext:p df"
            if dot and 0 < len(ext) <= 8:
                yield ATTACHMENT + "ext:" + ext
            yield from self.words(stem or name, ATTACHMENT + "name:")

    def _stem(self, word: str) -> str:
        cached = self._stem_cache.get(word)
        if cached is None:
            assert self._stemmer is not None
            cached = self._stemmer(word)
            if len(self._stem_cache) < _STEM_CACHE_LIMIT:
                self._stem_cache[word] = cached
        return cached


def sub_addresses(text: str, repl: Callable[[re.Match[str]], str]) -> str:
    r"""``_EMAIL.sub(repl, text)``, looked for only at each "@": the pattern
    tried at every word of a long text was the costliest step of reading an
    address (0.25 s against 0.03 over the 1,299 texts holding an "@" of
    2,000 spamassassin messages). The same matches: the domain is matched
    right after the "@" first (most "@" have none, and then nothing more is
    tried: a body of "a@a@a@..." searched 600 characters around each "@",
    10 s for 200 KB); the local part is the run of its characters just
    before the "@" (64 at most, and none before the last match's end, where
    the pattern's ``\b`` still sees the character before, the match being
    on the whole string), from its first position where ``\b`` holds."""
    pieces: list[str] = []
    last = 0
    at = text.find("@")
    while at >= 0:
        m = _address_at(text, at, last) if at > last else None
        if m is None:
            at = text.find("@", at + 1)
            continue
        pieces.append(text[last : m.start()])
        pieces.append(repl(m))
        last = m.end()
        at = text.find("@", last)
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


def _address_at(text: str, at: int, last: int) -> re.Match[str] | None:
    """The ``_EMAIL`` match whose "@" is ``text[at]``, starting at or after
    ``last``; None when there is none."""
    domain = _EMAIL_DOMAIN.match(text, at + 1)
    if domain is None:
        return None
    start = at
    lowest = max(last, at - 64)
    while start > lowest and _is_local_char(text[start - 1]):
        start -= 1
    for p in range(start, at):
        m = _EMAIL.match(text, p, domain.end())
        if m is not None:
            return m
    return None


def _is_local_char(ch: str) -> bool:
    r"""Whether ``ch`` is in an address's local part, ``[\w.+\-]`` (``\w``
    being what the re module counts as a word character: alphanumeric or
    the underscore)."""
    return ch.isalnum() or ch in "_.+-"


def _leaves(message: email.message.Message) -> Iterable[email.message.Message]:
    """Non-multipart parts in depth-first order, at most 200 of them; the
    stdlib parser has already bounded nesting while parsing."""
    count = 0
    stack = [message]
    while stack and count < 200:
        part = stack.pop()
        # get_payload() only on a multipart, where it returns the list as is:
        # on a leaf with 8-bit bytes it decodes the whole text with the
        # charset parameter, and a NUL in that raised ValueError.
        payload = part.get_payload() if part.is_multipart() else None
        if isinstance(payload, list):
            stack.extend(reversed([p for p in payload if isinstance(p, email.message.Message)]))
            continue
        count += 1
        yield part


def url_tokens(url: str) -> list[str]:
    """``url:host:`` for the host and each parent domain, ``url:path:`` pieces,
    ``url:ip`` for numeric hosts, ``url:scheme:``."""
    url = _squeeze(url).lower()
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = ("mailto", url[7:]) if url.startswith("mailto:") else ("", url)
    out = [URL + "scheme:" + scheme[:10]] if scheme else []
    if scheme == "mailto":
        domain = _domain(rest.partition("?")[0])
        return out + ([URL + "mailto:" + domain] if domain else [])
    host, _, path = rest.partition("/")
    host = host.rpartition("@")[2].partition(":")[0][:100]
    if host:
        if _IPV4.fullmatch(host):
            out.append(URL + "ip")
        else:
            labels = [p for p in host.split(".") if p]
            for i in range(max(len(labels) - 1, 1)):
                out.append(URL + "host:" + ".".join(labels[i:]))
    for piece in re.split(r"[/?&=#._\-+%]+", path)[:20]:
        if 3 <= len(piece) <= 20:
            out.append(URL + "path:" + piece)
        elif len(piece) > 20:
            out.append(URL + "path:" + SKIP + str(len(piece) // 10 * 10))
    return out


def received_tokens(value: str) -> list[str]:
    """Host names (and their parent domains) and IPv4 /8, /16, /24 prefixes of a Received line."""
    text = value.lower()
    out: list[str] = []
    for m in _IPV4.finditer(text):
        a, b, c, _ = m.groups()
        out.extend((RECEIVED + "ip:" + a, RECEIVED + "ip:" + a + "." + b, RECEIVED + "ip:" + a + "." + b + "." + c))
    for m in _HOSTNAME.finditer(text):
        labels = m.group(0).split(".")
        for i in range(max(len(labels) - 1, 1)):
            out.append(RECEIVED + ".".join(labels[i:])[:100])
    return out


def _getaddresses(values: list[str]) -> list[tuple[str, str]]:
    """email.utils.getaddresses, or nothing when the header nests comments
    "((((..." deeper than the stdlib's recursive parser can follow."""
    try:
        return email.utils.getaddresses(values)
    except RecursionError:
        return []


def _punctuation_runs(text: str, prefix: str) -> list[str]:
    return [prefix + run for run in re.findall(r"[!?$*]{2,5}", text)]


def _domain(address: str) -> str:
    return _squeeze(address.rpartition("@")[2]).strip(".>").lower()[:100] if "@" in address else ""


def _message_id_shape(value: str) -> str:
    """The domain of a Message-ID, or a note that it has none: forged IDs
    are a classic spam sign, real mailers put their host there."""
    value = value.strip().strip("<>")
    if "@" not in value:
        return "no-domain"
    domain = value.rpartition("@")[2].strip(" >").lower()
    return "domain:" + domain[:60] if domain else "no-domain"


def _bucket(n: int) -> str:
    """Small counts exact, larger ones by powers of two: 0..4, 8, 16, 32, ..."""
    if n <= 4:
        return str(n)
    return str(1 << (n.bit_length() - 1))


def _squeeze(value: str) -> str:
    """Drop all white space and NULs: folded header values must not put a
    newline or a blank inside a token, and raw ones (Content-Type,
    Content-Transfer-Encoding) may hold NULs."""
    return "".join(value.split()).replace("\x00", "")
