"""``spamfilter report``: one self-contained HTML page, checked as text and in
a real browser (headless Chromium, the Debian package ``chromium``)."""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
from datetime import date, datetime, timezone
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from scipy.stats import norm
from typer.testing import CliRunner

from spamfilter.analysis import Analysed
from spamfilter.answers import Stats, Verdict
from spamfilter.cli import app, exitcodes
from spamfilter.cli.evaluate import write_scores
from spamfilter.config import Config, ModelConfig
from spamfilter.errors import ScoresFileError
from spamfilter.filter import Filter
from spamfilter.mail import read_messages
from spamfilter.nb.calibration import calibration
from spamfilter.tokenizer.features import FEATURE_NAMES, FEATURE_UNITS, SCALE
from spamfilter.tools import plots
from spamfilter.tools.evaluation import Scored
from spamfilter.tools.insight import FeatureDensities, FeatureDensity, Insight, TrainedDay, WordScore
from spamfilter.tools.report import SECTIONS, ReportData, ScoreSample, collect, read_scores, render
from tests.filter.test_service import HAM, SPAM, open_filter

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def evaluate_out(sample_db: str, sample: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ``evaluate --out`` file for the sample inbox, written by the command's own writer."""
    truth = dict(line.split("\t") for line in (sample / "inbox-truth.tsv").read_text().splitlines() if line.strip())
    with Filter.open(Config(), sample_db) as f:
        verdicts = [v for v in f.classify(read_messages([str(sample / "inbox.mbox")])) if isinstance(v, Verdict)]
    path = tmp_path_factory.mktemp("scores") / "scores.tsv"
    write_scores(path, [Scored(v.source, truth[v.source.rsplit(":", 1)[1]] == "spam", v.score, v.log_odds, v.verdict) for v in verdicts])
    return path


class Page(HTMLParser):
    """The tags and attributes of a page, and its text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def ids(self) -> list[str]:
        return [a["id"] or "" for _, a in self.tags if a.get("id")]

    def images(self) -> list[tuple[int, int]]:
        """Sizes of the embedded PNG images, in page order."""
        sizes = []
        for tag, attrs in self.tags:
            if tag == "img":
                src = attrs["src"] or ""
                assert src.startswith("data:image/png;base64,")
                png = base64.b64decode(src.split(",", 1)[1])
                assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
                sizes.append(struct.unpack(">II", png[16:24]))
        return sizes


def assert_self_contained(page: Page) -> None:
    for tag, attrs in page.tags:
        assert tag not in ("link", "iframe", "object", "embed", "base"), tag
        if tag == "script":
            assert "src" not in attrs
        for name in ("src", "href"):
            value = attrs.get(name)
            if value is not None:
                assert value.startswith(("data:", "#")), (tag, name, value)


def run_report(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.stderr if result.exit_code else result.stdout


def test_report_with_evaluation_scores_has_every_section_and_chart(sample_db: str, evaluate_out: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    code, text = run_report(["--db", sample_db, "report", "--out", str(out), "--scores", str(evaluate_out)])
    assert code == 0, text
    assert text.strip() == f"wrote {out}"
    page = Page(out.read_text(encoding="utf-8"))
    assert [i for i in page.ids() if i in SECTIONS] == list(SECTIONS)
    assert_self_contained(page)
    # history 900x350, top words of 20 rows 1200x(150 + 25 * 20), 7 feature panels in 3 rows 1200x900,
    # histogram 900x400, ROC 600x600, reliability 600x600
    assert page.images() == [(900, 350), (1200, 650), (1200, 900), (900, 400), (600, 600), (600, 600)]
    text = " ".join(page.text)
    assert "The 60 spam and 60 ham in the model now were trained on" in text
    assert "20 (10 spam, 10 ham)" in text and "1-ROCA" in text
    # The calibration rows are those of the evaluate file's own scores (the
    # calibrated P(spam)), not of expit(log-odds).
    sample = read_scores(evaluate_out)
    assert sample.is_spam is not None and sample.probability is not None
    c = calibration(sample.is_spam, np.log(sample.probability) - np.log1p(-sample.probability))
    assert "of the scores" in text
    assert f"{c.log_loss:.4f} / {c.brier:.4f}" in text
    assert f"of {c.low_tail} /" in text and f"of {c.high_tail} /" in text
    assert c.low_tail + c.high_tail > 0
    assert "url:scheme:http" in text  # the strongest spam token of the sample


def test_report_without_scores_says_so(sample_db: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    code, _ = run_report(["--db", sample_db, "report", "--out", str(out), "--n", "5"])
    assert code == 0
    page = Page(out.read_text(encoding="utf-8"))
    text = " ".join(page.text)
    assert "No scores file was given" in text and "No evaluation figures: no scores file was given" in text
    assert page.images() == [(900, 350), (1200, 275), (1200, 900)]


def test_a_page_that_cannot_be_written_whole_leaves_the_old_one(sample_db: str, tmp_path: Path) -> None:
    # Written in place, a page cut short by a full disk or a file size
    # limit was left half written, the report before it already gone.
    import resource
    import subprocess
    import sys

    out = tmp_path / "report.html"
    out.write_text("the report before")
    out.chmod(0o640)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, 50_000))

    done = subprocess.run(
        [sys.executable, "-m", "spamfilter", "--db", sample_db, "report", "--out", str(out), "--n", "5"], preexec_fn=limit, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 74 and "cannot write" in done.stderr, done.stderr
    assert out.read_text() == "the report before" and sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
    assert run_report(["--db", sample_db, "report", "--out", str(out), "--n", "5"])[0] == 0
    assert out.stat().st_size > 50_000 and oct(out.stat().st_mode & 0o777) == oct(0o640)  # whole, its mode kept
    # A link is written through, not replaced by a file (a link to
    # /proc/self/fd/1 or /dev/stdout was replaced, the page never sent);
    # a file with other hard links is written as it is, its links kept.
    real = tmp_path / "real.html"
    real.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(real)
    twin = tmp_path / "twin.html"
    os.link(real, twin)
    assert run_report(["--db", sample_db, "report", "--out", str(link), "--n", "5"])[0] == 0
    assert link.is_symlink() and real.stat().st_size > 50_000 and twin.read_text() == real.read_text()


def test_report_of_classify_jsonl_has_a_histogram_but_no_roc(sample_db: str, sample: Path, tmp_path: Path) -> None:
    verdicts = CliRunner().invoke(app, ["--db", sample_db, "classify", "--format", "jsonl", str(sample / "inbox.mbox")])
    scores = tmp_path / "verdicts.jsonl"
    scores.write_text(verdicts.stdout)
    out = tmp_path / "report.html"
    code, _ = run_report(["--db", sample_db, "report", "--out", str(out), "--scores", str(scores)])
    assert code == 0
    page = Page(out.read_text(encoding="utf-8"))
    assert page.images()[3:] == [(900, 400)]
    assert "the scores file has no true labels" in " ".join(page.text)


def test_a_histogram_of_log_odds_at_the_ends_of_the_floats_is_drawn() -> None:
    # Their span overflowed: "bins must increase monotonically" (exit 70).
    png = plots.log_odds_histogram_png(np.array([-1e308, 0.0, 1e308]), np.array([False, True, True]), (-2.0, 3.0), "extremes")
    assert png.startswith(b"\x89PNG") and struct.unpack(">II", png[16:24]) == (900, 400)


def test_an_untrained_database_still_gets_a_report(empty_db_url: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    code, _ = run_report(["--db", empty_db_url, "report", "--out", str(out)])
    assert code == 0
    text = " ".join(Page(out.read_text(encoding="utf-8")).text)
    assert "No message is trained yet." in text
    assert "No top words: the model needs at least one trained spam and one trained ham" in text
    assert "No feature densities: the feature sums hold 0 of the 0 ham and 0 of the 0 spam in the model;" in text


def test_read_scores_reads_classify_and_evaluate_outputs(tmp_path: Path) -> None:
    jsonl = tmp_path / "v.jsonl"
    jsonl.write_text('{"source": "a", "score": 0.5, "log_odds": 0.0, "verdict": "unsure"}\n\n{"source": "b", "score": 1.0, "log_odds": 40.5, "verdict": "spam"}\n')
    s = read_scores(jsonl)
    assert s.log_odds.tolist() == [0.0, 40.5] and s.is_spam is None and s.verdicts == ("unsure", "spam")
    tsv = tmp_path / "v.tsv"
    tsv.write_text("source\tgold\tscore\tlog_odds\tverdict\nodd\tname\tspam\t1.0\t3.5\tspam\nb\tham\t0.0\t-7\tham\n")
    s = read_scores(tsv)
    assert s.log_odds.tolist() == [3.5, -7.0] and s.is_spam is not None and s.is_spam.tolist() == [True, False]
    classify_tsv = tmp_path / "c.tsv"
    classify_tsv.write_text("source\tscore\tlog_odds\tverdict\na\t0.5\t0.000000\tunsure\n")
    assert read_scores(classify_tsv).is_spam is None
    # Labels in any case, as an index's.
    tsv.write_text("source\tgold\tscore\tlog_odds\tverdict\na\tSPAM\t1.0\t3.5\tspam\nb\tHam\t0.0\t-7\tham\n")
    assert read_scores(tsv).is_spam.tolist() == [True, False]  # type: ignore[union-attr]
    tsv.write_text("source\tgold\tscore\tlog_odds\tverdict\na\tmaybe\t1.0\t3.5\tspam\n")
    with pytest.raises(ScoresFileError, match="line 2: gold label 'maybe' is neither spam nor ham"):
        read_scores(tsv)


@pytest.mark.parametrize(
    "content",
    [
        "",
        "verdict    score   log_odds  source\nham 0.1 -2.0 a\n",  # classify's table is for people
        '{"source": "a", "score": 0.5}\n',
        '{"message": "a.eml", "score": 0.5, "log_odds": 0.0, "verdict": "unsure", "tokens": []}\n',  # explain --format json
        '{"source": "a", "score": 0.5, "log_odds": 1' + "0" * 400 + "}\n",  # no float holds it
        "source\tgold\tscore\tlog_odds\tverdict\na\tmaybe\t0.5\t0.0\tunsure\n",
        "source\tscore\tlog_odds\tverdict\na\t0.5\tnan\tunsure\n",
        # A row cut short in its verdict: the page lost its three-way
        # figures without a word.
        "source\tgold\tscore\tlog_odds\tverdict\na\tspam\t0.9\t2.5\tspam\nb\tham\t0.0012\t-16.1\th\n",
        '{"source": "a", "score": 0.5, "log_odds": 0.0, "verdict": "uns"}\n',
    ],
)
def test_a_file_that_is_not_scores_exits_65_with_one_line(sample_db: str, tmp_path: Path, content: str) -> None:
    scores = tmp_path / "bad.txt"
    scores.write_text(content)
    result = CliRunner().invoke(app, ["--db", sample_db, "report", "--out", str(tmp_path / "r.html"), "--scores", str(scores)])
    assert result.exit_code == exitcodes.DATA_ERROR
    assert result.stderr.startswith(f"spamfilter: {scores}") and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "r.html").exists()


def test_classify_tsv_of_files_named_with_tabs_and_line_breaks_reads_back(sample_db: str, tmp_path: Path) -> None:
    # A file name holding a tab or a line break broke classify's TSV row,
    # and `report --scores` refused classify's own output.
    folder = tmp_path / "box"
    folder.mkdir()
    names = ["a\tb.eml", "c\nd.eml", "e\\f\u2028g.eml"]
    for name in names:
        (folder / name).write_bytes(b"From: a@b\nSubject: lunch\n\nsee you at noon\n")
    # and a name that is not UTF-8
    with open(os.path.join(os.fsencode(folder), b"h\x85i.eml"), "wb") as fh:
        fh.write(b"From: a@b\nSubject: lunch\n\nsee you at noon\n")
    runner = CliRunner()
    out = runner.invoke(app, ["--db", sample_db, "classify", "--format", "tsv", "--jobs", "1", str(folder)])
    assert out.exit_code == 0, out.output
    rows = out.stdout.split("\n")[1:-1]
    assert len(rows) == 4 and all(row.count("\t") == 3 for row in rows)
    sources = sorted(row.split("\t")[0] for row in rows)
    escaped = [str(folder / n).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n") for n in names]
    assert sources == sorted([*escaped, f"{folder}/h\\x85i.eml"])
    # jsonl names the same file the same way: it wrote the lone surrogate
    # "\udc85", which strict JSON readers refuse.
    lines = runner.invoke(app, ["--db", sample_db, "classify", "--format", "jsonl", "--jobs", "1", str(folder)]).stdout.splitlines()
    assert f"{folder}/h\\x85i.eml" in [json.loads(line)["source"] for line in lines]
    assert f"{folder}/e\\\\f\u2028g.eml" in [json.loads(line)["source"] for line in lines]  # a backslash doubled: never read as a byte
    assert all("\\udc" not in line for line in lines)
    scores = tmp_path / "s.tsv"
    scores.write_text(out.stdout, encoding="utf-8")
    assert read_scores(scores).log_odds.size == 4
    report = runner.invoke(app, ["--db", sample_db, "report", "--out", str(tmp_path / "r.html"), "--scores", str(scores)])
    assert report.exit_code == 0, report.output


def test_report_option_errors_are_usage_errors(sample_db: str, tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["--db", sample_db, "report", "--out", str(tmp_path / "r.html"), "--scores", str(tmp_path / "none")])
    assert missing.exit_code == exitcodes.USAGE
    unwritable = runner.invoke(app, ["--db", sample_db, "report", "--out", str(tmp_path / "no" / "dir" / "r.html")])
    assert unwritable.exit_code == exitcodes.USAGE and "no such folder" in unwritable.stderr
    assert "Traceback" not in missing.output + unwritable.output
    # The path is checked before the work: the table is not printed first.
    plot = runner.invoke(app, ["--db", sample_db, "top-words", "--plot", str(tmp_path / "no" / "top.png")])
    assert plot.exit_code == exitcodes.USAGE and plot.stdout == ""
    if Path("/dev/full").is_char_device():
        full = runner.invoke(app, ["--db", sample_db, "report", "--out", "/dev/full"])
        assert full.exit_code == exitcodes.OUTPUT_ERROR == 74, full.output
        assert full.stderr == "spamfilter: cannot write /dev/full: No space left on device\n"


# -- message features -------------------------------------------------------------


def trained_vectors(f: Filter, sample: Path) -> dict[str, np.ndarray]:
    """The fixed-point feature vectors of the sample's trained messages, by class, (n, F)."""
    out = {}
    for cls in ("ham", "spam"):
        analysed = [f.analyser.one(item) for item in read_messages([str(sample / f"train-{cls}.mbox")])]
        out[cls] = np.array([a.features for a in analysed if isinstance(a, Analysed)], dtype=np.int64)
    return out


def mean_and_sd(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """mu and sigma of every column of fixed-point values x, computed from
    n, sum x and sum x^2 as floats: the sample variance, floored at 0.01."""
    n, s1, s2 = x.shape[0], x.sum(axis=0) / SCALE, (x.astype(np.float64) ** 2).sum(axis=0) / SCALE**2
    var = (s2 - s1 * s1 / n) / (n - 1)
    return s1 / n, np.sqrt(np.maximum(var, 0.01))


def test_feature_densities_are_the_normals_of_the_trained_vectors(sample_db: str, sample: Path) -> None:
    with Filter.open(Config(), sample_db) as f:
        fd = Insight(f).feature_densities()
        x = trained_vectors(f, sample)
    assert fd.messages == (60, 60) and not fd.in_use
    assert [d.name for d in fd.features] == list(FEATURE_NAMES) and len(FEATURE_UNITS) == len(FEATURE_NAMES)
    (ham_mu, ham_sd), (spam_mu, spam_sd) = mean_and_sd(x["ham"]), mean_and_sd(x["spam"])
    for i, d in enumerate(fd.features):
        assert d.usable and d.n == (60, 60)
        assert d.mean == pytest.approx((ham_mu[i], spam_mu[i]), rel=1e-9, abs=1e-12)
        assert d.sd == pytest.approx((ham_sd[i], spam_sd[i]), rel=1e-9)
    # The sample differs between the classes in size and HTML, not in Received lines.
    assert abs(fd.features[0].mean[1] - fd.features[0].mean[0]) > 0.05
    assert fd.features[FEATURE_NAMES.index("received")].sd == (0.1, 0.1)


def test_the_plotted_curves_are_those_normals_over_the_means_plus_minus_4_sd(sample_db: str, sample: Path) -> None:
    with Filter.open(Config(), sample_db) as f:
        fd = Insight(f).feature_densities()
        x = trained_vectors(f, sample)
    fig = plots.feature_densities_figure([(d.name, d.unit, d.mean, d.sd) for d in fd.features])
    try:
        (ham_mu, ham_sd), (spam_mu, spam_sd) = mean_and_sd(x["ham"]), mean_and_sd(x["spam"])
        panels = [ax for ax in fig.axes if ax.get_visible()]
        assert [ax.get_title() for ax in panels] == list(FEATURE_NAMES)
        assert [ax.get_xlabel() for ax in panels] == list(FEATURE_UNITS)
        for i, ax in enumerate(panels):
            ham, ham_mean, spam, spam_mean = (line.get_xydata() for line in ax.get_lines())
            mu, sd = (ham_mu[i], spam_mu[i]), (ham_sd[i], spam_sd[i])
            assert ham[0, 0] == pytest.approx(min(m - 4 * s for m, s in zip(mu, sd)), rel=1e-9, abs=1e-12)
            assert ham[-1, 0] == pytest.approx(max(m + 4 * s for m, s in zip(mu, sd)), rel=1e-9, abs=1e-12)
            assert ham[:, 1] == pytest.approx(norm.pdf(ham[:, 0], mu[0], sd[0]), rel=1e-9)
            assert spam[:, 1] == pytest.approx(norm.pdf(spam[:, 0], mu[1], sd[1]), rel=1e-9)
            # The means are marked (vertical lines) and labelled with their values.
            assert ham_mean[:, 0] == pytest.approx([mu[0], mu[0]]) and spam_mean[:, 0] == pytest.approx([mu[1], mu[1]])
            assert [t.get_text() for t in ax.texts] == [f"ham \u03bc = {mu[0]:.3g}", f"spam \u03bc = {mu[1]:.3g}"]
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_the_features_section_says_whether_the_model_uses_them(sample_db: str) -> None:
    config = Config(model=ModelConfig(features=True, feature_weight=0.5))
    with Filter.open(config, sample_db) as f:
        data = collect(f, scores=None, now=datetime(2024, 5, 1, tzinfo=timezone.utc))
    page = render(data)
    assert "The feature sums hold 60 of the 60 ham and 60 of the 60 spam in the model." in page
    assert "The model adds their log-density ratios, times 0.5 (<code>[model] features = true</code>)." in page


def report_page(f: Filter) -> Page:
    return Page(render(collect(f, scores=None, now=datetime(2024, 5, 1, tzinfo=timezone.utc))))


def test_a_model_without_feature_sums_says_so_instead_of_plotting(tmp_path: Path) -> None:
    with open_filter(tmp_path, "old") as f:
        f.train([(False, m) for m in HAM] + [(True, m) for m in SPAM])
        # A model trained before the sums were kept (schema revision 0005) has none.
        with f.store.engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM feature_stats"))
        page = report_page(f)
    text = " ".join(page.text)
    assert (
        "No feature densities: the feature sums hold 0 of the 4 ham and 0 of the 3 spam in the model "
        "(messages trained before the sums were kept are in none of them); a normal density needs at least two messages of each class."
    ) in text
    assert len(page.images()) == 2  # history and top words, no feature densities


def test_a_class_with_one_message_has_no_densities(tmp_path: Path) -> None:
    with open_filter(tmp_path, "one") as f:
        f.train([(False, m) for m in HAM] + [(True, SPAM[0])])
        text = " ".join(report_page(f).text)
    assert "No feature densities: the feature sums hold 4 of the 4 ham and 1 of the 1 spam in the model; a normal density" in text


HOSTILE = '<script>alert("x")</script>\x1b[2J"><img src=http://evil.example/x.png>'


def hostile_report() -> str:
    """A page whose tokens and paths are written to break out of the HTML."""
    words = (WordScore(HOSTILE, 9, 0, 4.0), WordScore("$\\frac{1}{0}$ ^_^", 5, 1, 2.0))
    return render(
        ReportData(
            generated=datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc),
            stats=Stats(1, 2, 3, 2, 2, 10, 20, f"sqlite:///{HOSTILE}.db", None, "multinomial-binary", 0.1),
            model=ModelConfig(),
            thresholds=(-1.4, 3.9),
            log_odds_bounds=(-2.0, float("inf")),
            two_way_threshold=2.3,
            history=(TrainedDay(date(2024, 4, 1), 1, 1), TrainedDay(date(2024, 4, 30), 0, 1)),
            spam_words=words,
            ham_words=(WordScore("\u202eevil", 0, 3, 1.0),),
            min_count=5,
            not_trained=None,
            features=FeatureDensities((2, 1), False, 1.0, (FeatureDensity("size", "log(1 + bytes)", (2, 1), (7.0, 8.0), (0.5, 0.1), False),)),
            scores=ScoreSample(HOSTILE, np.array([-3.0, 0.5, 8.0]), np.array([False, False, True]), ("ham", "unsure", "spam")),
        )
    )


def test_hostile_tokens_and_paths_are_escaped() -> None:
    text = hostile_report()
    page = Page(text)
    assert "<script>alert" not in text and "\x1b" not in text and "\u202e" not in text
    assert [tag for tag, _ in page.tags].count("script") == 1
    assert_self_contained(page)
    assert '<script>alert("x")</script>\\x1b[2J' in " ".join(page.text)


# -- in a browser ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> Path:
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} not found (Debian package chromium)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return CHROMIUM


