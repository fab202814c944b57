"""AODE / SPODE against naive Bayes over one tokenization: online and split, 1-ROCA %.

    python -m benchmarks.aode_grid --corpus spamassassin --parents 200 --parents 50 [--split half]

Uses the token cache of benchmarks/option_grid.py and the library's own
functions (`model.estimate` and `model.joint_log_likelihood` for naive
Bayes, `aode.select_parents` and `aode.joint_log_likelihood` for AODE) over
counts kept in memory. Online, the parents are chosen again whenever the
trained messages have grown by ``--growth`` (2: after 50, 100, 200, ...
messages), and the pair counts rebuilt from every message trained so far,
as `spamfilter db reselect` does from the ledger. With --split the parents
are chosen once on the training part.

Naive Bayes here scores every token with one tempering (`[model]
header_apart = false`), and --check compares with the library at that
setting. Prints 1-ROCA %, sm at 0.1% hm and lam % per setting, and the pair counts
held at the end; writes results/aode_grid-<stream>-<split>.json. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from benchmarks.compare import ranking
from benchmarks.long_stream import STREAMS, stream
from benchmarks.streams import Doc, tokenized
from spamfilter.analysis import Analysed, Analyser
from spamfilter.config import Config, TrainMode, load_config
from spamfilter.counts import ClassCounts, FeatureStats, TokenCounts, Totals
from spamfilter.nb import aode, decision
from spamfilter.nb import model as nb
from spamfilter.nb.gaussian import feature_log_odds, gaussian_estimate
from spamfilter.tokenizer.features import SCALE
from spamfilter.tools.evaluation import run_online


class Model:
    """Token, class and pair counts grown message by message."""

    def __init__(self, k: int, children: int, min_support: int, child_support: int = 0, spode: tuple[float, float] | None = None) -> None:
        self.k, self.children, self.min_support, self.child_support = k, children, min_support, child_support
        self.spode = spode is not None  # SPODE: one parent chosen on the held-out tail with (alpha, tempering)
        self.alpha, self.tempering = spode or (0.0, 0.0)
        self.child = np.zeros(0, dtype=bool)
        self.ids: dict[str, int] = {}
        self.names: list[str] = []
        self.doc = np.zeros((2, 1024), dtype=np.int64)
        self.classes = ClassCounts.zeros()
        self.rows: list[np.ndarray] = []
        self.labels: list[int] = []
        self.parents: np.ndarray = np.zeros(0, dtype=np.int64)
        self.pair = np.zeros((2, 0, 0), dtype=np.int32)  # D[c,p,j], dense over the token ids
        self.parent_terms = np.zeros((2, 0), dtype=np.int64)

    def columns(self, doc: Doc, grow: bool) -> np.ndarray:
        if grow:
            for token in doc:
                if token not in self.ids:
                    self.ids[token] = len(self.ids)
                    self.names.append(token)
            if len(self.ids) > self.doc.shape[1]:
                self.doc = np.pad(self.doc, ((0, 0), (0, max(len(self.ids), 2 * self.doc.shape[1]) - self.doc.shape[1])))
        return np.fromiter((self.ids[t] for t in doc if t in self.ids), dtype=np.int64)

    def add(self, doc: Doc, c: int) -> None:
        cols = self.columns(doc, grow=True)
        self.doc[c, cols] += 1
        self.classes.messages[c] += 1
        self.classes.binary_terms[c] += len(cols)
        self.classes.terms[c] += len(cols)
        self.rows.append(cols)
        self.labels.append(c)
        if self.parents.size:
            held = np.flatnonzero(np.isin(self.parents, cols))
            if len(self.ids) > self.child.shape[0]:
                self.child = np.pad(self.child, (0, self.doc.shape[1] - self.child.shape[0]), constant_values=not self.restricted)
            if len(self.ids) > self.pair.shape[2]:
                self.pair = np.pad(self.pair, ((0, 0), (0, 0), (0, self.doc.shape[1] - self.pair.shape[2])))
            self.pair[c][np.ix_(held, cols)] += 1
            self.parent_terms[c, held] += len(cols)

    @property
    def restricted(self) -> bool:
        return bool(self.children or self.child_support)

    def pair_count(self) -> int:
        """Pairs (p, j) with a nonzero count in a class, over the children only."""
        width = self.pair.shape[2]
        if not width:
            return 0
        child = self.child[:width] if self.restricted else np.ones(width, dtype=bool)
        return int(np.count_nonzero(self.pair[:, :, child].any(axis=0)))

    def reselect(self) -> None:
        """Choose the parents from the counts and rebuild their pair counts from every message."""
        v = len(self.ids)
        ranked = aode.rank_tokens(self.names, self.doc[:, :v], self.classes.messages, self.min_support)
        self.parents = np.array([self.ids[t] for t in ranked[: 1 if self.spode else self.k]], dtype=np.int64)
        self.child = np.zeros(self.doc.shape[1], dtype=bool)
        if self.child_support:
            kids = aode.rank_tokens(self.names, self.doc[:, :v], self.classes.messages, self.child_support)
            kids = kids[: self.children] if self.children else kids
        else:
            kids = ranked[: self.children] if self.children else ranked
        self.child[[self.ids[t] for t in kids]] = True
        self.child[v:] = not self.restricted
        lengths = np.array([len(r) for r in self.rows])
        X = sp.csr_matrix((np.ones(int(lengths.sum())), np.concatenate(self.rows), np.concatenate([[0], np.cumsum(lengths)])), shape=(len(self.rows), v))
        labels = np.array(self.labels)
        if self.spode and self.parents.size:
            candidates = [self.ids[t] for t in ranked[: aode.SPODE_CANDIDATES]]
            self.child[candidates] = True
            best = aode.spode_parent(X, labels == 1, candidates, self.child[:v], self.alpha, self.tempering, self.min_support)
            self.parents = np.array([best], dtype=np.int64)
        self.pair = np.zeros((2, len(self.parents), self.doc.shape[1]), dtype=np.int32)
        terms = []
        for c in (0, 1):
            Xc = X[labels == c]
            Xp = Xc[:, self.parents]
            self.pair[c, :, :v] = (Xp.T @ Xc).toarray()
            terms.append(np.asarray(Xp.T @ np.asarray(Xc.sum(axis=1)).ravel()).ravel())
        self.parent_terms = np.array(terms, dtype=np.int64)

    def score(self, doc: Doc, tempering: float, alpha: float) -> tuple[float, float]:
        """(naive Bayes log-odds, AODE log-odds); 0 before both classes are known."""
        if not self.classes.messages.all():
            return 0.0, 0.0
        cols = self.columns(doc, grow=False)
        m = len(cols)
        counts = TokenCounts(self.doc[:, cols], self.doc[:, cols])
        empty = np.zeros((0, 2), dtype=np.int64)
        stats = Totals(self.classes, vocabulary_size=len(self.ids), histogram=(empty, empty))
        X = sp.csr_matrix((np.ones(m), (np.zeros(m, dtype=np.int64), np.arange(m))), shape=(1, m))
        params = nb.estimate("multinomial-binary", counts, stats, alpha)
        naive = float(nb.log_odds(nb.joint_log_likelihood(X, params, tempering))[0])
        if not self.parents.size:
            return naive, naive
        where = {j: i for i, j in enumerate(cols.tolist())}
        pc = aode.PairCounts(
            parent_docs=self.doc[:, self.parents],
            parent_terms=self.parent_terms,
            pairs=(sp.csr_matrix(self.pair[0][:, cols]), sp.csr_matrix(self.pair[1][:, cols])),
            parent_column=np.array([where.get(int(p), -1) for p in self.parents], dtype=np.int64),
            child=self.child[cols] if self.restricted else np.ones(m, dtype=bool),
        )
        jll, covered = aode.joint_log_likelihood(X, self.doc[:, cols], self.classes, len(self.ids), pc, alpha, tempering, self.min_support)
        return naive, float(jll[0, 1] - jll[0, 0]) if covered[0] else naive


def message_features(config: Config, name: str, limit: int | None, n: int) -> np.ndarray:
    """The fixed-point feature vectors of the stream's messages (the ones
    `tokenized` keeps), (n, F), cached in results/."""
    cache = Path("results") / f"features-{name}-{limit or 'all'}.npy"
    if cache.exists():
        return np.load(cache)
    analyser = Analyser(config.tokenizer, config.tokenizer.max_bytes)
    rows = []
    for _, item in stream(name, limit):
        a = analyser.one(item)
        if isinstance(a, Analysed):
            rows.append(a.features)
    out = np.array(rows, dtype=np.int64)
    if len(out) != n:
        raise SystemExit(f"{name}: {len(out)} feature vectors for {n} tokenized messages")
    np.save(cache, out)
    return out


def feature_terms(features: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Online: each message's Gaussian feature log-odds (weight 1) from the
    messages before it (0 before both classes are known), as Filter scores them."""
    stats = FeatureStats.zeros(features.shape[1])
    out = np.zeros(len(y))
    for i, (x, spam) in enumerate(zip(features, y)):
        if stats.n[:, 0].all():
            params = gaussian_estimate(stats, SCALE)
            out[i] = float(feature_log_odds(x[None, :] / SCALE, params, 1.0).sum())
        stats = stats + FeatureStats.of_message(int(spam), tuple(int(v) for v in x))
    return out


