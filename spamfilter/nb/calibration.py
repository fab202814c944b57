"""How far a score can be taken at its word: calibration measures from log-odds.

Pure numpy, no I/O. A filter is calibrated when, of the messages it gives
P(spam) = p, a fraction p is spam. Ranking (1-ROCA) says nothing about that:
any increasing map of the log-odds ranks the same. These figures do:

    log-loss  = mean_i log(1 + exp(-s_i * L_i))     s_i = +1 for spam, -1 for ham
              = mean_i -log P(true class of i)       in nats per message
    Brier     = mean_i (P(spam|x_i) - y_i) ** 2      y_i = 1 for spam, 0 for ham

both computed from the log-odds L (``logaddexp``, so a log-odds of -89 on a
spam costs its 89 nats instead of overflowing), and the two tails a user acts
on:

    low tail  = messages with P(spam) <= 0.01: the share of them that is spam,
                and the share of all ham they hold;
    high tail = messages with P(spam) >= 0.99: the share of them that is ham,
                and the share of all spam they hold.

A calibrated filter has at most 1% spam in its low tail and at most 1% ham
in its high tail; a useful one puts most of each class there. The
reliability table bins the messages by P(spam) and sets each bin's mean
predicted probability beside the share that was spam; the expected
calibration error (ECE) is their absolute difference weighted by the bins'
sizes. With scores that are nearly all 0 or 1 and right, the ECE is small
whatever the tails hold: read it beside them, not instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import expit

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

#: P(spam) at or below which a message is in the low tail, and its mirror.
TAIL = 0.01
#: The reliability table's bin edges in P(spam): finer at the ends, where
#: nearly every message of a spam filter lands.
EDGES = (0.0, 0.001, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 0.999, 1.0)


@dataclass(frozen=True, slots=True)
class ReliabilityBin:
    """One bin of P(spam) in (low, high] (the first bin includes 0): its
    messages, how many were spam, and their mean predicted P(spam)."""

    low: float
    high: float
    messages: int
    spam: int
    mean_probability: float


@dataclass(frozen=True, slots=True)
class Calibration:
    """Calibration figures of a set of scored messages (see the module docstring).

    log_loss: nats per message. brier: mean squared error of P(spam).
    ece: expected calibration error over ``bins``, 0-1.
    low_tail, high_tail: messages with P(spam) <= TAIL and >= 1 - TAIL.
    low_tail_spam_pct: % of the low tail that is spam (target: <= 1).
    high_tail_ham_pct: % of the high tail that is ham (target: <= 1).
    ham_in_low_tail_pct, spam_in_high_tail_pct: % of each class its tail holds.
    """

    log_loss: float
    brier: float
    ece: float
    low_tail: int
    low_tail_spam_pct: float
    ham_in_low_tail_pct: float
    high_tail: int
    high_tail_ham_pct: float
    spam_in_high_tail_pct: float
    bins: tuple[ReliabilityBin, ...]


def log_loss(is_spam: BoolArray, log_odds: FloatArray) -> float:
    """Mean -log P(true class) in nats, from the log-odds (never overflows)."""
    sign = np.where(np.asarray(is_spam, dtype=bool), 1.0, -1.0)
    return float(np.mean(np.logaddexp(0.0, -sign * np.asarray(log_odds, dtype=np.float64))))


def reliability(is_spam: BoolArray, probability: FloatArray, edges: tuple[float, ...] = EDGES) -> tuple[ReliabilityBin, ...]:
    """The messages binned by P(spam) on ``edges``; empty bins are kept (0 messages)."""
    y = np.asarray(is_spam, dtype=bool)
    which = np.clip(np.searchsorted(np.asarray(edges), probability, side="left") - 1, 0, len(edges) - 2)
    out = []
    for b in range(len(edges) - 1):
        inside = which == b
        n = int(inside.sum())
        out.append(ReliabilityBin(edges[b], edges[b + 1], n, int(y[inside].sum()), float(probability[inside].mean()) if n else float("nan")))
    return tuple(out)


def calibration(is_spam: BoolArray, log_odds: FloatArray) -> Calibration:
    """Every figure of ``Calibration`` for messages of known class and their log-odds."""
    y = np.asarray(is_spam, dtype=bool)
    odds = np.asarray(log_odds, dtype=np.float64)
    p = expit(odds)
    bins = reliability(y, p)
    n = max(y.size, 1)
    ece = sum(b.messages * abs(b.mean_probability - b.spam / b.messages) for b in bins if b.messages) / n
    low, high = p <= TAIL, p >= 1.0 - TAIL
    n_spam, n_ham = int(y.sum()), int((~y).sum())

    def pct(part: int, whole: int) -> float:
        return 100.0 * part / whole if whole else 0.0

    return Calibration(
        log_loss=log_loss(y, odds),
        brier=float(np.mean((p - y) ** 2)) if y.size else 0.0,
        ece=float(ece),
        low_tail=int(low.sum()),
        low_tail_spam_pct=pct(int(y[low].sum()), int(low.sum())),
        ham_in_low_tail_pct=pct(int((~y[low]).sum()), n_ham),
        high_tail=int(high.sum()),
        high_tail_ham_pct=pct(int((~y[high]).sum()), int(high.sum())),
        spam_in_high_tail_pct=pct(int(y[high].sum()), n_spam),
        bins=bins,
    )
