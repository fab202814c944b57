"""Measuring the filter: ranking and error rates from labelled runs.

Scores are ranked by log-odds, never by the probability (which ties at 1.0
for most spam). ROC area follows the TREC spam track (Cormack & Lynam):
1-ROCA% = 100 * (1 - AUC), with tied scores counting half.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from scipy.stats import rankdata

from spamfilter.answers import Refusal, TrainSummary, Verdict
from spamfilter.config import ONLINE_TRAIN_MODE, TUNE_MARGIN, Config, TrainMode
from spamfilter.errors import EvaluationError
from spamfilter.filter import Filter
from spamfilter.mail import MailItem
from spamfilter.nb.calibration import Calibration, calibration, log_loss, score_log_odds
from spamfilter.verdicts import Decision

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


def roc_area(is_spam: BoolArray, score: FloatArray) -> float:
    """P(score of a random spam > score of a random ham), ties counting 1/2.

    Mann-Whitney form: (sum of spam ranks - n_s (n_s + 1) / 2) / (n_s n_h),
    with average ranks for ties. Needs at least one message of each class.
    """
    is_spam = np.asarray(is_spam, dtype=bool)
    n_spam = int(is_spam.sum())
    n_ham = is_spam.size - n_spam
    if n_spam == 0 or n_ham == 0:
        raise ValueError("ROC area needs at least one spam and one ham")
    ranks = rankdata(np.asarray(score, dtype=np.float64))
    return float((ranks[is_spam].sum() - n_spam * (n_spam + 1) / 2) / (n_spam * n_ham))


@dataclass(frozen=True, slots=True)
class ErrorRates:
    """Percentages at the filter's verdicts.

    ham_as_spam: % of ham given the verdict spam (false positives).
    spam_as_ham: % of spam given the verdict ham (false negatives).
    ham_unsure, spam_unsure: % of each class given the verdict unsure.
    accuracy: % of all messages whose verdict is their true class.
    """

    ham_as_spam: float
    spam_as_ham: float
    ham_unsure: float
    spam_unsure: float
    accuracy: float


def error_rates(is_spam: BoolArray, verdicts: Sequence[str]) -> ErrorRates:
    """Error and unsure rates of verdicts ("spam" / "ham" / "unsure") against the truth."""
    is_spam = np.asarray(is_spam, dtype=bool)
    v = np.asarray(verdicts)
    ham, spam = ~is_spam, is_spam

    def pct(mask: BoolArray, within: BoolArray) -> float:
        n = int(within.sum())
        return 100.0 * float((mask & within).sum()) / n if n else 0.0

    said_spam, said_ham, said_unsure = (v == Decision.SPAM.value), (v == Decision.HAM.value), (v == Decision.UNSURE.value)
    correct = (said_spam & spam) | (said_ham & ham)
    return ErrorRates(
        ham_as_spam=pct(said_spam, ham),
        spam_as_ham=pct(said_ham, spam),
        ham_unsure=pct(said_unsure, ham),
        spam_unsure=pct(said_unsure, spam),
        accuracy=100.0 * float(correct.mean()) if v.size else 0.0,
    )


def lam_pct(ham_errors: int, n_ham: int, spam_errors: int, n_spam: int) -> float:
    """TREC's logistic average misclassification, in percent:
    lam = logit^-1((logit(hm) + logit(sm)) / 2), with each rate smoothed as
    (errors + 0.5) / (n + 1) so that a perfect class does not send it to 0."""

    def logit(errors: int, n: int) -> float:
        q = (errors + 0.5) / (n + 1)
        return math.log(q / (1 - q))

    z = (logit(ham_errors, n_ham) + logit(spam_errors, n_spam)) / 2
    return 100.0 / (1 + math.exp(-z))


def sm_at_hm(is_spam: BoolArray, score: FloatArray, hm_pct: float = 0.1) -> float:
    """Spam misclassification (%) at the strictest threshold that misfiles at
    most ``hm_pct`` percent of ham (spam needs a score above the threshold).

    With h ham, the threshold is the score of the (k+1)-th highest ham,
    k = floor(h * hm_pct / 100): at most k ham score above it. Messages
    tied at that score are read along the ROC curve's tie segment, as
    1-ROCA counts a tie half: of the e ham tied there, a of them ranked
    above all, k - a may be misfiled, so the same share (k - a) / e of the
    spam tied with them passes as spam. (A filter that gives many messages
    one score, as bogofilter's spamicity of 1.0 does, was charged every
    tied spam as let through: 100%.)
    """
    is_spam = np.asarray(is_spam, dtype=bool)
    score = np.asarray(score, dtype=np.float64)
    ham = np.sort(score[~is_spam])[::-1]
    spam = score[is_spam]
    if ham.size == 0 or spam.size == 0:
        raise ValueError("needs at least one spam and one ham")
    k = min(int(math.floor(ham.size * hm_pct / 100.0)), ham.size - 1)
    threshold = ham[k]
    above, tied = int((ham > threshold).sum()), int((ham == threshold).sum())
    passed_share = (k - above) / tied
    missed = float((spam < threshold).sum()) + (1.0 - passed_share) * float((spam == threshold).sum())
    return 100.0 * missed / spam.size


#: Messages per window of ``windowed_roca`` on a long stream (TREC reports
#: drift per 10,000 messages).
WINDOW = 10_000


def default_window(n: int) -> int:
    """Messages per window for a stream of n judged messages: ``WINDOW`` once
    the stream holds at least two such windows, else a fifth of the stream
    (rounded up), so a short stream still shows five points of drift."""
    if n >= 2 * WINDOW:
        return WINDOW
    return max(1, math.ceil(n / 5))


@dataclass(frozen=True, slots=True)
class WindowRoca:
    """1-ROCA% of the judged messages ``start`` (0-based, inclusive) to
    ``end`` (exclusive) of a run, in stream order; ``one_minus_roca`` is
    None when the window holds only one class (the area is undefined)."""

    start: int
    end: int
    spam: int
    ham: int
    one_minus_roca: float | None


def windowed_roca(is_spam: BoolArray, score: FloatArray, window: int) -> list[WindowRoca]:
    """1-ROCA% per consecutive run of ``window`` messages (the last one
    shorter), ranked within the window only: how well the filter ranks the
    mail of that stretch of the stream, so drift over a long run shows."""
    if window < 1:
        raise ValueError("a window holds at least one message")
    is_spam = np.asarray(is_spam, dtype=bool)
    score = np.asarray(score, dtype=np.float64)
    out: list[WindowRoca] = []
    for start in range(0, is_spam.size, window):
        y, s = is_spam[start : start + window], score[start : start + window]
        n_spam = int(y.sum())
        both = 0 < n_spam < y.size
        out.append(WindowRoca(start, start + y.size, n_spam, y.size - n_spam, 100.0 * (1.0 - roc_area(y, s)) if both else None))
    return out


@dataclass(frozen=True, slots=True)
class EvalReport:
    """The summary of an evaluation run (percentages are 0-100).

    one_minus_roca: 100 (1 - ROC area), ranked by log-odds, ties count half.
    sm_at_hm01: spam misclassification at 0.1% ham misclassification.
    hm, sm, lam: ham / spam misclassification and their logistic average at
        the two-way Bayes threshold of the loss matrix (no unsure verdict).
    rates: the three-way verdicts (spam / unsure / ham) against the truth.
    windows: 1-ROCA% per window of the judged messages in stream order
        (``windowed_roca``), so that drift over a long stream shows.
    calibration: log-loss, Brier score, the P(spam) tails and the
        reliability table of the judged messages' scores, the calibrated
        P(spam) (``spamfilter.nb.calibration``).
    raw_log_loss: the log-loss of the model's own log-odds, uncalibrated.
    """

    protocol: str
    messages: int
    spam: int
    ham: int
    refused: int
    trained: int
    one_minus_roca: float
    sm_at_hm01: float
    hm: float
    sm: float
    lam: float
    rates: ErrorRates
    classify_per_second: float
    train_per_second: float
    two_way_threshold: float
    windows: tuple[WindowRoca, ...] = ()
    #: online: which messages were trained, in words ("" for cross-validation)
    learned: str = ""
    calibration: Calibration | None = None
    raw_log_loss: float = float("nan")
    #: the messages that did not read as mail, each with why (``refused``
    #: counts those of the judged mail; with ``--protocol split`` these also
    #: hold the training head's)
    unreadable: tuple[Refusal, ...] = ()


@dataclass(frozen=True, slots=True)
class Scored:
    """One judged message of an evaluation."""

    source: str
    is_spam: bool
    score: float
    log_odds: float
    verdict: Decision


def summarise(
    protocol: str,
    scored: list[Scored],
    *,
    unreadable: Sequence[Refusal],
    trained: int,
    two_way_threshold: float,
    classify_seconds: float,
    train_seconds: float,
    window: int | None = None,
) -> EvalReport:
    """Metrics of a finished run; ``unreadable`` the judged messages that
    did not read as mail (counted in ``messages`` and ``refused``),
    ``two_way_threshold`` is in log-odds, ``window`` the messages per window
    of the windowed 1-ROCA (default: ``default_window`` of the judged
    messages).

    Raises ``EvaluationError`` unless the judged messages hold both spam and
    ham: the ROC area, sm at 0.1% hm and lam are undefined for one class, and
    a rate over a class with no member would be reported as a perfect 0.
    """
    y = np.array([s.is_spam for s in scored], dtype=bool)
    odds = np.array([s.log_odds for s in scored], dtype=np.float64)
    _need_both_classes(int(y.sum()), int((~y).sum()))
    ham_errors = int((odds[~y] > two_way_threshold).sum())
    spam_errors = int((odds[y] <= two_way_threshold).sum())
    n_ham, n_spam = int((~y).sum()), int(y.sum())
    hm = 100.0 * ham_errors / n_ham if n_ham else 0.0
    sm = 100.0 * spam_errors / n_spam if n_spam else 0.0
    return EvalReport(
        protocol=protocol,
        messages=len(scored) + len(unreadable),
        spam=int(y.sum()),
        ham=int((~y).sum()),
        refused=len(unreadable),
        trained=trained,
        one_minus_roca=100.0 * (1.0 - roc_area(y, odds)),
        sm_at_hm01=sm_at_hm(y, odds, 0.1),
        hm=hm,
        sm=sm,
        lam=lam_pct(ham_errors, n_ham, spam_errors, n_spam),
        rates=error_rates(y, [s.verdict for s in scored]),
        classify_per_second=len(scored) / classify_seconds if classify_seconds > 0 else float("nan"),
        train_per_second=trained / train_seconds if train_seconds > 0 else float("nan"),
        two_way_threshold=two_way_threshold,
        windows=tuple(windowed_roca(y, odds, window or default_window(len(scored)))),
        calibration=calibration(y, score_log_odds(np.array([s.score for s in scored], dtype=np.float64))),
        raw_log_loss=log_loss(y, odds),
        unreadable=tuple(unreadable),
    )


def _need_both_classes(n_spam: int, n_ham: int, what: str = "the stream has", hint: str = "") -> None:
    if not (n_spam and n_ham):
        raise EvaluationError(f"{what} {n_spam} spam and {n_ham} ham that could be read: measuring a filter needs at least one of each{hint}")


def fresh_filter(config: Config, url: str | None = None, *, jobs: int = 1) -> Filter:
    """A filter on ``url``, or on a new in-memory database: an evaluation
    never touches the user's database unless it is named explicitly."""
    return Filter.open(config, url or "sqlite://", jobs=jobs)


