"""`spamfilter evaluate`: online and cross-validated runs over a TREC index."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit
from typer.testing import CliRunner

from spamfilter.answers import Verdict
from spamfilter.cli import app, exitcodes
from spamfilter.config import Config
from spamfilter.errors import NotTrainedError
from spamfilter.filter import Filter
from spamfilter.mail import read_index, read_messages
from spamfilter.nb.calibration import MAP_BINS, CalibrationMap, recorded
from spamfilter.tools.evaluation import stratified_folds

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TREC index over the generated sample, one file per message, classes interleaved."""
    out = tmp_path_factory.mktemp("eval")
    subprocess.run([sys.executable, str(REPO / "corpora" / "make_sample.py"), "--out", str(out)], check=True, capture_output=True)
    lines = []
    spam = list(read_messages([str(out / "train-spam.mbox")]))[:30]
    ham = list(read_messages([str(out / "train-ham.mbox")]))[:30]
    for i in range(30):
        for label, item in (("ham", ham[i]), ("spam", spam[i])):
            path = out / "msgs" / f"{label}-{i:02d}.eml"
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(item.raw)
            lines.append(f"{label} msgs/{path.name}")
    (out / "index").write_text("\n".join(lines) + "\n")
    return out / "index"


def read_tsv(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text().splitlines()]


def manual_online(index: Path, margin: float | None) -> tuple[list[tuple[str, str, float, float, str]], int]:
    """The online protocol by hand: classify, then train when the rule says
    (margin None: every message; else errors, unsure and those within
    ``margin`` nats of a decision bound); the rows and how many were trained."""
    manual: list[tuple[str, str, float, float, str]] = []
    trained = 0
    # The calibration record of every message scored so far, trained or not
    # (``train`` itself records only those it learns).
    history = np.zeros((2, MAP_BINS))
    with Filter.open(Config(), "sqlite://") as f:
        t = f.thresholds
        for is_spam, item in read_index(str(index)):
            try:
                v = next(iter(f.classify([item])))
                assert isinstance(v, Verdict)
                p = float(CalibrationMap(history).probability(np.array([v.log_odds]))[0])
                verdict = "spam" if p > expit(t.spam_min) else "ham" if p <= expit(t.ham_max) else "unsure"
                got = (v.source, "spam" if is_spam else "ham", p, v.log_odds, verdict)
                decay, added = recorded(np.array([v.log_odds]), np.array([is_spam]))
                history = decay * history + added
                # the learning rule reads the log-odds themselves
                own = "spam" if v.log_odds > t.spam_min else "ham" if v.log_odds <= t.ham_max else "unsure"
            except NotTrainedError:
                got = (item.source, "spam" if is_spam else "ham", 0.5, 0.0, "unsure")
                own = "unsure"
            manual.append(got)
            right = own == got[1]
            if margin is None or not right or min(abs(got[3] - b) for b in (t.ham_max, t.spam_min)) < margin:
                f.train([(is_spam, item)])
                trained += 1
    return manual, trained


@pytest.mark.parametrize(("args", "margin"), [(["--train-mode", "teft"], None), ([], 12.0), (["--margin", "2"], 2.0), (["--train-mode", "tune", "--margin", "0.5"], 0.5)])
def test_online_scores_equal_a_manual_classify_then_train_loop(index: Path, tmp_path: Path, args: list[str], margin: float | None) -> None:
    out = tmp_path / "scores.tsv"
    result = CliRunner().invoke(app, ["evaluate", "--index", str(index), "--out", str(out), "--format", "json", *args])
    assert result.exit_code == 0, result.output
    rows = read_tsv(out)
    assert rows[0] == ["source", "gold", "score", "log_odds", "verdict"]
    manual, trained = manual_online(index, margin)
    got = [(r[0], r[1], float(r[2]), float(r[3]), r[4]) for r in rows[1:]]
    assert [(r[0], r[1], r[3], r[4]) for r in got] == [(m[0], m[1], m[3], m[4]) for m in manual]
    assert [r[2] for r in got] == pytest.approx([m[2] for m in manual], rel=1e-12)

    report = json.loads(result.stdout)
    assert (report["messages"], report["spam"], report["ham"], report["trained"]) == (60, 30, 30, trained)
    assert report["protocol"] == "online"
    assert report["learned"] == ("every message" if margin is None else f"errors and those scored right by less than {margin:g} nats")
    # The first message meets an empty model: the rest are learnable.
    assert report["one_minus_roca"] < 5.0
    if margin == 0.5:
        assert trained < 40  # the rule does leave messages out on this stream


