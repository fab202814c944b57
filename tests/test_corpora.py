"""corpora/: the sample-mail generator and the manifest of the shared corpora."""

from __future__ import annotations

import collections
import email
import email.message
import importlib.util
import mailbox
import math
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from email import policy
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "corpora" / "make_sample.py"
MANIFEST = REPO / "corpora" / "manifest.toml"

EXPECTED_COUNTS = {"train-ham.mbox": 60, "train-spam.mbox": 60, "inbox.mbox": 20}
SAMPLE_FILES = sorted([*EXPECTED_COUNTS, "inbox-truth.tsv"])
SIZE_LIMIT = 200_000

EXPECTED_CORPORA = {"spamassassin", "csdmc2010", "spamassassin-testdata", "nazario-phishing", "enron1", "enron2", "enron3", "enron4", "enron5", "enron6", "lingspam-bare"}

ENVELOPE = re.compile(rb"^From ", re.MULTILINE)
ENVELOPE_LINE = re.compile(rb"^From [^\n]*\n", re.MULTILINE)
QUOTED_FROM = re.compile(rb"^>(>*From )", re.MULTILINE)
# "From <sender> <asctime in UTC>", e.g. "From a@b.example Mon Jan  8 23:55:27 2024"
ENVELOPE_FORMAT = re.compile(rb"From \S+@\S+ \w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}")


# ------------------------------------------------------------------- helpers


def corpus_root(repo: Path = REPO) -> Path:
    """Where the tests look for the shared corpora of the repository at `repo`."""
    return repo.parent / "shared" / "corpora"


def shared_corpora() -> Path:
    """The shared corpus folder, or skip (fail under CI=true) when it is absent."""
    root = corpus_root()
    if not root.is_dir():
        _missing(f"labelled corpora not found at {root}")
    return root


def _missing(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def run_script(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *args], check=True, capture_output=True, text=True, timeout=120)


def split_mboxrd(data: bytes) -> list[bytes]:
    """Split an mboxrd file into messages, removing one level of From-quoting."""
    chunks = ENVELOPE_LINE.split(data)
    assert chunks[0] == b"", "mbox must start with an envelope From line"
    return [QUOTED_FROM.sub(rb"\1", chunk) for chunk in chunks[1:]]


def message_text(msg: email.message.EmailMessage) -> str:
    """Subject plus every text part, HTML tags removed."""
    pieces = [str(msg["Subject"])]
    for part in msg.walk():
        if part.get_content_maintype() == "text" and not part.get_filename():
            content = part.get_content()
            if part.get_content_subtype() == "html":
                content = re.sub(r"<[^>]+>", " ", content)
            pieces.append(content)
    return "\n".join(pieces)


def words(text: str) -> list[str]:
    return re.findall(r"[^\W_]{3,}", text.lower())


def load_messages(path: Path) -> list[email.message.EmailMessage]:
    out = []
    for raw in split_mboxrd(path.read_bytes()):
        msg = email.message_from_bytes(raw, policy=policy.default)
        assert isinstance(msg, email.message.EmailMessage)
        out.append(msg)
    return out


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sample")
    run_script(out)
    return out