def run(
    docs: list[Doc],
    y: np.ndarray,
    k: int,
    children: int,
    child_support: int,
    min_support: int,
    growth: float,
    split: str | None,
    tempering: float,
    alpha: float,
    spode: bool = False,
) -> tuple[np.ndarray, np.ndarray, int]:
    model = Model(k, children, min_support, child_support, (alpha, tempering) if spode else None)
    next_selection = 50
    if split is None:
        scores = []
        for doc, is_spam in zip(docs, y):
            scores.append(model.score(doc, tempering, alpha))
            model.add(doc, int(is_spam))
            if len(model.labels) >= next_selection and model.classes.messages.all():
                model.reselect()
                next_selection = int(len(model.labels) * growth)
        return np.array(scores).T, y, model.pair_count()
    head = len(docs) // 2 if split == "half" else 10_000
    for doc, is_spam in zip(docs[:head], y[:head]):
        model.add(doc, int(is_spam))
    model.reselect()
    return np.array([model.score(doc, tempering, alpha) for doc in docs[head:]]).T, y[head:], model.pair_count()


def check(config: Config, name: str, docs: list[Doc], y: np.ndarray, args: argparse.Namespace) -> None:
    """Print the largest log-odds difference between this loop and the library's
    online run with the same one-dependence settings on the first N messages."""
    k = (args.parents or [aode.DEFAULT_PARENTS])[0]
    children, child_support = (args.children or [0])[0], (args.child_support or [0])[0]
    m = replace(
        config.model,
        dependence="spode" if args.spode else "aode",
        header_apart=False,
        aode_parents=k,
        aode_children=children or 10**6,
        aode_child_support=child_support or args.min_support,
        aode_min_support=args.min_support,
        reselect_growth=args.growth,
    )
    _, scored = run_online(replace(config, model=m), list(stream(name, args.check)), train_mode=TrainMode.teft)
    odds, _, _ = run(docs[: args.check], y[: args.check], k, children or 10**6, child_support, args.min_support, args.growth, None, m.tempering, m.alpha, args.spode)
    diff = np.max(np.abs(odds[1][: len(scored)] - np.array([s.log_odds for s in scored])))
    print(f"check {name}: largest |log-odds difference| against run_online ({m.dependence}) over {len(scored)} messages: {diff:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", choices=sorted(STREAMS), required=True)
    parser.add_argument("--parents", type=int, action="append", default=[])
    parser.add_argument("--children", type=int, action="append", default=[], help="C: pairs with the C best-ranked tokens only (0: every token)")
    parser.add_argument("--child-support", type=int, action="append", default=[], help="children: tokens in at least this many messages (0: as --min-support)")
    parser.add_argument("--min-support", type=int, default=aode.DEFAULT_MIN_SUPPORT)
    parser.add_argument("--growth", type=float, default=2.0)
    parser.add_argument("--split", choices=["half", "10k"], default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--spode", action="store_true", help="SPODE: one parent, chosen on the held-out tail (of the 20 best-ranked)")
    parser.add_argument("--features", action="store_true", help="also the Gaussian message features (weights 1 and 0.2) on naive Bayes and AODE (online only)")
    parser.add_argument("--check", type=int, default=0, help="compare AODE (first --parents, --children, --child-support) with run_online on the first N messages")
    args = parser.parse_args()
    config = load_config(args.config) if args.config else Config()
    threshold = decision.thresholds_from_loss(config.decision.cost_ham_as_spam, config.decision.cost_spam_as_ham, 0.0).spam_min
    Path("results").mkdir(exist_ok=True)
    for name in args.corpus:
        docs, y = tokenized(config, name, args.limit)
        if args.check:
            check(config, name, docs, y, args)
        rows: list[dict[str, Any]] = []
        print(f"\n{name} ({args.split or 'online'}; load {os.getloadavg()[0]:.1f})")
        print(f"{'setting':<28} {'1-ROCA%':>8} {'sm@hm.1%':>9} {'lam%':>7} {'pairs':>10} {'s':>7}")
        grid = [(k, c, cs) for k in args.parents or [aode.DEFAULT_PARENTS] for c in args.children or [0] for cs in args.child_support or [0]]
        for k, children, child_support in grid:
            start = time.perf_counter()
            odds, truth, held = run(
                docs, y, k, children, child_support, args.min_support, args.growth, args.split, config.model.tempering, config.model.alpha, args.spode
            )
            seconds = time.perf_counter() - start
            labels = [
                "naive Bayes (defaults)",
                f"{'spode' if args.spode else 'aode'} K={1 if args.spode else k} C={children or 'all'}/{child_support or ''} m'={args.min_support}",
            ]
            if args.features and not args.split:
                terms = feature_terms(message_features(config, name, args.limit, len(docs)), y)
                odds = np.vstack([odds, odds[0] + terms, odds[0] + 0.2 * terms, odds[1] + terms, odds[1] + 0.2 * terms])
                labels += ["+ features", "+ features w=0.2", "aode + features", "aode + features w=0.2"]
            for label, score in zip(labels, odds):
                if not label.startswith("aode") and any(r["setting"] == label for r in rows):
                    continue
                r = ranking(truth, score, threshold)
                rows.append({"setting": label, **r, "pairs": held, "seconds": seconds})
                print(f"{label:<28} {r['one_minus_roca_pct']:8.4f} {r['sm_at_hm01_pct']:9.2f} {r['lam_pct']:7.3f} {held:10d} {seconds:7.1f}")
        out = Path("results") / f"aode_grid-{name}-{args.split or 'online'}-{args.limit or 'all'}.json"
        out.write_text(json.dumps({"stream": name, "split": args.split, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
