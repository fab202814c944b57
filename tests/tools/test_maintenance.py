"""``spamfilter db check | prune | vacuum | export | import``: the store stays
consistent, pruning removes exactly the rare old tokens, forgetting still
works after it, and counts survive a round trip through the text format."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from spamfilter.answers import Verdict
from spamfilter.cli import app, exitcodes
from spamfilter.config import Config, ModelConfig
from spamfilter.counts import MAX_COUNT
from spamfilter.errors import CountsFileError, ModelNotEmpty, StoreError
from spamfilter.filter import Filter
from spamfilter.mail import MailItem
from spamfilter.store import Store, sqlite_path
from spamfilter.store.schema import day_number
from spamfilter.tools.counts_file import MAX_LINE_BYTES, escape_token, read_counts_lines, unescape_token
from spamfilter.tools.maintenance import CheckReport, Maintenance, PruneSummary

pytestmark = pytest.mark.corpus

Rows = list[tuple[object, ...]]

LEDGER_CHECK = "token counts = sums over the ledger's messages"


@pytest.fixture(scope="module")
def mail(corpora_dir: Path) -> dict[str, list[MailItem]]:
    """From the head of the spamassassin index (its first 400 lines hold
    46 ham): 40 spam and 40 ham to train, 6 of each to classify."""
    root = corpora_dir / "spamassassin"
    rows = [line.split(maxsplit=1) for line in (root / "index").read_text().splitlines()[:400]]
    spam = [MailItem(p, (root / p).read_bytes()) for label, p in rows if label == "spam"]
    ham = [MailItem(p, (root / p).read_bytes()) for label, p in rows if label == "ham"]
    return {"spam": spam[:40], "ham": ham[:40], "unseen": spam[40:46] + ham[40:46]}


def labelled(mail: dict[str, list[MailItem]]) -> list[tuple[bool, MailItem]]:
    return [(True, m) for m in mail["spam"]] + [(False, m) for m in mail["ham"]]


@pytest.fixture(scope="module")
def trained_file(tmp_path_factory: pytest.TempPathFactory, mail: dict[str, list[MailItem]]) -> Path:
    """A SQLite file trained on the 80 messages once; tests work on copies."""
    path = tmp_path_factory.mktemp("trained") / "trained.db"
    with Filter.open(Config(), f"sqlite:///{path}") as f:
        f.train(labelled(mail))
    return path


@pytest.fixture
def trained_url(trained_file: Path, tmp_path: Path) -> str:
    copy = tmp_path / "model.db"
    shutil.copy(trained_file, copy)
    return f"sqlite:///{copy}"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def query(f: Filter, sql: str) -> Rows:
    with f.store.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(sql))]


def execute(f: Filter, sql: str) -> None:
    with f.store.engine.begin() as conn:
        conn.execute(sa.text(sql))


def statuses(report: CheckReport) -> dict[str, str]:
    return {item.name: item.status for item in report.items}


def failed(report: CheckReport) -> set[str]:
    return {item.name for item in report.items if item.status == "failed"}


def log_odds(f: Filter, items: list[MailItem]) -> list[float]:
    results = list(f.classify(items))
    assert all(isinstance(r, Verdict) for r in results)
    return [r.log_odds for r in results if isinstance(r, Verdict)]


def export_text(f: Filter) -> str:
    out = io.StringIO()
    Maintenance(f.store).export_counts(out)
    return out.getvalue()


def token_rows(f: Filter) -> Rows:
    return query(f, "SELECT token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens WHERE owner = '' ORDER BY token")


# -- check -----------------------------------------------------------------------


def test_check_passes_on_a_trained_store(trained_url: str) -> None:
    with Filter.open(Config(), trained_url) as f:
        report = Maintenance(f.store).check()
    assert report.ok
    assert set(statuses(report).values()) == {"ok"}
    assert len(report.items) == 12


A_SPAM_TOKEN = "(SELECT token FROM tokens WHERE spam_docs > 0 ORDER BY token LIMIT 1)"
A_HAM_ONLY_TOKEN = "(SELECT token FROM tokens WHERE ham_docs > 0 AND spam_docs = 0 ORDER BY token LIMIT 1)"
A_MESSAGE = "(SELECT digest FROM messages ORDER BY digest LIMIT 1)"


@pytest.mark.parametrize(
    ("corruption", "expected"),
    [
        (
            "UPDATE class_totals SET terms = terms + 1 WHERE owner = '' AND label = 1",
            {"class totals (terms, binary_terms) = sums over the tokens", "class totals = sums over the ledger"},
        ),
        ("UPDATE class_totals SET messages = messages + 1 WHERE owner = '' AND label = 0", {"class totals = sums over the ledger"}),
        (f"UPDATE tokens SET spam_terms = spam_terms + 1 WHERE token = {A_SPAM_TOKEN}", {"class totals (terms, binary_terms) = sums over the tokens", LEDGER_CHECK}),
        ("UPDATE doc_histogram SET tokens = tokens + 1 WHERE owner = '' AND label = 0 AND doc_count = 1", {"doc_histogram = recount from the tokens"}),
        (f"UPDATE tokens SET spam_docs = -1 WHERE token = {A_HAM_ONLY_TOKEN}", {"no count is negative", "doc_histogram = recount from the tokens", LEDGER_CHECK}),
        (f"UPDATE tokens SET spam_docs = 0, ham_docs = 0 WHERE token = {A_SPAM_TOKEN}", {"every stored token is in a message", LEDGER_CHECK}),
        (f"DELETE FROM tokens WHERE token = {A_SPAM_TOKEN}", {"class totals (terms, binary_terms) = sums over the tokens", LEDGER_CHECK}),
        (f"UPDATE tokens SET ham_docs = 100000, ham_terms = 100000 WHERE token = {A_HAM_ONLY_TOKEN}", {"no token is in more messages than its class has", LEDGER_CHECK}),
        (
            f"UPDATE messages SET token_counts = substr(token_counts, 1, 20) WHERE digest = {A_MESSAGE}",
            {"every ledger entry can be read", "class totals = sums over the ledger", LEDGER_CHECK},
        ),
        # A feature sum no entry holds (a downgrade below revision 0005 and
        # back left such entries, and forgetting them drove the sums negative).
        (
            "UPDATE feature_stats SET n = n + 1, total = total + 7 WHERE owner = '' AND label = 1 AND feature = 0",
            {"message feature sums = sums over the ledger's messages"},
        ),
    ],
    ids=["class-terms", "class-messages", "token-count", "histogram", "negative", "token-in-no-message", "token-deleted", "beyond-class", "ledger-entry", "feature-sums"],
)
def test_check_reports_each_kind_of_corruption(trained_url: str, corruption: str, expected: set[str], runner: CliRunner) -> None:
    with Filter.open(Config(), trained_url) as f:
        execute(f, corruption)
        report = Maintenance(f.store).check()
    assert not report.ok
    assert expected <= failed(report)
    assert all(item.problems for item in report.items if item.status == "failed")
    result = runner.invoke(app, ["--db", trained_url, "db", "check"])
    assert result.exit_code == exitcodes.STORE_INCONSISTENT == 73
    assert "FAILED" in result.stdout
    assert "check(s) failed" in result.stderr


def test_a_damaged_ledger_entry_is_refused_by_forget_and_mark_and_listed_by_check(
    trained_url: str, runner: CliRunner, mail: dict[str, list[MailItem]], tmp_path: Path
) -> None:
    item = mail["spam"][0]
    with Filter.open(Config(), trained_url) as f:
        execute(f, f"UPDATE messages SET token_counts = substr(token_counts, 1, 20) WHERE digest = '{item.digest}'")
        before = token_rows(f)
    source = tmp_path / "m.eml"
    source.write_bytes(item.raw)
    for args in (["forget", str(source)], ["mark", "ham", str(source)]):
        result = runner.invoke(app, ["--db", trained_url, *args])
        assert result.exit_code == exitcodes.STORE_INCONSISTENT, result.output
        assert result.stderr.startswith(f"spamfilter: the ledger entry of message {item.digest} is damaged (")
        assert "Traceback" not in result.output
    with Filter.open(Config(), trained_url) as f:
        assert token_rows(f) == before  # nothing written
    result = runner.invoke(app, ["--db", trained_url, "db", "check"])
    assert result.exit_code == 73
    assert f"message {item.digest}: " in result.stdout


def test_a_count_that_is_text_stops_prune_and_a_forget_that_would_make_totals_negative(
    trained_url: str, runner: CliRunner, mail: dict[str, list[MailItem]], tmp_path: Path
) -> None:
    # A count edited into text: prune failed with an internal error (70),
    # and forget took the class totals below zero and exited 0.
    item = mail["spam"][0]
    source = tmp_path / "m.eml"
    source.write_bytes(item.raw)
    with Filter.open(Config(), trained_url) as f:
        execute(f, "UPDATE class_totals SET terms = 'x' WHERE label = 1")
        before = token_rows(f)
    forget = runner.invoke(app, ["--db", trained_url, "forget", str(source)])
    assert forget.exit_code == exitcodes.STORE_INCONSISTENT == 73, forget.output
    assert forget.stderr == "spamfilter: the spam class totals would go negative: the database is damaged (`spamfilter db check` lists the problems)\n"
    with Filter.open(Config(), trained_url) as f:
        assert token_rows(f) == before  # nothing written
        execute(f, "UPDATE tokens SET spam_docs = 'abc' WHERE token = (SELECT min(token) FROM tokens WHERE spam_docs = 1)")
    prune = runner.invoke(app, ["--db", trained_url, "db", "prune", "--min-count", "2", "--older-than", "0"])
    assert prune.exit_code == exitcodes.STORE_INCONSISTENT, prune.output
    assert "where a count belongs: the database is damaged" in prune.stderr


def test_check_exits_0_and_json_says_ok(trained_url: str, runner: CliRunner) -> None:
    result = runner.invoke(app, ["--db", trained_url, "db", "check", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] is True and data["user"] == ""
    assert {c["status"] for c in data["checks"]} == {"ok"}


def damage_the_tokens_table(path: Path) -> int:
    """Overwrite the tokens table's root page with garbage; its number."""
    con = sqlite3.connect(path)
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'tokens'").fetchone()
    (page,) = con.execute("PRAGMA page_size").fetchone()
    con.close()
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * page)
        fh.write(b"\xab" * page)
    return int(root)


