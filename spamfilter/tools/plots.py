"""PNG charts of evaluation runs and of the model (matplotlib, Agg backend:
no display needed).

Returns nothing but the file or its bytes; the numbers come from
``evaluation`` and ``filter``. Sizes in pixels are fixed (dpi 100), so a
chart's size says which chart it is:

    ROC                 600 x 600
    reliability         600 x 600
    top words           1200 x (150 + 25 * rows), rows = the longer of the two lists
    training history    900 x 350
    log-odds histogram  900 x 400
    feature densities   1200 x (300 * rows), three panels a row
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(plt: Any, fig: Any) -> bytes:
    """The figure as PNG bytes, at exactly its size in pixels (figsize * dpi)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


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
    path.write_bytes(roc_png(is_spam, odds, title))


def roc_png(is_spam: npt.NDArray[np.bool_], odds: npt.NDArray[np.float64], title: str) -> bytes:
    """``write_roc``'s chart as PNG bytes, ROC_SIZE pixels."""
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
    ax.set_title(title, parse_math=False)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return _png(plt, fig)


def reliability_png(predicted: Sequence[float], observed: Sequence[float], messages: Sequence[int], title: str) -> bytes:
    """Reliability diagram on logit axes: each bin's mean predicted P(spam)
    against the share of its messages that was spam, a marker's area
    growing with the bin's messages; a calibrated filter lies on the
    diagonal. Shares of 0 or 1 are drawn at the axes' ends (hollow)."""
    plt = _pyplot()
    eps = 1e-4
    x = np.clip(np.asarray(predicted, dtype=np.float64), eps, 1 - eps)
    y = np.asarray(observed, dtype=np.float64)
    n = np.asarray(messages, dtype=np.float64)
    clipped = (y < eps) | (y > 1 - eps)
    y = np.clip(y, eps, 1 - eps)
    sizes = 20 + 200 * np.sqrt(n / max(float(n.max()), 1.0)) if n.size else n
    fig, ax = plt.subplots(figsize=(6, 6), dpi=100)
    ax.plot([eps, 1 - eps], [eps, 1 - eps], color="#7f8c8d", lw=1, linestyle="--", label="calibrated")
    ax.scatter(x[~clipped], y[~clipped], s=sizes[~clipped], color=SPAM_COLOUR, alpha=0.7, label="bins")
    ax.scatter(x[clipped], y[clipped], s=sizes[clipped], facecolors="none", edgecolors=SPAM_COLOUR, label="bins with no spam or only spam")
    for xi, yi, ni in zip(x, y, n):
        ax.annotate(f"{int(ni)}", (xi, yi), textcoords="offset points", xytext=(6, -10), fontsize=7)
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("logit")
    ax.set_yscale("logit")
    ax.set_xlim(eps, 1 - eps)
    ax.set_ylim(eps, 1 - eps)
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))
    ax.set_xlabel("P(spam) the filter gave (bin mean)")
    ax.set_ylabel("share of the bin that was spam")
    ax.set_title(title, parse_math=False)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return _png(plt, fig)


def learning_curve_series(is_spam: npt.NDArray[np.bool_], odds: npt.NDArray[np.float64], threshold: float) -> list[tuple[str, npt.NDArray[np.float64]]]:
    """The learning curve's lines: (legend label, cumulative % after each message).

    Two-way, as TREC measures and as `evaluate`'s hm / sm: a message is
    called spam when its log-odds exceed ``threshold`` (the loss matrix's
    two-way threshold), with no unsure verdict; so the last value of the ham
    line is evaluate's hm, not its three-way "ham filed as spam".
    """
    y = np.asarray(is_spam, dtype=bool)
    wrong = (np.asarray(odds) > threshold) != y
    n = np.arange(1, y.size + 1)
    series = [("all messages, two-way", 100.0 * np.cumsum(wrong) / n)]
    for mask, label in ((~y, "ham filed as spam, two-way (hm)"), (y, "spam let through, two-way (sm)")):
        seen = np.maximum(np.cumsum(mask), 1)
        series.append((label, 100.0 * np.cumsum(wrong & mask) / seen))
    return series


def write_learning_curve(path: Path, is_spam: npt.NDArray[np.bool_], odds: npt.NDArray[np.float64], threshold: float, title: str) -> None:
    """Cumulative misclassification rate (%) over the stream, two-way (see
    `learning_curve_series`)."""
    plt = _pyplot()
    n = np.arange(1, np.asarray(is_spam).size + 1)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    for label, rate in learning_curve_series(is_spam, odds, threshold):
        ax.plot(n, rate, lw=1.5 if label.startswith("all") else 1, label=label)
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_xlabel("messages seen")
    ax.set_ylabel("cumulative misclassification %, two-way")
    ax.set_title(title)
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


SPAM_COLOUR = "#c0392b"
HAM_COLOUR = "#2471a3"
ROC_SIZE = (600, 600)
HISTORY_SIZE = (900, 350)
HISTOGRAM_SIZE = (900, 400)
TOP_WORDS_WIDTH = 1200
FEATURE_PANEL = (400, 300)
FEATURE_COLUMNS = 3
#: Half the width of a density plot's x range, in standard deviations.
DENSITY_SPAN = 4.0
# Labels longer than this are cut: a hostile 200-character token would squeeze the bars to nothing.
_LABEL_CHARS = 36


