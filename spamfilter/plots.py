"""PNG charts of evaluation runs (matplotlib, Agg backend: no display needed).

Returns nothing but the file; the numbers come from ``evaluation``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def roc_points(is_spam: npt.NDArray[np.bool_], odds: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(ham misclassification %, spam misclassification %) at every distinct
    threshold, lowest threshold first: the ROC curve as TREC plots it."""
    y = np.asarray(is_spam, dtype=bool)
    thresholds = np.unique(odds)
    n_ham, n_spam = max(int((~y).sum()), 1), max(int(y.sum()), 1)
    order = np.argsort(odds)
    s, t = np.asarray(odds)[order], y[order]
    ham_at_or_below = np.searchsorted(s[~t], thresholds, side="right")
    spam_at_or_below = np.searchsorted(s[t], thresholds, side="right")
    hm = 100.0 * (n_ham - ham_at_or_below) / n_ham
    sm = 100.0 * spam_at_or_below / n_spam
    return hm, sm


def write_roc(path: Path, is_spam: npt.NDArray[np.bool_], odds: npt.NDArray[np.float64], title: str) -> None:
    """ROC curve on logit axes (ham misclassification vs spam misclassification, %)."""
    plt = _pyplot()
    hm, sm = roc_points(is_spam, odds)
    # logit axes take fractions: 0.0001 .. 0.5 is 0.01% .. 50%
    eps = 1e-4
    fig, ax = plt.subplots(figsize=(6, 6), dpi=100)
    ax.plot(np.clip(hm / 100, eps, 1 - eps), np.clip(sm / 100, eps, 1 - eps), drawstyle="steps-post", lw=1.5)
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("logit")
    ax.set_yscale("logit")
    ax.set_xlim(eps, 0.5)
    ax.set_ylim(eps, 0.5)
    percent = FuncFormatter(lambda v, _pos: f"{100 * v:g}")
    ax.xaxis.set_major_formatter(percent)
    ax.yaxis.set_major_formatter(percent)
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))
    ax.set_xlabel("% ham misclassification")
    ax.set_ylabel("% spam misclassification")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def write_learning_curve(path: Path, is_spam: npt.NDArray[np.bool_], odds: npt.NDArray[np.float64], threshold: float, title: str) -> None:
    """Cumulative misclassification rate (%) over the stream, with the two-way threshold."""
    plt = _pyplot()
    y = np.asarray(is_spam, dtype=bool)
    wrong = (np.asarray(odds) > threshold) != y
    n = np.arange(1, y.size + 1)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(n, 100.0 * np.cumsum(wrong) / n, lw=1.5, label="all messages")
    for mask, label in ((~y, "ham filed as spam"), (y, "spam let through")):
        seen = np.maximum(np.cumsum(mask), 1)
        ax.plot(n, 100.0 * np.cumsum(wrong & mask) / seen, lw=1, label=label)
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_xlabel("messages seen")
    ax.set_ylabel("cumulative misclassification %")
    ax.set_title(title)
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