def test_check_reports_a_damaged_file_and_writers_refuse_it(trained_url: str, tmp_path: Path, runner: CliRunner, mail: dict[str, list[MailItem]]) -> None:
    path = Path(trained_url.removeprefix("sqlite:///"))
    root = damage_the_tokens_table(path)
    result = runner.invoke(app, ["--db", trained_url, "db", "check", "--format", "json"])
    assert result.exit_code == exitcodes.STORE_INCONSISTENT, result.output
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["SQLite integrity_check"]["status"] == "failed"
    problems = checks["SQLite integrity_check"]["problems"]
    assert problems[0].startswith(f"Page {root}: ")
    assert len(problems) == 11 and problems[-1].startswith("... and ")
    assert checks["the stored counts"]["status"].startswith("skipped (unreadable: ")
    table = runner.invoke(app, ["--db", trained_url, "db", "check"])
    assert table.exit_code == exitcodes.STORE_INCONSISTENT
    assert f"FAILED   SQLite integrity_check\n         Page {root}: " in table.stdout
    # A writer refuses the file before writing, even where the write itself
    # would not touch the damage (these messages are trained already).
    message = tmp_path / "spam.eml"
    message.write_bytes(mail["spam"][0].raw)
    train = runner.invoke(app, ["--db", trained_url, "train", "--spam", str(message)])
    assert train.exit_code == exitcodes.STORE_ERROR
    assert f"the database file is damaged (Page {root}: " in train.stderr and "spamfilter db check" in train.stderr
    with Filter.open(Config(), trained_url) as f, pytest.raises(StoreError, match="damaged"):
        f.forget(mail["ham"][:1])
    # So does vacuum, whose own failure on such a file may read "database
    # or disk is full".
    vacuum = runner.invoke(app, ["--db", trained_url, "db", "vacuum"])
    assert vacuum.exit_code == exitcodes.STORE_ERROR
    assert f"the database file is damaged (Page {root}: " in vacuum.stderr and "spamfilter db check" in vacuum.stderr


@pytest.mark.parametrize("day", ["-2419801", "'abc'"])
def test_a_stored_date_that_is_no_date_is_called_damaged(trained_url: str, runner: CliRunner, day: str) -> None:
    # db check and db export ended with an internal error (exit 70).
    path = Path(trained_url.removeprefix("sqlite:///"))
    con = sqlite3.connect(path)
    with con:
        con.execute(f"UPDATE tokens SET last_seen = {day} WHERE token = (SELECT min(token) FROM tokens)")
    con.close()
    for command in (["db", "check"], ["db", "export", "-"]):
        result = runner.invoke(app, ["--db", trained_url, *command])
        assert result.exit_code == exitcodes.STORE_INCONSISTENT, result.output
        assert "is not a date" in result.stderr and "the database is damaged" in result.stderr


def test_a_truncated_file_is_called_damaged_even_where_check_cannot_start(trained_url: str, runner: CliRunner) -> None:
    path = Path(trained_url.removeprefix("sqlite:///"))
    Store.open(trained_url).checkpoint()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    result = runner.invoke(app, ["--db", trained_url, "db", "check"])
    assert result.exit_code == exitcodes.STORE_ERROR, result.output
    assert "the database file is damaged (database disk image is malformed)" in result.stderr, result.stderr


def test_prune_over_a_fractional_count_names_the_fault_not_a_sum(trained_url: str, runner: CliRunner) -> None:
    # It said "tokens holds 3042.0 where a count belongs": a sum no row holds.
    with Filter.open(Config(), trained_url) as f:
        execute(f, "UPDATE tokens SET ham_docs = 1.5 WHERE token = (SELECT min(token) FROM tokens WHERE ham_docs = 1 AND spam_docs = 0)")
    prune = runner.invoke(app, ["--db", trained_url, "db", "prune", "--min-count", "2", "--older-than", "0"])
    assert prune.exit_code == exitcodes.STORE_INCONSISTENT, prune.output
    assert prune.stderr == "spamfilter: tokens holds a count that is not a whole number: the database is damaged (`spamfilter db check` lists the problems)\n"


# -- prune -----------------------------------------------------------------------

HAND_MADE = """# spamfilter counts v1 owner=
# totals ham_messages=3 spam_messages=3 ham_terms=9 spam_terms=13 ham_binary_terms=6 spam_binary_terms=8
a\t1\t0\t1\t0
b\t0\t1\t0\t4
c\t1\t1\t2\t1
d\t0\t1\t0\t1
e\t3\t2\t5\t3
f\t1\t0\t1\t0
g\t0\t3\t0\t4
"""
# last trained: a, b, c, e, g long ago; d recently; f has no date.
DATES = {"a": "2024-01-01", "b": "2024-03-01", "c": "2024-01-01", "d": "2024-06-20", "e": "2024-01-01", "g": "2024-05-31"}
TODAY = date(2024, 6, 30)


@pytest.fixture
def hand_made(db_url: str) -> Filter:
    f = Filter.open(Config(), db_url)
    Maintenance(f.store).import_counts(HAND_MADE.splitlines(keepends=True), replace=True)
    for token, day in DATES.items():
        execute(f, f"UPDATE tokens SET last_seen = {day_number(date.fromisoformat(day))} WHERE token = '{token}'")
    execute(f, "UPDATE tokens SET last_seen = NULL WHERE token = 'f'")
    return f


