"""Reading mail on several processes (``--jobs``): the same verdicts, counts
and refusals, in the same order, as reading it in one."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from spamfilter.analysis import MIN_PARALLEL, Analysed, Analyser, Refusal, analyse
from spamfilter.answers import Verdict
from spamfilter.cli import app
from spamfilter.config import Config, TokenizerConfig
from spamfilter.filter import Filter
from spamfilter.mail import MailItem, read_index
from spamfilter.store.ledger import pack_ledger_entry, unpack_features, unpack_token_counts

pytestmark = pytest.mark.corpus


@pytest.fixture(scope="module")
def stream(corpora_dir: Path) -> list[tuple[bool, MailItem]]:
    labelled = list(read_index(str(corpora_dir / "spamassassin" / "index")))[:600]
    # Junk among the mail: refused, in place, whichever process reads it.
    junk = [(True, MailItem(f"junk-{i}", b"\x00\x01\x02\x03" * 2000)) for i in range(3)]
    return labelled[:100] + junk[:1] + labelled[100:400] + junk[1:] + labelled[400:]


def tables(f: Filter) -> dict[str, list[tuple[object, ...]]]:
    with f.store.engine.connect() as conn:
        return {name: [tuple(r) for r in conn.execute(sa.text(f"SELECT * FROM {name} ORDER BY 1, 2, 3"))] for name in ("tokens", "class_totals", "doc_histogram")} | {
            "messages": [tuple(r) for r in conn.execute(sa.text("SELECT digest, label, token_counts FROM messages ORDER BY 1"))]
        }


def test_analyse_on_two_processes_gives_the_same_results_in_order(stream: list[tuple[bool, MailItem]]) -> None:
    analyser = Analyser(TokenizerConfig(), 1 << 20)
    items = [item for _, item in stream]
    assert len(items) > MIN_PARALLEL
    one = list(analyse(analyser, items, 1))
    workers_seen = 0
    two = []
    for result in analyse(analyser, items, 2):
        workers_seen = max(workers_seen, len(multiprocessing.active_children()))
        two.append(result)
    assert workers_seen == 2  # the reading really ran on two workers
    assert two == one
    refused = [r.source for r in two if isinstance(r, Refusal)]
    assert refused == ["junk-0", "junk-1", "junk-2"]
    assert sum(isinstance(r, Analysed) for r in two) == len(items) - 3


def test_workers_pack_the_ledger_entries_the_store_would_pack(stream: list[tuple[bool, MailItem]]) -> None:
    """An analyser for training packs each entry on the reading processes;
    the bytes are the store's own packing of the counts and features."""
    items = [item for _, item in stream]
    packed = [r for r in analyse(Analyser(TokenizerConfig(), 1 << 20, ledger=pack_ledger_entry), items, 2) if isinstance(r, Analysed)]
    assert len(packed) == len(items) - 3
    assert all(r.entry == pack_ledger_entry(r.counts, r.features) for r in packed)
    assert sum(bool(r.features) for r in packed) == len(packed)
    assert all(r.entry is None for r in analyse(Analyser(TokenizerConfig(), 1 << 20), items[:50], 1) if isinstance(r, Analysed))


def test_train_and_classify_with_jobs_match_one_process(tmp_path: Path, stream: list[tuple[bool, MailItem]]) -> None:
    config = replace(Config(), store=replace(Config().store, batch_size=100))
    results = []
    for jobs in (1, 2):
        with Filter.open(config, f"sqlite:///{tmp_path / f'j{jobs}.db'}", jobs=jobs) as f:
            summary = f.train(stream[:450])
            verdicts = [(r.source, r.log_odds, r.verdict) if isinstance(r, Verdict) else r for r in f.classify(i for _, i in stream[450:])]
            online = [s.result for s in f.learn_online(stream[450:])]
            results.append((summary, verdicts, online, tables(f)))
    assert results[0][0].trained_spam + results[0][0].trained_ham == 447
    assert [r.source for r in results[0][0].refused] == ["junk-0", "junk-1", "junk-2"]
    assert results[1] == results[0]
    # train packed the entries on the reading processes: each is what the
    # store packs from what it holds
    ledger = results[1][3]["messages"]
    assert len(ledger) >= 447
    assert all(blob == pack_ledger_entry(unpack_token_counts(blob), unpack_features(blob)) for _, _, blob in ledger)


