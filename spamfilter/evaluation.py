"""Measuring the filter: ranking and error rates from labelled runs.

Scores are ranked by log-odds, never by the probability (which ties at 1.0
for most spam). ROC area follows the TREC spam track (Cormack & Lynam):
1-ROCA% = 100 * (1 - AUC), with tied scores counting half.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
from scipy.special import log_expit
from scipy.stats import rankdata

from spamfilter import model as nb
from spamfilter.analysis import Analysed, Analyser, analyse
from spamfilter.config import Config
from spamfilter.counts import ClassCounts, Decision
from spamfilter.errors import EvaluationError
from spamfilter.mail import MailItem
from spamfilter.service import Filter, TrainMode, Verdict
from spamfilter.vectorizer import Vocabulary, count_matrix

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
    k = floor(h * hm_pct / 100): at most k ham score above it.
    """
    is_spam = np.asarray(is_spam, dtype=bool)
    score = np.asarray(score, dtype=np.float64)
    ham = np.sort(score[~is_spam])[::-1]
    spam = score[is_spam]
    if ham.size == 0 or spam.size == 0:
        raise ValueError("needs at least one spam and one ham")
    k = int(math.floor(ham.size * hm_pct / 100.0))
    threshold = ham[min(k, ham.size - 1)]
    return 100.0 * float((spam <= threshold).mean())


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
    refused: int,
    trained: int,
    two_way_threshold: float,
    classify_seconds: float,
    train_seconds: float,
    window: int | None = None,
) -> EvalReport:
    """Metrics of a finished run; ``two_way_threshold`` is in log-odds,
    ``window`` the messages per window of the windowed 1-ROCA (default:
    ``default_window`` of the judged messages).

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
        messages=len(scored) + refused,
        spam=int(y.sum()),
        ham=int((~y).sum()),
        refused=refused,
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
    )


def _need_both_classes(n_spam: int, n_ham: int) -> None:
    if not (n_spam and n_ham):
        raise EvaluationError(
            f"the stream has {n_spam} spam and {n_ham} ham that could be read: measuring a filter needs at least one of each"
        )


def fresh_filter(config: Config, url: str | None = None, *, jobs: int = 1) -> Filter:
    """A filter on ``url``, or on a new in-memory database: an evaluation
    never touches the user's database unless it is named explicitly."""
    return Filter.open(config, url or "sqlite://", jobs=jobs)


def run_online(
    config: Config,
    labelled: Iterable[tuple[bool, MailItem]],
    *,
    train_mode: TrainMode = TrainMode.teft,
    url: str | None = None,
    jobs: int = 1,
    window: int | None = None,
) -> tuple[EvalReport, list[Scored]]:
    """Walk the stream in order: classify each message, then train on its
    label; with ``jobs`` > 1 the next messages are read on other cores
    meanwhile (same results)."""
    scored: list[Scored] = []
    refused = trained = 0
    classify_seconds = train_seconds = 0.0
    with fresh_filter(config, url, jobs=jobs) as f:
        two_way = f.two_way_threshold
        for step in f.learn_online(labelled, train_mode=train_mode):
            classify_seconds += step.classify_seconds
            train_seconds += step.train_seconds
            trained += step.trained
            if isinstance(step.result, Verdict):
                r = step.result
                scored.append(Scored(r.source, step.is_spam, r.score, r.log_odds, r.verdict))
            else:
                refused += 1
    report = summarise(
        "online", scored, refused=refused, trained=trained, two_way_threshold=two_way,
        classify_seconds=classify_seconds, train_seconds=train_seconds, window=window,
    )
    return report, scored


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
    config: Config,
    labelled: Sequence[tuple[bool, MailItem]],
    *,
    folds: int = 10,
    seed: int = 0,
    window: int | None = None,
) -> tuple[EvalReport, list[Scored]]:
    """Stratified k-fold: train a fresh in-memory model on k-1 folds, classify
    the held-out fold, pool the held-out scores of all folds."""
    n_spam = sum(1 for s, _ in labelled if s)
    _need_both_classes(n_spam, len(labelled) - n_spam)
    assignment = stratified_folds([s for s, _ in labelled], folds, seed)
    results: dict[int, Scored] = {}
    refused = trained = 0
    classify_seconds = train_seconds = 0.0
    two_way = 0.0
    for fold in range(folds):
        train = [pair for pair, f in zip(labelled, assignment) if f != fold]
        test = [(i, pair) for i, (pair, f) in enumerate(zip(labelled, assignment)) if f == fold]
        with fresh_filter(config) as f:
            two_way = f.two_way_threshold
            started = time.perf_counter()
            summary = f.train(train)
            train_seconds += time.perf_counter() - started
            trained += summary.trained_ham + summary.trained_spam
            started = time.perf_counter()
            verdicts = list(f.classify(item for _, (_, item) in test))
            classify_seconds += time.perf_counter() - started
        for (i, (is_spam, _)), v in zip(test, verdicts):
            if isinstance(v, Verdict):
                results[i] = Scored(v.source, is_spam, v.score, v.log_odds, v.verdict)
            else:
                refused += 1
    scored = [results[i] for i in sorted(results)]
    report = summarise(
        f"cv{folds}", scored, refused=refused, trained=trained, two_way_threshold=two_way,
        classify_seconds=classify_seconds, train_seconds=train_seconds, window=window,
    )
    return report, scored