def test_prune_removes_exactly_the_rare_old_tokens_and_keeps_the_store_consistent(hand_made: Filter) -> None:
    with hand_made as f:
        assert Maintenance(f.store).check().ok
        # fewer than 2 messages and last trained 30 or more days ago (on or
        # before 2024-05-31): a, b and f (no date); not d (recent), not c, e, g (2+ messages)
        summary = Maintenance(f.store).prune(2, 30, today=TODAY)
        assert (summary.tokens_before, summary.tokens_removed) == (7, 3)
        assert (summary.ham_terms_removed, summary.spam_terms_removed) == (2, 4)
        assert token_rows(f) == [("c", 1, 1, 2, 1), ("d", 0, 1, 0, 1), ("e", 3, 2, 5, 3), ("g", 0, 3, 0, 4)]
        totals = f.store.totals()
        assert totals.messages.tolist() == [3, 3]
        assert totals.terms.tolist() == [9 - 2, 13 - 4]
        assert totals.binary_terms.tolist() == [6 - 2, 8 - 1]
        assert [h.tolist() for h in totals.histogram] == [[[0, 2], [1, 1], [3, 1]], [[1, 2], [2, 1], [3, 1]]]
        report = Maintenance(f.store).check()
        assert report.ok
        assert statuses(report)[LEDGER_CHECK] == "skipped (imported)"
        # 0 days: whenever last trained; g is kept on its 3 messages
        assert Maintenance(f.store).prune(2, 0, today=TODAY).tokens_removed == 1
        assert [r[0] for r in token_rows(f)] == ["c", "e", "g"]
        assert Maintenance(f.store).check().ok


def test_prune_dry_run_counts_and_changes_nothing(hand_made: Filter) -> None:
    with hand_made as f:
        before = export_text(f)
        summary = Maintenance(f.store).prune(2, 30, dry_run=True, today=TODAY)
        assert summary.dry_run and summary.tokens_removed == 3
        assert export_text(f) == before


def test_forget_and_mark_work_after_prune_and_forgetting_everything_empties_the_store(trained_url: str, mail: dict[str, list[MailItem]]) -> None:
    with Filter.open(Config(), trained_url) as f:
        summary = Maintenance(f.store).prune(2, 0)
        assert 0 < summary.tokens_removed < summary.tokens_before
        # The pruned tokens left the ledger's entries too: the ledger still
        # accounts for every count, token by token.
        report = Maintenance(f.store).check()
        assert report.ok and statuses(report)[LEDGER_CHECK] == "ok"
        assert query(f, "SELECT count(*) FROM untracked_totals WHERE messages != 0 OR terms != 0 OR binary_terms != 0") == [(0,)]
        assert f.forget(mail["spam"][:10]).forgotten == 10
        assert f.mark([(True, m) for m in mail["ham"][:5]]).relabelled == 5
        assert Maintenance(f.store).check().ok and statuses(Maintenance(f.store).check())[LEDGER_CHECK] == "ok"
        assert f.forget([m for _, m in labelled(mail)]).forgotten == 70  # 10 were forgotten above
        # Every count is gone again, so the ledger accounts for all of it once more.
        assert token_rows(f) == []
        assert query(f, "SELECT messages, terms, binary_terms FROM class_totals WHERE owner = '' ORDER BY label") == [(0, 0, 0), (0, 0, 0)]
        report = Maintenance(f.store).check()
        assert report.ok and statuses(report)[LEDGER_CHECK] == "ok"
        # and it learns as a new store would
        f.train(labelled(mail))
        assert Maintenance(f.store).check().ok and statuses(Maintenance(f.store).check())[LEDGER_CHECK] == "ok"


def test_forgetting_a_message_after_a_prune_leaves_a_later_message_s_count_of_a_pruned_token(db_url: str) -> None:
    # "zorblax" is in A alone and is pruned; B brings it back. Forgetting A
    # subtracted its ledger entry's 1 from B's count, silently: the entry
    # still held the pruned token.
    def message(subject: str, body: str) -> MailItem:
        return MailItem(subject, f"From: a@example.com\nSubject: {subject}\n\n{body}\n".encode())

    a, b = message("hello", "zorblax quuxword common words here"), message("hello again", "zorblax another common words there")
    c, d = message("spam", "buy cheap pills now"), message("ham", "meeting agenda tomorrow")
    with Filter.open(Config(), db_url) as f:
        f.train([(True, c), (False, a), (False, d)])
        assert Maintenance(f.store).prune(2, 0).tokens_removed > 0
        assert query(f, "SELECT count(*) FROM tokens WHERE token = 'zorblax'") == [(0,)]
        f.train([(False, b)])
        assert f.forget([a]).forgotten == 1
        assert query(f, "SELECT ham_docs, spam_docs, ham_terms, spam_terms FROM tokens WHERE token = 'zorblax'") == [(1, 0, 1, 0)]
        report = Maintenance(f.store).check()
        assert report.ok and statuses(report)[LEDGER_CHECK] == "ok"
        # and B, forgotten too, takes its own count away
        assert f.forget([b]).forgotten == 1
        assert query(f, "SELECT count(*) FROM tokens WHERE token = 'zorblax'") == [(0,)]
        assert Maintenance(f.store).check().ok


def test_forget_on_a_store_never_pruned_still_refuses_inconsistent_counts(trained_url: str, mail: dict[str, list[MailItem]]) -> None:
    with Filter.open(Config(), trained_url) as f:
        execute(f, f"DELETE FROM tokens WHERE token = {A_SPAM_TOKEN}")
        with pytest.raises(StoreError, match="would go negative"):
            f.forget(mail["spam"])


def test_prune_that_postgresql_ends_to_break_a_deadlock_is_run_again(fresh_postgres_url: str, mail: dict[str, list[MailItem]]) -> None:
    """A `forget` or `mark` holds a ledger entry that prune rewrites, then
    waits for the tokens, which prune has locked: PostgreSQL ends prune, the
    first to wait, and prune runs again once the other has finished."""
    with Filter.open(Config(), fresh_postgres_url) as f:
        f.train(labelled(mail))
    engine = sa.create_engine(fresh_postgres_url)
    try:
        with engine.connect() as other:
            first = other.execute(sa.text("SELECT digest FROM messages ORDER BY digest LIMIT 1")).scalar_one()
            deadlocks_before = other.execute(sa.text("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")).scalar_one()
            other.commit()
            me = other.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
            other.execute(sa.text("SELECT 1 FROM messages WHERE digest = :d FOR UPDATE"), {"d": first})
            outcome: dict[str, object] = {}

            def prune() -> None:
                with Filter.open(Config(), fresh_postgres_url) as f:
                    try:
                        outcome["summary"] = Maintenance(f.store).prune(2, 0)
                        outcome["check"] = Maintenance(f.store).check().ok
                    except Exception as exc:  # noqa: BLE001 - reported below
                        outcome["error"] = exc

            pruning = threading.Thread(target=prune)
            pruning.start()
            waiting = "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE NOT l.granted AND a.datname = current_database() AND l.pid <> :me"
            for _ in range(6000):
                if other.execute(sa.text(waiting), {"me": me}).scalar_one():
                    break
                threading.Event().wait(0.005)
            else:
                pytest.fail("prune never waited for the ledger entry")
            # Now wait for the tokens prune holds: a deadlock, which prune
            # (waiting longest) is the one to detect and lose.
            other.execute(sa.text("UPDATE tokens SET ham_docs = ham_docs WHERE token = 'never-a-token'"))
            other.rollback()
            pruning.join(60)
            assert not pruning.is_alive()
            deadlocks_after = other.execute(sa.text("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")).scalar_one()
    finally:
        engine.dispose()
    assert "error" not in outcome, outcome.get("error")
    assert deadlocks_after == deadlocks_before + 1
    summary = outcome["summary"]
    assert isinstance(summary, PruneSummary) and 0 < summary.tokens_removed < summary.tokens_before
    assert outcome["check"] is True


