"""Side by side on one stream: spamfilter, bogofilter and scikit-learn naive Bayes.

    python -m benchmarks.compare --corpus spamassassin [--corpus csdmc2010 ...] [--skip-bogofilter]

Every system sees the same TREC index in the same order, online (classify
each message, then train on its true label), the TREC spam-track protocol:

- spamfilter: each event model at the configured settings, and with
  --tuned-on the setting `spamfilter tune` picks on another corpus, through
  the library's own online loop (evaluation.run_online, in-memory SQLite,
  learning as it does by default: from errors and near misses);
  then, on a fresh model, batch training on the whole stream and batch
  classification of the whole stream.
- bogofilter (Debian package): one `bogofilter -T` process to classify and
  one `bogofilter -s|-n` to train per message, as a mail system runs it;
  then `-B` bulk training and `-b` bulk classification of the same files.
- scikit-learn MultinomialNB, BernoulliNB and ComplementNB (alpha 0.01, 1
  and 0.3 are not tuned: sklearn defaults would be alpha 1) with partial_fit,
  one message at a time, over a HashingVectorizer (2^18 features) of the
  decoded message text.

Ranking uses log-odds (spamfilter), joint log-likelihood differences
(scikit-learn) and bogofilter's spamicity. Prints a table per corpus and
writes results/compare-<corpus>.json. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

from spamfilter.config import EVENT_MODELS, Config, load_config
from spamfilter.mail import read_index
from spamfilter.tools.evaluation import fresh_filter, lam_pct, roc_area, run_online, sm_at_hm
from spamfilter.tools.tuning import Grid, tune

CORPORA = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"
INDEXES = {"spamassassin": "spamassassin/index", "csdmc2010": "csdmc2010/index", **{f"enron{i}": f"enron-spam-preprocessed/enron{i}/index" for i in range(1, 7)}}


def ranking(y: np.ndarray, score: np.ndarray, threshold: float) -> dict[str, float]:
    ham_err = int((score[~y] > threshold).sum())
    spam_err = int((score[y] <= threshold).sum())
    return {
        "one_minus_roca_pct": 100 * (1 - roc_area(y, score)),
        "sm_at_hm01_pct": sm_at_hm(y, score, 0.1),
        "hm_pct": 100 * ham_err / max(1, int((~y).sum())),
        "sm_pct": 100 * spam_err / max(1, int(y.sum())),
        "lam_pct": lam_pct(ham_err, int((~y).sum()), spam_err, int(y.sum())),
    }


def tuned_config(config: Config, corpus: str) -> Config:
    """The setting `spamfilter tune` picks on another corpus's index (default grids)."""
    stream = list(read_index(str(CORPORA / INDEXES[corpus])))
    best = tune(
        config,
        stream,
        Grid(event_models=list(EVENT_MODELS), alphas=[0.01, 0.03, 0.1, 0.3, 1.0], temperings=[0.0, 0.5], min_evidences=[0.0, 2.0, 3.0], bigram_options=[True, False]),
    )[0]
    return replace(
        config,
        model=replace(config.model, event_model=best.event_model, alpha=best.alpha, tempering=best.tempering, min_evidence=best.min_evidence),
        tokenizer=replace(config.tokenizer, bigrams=best.bigrams),
    )


def run_spamfilter(config: Config, stream: list, event_model: str | None, label: str | None = None) -> dict[str, object]:
    cfg = replace(config, model=replace(config.model, event_model=event_model)) if event_model else config
    started = time.perf_counter()
    report, scored = run_online(cfg, stream)
    online_seconds = time.perf_counter() - started
    y = np.array([s.is_spam for s in scored])
    odds = np.array([s.log_odds for s in scored])
    with fresh_filter(cfg) as f:
        started = time.perf_counter()
        f.train(stream)
        batch_train = len(stream) / (time.perf_counter() - started)
        started = time.perf_counter()
        for _ in f.classify(item for _, item in stream):
            pass
        batch_classify = len(stream) / (time.perf_counter() - started)
    m = cfg.model
    return {
        "system": label or f"spamfilter {event_model}",
        "setting": f"{m.event_model} alpha={m.alpha:g} tempering={m.tempering:g} min_evidence={m.min_evidence:g} bigrams={cfg.tokenizer.bigrams}",
        # the same metric code for every system; the filter's own two-way threshold
        **ranking(y, odds, report.two_way_threshold),
        "online_per_s": len(stream) / online_seconds,
        "batch_train_per_s": batch_train,
        "batch_classify_per_s": batch_classify,
    }


