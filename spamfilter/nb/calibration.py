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

from collections.abc import Sequence
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
#: How far (relatively) a probability may miss an edge and still count as
#: on it: the score's bound, logit 0.99, comes back from expit as
#: 0.010000000000000002, which a user reads as 0.01 and expects in the
#: "<= 0.01" tail.
_ON_EDGE = 1e-9


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
    which = np.clip(np.searchsorted(np.asarray(edges) * (1.0 + _ON_EDGE), probability, side="left") - 1, 0, len(edges) - 2)
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
    low, high = p <= TAIL * (1.0 + _ON_EDGE), p >= (1.0 - TAIL) * (1.0 - _ON_EDGE)
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


# -- the map from the model's log-odds to a calibrated P(spam) -------------
#
# The naive Bayes log-odds L rank mail well but are not probabilities: the
# tokens of a message are not independent, so L overstates the evidence
# (on later mail a message at L = 30 is not spam with odds of e^30 to 1).
# The filter keeps a history of how the messages it was told the class of
# had scored *before* it learned them (prequential scores: what the model
# said about mail it had not yet seen), per bin of L, and reads P(spam)
# off that history:
#
#     bin b of L (1 nat wide on [-30.5, 30.5], open beyond): decayed weights
#         S_b of spam and H_b of ham scored in it, each older message's
#         weight halved every HALF_LIFE messages recorded after it
#     P_b = (S_b + w p0_b) / (S_b + H_b + w)     a Beta prior of weight w
#     p0_b = expit(clip(centre_b, -B, B))        B = logit(0.99)
#     P   = the non-decreasing fit of the P_b (pool-adjacent-violators,
#           weighted by S_b + H_b + w), interpolated in logit between bins
#
# Where the history is thick, P is the share of spam seen at that score;
# where it is thin, the model's own probability, but never beyond
# [0.01, 0.99]: no message is put in a tail on the model's word alone. The
# map is monotone in L, so the ranking by L is unchanged and a cutoff on
# P is a cutoff on L. A message of the most confident bin, whose history
# holds n spam and no ham, gets P(ham) = 0.01 w / (n + w): bounded by what
# the history can show. With an empty history P is expit(clip(L, -B, B)) at
# the bins' centres, interpolated in logit between them (so up to 0.24 nats
# from it near |L| = B, where the clip bends).
#
# When ``train`` grows the model from n to N messages in one batch, every
# entry of the history, the batch's own included, is then scaled by n / N:
# an entry weighs in proportion to the size of the model that scored it,
# relative to the model now. Bulk training writes its whole history while
# the model grows from nothing, and a small early model errs more, and at
# other log-odds, than the model it grows into. Online learning (a message
# classified, then learned if it was an error or a near miss) records
# without this scaling: there the model grows slowly against the history's
# half-life, and scaling measured worse (docs/benchmarks.md, "The
# calibrated score").
#
# Every decay of the history also moves the owner's record clock, the sum
# of the logs of the decays applied so far. A trained message's entry is
# kept with its ledger row as its bin and log(weight) less the clock when it
# was recorded, so its weight now is exp(that + clock now): when ``mark``
# moves the message to the other class, or ``forget`` takes it out, what is
# left of its entry moves or goes with it (``moved_entries``).

#: Bin edges of the raw log-odds (nats); below the first and above the
#: last are two open bins.
MAP_EDGES = np.arange(-30.5, 31.0, 1.0)
#: Bins of the history: one more than the edges.
MAP_BINS = MAP_EDGES.size + 1
#: Messages after which a recorded score weighs half as much.
HALF_LIFE = 1000.0
#: Weight w of the prior in each bin, in messages.
PRIOR_WEIGHT = 2.0
#: The prior never leaves [expit(-B), expit(B)] = [0.01, 0.99].
PRIOR_BOUND = float(np.log(0.99 / 0.01))

_CENTRES = np.concatenate([[MAP_EDGES[0] - 0.5], (MAP_EDGES[:-1] + MAP_EDGES[1:]) / 2, [MAP_EDGES[-1] + 0.5]])


def score_bins(log_odds: FloatArray) -> npt.NDArray[np.int64]:
    """The history bin of each raw log-odds, 0 .. MAP_BINS - 1."""
    return np.searchsorted(MAP_EDGES, np.asarray(log_odds, dtype=np.float64)).astype(np.int64)


def recorded(log_odds: FloatArray, is_spam: BoolArray, half_life: float = HALF_LIFE, grown: float = 1.0) -> tuple[float, FloatArray]:
    """What recording these scores, in order, does to a history ``W``
    (shape (2, MAP_BINS), ham row 0, spam row 1): the new history is
    ``decay * W + added``, returned as (decay, added). ``grown`` is n / N
    when learning these messages grows the model from n to N messages
    (``train``; see the section comment): both parts are scaled by it."""
    odds = np.asarray(log_odds, dtype=np.float64)
    n = odds.size
    weight = entry_weights(n, half_life, grown)
    bins = score_bins(odds)
    y = np.asarray(is_spam, dtype=bool)
    added = np.zeros((2, MAP_BINS))
    np.add.at(added, (y.astype(np.int64), bins), weight)
    return grown * float(0.5 ** (n / half_life)), added


def entry_weights(n: int, half_life: float = HALF_LIFE, grown: float = 1.0) -> FloatArray:
    """Each of ``n`` messages' weight in the history right after
    ``recorded`` added them (the last one ``grown``, each earlier one
    halved every ``half_life`` messages)."""
    result: FloatArray = grown * 0.5 ** ((n - 1 - np.arange(n)) / half_life)
    return result


