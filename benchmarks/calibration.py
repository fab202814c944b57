"""Maps from raw to calibrated log-odds, fitted as the filter could fit them, on later mail.

    python -m benchmarks.calibration [--corpus spamassassin ...]

Train once on the first half of each stream and score the second half
(as `spamfilter evaluate --protocol split`). Each map is fitted on the
time-ordered last fifth of the training half, scored by a model of its
first four fifths, with Platt's smoothed targets ((N+ + 1) / (N+ + 2) for
spam, 1 / (N- + 2) for ham), and applied to the full model's scores of the
second half:

    platt:   a L + b
    slope:   a L                      (the model's own prior kept)
    length:  L (a + b log n)          n = the message's known tokens
    clip:    L clipped to [-log(N_ham + 1), log(N_spam + 1)], the most a
             rule of succession over the trained messages can claim
    hindsight: the slope fitted on the second half itself (a bound on what
             a slope can do, not a method)

Prints 1-ROCA % (of the mapped log-odds: only the length map reorders),
log-loss (nats per message) and the two P(spam) tails of `spamfilter.nb.calibration`
per stream and map; writes results/calibration.json. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

from benchmarks.loco import CORPORA
from benchmarks.streams import Corpus, split_scores
from spamfilter.config import Config
from spamfilter.nb.calibration import calibration
from spamfilter.tools.evaluation import roc_area


def fit(F: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Weights w of P(spam) = expit(F @ w) minimising the log-loss against Platt's smoothed targets."""
    n_spam, n_ham = int(y.sum()), int((~y).sum())
    t = np.where(y, (n_spam + 1) / (n_spam + 2), 1 / (n_ham + 2))

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = F @ w
        return float(np.sum(t * np.logaddexp(0, -z) + (1 - t) * np.logaddexp(0, z))), F.T @ (expit(z) - t)

    start = np.zeros(F.shape[1])
    start[0] = 0.5
    return minimize(loss, start, jac=True, method="L-BFGS-B").x


def features(kind: str, odds: np.ndarray, n: np.ndarray) -> np.ndarray:
    columns = {"platt": [odds, np.ones_like(odds)], "slope": [odds], "length": [odds, odds * np.log(np.maximum(n, 1))]}[kind]
    return np.stack(columns, axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus", action="append", choices=[*CORPORA, "all"], default=None, help="a stream of benchmarks/loco.py, or all (every corpus one after the other)"
    )
    args = parser.parse_args()
    config = Config()
    Path("results").mkdir(exist_ok=True)
    out = {}
    for name in args.corpus or [*CORPORA, "all"]:
        c = Corpus(config, name)
        head = c.y.size // 2
        cut = head * 4 // 5
        odds, y = split_scores(c, config.model)
        held, held_y = split_scores(c, config.model, cut, head)
        n_test = np.asarray(c.binary[head:][:, np.flatnonzero(np.asarray(c.binary[:head].sum(axis=0)).ravel() > 0)].sum(axis=1)).ravel()
        n_held = np.asarray(c.binary[cut:head][:, np.flatnonzero(np.asarray(c.binary[:cut].sum(axis=0)).ravel() > 0)].sum(axis=1)).ravel()
        spam, ham = int(c.y[:head].sum()), int((~c.y[:head]).sum())
        mapped = {"raw": odds, "clip": np.clip(odds, -np.log(ham + 1), np.log(spam + 1))}
        for kind in ("platt", "slope", "length"):
            mapped[kind] = features(kind, odds, n_test) @ fit(features(kind, held, n_held), held_y)
        mapped["hindsight"] = features("slope", odds, n_test) @ fit(features("slope", odds, n_test), y)
        out[name] = {}
        for kind, z in mapped.items():
            cal = calibration(y, z)
            out[name][kind] = {
                "one_minus_roca": 100 * (1 - roc_area(y, z)),
                "log_loss": cal.log_loss,
                "low_tail_spam_pct": cal.low_tail_spam_pct,
                "ham_in_low_tail_pct": cal.ham_in_low_tail_pct,
                "high_tail_ham_pct": cal.high_tail_ham_pct,
                "spam_in_high_tail_pct": cal.spam_in_high_tail_pct,
            }
            r = out[name][kind]
            print(
                f"{name:13} {kind:10} 1-ROCA {r['one_minus_roca']:.4f} log-loss {r['log_loss']:.4f} "
                f"P<=0.01: {r['low_tail_spam_pct']:.2f}% spam, {r['ham_in_low_tail_pct']:.0f}% of ham  "
                f"P>=0.99: {r['high_tail_ham_pct']:.2f}% ham, {r['spam_in_high_tail_pct']:.0f}% of spam",
                flush=True,
            )
    Path("results/calibration.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
