"""``spamfilter tune``: choose the model settings and cutoffs for a mail stream."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer

from spamfilter.answers import Refusal
from spamfilter.cli import app, exitcodes, state
from spamfilter.cli._common import TableOrJson, index_length, jobs_or_default, one_stream, progress, report_refusals
from spamfilter.cli._streams import reader_may_leave
from spamfilter.cli.reading import Jobs
from spamfilter.config import DEPENDENCES, EVENT_MODELS
from spamfilter.errors import ConfigError
from spamfilter.locations import default_config_path
from spamfilter.mail import read_index
from spamfilter.tools import tuning
from spamfilter.tools.config_file import check_config_writable, update_config_file


@app.command()
def tune(
    ctx: typer.Context,
    indexes: Annotated[list[str], typer.Option("--index", metavar="FILE", help="Labelled TREC index, in arrival order.")],
    holdout: Annotated[float, typer.Option("--holdout", min=0.05, max=0.5, help="Share of the stream, from its end, held out for validation.")] = 0.5,
    folds: Annotated[
        int, typer.Option("--folds", min=1, max=20, help="Consecutive blocks the held-out share is cut into, each scored by a model of all the mail before it.")
    ] = 4,
    models: Annotated[list[str] | None, typer.Option("--model", metavar="M", help="Event model to try (repeatable; default all).")] = None,
    alphas: Annotated[list[float] | None, typer.Option("--alpha", metavar="A", min=1e-10, max=1e6, help="Smoothing strength to try (repeatable).")] = None,
    temperings: Annotated[list[float] | None, typer.Option("--tempering", metavar="T", min=0.0, max=1.0, help="Tempering exponent to try (repeatable).")] = None,
    min_evidences: Annotated[
        list[float] | None, typer.Option("--min-evidence", metavar="E", min=0.0, max=50.0, help="Minimum token evidence (nats) to try (repeatable).")
    ] = None,
    max_tokens: Annotated[
        list[int] | None,
        typer.Option(
            "--max-tokens",
            metavar="K",
            min=0,
            max=100_000,
            help="Tokens a message keeps, the k most significant, to try (repeatable; 0 = all; default the configured one).",
        ),
    ] = None,
    dependences: Annotated[
        list[str] | None,
        typer.Option(
            "--dependence",
            metavar="D",
            help="One-dependence estimator to try: none, spode or aode (repeatable; default the configured one; spode and aode with multinomial-binary only).",
        ),
    ] = None,
    feature_weights: Annotated[
        list[float] | None,
        typer.Option(
            "--feature-weight", metavar="W", min=0.0, max=10.0, help="Weight of the message features to try (repeatable; 0 = features off; default the configured one)."
        ),
    ] = None,
    unseen_weights: Annotated[
        list[float] | None,
        typer.Option(
            "--unseen-weight",
            metavar="U",
            min=0.0,
            max=1.0,
            help="How much a token the model has never seen counts in a message's size, to try (repeatable; 0 = not at all; default the configured one).",
        ),
    ] = None,
    try_bigrams: Annotated[bool, typer.Option("--try-bigrams/--keep-tokenizer", help="Also try the tokenizer with bigrams switched the other way.")] = True,
    top: Annotated[int, typer.Option("--top", min=1, help="Candidates to list.")] = 10,
    write: Annotated[bool, typer.Option("--write", help="Write the best settings and cutoffs into the config file.")] = False,
    fmt: Annotated[TableOrJson, typer.Option("--format", help="table or json.")] = TableOrJson.table,
    jobs: Jobs = None,
) -> None:
    """Choose the event model, alpha, tempering, minimum token evidence,
    tokens kept per message (--max-tokens), the one-dependence estimator
    (--dependence), the message features' weight (--feature-weight), the
    weight of unseen tokens in a message's size (--unseen-weight), bigrams
    on or off, and the ham/spam cutoffs that
    minimise the expected loss of the configured loss matrix on later mail:
    the last --holdout share of a labelled stream, cut into --folds
    consecutive blocks, each scored by a model trained on all the mail before
    it (like bogotune, over time). Cutoffs never go below the loss matrix's
    spam cutoff or above its ham cutoff. Of the settings whose loss is
    within one standard error of the lowest (marked *), the one that changes
    fewest configured settings is chosen: that mail cannot tell them apart.
    Prints the candidates, the chosen one first; --write stores it in the
    config file, and refuses (exit 65) when the best setting misfiled or
    called unsure fewer than 10 held-out messages (too little mail to choose),
    or did not beat the configured settings (at their own cutoffs) in most
    folds, or lost to them by more than 5% in any, or saved less than two
    standard errors of loss per held-out message over them.
    A newly written dependence scores once `spamfilter db reselect` has
    chosen its parents.

    Example: spamfilter tune --index corpus/index --write
    """
    # Over 60 lines: most of this command is its options' declarations.
    index = one_stream(indexes)
    s = state(ctx)
    chosen_models = models or list(EVENT_MODELS)
    for m in chosen_models:
        if m not in EVENT_MODELS:
            raise typer.BadParameter(f"{m!r} is not one of {', '.join(EVENT_MODELS)}", param_hint="--model")
    for d in dependences or []:
        if d not in DEPENDENCES:
            raise typer.BadParameter(f"{d!r} is not one of {', '.join(DEPENDENCES)}", param_hint="--dependence")
    path = s.config_path or default_config_path()
    if write:
        if path is None:
            raise ConfigError("no config file to write to and no home directory for one: name one with --config")
        # Before the run, not after it: the file must take the settings.
        check_config_writable(path, tuning.written_keys())
    total = index_length(index)
    stream = list(read_index(index))
    grid = tuning.Grid(
        event_models=chosen_models,
        alphas=alphas or [0.01, 0.03, 0.1, 0.3, 1.0],
        temperings=temperings or sorted({0.0, 0.5, s.config.model.tempering}),
        min_evidences=min_evidences or [0.0, 2.0, 3.0],
        max_tokens_options=max_tokens or None,
        dependences=dependences or None,
        feature_weights=feature_weights or None,
        unseen_weights=unseen_weights or None,
        bigram_options=[s.config.tokenizer.bigrams, not s.config.tokenizer.bigrams] if try_bigrams else None,
    )
    if not grid.models(s.config):
        # Options that cannot go together: a usage error (it was 65).
        raise typer.BadParameter('no setting to try: a dependence (spode, aode) needs the event model "multinomial-binary", no merged shared model and unseen_weight 0')
    refused: list[Refusal] = []
    candidates = tuning.tune(
        s.config,
        stream,
        grid,
        holdout=holdout,
        jobs=jobs_or_default(jobs),
        reading=lambda labelled: progress(labelled, "reading", total),
        folds=folds,
        baseline=True,
        refused=refused,
    )
    report_refusals(refused)
    configured = tuning.configured_candidate(candidates, s.config)
    candidates = [c for c in candidates if c.in_grid]
    best = candidates[0]
    with reader_may_leave():  # --write below writes all the same
        _show(candidates[:top], best, fmt)
    if write and path is not None:
        tuning.require_separation(best, holdout)
        tuning.require_improvement(best, configured)
        update_config_file(path, tuning.written_settings(best))
        # On stderr with --format json: stdout holds one JSON document.
        typer.echo(f"wrote the best settings to {path}", err=fmt is TableOrJson.json)
        if best.dependence != "none" and best.dependence != s.config.model.dependence:
            typer.echo(f"dependence = {best.dependence!r} scores once `spamfilter db reselect` has chosen its parents", err=fmt is TableOrJson.json)
        if tuning.changes(best, s.config):
            # The record maps the old settings' log-odds (docs/how-it-works.md, "Calibrated score").
            typer.echo(
                "a calibration record written under the old settings is not read: scores are the model's own, bounded to [0.01, 0.99], until training records under the new ones",
                err=fmt is TableOrJson.json,
            )
    if refused:
        # Tuned on the others, as train trains the others.
        raise typer.Exit(exitcodes.DATA_ERROR)


def _show(candidates: list[tuning.Candidate], best: tuning.Candidate, fmt: TableOrJson) -> None:
    """The best settings, as a table or one JSON document."""
    if fmt is TableOrJson.json:
        typer.echo(json.dumps({"best": asdict(best), "candidates": [asdict(c) for c in candidates]}))
        return
    typer.echo(
        f"  {'event model':<19} {'bigram':>6} {'alpha':>6} {'temper':>6} {'min_ev':>6} {'keep':>5} {'dep':>5} {'feat':>5} {'unseen':>6} {'loss/msg':>9} {'1-ROCA%':>8} {'hm%':>6} {'sm%':>6} {'unsure%':>7} {'ham<=':>8} {'spam>':>8}"
    )
    for c in candidates:
        typer.echo(
            f"{'*' if c.near_best else ' '} {c.event_model:<19} {'yes' if c.bigrams else 'no':>6} {c.alpha:6g} {c.tempering:6g} {c.min_evidence:6g} {c.max_tokens or 'all':>5} {c.dependence:>5} {c.feature_weight or 'off':>5} {c.unseen_weight:6g} {c.loss_per_message:9.4f} {c.one_minus_roca:8.3f} "
            f"{c.hm:6.2f} {c.sm:6.2f} {c.unsure:7.2f} {c.cutoffs.ham_max:8.2f} {c.cutoffs.spam_min:8.2f}"
        )