@pytest.fixture(scope="module")
def make_sample() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("make_sample", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look the module up in sys.modules while the class is built;
    # no bytecode, so the test leaves no __pycache__ behind in corpora/.
    sys.modules[spec.name] = module
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.dont_write_bytecode = saved
        del sys.modules[spec.name]


# ----------------------------------------------------------- sample mail set


def test_make_sample_twice_gives_identical_bytes(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    run_script(first)
    run_script(second)
    assert sorted(p.name for p in first.iterdir()) == SAMPLE_FILES
    assert sorted(p.name for p in second.iterdir()) == SAMPLE_FILES
    for name in SAMPLE_FILES:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_make_sample_seed_changes_the_output(tmp_path: Path) -> None:
    run_script(tmp_path / "a", "--seed", "1")
    run_script(tmp_path / "b", "--seed", "2")
    first, second = (tmp_path / d / "inbox.mbox" for d in ("a", "b"))
    assert first.read_bytes() != second.read_bytes()


def test_make_sample_writes_expected_number_of_messages(sample: Path) -> None:
    for name, expected in EXPECTED_COUNTS.items():
        data = (sample / name).read_bytes()
        assert len(ENVELOPE.findall(data)) == expected, name
        assert len(split_mboxrd(data)) == expected, name


def test_inbox_truth_has_one_line_per_inbox_message(sample: Path) -> None:
    lines = (sample / "inbox-truth.tsv").read_text(encoding="ascii").splitlines()
    assert len(lines) == EXPECTED_COUNTS["inbox.mbox"]
    parsed = [line.split("\t") for line in lines]
    assert [int(n) for n, _ in parsed] == list(range(1, len(lines) + 1))
    assert collections.Counter(label for _, label in parsed) == {"ham": 10, "spam": 10}


def test_every_message_parses_and_has_the_usual_headers(sample: Path) -> None:
    for name in EXPECTED_COUNTS:
        for i, msg in enumerate(load_messages(sample / name), 1):
            where = f"{name} message {i}"
            assert not msg.defects, where
            for header in ("From", "To", "Subject", "Date", "Message-ID", "MIME-Version", "Content-Type"):
                assert msg[header], f"{where}: no {header}"
            assert str(msg["Subject"]).strip(), where
            assert msg["Date"].datetime is not None, where
            assert message_text(msg).strip(), where


def test_mailbox_module_reads_the_same_messages(sample: Path) -> None:
    for name, expected in EXPECTED_COUNTS.items():
        box = mailbox.mbox(sample / name, create=False)
        try:
            messages = list(box)
        finally:
            box.close()
        assert len(messages) == expected, name
        ours = [email.message_from_bytes(raw) for raw in split_mboxrd((sample / name).read_bytes())]
        assert [m["Subject"] for m in messages] == [m["Subject"] for m in ours], name


def test_message_ids_are_unique(sample: Path) -> None:
    ids = [str(m["Message-ID"]) for name in EXPECTED_COUNTS for m in load_messages(sample / name)]
    assert len(ids) == len(set(ids))


def test_mbox_entries_are_separated_by_a_blank_line(sample: Path) -> None:
    for name in EXPECTED_COUNTS:
        data = (sample / name).read_bytes()
        assert data.endswith(b"\n\n"), name
        starts = [m.start() for m in ENVELOPE.finditer(data)][1:]
        assert all(data[s - 2 : s] == b"\n\n" for s in starts), name


def test_body_lines_starting_with_from_are_quoted(sample: Path) -> None:
    data = (sample / "train-ham.mbox").read_bytes()
    assert b"\n>From " in data
    # Only envelope lines start with "From " (header lines are "From:").
    for line in data.splitlines():
        if line.startswith(b"From "):
            assert ENVELOPE_FORMAT.fullmatch(line), line


def test_sample_exercises_the_awkward_mime_cases(sample: Path) -> None:
    seen: dict[str, set[str]] = {"ham": set(), "spam": set()}
    for label, name in (("ham", "train-ham.mbox"), ("spam", "train-spam.mbox")):
        raw_file = (sample / name).read_bytes()
        for raw, msg in zip(split_mboxrd(raw_file), load_messages(sample / name)):
            header_block = raw.split(b"\n\n", 1)[0]
            if re.search(rb"^Subject: =\?", header_block, re.MULTILINE):
                seen[label].add("rfc2047-subject")
            for part in msg.walk():
                if part.get_content_type() == "multipart/alternative":
                    seen[label].add("alternative")
                if part.get_content_type() == "text/html":
                    seen[label].add("html")
                if part.get("Content-Transfer-Encoding", "").lower() == "base64" and part.get_content_maintype() == "text":
                    seen[label].add("base64-text")
                if part.get_filename():
                    seen[label].add("attachment")
                charset = part.get_content_charset()
                if charset and charset not in ("utf-8", "us-ascii"):
                    seen[label].add("non-utf8")
    wanted = {"rfc2047-subject", "alternative", "html", "base64-text", "attachment", "non-utf8"}
    assert seen["ham"] >= wanted
    assert seen["spam"] >= wanted


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 99])
def test_sample_stays_small_for_any_seed(tmp_path: Path, make_sample: ModuleType, seed: int) -> None:
    summary = make_sample.write_sample(tmp_path, seed)
    assert (summary.train_ham, summary.train_spam, summary.inbox) == (60, 60, 20)
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) == summary.total_bytes
    assert summary.total_bytes < SIZE_LIMIT