def top_words_size(rows: int) -> tuple[int, int]:
    """(width, height) in pixels of the top-words chart with ``rows`` bars a side."""
    return TOP_WORDS_WIDTH, 150 + 25 * max(rows, 1)


def _label(token: str) -> str:
    printable = "".join(ch if ch.isprintable() else "\N{REPLACEMENT CHARACTER}" for ch in token)
    return printable if len(printable) <= _LABEL_CHARS else printable[: _LABEL_CHARS - 1] + "\N{HORIZONTAL ELLIPSIS}"


def top_words_png(spam: Sequence[tuple[str, float]], ham: Sequence[tuple[str, float]], title: str) -> bytes:
    """Horizontal bars of (token, score) for each class, strongest at the top:
    spam on the left, ham on the right. Each score is the log-likelihood
    ratio in favour of its own class."""
    plt = _pyplot()
    width, height = top_words_size(max(len(spam), len(ham)))
    fig, axes = plt.subplots(1, 2, figsize=(width / 100, height / 100), dpi=100)
    sides = ((axes[0], spam, SPAM_COLOUR, "spam"), (axes[1], ham, HAM_COLOUR, "ham"))
    # Tokens come from mail: no mathtext ("$...$"), and no warning per glyph
    # the font lacks.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph .* missing from")
        for ax, rows, colour, name in sides:
            other = "ham" if name == "spam" else "spam"
            positions = np.arange(len(rows))
            ax.barh(positions, [score for _, score in rows], color=colour)
            ax.set_yticks(positions)
            ax.set_yticklabels([_label(token) for token, _ in rows], parse_math=False, fontsize=9)
            ax.invert_yaxis()
            ax.set_xlabel(f"log P(token|{name}) - log P(token|{other})")
            ax.set_title(f"{name}: top {len(rows)}" if rows else f"{name}: no tokens")
            ax.grid(True, axis="x", alpha=0.3)
        fig.suptitle(title, parse_math=False)
        fig.tight_layout()
        return _png(plt, fig)


def write_top_words(path: Path, spam: Sequence[tuple[str, float]], ham: Sequence[tuple[str, float]], title: str) -> None:
    """``top_words_png`` written to ``path``."""
    path.write_bytes(top_words_png(spam, ham, title))


