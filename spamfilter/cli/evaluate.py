"""``spamfilter evaluate``: how good is the filter on a labelled stream?"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from enum import Enum
from pathlib import Path
from typing import Annotated, TextIO

import numpy as np
import typer

from spamfilter.cli import app, exitcodes, fail, refuse_unused, state, usage_error, writable_output
from spamfilter.cli._common import Margin, TableOrJson, index_length, jobs_or_default, json_text, one_stream, progress, report_refusals, tsv_field
from spamfilter.cli._streams import reader_may_leave, write_whole
from spamfilter.cli.reading import Jobs
from spamfilter.config import ONLINE_TRAIN_MODE, TUNE_MARGIN, TrainMode
from spamfilter.mail import read_index
from spamfilter.tools.evaluation import EvalReport, Scored, run_cross_validation, run_online, run_split
from spamfilter.verdicts import Label


class Protocol(str, Enum):
    online = "online"
    cv = "cv"
    train_once = "split"


def write_scores(path: Path, scored: list[Scored]) -> None:
    """One TSV row per judged message: source, gold, score, log_odds,
    verdict; the file whole or not at all (``write_whole``)."""

    def rows(fh: TextIO) -> None:
        fh.write("source\tgold\tscore\tlog_odds\tverdict\n")
        for s in scored:
            gold = Label.of(s.is_spam).decision
            fh.write(f"{tsv_field(s.source)}\t{gold}\t{s.score!r}\t{s.log_odds!r}\t{s.verdict}\n")

    write_whole(path, rows)


def render(report: EvalReport) -> list[str]:
    """The human summary, one figure a line, each said in words with the
    TREC spam track's name in brackets. The two-way figures put every
    message above the loss matrix's threshold in spam (no unsure verdict, as
    TREC measures); the three-way ones are the filter's real verdicts."""

    def f(x: float, unit: str = "%") -> str:
        return "-" if not math.isfinite(x) else f"{x:.3f}{unit}"

    r = report.rates
    rows = [
        ("protocol", report.protocol),
        ("messages", f"{report.messages} ({report.spam} spam, {report.ham} ham, {report.refused} unreadable)"),
        ("trained", f"{report.trained} ({report.learned})" if report.learned else str(report.trained)),
        ("area above the ROC curve (1-ROCA)", f(report.one_minus_roca)),
        ("spam let through when 0.1% of ham is filed as spam (sm at 0.1% hm)", f(report.sm_at_hm01)),
        ("two-way, spam above the loss matrix's threshold, no unsure:", ""),
        ("  ham filed as spam (hm)", f(report.hm)),
        ("  spam let through (sm)", f(report.sm)),
        ("  logistic average of the two (lam)", f(report.lam)),
        ("three-way, the verdicts spam / unsure / ham:", ""),
        ("  ham filed as spam / unsure", f"{f(r.ham_as_spam)} / {f(r.ham_unsure)}"),
        ("  spam let through / unsure", f"{f(r.spam_as_ham)} / {f(r.spam_unsure)}"),
        ("  accuracy", f(r.accuracy)),
        ("classify", f(report.classify_per_second, " messages/s")),
        ("train", f(report.train_per_second, " messages/s")),
    ]
    c = report.calibration
    if c is not None:
        rows += [
            ("calibration of the score, the calibrated P(spam):", ""),
            ("  log-loss (of expit(log-odds), uncalibrated)", f"{f(c.log_loss, ' nats/message')} ({f(report.raw_log_loss, '')})"),
            ("  Brier score / expected calibration error", f"{c.brier:.4f} / {c.ece:.4f}"),
            ("  scored <= 0.01: messages, % spam, % of all ham", f"{c.low_tail}, {f(c.low_tail_spam_pct)}, {f(c.ham_in_low_tail_pct)}"),
            ("  scored >= 0.99: messages, % ham, % of all spam", f"{c.high_tail}, {f(c.high_tail_ham_pct)}, {f(c.spam_in_high_tail_pct)}"),
        ]
    if report.windows:
        rows.append((f"1-ROCA per window of {report.windows[0].end - report.windows[0].start} messages:", ""))
        rows += [(f"  messages {w.start + 1}-{w.end} ({w.spam} spam, {w.ham} ham)", "-" if w.one_minus_roca is None else f(w.one_minus_roca)) for w in report.windows]
    width = max(len(label) for label, _ in rows)
    return [f"{label:<{width}}  {value}".rstrip() for label, value in rows]


def report_json(report: EvalReport) -> str:
    """``--format json``: the report's fields; a figure that is not a finite
    number (a throughput over no time) is null, never NaN."""

    def finite(value: object) -> object:
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [finite(v) for v in value]
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return json_text(value) if isinstance(value, str) else value

    return json.dumps(finite(asdict(report)), allow_nan=False)