def test_classes_share_vocabulary_but_stay_learnable(sample: Path) -> None:
    """A bare multinomial naive Bayes (Laplace, alpha=1) must sort the inbox.

    log P(c|d) = log P(c) + sum_w n(w,d) * log((N(c,w) + 1) / (N(c) + V)) + const
    The shared-word check keeps the set from being trivially separable.
    """
    counts = {label: collections.Counter[str]() for label in ("ham", "spam")}
    docs = {"ham": 0, "spam": 0}
    for label in counts:
        for msg in load_messages(sample / f"train-{label}.mbox"):
            counts[label].update(words(message_text(msg)))
            docs[label] += 1
    shared = set(counts["ham"]) & set(counts["spam"])
    for word in ("free", "order", "payment", "account", "prize", "credit", "ticket"):
        assert word in shared
    assert len(shared) >= 60

    vocab = set(counts["ham"]) | set(counts["spam"])
    totals = {label: sum(c.values()) for label, c in counts.items()}
    truth = dict(line.split("\t") for line in (sample / "inbox-truth.tsv").read_text(encoding="ascii").splitlines())
    correct = 0
    for n, msg in enumerate(load_messages(sample / "inbox.mbox"), 1):
        scores = {}
        for label in counts:
            score = math.log(docs[label] / sum(docs.values()))
            for word in words(message_text(msg)):
                if word in vocab:
                    score += math.log((counts[label][word] + 1) / (totals[label] + len(vocab)))
            scores[label] = score
        correct += max(scores, key=scores.__getitem__) == truth[str(n)]
    assert correct >= 18


# ------------------------------------------------------------------ manifest


def load_manifest() -> dict[str, dict[str, object]]:
    with MANIFEST.open("rb") as f:
        data = tomllib.load(f)
    assert data["root"] == "../shared/corpora"
    corpora = data["corpus"]
    assert isinstance(corpora, dict)
    return corpora


def test_manifest_is_consistent_with_itself() -> None:
    corpora = load_manifest()
    assert set(corpora) == EXPECTED_CORPORA
    for name, entry in corpora.items():
        assert set(entry) == {"index", "messages", "ham", "spam", "headers", "description"}, name
        index = entry["index"]
        assert isinstance(index, str) and index.endswith("/index"), name
        assert not index.startswith("/") and ".." not in Path(index).parts, name
        assert entry["ham"] + entry["spam"] == entry["messages"], name  # type: ignore[operator]
        assert isinstance(entry["headers"], bool), name
        description = entry["description"]
        assert isinstance(description, str) and description and "\n" not in description, name


def same_folder(repo: Path, manifest_root: str) -> bool:
    """Whether the manifest's root (relative to `repo`) is the folder the
    tests read, compared after resolving both (either may pass a symlink)."""
    return (repo / manifest_root).resolve() == corpus_root(repo).resolve()


def test_manifest_root_is_where_the_tests_look() -> None:
    root = tomllib.loads(MANIFEST.read_text(encoding="utf-8"))["root"]
    assert same_folder(REPO, root)


def test_manifest_root_check_follows_a_symlinked_shared_folder(tmp_path: Path) -> None:
    (tmp_path / "elsewhere" / "corpora").mkdir(parents=True)
    (tmp_path / "shared").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "repo").mkdir()
    assert same_folder(tmp_path / "repo", "../shared/corpora")
    assert not same_folder(tmp_path / "repo", "../elsewhere/other")


@pytest.mark.corpus
@pytest.mark.parametrize("name", sorted(EXPECTED_CORPORA))
def test_manifest_counts_match_index_file(name: str) -> None:
    entry = load_manifest()[name]
    index = shared_corpora() / str(entry["index"])
    if not index.is_file():
        _missing(f"index for {name} not found at {index}")
    labels: collections.Counter[str] = collections.Counter()
    paths = []
    for line in index.read_text(encoding="ascii").splitlines():
        label, path = line.split()
        labels[label] += 1
        paths.append(index.parent / path)
    assert set(labels) <= {"ham", "spam"}
    assert sum(labels.values()) == entry["messages"]
    assert labels["ham"] == entry["ham"]
    assert labels["spam"] == entry["spam"]
    assert all(p.is_file() for p in paths)

    # headers = true: real mail with a From header; false: at most a Subject line.
    for path in paths[:25]:
        msg = email.message_from_bytes(path.read_bytes())
        has_headers = "From" in msg or "Received" in msg
        assert has_headers == entry["headers"], path


@pytest.mark.corpus
def test_manifest_covers_every_shared_corpus_folder() -> None:
    root = shared_corpora()
    folders = {p.name for p in root.iterdir() if p.is_dir()}
    listed = {Path(str(e["index"])).parts[0] for e in load_manifest().values()}
    assert folders == listed