def run_online(
    config: Config,
    labelled: Iterable[tuple[bool, MailItem]],
    *,
    train_mode: TrainMode = ONLINE_TRAIN_MODE,
    margin: float = TUNE_MARGIN,
    url: str | None = None,
    jobs: int = 1,
    window: int | None = None,
) -> tuple[EvalReport, list[Scored]]:
    """Walk the stream in order: classify each message, then train on its
    label; with ``jobs`` > 1 the next messages are read on other cores
    meanwhile (same results)."""
    scored: list[Scored] = []
    unreadable: list[Refusal] = []
    trained = 0
    classify_seconds = train_seconds = 0.0
    with fresh_filter(config, url, jobs=jobs) as f:
        two_way = f.two_way_threshold
        for step in f.learn_online(labelled, train_mode=train_mode, margin=margin):
            classify_seconds += step.classify_seconds
            train_seconds += step.train_seconds
            trained += step.trained
            if isinstance(step.result, Verdict):
                r = step.result
                scored.append(Scored(r.source, step.is_spam, r.score, r.log_odds, r.verdict))
            else:
                unreadable.append(step.result)
    report = summarise(
        "online", scored, unreadable=unreadable, trained=trained, two_way_threshold=two_way, classify_seconds=classify_seconds, train_seconds=train_seconds, window=window
    )
    return replace(report, learned=LEARNED[TrainMode(train_mode)].format(margin=margin)), scored