def browse(chromium: Path, page: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(chromium),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            *extra,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def console_messages(stderr: str) -> list[str]:
    """What the page wrote to the console (errors, CSP violations, uncaught exceptions)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def check_in_browser(chromium: Path, page: Path, tmp_path: Path) -> str:
    """Load the page twice (DOM dump, screenshot); the DOM after its script ran."""
    dom = browse(chromium, page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_messages(dom.stderr) == []
    shot = tmp_path / "report.png"
    screenshot = browse(chromium, page, tmp_path, f"--screenshot={shot}", "--window-size=1200,2000")
    assert screenshot.returncode == 0, screenshot.stderr[-2000:]
    assert console_messages(screenshot.stderr) == []
    assert struct.unpack(">II", shot.read_bytes()[16:24]) == (1200, 2000)
    return dom.stdout


def test_the_report_loads_in_chromium_without_console_errors(chromium: Path, sample_db: str, evaluate_out: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    code, text = run_report(["--db", sample_db, "report", "--out", str(out), "--scores", str(evaluate_out)])
    assert code == 0, text
    dom = check_in_browser(chromium, out, tmp_path)
    assert 'data-ready="1"' in dom  # its script ran: the CSP hash matched
    for section in SECTIONS:
        assert f'<section id="{section}">' in dom
    assert dom.count('src="data:image/png;base64,') == 6  # history, top words, features, histogram, ROC, reliability


def test_the_hostile_report_loads_in_chromium_without_running_anything(chromium: Path, tmp_path: Path) -> None:
    out = tmp_path / "hostile.html"
    out.write_text(hostile_report(), encoding="utf-8")
    dom = check_in_browser(chromium, out, tmp_path)
    assert 'data-ready="1"' in dom
    assert dom.count("<script>") == 1


def test_the_browser_check_sees_console_errors_and_blocked_loads(chromium: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.html"
    policy = "default-src 'none'; script-src 'unsafe-inline'"
    broken.write_text(
        f'<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" content="{policy}"></head>'
        '<body><img src="https://example.com/x.png"><script>console.error("boom"); missingFunction();</script></body></html>'
    )
    messages = console_messages(browse(chromium, broken, tmp_path, "--dump-dom").stderr)
    assert any("boom" in m for m in messages)
    assert any("Uncaught ReferenceError" in m for m in messages)
    assert any("Content Security Policy" in m for m in messages)


def test_jsonl_file_round_trip(tmp_path: Path) -> None:
    rows = [{"source": "x", "score": 0.25, "log_odds": -1.0986, "verdict": "ham"}]
    path = tmp_path / "v.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert read_scores(path).log_odds.tolist() == [-1.0986]


def test_a_device_is_no_scores_file() -> None:
    # report --scores /dev/zero read for ever.
    from spamfilter.tools.report import read_scores

    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    with pytest.raises(ScoresFileError, match="/dev/zero: a device, not a file of scores"):
        read_scores(Path("/dev/zero"))
