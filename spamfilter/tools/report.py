"""The HTML report: one self-contained page about the model and its scores.

``collect`` gathers the numbers through ``filter.Filter``; ``render`` turns
them into a page by plain string building. Nothing on the page is fetched:
charts are PNG ``data:`` URIs from ``plots``, style and script are inline, and
a Content-Security-Policy meta tag forbids loading anything else and lets run
only that one style block and script (by their SHA-256). Tokens come from
hostile mail and paths from anywhere, so every such string goes through
``html.escape`` after its control characters are made visible.

    sample = read_scores(Path("verdicts.jsonl"))          # or None
    with Filter.open(config) as f:
        data = collect(f, scores=sample, now=datetime.now(timezone.utc))
    Path("report.html").write_text(render(data), encoding="utf-8")
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy.special import expit

from spamfilter.answers import Stats
from spamfilter.config import ModelConfig, counts_occurrences
from spamfilter.errors import NotTrainedError, ScoresFileError
from spamfilter.filter import Filter
from spamfilter.mail.sources import is_device
from spamfilter.nb.calibration import TAIL, calibration, score_log_odds
from spamfilter.tools import plots
from spamfilter.tools.evaluation import error_rates, lam_pct, roc_area, sm_at_hm
from spamfilter.tools.insight import FeatureDensities, Insight, TrainedDay, WordScore
from spamfilter.verdicts import Decision

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: The ids of the page's sections, in page order.
SECTIONS = ("summary", "history", "top-words", "features", "scores", "evaluation")


def printable(text: str) -> str:
    """``text`` with each non-printable character (controls, escape
    sequences, lone surrogates) shown as a Python escape, e.g. ``\\x1b``:
    mail cannot paint a terminal or hide characters in a page."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


@dataclass(frozen=True, slots=True)
class ScoreSample:
    """The log-odds of a classified mailbox or an evaluation run.

    log_odds: (n,) one per message.
    is_spam: (n,) the true labels, when the file has them (``evaluate --out``).
    verdicts: the verdicts, when the file has them.
    probability: (n,) the scores, the calibrated P(spam), when the file has them.
    """

    path: str
    log_odds: FloatArray
    is_spam: BoolArray | None
    verdicts: tuple[str, ...] | None
    probability: FloatArray | None = None