#: ``EvalReport.learned`` of an online run, per train mode.
LEARNED = {TrainMode.teft: "every message", TrainMode.toe: "errors: misfiled or unsure", TrainMode.tune: "errors and those scored right by less than {margin:g} nats"}


@dataclass(frozen=True, slots=True)
class _TrainedOnce:
    """A fresh model trained on some mail, then classifying other mail."""

    summary: TrainSummary
    verdicts: list[Verdict | Refusal]
    two_way: float
    train_seconds: float
    classify_seconds: float


def _train_then_classify(config: Config, train: Sequence[tuple[bool, MailItem]], test: Sequence[MailItem], jobs: int = 1, url: str | None = None) -> _TrainedOnce:
    """Train a fresh model (in memory, or in the database at ``url``) on
    ``train``, classify ``test``, and time both."""
    with fresh_filter(config, url, jobs=jobs) as f:
        started = time.perf_counter()
        summary = f.train(train)
        if summary.refused and not ((stats := f.stats()).spam_messages and stats.ham_messages):
            # Counted by label, the training mail held both classes; read,
            # it does not: say which messages could not be read, not only
            # "the model is not trained" (69).
            first = summary.refused[0]
            raise EvaluationError(
                f"the training mail read holds {summary.trained_spam} spam and {summary.trained_ham} ham, and a model needs both: "
                f"{len(summary.refused)} of it could not be read ({first.source}: {first.why})"
            )
        trained = time.perf_counter()
        verdicts = list(f.classify(test))
        return _TrainedOnce(summary, verdicts, f.two_way_threshold, trained - started, time.perf_counter() - trained)