def run_bogofilter(index: Path) -> dict[str, object]:
    base = index.parent
    rows = [line.split(None, 1) for line in index.read_text().splitlines() if line.strip()]
    paths = [str(base / p.strip()) for _, p in rows]
    y = np.array([label.lower() == "spam" for label, _ in rows])
    scores = np.zeros(len(rows))
    with tempfile.TemporaryDirectory() as db:
        started = time.perf_counter()
        for i, (path, is_spam) in enumerate(zip(paths, y)):
            out = subprocess.run(["bogofilter", "-d", db, "-T", "-I", path], capture_output=True, text=True, check=False).stdout.split()
            # Before its first registration bogofilter has no wordlist and
            # prints nothing: score it 0.5 (unsure), as spamfilter does.
            scores[i] = float(out[-1]) if out else 0.5
            subprocess.run(["bogofilter", "-d", db, "-s" if is_spam else "-n", "-I", path], check=True)
        online = len(paths) / (time.perf_counter() - started)
    with tempfile.TemporaryDirectory() as db:
        started = time.perf_counter()
        for flag, want in (("-s", True), ("-n", False)):
            chosen = [p for p, s in zip(paths, y) if s == want]
            subprocess.run(["bogofilter", "-d", db, flag, "-B", *chosen], check=True)
        batch_train = len(paths) / (time.perf_counter() - started)
        started = time.perf_counter()
        subprocess.run(["bogofilter", "-d", db, "-b", "-T"], input="\n".join(paths) + "\n", capture_output=True, text=True, check=False)
        batch_classify = len(paths) / (time.perf_counter() - started)
    return {"system": "bogofilter", **ranking(y, scores, 0.99), "online_per_s": online, "batch_train_per_s": batch_train, "batch_classify_per_s": batch_classify}


def run_sklearn(stream: list, name: str) -> dict[str, object]:
    from sklearn.feature_extraction.text import HashingVectorizer
    from sklearn.naive_bayes import BernoulliNB, ComplementNB, MultinomialNB

    make = {"MultinomialNB": lambda: MultinomialNB(alpha=0.01), "BernoulliNB": lambda: BernoulliNB(alpha=1.0), "ComplementNB": lambda: ComplementNB(alpha=0.3)}[name]
    vectorizer = HashingVectorizer(n_features=2**18, alternate_sign=False, binary=(name == "BernoulliNB"), decode_error="replace")
    clf = make()
    texts = [item.raw.decode("latin-1") for _, item in stream]
    y = np.array([s for s, _ in stream])
    scores = np.zeros(len(stream))
    seen: set[bool] = set()
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (text, label) in enumerate(zip(texts, y)):
            x = vectorizer.transform([text])
            if len(seen) == 2:
                jll = clf.predict_joint_log_proba(x)[0]
                scores[i] = jll[1] - jll[0]
            clf.partial_fit(x, [int(label)], classes=[0, 1])
            seen.add(bool(label))
    online = len(stream) / (time.perf_counter() - started)
    return {"system": f"sklearn {name}", **ranking(y, scores, 0.0), "online_per_s": online}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", choices=sorted(INDEXES), required=True)
    parser.add_argument("--model", action="append", choices=EVENT_MODELS)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--skip-bogofilter", action="store_true")
    parser.add_argument("--skip-sklearn", action="store_true")
    parser.add_argument("--tuned-on", choices=sorted(INDEXES), help="also run the setting `tune` picks on this (other) corpus")
    args = parser.parse_args()
    config = load_config(args.config) if args.config else Config()
    tuned = tuned_config(config, args.tuned_on) if args.tuned_on else None
    Path("results").mkdir(exist_ok=True)
    for corpus in args.corpus:
        index = CORPORA / INDEXES[corpus]
        stream = list(read_index(str(index)))
        rows = [run_spamfilter(config, stream, m) for m in (args.model or EVENT_MODELS)]
        if tuned is not None:
            rows.append(run_spamfilter(tuned, stream, None, f"spamfilter tuned on {args.tuned_on}"))
        if not args.skip_bogofilter and shutil.which("bogofilter"):
            rows.append(run_bogofilter(index))
        if not args.skip_sklearn:
            rows += [run_sklearn(stream, n) for n in ("MultinomialNB", "BernoulliNB", "ComplementNB")]
        bogo = next((r for r in rows if r["system"] == "bogofilter"), None)
        print(f"\n{corpus} ({len(stream)} messages, online)")
        print(f"{'system':<32} {'1-ROCA%':>8} {'sm@hm.1%':>9} {'lam%':>7} {'hm%':>6} {'sm%':>6} {'online/s':>9} {'x bogo':>7} {'train/s':>8} {'class/s':>8}")
        for r in rows:
            ratio = f"{r['online_per_s'] / bogo['online_per_s']:.2f}" if bogo else "-"
            print(
                f"{r['system']:<32} {r['one_minus_roca_pct']:8.3f} {r['sm_at_hm01_pct']:9.2f} {r['lam_pct']:7.3f} {r['hm_pct']:6.2f} {r['sm_pct']:6.2f} "
                f"{r['online_per_s']:9.1f} {ratio:>7} {r.get('batch_train_per_s', float('nan')):8.0f} {r.get('batch_classify_per_s', float('nan')):8.0f}"
            )
        (Path("results") / f"compare-{corpus}.json").write_text(json.dumps({"corpus": corpus, "messages": len(stream), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
