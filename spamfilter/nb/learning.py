"""Which messages of a labelled stream the filter learns from.

Given a stream of messages whose true labels it is told (the online
protocol of `spamfilter evaluate`, or `spamfilter train --train-mode` over
an index in arrival order), the filter scores each message with the model
as trained so far and then decides whether to train it:

    teft  every message (train on everything)
    toe   only its errors: misfiled, or called unsure (train on error)
    tune  its errors and the messages it scored right by less than a
          margin of log-odds beyond a decision bound (train on or near error)

Training on every message keeps piling up the counts of mail the model
already gets right, which makes its scores ever more extreme and lets the
old mail outweigh a new kind of mail. Online over the shared corpora, tune
with a margin of 12 nats ranked better than teft on 9 of 10 streams (all
corpora as one stream 0.157% -> 0.092% 1-ROCA; enron6 10% worse), training
a fifth to two thirds of the mail (docs/benchmarks.md, "Training on or
near errors, and forgetting").
"""

from __future__ import annotations

from spamfilter.config import TrainMode
from spamfilter.verdicts import Decision, Label


def wants_training(mode: TrainMode, label: Label, verdict: Decision, log_odds: float, ham_max: float, spam_min: float, margin: float) -> bool:
    """Whether a message of true class ``label``, just scored ``log_odds``
    with ``verdict`` against the decision bounds ``ham_max`` and
    ``spam_min``, is to be trained under ``mode``."""
    if mode is TrainMode.teft or verdict != label.decision:
        return True
    return mode is TrainMode.tune and min(abs(log_odds - ham_max), abs(log_odds - spam_min)) < margin
