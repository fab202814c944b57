"""Many model settings over one tokenization: online and split, 1-ROCA % per setting.

    python -m benchmarks.option_grid --corpus spamassassin --corpus enron-all \\
        --setting max_tokens=40 --setting token_cap=3 [--split half|10k] [--limit N]

Each stream (as in benchmarks/long_stream.py) is parsed and tokenized once
(`Tokenizer` with the configured tokenizer settings, cached in
results/tokens-<stream>.pickle); every [model] setting given is then pure
model arithmetic with the library's own functions (`model.estimate`,
`model.joint_log_likelihood`) over counts kept in memory, like
`tuning.tune_settings`:

- online (default): classify each message with the counts of the messages
  before it, then add its counts; before a spam and a ham are known a
  message scores 0, as `Filter.learn_online` leaves it. For the default
  settings this gives the library online loop's log-odds when it trains
  every message (checked by --check N against `evaluation.run_online`
  with train_mode teft on the first N messages; benchmarks/forgetting.py
  also trains on or near errors).
- --split half: train on the first half, classify the second;
  --split 10k: train on the first 10,000, classify the rest.

Prints per stream and setting: 1-ROCA %, sm at 0.1% hm, lam % (two-way
threshold of the default loss matrix), 1-ROCA % per window, the largest
|log-odds| of a misfiled message. The multinomial models only (the
Bernoulli absent-token histogram is not kept here). Asserts nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import subprocess
import tempfile
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from benchmarks.compare import ranking
from benchmarks.long_stream import STREAMS, logit, stream
from spamfilter import model as nb
from spamfilter.config import Config, ModelConfig, counts_occurrences, load_config
from spamfilter.counts import ClassCounts
from spamfilter.errors import MailParseError
from spamfilter.evaluation import default_window, run_online, windowed_roca
from spamfilter.learning import TrainMode
from spamfilter.mail import parse_message
from spamfilter.tokenizer import Tokenizer, is_header_line
from spamfilter.vectorizer import term_counts

Doc = dict[str, int]


def tokenized(config: Config, name: str, limit: int | None) -> tuple[list[Doc], np.ndarray]:
    """The stream's messages as token counts (unreadable ones left out) and labels, cached
    (a concatenated stream from its parts' caches)."""
    if len(STREAMS[name]) > 1 and limit is None:
        parts = [tokenized(config, part, None) for part in STREAMS[name]]
        return [d for docs, _ in parts for d in docs], np.concatenate([y for _, y in parts])
    tag = f"{name}-{limit or 'all'}-{hashlib.sha1(repr(config.tokenizer).encode()).hexdigest()[:8]}"
    cache = Path("results") / f"tokens-{tag}.pickle"
    if cache.exists():
        docs, labels = pickle.loads(cache.read_bytes())
        return docs, np.array(labels, dtype=bool)
    tokenizer = Tokenizer(config.tokenizer)
    docs, labels = [], []
    for is_spam, item in stream(name, limit):
        try:
            docs.append(term_counts(tokenizer.tokenize(parse_message(item, max_bytes=config.tokenizer.max_bytes))))
        except MailParseError:
            continue
        labels.append(bool(is_spam))
    cache.write_bytes(pickle.dumps((docs, labels)))
    return docs, np.array(labels, dtype=bool)


class Counts:
    """Token and class counts grown message by message (the store's sums, in memory)."""

    def __init__(self, fisher: tuple[float, float, float] | None = None) -> None:
        self.fisher = fisher  # (s, x, min_dev) adds a first score: Robinson-Fisher
        self.ids: dict[str, int] = {}
        self.doc = np.zeros((2, 1024), dtype=np.int64)
        self.term = np.zeros((2, 1024), dtype=np.int64)
        self.classes = ClassCounts.zeros()

    def add(self, doc: Doc, is_spam: bool, weight: float = 1) -> None:
        """Count ``doc`` as one more message of its class (``weight`` times, in a subclass with float counts)."""
        c = int(is_spam)
        for token in doc:
            if token not in self.ids:
                self.ids[token] = len(self.ids)
        if len(self.ids) > self.doc.shape[1]:
            grow = max(len(self.ids), 2 * self.doc.shape[1]) - self.doc.shape[1]
            self.doc = np.pad(self.doc, ((0, 0), (0, grow)))
            self.term = np.pad(self.term, ((0, 0), (0, grow)))
        cols = np.fromiter((self.ids[t] for t in doc), dtype=np.int64, count=len(doc))
        self.doc[c, cols] += weight
        self.term[c, cols] += weight * np.fromiter(doc.values(), dtype=np.int64, count=len(doc))
        self.classes.messages[c] += weight
        self.classes.terms[c] += weight * sum(doc.values())
        self.classes.binary_terms[c] += weight * len(doc)

    def columns(self, cols: np.ndarray) -> tuple[nb.TokenCounts, ClassCounts]:
        """The counts of the token columns ``cols`` and the class counts, as scoring sees them."""
        return nb.TokenCounts(self.doc[:, cols], self.term[:, cols]), self.classes

    def score(self, doc: Doc, settings: list[ModelConfig]) -> list[float]:
        """The log-odds of one message under each setting (0 before both classes are known)."""
        if not self.classes.messages.all():
            return [0.0] * (len(settings) + bool(self.fisher))
        known = [(self.ids[t], n) for t, n in doc.items() if t in self.ids]
        cols = np.array([j for j, _ in known], dtype=np.int64)
        counts, classes = self.columns(cols)
        empty = np.zeros((0, 2), dtype=np.int64)
        stats = nb.Totals(classes, vocabulary_size=len(self.ids), histogram=(empty, empty))
        out = []
        if self.fisher:
            f = nb.robinson_probability(counts, stats, self.fisher[0], self.fisher[1])
            X = sp.csr_matrix((np.ones(len(known)), (np.zeros(len(known), dtype=np.int64), np.arange(len(known)))), shape=(1, len(known)))
            out.append(float(nb.fisher_log_odds(X, f, self.fisher[2])[0]))
        header = None
        for m in settings:
            params = nb.estimate(m.event_model, counts, stats, m.alpha)
            values = np.array([float(n) for _, n in known]) if counts_occurrences(m.event_model) else np.ones(len(known))
            X = sp.csr_matrix((values, (np.zeros(len(known), dtype=np.int64), np.arange(len(known)))), shape=(1, len(known)))
            if m.header_apart and header is None:
                header = np.fromiter((is_header_line(t) for t in doc if t in self.ids), dtype=bool, count=len(known))
            jll = nb.joint_log_likelihood(
                X, params, m.tempering, m.min_evidence, m.max_tokens, m.token_cap, header if m.header_apart else None, m.header_max_tokens
            )
            out.append(float(nb.log_odds(jll)[0]))
        return out


def run(
    docs: list[Doc], y: np.ndarray, settings: list[ModelConfig], split: str | None, fisher: tuple[float, float, float] | None = None, counts: Counts | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Log-odds (len(settings) + bool(fisher), n scored) and the scored labels
    (``counts``: an empty Counts, or a subclass that scores otherwise)."""
    counts = counts or Counts(fisher)
    if split is None:
        scores = []
        for doc, is_spam in zip(docs, y):
            scores.append(counts.score(doc, settings))
            counts.add(doc, bool(is_spam))
        return np.array(scores).T, y
    head = len(docs) // 2 if split == "half" else 10_000
    for doc, is_spam in zip(docs[:head], y[:head]):
        counts.add(doc, bool(is_spam))
    return np.array([counts.score(doc, settings) for doc in docs[head:]]).T, y[head:]


def bogofilter_split(name: str, limit: int | None, split: str) -> tuple[np.ndarray, np.ndarray]:
    """bogofilter 1.2.5 on the same split: `-B` bulk training on the head
    (spam, then ham), `-b -T` on the rest; its spamicity's logit and the labels."""
    items = [(s, it.source) for s, it in stream(name, limit)]
    head = len(items) // 2 if split == "half" else 10_000
    with tempfile.TemporaryDirectory() as db:
        for flag, want in (("-s", True), ("-n", False)):
            subprocess.run(["bogofilter", "-d", db, flag, "-B", *[p for s, p in items[:head] if s is want]], check=True)
        out = subprocess.run(["bogofilter", "-d", db, "-b", "-T"], input="\n".join(p for _, p in items[head:]) + "\n", capture_output=True, text=True, check=False).stdout
    spamicity = np.array([float(line.split()[-1]) for line in out.splitlines()])
    return logit(spamicity), np.array([s for s, _ in items[head:]], dtype=bool)


def report(title: str, names: list[str], odds: np.ndarray, truth: np.ndarray, threshold: float, window: int | None = None) -> list[dict[str, Any]]:
    """Print one row per scored setting (1-ROCA %, sm at 0.1% hm, lam % at
    ``threshold``, largest |log-odds| of a misfiled message, 1-ROCA % per
    window) under ``title``, and return the rows."""
    window = window or default_window(truth.size)
    print(f"\n{title} (windows of {window}; load {os.getloadavg()[0]:.1f})")
    print(f"{'setting':<36} {'1-ROCA%':>8} {'sm@hm.1%':>9} {'lam%':>7} {'max|L| err':>10}  1-ROCA% per window")
    rows: list[dict[str, Any]] = []
    for label, score in zip(names, odds):
        # bogofilter's own cutoff; the Fisher score's scale is its own: 0
        cut = float(logit(np.array([0.99]))[0]) if label.startswith("bogofilter") else 0.0 if label.startswith("fisher") else threshold
        r = ranking(truth, score, cut)
        wrong = np.where(truth, score <= cut, score > cut)
        worst = float(np.max(np.abs(score[wrong]))) if wrong.any() else 0.0
        windows = [w.one_minus_roca for w in windowed_roca(truth, score, window)]
        rows.append({"setting": label, **r, "max_abs_log_odds_error": worst, "windows": windows})
        shown = " ".join("-" if w is None else f"{w:.3f}" for w in windows)
        print(f"{label:<36} {r['one_minus_roca_pct']:8.4f} {r['sm_at_hm01_pct']:9.2f} {r['lam_pct']:7.3f} {worst:10.1f}  {shown}")
    return rows


def parse_setting(base: ModelConfig, text: str) -> ModelConfig:
    """``key=value,key=value`` over the [model] defaults (values in TOML)."""
    if not text:
        return base
    values = tomllib.loads("\n".join(part.strip() for part in text.split(",")))
    return replace(base, **values)


def stream_arguments(parser: argparse.ArgumentParser, setting_help: str) -> None:
    """The options every grid over cached tokenizations takes."""
    parser.add_argument("--corpus", action="append", choices=sorted(STREAMS), required=True)
    parser.add_argument("--setting", action="append", default=[], help=setting_help)
    parser.add_argument("--split", choices=["half", "10k"], default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--config", type=Path)


def setup(args: argparse.Namespace) -> tuple[Config, float]:
    """The configuration (--config or the defaults) and its two-way log-odds
    threshold; makes results/."""
    config = load_config(args.config) if args.config else Config()
    Path("results").mkdir(exist_ok=True)
    return config, nb.thresholds_from_loss(config.decision.cost_ham_as_spam, config.decision.cost_spam_as_ham, 0.0).spam_min


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    stream_arguments(parser, "[model] keys, comma-separated (repeatable); the defaults always run")
    parser.add_argument("--window", type=int, default=None)
    parser.add_argument("--bogofilter", action="store_true", help="with --split: bogofilter on the same split")
    parser.add_argument("--fisher", type=float, nargs=3, metavar=("S", "X", "MIN_DEV"), help="also Robinson's f(w) with Fisher combining (bogofilter: 0.0178 0.52 0.375)")
    parser.add_argument("--check", type=int, default=0, help="compare the defaults with run_online on the first N messages")
    args = parser.parse_args()
    config, threshold = setup(args)
    labels = ["defaults", *args.setting]
    settings = [parse_setting(config.model, s) for s in ["", *args.setting]]
    for name in args.corpus:
        docs, y = tokenized(config, name, args.limit)
        if args.check:
            _, scored = run_online(config, list(stream(name, args.check)), train_mode=TrainMode.teft)
            mine, _ = run(docs[: args.check], y[: args.check], settings[:1], None)
            diff = np.max(np.abs(mine[0][: len(scored)] - np.array([s.log_odds for s in scored])))
            print(f"check {name}: largest |log-odds difference| against run_online over {len(scored)} messages: {diff:.2e}")
        fisher = tuple(args.fisher) if args.fisher else None
        odds, truth = run(docs, y, settings, args.split, fisher)
        names = ([f"fisher s={fisher[0]:g} x={fisher[1]:g} min_dev={fisher[2]:g}"] if fisher else []) + labels
        if args.split and args.bogofilter:
            # bogofilter reads every file; spamfilter leaves unreadable ones out (none in these corpora)
            bogo, bogo_y = bogofilter_split(name, args.limit, args.split)
            if bogo_y.size == truth.size and (bogo_y == truth).all():
                names.append("bogofilter 1.2.5 (-B, -b)")
                odds = np.vstack([odds, bogo[None, :]])
            else:
                print(f"bogofilter left out: its split has {bogo_y.size} messages, spamfilter's {truth.size}")
        rows = report(f"{name}, {truth.size} scored, {args.split or 'online'}", names, odds, truth, threshold, args.window)
        out = Path("results") / f"option_grid-{name}-{args.split or 'online'}-{args.limit or 'all'}.json"
        out.write_text(json.dumps({"stream": name, "split": args.split, "scored": int(truth.size), "rows": rows}, indent=2) + "\n")

if __name__ == "__main__":
    main()