def test_prune_reports_the_file_size_with_the_wal_copied_in(trained_url: str, runner: CliRunner) -> None:
    path = Path(trained_url.removeprefix("sqlite:///"))
    wal = path.with_name(path.name + "-wal")
    with Filter.open(Config(), trained_url) as f:
        summary = Maintenance(f.store).prune(2, 0)
        assert summary.tokens_removed > 1000 and summary.checkpointed
        # The deletes went through the WAL; the figure is the file alone, and
        # pruning frees pages inside it without growing it.
        assert summary.size_after == path.stat().st_size
        assert not wal.exists() or wal.stat().st_size == 0
        assert summary.size_after == summary.size_before
    result = runner.invoke(app, ["--db", trained_url, "db", "prune", "--min-count", "3", "--older-than", "0"])
    assert result.exit_code == 0
    size = f"{path.stat().st_size / 1e6:.1f} MB"
    assert f"database file {size} before, {size} after; the freed pages stay in the file" in result.stdout


# -- vacuum ----------------------------------------------------------------------


def test_vacuum_shrinks_the_file_after_forgetting_most_messages(trained_url: str, mail: dict[str, list[MailItem]], runner: CliRunner) -> None:
    with Filter.open(Config(), trained_url) as f:
        f.forget(mail["spam"][:35] + mail["ham"][:35])
        before = f.store.size_bytes()
        summary = Maintenance(f.store).vacuum()
        assert summary.size_before == before
        assert summary.size_after is not None and before is not None
        assert summary.size_after < before / 2
        assert Maintenance(f.store).check().ok
    result = runner.invoke(app, ["--db", trained_url, "db", "vacuum"])
    assert result.exit_code == 0 and result.stdout.startswith("vacuumed sqlite:///")


# -- export / import -------------------------------------------------------------


@pytest.mark.parametrize("event_model", ["multinomial-binary", "multinomial", "bernoulli"])
def test_export_import_round_trip_classifies_identically(trained_url: str, tmp_path: Path, mail: dict[str, list[MailItem]], event_model: str) -> None:
    config = replace(Config(), model=replace(ModelConfig(), event_model=event_model))  # type: ignore[arg-type]
    with Filter.open(config, trained_url) as f:
        text = export_text(f)
        expected = log_odds(f, mail["unseen"])
    with Filter.open(config, f"sqlite:///{tmp_path / 'imported.db'}") as g:
        summary = Maintenance(g.store).import_counts(io.StringIO(text), replace=False)
        assert (summary.spam_messages, summary.ham_messages) == (40, 40)
        assert log_odds(g, mail["unseen"]) == expected
        assert export_text(g) == text
        report = Maintenance(g.store).check()
        assert report.ok and statuses(report)[LEDGER_CHECK] == "skipped (imported)"


@pytest.fixture
def recorded_url(db_url: str, mail: dict[str, list[MailItem]]) -> str:
    """A model trained in two runs, so the second wrote a calibration record."""
    with Filter.open(Config(), db_url) as f:
        f.train([(True, m) for m in mail["spam"][:20]] + [(False, m) for m in mail["ham"][:20]])
        f.train([(True, m) for m in mail["spam"][20:]] + [(False, m) for m in mail["ham"][20:]])
    return db_url


def test_export_import_round_trip_keeps_the_scores_and_the_feature_sums(recorded_url: str, tmp_path: Path, mail: dict[str, list[MailItem]]) -> None:
    # The calibration record and the feature sums were left out: the same
    # log-odds, but other scores, and with `features` other log-odds too.
    with_features = replace(Config(), model=replace(ModelConfig(), features=True))
    imported = f"sqlite:///{tmp_path / 'imported.db'}"
    trained_url = recorded_url
    with Filter.open(Config(), trained_url) as f:
        text = export_text(f)
        expected = [(v.score, v.log_odds, v.verdict) for v in f.classify(mail["unseen"]) if isinstance(v, Verdict)]
        # (label 2 is the record clock, which only the ledger's entries use:
        # an import has no ledger, so it starts a clock of its own)
        record = query(f, "SELECT label, bin, weight FROM calibration WHERE label < 2 ORDER BY label, bin")
        sums = query(f, "SELECT label, feature, n, total, total_sq FROM feature_stats ORDER BY label, feature")
    with Filter.open(with_features, trained_url) as f:
        featured = log_odds(f, mail["unseen"])
    assert len(record) > 5 and len(sums) == 14 and len(expected) == 12
    for replacing in (False, True):
        with Filter.open(Config(), imported) as g:
            Maintenance(g.store).import_counts(io.StringIO(text), replace=replacing)
            assert query(g, "SELECT label, bin, weight FROM calibration WHERE label < 2 ORDER BY label, bin") == record
            assert query(g, "SELECT label, feature, n, total, total_sq FROM feature_stats ORDER BY label, feature") == sums
            assert [(v.score, v.log_odds, v.verdict) for v in g.classify(mail["unseen"]) if isinstance(v, Verdict)] == expected
            assert export_text(g) == text
        with Filter.open(with_features, imported) as g:
            assert log_odds(g, mail["unseen"]) == featured


def test_an_import_into_a_model_emptied_by_forget_replaces_what_it_kept(recorded_url: str, tmp_path: Path, mail: dict[str, list[MailItem]]) -> None:
    # An online run records every message it scores and learns some; once
    # those are forgotten the model has no messages and no tokens but a
    # record, and `db import` (no flag, "into an empty model") added the
    # file's record to it: other scores than the same file gives a new
    # database.
    with Filter.open(Config(), recorded_url) as f:
        text = export_text(f)
        record = query(f, "SELECT label, bin, weight FROM calibration WHERE label < 2 ORDER BY label, bin")
    emptied = f"sqlite:///{tmp_path / 'emptied.db'}"
    with Filter.open(Config(), emptied) as g:
        steps = list(g.learn_online(labelled(mail)))
        g.forget(item for (_, item), step in zip(labelled(mail), steps) if step.trained)
        assert g.stats().spam_messages == g.stats().ham_messages == 0
        assert query(g, "SELECT count(*) FROM calibration WHERE label < 2 AND weight > 0") != [(0,)]
        Maintenance(g.store).import_counts(io.StringIO(text), replace=False, into_empty=True)
        assert query(g, "SELECT label, bin, weight FROM calibration WHERE label < 2 ORDER BY label, bin") == record
        assert export_text(g) == text


def test_a_counts_file_of_the_first_version_still_imports(trained_url: str, tmp_path: Path, mail: dict[str, list[MailItem]]) -> None:
    with Filter.open(Config(), trained_url) as f:
        lines = export_text(f).splitlines(keepends=True)
        expected = log_odds(f, mail["unseen"])
    old = ["# spamfilter counts v1 owner=\n", *(line for line in lines[1:] if not line.startswith(("# features ", "# calibration ")))]
    with Filter.open(Config(), f"sqlite:///{tmp_path / 'imported.db'}") as g:
        Maintenance(g.store).import_counts(old, replace=True)
        assert log_odds(g, mail["unseen"]) == expected
        assert query(g, "SELECT count(*) FROM calibration") == [(0,)]


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        ("# features label=2 feature=0 n=1 total=1 total_sq=1", "no feature 0 of label 2"),
        ("# features label=0 feature=7 n=1 total=1 total_sq=1", "no feature 7 of label 0"),
        ("# features label=0 feature=0 n=41 total=1 total_sq=1", "n=41"),
        ("# features label=0 feature=0 n=1 total=1 total_sq=-1", "total_sq=-1"),
        ("# features label=0 feature=0 n=1 total=1", "needs label, feature, n, total, total_sq"),
        ("# features label=0 feature=0 n=1.5 total=1 total_sq=1", "whole numbers"),
        ("# calibration label=0 bin=99 weight=1.0", "no calibration bin 99"),
        ("# calibration label=1 bin=3 weight=nan", "not a finite number"),
        ("# calibration label=1 bin=3 weight=-0.5", "not a finite number"),
        ("# calibration label=1 bin=3 weight=x", "is not a number"),
    ],
)
def test_bad_feature_and_calibration_lines_are_refused_and_change_nothing(trained_url: str, line: str, fault: str) -> None:
    with Filter.open(Config(), trained_url) as f:
        lines = export_text(f).splitlines(keepends=True)
        before = export_text(f)
        with pytest.raises(CountsFileError, match=re.escape(fault)):
            Maintenance(f.store).import_counts([*lines[:2], line + "\n", *lines[2:]], replace=True)
        assert export_text(f) == before


