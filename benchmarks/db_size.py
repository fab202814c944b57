"""Database size per 10,000 trained messages, before and after pruning.

    python -m benchmarks.db_size                       # prune settings 2 and 3 (and 5), older than 0 days
    python -m benchmarks.db_size --min-count 2 --min-count 10

Trains 10,000 messages into a fresh SQLite file through the real library
path (``Filter.train``): spamassassin (raw mail with headers) and as much of
the Enron-Spam stream (header-less) as makes up 10,000; every tenth message
of both is held out. Then it prunes with each ``--min-count`` in turn
(``--older-than 0``: whenever the token was last trained, as on a store
trained in one go), each on top of the one before. After training and
after each prune it checkpoints and vacuums the file (``Filter.vacuum``) and
reports the file size, the bytes of the token table and of the ledger of
trained messages (SQLite's ``dbstat``), the number of tokens, whether
``db check`` passes, and 1-ROCA % on the held-out messages of each corpus.
Side by side, bogofilter (Debian's) registers the same training messages
(``-s``/``-n -B``) into a wordlist of its own, whose file size and token
count are reported with each stage's ratio to it.
Prints a Markdown table and writes results/db_size.json; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from spamfilter.answers import Verdict
from spamfilter.config import Config
from spamfilter.filter import Filter
from spamfilter.mail import MailItem, read_index
from spamfilter.tools.evaluation import roc_area
from spamfilter.tools.maintenance import Maintenance

CORPORA = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"
TRAIN_MESSAGES = 10_000


def git_sha() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return out.stdout.strip() or "unknown"


def split(corpus: str, wanted: int, seen: set[str]) -> tuple[list[tuple[bool, MailItem]], list[tuple[bool, MailItem]]]:
    """Up to ``wanted`` training messages from the head of the corpus's index,
    every tenth message held out; a message whose digest is in ``seen`` (a
    duplicate: spamassassin has some) is skipped, so each one trains."""
    train: list[tuple[bool, MailItem]] = []
    held: list[tuple[bool, MailItem]] = []
    for i, pair in enumerate(read_index(str(CORPORA / corpus / "index"))):
        if len(train) == wanted:
            break
        digest = pair[1].digest
        if digest not in seen:
            seen.add(digest)
            (held if i % 10 == 9 else train).append(pair)
    return train, held


def bogofilter_wordlist(train: list[tuple[bool, MailItem]]) -> dict[str, int]:
    """bogofilter's wordlist for the same training messages (registered
    500 files a run): the bytes of its directory's files and its tokens
    (``bogoutil -d``'s lines, less its bookkeeping lines, which start with a dot)."""
    with tempfile.TemporaryDirectory() as tmp:
        for flag, is_spam in (("-s", True), ("-n", False)):
            files = [item.source for spam, item in train if spam == is_spam]
            for i in range(0, len(files), 500):
                subprocess.run(["bogofilter", "-d", tmp, flag, "-B", *files[i : i + 500]], check=True)
        size = sum(p.stat().st_size for p in Path(tmp).iterdir() if p.is_file())
        dump = subprocess.run(["bogoutil", "-d", str(Path(tmp) / "wordlist.db")], capture_output=True, check=True).stdout
    tokens = sum(1 for line in dump.splitlines() if line and not line.startswith(b"."))
    return {"file_bytes": size, "tokens": tokens}


def one_minus_roca(f: Filter, held: list[tuple[bool, MailItem]]) -> float:
    results = list(f.classify(item for _, item in held))
    pairs = [(is_spam, r.log_odds) for (is_spam, _), r in zip(held, results) if isinstance(r, Verdict)]
    y = np.array([s for s, _ in pairs])
    return 100 * (1 - roc_area(y, np.array([o for _, o in pairs])))


def table_bytes(path: Path) -> dict[str, int]:
    """Bytes of pages per table (with its indexes), from SQLite's dbstat."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    finally:
        conn.close()
    out: dict[str, int] = {}
    for name, size in rows:
        table = name.removeprefix("sqlite_autoindex_").rsplit("_", 1)[0] if name.startswith("sqlite_autoindex_") else name
        out[table] = out.get(table, 0) + int(size)
    return out


def measure(f: Filter, path: Path, held: dict[str, list[tuple[bool, MailItem]]], label: str) -> dict[str, object]:
    start = time.perf_counter()
    vacuum = Maintenance(f.store).vacuum()
    vacuum_seconds = time.perf_counter() - start
    start = time.perf_counter()
    report = Maintenance(f.store).check()
    check_seconds = time.perf_counter() - start
    tables = table_bytes(path)
    stats = f.stats()
    return {
        "stage": label,
        "tokens": stats.tokens,
        "file_bytes": vacuum.size_after,
        "tokens_table_bytes": tables.get("tokens", 0),
        "ledger_bytes": tables.get("messages", 0),
        "check_ok": report.ok,
        "check_seconds": check_seconds,
        "vacuum_seconds": vacuum_seconds,
        **{f"one_minus_roca_pct_{name}": one_minus_roca(f, pairs) for name, pairs in held.items()},
    }


def run(min_counts: list[int]) -> dict[str, object]:
    seen: set[str] = set()
    sa_train, sa_held = split("spamassassin", TRAIN_MESSAGES, seen)
    enron_train, enron_held = split("enron-spam-preprocessed", TRAIN_MESSAGES - len(sa_train), seen)
    train = sa_train + enron_train
    held = {"spamassassin": sa_held, "enron": enron_held}
    stages = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "size.db"
        with Filter.open(Config(), f"sqlite:///{path}") as f:
            start = time.perf_counter()
            summary = f.train(train)
            train_seconds = time.perf_counter() - start
            stages.append(measure(f, path, held, "trained"))
            for n in min_counts:
                start = time.perf_counter()
                pruned = Maintenance(f.store).prune(n, 0)
                stage = measure(f, path, held, f"db prune --min-count {n} --older-than 0")
                stage["prune_seconds"] = time.perf_counter() - start - float(str(stage["vacuum_seconds"])) - float(str(stage["check_seconds"]))
                stage["tokens_removed"] = pruned.tokens_removed
                stages.append(stage)
    return {
        "trained_messages": summary.trained_ham + summary.trained_spam,
        "trained_spam": summary.trained_spam,
        "trained_ham": summary.trained_ham,
        "refused": len(summary.refused),
        "train_seconds": train_seconds,
        "train_corpora": {"spamassassin": len(sa_train), "enron-spam-preprocessed": len(enron_train)},
        "held_out": {name: len(pairs) for name, pairs in held.items()},
        "stages": stages,
        "bogofilter": bogofilter_wordlist(train),
        "git": git_sha(),
    }


def markdown(result: dict[str, object]) -> str:
    stages = result["stages"]
    assert isinstance(stages, list)
    bogo = result["bogofilter"]
    assert isinstance(bogo, dict)
    lines = [
        "| stage | tokens | file MB | x bogofilter | token table MB | ledger MB | `db check` | 1-ROCA % spamassassin / enron |",
        "|---|---:|---:|---:|---:|---:|---|---:|",
        f"| bogofilter, the same messages | {bogo['tokens']:,} | {bogo['file_bytes'] / 1e6:.1f} | 1 | | | | |",
    ]
    for s in stages:
        lines.append(
            f"| {s['stage']} | {s['tokens']:,} | {s['file_bytes'] / 1e6:.1f} | {s['file_bytes'] / bogo['file_bytes']:.2f} | {s['tokens_table_bytes'] / 1e6:.1f} | "
            f"{s['ledger_bytes'] / 1e6:.1f} | {'ok' if s['check_ok'] else 'FAILED'} | "
            f"{s['one_minus_roca_pct_spamassassin']:.3f} / {s['one_minus_roca_pct_enron']:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--min-count", type=int, action="append", dest="min_counts", help="prune setting (repeatable; default 2, 3, 5)")
    args = parser.parse_args()
    if shutil.which("bogofilter") is None or shutil.which("bogoutil") is None:
        raise SystemExit("bogofilter is needed (Debian package bogofilter)")
    result = run(args.min_counts or [2, 3, 5])
    out = Path("results")
    out.mkdir(exist_ok=True)
    (out / "db_size.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "stages"}))
    print(markdown(result))


if __name__ == "__main__":
    main()