def history_png(days: Sequence[date], spam: Sequence[int], ham: Sequence[int]) -> bytes:
    """Messages trained per day (stacked bars: ham below, spam above) and the
    running total of each class (lines, right axis). Only days with training
    get a bar, so a model trained in two bursts a year apart stays readable."""
    plt = _pyplot()
    width, height = HISTORY_SIZE
    fig, ax = plt.subplots(figsize=(width / 100, height / 100), dpi=100)
    ham_n = np.asarray(ham, dtype=np.int64)
    spam_n = np.asarray(spam, dtype=np.int64)
    x = np.arange(len(days))
    ax.bar(x, ham_n, color=HAM_COLOUR, alpha=0.6, label="ham trained that day")
    ax.bar(x, spam_n, bottom=ham_n, color=SPAM_COLOUR, alpha=0.6, label="spam trained that day")
    ax.set_ylabel("messages per day")
    step = max(1, len(days) // 12)
    ax.set_xticks(x[::step])
    ax.set_xticklabels([d.isoformat() for d in days][::step], rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.7, max(len(days), 3) - 0.3)
    total = ax.twinx()
    total.plot(x, np.cumsum(ham_n), color=HAM_COLOUR, marker="o", label="ham in the model")
    total.plot(x, np.cumsum(spam_n), color=SPAM_COLOUR, marker="o", label="spam in the model")
    total.set_ylabel("messages in the model")
    total.set_ylim(bottom=0)
    handles = ax.get_legend_handles_labels()
    more = total.get_legend_handles_labels()
    ax.legend(handles[0] + more[0], handles[1] + more[1], loc="lower left", bbox_to_anchor=(0, 1.01), ncol=4, fontsize=8, frameon=False)
    fig.tight_layout()
    return _png(plt, fig)


def log_odds_histogram_png(odds: npt.NDArray[np.float64], is_spam: npt.NDArray[np.bool_] | None, thresholds: tuple[float, float] | None, title: str) -> bytes:
    """Histogram of log-odds, one colour per true class when ``is_spam`` is
    given, with the (ham_max, spam_min) verdict bounds on the log-odds as
    dashed lines (an infinite one is left out)."""
    plt = _pyplot()
    width, height = HISTOGRAM_SIZE
    fig, ax = plt.subplots(figsize=(width / 100, height / 100), dpi=100)
    # Drawn within +-1e6 nats: the span of +-1e308 overflows, and beyond a
    # million nats 50 bins tell nothing apart anyway.
    values = np.clip(np.asarray(odds, dtype=np.float64), -1e6, 1e6)
    low, high = (float(values.min()), float(values.max())) if values.size else (-1.0, 1.0)
    drawn = [t for t in thresholds if np.isfinite(t)] if thresholds is not None else []
    if drawn:
        low, high = min(low, *drawn), max(high, *drawn)
    if high - low < 1e-9:
        low, high = low - 1.0, high + 1.0
    bins = np.linspace(low, high, 51)
    if is_spam is None:
        ax.hist(values, bins=bins, color="#7f8c8d", label="messages")
    else:
        y = np.asarray(is_spam, dtype=bool)
        ax.hist(values[~y], bins=bins, color=HAM_COLOUR, alpha=0.6, label="ham")
        ax.hist(values[y], bins=bins, color=SPAM_COLOUR, alpha=0.6, label="spam")
    if thresholds is not None:
        # A bound the calibrated score never crosses is infinite: not drawn.
        ham_max, spam_min = thresholds
        if np.isfinite(ham_max):
            ax.axvline(ham_max, color=HAM_COLOUR, linestyle="--", lw=1, label=f"ham at or below {ham_max:.2f}")
        if np.isfinite(spam_min):
            ax.axvline(spam_min, color=SPAM_COLOUR, linestyle=":", lw=1.5, label=f"spam above {spam_min:.2f}")
    ax.set_xlabel("log-odds  log P(spam|x) - log P(ham|x)")
    ax.set_ylabel("messages")
    ax.set_title(title, parse_math=False)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return _png(plt, fig)


def density_curves(mean: tuple[float, float], sd: tuple[float, float], points: int = 241) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The (ham, spam) normal densities of one feature on a common grid:
    x (points,) spans min(mu - 4 sigma) to max(mu + 4 sigma) over both
    classes, and y (2, points) holds

        y[c] = exp(-(x - mu[c])^2 / (2 sigma[c]^2)) / (sqrt(2 pi) sigma[c])
    """
    mu = np.asarray(mean, dtype=np.float64)
    sigma = np.asarray(sd, dtype=np.float64)
    low = float((mu - DENSITY_SPAN * sigma).min())
    high = float((mu + DENSITY_SPAN * sigma).max())
    if high - low < 1e-9:
        low, high = low - 1.0, high + 1.0
    x = np.linspace(low, high, points)
    z = (x[None, :] - mu[:, None]) / sigma[:, None]
    y: npt.NDArray[np.float64] = np.exp(-0.5 * z * z) / (np.sqrt(2 * np.pi) * sigma[:, None])
    return x, y


def feature_densities_size(panels: int) -> tuple[int, int]:
    """(width, height) in pixels of the feature-density chart with ``panels`` features."""
    rows = max(1, -(-panels // FEATURE_COLUMNS))
    return FEATURE_PANEL[0] * FEATURE_COLUMNS, FEATURE_PANEL[1] * rows


def feature_densities_figure(features: Sequence[tuple[str, str, tuple[float, float], tuple[float, float]]]) -> Any:
    """A matplotlib figure with one panel per (name, unit, (mu_ham, mu_spam),
    (sigma_ham, sigma_spam)): the two ``density_curves`` and a dashed line
    at each mean, labelled with its value (the lower mean's label to its
    left, the higher one's to its right, so they never overlap)."""
    plt = _pyplot()
    width, height = feature_densities_size(len(features))
    rows = height // FEATURE_PANEL[1]
    fig, axes = plt.subplots(rows, FEATURE_COLUMNS, figsize=(width / 100, height / 100), dpi=100, squeeze=False)
    for ax in axes.flat[len(features) :]:
        ax.set_visible(False)
    for ax, (name, unit, mean, sd) in zip(axes.flat, features):
        x, y = density_curves(mean, sd)
        low = 0 if mean[0] <= mean[1] else 1
        for c, (colour, cls) in enumerate(((HAM_COLOUR, "ham"), (SPAM_COLOUR, "spam"))):
            ax.plot(x, y[c], color=colour, lw=1.5, label=f"{cls} (\u03c3 {sd[c]:.3g})")
            ax.axvline(mean[c], color=colour, linestyle="--", lw=1)
            ax.annotate(
                f"{cls} \u03bc = {mean[c]:.3g}",
                xy=(mean[c], float(y[c].max())),
                xytext=(-4 if c == low else 4, -12),
                textcoords="offset points",
                ha="right" if c == low else "left",
                color=colour,
                fontsize=8,
                bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
            )
        ax.set_ylim(bottom=0, top=1.12 * float(y.max()))
        ax.set_title(name, parse_math=False, fontsize=10)
        ax.set_xlabel(unit, parse_math=False, fontsize=8)
        ax.set_ylabel("density", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.legend(fontsize=7, loc="best", frameon=False)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def feature_densities_png(features: Sequence[tuple[str, str, tuple[float, float], tuple[float, float]]]) -> bytes:
    """``feature_densities_figure`` as PNG bytes, ``feature_densities_size`` pixels."""
    return _png(_pyplot(), feature_densities_figure(features))