def test_feature_lines_after_the_token_lines_are_refused(recorded_url: str) -> None:
    # They are added before the tokens, in the order a trainer writes.
    with Filter.open(Config(), recorded_url) as f:
        lines = export_text(f).splitlines(keepends=True)
        moved = [line for line in lines if not line.startswith("# features ")] + [line for line in lines if line.startswith("# features ")]
        with pytest.raises(CountsFileError, match="comes after the token lines"):
            Maintenance(f.store).import_counts(moved, replace=True)


def test_export_format_is_sorted_tab_separated_text(recorded_url: str) -> None:
    with Filter.open(Config(), recorded_url) as f:
        lines = export_text(f).splitlines()
        rows = token_rows(f)
    assert lines[0] == "# spamfilter counts v2 owner="
    assert lines[1].startswith("# totals ham_messages=40 spam_messages=40 ham_terms=")
    columns = lines.index("# token\tham_docs\tspam_docs\tham_terms\tspam_terms")
    # between them the feature sums (7 features in 2 classes), the calibration
    # record's bins and the settings it was written under
    assert [line.split()[1] for line in lines[2:columns]] == ["features"] * 14 + ["calibration"] * (columns - 17) + ["record-settings"]
    assert columns > 17 and json.loads(lines[columns - 1].removeprefix("# record-settings "))["model.alpha"] == 0.1
    body = [line.split("\t") for line in lines[columns + 1 :]]
    assert [b[0] for b in body] == sorted(b[0] for b in body)
    assert [(unescape_token(b[0]), *map(int, b[1:])) for b in body] == sorted(rows, key=lambda r: str(r[0]))


def test_tokens_with_tabs_newlines_backslashes_and_hashes_survive(db_url: str) -> None:
    odd = ["#hash", "tab\there", "new\nline", "back\\slash\\n", "cr\r", "", "naïve 中文"]
    for token in odd:
        assert unescape_token(escape_token(token)) == token
        assert "\t" not in escape_token(token) and "\n" not in escape_token(token)
    lines = [
        "# spamfilter counts v1 owner=x\n",
        f"# totals ham_messages={len(odd)} spam_messages=0 ham_terms={len(odd)} spam_terms=0 ham_binary_terms={len(odd)} spam_binary_terms=0\n",
    ]
    lines += [f"{escape_token(t)}\t1\t0\t1\t0\n" for t in sorted(odd)]
    with Filter.open(Config(), db_url) as f:
        Maintenance(f.store).import_counts(lines, replace=True)
        assert sorted(r[0] for r in token_rows(f)) == sorted(odd)
        assert export_text(f).splitlines(keepends=True)[3:] == lines[2:]
        assert Maintenance(f.store).check().ok


def test_import_add_adds_and_replace_replaces(trained_url: str, tmp_path: Path) -> None:
    with Filter.open(Config(), trained_url) as f:
        text = export_text(f)
        rows = token_rows(f)
        Maintenance(f.store).import_counts(io.StringIO(text), replace=False)
        assert token_rows(f) == [(t, *(2 * int(str(x)) for x in counts)) for t, *counts in rows]
        assert f.store.totals().messages.tolist() == [80, 80]
        assert Maintenance(f.store).check().ok
        Maintenance(f.store).import_counts(io.StringIO(text), replace=True)
        assert token_rows(f) == rows
        assert query(f, "SELECT count(*) FROM messages WHERE owner = ''") == [(0,)]
        assert Maintenance(f.store).check().ok


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello\n", "not a spamfilter counts file"),
        ("", "empty"),
        ("# spamfilter counts v1 owner=\na\t1\t0\t1\t0\n", "before the '# totals' line"),
        (HAND_MADE.replace("e\t3\t2\t5\t3", "e\t3\t2\t2\t3"), "3 messages but 2 occurrences"),
        (HAND_MADE.replace("a\t1\t0\t1\t0", "a\t1\t0\t1\t-1"), "the count '-1' is not a whole number written in the digits 0-9"),
        (HAND_MADE.replace("a\t1\t0\t1\t0", "a\t\u0661\t0\t\u0661\t0"), "the count '\u0661' is not a whole number"),
        (HAND_MADE.replace("a\t1\t0\t1\t0", "a\t1\t0_0\t1\t0"), "the count '0_0' is not"),
        (HAND_MADE.replace("a\t1\t0\t1\t0", "a\t1\t+0\t1\t0"), "the count '\\+0' is not"),
        (HAND_MADE.replace("a\t1\t0\t1\t0", "a\t1\t0\t1.5\t0"), "the count '1.5' is not"),
        (HAND_MADE.replace("ham_messages=3", "ham_messages=+3"), "the totals line needs whole numbers written in the digits 0-9"),
        (HAND_MADE.replace("a\t1\t0\t1\t0", "a\t1\t0\t1"), "4 fields"),
        (HAND_MADE.replace("a\t1\t0\t1\t0", "a\\q\t1\t0\t1\t0"), "unknown escape"),
        (HAND_MADE.rsplit("\n", 3)[0] + "\n", "truncated"),
    ],
    ids=[
        "not-counts",
        "empty",
        "no-totals",
        "docs-above-terms",
        "negative",
        "other-digits",
        "underscore",
        "plus",
        "fraction",
        "totals-plus",
        "fields",
        "escape",
        "truncated",
    ],
)
def test_import_refuses_a_bad_file_and_changes_nothing(trained_url: str, text: str, message: str) -> None:
    with Filter.open(Config(), trained_url) as f:
        before = export_text(f)
        with pytest.raises(CountsFileError, match=message):
            Maintenance(f.store).import_counts(io.StringIO(text), replace=True)
        assert export_text(f) == before
        assert Maintenance(f.store).check().ok


def test_export_and_import_through_the_command_line(trained_url: str, tmp_path: Path, runner: CliRunner) -> None:
    out = tmp_path / "counts.tsv"
    result = runner.invoke(app, ["--db", trained_url, "db", "export", str(out)])
    assert result.exit_code == 0, result.output
    assert (out.stat().st_mode & 0o777) == 0o600
    stdout = runner.invoke(app, ["--db", trained_url, "db", "export"])
    assert stdout.exit_code == 0 and stdout.stdout == out.read_text(encoding="utf-8")
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    result = runner.invoke(app, ["--db", fresh, "--user", "bob", "db", "import", "-"], input=out.read_bytes())
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("imported ") and "40 spam and 40 ham messages into the model of user bob" in result.stdout
    assert runner.invoke(app, ["--db", fresh, "--user", "bob", "db", "check"]).exit_code == 0
    # bob's model is not empty now: the command wants to know what to do
    again = runner.invoke(app, ["--db", fresh, "--user", "bob", "db", "import", str(out)])
    assert again.exit_code == exitcodes.USAGE and "--replace or --add" in again.stderr
    assert runner.invoke(app, ["--db", fresh, "--user", "bob", "db", "import", "--replace", str(out)]).exit_code == 0
    # the default model of that database was left alone
    with Filter.open(Config(), fresh) as f:
        assert token_rows(f) == []
    missing = runner.invoke(app, ["--db", fresh, "db", "import", str(tmp_path / "missing.tsv")])
    assert missing.exit_code == exitcodes.NO_INPUT
    broken = tmp_path / "broken.tsv"
    broken.write_text("not counts\n")
    assert runner.invoke(app, ["--db", fresh, "db", "import", str(broken)]).exit_code == exitcodes.DATA_ERROR


