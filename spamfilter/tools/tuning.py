"""Choosing the settings for someone's mail (``spamfilter tune``, like bogotune).

Train on the head of a labelled stream, score its held-out tail with every
setting tried (or, with several folds, each block of the tail with a model
of all the mail before it), each at the cutoffs (``best_cutoffs``, on the
calibrated score) that give it the lowest expected loss under the loss
matrix; of the settings within one standard error of the lowest loss, keep
the one nearest the configured settings (``one_standard_error``).
Besides the naive Bayes settings it may try the one-dependence estimators
(``[model] dependence``, ``spamfilter.nb.aode``) and the weight of the message
features (``[model] feature_weight``), with the filter's own scorer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import product
from typing import NamedTuple, cast

import numpy as np
from scipy.special import log_expit

from spamfilter.answers import Refusal
from spamfilter.config import Config, Dependence, EventModel, ModelConfig, counts_occurrences
from spamfilter.errors import EvaluationError
from spamfilter.mail import MailItem
from spamfilter.nb import decision
from spamfilter.nb.calibration import calibrated_in_order
from spamfilter.nb.decision import Cutoffs, best_cutoffs
from spamfilter.nb.model import NBParams
from spamfilter.nb.scorer import Evidence, Scorer
from spamfilter.tools.evaluation import BoolArray, FloatArray, roc_area
from spamfilter.tools.folds import Fold, Reading, head_pairs, time_ordered_folds


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
    #: ``[model] dependence``: "none", "spode" or "aode".
    dependence: str = "none"
    #: ``[model] feature_weight`` with the message features on; 0: features off.
    feature_weight: float = 0.0
    #: ``[model] unseen_weight``.
    unseen_weight: float = 0.0
    #: Loss per message in each validation fold, at this candidate's cutoffs.
    fold_losses: tuple[float, ...] = ()
    #: The same scores' loss per message in each fold at the loss matrix's
    #: own thresholds (what the configured setting costs, for its candidate).
    configured_fold_losses: tuple[float, ...] = ()
    #: False for the configured settings scored only as the baseline of
    #: ``require_improvement`` (the grid left them out): not a choice.
    in_grid: bool = True
    #: The loss per held-out message this setting saves over the configured
    #: one (at the loss matrix's own thresholds), in standard errors of the
    #: paired per-message differences; 0 when the configured one was not scored.
    improvement: float = 0.0
    #: Its loss per held-out message is within one standard error of the
    #: lowest (of the paired per-message differences): as good as the best
    #: on this mail, as far as it can tell (``tune``'s one-standard-error rule).
    near_best: bool = False


#: A candidate with the loss of each held-out message at its own cutoffs
#: and at the loss matrix's thresholds (``tune_settings``).
Scored = tuple[Candidate, FloatArray, FloatArray]


class Grid(NamedTuple):
    """The settings ``tune`` tries, each a list of values; None keeps the
    configured one. Every combination is scored, as the ``[model]`` value it
    stands for (``models``)."""

    event_models: Sequence[str] | None = None
    alphas: Sequence[float] | None = None
    temperings: Sequence[float] | None = None
    min_evidences: Sequence[float] | None = None
    max_tokens_options: Sequence[int] | None = None
    #: "spode" and "aode" only where ``dependence_applies``.
    dependences: Sequence[str] | None = None
    #: ``[model] feature_weight`` with the features on; 0: features off.
    feature_weights: Sequence[float] | None = None
    bigram_options: Sequence[bool] | None = None
    #: ``[model] unseen_weight`` (naive Bayes only: not with "spode" or "aode").
    unseen_weights: Sequence[float] | None = None

    def models(self, config: Config) -> list[ModelConfig]:
        """Every combination as a ``[model]`` value (the configured header
        and AODE settings throughout)."""
        m = config.model
        out = []
        for event_model, alpha, tempering, min_evidence, keep, dep, w, unseen in product(
            self.event_models or [m.event_model],
            self.alphas or [m.alpha],
            self.temperings or [m.tempering],
            self.min_evidences or [m.min_evidence],
            self.max_tokens_options or [m.max_tokens],
            self.dependences or [m.dependence],
            self.feature_weights or [configured_feature_weight(m)],
            self.unseen_weights or [m.unseen_weight],
        ):
            if dep == "none" or (dependence_applies(config, event_model) and not unseen):
                out.append(
                    replace(
                        m,
                        event_model=cast(EventModel, event_model),
                        alpha=alpha,
                        tempering=tempering,
                        min_evidence=min_evidence,
                        max_tokens=keep,
                        dependence=cast(Dependence, dep),
                        features=w > 0,
                        feature_weight=w or m.feature_weight,
                        unseen_weight=unseen,
                    )
                )
        return out


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


#: How much worse than the configured setting a written choice may be in
#: any one validation fold (a share of the configured setting's loss there).
FOLD_TOLERANCE = 0.05


#: How many standard errors of the paired per-message differences the loss
#: a written choice saves over the configured setting must be (about 97.7%
#: one-sided; a convention, not fitted).
MIN_IMPROVEMENT = 2.0


def require_improvement(best: Candidate, configured: Candidate | None) -> None:
    """Raise ``EvaluationError`` unless ``best`` beat the configured setting
    (at the loss matrix's own thresholds) in more than half of the validation
    folds, lost to it by more than `FOLD_TOLERANCE` in none, and saved at
    least `MIN_IMPROVEMENT` standard errors of loss per held-out message: a
    setting that won on the pooled folds thanks to one of them, or by a
    margin a few messages decide, did not carry over to the mail after them
    (docs/benchmarks.md, "tune over time-ordered folds"). ``configured`` is
    the candidate of the configured settings, if they were tried."""
    if configured is None:
        raise EvaluationError("the configured settings were not among those tried, so nothing shows the best one is better; nothing written")
    mine, theirs = best.fold_losses, configured.configured_fold_losses
    better = sum(a < b for a, b in zip(mine, theirs))
    worse = [i + 1 for i, (a, b) in enumerate(zip(mine, theirs)) if a > b * (1 + FOLD_TOLERANCE) + 1e-12]
    if better * 2 > len(mine) and not worse:
        if best.improvement >= MIN_IMPROVEMENT:
            return
        raise EvaluationError(
            f"the best setting saved {best.improvement:.2f} standard errors of loss per held-out message over the configured one, "
            f"and a choice needs {MIN_IMPROVEMENT:g}: not enough to expect it to do better on later mail; nothing written"
        )
    raise EvaluationError(
        f"the best setting beat the configured one in {better} of {len(mine)} time-ordered folds"
        + (f" and lost by more than {FOLD_TOLERANCE:.0%} in fold {', '.join(map(str, worse))}" if worse else "")
        + ": not enough to expect it to do better on later mail; nothing written"
    )


def written_settings(best: Candidate) -> dict[tuple[str, str], object]:
    """What ``tune --write`` stores for ``best``: (section, key) -> value.
    With the features off (weight 0) the configured weight is left alone."""
    ham_cutoff, spam_cutoff = best.cutoffs.probabilities()
    return {
        ("model", "event_model"): best.event_model,
        ("model", "alpha"): best.alpha,
        ("model", "tempering"): best.tempering,
        ("model", "min_evidence"): best.min_evidence,
        ("model", "max_tokens"): best.max_tokens,
        ("model", "dependence"): best.dependence,
        ("model", "features"): best.feature_weight > 0,
        **({("model", "feature_weight"): best.feature_weight} if best.feature_weight > 0 else {}),
        ("model", "unseen_weight"): best.unseen_weight,
        ("tokenizer", "bigrams"): best.bigrams,
        ("decision", "ham_cutoff"): ham_cutoff,
        ("decision", "spam_cutoff"): spam_cutoff,
    }


def written_keys() -> list[tuple[str, str]]:
    """Every (section, key) ``written_settings`` may store."""
    return [("model", k) for k in ("event_model", "alpha", "tempering", "min_evidence", "max_tokens", "dependence", "features", "feature_weight", "unseen_weight")] + [
        ("tokenizer", "bigrams"),
        ("decision", "ham_cutoff"),
        ("decision", "spam_cutoff"),
    ]


def configured_candidate(candidates: Sequence[Candidate], config: Config) -> Candidate | None:
    """The candidate with exactly the configured settings, if one was tried."""
    for c in candidates:
        if changes(c, config) == 0:
            return c
    return None


def tune(
    config: Config,
    labelled: Sequence[tuple[bool, MailItem]],
    grid: Grid,
    *,
    holdout: float = 0.2,
    jobs: int = 1,
    reading: Reading | None = None,
    folds: int = 1,
    baseline: bool = False,
    refused: list[Refusal] | None = None,
) -> list[Candidate]:
    """``tune_settings`` for each tokenizer setting in ``grid.bigram_options``
    (default: the configured one), all candidates ranked together; the mail
    is read on ``jobs`` processes, through ``reading`` (e.g. a progress
    bar) each time. With ``baseline`` the configured settings are scored
    too when the grid leaves them out, as a candidate with ``in_grid``
    False (``configured_candidate`` finds it). The messages that do not
    read as mail are left out and added to ``refused``, once each."""
    scored: list[Scored] = []
    for bigrams in grid.bigram_options or (config.tokenizer.bigrams,):
        variant = replace(config, tokenizer=replace(config.tokenizer, bigrams=bigrams))
        scored += tune_settings(
            variant,
            labelled,
            grid,
            holdout=holdout,
            jobs=jobs,
            reading=reading,
            folds=folds,
            with_configured=baseline and bigrams == config.tokenizer.bigrams,
            refused=refused if not scored else None,
        )
    base = next((at_bounds for c, _, at_bounds in scored if changes(c, config) == 0), None)
    with_saving = [(replace(c, improvement=paired_saving(own, base)) if base is not None and own.size == base.size else c, own) for c, own, _ in scored]
    return one_standard_error(with_saving, config)


def one_standard_error(scored: Sequence[tuple[Candidate, FloatArray]], config: Config) -> list[Candidate]:
    """The candidates, the chosen one first, by the one-standard-error rule
    (Breiman et al., *Classification and Regression Trees*, 1984): of the
    settings whose loss per held-out message is within one standard error
    of the lowest (paired per-message differences, ``own`` being each
    one's losses at its own cutoffs), the one that changes fewest of the
    configured settings, then the lowest loss. The held-out mail cannot
    tell those apart, and the nearer the configured settings a choice stays,
    the less it rests on what that mail happened to hold. Then the other
    near-best ones, then the rest, each by ``_rank``."""
    ranked = sorted(scored, key=lambda t: _rank(t[0], config))
    best = next((own for c, own in ranked if c.in_grid), None)
    if best is None:
        return [c for c, _ in ranked]

    def near(c: Candidate, own: FloatArray) -> bool:
        return c.in_grid and own.size == best.size and float((own - best).mean()) <= _standard_error(own - best)

    marked = [replace(c, near_best=near(c, own)) for c, own in ranked]
    return sorted(marked, key=lambda c: (not c.near_best, changes(c, config) if c.near_best else 0, *_rank(c, config)))


def _standard_error(differences: FloatArray) -> float:
    """The standard error of the mean of paired differences (0 for fewer than two)."""
    if differences.size < 2:
        return 0.0
    return float(differences.std(ddof=1)) / float(np.sqrt(differences.size))


def configured_feature_weight(m: ModelConfig) -> float:
    """The feature weight a configuration scores with: 0 with the features off."""
    return m.feature_weight if m.features else 0.0


def _rank(c: Candidate, config: Config) -> tuple[float, int, float, float]:
    """Lowest loss first; at equal loss the candidate that changes fewest of
    the configured settings (a tie is no reason to move off the defaults),
    then lowest 1-ROCA, then lowest log-loss."""
    return (round(c.loss_per_message, 12), changes(c, config), round(c.one_minus_roca, 9), c.log_loss)


def changes(c: Candidate, config: Config) -> int:
    """How many of the configured settings ``c`` changes."""
    m = config.model
    return sum(
        (
            c.event_model != m.event_model,
            c.alpha != m.alpha,
            c.tempering != m.tempering,
            c.min_evidence != m.min_evidence,
            c.max_tokens != m.max_tokens,
            c.bigrams != config.tokenizer.bigrams,
            c.dependence != m.dependence,
            c.feature_weight != configured_feature_weight(m),
            c.unseen_weight != m.unseen_weight,
        )
    )


def dependence_applies(config: Config, event_model: str) -> bool:
    """Whether a one-dependence estimator may go with ``event_model`` under
    ``config`` (the combinations ``config.validate`` accepts)."""
    return event_model == "multinomial-binary" and config.store.shared_model != "merge"


def tune_settings(
    config: Config,
    labelled: Sequence[tuple[bool, MailItem]],
    grid: Grid,
    *,
    holdout: float = 0.2,
    jobs: int = 1,
    reading: Reading | None = None,
    folds: int = 1,
    with_configured: bool = False,
    refused: list[Refusal] | None = None,
) -> list[Scored]:
    """Try every setting of ``grid`` (``Grid.models``) with the configured
    tokenizer: train on the head of the stream, score its last ``holdout``
    share (later mail, as a filter meets it; with ``folds`` > 1 that share
    is cut into consecutive blocks, each scored by a model of every message
    before it, and the scores pooled), choose each setting's cutoffs on its
    calibrated scores (``calibrated_in_order``) by ``best_cutoffs`` (within
    the loss matrix's, so the unsure band stays) and report the loss per
    message. Returns each candidate with the loss of each held-out message
    at its cutoffs and at the loss matrix's own thresholds (``Scored``).
    With ``with_configured`` the configured setting is scored too
    when the grid lacks it (``in_grid`` False), the baseline of
    ``require_improvement``. The messages are read once; each setting is
    then model arithmetic with the filter's own scorer (``_setting_odds``).
    """
    models = grid.models(config)
    configured = config.model
    extra = with_configured and configured not in models
    if extra:
        models.append(configured)
    if len(models) == int(extra):
        raise EvaluationError('no setting to try: dependence "spode" or "aode" needs the event model "multinomial-binary", no merged shared model and unseen_weight 0')
    splits = time_ordered_folds(config, labelled, holdout, folds, jobs, reading, unseen=any(m.unseen_weight for m in models), refused=refused)
    scores: dict[ModelConfig, list[FloatArray]] = {}
    for s in splits:
        for setting, odds in _setting_odds(s, config, models):
            scores.setdefault(setting, []).append(odds)
    valid_y = np.concatenate([s.valid_y for s in splits])
    sizes = [s.valid_y.size for s in splits]
    results = []
    for setting, parts in scores.items():
        raw = np.concatenate(parts)
        c, own, at_bounds = _candidate(valid_y, raw, calibrated_in_order(raw, valid_y, config.store.batch_size), setting, config, sizes)
        results.append((replace(c, in_grid=not (extra and setting == configured)), own, at_bounds))
    return results


def _setting_odds(s: Fold, config: Config, models: Sequence[ModelConfig]) -> Iterable[tuple[ModelConfig, FloatArray]]:
    """Each ``[model]`` value of the grid and the log-odds the filter's
    scorer gives the held-out messages of ``s`` under it, from the counts
    of its head."""
    pairs = {dep: head_pairs(s, replace(config.model, dependence=dep)) for dep in {m.dependence for m in models} - {"none"}}
    params: dict[tuple[str, float], NBParams] = {}
    for m in models:
        X = s.valid_terms if counts_occurrences(m.event_model) else s.valid_binary
        scorer = Scorer(m)
        key = (m.event_model, m.alpha)
        if key not in params:
            params[key] = scorer.params(s.counts, s.stats)
        unseen = s.valid_unseen_terms if counts_occurrences(m.event_model) else s.valid_unseen_binary
        evidence = Evidence(s.counts, s.stats, X, s.header, pairs.get(m.dependence), s.gaussian if m.features else None, s.valid_features if m.features else None, unseen)
        yield m, scorer.log_odds(evidence, params[key])


def _message_losses(valid_y: BoolArray, odds: FloatArray, ham_max: float, spam_min: float, config: Config) -> FloatArray:
    """The loss matrix's cost of each held-out message's verdict at the given cutoffs."""
    d = config.decision
    spam, ham = odds > spam_min, odds <= ham_max
    losses: FloatArray = np.where(spam, np.where(valid_y, 0.0, d.cost_ham_as_spam), np.where(ham, np.where(valid_y, d.cost_spam_as_ham, 0.0), d.cost_unsure))
    return losses


def _fold_losses(losses: FloatArray, sizes: Sequence[int]) -> tuple[float, ...]:
    """Loss per message of each validation fold (``sizes`` consecutive
    messages) of the held-out messages' ``losses``."""
    ends = np.cumsum(sizes)
    return tuple(float(losses[end - n : end].sum()) / max(n, 1) for n, end in zip(sizes, ends))


def paired_saving(mine: FloatArray, theirs: FloatArray) -> float:
    """The mean of theirs - mine in standard errors of the paired differences
    (0 when they never differ)."""
    saved = theirs - mine
    error = _standard_error(saved)
    return float(saved.mean()) / error if error > 0 else 0.0


def fold_one_minus_roca(valid_y: BoolArray, raw: FloatArray, sizes: Sequence[int]) -> float:
    """1-ROCA % of the held-out messages: each fold's (``sizes``
    consecutive messages), weighted by its size, over the folds that hold
    both classes. Each fold is scored by a model of its own, whose
    log-odds have a scale of their own, so ranking the folds' messages
    together would mix the models' scales (on csdmc2010, 11.8% pooled
    against 0.32, 0.15, 0 and 0 per fold). A stream with no such fold
    falls back to all of them at once."""
    ends = np.cumsum(sizes)
    parts = [(n, 1.0 - roc_area(valid_y[end - n : end], raw[end - n : end])) for n, end in zip(sizes, ends) if 0 < valid_y[end - n : end].sum() < n]
    if not parts:
        return 100.0 * (1.0 - roc_area(valid_y, raw))
    weights = np.array([n for n, _ in parts], dtype=np.float64)
    return 100.0 * float(np.average([area for _, area in parts], weights=weights))


def _candidate(valid_y: BoolArray, raw: FloatArray, odds: FloatArray, setting: ModelConfig, config: Config, sizes: Sequence[int]) -> Scored:
    """How one setting did on the held-out messages at the cutoffs
    ``best_cutoffs`` gives it within the loss matrix's own thresholds, over
    all folds and in each (``sizes``: the folds' messages, in order), with
    each message's loss at those cutoffs and at the loss matrix's own
    thresholds. The cutoffs and verdicts are those of the calibrated
    log-odds ``odds``; 1-ROCA (per fold, ``fold_one_minus_roca``) and the
    log-loss (a tie-break) are the model's own, ``raw``'s."""
    d = config.decision
    bounds = decision.thresholds_from_loss(d.cost_ham_as_spam, d.cost_spam_as_ham, d.cost_unsure)
    cut = best_cutoffs(
        valid_y,
        odds,
        cost_ham_as_spam=d.cost_ham_as_spam,
        cost_spam_as_ham=d.cost_spam_as_ham,
        cost_unsure=d.cost_unsure,
        spam_min_floor=bounds.spam_min,
        ham_max_ceiling=bounds.ham_max,
    )
    verdict_spam = odds > cut.spam_min
    verdict_ham = odds <= cut.ham_max
    unsure = ~verdict_spam & ~verdict_ham
    own = _message_losses(valid_y, odds, cut.ham_max, cut.spam_min, config)
    # The configured setting is judged at the bounds the configuration
    # decides with: its own cutoffs once `tune --write` has set them.
    configured = decision.configured_thresholds(d.ham_cutoff, d.spam_cutoff, d.cost_ham_as_spam, d.cost_spam_as_ham, d.cost_unsure)
    at_bounds = _message_losses(valid_y, odds, configured.ham_max, configured.spam_min, config)
    candidate = Candidate(
        event_model=setting.event_model,
        alpha=setting.alpha,
        tempering=setting.tempering,
        min_evidence=setting.min_evidence,
        bigrams=config.tokenizer.bigrams,
        one_minus_roca=fold_one_minus_roca(valid_y, raw, sizes),
        cutoffs=cut,
        loss_per_message=cut.loss / valid_y.size,
        log_loss=float(-np.mean(log_expit(np.where(valid_y, raw, -raw)))),
        hm=100.0 * float(verdict_spam[~valid_y].mean()),
        sm=100.0 * float(verdict_ham[valid_y].mean()),
        unsure=100.0 * float(unsure.mean()),
        costly=int((verdict_spam & ~valid_y).sum() + (verdict_ham & valid_y).sum() + unsure.sum()),
        held_out=int(valid_y.size),
        max_tokens=setting.max_tokens,
        dependence=setting.dependence,
        feature_weight=configured_feature_weight(setting),
        unseen_weight=setting.unseen_weight,
        fold_losses=_fold_losses(own, sizes),
        configured_fold_losses=_fold_losses(at_bounds, sizes),
    )
    return candidate, own, at_bounds