def run_split(
    config: Config, labelled: Sequence[tuple[bool, MailItem]], *, head: int | None = None, jobs: int = 1, window: int | None = None, url: str | None = None
) -> tuple[EvalReport, list[Scored]]:
    """Train once, classify later: train a fresh model (in memory, or in the
    database at ``url``) on the first
    ``head`` messages of the stream (default: the first half) as
    ``spamfilter train`` does, then classify the rest without learning from
    them, as a model trained once is used on the mail that arrives after."""
    what = "the first half" if head is None else f"--head {head}"
    head = len(labelled) // 2 if head is None else head
    if not 0 < head < len(labelled):
        raise EvaluationError(f"{what} leaves nothing to train on or nothing to classify in a stream of {len(labelled)} messages")
    train, test = labelled[:head], labelled[head:]
    n_spam = sum(1 for s, _ in test if s)
    _need_both_classes(n_spam, len(test) - n_spam, f"the messages after the first {head}, the ones classified, hold", " (--head moves the split)")
    head_spam = sum(1 for s, _ in train if s)
    if not 0 < head_spam < len(train):
        raise EvaluationError(
            f"the first {head} messages, the ones trained on, hold {head_spam} spam and {len(train) - head_spam} ham: a model needs both (--head moves the split)"
        )
    run = _train_then_classify(config, train, [item for _, item in test], jobs, url)
    scored = [Scored(v.source, is_spam, v.score, v.log_odds, v.verdict) for (is_spam, _), v in zip(test, run.verdicts) if isinstance(v, Verdict)]
    test_unreadable = [v for v in run.verdicts if isinstance(v, Refusal)]
    report = summarise(
        f"split {head}",
        scored,
        unreadable=test_unreadable,
        trained=run.summary.trained_ham + run.summary.trained_spam,
        two_way_threshold=run.two_way,
        classify_seconds=run.classify_seconds,
        train_seconds=run.train_seconds,
        window=window,
    )
    # The training head's unreadable messages are named too, but not
    # counted among the mail the run judged.
    return replace(report, learned=f"the first {head} messages, then none", unreadable=(*run.summary.refused, *report.unreadable)), scored