def test_a_failed_import_into_a_new_path_leaves_no_database_or_folder_behind(tmp_path: Path, runner: CliRunner) -> None:
    bad = tmp_path / "bad.tsv"
    bad.write_text("not counts\n")
    url = f"sqlite:///{tmp_path / 'new' / 'deeper' / 'model.db'}"
    for counts, code in ((bad, exitcodes.DATA_ERROR), (tmp_path / "missing.tsv", exitcodes.NO_INPUT)):
        result = runner.invoke(app, ["--db", url, "--create-dirs", "db", "import", str(counts)])
        assert result.exit_code == code, result.output
        assert [p.name for p in tmp_path.iterdir()] == ["bad.tsv"]
    # A database that was there before stays as it was.
    good = tmp_path / "good.tsv"
    good.write_text(HAND_MADE)
    assert runner.invoke(app, ["--db", url, "--create-dirs", "db", "import", str(good)]).exit_code == 0
    with Filter.open(Config(), url) as f:
        before = export_text(f)
    assert runner.invoke(app, ["--db", url, "db", "import", "--add", str(bad)]).exit_code == exitcodes.DATA_ERROR
    with Filter.open(Config(), url) as f:
        assert export_text(f) == before


def test_a_new_database_another_process_wrote_into_is_not_removed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new' / 'model.db'}"
    with Store.open(url) as created:
        assert created.created == (tmp_path / "new", tmp_path / "new" / "model.db")
        with Filter.open(Config(), url) as other:
            Maintenance(other.store).import_counts(HAND_MADE_LINES, replace=True)
        assert not created.remove_if_unused()
    assert (tmp_path / "new" / "model.db").exists()
    with Store.open(url) as again:
        assert again.created == () and not again.remove_if_unused()


def test_a_new_database_another_process_has_open_is_not_removed(tmp_path: Path) -> None:
    # A failed import removed the new file while a train in another process
    # had it open: the train wrote into the deleted file and reported success.
    path = tmp_path / "model.db"
    created = Store.open(f"sqlite:///{path}")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sqlite3, sys, time; c = sqlite3.connect({str(path)!r}); c.execute('SELECT count(*) FROM sqlite_master').fetchall(); print('open', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        assert not created.remove_if_unused()
        assert path.exists()
    finally:
        holder.communicate("", timeout=60)
    assert Store.open(f"sqlite:///{path}").remove_if_unused() is False  # not created by this open
    again = Store.open(f"sqlite:///{tmp_path / 'other.db'}")
    assert again.remove_if_unused() and not (tmp_path / "other.db").exists()


def test_a_failed_import_into_an_empty_server_database_leaves_it_empty(fresh_postgres_url: str, tmp_path: Path, runner: CliRunner) -> None:
    # The schema made for the import stayed: stats then showed an empty model
    # where it had said "no spamfilter database" (66).
    bad = tmp_path / "bad.tsv"
    bad.write_text("not counts\n")
    assert runner.invoke(app, ["--db", fresh_postgres_url, "db", "import", str(bad)]).exit_code == exitcodes.DATA_ERROR
    engine = sa.create_engine(fresh_postgres_url)
    with engine.connect() as conn:
        assert sa.inspect(conn).get_table_names() == []
    engine.dispose()
    assert runner.invoke(app, ["--db", fresh_postgres_url, "stats"]).exit_code == exitcodes.NO_INPUT
    # A schema that was there before stays, rows and all.
    good = tmp_path / "good.tsv"
    good.write_text(HAND_MADE)
    assert runner.invoke(app, ["--db", fresh_postgres_url, "db", "import", str(good)]).exit_code == 0
    assert runner.invoke(app, ["--db", fresh_postgres_url, "db", "import", "--add", str(bad)]).exit_code == exitcodes.DATA_ERROR
    assert runner.invoke(app, ["--db", fresh_postgres_url, "stats"]).exit_code == 0


def test_prune_through_the_command_line(trained_url: str, runner: CliRunner) -> None:
    dry = runner.invoke(app, ["--db", trained_url, "db", "prune", "--min-count", "2", "--older-than", "0", "--dry-run"])
    assert dry.exit_code == 0 and dry.stdout.startswith("would prune ")
    result = runner.invoke(app, ["--db", trained_url, "db", "prune", "--min-count", "2", "--older-than", "0"])
    assert result.exit_code == 0 and result.stdout.startswith("pruned ")
    assert dry.stdout.split()[2:5] == result.stdout.split()[1:4]  # the same "N of M"
    assert "db vacuum" in result.stdout
    assert runner.invoke(app, ["--db", trained_url, "db", "check"]).exit_code == 0
    assert runner.invoke(app, ["--db", trained_url, "db", "prune", "--min-count", "2"]).exit_code == exitcodes.USAGE


# -- both backends -----------------------------------------------------------------


def test_check_prune_export_import_on_each_backend(any_db_url: str, trained_url: str, mail: dict[str, list[MailItem]]) -> None:
    with Filter.open(Config(), trained_url) as f:
        text = export_text(f)
        expected = log_odds(f, mail["unseen"])
    with Filter.open(Config(), any_db_url) as g:
        Maintenance(g.store).import_counts(io.StringIO(text), replace=True)
        assert export_text(g) == text
        assert log_odds(g, mail["unseen"]) == expected
        assert Maintenance(g.store).check().ok
        g.train(labelled(mail)[:10])
        Maintenance(g.store).prune(2, 0)
        assert g.forget([m for _, m in labelled(mail)[:10]]).forgotten == 10
        assert Maintenance(g.store).check().ok
        Maintenance(g.store).vacuum()


# -- import: what could not be trained further is refused, at its line ----------------------

BIG = MAX_COUNT + 1  # 2^62: counts stay below it, with room to train
HAND_MADE_LINES = HAND_MADE.splitlines(keepends=True)  # line 3 is token a, line 9 token g
UNCOMPRESSIBLE = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(47))  # 3,008 bytes


def edited(line: int, text: str, *, totals: str | None = None) -> bytes:
    """HAND_MADE with ``text`` for its line ``line`` (a lone surrogate
    becomes the byte it stands for: not UTF-8)."""
    lines = list(HAND_MADE_LINES)
    lines[line - 1] = text
    if totals is not None:
        lines[1] = totals
    return "".join(lines).encode("utf-8", "surrogateescape")


WRAPPED = (
    "# spamfilter counts v1 owner=\n"
    "# totals ham_messages=1 spam_messages=0 ham_terms=0 spam_terms=0 ham_binary_terms=4 spam_binary_terms=0\n"
    + "".join(f"t{i}\t1\t0\t{MAX_COUNT}\t0\n" for i in range(4))
).encode()


@pytest.mark.parametrize(
    ("content", "where"),
    [
        (edited(9, f"g\t0\t3\t0\t{BIG}\n"), f"line 9: a count is above {MAX_COUNT} (2^62 - 1)"),
        (edited(2, HAND_MADE_LINES[1].replace("spam_terms=13", f"spam_terms={BIG}")), "line 2: spam_terms"),
        (
            edited(
                4,
                HAND_MADE_LINES[2] + HAND_MADE_LINES[2] + HAND_MADE_LINES[3],
                totals=HAND_MADE_LINES[1].replace("ham_terms=9", "ham_terms=11").replace("ham_binary_terms=6", "ham_binary_terms=8"),
            ),
            "line 4: the token 'a' is given again (line 3)",
        ),
        ("".join([*HAND_MADE_LINES[:2], HAND_MADE_LINES[3], HAND_MADE_LINES[2], *HAND_MADE_LINES[4:]]).encode(), "line 4: the token 'a' comes after 'b'"),
        (WRAPPED, "end of file: the token lines add up to 18446744073709551612 ham terms"),
        (edited(5, "c\x00\t1\t1\t2\t1\n"), "line 5: the token holds a NUL character"),
        (edited(5, f"c{UNCOMPRESSIBLE}\t1\t1\t2\t1\n"), "line 5: the token is longer than 1000 bytes"),
        (edited(5, "c" * 5000 + "\t1\t1\t2\t1\n"), "line 5: longer than 4096 bytes"),
        (edited(3, "a\udcff\t1\t0\t1\t0\n"), "line 3: not UTF-8"),
    ],
    ids=["count-2^62", "total-2^62", "repeated", "unordered", "wrapped-sum", "nul", "long-token", "long-line", "utf8"],
)
def test_import_refuses_what_a_backend_cannot_hold_at_its_line_and_changes_nothing(
    any_db_url: str, tmp_path: Path, runner: CliRunner, content: bytes, where: str
) -> None:
    with Filter.open(Config(), any_db_url) as f:
        Maintenance(f.store).import_counts(HAND_MADE_LINES, replace=True)
        before = export_text(f)
    path = tmp_path / "bad.tsv"
    path.write_bytes(content)
    for how in ("--add", "--replace"):
        result = runner.invoke(app, ["--db", any_db_url, "db", "import", how, str(path)])
        assert result.exit_code == exitcodes.DATA_ERROR, result.output
        assert f"counts file, {where}" in result.stderr
    with Filter.open(Config(), any_db_url) as f:
        assert export_text(f) == before