def moved_entries(history: FloatArray, clock: float, entries: Sequence[tuple[int, int, float, int | None]]) -> FloatArray:
    """What to add to ``history`` (shape (2, MAP_BINS)) to move or take out
    recorded entries: each (label, bin, log weight less the clock when
    recorded, new label or None to take it out). An entry takes no more
    from its bin than the bin holds (rounding in the decays)."""
    left = np.array(history, dtype=np.float64)
    change = np.zeros_like(left)
    for label, b, stored, to in entries:
        w = min(float(np.exp(min(stored + clock, 0.0))), float(left[label, b]))
        left[label, b] -= w
        change[label, b] -= w
        if to is not None:
            change[to, b] += w
    return change


def growth(before: int, learned: int) -> float:
    """n / N for a model of ``before`` messages that learns ``learned`` more
    (1 for a model that had none: its first batch is scored by nothing)."""
    return before / (before + learned) if before > 0 and learned > 0 else 1.0


def _non_decreasing(values: FloatArray, weights: FloatArray) -> FloatArray:
    """The weighted least-squares non-decreasing fit of ``values`` (pool adjacent violators)."""
    sums: list[float] = []
    mass: list[float] = []
    sizes: list[int] = []
    for v, w in zip(values.tolist(), weights.tolist()):
        sums.append(v * w)
        mass.append(w)
        sizes.append(1)
        while len(sums) > 1 and sums[-2] * mass[-1] > sums[-1] * mass[-2]:
            s, m, k = sums.pop(), mass.pop(), sizes.pop()
            sums[-1] += s
            mass[-1] += m
            sizes[-1] += k
    return np.repeat(np.array(sums) / np.array(mass), sizes)


class CalibrationMap:
    """P(spam) from the model's log-odds, read off a history of prequential
    scores (``weights``: (2, MAP_BINS), ham row 0, spam row 1; see the
    section comment above)."""

    def __init__(self, weights: FloatArray | None = None, prior_bound: float = PRIOR_BOUND) -> None:
        w = np.zeros((2, MAP_BINS)) if weights is None else np.asarray(weights, dtype=np.float64)
        if w.shape != (2, MAP_BINS):
            raise ValueError(f"a calibration history has shape (2, {MAP_BINS}), not {w.shape}")
        self.weights = w
        prior = expit(np.clip(_CENTRES, -prior_bound, prior_bound))
        mass = w.sum(axis=0) + PRIOR_WEIGHT
        p = _non_decreasing((w[1] + PRIOR_WEIGHT * prior) / mass, mass)
        #: The fitted logit of P(spam) at each bin's centre.
        self.bin_log_odds: FloatArray = np.log(p) - np.log1p(-p)

    def log_odds(self, log_odds: FloatArray) -> FloatArray:
        """The calibrated log-odds, logit P(spam), of each raw log-odds."""
        result: FloatArray = np.interp(np.asarray(log_odds, dtype=np.float64), _CENTRES, self.bin_log_odds)
        return result

    def raw_bound(self, calibrated: float) -> float:
        """The raw log-odds where the calibrated log-odds first exceed
        ``calibrated``: a cutoff on the score read back as one on the
        model's own log-odds (to draw it over them). The map is monotone
        and linear between bin centres, so the crossing is solved on the
        segment where it happens; beyond the centres it is flat, so a
        bound it never exceeds is +inf and one it always exceeds -inf."""
        values = self.bin_log_odds
        above = np.flatnonzero(values > calibrated)
        if above.size == 0:
            return float("inf")
        j = int(above[0])
        if j == 0:
            return float("-inf")
        x0, x1, y0, y1 = _CENTRES[j - 1], _CENTRES[j], values[j - 1], values[j]
        return float(x0 + (calibrated - y0) * (x1 - x0) / (y1 - y0))

    def probability(self, log_odds: FloatArray) -> FloatArray:
        """The calibrated P(spam) of each raw log-odds."""
        result: FloatArray = expit(self.log_odds(log_odds))
        return result


def calibrated_in_order(raw: FloatArray, is_spam: BoolArray, batch: int, half_life: float = HALF_LIFE, prior_bound: float = PRIOR_BOUND) -> FloatArray:
    """Calibrated log-odds of a labelled stream scored in order, ``batch``
    messages at a time, each batch read off the record of the batches
    before it (starting from an empty one), as ``train`` records them (one
    at a time, as an online run does), without ``grown``: the held-out mail
    ``tune`` reads this for is scored by models of about one size. What the
    filter would have shown of this stream. ``tune`` chooses its cutoffs on
    these, since the cutoffs it writes act on the score."""
    history = np.zeros((2, MAP_BINS))
    out = np.empty_like(np.asarray(raw, dtype=np.float64))
    for start in range(0, out.size, batch):
        part = slice(start, start + batch)
        out[part] = CalibrationMap(history, prior_bound).log_odds(raw[part])
        decay, added = recorded(raw[part], is_spam[part], half_life)
        history = decay * history + added
    return out


def score_log_odds(probability: FloatArray) -> FloatArray:
    """logit P(spam) of scores, finite even for a score of exactly 0 or 1
    (the uncalibrated 0.5 of an untrained model gives 0): the log-odds the
    calibration figures of scored mail are computed from."""
    p = np.clip(np.asarray(probability, dtype=np.float64), 1e-300, 1.0 - 1e-16)
    result: FloatArray = np.log(p) - np.log1p(-p)
    return result
