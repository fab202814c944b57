"""Many model settings over one tokenization: online and split, 1-ROCA % per setting.

    python -m benchmarks.option_grid --corpus spamassassin --corpus enron-all \\
        --setting max_tokens=40 [--split half|10k] [--limit N]

Each stream (as in benchmarks/long_stream.py) is parsed and tokenized once
(`Tokenizer` with the configured tokenizer settings, cached in
results/tokens-<stream>.pickle); every [model] setting given is then
scored with the library's in-memory counts (`memcounts.MemoryCounts`) and
its one scorer (`scorer.Scorer`), through benchmarks/loco.py:

- online (default): classify each message with the counts of the messages
  before it, then add its counts; before a spam and a ham are known a
  message scores 0, as `Filter.learn_online` leaves it (--check N compares
  the defaults with `evaluation.run_online`, train_mode teft, on the first N
  messages; benchmarks/forgetting.py also trains on or near errors).
- --split half: train on the first half, classify the second;
  --split 10k: train on the first 10,000, classify the rest.

Prints per stream and setting: 1-ROCA %, sm at 0.1% hm, lam % (two-way
threshold of the default loss matrix), 1-ROCA % per window, the largest
|log-odds| of a misfiled message. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import fisher as fisher_combining
from benchmarks.compare import ranking
from benchmarks.long_stream import STREAMS, logit, stream
from benchmarks.streams import Corpus, Doc, learned_counts, online_scores, split_scores, tokenized
from spamfilter.config import Config, ModelConfig, TrainMode, load_config
from spamfilter.mail import without_mailbox_annotations
from spamfilter.nb import decision
from spamfilter.tools.evaluation import default_window, run_online, windowed_roca


def run(
    docs: list[Doc], y: np.ndarray, digests: list[str], settings: list[ModelConfig], split: str | None, fisher: tuple[float, float, float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Log-odds (len(settings) + bool(fisher), n scored) and the scored
    labels: online (every message trained, as ``train_mode`` teft), or
    trained on the head of the --split and scored on the rest. The counts
    are the library's in memory, the scores its scorer's
    (``benchmarks.loco``); the Fisher row needs --split."""
    c = Corpus.of_docs(docs, y, digests)
    if split is None:
        if fisher:
            raise SystemExit("--fisher needs --split")
        thresholds = decision.thresholds_from_loss(10.0, 1.0, 0.0)
        return np.array([online_scores(c, m, thresholds, TrainMode.teft)[0] for m in settings]), y
    head = len(docs) // 2 if split == "half" else 10_000
    rows = []
    if fisher:
        e = learned_counts(c, np.arange(head)).evidence(c.binary[head:], histogram=False)
        f = fisher_combining.robinson_probability(e.counts, e.totals, fisher[0], fisher[1])
        rows.append(fisher_combining.fisher_log_odds(e.X, f, fisher[2]))
    rows += [split_scores(c, m, head)[0] for m in settings]
    return np.array(rows), y[head:]


def bogofilter_trained_once(train: list[tuple[bool, str]], score: list[str]) -> list[tuple[str, float]]:
    """bogofilter 1.2.5 bulk-trained (`-B`, spam then ham) on the files of
    ``train``, then `-b -T` over the files of ``score``: its verdict letter
    (S, U, H) and spamicity per file (with -b its exit status is that of
    the last message, so it is not checked)."""
    with tempfile.TemporaryDirectory() as db:
        for flag, want in (("-s", True), ("-n", False)):
            subprocess.run(["bogofilter", "-d", db, flag, "-B", *[p for s, p in train if s is want]], check=True)
        out = subprocess.run(["bogofilter", "-d", db, "-b", "-T"], input="\n".join(score) + "\n", capture_output=True, text=True, check=False).stdout
    return [(line.split()[-2], float(line.split()[-1])) for line in out.splitlines()]


def bogofilter_split(name: str, limit: int | None, split: str, as_delivered: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """bogofilter 1.2.5 on the same split (``bogofilter_trained_once`` on the
    head and the rest): its spamicity's logit and the labels. ``as_delivered``:
    each message without its mailbox annotations (Status, X-Keywords,
    X-Mozilla-Status, ...; ``mail.without_mailbox_annotations``), which no
    mail on delivery has and which spamfilter takes no token from."""
    with tempfile.TemporaryDirectory() as tmp:
        items = []
        for i, (s, it) in enumerate(stream(name, limit)):
            path = it.source
            if as_delivered:
                path = f"{tmp}/{i}"
                Path(path).write_bytes(without_mailbox_annotations(it.raw))
            items.append((s, path))
        head = len(items) // 2 if split == "half" else 10_000
        scored = bogofilter_trained_once(items[:head], [p for _, p in items[head:]])
    return logit(np.array([spamicity for _, spamicity in scored])), np.array([s for s, _ in items[head:]], dtype=bool)


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
    return config, decision.thresholds_from_loss(config.decision.cost_ham_as_spam, config.decision.cost_spam_as_ham, 0.0).spam_min


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    stream_arguments(parser, "[model] keys, comma-separated (repeatable); the defaults always run")
    parser.add_argument("--window", type=int, default=None)
    parser.add_argument("--bogofilter", action="store_true", help="with --split: bogofilter on the same split")
    parser.add_argument("--as-delivered", action="store_true", help="with --bogofilter: also bogofilter on the messages without their mailbox annotations")
    parser.add_argument(
        "--fisher", type=float, nargs=3, metavar=("S", "X", "MIN_DEV"), help="with --split: also Robinson's f(w) with Fisher combining (bogofilter: 0.0178 0.52 0.375)"
    )
    parser.add_argument("--check", type=int, default=0, help="compare the defaults with run_online on the first N messages")
    args = parser.parse_args()
    config, threshold = setup(args)
    labels = ["defaults", *args.setting]
    settings = [parse_setting(config.model, s) for s in ["", *args.setting]]
    for name in args.corpus:
        docs, y, digests = tokenized(config, name, args.limit)
        if args.check:
            _, scored = run_online(config, list(stream(name, args.check)), train_mode=TrainMode.teft)
            mine, _ = run(docs[: args.check], y[: args.check], digests[: args.check], settings[:1], None)
            diff = np.max(np.abs(mine[0][: len(scored)] - np.array([s.log_odds for s in scored])))
            print(f"check {name}: largest |log-odds difference| against run_online over {len(scored)} messages: {diff:.2e}")
        fisher = tuple(args.fisher) if args.fisher else None
        odds, truth = run(docs, y, digests, settings, args.split, fisher)
        names = ([f"fisher s={fisher[0]:g} x={fisher[1]:g} min_dev={fisher[2]:g}"] if fisher else []) + labels
        if args.split and args.bogofilter:
            # bogofilter reads every file; spamfilter leaves unreadable ones out (none in these corpora)
            for as_delivered in (False, True) if args.as_delivered else (False,):
                bogo, bogo_y = bogofilter_split(name, args.limit, args.split, as_delivered)
                if bogo_y.size == truth.size and (bogo_y == truth).all():
                    names.append("bogofilter 1.2.5 (-B, -b)" + (", as delivered" if as_delivered else ""))
                    odds = np.vstack([odds, bogo[None, :]])
                else:
                    print(f"bogofilter left out: its split has {bogo_y.size} messages, spamfilter's {truth.size}")
        rows = report(f"{name}, {truth.size} scored, {args.split or 'online'}", names, odds, truth, threshold, args.window)
        out = Path("results") / f"option_grid-{name}-{args.split or 'online'}-{args.limit or 'all'}.json"
        out.write_text(json.dumps({"stream": name, "split": args.split, "scored": int(truth.size), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