def test_import_takes_replace_or_add_not_both(runner: CliRunner, db_url: str, tmp_path: Path) -> None:
    counts = tmp_path / "counts.tsv"
    counts.write_text(HAND_MADE)
    result = runner.invoke(app, ["--db", db_url, "db", "import", "--replace", "--add", str(counts)])
    assert result.exit_code == exitcodes.USAGE and "give --replace or --add, not both" in result.stderr


def test_adding_counts_that_would_overflow_the_totals_is_refused(db_url: str) -> None:
    nearly_full = HAND_MADE.replace("spam_messages=3", f"spam_messages={MAX_COUNT - 1}")
    with Filter.open(Config(), db_url) as f:
        Maintenance(f.store).import_counts(io.StringIO(nearly_full), replace=True)
        with pytest.raises(CountsFileError, match="line 2: spam_messages=3 is more than the model may hold \\(at most 1 more:"):
            Maintenance(f.store).import_counts(io.StringIO(HAND_MADE), replace=False)
        assert Maintenance(f.store).import_counts(io.StringIO(HAND_MADE), replace=True).spam_messages == 3


def test_a_huge_line_is_refused_after_reading_a_bounded_part_of_it() -> None:
    stream = io.BytesIO(HAND_MADE_LINES[0].encode() + b"x" * 5_000_000 + b"\n")
    lines = read_counts_lines(stream)
    assert next(lines) == HAND_MADE_LINES[0]
    with pytest.raises(CountsFileError, match=f"line 2: longer than {MAX_LINE_BYTES} bytes"):
        next(lines)
    assert stream.tell() == len(HAND_MADE_LINES[0]) + MAX_LINE_BYTES + 2


def test_a_forget_racing_a_prune_on_postgresql_waits_for_it(postgres_url: str, mail: dict[str, list[MailItem]], monkeypatch: pytest.MonkeyPatch) -> None:
    """A forget that has read `untracked` (still zero) while a prune commits
    must not run the strict subtraction over the pruned tokens: it takes the
    table lock a prune conflicts with first, so the prune waits for it."""
    import threading

    import sqlalchemy as sa

    from spamfilter.store import StoreTransaction

    url = sa.engine.make_url(postgres_url).set(database=f"{sa.engine.make_url(postgres_url).database}_race").render_as_string(hide_password=False)
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{sa.engine.make_url(url).database}"'))
        conn.execute(sa.text(f'CREATE DATABASE "{sa.engine.make_url(url).database}"'))
    try:
        with Filter.open(Config(), url) as f:
            f.train(labelled(mail))
        read, pruned = threading.Event(), threading.Event()
        untracked = StoreTransaction.untracked

        def slow_untracked(tx: StoreTransaction) -> object:
            result = untracked(tx)
            if threading.current_thread().name == "forget":
                read.set()
                pruned.wait(3)  # the prune gets 3 s to commit in between
            return result

        monkeypatch.setattr(StoreTransaction, "untracked", slow_untracked)
        outcome: dict[str, object] = {}

        def forget() -> None:
            with Filter.open(Config(), url) as g:
                try:
                    outcome["forgotten"] = g.forget([m for _, m in labelled(mail)[:10]]).forgotten
                except Exception as exc:  # noqa: BLE001 - reported below
                    outcome["error"] = exc

        worker = threading.Thread(target=forget, name="forget")
        worker.start()
        assert read.wait(60)
        with Filter.open(Config(), url) as p:
            Maintenance(p.store).prune(2, 0)
        pruned.set()
        worker.join(60)
        assert "error" not in outcome, outcome
        assert outcome["forgotten"] == 10
        with Filter.open(Config(), url) as q:
            assert Maintenance(q.store).check().ok
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{sa.engine.make_url(url).database}" WITH (FORCE)'))
        admin.dispose()


# -- counts near the 64-bit limit ---------------------------------------------------


def near_the_limit(ham_terms: int) -> str:
    """A counts file whose one ham token occurs ``ham_terms`` times."""
    return (
        "# spamfilter counts v1 owner=\n"
        f"# totals ham_messages=1 spam_messages=1 ham_terms={ham_terms} spam_terms=1 ham_binary_terms=1 spam_binary_terms=1\n"
        "bar\t0\t1\t0\t1\n"
        f"foo\t1\t0\t{ham_terms}\t0\n"
    )


def test_import_keeps_headroom_and_training_past_the_limit_is_refused_not_stored(any_db_url: str, tmp_path: Path, runner: CliRunner) -> None:
    """A total of 2^63 - 4 used to import; one training then made it an
    inexact REAL that no command could read (exit 70 from then on)."""
    counts = tmp_path / "counts.tsv"
    message = tmp_path / "ham.eml"
    message.write_bytes(b"From: a@b.example\nSubject: hello\n\nhello world there\n")
    counts.write_text(near_the_limit(2**63 - 4))
    refused = runner.invoke(app, ["--db", any_db_url, "db", "import", str(counts)])
    assert refused.exit_code == exitcodes.DATA_ERROR, refused.output
    assert f"counts file, line 2: ham_terms={2**63 - 4} is more than the model may hold (at most {MAX_COUNT}:" in refused.stderr
    counts.write_text(near_the_limit(MAX_COUNT))
    assert runner.invoke(app, ["--db", any_db_url, "db", "import", str(counts)]).exit_code == 0
    with Filter.open(Config(), any_db_url) as f:
        before = export_text(f)
    train = runner.invoke(app, ["--db", any_db_url, "train", "--ham", str(message)])
    assert train.exit_code == exitcodes.STORE_ERROR, train.output
    assert f"a count of the ham class totals past {MAX_COUNT} (2^62 - 1)" in train.stderr and "nothing was written" in train.stderr
    with Filter.open(Config(), any_db_url) as f:
        assert export_text(f) == before
        assert Maintenance(f.store).check().ok
    for command in (["stats"], ["db", "check"], ["classify", str(message)], ["db", "export"]):
        result = runner.invoke(app, ["--db", any_db_url, *command])
        assert result.exit_code == 0, (command, result.output)
    # The other class still has room.
    assert runner.invoke(app, ["--db", any_db_url, "train", "--spam", str(message)]).exit_code == 0


def test_a_count_sqlite_turned_into_a_real_is_reported_by_check_and_refused_by_every_command(trained_url: str, tmp_path: Path, runner: CliRunner) -> None:
    """The state the import above used to lead to: SQLite keeps a sum past
    2^63 - 1 as a REAL."""
    path = sqlite_path(trained_url)
    assert path is not None
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE class_totals SET terms = terms + 9223372036854775807 WHERE owner = '' AND label = 0")
        assert conn.execute("SELECT typeof(terms) FROM class_totals WHERE owner = '' AND label = 0").fetchone() == ("real",)
    check = runner.invoke(app, ["--db", trained_url, "db", "check"])
    assert check.exit_code == exitcodes.STORE_INCONSISTENT, check.output
    assert f"FAILED   every count is a whole number no larger than {MAX_COUNT} (2^62 - 1)" in check.stdout
    assert "class_totals ham terms is 9.2233720368547" in check.stdout
    assert "skipped  the counts compared with each other and the ledger (a count is out of range)" in check.stdout
    as_json = json.loads(runner.invoke(app, ["--db", trained_url, "db", "check", "--format", "json"]).stdout)
    assert as_json["ok"] is False
    message = tmp_path / "ham.eml"
    message.write_bytes(b"From: a@b.example\nSubject: hello\n\nhello world there\n")
    for command in (["stats"], ["classify", str(message)], ["db", "export"], ["filter"]):
        result = runner.invoke(app, ["--db", trained_url, *command], input=message.read_bytes())
        assert result.exit_code == exitcodes.STORE_INCONSISTENT, (command, result.output)
        assert "class_totals holds 9.2233720368547" in result.stderr and "`spamfilter db check` lists the problems" in result.stderr
    # train reads the model before it learns (to record how it scored the
    # message): refused the same way, inside its write transaction
    before = sqlite3.connect(path).execute("SELECT count(*), sum(ham_docs) FROM tokens").fetchone()
    train = runner.invoke(app, ["--db", trained_url, "train", "--ham", str(message)])
    assert train.exit_code == exitcodes.STORE_INCONSISTENT and "class_totals holds 9.2233720368547" in train.stderr
    assert sqlite3.connect(path).execute("SELECT count(*), sum(ham_docs) FROM tokens").fetchone() == before


