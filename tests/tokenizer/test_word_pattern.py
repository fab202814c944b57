"""Body words on stdlib ``re``: the same tokens as nltk's RegexpTokenizer
(the ``regex`` engine) gave, on hand-written edge cases and on the corpora,
and linear work on hostile text."""

from __future__ import annotations

import importlib.util
import re
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest
from nltk.tokenize import RegexpTokenizer

import spamfilter.tokenizer as tokenizer_module
from spamfilter.config import TokenizerConfig
from spamfilter.mail import parse_message, read_index
from spamfilter.tokenizer import Tokenizer, body_words
from spamfilter.tokenizer.wordchars import DIGIT, WORD

# The body-word pattern as it ran on nltk's RegexpTokenizer.
NLTK_PATTERN = r"\$?\d+(?:[.,]\d+)*|[^\W\d_](?:[\w'.\-]*\w)?"
nltk_words: Callable[[str], list[str]] = RegexpTokenizer(NLTK_PATTERN).tokenize
plain_re_words: Callable[[str], list[str]] = re.compile(NLTK_PATTERN).findall


def load_generator() -> ModuleType:
    """scripts/wordchars.py, which wrote the tables from ``regex``."""
    path = Path(__file__).resolve().parents[2] / "scripts" / "wordchars.py"
    spec = importlib.util.spec_from_file_location("wordchars_script", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_word_tables_are_the_regex_engines_word_and_digit_classes() -> None:
    generator = load_generator()
    assert list(WORD) == generator.ranges(r"\w")
    assert list(DIGIT) == generator.ranges(r"\d")


EDGE_CASES = {
    "combining accent": ("cafe\u0301 na\u0308ive", ["cafe\u0301", "na\u0308ive"]),
    "thai vowel marks": ("ภาษาไทย ง่ายมาก", ["ภาษาไทย", "ง่ายมาก"]),
    "arabic harakat": ("كَتَبَ الوَلَدُ", ["كَتَبَ", "الوَلَدُ"]),
    "devanagari virama": ("हिन्दी भाषा", ["हिन्दी", "भाषा"]),
    "persian zero-width non-joiner": ("می\u200cخواهم", ["می\u200cخواهم"]),
    "superscripts and fractions": ("x² 2³ ½ price", ["x", "2", "price"]),
    "other digits": ("٣٤٥ ١٢٣ $١٠٠ ৫৬", ["٣٤٥", "١٢٣", "$١٠٠", "৫৬"]),
    "roman numeral letters": ("chapter Ⅻ", ["chapter", "Ⅻ"]),
    "underscores": ("snake_case _lead trail_ __init__ a__b", ["snake_case", "lead", "trail_", "init__", "a__b"]),
    "connector punctuation": ("a\u203fb ab\uff3fcd", ["a\u203fb", "ab\uff3fcd"]),
    "cjk": ("中文字符 かな カナ", ["中文字符", "かな", "カナ"]),
    "apostrophes dots hyphens": ("don't e-mail u.s.a. -x- a'''b 'quoted' end.", ["don't", "e-mail", "u.s.a", "x", "a'''b", "quoted", "end"]),
    "numbers and money": ("$19.99 3,500 1.2.3 $ 12a", ["$19.99", "3,500", "1.2.3", "12", "a"]),
    "emoji between words": ("hi\U0001f600there \U0001f44d\U0001f3fdok", ["hi", "there", "ok"]),
    "astral letters": ("\U0001d41b\U0001d428\U0001d425\U0001d41d \U00010332\U0001033f", ["\U0001d41b\U0001d428\U0001d425\U0001d41d", "\U00010332\U0001033f"]),
    "astral digits": ("\U0001d7cf\U0001d7d0 a\U0001d7cfb $\U0001d7d1", ["\U0001d7cf\U0001d7d0", "a\U0001d7cfb", "$\U0001d7d1"]),
    "mark after an astral letter": ("\U00010332\u0301x", ["\U00010332\u0301x"]),
    "unicode 15 kannada sign": ("ಕ\u0cf3ನ", ["ಕ\u0cf3ನ"]),
}


@pytest.mark.parametrize("case", sorted(EDGE_CASES))
def test_edge_cases_give_nltks_tokens(case: str) -> None:
    text, expected = EDGE_CASES[case]
    assert nltk_words(text) == expected
    assert body_words(text) == expected


def test_edge_cases_include_texts_where_plain_re_differs() -> None:
    differing = sorted(case for case, (text, expected) in EDGE_CASES.items() if plain_re_words(text) != expected)
    assert len(differing) >= 8, differing


def sample(index: Path, n: int) -> list[tuple[bool, str]]:
    """``n`` messages of a corpus: half those with the most non-ASCII bytes
    (where the engines' word characters differ), half spread over the rest."""
    items = list(read_index(str(index)))
    by_foreign = sorted(range(len(items)), key=lambda i: -sum(b > 127 for b in items[i][1].raw))
    chosen = set(by_foreign[: n // 2])
    rest = [i for i in range(len(items)) if i not in chosen]
    chosen.update(rest[:: max(1, len(rest) // (n - len(chosen)))][: n - len(chosen)])
    return [(items[i][1].source, items[i][1].raw) for i in sorted(chosen)]  # type: ignore[misc]


@contextmanager
def words_from(engine: Callable[[str], list[str]], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    with monkeypatch.context() as m:
        m.setattr(tokenizer_module, "body_words", engine)
        yield


@pytest.mark.corpus
@pytest.mark.parametrize("corpus", ["spamassassin", "csdmc2010", "nazario-phishing", "enron-spam-preprocessed/enron1"])
def test_corpus_sample_gives_the_same_tokens_as_nltk(corpora_dir: Path, corpus: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from spamfilter.mail import MailItem

    tokenizer = Tokenizer()
    messages = sample(corpora_dir / corpus / "index", 300)
    assert len(messages) == 300
    differ, plain_differ, tokens = [], 0, 0
    for source, raw in messages:
        message = parse_message(MailItem(source, raw), max_bytes=10_000_000)
        ours = tokenizer.tokenize(message)
        with words_from(nltk_words, monkeypatch):
            theirs = tokenizer.tokenize(message)
        with words_from(plain_re_words, monkeypatch):
            plain_differ += tokenizer.tokenize(message) != theirs
        tokens += len(ours)
        if ours != theirs:
            differ.append(source)
    assert differ == []
    assert tokens > 300 * 50
    # The sample holds the messages that tell the engines apart (none in the
    # lower-cased, ASCII-only Enron text).
    assert plain_differ >= (0 if corpus.startswith("enron") else 3)


@contextmanager
def hang_guard(seconds: int) -> Iterator[None]:
    def stop(signum: int, frame: object) -> None:
        raise TimeoutError(f"still tokenizing after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_hostile_text_is_tokenized_with_linear_work() -> None:
    # Each shape makes a backtracking pattern rescan: a letter before a long
    # run of word-inner punctuation, money signs without digits, number
    # separators, dotted words, and a word of 50,000 letters.
    unit = "a" + "'" * 5000 + " " + "$" * 5000 + " " + "1.2," * 1250 + " " + "b." * 2500 + " " + "c" * 50_000 + "\n"
    repeats = 200  # 13 MB
    text = unit * repeats
    config = TokenizerConfig(max_bytes=50_000_000, bigrams=False)
    with hang_guard(60):
        words = Tokenizer(config).words(text)
    one = Tokenizer(config).words(unit)
    assert one == ["num:20", "skip:b:4990", "skip:c:50000"]
    assert len(words) == 3 * repeats
    assert Counter(words) == Counter({t: repeats for t in one})
