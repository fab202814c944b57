"""Token-class ablation: which kinds of token carry over to later mail.

    python -m benchmarks.token_classes --corpus spamassassin --corpus csdmc2010 --split half \\
        --setting "drop=received-host" --setting "drop=bigram+received-ip, max_tokens=40"

Each stream is tokenized once (benchmarks/option_grid.py's cache); a setting
then leaves out every token of the named classes (below) before counting, for
training and classifying alike, and scores the rest with option_grid's
in-memory model arithmetic, online or with --split half|10k. A setting is
``drop=<class>+<class>...`` optionally followed by [model] keys
(``, key=value``); without ``drop=`` it keeps every token. The defaults (no
class dropped) always run first.

``header_apart=K`` (K >= 0) is the library's ``[model] header_apart`` with
``header_max_tokens = K`` (the header lines' tokens, ``tokenizer.is_header_line``,
scored apart with their K strongest; 0 keeps all). The counts and the
scores are the library's (benchmarks/option_grid.py's ``run`` over
benchmarks/streams.py).

A token's class is the first entry of CLASSES whose pattern matches it from
its start; the tokenizer's namespaces are listed in spamfilter/tokenizer.
``--class NAME=REGEX`` puts a further class first: it takes its tokens
from the listed classes (with a ``bi-short`` class of some bigrams,
``drop=bigram`` leaves those in). --classes prints, per stream, each
class's share of the token occurrences and of the vocabulary, and stops.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from benchmarks.option_grid import parse_setting, report, run, setup, stream_arguments
from benchmarks.streams import Doc, tokenized
from spamfilter.config import ModelConfig
from spamfilter.tokenizer import LIST_HEADERS

_NAMESPACES = "subject|from|to|reply-to|received|message-id|mailer|header|content-type|charset|encoding|attachment|url|email|html|skip|num|bi|meta"

#: Class name -> pattern matched at the token's start; first match wins.
CLASSES: dict[str, str] = {
    "bigram": r"bi:",
    "number": r"num:",
    "skip": r"skip:",
    "subject": r"subject:",
    "from": r"from:",
    "reply-to": r"reply-to:",
    "to": r"to:",
    "received-ip": r"received:ip:",
    "received-host": r"received:",
    "message-id": r"message-id:",
    "mailer": r"mailer:",
    "header-subject": r"header:subject$",
    "header-name": r"header:",
    "mime": r"(?:content-type|charset|encoding|attachment):",
    "url-host": r"url:(?:host|ip|mailto)",
    "url-path": r"url:path:",
    "url-scheme": r"url:scheme:",
    "email": r"email:",
    "html": r"html:",
    "meta": r"meta:",
    # Words of the headers without a routine of their own: "<name>:<word>";
    # those of the headers mailing lists add (``[tokenizer]
    # list_header_words``) and the date-like ones apart.
    "list-words": rf"(?:list-[^:]*|{'|'.join(sorted(LIST_HEADERS))}):",
    "header-date": rf"(?!(?:{_NAMESPACES}):)[^:]*(?:date|arrivaltime)[^:]*:",
    "header-words": rf"(?!(?:{_NAMESPACES}):)[^:]+:",
    "word": r"[^:]*$",
}


class Setting(NamedTuple):
    """One row: the classes left out and the [model] settings."""

    dropped: frozenset[str]
    model: ModelConfig


def token_class(token: str, patterns: list[tuple[str, re.Pattern[str]]]) -> str:
    """The name of the first class whose pattern matches ``token``."""
    for name, pattern in patterns:
        if pattern.match(token):
            return name
    return "other"


def compiled() -> list[tuple[str, re.Pattern[str]]]:
    return [(name, re.compile(p)) for name, p in CLASSES.items()]


def class_shares(docs: list[Doc]) -> dict[str, tuple[float, float]]:
    """Per class: its share of token occurrences (binary, once per message) and of the vocabulary, in %."""
    patterns = compiled()
    kinds: dict[str, str] = {}
    occurrences: Counter[str] = Counter()
    for doc in docs:
        for token in doc:
            kind = kinds.get(token)
            if kind is None:
                kind = kinds[token] = token_class(token, patterns)
            occurrences[kind] += 1
    vocabulary = Counter(kinds.values())
    total, size = sum(occurrences.values()), len(kinds)
    return {k: (100 * occurrences[k] / total, 100 * vocabulary[k] / size) for k in occurrences}


def without(docs: list[Doc], dropped: frozenset[str]) -> list[Doc]:
    """``docs`` with the tokens of the ``dropped`` classes left out."""
    if not dropped:
        return docs
    patterns = compiled()
    kinds: dict[str, bool] = {}
    out = []
    for doc in docs:
        kept = {}
        for token, n in doc.items():
            gone = kinds.get(token)
            if gone is None:
                gone = kinds[token] = token_class(token, patterns) in dropped
            if not gone:
                kept[token] = n
        out.append(kept)
    return out


def parse(base: ModelConfig, text: str) -> Setting:
    """``drop=a+b, header_apart=K, key=value, ...`` -> a Setting; header_apart=K
    is the library's ``header_apart`` with ``header_max_tokens = K``."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    drops = [p for p in parts if p.startswith("drop=")]
    dropped = frozenset(c for p in drops for c in p[len("drop=") :].split("+") if c)
    unknown = dropped - set(CLASSES)
    if unknown:
        raise SystemExit(f"unknown token classes {sorted(unknown)}; known: {', '.join(CLASSES)}")
    apart = [int(p.partition("=")[2]) for p in parts if p.startswith("header_apart=")]
    rest = [p for p in parts if p not in drops and not p.startswith("header_apart=")]
    model = parse_setting(base, ",".join(rest))
    if apart:
        model = replace(model, header_apart=True, header_max_tokens=apart[-1])
    return Setting(dropped, model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    stream_arguments(parser, "drop=<class>+<class>[, header_apart=K][, [model] key=value...] (repeatable)")
    parser.add_argument(
        "--slice",
        metavar="A:B",
        help="run on the messages from fraction A to B of the stream only (0:0.6667 --split half: train on the first third, classify the second)",
    )
    parser.add_argument("--class", dest="extra", action="append", default=[], metavar="NAME=REGEX", help="a further class, tried before the listed ones (repeatable)")
    parser.add_argument("--classes", action="store_true", help="print each class's share of the tokens and stop")
    args = parser.parse_args()
    config, threshold = setup(args)
    for extra in reversed(args.extra):
        name, _, pattern = extra.partition("=")
        reordered = {name: pattern, **{k: v for k, v in CLASSES.items() if k != name}}
        CLASSES.clear()
        CLASSES.update(reordered)
    labels = ["defaults", *args.setting]
    parsed = [parse(config.model, s) for s in ["", *args.setting]]
    for name in args.corpus:
        docs, y, digests = tokenized(config, name, args.limit)
        if args.slice:
            a, b = (int(float(f) * len(docs)) for f in args.slice.split(":"))
            docs, y, digests = docs[a:b], y[a:b], digests[a:b]
        if args.classes:
            print(f"\n{name}: class, % of token occurrences (once per message), % of the vocabulary")
            for kind, (occ, voc) in sorted(class_shares(docs).items(), key=lambda kv: -kv[1][0]):
                print(f"{kind:<16} {occ:7.2f} {voc:7.2f}")
            continue
        scores: list[np.ndarray | None] = [None] * len(parsed)
        truth = y
        for dropped in dict.fromkeys(p.dropped for p in parsed):
            chosen = [i for i, p in enumerate(parsed) if p.dropped == dropped]
            odds, truth = run(without(docs, dropped), y, digests, [parsed[i].model for i in chosen], args.split)
            for i, row in zip(chosen, odds):
                scores[i] = row
        report(f"{name}{' ' + args.slice if args.slice else ''}, {truth.size} scored, {args.split or 'online'}", labels, np.array(scores), truth, threshold)


if __name__ == "__main__":
    main()