def test_train_with_a_train_mode_trains_what_the_online_run_trains(index: Path, tmp_path: Path) -> None:
    """`train --train-mode tune --index` scores in index order and trains
    exactly the messages the online run trains; the rest are counted as left out."""
    _, trained = manual_online(index, 0.5)
    db = f"sqlite:///{tmp_path / 'm.db'}"
    runner = CliRunner()
    result = runner.invoke(app, ["--db", db, "train", "--index", str(index), "--train-mode", "tune", "--margin", "0.5"])
    assert result.exit_code == 0, result.output
    assert f"{60 - trained} left out" in result.stdout
    stats = json.loads(runner.invoke(app, ["--db", db, "stats", "--format", "json"]).stdout)
    assert stats["spam_messages"] + stats["ham_messages"] == trained < 60
    again = runner.invoke(app, ["--db", db, "train", "--index", str(index)])
    assert f"trained {30 - stats['spam_messages']} spam, {30 - stats['ham_messages']} ham; {trained} already trained" in again.stdout


def test_train_on_error_trains_fewer_messages_than_train_everything(index: Path) -> None:
    runner = CliRunner()
    teft = json.loads(runner.invoke(app, ["evaluate", "--index", str(index), "--train-mode", "teft", "--format", "json"]).stdout)
    toe = json.loads(runner.invoke(app, ["evaluate", "--index", str(index), "--train-mode", "toe", "--format", "json"]).stdout)
    assert teft["trained"] == 60
    assert 2 <= toe["trained"] < 60


