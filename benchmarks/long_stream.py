"""Long streams, online, spamfilter and bogofilter side by side.

    python -m benchmarks.long_stream [--corpus enron-all --corpus spamassassin ...] [--limit N]
        [--window N] [--set model.max_tokens=40 ...] [--skip-bogofilter]

The TREC online protocol (classify each message, then train on its true
label) over the longest streams the shared corpora give: each Enron mailbox
in arrival order (enron1..enron6), the six concatenated (enron-all, 33,716
messages), spamassassin and csdmc2010 in date order.

- spamfilter: the library's own online loop (`evaluation.run_online`,
  in-memory SQLite, two workers reading ahead), with the settings of
  --config and --set (section.key=TOML value, repeatable), learning from
  the messages --train-mode and --margin say (default: the library's,
  errors and those scored right by less than 12 nats; teft: every one).
- bogofilter 1.2.5 defaults: one `bogofilter -T` and one `-s|-n` process per
  message, as in benchmarks/compare.py. Its result depends only on the
  stream, so it is kept in results/long_stream-bogofilter-<stream>-<limit>.json
  and read back on the next run (--fresh-bogofilter runs it again).

Per stream and system: overall 1-ROCA %, spam let through at 0.1% ham lost
(sm at 0.1% hm), lam % at the system's own two-way threshold, 1-ROCA % per
window of --window messages (default `evaluation.default_window`), online
messages/s, and the ten most confident errors with their score (spamfilter's
log-odds; bogofilter's spamicity and its logit). Writes
results/long_stream-<stream>-<limit>.json. Asserts nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import shutil
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.compare import CORPORA, INDEXES, ranking
from spamfilter.config import ONLINE_TRAIN_MODE, TUNE_MARGIN, Config, TrainMode, load_config
from spamfilter.mail import MailItem, read_index, without_mailbox_annotations
from spamfilter.tools.evaluation import default_window, run_online, windowed_roca

ENRON = [f"enron{i}" for i in range(1, 7)]
#: enron-all: the six Enron mailboxes one after the other; all: every shared
#: corpus with both classes one after the other (spamassassin, csdmc2010,
#: then Enron: the Enron messages carry no dates to merge them by).
STREAMS = {**{name: [name] for name in ("spamassassin", "csdmc2010", *ENRON)}, "enron-all": ENRON, "all": ["spamassassin", "csdmc2010", *ENRON]}


def stream(name: str, limit: int | None) -> Iterator[tuple[bool, MailItem]]:
    """The labelled messages of a stream in order (indexes concatenated), at most ``limit``."""
    chained = itertools.chain.from_iterable(read_index(str(CORPORA / INDEXES[part])) for part in STREAMS[name])
    return itertools.islice(chained, limit)


def with_settings(config: Config, settings: list[str]) -> Config:
    """``config`` with each ``section.key=value`` (a TOML value) replaced."""
    for setting in settings:
        key, _, value = setting.partition("=")
        section, _, field = key.strip().partition(".")
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
        config = replace(config, **{section: replace(getattr(config, section), **{field: parsed})})
    return config


def summary(y: np.ndarray, score: np.ndarray, threshold: float, window: int, sources: list[str], seconds: float) -> dict[str, Any]:
    """The figures of one system on one stream; ``score`` ranks (log-odds or logit of the spamicity)."""
    wrong = np.where(y, score <= threshold, score > threshold)
    confident = sorted(np.flatnonzero(wrong).tolist(), key=lambda i: -abs(float(score[i]) - threshold))[:10]
    return {
        **ranking(y, score, threshold),
        "windows": [w.one_minus_roca for w in windowed_roca(y, score, window)],
        "online_per_s": len(y) / seconds,
        "confident_errors": [{"source": sources[i], "gold": "spam" if y[i] else "ham", "score": float(score[i])} for i in confident],
    }


def run_spamfilter(
    config: Config, items: list[tuple[bool, MailItem]], window: int, train_mode: TrainMode = ONLINE_TRAIN_MODE, margin: float = TUNE_MARGIN
) -> dict[str, Any]:
    started = time.perf_counter()
    report, scored = run_online(config, items, jobs=2, train_mode=train_mode, margin=margin)
    seconds = time.perf_counter() - started
    y = np.array([s.is_spam for s in scored])
    odds = np.array([s.log_odds for s in scored])
    m = config.model
    return {
        "system": "spamfilter",
        "setting": " ".join(f"{k}={getattr(m, k)}" for k in m.__dataclass_fields__) + f" bigrams={config.tokenizer.bigrams} train_mode={train_mode} margin={margin}",
        "trained": report.trained,
        **summary(y, odds, report.two_way_threshold, window, [s.source for s in scored], seconds),
    }


def logit(p: np.ndarray) -> np.ndarray:
    q = np.clip(p, 1e-12, 1 - 1e-12)
    result: np.ndarray = np.log(q) - np.log1p(-q)
    return result


def run_bogofilter(items: list[tuple[bool, MailItem]], window: int, as_delivered: bool = False) -> dict[str, Any]:
    """bogofilter online, one classify and one register process per message
    (its score is the spamicity; ranked here by its logit, which keeps the
    order). ``as_delivered``: each message without its mailbox annotations
    (``mail.without_mailbox_annotations``), which spamfilter takes no token from."""
    if as_delivered:
        items = [(s, MailItem(it.source, without_mailbox_annotations(it.raw))) for s, it in items]
    y = np.array([s for s, _ in items])
    spamicity = np.zeros(len(items))
    with tempfile.TemporaryDirectory() as db:
        started = time.perf_counter()
        for i, (is_spam, item) in enumerate(items):
            out = subprocess.run(["bogofilter", "-d", db, "-T"], input=item.raw, capture_output=True, check=False).stdout.split()
            # no wordlist before the first registration: 0.5, as compare.py does
            spamicity[i] = float(out[-1]) if out else 0.5
            subprocess.run(["bogofilter", "-d", db, "-s" if is_spam else "-n"], input=item.raw, check=True)
        seconds = time.perf_counter() - started
    score = logit(spamicity)
    return {
        "system": "bogofilter" + (" *" if as_delivered else ""),
        "setting": "1.2.5 defaults" + (", as delivered" if as_delivered else ""),
        **summary(y, score, float(logit(np.array([0.99]))[0]), window, [it.source for _, it in items], seconds),
    }


def print_rows(name: str, n: int, window: int, rows: list[dict[str, Any]]) -> None:
    print(f"\n{name} ({n} messages, online; windows of {window})")
    print(f"{'system':<12} {'1-ROCA%':>8} {'sm@hm.1%':>9} {'lam%':>7} {'msg/s':>7}  1-ROCA% per window")
    for r in rows:
        windows = " ".join("-" if w is None else f"{w:.3f}" for w in r["windows"])
        print(f"{r['system']:<12} {r['one_minus_roca_pct']:8.4f} {r['sm_at_hm01_pct']:9.2f} {r['lam_pct']:7.3f} {r['online_per_s']:7.1f}  {windows}")
    for r in rows:
        print(f"  {r['system']} most confident errors (gold, score, source):")
        for e in r["confident_errors"]:
            print(f"    {e['gold']:<4} {e['score']:+8.2f}  {e['source']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", choices=sorted(STREAMS), help="stream (repeatable; default all)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N messages of each stream")
    parser.add_argument("--window", type=int, default=None)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument(
        "--train-mode", choices=[t.value for t in TrainMode], default=ONLINE_TRAIN_MODE.value, help="which messages spamfilter learns from (default: the library's)"
    )
    parser.add_argument("--margin", type=float, default=TUNE_MARGIN, help="nats, for --train-mode tune")
    parser.add_argument("--skip-bogofilter", action="store_true")
    parser.add_argument("--fresh-bogofilter", action="store_true")
    parser.add_argument("--as-delivered", action="store_true", help="also bogofilter on the messages without their mailbox annotations (row 'bogofilter *')")
    parser.add_argument("--label", default="", help="suffix of the results file (to keep settings apart)")
    args = parser.parse_args()
    config = with_settings(load_config(args.config) if args.config else Config(), args.set)
    Path("results").mkdir(exist_ok=True)
    for name in args.corpus or sorted(STREAMS):
        items = list(stream(name, args.limit))
        window = args.window or default_window(len(items))
        tag = f"{name}-{args.limit or 'all'}"
        rows = [run_spamfilter(config, items, window, TrainMode(args.train_mode), args.margin)]
        for as_delivered in (False, True) if args.as_delivered else (False,):
            cached = Path("results") / f"long_stream-bogofilter-{tag}-w{window}{'-delivered' if as_delivered else ''}.json"
            if not args.skip_bogofilter and shutil.which("bogofilter"):
                if cached.exists() and not args.fresh_bogofilter:
                    rows.append(json.loads(cached.read_text()))
                else:
                    rows.append(run_bogofilter(items, window, as_delivered))
                    cached.write_text(json.dumps(rows[-1], indent=2) + "\n")
        print_rows(name, len(items), window, rows)
        load = os.getloadavg()[0]
        suffix = f"-{args.label}" if args.label else ""
        (Path("results") / f"long_stream-{tag}{suffix}.json").write_text(
            json.dumps(
                {"stream": name, "messages": len(items), "window": window, "load": load, "rows": rows},
                indent=2,
                default=lambda x: None if isinstance(x, float) and not math.isfinite(x) else x,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