def read_scores(path: Path) -> ScoreSample:
    """Read ``classify --format jsonl`` or ``--format tsv`` output, or an
    ``evaluate --out`` file (TSV with a ``gold`` column).

    Raises ``ScoresFileError`` naming the line when it is none of these.
    """
    if is_device(str(path)):
        # /dev/zero was read for ever.
        raise ScoresFileError(f"{path}: a device, not a file of scores")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScoresFileError(f"cannot read scores file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ScoresFileError(f"{path}: not a text file of scores") from None
    # Lines end at LF (or CRLF) only: str.splitlines would also break a row
    # at a form feed or U+2028 in a file name.
    lines = [(n, line.removesuffix("\r")) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
    if not lines:
        raise ScoresFileError(f"{path}: has no scores")
    if lines[0][1].lstrip().startswith("{"):
        odds, gold, verdicts, scores = _jsonl_rows(path, lines)
    else:
        odds, gold, verdicts, scores = _tsv_rows(path, lines)
    if not odds:
        raise ScoresFileError(f"{path}: has no scores")
    values = np.array(odds, dtype=np.float64)
    if not np.isfinite(values).all():
        raise ScoresFileError(f"{path}: has log-odds that are not finite numbers")
    probability = np.array(scores, dtype=np.float64) if scores is not None and len(scores) == len(odds) else None
    if probability is not None and not ((probability >= 0) & (probability <= 1)).all():
        raise ScoresFileError(f"{path}: has scores outside [0, 1]")
    return ScoreSample(
        path=str(path),
        log_odds=values,
        is_spam=None if gold is None else np.array(gold, dtype=bool),
        verdicts=None if verdicts is None else tuple(verdicts),
        probability=probability,
    )


_VERDICTS = frozenset(d.value for d in Decision)


Rows = tuple[list[float], list[bool] | None, list[str] | None, list[float] | None]


def _jsonl_rows(path: Path, lines: list[tuple[int, str]]) -> Rows:
    odds: list[float] = []
    verdicts: list[str] = []
    scores: list[float] = []
    for n, line in lines:
        try:
            row = json.loads(line)
            # A row of classify's has its source; `explain --format json`
            # has a log_odds too, but is one message's reasons, not a score list.
            if "source" not in row:
                raise KeyError("source")
            odds.append(float(row["log_odds"]))
            verdict = row.get("verdict")
            if "score" in row:
                scores.append(float(row["score"]))
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
            raise ScoresFileError(f"{path}, line {n}: not a `classify --format jsonl` row with a source and a log_odds") from None
        if verdict is not None:
            verdicts.append(_verdict(path, n, verdict))
    return odds, None, verdicts if len(verdicts) == len(odds) else None, scores


def _verdict(path: Path, n: int, verdict: object) -> str:
    """A row's verdict; one that is none (a row cut short in it) fails the
    file: its three-way figures would silently go missing from the page."""
    if verdict not in _VERDICTS:
        raise ScoresFileError(f"{path}, line {n}: verdict {verdict!r} is not spam, ham or unsure (a truncated or edited file)")
    return str(verdict)


def _tsv_rows(path: Path, lines: list[tuple[int, str]]) -> Rows:
    header = lines[0][1].split("\t")
    if "log_odds" not in header or header[0] != "source":
        raise ScoresFileError(
            f"{path}: not a scores file: expected `classify --format jsonl` rows or a TSV header "
            "with source and log_odds columns (`classify --format tsv`, `evaluate --out`)"
        )
    at = {name: i for i, name in enumerate(header)}
    odds: list[float] = []
    gold: list[bool] = []
    verdicts: list[str] = []
    scores: list[float] = []
    for n, line in lines[1:]:
        # The source comes first and may itself hold a tab: split from the right.
        fields = line.rsplit("\t", len(header) - 1)
        try:
            if len(fields) != len(header):
                raise ValueError
            odds.append(float(fields[at["log_odds"]]))
            if "score" in at:
                scores.append(float(fields[at["score"]]))
            if "gold" in at:
                # In any case, as an index's labels are read.
                label = fields[at["gold"]].lower()
                if label not in (Decision.SPAM, Decision.HAM):
                    raise ScoresFileError(f"{path}, line {n}: gold label {fields[at['gold']]!r} is neither spam nor ham")
                gold.append(label == Decision.SPAM)
            if "verdict" in at:
                verdicts.append(_verdict(path, n, fields[at["verdict"]]))
        except ValueError:
            raise ScoresFileError(f"{path}, line {n}: expected {len(header)} tab-separated fields as in the header, a number for each of log_odds and score") from None
    return odds, gold if "gold" in at else None, verdicts if len(verdicts) == len(odds) else None, scores


@dataclass(frozen=True, slots=True)
class ReportData:
    """Everything the page shows.

    thresholds: (ham_max, spam_min), the verdict bounds on the calibrated
        score's logit (what the config's cutoffs say).
    log_odds_bounds: the same bounds read back as the model's own log-odds
        (``Filter.log_odds_bounds``), drawn over the score histogram.
    two_way_threshold: the log-odds bound of the loss matrix without an
        unsure verdict, for the error rates of a labelled scores file.
    not_trained: why there are no top words (the model lacks a class), or None.
    features: the class densities of the message features.
    """

    generated: datetime
    stats: Stats
    model: ModelConfig
    thresholds: tuple[float, float]
    log_odds_bounds: tuple[float, float]
    two_way_threshold: float
    history: tuple[TrainedDay, ...]
    spam_words: tuple[WordScore, ...]
    ham_words: tuple[WordScore, ...]
    min_count: int
    not_trained: str | None
    features: FeatureDensities
    scores: ScoreSample | None
    #: ``Stats.classifying_model``: None when the user's model classifies alone.
    classifying_model: str | None = None


def collect(f: Filter, *, scores: ScoreSample | None, now: datetime, n: int = 20, min_count: int = 5) -> ReportData:
    """The report's numbers from the filter's database (an untrained model is
    reported as such, not refused)."""
    spam_words: list[WordScore] = []
    ham_words: list[WordScore] = []
    not_trained = None
    insight = Insight(f)
    try:
        spam_words = insight.top_words(n, spam=True, min_count=min_count)
        ham_words = insight.top_words(n, spam=False, min_count=min_count)
    except NotTrainedError as exc:
        not_trained = str(exc)
    stats = f.stats()
    return ReportData(
        generated=now,
        stats=stats,
        model=f.config.model,
        thresholds=(f.thresholds.ham_max, f.thresholds.spam_min),
        log_odds_bounds=f.log_odds_bounds(),
        two_way_threshold=f.two_way_threshold,
        history=tuple(insight.training_history()),
        spam_words=tuple(spam_words),
        ham_words=tuple(ham_words),
        min_count=min_count,
        not_trained=not_trained,
        features=insight.feature_densities(),
        scores=scores,
        classifying_model=stats.classifying_model(f.config.store.shared_model, f.config.store.shared_min_messages),
    )


# -- rendering ------------------------------------------------------------------

_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; color: #222; margin: 0 auto; max-width: 1240px; padding: 0 1rem 3rem; }
h1 { margin-bottom: 0.2rem; }
header p { color: #666; margin-top: 0; }
nav a { margin-right: 1rem; }
section { border-top: 1px solid #ddd; margin-top: 1.5rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; }
th, td { padding: 0.2rem 0.7rem; text-align: left; border-bottom: 1px solid #eee; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.token { font-family: ui-monospace, monospace; overflow-wrap: anywhere; max-width: 28rem; }
.pair { display: flex; flex-wrap: wrap; gap: 2rem; }
.pair > div { flex: 1 1 34rem; min-width: 0; }
.spam { color: #c0392b; }
.ham { color: #2471a3; }
.note { color: #666; font-style: italic; }
img { max-width: 100%; height: auto; }
""".strip()

# Proves in a browser that the page's script ran (tests read it back).
_SCRIPT = 'document.body.dataset.ready = "1";'


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def _e(text: object) -> str:
    return html.escape(printable(str(text)), quote=True)


def _num(x: float, digits: int = 3, unit: str = "") -> str:
    return "&ndash;" if math.isnan(x) else f"{x:.{digits}f}{unit}"


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{_e(alt)}">'


def _table(head: Sequence[tuple[str, bool]], rows: Sequence[Sequence[str]]) -> str:
    """Cells of ``rows`` must already be HTML; head is (text, numeric) pairs."""
    numeric = [n for _, n in head]
    out = ["<table><thead><tr>"]
    out += [f"<th{' class=num' if n else ''}>{_e(t)}</th>" for t, n in head]
    out.append("</tr></thead><tbody>")
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            cls = "num" if numeric[i] else ("token" if head[i][0] == "token" else "")
            cells.append(f"<td{f' class={cls}' if cls else ''}>{cell}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _summary(d: ReportData) -> str:
    s, m = d.stats, d.model
    size = "&ndash;" if s.size_bytes is None else f"{s.size_bytes / 1e6:.1f} MB"
    ham_max, spam_min = d.thresholds
    rows = [
        ["messages", _e(s.spam_messages), _e(s.ham_messages)],
        ["distinct tokens", _e(s.spam_tokens), _e(s.ham_tokens)],
        ["token occurrences", _e(s.spam_terms), _e(s.ham_terms)],
    ]
    facts = [
        ("vocabulary", f"{s.tokens} tokens"),
        ("model", f"{m.event_model}, alpha {m.alpha:g}, tempering {m.tempering:g}, min_evidence {m.min_evidence:g}"),
        ("verdicts", f"ham when the calibrated score P(spam) \u2264 {float(expit(ham_max)):.4g}, spam when it is > {float(expit(spam_min)):.4g}, unsure between"),
        ("database", s.database),
    ]
    if s.user:
        # The counts above are the user's own; the top words below are of
        # the model that classifies the user's mail (see store.shared_model).
        facts.insert(0, ("user", s.user))
    if d.classifying_model is not None:
        facts.insert(1, ("classified by", f"{d.classifying_model}: the top words and message features below are of that model; the counts above are this model's own"))
    fact_rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts)
    fact_rows += f"<tr><th>size</th><td>{size}</td></tr>"
    return '<section id="summary"><h2>Database</h2>' + _table([("", False), ("spam", True), ("ham", True)], rows) + f"<table><tbody>{fact_rows}</tbody></table></section>"


def _history(d: ReportData) -> str:
    out = ['<section id="history"><h2>Messages trained over time</h2>']
    if not d.history:
        out.append('<p class="note">No message is trained yet.</p>')
    else:
        first, last = d.history[0].day, d.history[-1].day
        spam = sum(x.spam for x in d.history)
        ham = sum(x.ham for x in d.history)
        when = f"on {first.isoformat()}" if first == last else f"on {len(d.history)} days from {first.isoformat()} to {last.isoformat()}"
        out.append(
            f"<p>The {spam} spam and {ham} ham in the model now were trained {when} (UTC). "
            "Forgotten messages are not counted; a relabelled one counts on the day of its new label.</p>"
        )
        png = plots.history_png([x.day for x in d.history], [x.spam for x in d.history], [x.ham for x in d.history])
        out.append(_img(png, "messages trained per day, and the running total of each class"))
    out.append("</section>")
    return "".join(out)


def _word_table(words: Sequence[WordScore], cls: str) -> str:
    rows = [[str(i), _e(w.token), str(w.spam_count), str(w.ham_count), f"{w.score:.3f}"] for i, w in enumerate(words, 1)]
    head = [("#", True), ("token", False), ("spam_count", True), ("ham_count", True), ("score", True)]
    return f'<div class="{cls}"><h3>{cls}</h3>' + _table(head, rows) + "</div>"


def _top_words(d: ReportData) -> str:
    out = ['<section id="top-words"><h2>Top words</h2>']
    if d.not_trained is not None:
        out.append(f'<p class="note">No top words: {_e(d.not_trained)}.</p></section>')
        return "".join(out)
    count = "its occurrences" if counts_occurrences(d.model.event_model) else "messages containing it"
    out.append(
        f"<p>Score = log P(token|class) &minus; log P(token|other class) under the {_e(d.model.event_model)} model "
        f"with alpha {d.model.alpha:g}; tokens with fewer than {d.min_count} counts ({count}, both classes together) "
        "are left out.</p>"
    )
    png = plots.top_words_png([(w.token, w.score) for w in d.spam_words], [(w.token, w.score) for w in d.ham_words], "most class-indicative tokens")
    out.append(_img(png, "bar chart of the most spam-indicative and the most ham-indicative tokens"))
    out.append('<div class="pair">' + _word_table(d.spam_words, "spam") + _word_table(d.ham_words, "ham") + "</div>")
    out.append("</section>")
    return "".join(out)


def _features(d: ReportData) -> str:
    out = ['<section id="features"><h2>Message features</h2>']
    fd = d.features
    shown = [f for f in fd.features if f.usable]
    held = (max((f.n[0] for f in fd.features), default=0), max((f.n[1] for f in fd.features), default=0))
    ham, spam = fd.messages
    cover = f"feature sums hold {held[0]} of the {ham} ham and {held[1]} of the {spam} spam in the model"
    if held != fd.messages:
        cover += " (messages trained before the sums were kept are in none of them)"
    if not shown:
        out.append(f'<p class="note">No feature densities: the {_e(cover)}; a normal density needs at least two messages of each class.</p></section>')
        return "".join(out)
    use = (
        f"The model adds their log-density ratios, times {fd.weight:g} (<code>[model] features = true</code>)."
        if fd.in_use
        else "The model does not use them now (<code>[model] features = false</code>); training keeps the sums either way."
    )
    out.append(
        "<p>Per class, the normal density Gaussian naive Bayes fits to each message feature from the stored sums "
        "n, &Sigma;x, &Sigma;x&sup2; (sample variance, at least 0.01), in the feature's own units, drawn over "
        f"the means &plusmn; 4 standard deviations of both classes. The {_e(cover)}. {use}</p>"
    )
    if len(shown) < len(fd.features):
        left_out = ", ".join(f.name for f in fd.features if not f.usable)
        out.append(f'<p class="note">Left out, with fewer than two messages of a class in their sums: {_e(left_out)}.</p>')
    png = plots.feature_densities_png([(f.name, f.unit, f.mean, f.sd) for f in shown])
    out.append(_img(png, "the ham and spam normal density of each message feature, means marked"))
    head = [("feature", False), ("unit", False), ("ham n", True), ("ham mean", True), ("ham sd", True)]
    head += [("spam n", True), ("spam mean", True), ("spam sd", True)]
    rows = [[_e(f.name), _e(f.unit), str(f.n[0]), f"{f.mean[0]:.4g}", f"{f.sd[0]:.4g}", str(f.n[1]), f"{f.mean[1]:.4g}", f"{f.sd[1]:.4g}"] for f in shown]
    out.append(_table(head, rows) + "</section>")
    return "".join(out)


def _scores(d: ReportData) -> str:
    out = ['<section id="scores"><h2>Score histogram</h2>']
    sample = d.scores
    if sample is None:
        out.append(
            '<p class="note">No scores file was given. Pass <code>--scores FILE</code> with the output of '
            "<code>spamfilter classify --format jsonl</code> or <code>spamfilter evaluate --out</code>.</p></section>"
        )
        return "".join(out)
    odds = sample.log_odds
    parts = [f"{odds.size} messages from <code>{_e(sample.path)}</code>"]
    if sample.verdicts is not None:
        v = np.array(sample.verdicts)
        parts.append(", ".join(f"{int((v == name).sum())} {name}" for name in (Decision.SPAM, Decision.UNSURE, Decision.HAM)))
    parts.append(f"median log-odds {float(np.median(odds)):.2f}")
    out.append("<p>" + "; ".join(parts) + ".</p>")
    png = plots.log_odds_histogram_png(odds, sample.is_spam, d.log_odds_bounds, Path(sample.path).name)
    out.append(_img(png, "histogram of the log-odds, with the verdict bounds"))
    out.append("</section>")
    return "".join(out)


def _evaluation(d: ReportData) -> str:
    out = ['<section id="evaluation"><h2>Evaluation</h2>']
    sample = d.scores
    if sample is None or sample.is_spam is None:
        why = "no scores file was given" if sample is None else "the scores file has no true labels"
        out.append(f'<p class="note">No evaluation figures: {why} (<code>spamfilter evaluate --out FILE</code> writes one).</p></section>')
        return "".join(out)
    y, odds = sample.is_spam, sample.log_odds
    n_spam, n_ham = int(y.sum()), int((~y).sum())
    if n_spam == 0 or n_ham == 0:
        out.append(f'<p class="note">No evaluation figures: the scores file has {n_spam} spam and {n_ham} ham; ROC needs both.</p></section>')
        return "".join(out)
    t = d.two_way_threshold
    ham_errors = int((odds[~y] > t).sum())
    spam_errors = int((odds[y] <= t).sum())
    rows = [
        ("messages", f"{odds.size} ({n_spam} spam, {n_ham} ham)"),
        ("1-ROCA", _num(100.0 * (1.0 - roc_area(y, odds)), 3, "%")),
        ("spam misclassified at 0.1% ham misclassified", _num(sm_at_hm(y, odds, 0.1), 2, "%")),
        (f"ham / spam misclassified at log-odds {t:.2f}", f"{_num(100.0 * ham_errors / n_ham, 2, '%')} / {_num(100.0 * spam_errors / n_spam, 2, '%')}"),
        ("lam", _num(lam_pct(ham_errors, n_ham, spam_errors, n_spam), 3, "%")),
    ]
    if sample.verdicts is not None:
        r = error_rates(y, list(sample.verdicts))
        rows += [
            ("ham: as spam / unsure", f"{_num(r.ham_as_spam, 2, '%')} / {_num(r.ham_unsure, 2, '%')}"),
            ("spam: as ham / unsure", f"{_num(r.spam_as_ham, 2, '%')} / {_num(r.spam_unsure, 2, '%')}"),
            ("accuracy", _num(r.accuracy, 2, "%")),
        ]
    # The calibration of the scores (the calibrated P(spam)) when the file
    # has them, else of expit(log-odds).
    c = calibration(y, odds if sample.probability is None else score_log_odds(sample.probability))
    rows += [
        ("log-loss (nats per message) / Brier score" + (" of expit(log-odds)" if sample.probability is None else " of the scores"), f"{c.log_loss:.4f} / {c.brier:.4f}"),
        (f"P(spam) ≤ {TAIL:g}: spam among them / ham they hold", f"{_num(c.low_tail_spam_pct, 2, '%')} of {c.low_tail} / {_num(c.ham_in_low_tail_pct, 1, '%')}"),
        (f"P(spam) ≥ {1 - TAIL:g}: ham among them / spam they hold", f"{_num(c.high_tail_ham_pct, 2, '%')} of {c.high_tail} / {_num(c.spam_in_high_tail_pct, 1, '%')}"),
    ]
    out.append("<table><tbody>" + "".join(f"<tr><th>{_e(k)}</th><td class=num>{v}</td></tr>" for k, v in rows) + "</tbody></table>")
    out.append(_img(plots.roc_png(y, odds, Path(sample.path).name), "ROC curve on logit axes"))
    shown = [b for b in c.bins if b.messages]
    png = plots.reliability_png(
        [b.mean_probability for b in shown], [b.spam / b.messages for b in shown], [b.messages for b in shown], "reliability: " + Path(sample.path).name
    )
    out.append(_img(png, "reliability diagram: predicted P(spam) against the share that was spam"))
    out.append("</section>")
    return "".join(out)


def render(d: ReportData) -> str:
    """The whole page as one HTML string."""
    csp = f"default-src 'none'; img-src data:; style-src {_csp_hash(_STYLE)}; script-src {_csp_hash(_SCRIPT)}; base-uri 'none'; form-action 'none'"
    titles = {
        "summary": "Database",
        "history": "Trained over time",
        "top-words": "Top words",
        "features": "Message features",
        "scores": "Scores",
        "evaluation": "Evaluation",
    }
    nav = "".join(f'<a href="#{sid}">{_e(titles[sid])}</a>' for sid in SECTIONS)
    body = _summary(d) + _history(d) + _top_words(d) + _features(d) + _scores(d) + _evaluation(d)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_e(csp)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>spamfilter report</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<header><h1>spamfilter report</h1><p>generated {_e(d.generated.isoformat(timespec='seconds'))}</p><nav>{nav}</nav></header>"
        f"{body}"
        f"<script>{_SCRIPT}</script>"
        "</body></html>\n"
    )
