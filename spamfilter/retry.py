"""Transactions tried again while the database is busy or a race was lost."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from spamfilter.errors import StoreBusyError, StoreConflict

T = TypeVar("T")

log = logging.getLogger(__name__)


#: Pauses between attempts: full jitter, uniform in [0, min(cap, first * 2**n)],
#: so waiting processes spread out instead of retrying in step.
_FIRST_PAUSE = 0.05
_MAX_PAUSE = 5.0
#: A lost race is run again at least this often, even with no deadline.
_CONFLICT_ATTEMPTS = 8


def retrying(
    step: Callable[[], T], deadline: float, *, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None
) -> T:
    """Run one transaction, and again, after a pause that doubles each time
    (with jitter), while the database is busy (``StoreBusyError``: a lock held
    past the busy timeout) or the transaction lost a race with another
    process (``StoreConflict``), until ``deadline`` seconds have passed; then
    the last error is raised. A lost race is retried at least
    ``_CONFLICT_ATTEMPTS`` times. Each retry is logged (warning for busy,
    info for a lost race, which is routine)."""
    uniform = (rng or random).uniform
    give_up = clock() + deadline
    attempt = 0
    while True:
        try:
            return step()
        except StoreBusyError as exc:
            pause = uniform(0.0, min(_MAX_PAUSE, _FIRST_PAUSE * 2**attempt))
            conflict = isinstance(exc, StoreConflict)
            attempt += 1
            if clock() + pause > give_up and not (conflict and attempt < _CONFLICT_ATTEMPTS):
                raise
            level = logging.INFO if conflict else logging.WARNING
            log.log(level, "%s; trying again in %.2f s (attempt %d)", exc, pause, attempt + 1)
            sleep(pause)