def test_two_imports_into_an_empty_model_at_once_cannot_both_take_it(any_db_url: str) -> None:
    # `db import FILE` (neither --replace nor --add) checked for an empty
    # model before its transaction: two started together could both see
    # it empty, and both add (the model doubled). The check is now inside
    # the import's own transaction, with other writers kept out.
    first_read = threading.Event()
    go_on = threading.Event()

    def slow_lines() -> Iterator[str]:
        lines = HAND_MADE.splitlines(keepends=True)
        yield from lines[:3]
        first_read.set()  # the first import is inside its transaction
        go_on.wait(60)
        yield from lines[3:]

    results: dict[str, object] = {}

    def run(name: str, lines: Iterable[str]) -> None:
        with Filter.open(Config(), any_db_url) as f:
            try:
                results[name] = Maintenance(f.store).import_counts(lines, replace=False, into_empty=True)
            except ModelNotEmpty as exc:
                results[name] = exc

    Filter.open(Config(), any_db_url).close()  # the schema, made once
    one = threading.Thread(target=run, args=("one", slow_lines()))
    one.start()
    assert first_read.wait(60)
    two = threading.Thread(target=run, args=("two", HAND_MADE.splitlines(keepends=True)))
    two.start()
    two.join(1.0)  # waits for the first import's transaction
    go_on.set()
    one.join(60)
    two.join(60)
    assert not one.is_alive() and not two.is_alive()
    assert getattr(results["one"], "spam_messages", None) == 3
    assert isinstance(results["two"], ModelNotEmpty)
    with Filter.open(Config(), any_db_url) as f:
        assert f.stats().spam_messages == 3


def test_with_a_selection_forgetting_after_a_prune_leaves_a_later_message_s_count_too(any_db_url: str, sample: Path) -> None:
    # With a one-dependence selection the ledger's entries kept the pruned
    # tokens, so forgetting A took B's count of "zorblax" away, and db check
    # could not see it (the token was pruned).
    from dataclasses import replace as replaced

    from spamfilter.config import ModelConfig, StoreConfig
    from spamfilter.filter import dependence
    from spamfilter.mail.sources import read_messages

    def message(subject: str, body: str) -> MailItem:
        return MailItem(subject, f"From: a@example.com\nSubject: {subject}\n\n{body}\n".encode())

    a, b = message("hello", "zorblax quuxword common words here"), message("hello again", "zorblax another common words there")
    model = replaced(ModelConfig(), dependence="aode", aode_parents=12, aode_children=300, aode_min_support=3, reselect_growth=0.0)
    spam = [(True, m) for m in read_messages([str(sample / "train-spam.mbox")])]
    ham = [(False, m) for m in read_messages([str(sample / "train-ham.mbox")])]
    with Filter.open(Config(store=StoreConfig(url=any_db_url), model=model)) as f:
        f.train([*spam, *ham, (False, a)])
        assert len(Maintenance(f.store).reselect(model).parents) == 12
        assert Maintenance(f.store).prune(2, 0).tokens_removed > 0
        assert query(f, "SELECT count(*) FROM tokens WHERE token = 'zorblax'") == [(0,)]
        report = Maintenance(f.store).check()
        assert report.ok
        f.train([(False, b)])
        assert f.forget([a]).forgotten == 1
        assert query(f, "SELECT ham_docs, spam_docs, ham_terms, spam_terms FROM tokens WHERE token = 'zorblax'") == [(1, 0, 1, 0)]
        assert Maintenance(f.store).check().ok
        with f.store.begin(write=False) as tx:
            assert dependence.differences(tx) == []  # the pairs are the ledger's
        assert f.forget([b]).forgotten == 1
        assert query(f, "SELECT count(*) FROM tokens WHERE token = 'zorblax'") == [(0,)]
        assert Maintenance(f.store).check().ok


@pytest.mark.parametrize(
    ("damage", "listed"),
    [
        ("UPDATE messages SET label = 7", "label 7, trained at"),
        ("UPDATE messages SET trained_at = 'garbage'", "label 0, trained at 'garbage'"),
        # A number is a valid Julian day to SQLite's datetime().
        ("UPDATE messages SET trained_at = 5", "label 0, trained at 5"),
        ("UPDATE messages SET record_bin = 'x', record_weight = 1.0", "messages "),
        ("UPDATE messages SET token_counts = 'text'", "TypeError: string argument without an encoding"),
    ],
    ids=["label", "trained_at", "trained_at-number", "record-bin", "text-entry"],
)
def test_a_damaged_ledger_row_is_listed_by_check_and_refused_by_forget_and_report(damage: str, listed: str, tmp_path: Path, runner: CliRunner) -> None:
    # Each was an internal error (70) in `db check` itself, or in forget,
    # mark and report while `db check` said ok.
    url = f"sqlite:///{tmp_path / 'd.db'}"
    ham = tmp_path / "ham.eml"
    ham.write_bytes(b"Subject: minutes\n\nthe meeting minutes\n")
    spam = tmp_path / "spam.eml"
    spam.write_bytes(b"Subject: pills\n\ncheap pills now\n")
    assert runner.invoke(app, ["--db", url, "train", "--ham", str(ham), "--spam", str(spam)]).exit_code == 0
    with sqlite3.connect(tmp_path / "d.db") as conn:
        conn.execute(damage + " WHERE label = 0")
    check = runner.invoke(app, ["--db", url, "db", "check"])
    assert check.exit_code == exitcodes.STORE_INCONSISTENT, check.output
    assert listed in check.stdout
    forget = runner.invoke(app, ["--db", url, "forget", str(ham)])
    assert forget.exit_code == exitcodes.STORE_INCONSISTENT, forget.output
    assert "damaged" in forget.stderr and "db check" in forget.stderr
    report = runner.invoke(app, ["--db", url, "report", "--out", str(tmp_path / "r.html")])
    assert report.exit_code in (0, exitcodes.STORE_INCONSISTENT), report.output
    assert "internal error" not in report.output


def test_export_of_a_store_whose_tokens_do_not_add_up_refuses_and_writes_nothing(trained_url: str, tmp_path: Path, runner: CliRunner) -> None:
    # A damaged SQLite file can give some of its token rows and no error:
    # export wrote them, said "exported N tokens" with exit 0, and the file
    # was one `db import` refuses (a backup that cannot be restored).
    path = trained_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        lost = db.execute("DELETE FROM tokens WHERE token LIKE 'bi:%'").rowcount
    assert lost > 0
    out = tmp_path / "counts.tsv"
    result = runner.invoke(app, ["--db", trained_url, "db", "export", str(out)])
    assert result.exit_code == exitcodes.STORE_ERROR
    assert "the database is damaged: its tokens add up to ham_binary_terms=" in result.stderr
    assert "the export stops here, incomplete (`db export FILE` leaves FILE as it was" in result.stderr
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".counts")] == []
    # On standard output the lines are gone already: the exit and the line say so.
    piped = runner.invoke(app, ["--db", trained_url, "db", "export"])
    assert piped.exit_code == exitcodes.STORE_ERROR and "the export stops here, incomplete" in piped.stderr
    assert piped.stdout.startswith("# spamfilter counts v2")