def stratified_folds(is_spam: Sequence[bool], k: int, seed: int) -> list[int]:
    """Fold number (0..k-1) per message: each class shuffled with ``seed``
    and dealt round-robin, so every fold has the class ratio of the whole."""
    if k < 2:
        raise ValueError("cross-validation needs at least 2 folds")
    rng = np.random.default_rng(seed)
    folds = [0] * len(is_spam)
    for label in (False, True):
        members = [i for i, s in enumerate(is_spam) if bool(s) is label]
        for position, i in enumerate(rng.permutation(members).tolist()):
            folds[i] = position % k
    return folds


def run_cross_validation(
    config: Config, labelled: Sequence[tuple[bool, MailItem]], *, folds: int = 10, seed: int = 0, window: int | None = None
) -> tuple[EvalReport, list[Scored]]:
    """Stratified k-fold: train a fresh in-memory model on k-1 folds, classify
    the held-out fold, pool the held-out scores of all folds."""
    n_spam = sum(1 for s, _ in labelled if s)
    _need_both_classes(n_spam, len(labelled) - n_spam)
    if min(n_spam, len(labelled) - n_spam) < 2:
        raise EvaluationError(f"the stream has {n_spam} spam and {len(labelled) - n_spam} ham: cross-validation needs two of each, so that every fold trains on both")
    if folds > len(labelled):
        # Empty folds would each train the whole stream and score nothing.
        raise EvaluationError(f"{folds} folds of {len(labelled)} messages: at most one fold a message")
    assignment = stratified_folds([s for s, _ in labelled], folds, seed)
    results: dict[int, Scored] = {}
    unreadable: list[Refusal] = []
    trained = 0
    classify_seconds = train_seconds = 0.0
    two_way = 0.0
    for fold in range(folds):
        train = [pair for pair, f in zip(labelled, assignment) if f != fold]
        test = [(i, pair) for i, (pair, f) in enumerate(zip(labelled, assignment)) if f == fold]
        run = _train_then_classify(config, train, [item for _, (_, item) in test])
        two_way = run.two_way
        train_seconds += run.train_seconds
        classify_seconds += run.classify_seconds
        trained += run.summary.trained_ham + run.summary.trained_spam
        for (i, (is_spam, _)), v in zip(test, run.verdicts):
            if isinstance(v, Verdict):
                results[i] = Scored(v.source, is_spam, v.score, v.log_odds, v.verdict)
            else:
                unreadable.append(v)
    scored = [results[i] for i in sorted(results)]
    report = summarise(
        f"cv{folds}",
        scored,
        unreadable=unreadable,
        trained=trained,
        two_way_threshold=two_way,
        classify_seconds=classify_seconds,
        train_seconds=train_seconds,
        window=window,
    )
    return report, scored


# -- tuning -------------------------------------------------------------------
