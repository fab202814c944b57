"""Which messages of a labelled stream are trained (``spamfilter.nb.learning``)."""

from __future__ import annotations

import pytest

from spamfilter.config import TrainMode
from spamfilter.nb.learning import wants_training
from spamfilter.verdicts import Decision, Label

HAM_MAX, SPAM_MIN = -1.39, 3.89


def rule(mode: TrainMode, label: Label, log_odds: float, margin: float = 2.0) -> bool:
    verdict = Decision.SPAM if log_odds > SPAM_MIN else Decision.HAM if log_odds <= HAM_MAX else Decision.UNSURE
    return wants_training(mode, label, verdict, log_odds, HAM_MAX, SPAM_MIN, margin)


@pytest.mark.parametrize(
    ("label", "log_odds", "teft", "toe", "tune"),
    [
        (Label.SPAM, 40.0, True, False, False),  # confidently right
        (Label.SPAM, 5.0, True, False, True),  # right, 1.11 nats above the spam bound
        (Label.SPAM, 5.9, True, False, False),  # right, 2.01 nats above it: beyond the margin
        (Label.SPAM, 1.0, True, True, True),  # unsure: an error
        (Label.SPAM, -30.0, True, True, True),  # misfiled
        (Label.HAM, -3.0, True, False, True),  # right, 1.61 nats below the ham bound
        (Label.HAM, -3.5, True, False, False),  # 2.11 nats below it
        (Label.HAM, 4.0, True, True, True),  # misfiled as spam
        (Label.HAM, -1.39, True, False, True),  # on the bound: ham, with no margin to spare
    ],
)
def test_each_mode_trains_the_messages_it_names(label: Label, log_odds: float, teft: bool, toe: bool, tune: bool) -> None:
    assert [rule(m, label, log_odds) for m in (TrainMode.teft, TrainMode.toe, TrainMode.tune)] == [teft, toe, tune]


def test_a_zero_margin_trains_only_errors_and_a_wide_one_everything_near() -> None:
    assert not rule(TrainMode.tune, Label.SPAM, 3.9, margin=0.0)
    assert rule(TrainMode.tune, Label.SPAM, 15.0, margin=12.0)
    assert not rule(TrainMode.tune, Label.SPAM, 16.0, margin=12.0)
