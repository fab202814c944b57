"""``spamfilter top-words``, ``explain`` and ``report``: what the model has learnt and why it decides."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from datetime import datetime, timezone
from enum import Enum
from itertools import islice
from pathlib import Path
from typing import Annotated, TextIO

import typer

from spamfilter.cli import app, exitcodes, fail, usage_error, writable_output
from spamfilter.cli._common import TableOrJson, is_tty_stdin, open_filter
from spamfilter.cli._streams import write_whole
from spamfilter.mail import STDIN_SOURCE, read_messages
from spamfilter.tools.insight import Explanation, Insight, WordScore
from spamfilter.tools.report import collect, printable, read_scores, render
from spamfilter.verdicts import Decision


class WordsFormat(str, Enum):
    """The --format choice of ``top-words``."""

    table = "table"
    jsonl = "jsonl"
    csv = "csv"


class WordClass(str, Enum):
    spam = "spam"
    ham = "ham"


def _colour() -> bool:
    """Colour only on a terminal, and not when NO_COLOR is set (no-color.org)."""
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def _paint(text: str, contribution: float, colour: bool) -> str:
    """Red towards spam, blue towards ham."""
    if not colour or contribution == 0:
        return text
    return typer.style(text, fg="red" if contribution > 0 else "blue")


def _cannot_write(path: Path, exc: OSError) -> None:
    """The output file failed after the work (its path was checked before
    it): 74, as for a full disk."""
    fail(f"cannot write {path}: {exc.strerror or exc}", exitcodes.OUTPUT_ERROR)


def render_words(words: list[WordScore], fmt: WordsFormat) -> list[str]:
    """The lines ``top-words`` prints."""
    if fmt is WordsFormat.jsonl:
        return [json.dumps({"token": w.token, "spam_count": w.spam_count, "ham_count": w.ham_count, "score": w.score}) for w in words]
    if fmt is WordsFormat.csv:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["token", "spam_count", "ham_count", "score"])
        writer.writerows([w.token, w.spam_count, w.ham_count, repr(w.score)] for w in words)
        # One piece: a token may hold a newline (quoted by csv) or other
        # characters str.splitlines() would split at.
        return [buffer.getvalue().removesuffix("\n")]
    shown = [printable(w.token) for w in words]
    width = min(max([len("token"), *(len(t) for t in shown)]), 48)
    lines = [f"{'token':<{width}} {'spam_count':>10} {'ham_count':>10} {'score':>8}"]
    lines += [f"{t:<{width}} {w.spam_count:>10} {w.ham_count:>10} {w.score:>8.3f}" for t, w in zip(shown, words)]
    return lines


@app.command(name="top-words")
def top_words(
    ctx: typer.Context,
    n: Annotated[int, typer.Option("--n", min=1, help="How many tokens to list.")] = 30,
    cls: Annotated[WordClass, typer.Option("--class", help="Rank for spam or for ham.")] = WordClass.spam,
    min_count: Annotated[int, typer.Option("--min-count", min=1, help="Leave out tokens counted fewer times than this in both classes together.")] = 5,
    fmt: Annotated[WordsFormat, typer.Option("--format", help="table, jsonl or csv.")] = WordsFormat.table,
    plot: Annotated[Path | None, typer.Option("--plot", metavar="PNG", dir_okay=False, help="Also draw the top tokens of both classes as a bar chart.")] = None,
) -> None:
    """List the tokens the model ties most strongly to spam (or ham), best
    first: score = log P(token|spam) - log P(token|ham) under the configured
    event model and alpha (negated for --class ham). Counts are messages
    containing the token, or its occurrences for the multinomial model.

    Example: spamfilter top-words --n 20 --class ham --format jsonl
    """
    is_spam = cls is WordClass.spam
    if plot is not None:
        writable_output(ctx, plot, "--plot")
    with open_filter(ctx, create=False) as f:
        insight = Insight(f)
        words = insight.top_words(n, spam=is_spam, min_count=min_count)
        other = insight.top_words(n, spam=not is_spam, min_count=min_count) if plot is not None else []
    if plot is not None:
        # Drawn before the list is printed: a reader that leaves early
        # (`| head`) ends the command at its first line, and the chart was
        # then never written.
        from spamfilter.tools import plots

        spam, ham = (words, other) if is_spam else (other, words)
        try:
            plots.write_top_words(plot, [(w.token, w.score) for w in spam], [(w.token, w.score) for w in ham], "most class-indicative tokens")
        except OSError as exc:
            _cannot_write(plot, exc)
    for line in render_words(words, fmt):
        # color=True: the machine formats go out byte for byte (click would
        # strip what looks like an ANSI sequence from a token); the table
        # shows control characters escaped.
        typer.echo(line, color=fmt is not WordsFormat.table)


def explanation_json(e: Explanation) -> str:
    """``explain --format json``: prior + sum(contribution) == log_odds."""
    return json.dumps(
        {
            "verdict": e.verdict,
            "score": e.score,
            "log_odds": e.log_odds,
            "prior": e.prior,
            "tokens": [{"token": c.token, "contribution": c.contribution, "spam_count": c.spam_count, "ham_count": c.ham_count} for c in e.tokens],
        }
    )


def explanation_lines(e: Explanation, *, colour: bool = False) -> list[str]:
    """``explain``'s table for people."""
    token_sum = sum(c.contribution for c in e.tokens)
    verdict = e.verdict if not colour else typer.style(e.verdict, fg={Decision.SPAM: "red", Decision.HAM: "blue"}.get(e.verdict, "yellow"), bold=True)
    lines = [
        f"message    {printable(e.source)}",
        f"verdict    {verdict}   P(spam) {e.score:.6g}   log-odds {e.log_odds:+.4f}",
        f"           = prior {e.prior:+.4f} + tokens {token_sum:+.4f}",
        f"model      {e.event_model}; {e.tempering()}",
        f"tokens     {len([c for c in e.tokens if c.spam_count is not None])} known"
        + (f" ({e.ignored} left out by min_evidence, max_tokens or header_max_tokens, contributing 0)" if e.ignored else "")
        + f", {e.unknown} never seen "
        + (f"(no evidence; weighted {e.unseen_weight:g} in the size the evidence is divided by)" if e.unseen_weight else "(ignored)"),
        "",
        f"{'contribution':>12} {'spam_count':>10} {'ham_count':>10}  token",
    ]
    for c in e.tokens:
        if c.token is None:
            counts = f"{'':>10} {'':>10}"
            name = f"(the {e.absent} vocabulary tokens this message lacks)"
        elif c.spam_count is None or c.ham_count is None:
            counts = f"{'':>10} {'':>10}"  # a message feature's Gaussian term
            name = printable(c.token)
        else:
            counts = f"{c.spam_count:>10} {c.ham_count:>10}"
            name = printable(c.token)
        lines.append(f"{_paint(f'{c.contribution:+12.4f}', c.contribution, colour)} {counts}  {_paint(name, c.contribution, colour)}")
    return lines