@app.command()
def evaluate(
    ctx: typer.Context,
    indexes: Annotated[list[str], typer.Option("--index", metavar="FILE", help="TREC index: lines `spam PATH` / `ham PATH`, in stream order.")],
    protocol: Annotated[
        Protocol,
        typer.Option(
            "--protocol", help="online: classify then train each message in order; split: train on the first --head messages, classify the rest; cv: stratified k-fold."
        ),
    ] = Protocol.online,
    head: Annotated[int | None, typer.Option("--head", min=1, metavar="N", help="Messages trained first with --protocol split (default: half the stream).")] = None,
    folds: Annotated[int, typer.Option("--folds", min=2, help="Folds for --protocol cv.")] = 10,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Shuffling seed for --protocol cv.")] = 0,
    train_mode: Annotated[
        TrainMode,
        typer.Option(
            "--train-mode",
            help="online: which messages the filter learns from once told their label: teft every one, toe only errors (misfiled or unsure), tune errors and those scored right by less than --margin.",
        ),
    ] = ONLINE_TRAIN_MODE,
    margin: Margin = TUNE_MARGIN,
    out: Annotated[Path | None, typer.Option("--out", metavar="FILE", help="Write source/gold/score/log_odds/verdict TSV rows.")] = None,
    roc: Annotated[Path | None, typer.Option("--roc", metavar="PNG", help="Write the ROC curve (TREC's logit axes).")] = None,
    learning_curve: Annotated[Path | None, typer.Option("--learning-curve", metavar="PNG", help="Write the cumulative error rate over the stream.")] = None,
    fmt: Annotated[TableOrJson, typer.Option("--format", help="table or json.")] = TableOrJson.table,
    window: Annotated[
        int | None,
        typer.Option("--window", min=1, metavar="N", help="Messages per window of the windowed 1-ROCA (default 10,000, or a fifth of a stream shorter than 20,000)."),
    ] = None,
    jobs: Jobs = None,
) -> None:
    """Measure the filter on a labelled index, TREC spam-track style, starting
    from an empty model in a temporary in-memory database (the --db database
    only if given explicitly, before the command: spamfilter --db URL evaluate;
    online or split; cv refuses it). Ranks by log-odds: 1-ROCA%, spam misclassified
    at 0.1% ham misclassified, lam%, error rates, throughput, and 1-ROCA% per
    window of --window messages in stream order, so drift over a long stream
    shows. The stream must hold spam and ham (exit 65 otherwise). --out rows
    follow the index order.

    Example: spamfilter evaluate --index corpus/index --protocol online --out scores.tsv
    """
    index = one_stream(indexes)
    s = state(ctx)
    if s.db_url is not None and protocol is Protocol.cv:
        usage_error(ctx, "--db: cross-validation trains a model per fold in memory; it cannot use one database")
    unused = {
        Protocol.online: ("head", "folds", "seed"),
        Protocol.train_once: ("train_mode", "margin", "folds", "seed"),
        Protocol.cv: ("train_mode", "margin", "head", "jobs"),
    }
    refuse_unused(ctx, f"with --protocol {protocol.value}", *unused[protocol])
    if train_mode is not TrainMode.tune:
        refuse_unused(ctx, f"with --train-mode {train_mode.value}", "margin")
    for option, path in (("--out", out), ("--roc", roc), ("--learning-curve", learning_curve)):
        if path is not None:
            writable_output(ctx, path, option)
    total = index_length(index)
    labelled = read_index(index)
    if protocol is Protocol.online:
        report, scored = run_online(
            s.config, progress(labelled, "evaluating", total), train_mode=train_mode, margin=margin, url=s.db_url, jobs=jobs_or_default(jobs), window=window
        )
    elif protocol is Protocol.train_once:
        report, scored = run_split(s.config, list(labelled), head=head, jobs=jobs_or_default(jobs), window=window, url=s.db_url)
    else:
        stream = list(labelled)
        report, scored = run_cross_validation(s.config, stream, folds=folds, seed=seed, window=window)
    report_refusals(report.unreadable)
    with reader_may_leave():  # the files below are written all the same
        if fmt is TableOrJson.json:
            typer.echo(report_json(report))
        else:
            for line in render(report):
                typer.echo(line)
    writing = out
    try:
        if out is not None:
            write_scores(out, scored)
        if roc is not None or learning_curve is not None:
            from spamfilter.tools import plots

            y = np.array([x.is_spam for x in scored], dtype=bool)
            odds = np.array([x.log_odds for x in scored], dtype=np.float64)
            title = f"{Path(index).parent.name or index} ({report.protocol})"
            if roc is not None:
                writing = roc
                plots.write_roc(roc, y, odds, title)
            if learning_curve is not None:
                writing = learning_curve
                plots.write_learning_curve(learning_curve, y, odds, report.two_way_threshold, title)
    except OSError as exc:  # checked before the run: a disk that filled since
        fail(f"cannot write {writing}: {exc.strerror or exc}", exitcodes.OUTPUT_ERROR)
    raise typer.Exit(exitcodes.DATA_ERROR if report.unreadable else exitcodes.OK)