def test_classify_command_output_is_the_same_for_any_jobs(tmp_path: Path, corpora_dir: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()
    # every fifth message of the corpus (both classes), read on two workers
    source = corpora_dir / "spamassassin" / "index"
    lines = source.read_text().splitlines()[::5]
    index = tmp_path / "index"
    index.write_text("".join(f"{label} {source.parent / path}\n" for label, path in (line.split() for line in lines)))
    trained = runner.invoke(app, ["--db", db, "train", "--index", str(index), "--jobs", "2"])
    assert trained.exit_code == 0 and re.search(r"trained [1-9]\d* spam, [1-9]\d* ham", trained.stdout)
    folder = str(corpora_dir / "spamassassin" / "spam_2")
    one = runner.invoke(app, ["--db", db, "classify", "--format", "tsv", "--jobs", "1", folder])
    two = runner.invoke(app, ["--db", db, "classify", "--format", "tsv", "--jobs", "2", folder])
    assert one.exit_code == two.exit_code == 0
    assert one.stdout == two.stdout and one.stdout.count("\n") > 1000


def test_a_worker_that_dies_ends_the_run_with_an_error_not_a_hang(stream: list[tuple[bool, MailItem]], monkeypatch: pytest.MonkeyPatch) -> None:
    from spamfilter.errors import WorkerLost

    items = [item for _, item in stream]
    doomed = items[150].source
    remote = Analyser.remote

    def dying(self: Analyser, chunk: list[MailItem]) -> object:
        if any(item.source == doomed for item in chunk):
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
        return remote(self, chunk)

    dying.__name__ = dying.__qualname__ = "remote"  # pickled by name to the workers
    monkeypatch.setattr(Analyser, "remote", dying)
    started = time.monotonic()
    read = []
    with pytest.raises(WorkerLost, match="died"):
        for result in analyse(Analyser(TokenizerConfig(), 1 << 20), items, 2):
            read.append(result)
    assert len(read) <= 150 and time.monotonic() - started < 60  # a bound only against a hang


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def train_with_two_readers(tmp_path: Path, corpora_dir: Path, **popen: Any) -> tuple[subprocess.Popen[bytes], list[int]]:
    """``spamfilter train --jobs 2`` on spamassassin in a new process, once
    its two reader processes have started: the process and their pids."""
    corpus = corpora_dir / "spamassassin"
    command = [
        sys.executable,
        "-m",
        "spamfilter",
        "--db",
        f"sqlite:///{tmp_path / 'model.db'}",
        "train",
        "--jobs",
        "2",
        "--spam",
        str(corpus / "spam"),
        "--ham",
        str(corpus / "easy_ham"),
    ]
    train = subprocess.Popen(command, stdout=subprocess.DEVNULL, **popen)
    workers: list[int] = []
    deadline = time.monotonic() + 120
    while len(workers) < 2 and train.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        workers = children_of(train.pid)
    if len(workers) != 2:
        train.kill()
        train.wait()
        raise AssertionError("the workers never started")
    return train, workers


def test_workers_end_when_train_is_killed(tmp_path: Path, corpora_dir: Path) -> None:
    """A train killed with SIGKILL left its two readers (70-80 MB each)
    running for good, adopted by init."""
    train, workers = train_with_two_readers(tmp_path, corpora_dir, stderr=subprocess.DEVNULL)
    try:
        train.send_signal(signal.SIGKILL)
        train.wait(timeout=30)
        deadline = time.monotonic() + 30  # a bound only against waiting for good
        while any(running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [pid for pid in workers if running(pid)] == []
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
        for pid in workers:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_ctrl_c_stops_a_run_with_workers_in_one_line_and_no_traceback(tmp_path: Path, corpora_dir: Path) -> None:
    """Ctrl-C goes to the terminal's whole process group: the readers each
    printed a KeyboardInterrupt traceback beside the run's own one line."""
    run, _ = train_with_two_readers(tmp_path, corpora_dir, stderr=subprocess.PIPE, start_new_session=True)
    try:
        time.sleep(0.5)  # the workers are reading
        os.killpg(run.pid, signal.SIGINT)  # as the terminal sends it
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == 130
    assert err.decode().strip().splitlines()[-1] == "spamfilter: interrupted"
    assert "Traceback" not in err.decode()