@app.command()
def explain(
    ctx: typer.Context,
    message: Annotated[str, typer.Argument(metavar="MESSAGE", help="One message: a message file (or an mbox holding one), or - for stdin.")],
    fmt: Annotated[TableOrJson, typer.Option("--format", help="table or json.")] = TableOrJson.table,
) -> None:
    """Show why a message gets its verdict: P(spam), the log-odds, the prior
    log-odds and every known token's contribution to the log-odds (for the
    bernoulli model also the tokens the message lacks, as one line), largest
    first; prior + contributions = log-odds. Red pulls towards spam, blue
    towards ham.

    Example: spamfilter explain --format json suspicious.eml
    """
    if message == STDIN_SOURCE and is_tty_stdin():
        usage_error(ctx, "explain reads a message on standard input when MESSAGE is -")
    items = list(islice(read_messages([message]), 2))
    if not items:
        fail(f"{message}: holds no message", exitcodes.DATA_ERROR)
    if len(items) > 1:
        usage_error(ctx, f"{message}: holds more than one message; explain takes one (a message file or -)")
    with open_filter(ctx, create=False) as f:
        explanation = Insight(f).explain(items[0])
    if fmt is TableOrJson.json:
        typer.echo(explanation_json(explanation))
        return
    colour = _colour()
    for line in explanation_lines(explanation, colour=colour):
        typer.echo(line, color=colour)


@app.command()
def report(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", metavar="FILE", dir_okay=False, help="The HTML file to write.")],
    scores: Annotated[
        Path | None,
        typer.Option(
            "--scores",
            metavar="FILE",
            exists=True,
            dir_okay=False,
            readable=True,
            help="Output of `classify --format jsonl` (or tsv) or of `evaluate --out`, for the score histogram and, with true labels, the ROC.",
        ),
    ] = None,
    n: Annotated[int, typer.Option("--n", min=1, max=1000, help="Top words per class (at most 1,000: the page draws each).")] = 20,
    min_count: Annotated[int, typer.Option("--min-count", min=1, help="Leave out tokens counted fewer times than this.")] = 5,
) -> None:
    """Write one self-contained HTML page (no external files): database
    summary, messages trained over time, top words of both classes, the
    ham and spam densities of each message feature, the score histogram of a classify or evaluate run given with --scores, and
    its evaluation figures and ROC when it has true labels.

    Example: spamfilter report --out report.html --scores scores.tsv
    """
    writable_output(ctx, out, "--out")
    sample = read_scores(scores) if scores is not None else None
    with open_filter(ctx, create=False) as f:
        data = collect(f, scores=sample, now=datetime.now(timezone.utc), n=n, min_count=min_count)
    page = render(data)

    def whole_page(fh: TextIO) -> None:
        fh.write(page)

    try:
        write_whole(out, whole_page)
    except OSError as exc:
        _cannot_write(out, exc)
    typer.echo(f"wrote {out}")