def test_cross_validation_is_reproducible_and_stratified(index: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    a, b = tmp_path / "a.tsv", tmp_path / "b.tsv"
    for out in (a, b):
        result = runner.invoke(app, ["evaluate", "--index", str(index), "--protocol", "cv", "--folds", "5", "--seed", "7", "--out", str(out), "--format", "json"])
        assert result.exit_code == 0, result.output
    assert a.read_bytes() == b.read_bytes()
    report = json.loads(result.stdout)
    assert report["protocol"] == "cv5"
    assert report["trained"] == 5 * 48  # each fold trains on the other four
    labels = [s for s, _ in read_index(str(index))]
    folds = stratified_folds(labels, 5, 7)
    for k in range(5):
        members = [s for s, f in zip(labels, folds) if f == k]
        assert (sum(members), len(members)) == (6, 12)


def test_evaluate_never_touches_the_default_database(index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    default = tmp_path / "user.db"
    monkeypatch.setenv("SPAMFILTER_DB", f"sqlite:///{default}")
    result = CliRunner().invoke(app, ["evaluate", "--index", str(index)])
    assert result.exit_code == 0
    assert not default.exists()
    assert result.stdout.splitlines()[0].split() == ["protocol", "online"]


def test_evaluate_uses_an_explicit_database_when_given(index: Path, db_url: str) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["--db", db_url, "evaluate", "--index", str(index), "--train-mode", "teft"]).exit_code == 0
    stats = json.loads(runner.invoke(app, ["--db", db_url, "stats", "--format", "json"]).stdout)
    assert (stats["spam_messages"], stats["ham_messages"]) == (30, 30)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_roc_and_learning_curve_are_png_files_of_the_documented_size(index: Path, tmp_path: Path) -> None:
    roc, curve = tmp_path / "roc.png", tmp_path / "curve.png"
    result = CliRunner().invoke(app, ["evaluate", "--index", str(index), "--roc", str(roc), "--learning-curve", str(curve)])
    assert result.exit_code == 0, result.output
    assert png_size(roc) == (600, 600)
    assert png_size(curve) == (700, 400)


def test_roc_points_follow_the_thresholds() -> None:
    from spamfilter.tools.plots import roc_points

    y = np.array([0, 0, 1, 1], dtype=bool)
    odds = np.array([-2.0, 1.0, 0.0, 3.0])
    hm, sm = roc_points(y, odds)
    # thresholds -2, 0, 1, 3: spam is "score > threshold"
    assert hm.tolist() == [50.0, 50.0, 0.0, 0.0]
    assert sm.tolist() == [0.0, 50.0, 50.0, 100.0]


def test_a_missing_index_exits_66_for_evaluate_train_and_tune(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = str(tmp_path / "no-such-index")
    for args in (["evaluate", "--index", missing], ["train", "--index", missing], ["tune", "--index", missing]):
        result = runner.invoke(app, ["--db", f"sqlite:///{tmp_path / 'x.db'}", *args])
        assert result.exit_code == 66, (args, result.output)
        assert "Traceback" not in result.output


@pytest.mark.parametrize("option", ["--out", "--roc", "--learning-curve"])
def test_an_output_path_that_cannot_be_written_is_refused_before_the_run(index: Path, tmp_path: Path, option: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import spamfilter.cli.evaluate as command

    ran: list[object] = []
    monkeypatch.setattr(command, "run_online", lambda *a, **k: ran.append(a))
    for target, why in ((tmp_path / "no-such-folder" / "x", "no such folder"), (tmp_path, "it is a folder")):
        result = CliRunner().invoke(app, ["evaluate", "--index", str(index), option, str(target)])
        assert result.exit_code == 64, result.output
        assert f"Error: {option} {target}: {why}" in result.stderr
    assert ran == []  # nothing was evaluated


def test_a_full_disk_under_the_output_is_exit_74_not_an_internal_error(index: Path) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "spamfilter", "evaluate", "--index", str(index)], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert result.returncode == 74, result.stderr
    assert result.stderr.strip() == "spamfilter: cannot write the output: No space left on device"
    result = subprocess.run([sys.executable, "-m", "spamfilter", "evaluate", "--index", str(index), "--out", "/dev/full"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 74, result.stderr
    assert result.stderr.strip() == "spamfilter: cannot write /dev/full: No space left on device"


# -- what a new user met: one class, NaN, jargon ------------------------------------


@pytest.mark.parametrize("protocol", ["online", "cv"])
def test_a_single_class_index_is_refused_with_65_and_draws_nothing(index: Path, tmp_path: Path, protocol: str) -> None:
    spam_only = index.parent / "index-spam-only"
    spam_only.write_text("".join(line + "\n" for line in index.read_text().splitlines() if line.startswith("spam ")))
    roc = tmp_path / "roc.png"
    args = ["evaluate", "--index", str(spam_only), "--protocol", protocol, *(["--folds", "3"] if protocol == "cv" else []), "--format", "json", "--roc", str(roc)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 65
    assert result.stdout == ""
    assert result.stderr.strip() == "spamfilter: the stream has 30 spam and 0 ham that could be read: measuring a filter needs at least one of each"
    assert not roc.exists()


def test_evaluate_json_never_holds_nan() -> None:
    from spamfilter.cli.evaluate import report_json
    from spamfilter.tools.evaluation import ErrorRates, EvalReport

    rates = ErrorRates(ham_as_spam=0.0, spam_as_ham=50.0, ham_unsure=0.0, spam_unsure=0.0, accuracy=75.0)
    report = EvalReport(
        protocol="online",
        messages=4,
        spam=2,
        ham=2,
        refused=0,
        trained=4,
        one_minus_roca=0.0,
        sm_at_hm01=50.0,
        hm=0.0,
        sm=50.0,
        lam=12.5,
        rates=rates,
        classify_per_second=float("nan"),
        train_per_second=float("inf"),
        two_way_threshold=2.3,
    )
    data = json.loads(report_json(report))
    assert (data["classify_per_second"], data["train_per_second"], data["lam"]) == (None, None, 12.5)
    assert data["rates"]["accuracy"] == 75.0


def test_the_table_says_each_figure_in_words_and_which_are_two_way(index: Path) -> None:
    result = CliRunner().invoke(app, ["evaluate", "--index", str(index)])
    report = json.loads(CliRunner().invoke(app, ["evaluate", "--index", str(index), "--format", "json"]).stdout)
    lines = result.stdout.splitlines()
    labels = [line.rsplit("  ", 1)[0].strip() for line in lines]
    assert labels[3:13] == [
        "area above the ROC curve (1-ROCA)",
        "spam let through when 0.1% of ham is filed as spam (sm at 0.1% hm)",
        "two-way, spam above the loss matrix's threshold, no unsure:",
        "ham filed as spam (hm)",
        "spam let through (sm)",
        "logistic average of the two (lam)",
        "three-way, the verdicts spam / unsure / ham:",
        "ham filed as spam / unsure",
        "spam let through / unsure",
        "accuracy",
    ]
    assert lines[6].split()[-1] == f"{report['hm']:.3f}%"
    assert lines[11].split()[-1] == f"{report['rates']['spam_unsure']:.3f}%"


def test_the_learning_curve_ham_line_ends_at_the_two_way_hm(index: Path, tmp_path: Path) -> None:
    from spamfilter.tools.plots import learning_curve_series

    out = tmp_path / "scores.tsv"
    result = CliRunner().invoke(app, ["evaluate", "--index", str(index), "--format", "json", "--out", str(out)])
    report = json.loads(result.stdout)
    rows = read_tsv(out)[1:]
    y = np.array([r[1] == "spam" for r in rows])
    odds = np.array([float(r[3]) for r in rows])
    series = dict(learning_curve_series(y, odds, report["two_way_threshold"]))
    assert list(series) == ["all messages, two-way", "ham filed as spam, two-way (hm)", "spam let through, two-way (sm)"]
    assert series["ham filed as spam, two-way (hm)"][-1] == pytest.approx(report["hm"], rel=1e-12)
    assert series["spam let through, two-way (sm)"][-1] == pytest.approx(report["sm"], rel=1e-12)


def test_windowed_roca_in_the_table_and_json_with_out_rows_in_index_order(index: Path, tmp_path: Path) -> None:
    from spamfilter.tools.evaluation import windowed_roca

    out = tmp_path / "scores.tsv"
    args = ["evaluate", "--index", str(index), "--window", "25", "--jobs", "2", "--out", str(out)]
    report = json.loads(CliRunner().invoke(app, [*args, "--format", "json"]).stdout)
    rows = read_tsv(out)[1:]
    # --out follows the index (read ahead on two workers or not)
    assert [Path(r[0]).name for r in rows] == [line.split()[1].split("/")[-1] for line in index.read_text().splitlines()]
    y = np.array([r[1] == "spam" for r in rows])
    odds = np.array([float(r[3]) for r in rows])
    expected = windowed_roca(y, odds, 25)
    # 60 messages in windows of 25: 1-25, 26-50, 51-60
    assert [(w["start"], w["end"], w["spam"], w["ham"]) for w in report["windows"]] == [(0, 25, 12, 13), (25, 50, 13, 12), (50, 60, 5, 5)]
    assert [w["one_minus_roca"] for w in report["windows"]] == [w.one_minus_roca for w in expected]
    lines = CliRunner().invoke(app, args).stdout.splitlines()
    at = lines.index("1-ROCA per window of 25 messages:")
    assert [line.split()[1] for line in lines[at + 1 :]] == ["1-25", "26-50", "51-60"]
    assert [line.split()[-1] for line in lines[at + 1 :]] == [f"{w.one_minus_roca:.3f}%" for w in expected]


def test_the_default_window_is_a_fifth_of_a_short_stream(index: Path) -> None:
    report = json.loads(CliRunner().invoke(app, ["evaluate", "--index", str(index), "--format", "json"]).stdout)
    assert [(w["start"], w["end"]) for w in report["windows"]] == [(0, 12), (12, 24), (24, 36), (36, 48), (48, 60)]


@pytest.mark.parametrize("protocol", ["online", "split", "cv"])
def test_an_unreadable_message_is_named_counted_where_it_was_and_exits_65(index: Path, tmp_path: Path, protocol: str) -> None:
    # An empty file second in the stream: in the training head of a split,
    # so not one of the mail it judged; it was counted there, and nothing
    # on stderr said which file it was.
    empty = index.parent / "msgs" / "empty.eml"
    empty.write_bytes(b"")
    lines = [f"{label} {index.parent / path}" for label, path in (line.split(" ", 1) for line in index.read_text().splitlines())]
    with_empty = tmp_path / "index"
    with_empty.write_text("\n".join([lines[0], "spam " + str(empty), *lines[1:]]) + "\n")
    args = ["evaluate", "--index", str(with_empty), "--protocol", protocol, "--format", "json"]
    if protocol == "cv":
        args += ["--folds", "3"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == exitcodes.DATA_ERROR == 65, result.output
    assert f"spamfilter: skipped {empty}: empty message\n" in result.stderr
    report = json.loads(result.stdout)
    assert [u["source"] for u in report["unreadable"]] == [str(empty)]
    judged = 61 - 61 // 2 if protocol == "split" else 60  # the split judges the later half
    assert report["messages"] == judged + (0 if protocol == "split" else 1)
    assert report["refused"] == (0 if protocol == "split" else 1)


def test_tune_names_an_unreadable_message_and_exits_65(index: Path, tmp_path: Path) -> None:
    empty = index.parent / "msgs" / "empty-tune.eml"
    empty.write_bytes(b"")
    with_empty = tmp_path / "index"
    lines = [f"{label} {index.parent / path}" for label, path in (line.split(" ", 1) for line in index.read_text().splitlines())]
    with_empty.write_text("\n".join(lines) + f"\nham {empty}\n")
    result = CliRunner().invoke(
        app, ["--db", f"sqlite:///{tmp_path / 'db'}", "tune", "--index", str(with_empty), "--model", "multinomial-binary", "--alpha", "0.1", "--min-evidence", "0"]
    )
    assert result.exit_code == exitcodes.DATA_ERROR == 65, result.output
    assert result.stderr.count(f"spamfilter: skipped {empty}: empty message\n") == 1  # read for each tokenizer setting, named once


def test_split_trains_into_an_explicit_db_and_cv_refuses_one(index: Path, tmp_path: Path) -> None:
    db = tmp_path / "split.db"
    split = CliRunner().invoke(app, ["--db", f"sqlite:///{db}", "evaluate", "--index", str(index), "--protocol", "split", "--format", "json"])
    assert split.exit_code == 0, split.output
    stats = CliRunner().invoke(app, ["--db", f"sqlite:///{db}", "stats", "--format", "json"])
    assert (json.loads(stats.stdout)["spam_messages"], json.loads(stats.stdout)["ham_messages"]) == (15, 15)  # the first half: the run's own head
    cv = CliRunner().invoke(app, ["--db", f"sqlite:///{tmp_path / 'cv.db'}", "evaluate", "--index", str(index), "--protocol", "cv", "--folds", "3"])
    assert cv.exit_code == exitcodes.USAGE and "cross-validation" in cv.stderr
    assert not (tmp_path / "cv.db").exists()


def test_a_split_whose_head_lacks_a_class_and_cv_with_one_of_a_class_are_refused_with_65(index: Path, tmp_path: Path) -> None:
    # They exited 69, "the model needs at least one trained spam and one
    # trained ham", without a word about --head or the folds.
    lines = [f"{label} {index.parent / path}" for label, path in (line.split(" ", 1) for line in index.read_text().splitlines())]
    ordered = tmp_path / "spam-first"
    ordered.write_text("\n".join(sorted(lines, key=lambda line: not line.startswith("spam"))) + "\n")  # 30 spam, then 30 ham
    split = CliRunner().invoke(app, ["evaluate", "--index", str(ordered), "--protocol", "split", "--head", "20"])
    assert split.exit_code == exitcodes.DATA_ERROR == 65
    assert split.stderr == "spamfilter: the first 20 messages, the ones trained on, hold 20 spam and 0 ham: a model needs both (--head moves the split)\n"
    one_spam = tmp_path / "one-spam"
    one_spam.write_text("\n".join([next(line for line in lines if line.startswith("spam")), *(line for line in lines if line.startswith("ham"))]) + "\n")
    cv = CliRunner().invoke(app, ["evaluate", "--index", str(one_spam), "--protocol", "cv", "--folds", "3"])
    assert cv.exit_code == 65
    assert "cross-validation needs two of each" in cv.stderr


def test_a_split_whose_classified_part_has_one_class_says_so(index: Path) -> None:
    # All the ham first: the second half, the part classified, is all spam.
    # The message blamed "the stream", which holds both.
    lines = index.read_text().splitlines()
    ordered = index.parent / "index-ham-first"
    ordered.write_text("".join(line + "\n" for line in sorted(lines, key=lambda line: not line.startswith("ham "))))
    n_ham = sum(line.startswith("ham ") for line in lines)
    result = CliRunner().invoke(app, ["evaluate", "--index", str(ordered), "--protocol", "split", "--head", str(n_ham)])
    assert result.exit_code == 65
    n_spam = len(lines) - n_ham
    assert result.stderr.strip() == (
        f"spamfilter: the messages after the first {n_ham}, the ones classified, hold {n_spam} spam and 0 ham that could be read: "
        "measuring a filter needs at least one of each (--head moves the split)"
    )


def _reader_gone(args: list[str], cwd: Path) -> int:
    """Run spamfilter with its stdout a pipe whose reader has left (as
    `| true` leaves it); its exit code."""
    proc = subprocess.Popen([sys.executable, "-m", "spamfilter", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    proc.stdout.close()
    return proc.wait(timeout=300)


def test_the_files_are_written_when_the_reader_of_the_report_leaves(index: Path, tmp_path: Path) -> None:
    # `evaluate ... --out scores.tsv | head -4` printed the report first: the
    # closed pipe ended the command, exit 0, without the file.
    out = tmp_path / "scores.tsv"
    config = tmp_path / "none.toml"
    config.write_text("")
    assert _reader_gone(["--config", str(config), "evaluate", "--index", str(index), "--out", str(out)], tmp_path) == 0
    assert len(read_tsv(out)) == 1 + 60


def test_cross_validation_refuses_more_folds_than_messages(index: Path, tmp_path: Path) -> None:
    # 100 folds of 60 messages: the 40 empty folds each trained all 60 and
    # scored nothing (and "trained" said 5,940).
    short = tmp_path / "index"
    short.write_text("".join(f"{line}\n" for line in index.read_text().splitlines()[:20]).replace("msgs/", f"{index.parent}/msgs/"))
    result = CliRunner().invoke(app, ["evaluate", "--index", str(short), "--protocol", "cv", "--folds", "21"])
    assert result.exit_code == exitcodes.DATA_ERROR
    assert "21 folds of 20 messages: at most one fold a message" in result.stderr
    assert CliRunner().invoke(app, ["evaluate", "--index", str(short), "--protocol", "cv", "--folds", "20"]).exit_code == 0
    # and trains its folds in this process, whatever --jobs said
    jobs = CliRunner().invoke(app, ["evaluate", "--index", str(short), "--protocol", "cv", "--jobs", "2"])
    assert jobs.exit_code == exitcodes.USAGE and "--jobs does nothing with --protocol cv" in jobs.stderr


def test_a_split_whose_readable_training_mail_lacks_a_class_names_what_could_not_be_read(index: Path, tmp_path: Path) -> None:
    # The head held spam by its labels, but none of it could be read: the
    # run ended in "the model needs at least one trained spam" (69), naming
    # neither the files nor the cause.
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 16)
    lines = [line.split(None, 1) for line in index.read_text().splitlines()]
    head = [f"spam {junk}", f"ham {index.parent / lines[0][1]}"]
    rest = [f"{label} {index.parent / path}" for label, path in lines[2:]]
    bad = tmp_path / "index"
    bad.write_text("\n".join(head + rest) + "\n")
    result = CliRunner().invoke(app, ["evaluate", "--index", str(bad), "--protocol", "split", "--head", "2"])
    assert result.exit_code == 65, result.output
    assert result.stderr.strip() == (
        "spamfilter: the training mail read holds 0 spam and 1 ham, and a model needs both: 1 of it could not be read "
        f"({junk}: not a mail message (no header block, and its first 4096 bytes look binary: 480 control bytes, 2048 bytes above 0x7F; "
        "compressed mail must be decompressed first))"
    )
    # Without --head the split is the first half, and says so.
    one = tmp_path / "one"
    one.write_text(rest[0] + "\n")
    result = CliRunner().invoke(app, ["evaluate", "--index", str(one), "--protocol", "split"])
    assert result.exit_code == 65
    assert result.stderr.strip() == "spamfilter: the first half leaves nothing to train on or nothing to classify in a stream of 1 messages"


def test_a_split_into_a_database_that_holds_both_classes_runs_whatever_the_head_could_read(index: Path, tmp_path: Path) -> None:
    # The check of the head's readable mail counted what this run trained;
    # a --db model trained before has both classes, and the run goes on
    # (naming the unreadable file, exit 65).
    db = f"sqlite:///{tmp_path / 'm.db'}"
    lines = [line.split(None, 1) for line in index.read_text().splitlines()]
    first = tmp_path / "first"
    first.write_text("".join(f"{label} {index.parent / path}\n" for label, path in lines[:6]))
    assert CliRunner().invoke(app, ["--db", db, "train", "--index", str(first)]).exit_code == 0
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 16)
    bad = tmp_path / "index"
    bad.write_text("".join([f"spam {junk}\n", f"ham {index.parent / lines[7][1]}\n", *(f"{label} {index.parent / path}\n" for label, path in lines[8:])]))
    result = CliRunner().invoke(app, ["--db", db, "evaluate", "--index", str(bad), "--protocol", "split", "--head", "2", "--format", "json"])
    assert result.exit_code == 65, result.output
    assert f"skipped {junk}: not a mail message" in result.stderr
    assert '"one_minus_roca' in result.stdout or "roc" in result.stdout
