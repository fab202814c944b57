"""Learning online: classify each message, then learn its true label (the
TREC spam-track protocol, and ``train --train-mode toe|tune``).

Each message is scored and, if the learning rule (``nb.learning``) wants
it, trained in one write transaction, so the verdict comes from exactly the
counts the training then updates. Every scored message goes into the
calibration record, but those the model holds already.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from spamfilter.analysis import Analysed
from spamfilter.answers import OnlineStep, Refusal, TrainSummary, Verdict
from spamfilter.config import TrainMode
from spamfilter.errors import NotTrainedError
from spamfilter.filter.training import Training
from spamfilter.nb.learning import wants_training
from spamfilter.retry import retrying
from spamfilter.verdicts import Decision, Label


def learn(training: Training, read: Iterable[tuple[Label, Analysed | Refusal]], train_mode: TrainMode, margin: float) -> Iterator[tuple[OnlineStep, TrainSummary]]:
    """Each message's step of an online run, with what its training did.

    Before the model has both classes a message gets score 0.5, log-odds 0
    and "unsure". Reading the next message overlaps with scoring and
    training this one when the messages are read on worker processes;
    classify_seconds is then the wall time from one step to the next
    verdict, waiting for the readers included.
    """
    scoring = training.scoring
    thresholds = scoring.thresholds
    started = time.perf_counter()
    for label, analysed in read:
        is_spam = label == Label.SPAM
        if isinstance(analysed, Refusal):
            yield OnlineStep(is_spam, analysed, False, time.perf_counter() - started, 0.0), TrainSummary()
            started = time.perf_counter()
            continue

        def step(label: Label = label, analysed: Analysed = analysed) -> tuple[Verdict, bool, TrainSummary, float]:
            # One write transaction for both steps (tried again while the
            # database is busy).
            with training.write_transaction() as tx:
                # A message the model holds already (trained before, or a
                # copy earlier in the stream) scores what it was taught,
                # not what a model that never saw it says: it goes into
                # neither the record nor the counts, so training the same
                # mail twice changes nothing.
                tx.adopt_digests({analysed.former: analysed.digest} if analysed.former is not None else {})
                known = tx.trained_labels([analysed.digest]).get(analysed.digest)
                entries: dict[str, tuple[int, float]] = {}
                try:
                    verdict = scoring.verdicts([analysed], tx)[0]
                    if known is None:
                        entries = dict(zip([analysed.digest], scoring.record(tx, [label], [verdict.log_odds])))
                    own = scoring.own_decision(verdict.log_odds)
                except NotTrainedError:
                    verdict = Verdict(analysed.source, analysed.digest, 0.5, 0.0, Decision.UNSURE)
                    own = Decision.UNSURE
                classified = time.perf_counter()
                if known is not None:
                    return verdict, False, TrainSummary(unchanged=1) if known == label else TrainSummary(conflicts=1), classified
                train = wants_training(train_mode, label, own, verdict.log_odds, thresholds.ham_max, thresholds.spam_min, margin)
                summary = training.train_batch(tx, [(label, analysed)], relabel=False, record=False, records=entries) if train else TrainSummary()
                return verdict, train, summary, classified

        verdict, train, summary, classified = retrying(step, training.write_deadline)
        yield OnlineStep(is_spam, verdict, train, classified - started, time.perf_counter() - classified), summary
        started = time.perf_counter()