# -- tuning -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cutoffs:
    """Verdict bounds in log-odds (ham if L <= ham_max, spam if L > spam_min)
    and the empirical loss they give on the validation messages."""

    ham_max: float
    spam_min: float
    loss: float

    def probabilities(self) -> tuple[float, float]:
        """The bounds as the config's (ham_cutoff, spam_cutoff): P(spam) at
        each, the inverse of `model.thresholds_from_cutoffs`."""
        ham_cutoff, spam_cutoff = nb.spam_probability(np.array([self.ham_max, self.spam_min]))
        return float(ham_cutoff), float(spam_cutoff)


def best_cutoffs(
    is_spam: BoolArray,
    odds: FloatArray,
    *,
    cost_ham_as_spam: float,
    cost_spam_as_ham: float,
    cost_unsure: float,
    limit: float = 34.0,
    spam_min_floor: float = -math.inf,
    ham_max_ceiling: float = math.inf,
) -> Cutoffs:
    """The two cutoffs minimising the total loss on labelled scores:

        loss = c_hs * #(ham above spam_min) + c_sh * #(spam at or below ham_max)
             + c_u * #(messages between the two)

    Over the n+1 cuts of the sorted scores, with i1 <= i2 messages below the
    ham and spam cuts, loss = [c_sh S(i1) - c_u i1] + [c_u i2 + c_hs (H - H(i2))]
    (S, H: spam and ham among the lowest i), so a running minimum of the first
    bracket finds the optimum in O(n log n). Cuts fall midway between distinct
    scores and are clamped to +-``limit`` so they stay finite probabilities.
    With cost_unsure = 0 the unsure verdict is not used.

    ``spam_min_floor`` and ``ham_max_ceiling`` bound the cutoffs (``tune``
    passes the loss matrix's own thresholds, so a small sample can neither
    lower the spam cutoff below them nor close the unsure band): a cut is
    allowed where the bound can be placed between the same two scores, and
    the bound is then used as the cutoff.
    """
    order = np.argsort(odds, kind="stable")
    s = np.asarray(odds, dtype=np.float64)[order]
    y = np.asarray(is_spam, dtype=bool)[order]
    n = s.size
    spam_below = np.concatenate([[0], np.cumsum(y)])
    ham_below = np.concatenate([[0], np.cumsum(~y)])
    # a cut at i is possible where it separates distinct scores
    valid = np.ones(n + 1, dtype=bool)
    valid[1:n] = s[1:] > s[:-1]
    cut = np.empty(n + 1)
    cut[0] = s[0] - 1.0 if n else -limit
    cut[n] = s[-1] if n else limit
    cut[1:n] = (s[:-1] + s[1:]) / 2
    cut = np.clip(cut, -limit, limit)
    # score just below and just above each cut (the messages it separates)
    below = np.concatenate([[-np.inf], s])
    above = np.concatenate([s, [np.inf]])
    ham_ok = valid & (below <= ham_max_ceiling)
    spam_ok = valid & (above > spam_min_floor)
    c_u = cost_unsure if cost_unsure > 0 else float("inf")
    first = np.where(ham_ok, cost_spam_as_ham * spam_below - (c_u if np.isfinite(c_u) else 0.0) * np.arange(n + 1), np.inf)
    run_min, run_arg = float("inf"), 0
    n_ham = int(ham_below[-1])
    options: list[tuple[float, int, int]] = []
    for i2 in range(n + 1):
        if first[i2] < run_min:
            run_min, run_arg = float(first[i2]), i2
        if not spam_ok[i2]:
            continue
        if np.isfinite(c_u):
            if not np.isfinite(run_min):
                continue
            options.append((float(run_min + c_u * i2 + cost_ham_as_spam * (n_ham - ham_below[i2])), run_arg, i2))
        elif ham_ok[i2]:
            options.append((float(cost_spam_as_ham * spam_below[i2] + cost_ham_as_spam * (n_ham - ham_below[i2])), i2, i2))
    if not options:
        raise ValueError("the cutoff bounds leave no possible cut")
    loss = min(o[0] for o in options)
    # Several cuts may tie (a gap between the classes): take the middle one,
    # the widest margin on both sides, not the first.
    tied = [o for o in options if o[0] <= loss + 1e-9]
    _, i1, i2 = tied[len(tied) // 2]
    ham_max = min(float(cut[i1]), ham_max_ceiling)
    spam_min = max(float(cut[i2]), spam_min_floor)
    return Cutoffs(ham_max=ham_max, spam_min=spam_min, loss=loss)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One setting tried by ``tune`` and how it did on the validation messages."""

    event_model: str
    alpha: float
    tempering: float
    min_evidence: float
    bigrams: bool
    one_minus_roca: float
    cutoffs: Cutoffs
    loss_per_message: float
    log_loss: float
    hm: float
    sm: float
    unsure: float
    costly: int = 0
    held_out: int = 0
    max_tokens: int = 0


#: The fewest messages the best setting must misfile or call unsure on the
#: held-out tail before ``tune`` may write its choice. Candidates differ only
#: in what they cost on such messages; with none (600 messages of easy mail
#: held out 120, and every candidate scored 0 loss) the ranking is decided
#: by nothing, and the cutoffs by a gap that new mail will not respect.
MIN_COSTLY = 10


def require_separation(best: Candidate, holdout: float) -> None:
    """Raise ``EvaluationError`` unless the held-out tail gave the best setting
    at least `MIN_COSTLY` misfiled or unsure messages, saying how much mail
    would: the tail's rate of such messages (at most 1 in the tail when there
    were none) scaled up to MIN_COSTLY."""
    if best.costly >= MIN_COSTLY:
        return
    rate = max(best.costly, 1) / max(best.held_out, 1)
    tail = math.ceil(MIN_COSTLY / rate)
    raise EvaluationError(
        f"the held-out tail ({best.held_out} messages) is too small to tell the settings apart: the best one "
        f"misfiled or called unsure {best.costly} of them, and a choice needs at least {MIN_COSTLY}; "
        f"hold out at least about {tail} messages (an index of about {math.ceil(tail / holdout)} at --holdout {holdout:g}); "
        "nothing written"
    )


def tune(
    config: Config,
    labelled: Sequence[tuple[bool, MailItem]],
    *,
    event_models: Sequence[str],
    alphas: Sequence[float],
    temperings: Sequence[float],
    min_evidences: Sequence[float] = (0.0,),
    bigram_options: Sequence[bool] | None = None,
    holdout: float = 0.2,
    max_tokens_options: Sequence[int] | None = None,
    jobs: int = 1,
    reading: Callable[[Iterable[tuple[bool, MailItem]]], Iterable[tuple[bool, MailItem]]] | None = None,
) -> list[Candidate]:
    """``tune_settings`` for each tokenizer setting in ``bigram_options``
    (default: the configured one), all candidates ranked together; the mail
    is read on ``jobs`` processes, through ``reading`` (e.g. a progress
    bar) each time."""
    results: list[Candidate] = []
    for bigrams in bigram_options if bigram_options is not None else (config.tokenizer.bigrams,):
        variant = replace(config, tokenizer=replace(config.tokenizer, bigrams=bigrams))
        results += tune_settings(
            variant, labelled, event_models=event_models, alphas=alphas,
            temperings=temperings, min_evidences=min_evidences, holdout=holdout,
            max_tokens_options=max_tokens_options, jobs=jobs, reading=reading,
        )
    results.sort(key=lambda c: _rank(c, config))
    return results


def _rank(c: Candidate, config: Config) -> tuple[float, int, float, float]:
    """Lowest loss first; at equal loss the candidate that changes fewest of
    the configured settings (a tie is no reason to move off the defaults),
    then lowest 1-ROCA, then lowest log-loss."""
    m = config.model
    changes = sum(
        (
            c.event_model != m.event_model,
            c.alpha != m.alpha,
            c.tempering != m.tempering,
            c.min_evidence != m.min_evidence,
            c.max_tokens != m.max_tokens,
            c.bigrams != config.tokenizer.bigrams,
        )
    )
    return (round(c.loss_per_message, 12), changes, round(c.one_minus_roca, 9), c.log_loss)


def tune_settings(
    config: Config,
    labelled: Sequence[tuple[bool, MailItem]],
    *,
    event_models: Sequence[str],
    alphas: Sequence[float],
    temperings: Sequence[float],
    min_evidences: Sequence[float] = (0.0,),
    holdout: float = 0.2,
    max_tokens_options: Sequence[int] | None = None,
    jobs: int = 1,
    reading: Callable[[Iterable[tuple[bool, MailItem]]], Iterable[tuple[bool, MailItem]]] | None = None,
) -> list[Candidate]:
    """Try every (event model, alpha, tempering, min_evidence, max_tokens
    (default: the configured one); the configured token_cap throughout):
    train on the head of the
    stream, score its last ``holdout`` share (later mail, as a filter meets
    it), choose each setting's cutoffs by ``best_cutoffs`` (never a spam
    cutoff below the loss matrix's, never a ham cutoff above it, so the
    unsure band stays) and report the loss per message. Returns the
    candidates, best first: lowest loss, then fewest changes to the
    configured settings, then lowest 1-ROCA, then lowest log-loss (the mean
    of -log P(true class), which prefers calibrated probabilities when the
    classes separate perfectly).

    The messages are parsed and tokenized once; each setting is then pure
    model arithmetic (``model.estimate`` and ``joint_log_likelihood``, the
    functions the filter itself scores with) over one sparse matrix.
    """
    stream = reading(labelled) if reading is not None else labelled
    labels_in: list[bool] = []

    def items() -> Iterator[MailItem]:
        for is_spam, item in stream:
            labels_in.append(is_spam)
            yield item

    docs: list[dict[str, int]] = []
    labels: list[bool] = []
    analyser = Analyser(config.tokenizer, config.tokenizer.max_bytes)
    for i, result in enumerate(analyse(analyser, items(), jobs)):
        if isinstance(result, Analysed):
            docs.append(result.counts)
            labels.append(labels_in[i])
    y = np.array(labels, dtype=bool)
    n_valid = max(1, int(round(len(docs) * holdout)))
    split = len(docs) - n_valid
    train_y, valid_y = y[:split], y[split:]
    if not (train_y.any() and (~train_y).any() and valid_y.any() and (~valid_y).any()):
        raise EvaluationError("to tune, both the training head and the held-out tail of the index need spam and ham")
    vocabulary = Vocabulary(t for d in docs[:split] for t in d)
    terms = count_matrix(docs[:split], vocabulary)
    binary = count_matrix(docs[:split], vocabulary, binary=True)
    doc_count = np.vstack([np.asarray(binary[~train_y].sum(0)).ravel(), np.asarray(binary[train_y].sum(0)).ravel()]).astype(np.int64)
    term_count = np.vstack([np.asarray(terms[~train_y].sum(0)).ravel(), np.asarray(terms[train_y].sum(0)).ravel()]).astype(np.int64)
    histogram = []
    for c in (0, 1):
        k, n = np.unique(doc_count[c], return_counts=True)
        histogram.append(np.stack([k, n], axis=1).astype(np.int64))
    stats = nb.Totals(
        ClassCounts(
            messages=np.array([int((~train_y).sum()), int(train_y.sum())], dtype=np.int64),
            terms=term_count.sum(axis=1),
            binary_terms=doc_count.sum(axis=1),
        ),
        vocabulary_size=len(vocabulary),
        histogram=(histogram[0], histogram[1]),
    )
    counts = nb.TokenCounts(doc_count=doc_count, term_count=term_count)
    valid_terms = count_matrix(docs[split:], vocabulary)
    valid_binary = count_matrix(docs[split:], vocabulary, binary=True)
    d = config.decision
    bounds = nb.thresholds_from_loss(d.cost_ham_as_spam, d.cost_spam_as_ham, d.cost_unsure)
    results: list[Candidate] = []
    for event_model in event_models:
        for alpha in alphas:
            params = nb.estimate(event_model, counts, stats, alpha)
            X = valid_binary if params.binary else valid_terms
            keeps = max_tokens_options if max_tokens_options is not None else (config.model.max_tokens,)
            for tempering, min_evidence, keep in ((t, e, k) for t in temperings for e in min_evidences for k in keeps):
                odds = nb.log_odds(nb.joint_log_likelihood(X, params, tempering, min_evidence, keep, config.model.token_cap))
                cut = best_cutoffs(
                    valid_y, odds, cost_ham_as_spam=d.cost_ham_as_spam, cost_spam_as_ham=d.cost_spam_as_ham,
                    cost_unsure=d.cost_unsure, spam_min_floor=bounds.spam_min, ham_max_ceiling=bounds.ham_max,
                )
                verdict_spam = odds > cut.spam_min
                verdict_ham = odds <= cut.ham_max
                results.append(
                    Candidate(
                        event_model=event_model,
                        alpha=alpha,
                        tempering=tempering,
                        min_evidence=min_evidence,
                        bigrams=config.tokenizer.bigrams,
                        one_minus_roca=100.0 * (1.0 - roc_area(valid_y, odds)),
                        cutoffs=cut,
                        loss_per_message=cut.loss / valid_y.size,
                        log_loss=float(-np.mean(log_expit(np.where(valid_y, odds, -odds)))),
                        hm=100.0 * float(verdict_spam[~valid_y].mean()),
                        sm=100.0 * float(verdict_ham[valid_y].mean()),
                        unsure=100.0 * float((~verdict_spam & ~verdict_ham).mean()),
                        costly=int((verdict_spam & ~valid_y).sum() + (verdict_ham & valid_y).sum() + (~verdict_spam & ~verdict_ham).sum()),
                        held_out=int(valid_y.size),
                        max_tokens=keep,
                    )
                )
    results.sort(key=lambda c: _rank(c, config))
    return results
