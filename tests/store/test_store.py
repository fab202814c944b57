"""Tests of spamfilter.store: schema, counts, histogram, ledger blobs.

Every test that takes ``db_url`` or ``store`` runs twice: on a SQLite file and
on a fresh PostgreSQL database (see ``any_db_url`` in conftest.py).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import zlib
from collections.abc import Callable
from datetime import date, datetime, timezone
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from alembic.config import Config as AlembicConfig
from alembic.script import ScriptDirectory

from spamfilter.counts import ClassCounts, TokenCounts
from spamfilter.errors import NoSuchDatabase, SchemaOutOfDate, StoreBusyError, StoreError
from spamfilter.mail import MailItem, parse_message
from spamfilter.store import SCHEMA_REVISION, Store, pack_token_counts, sqlite_path, unpack_token_counts
from spamfilter.tokenizer import Tokenizer
from spamfilter.vectorizer import term_counts

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"

Rows = list[tuple[object, ...]]


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """This module's stores: on both backends."""
    return any_db_url


def query(store: Store, sql: str) -> Rows:
    with store.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(sql))]


def dump(store: Store) -> dict[str, Rows]:
    """Every table's rows, sorted, for before/after comparisons."""
    return {
        "tokens": query(store, "SELECT token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens ORDER BY token"),
        "class_totals": query(store, "SELECT label, messages, terms, binary_terms FROM class_totals ORDER BY label"),
        "doc_histogram": query(store, "SELECT label, doc_count, tokens FROM doc_histogram ORDER BY label, doc_count"),
        "messages": query(store, "SELECT digest, label, trained_at, token_counts FROM messages ORDER BY digest"),
    }


def histogram_from_tokens(store: Store) -> Rows:
    """doc_histogram recomputed from scratch: for each class, tokens per message count."""
    return query(store, "SELECT 0, ham_docs, count(*) FROM tokens GROUP BY ham_docs UNION ALL SELECT 1, spam_docs, count(*) FROM tokens GROUP BY spam_docs ORDER BY 1, 2")


def add(store: Store, token_list: list[str], delta: np.ndarray, class_delta: np.ndarray | None = None) -> None:
    """Add (m, 4) rows ham_docs, spam_docs, ham_terms, spam_terms and a (3, 2)
    class table (messages, terms, binary_terms) in one transaction."""
    table = np.asarray(delta, dtype=np.int64).reshape(-1, 4).T
    classes = ClassCounts.zeros() if class_delta is None else ClassCounts.from_table(class_delta)
    with store.begin() as tx:
        tx.add_counts(token_list, TokenCounts(table[0:2].copy(), table[2:4].copy()), classes)


def rows(counts: TokenCounts) -> np.ndarray:
    """Token counts as (m, 4) rows ham_docs, spam_docs, ham_terms, spam_terms."""
    return np.concatenate([counts.doc_count, counts.term_count]).T


# -- schema --------------------------------------------------------------------


def test_schema_revision_is_the_alembic_head_of_migrations() -> None:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert ScriptDirectory.from_config(cfg).get_heads() == [SCHEMA_REVISION]


def test_new_database_gets_schema_at_head_wal_and_owner_only_mode(store: Store) -> None:
    assert store.schema_revision() == SCHEMA_REVISION
    assert query(store, "SELECT version_num FROM alembic_version") == [(SCHEMA_REVISION,)]
    tables = set(sa.inspect(store.engine).get_table_names())
    assert tables == {
        "alembic_version",
        "calibration",
        "record_settings",
        "tokens",
        "class_totals",
        "doc_histogram",
        "messages",
        "untracked_totals",
        "imap_folders",
        "imap_uids",
        "imap_messages",
        "model_versions",
        "feature_stats",
        "aode_parents",
        "aode_pairs",
        "aode_selection",
    }
    assert query(store, "SELECT label, messages, terms, binary_terms FROM class_totals ORDER BY label") == [(0, 0, 0, 0), (1, 0, 0, 0)]
    if store.engine.dialect.name == "sqlite":
        assert query(store, "PRAGMA journal_mode") == [("wal",)]
        path = sqlite_path(store.url)
        assert path is not None
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_reopening_a_database_keeps_it(db_url: str) -> None:
    with Store.open(db_url) as first:
        add(first, ["spam"], np.array([[0, 1, 0, 2]]), np.array([[0, 1], [0, 2], [0, 1]]))
        before = dump(first)
    with Store.open(db_url) as second:
        assert dump(second) == before


def test_a_read_only_sqlite_url_reads_and_refuses_to_write(tmp_path: Path) -> None:
    # SQLite's own URI options, "?mode=ro" here, reach SQLite: the driver
    # ignores them without uri=true, and this store would be written.
    folder = tmp_path / "odd?name#1"
    folder.mkdir()
    path = folder / "mail.db"
    url = f"sqlite:///{str(path).replace('?', '%3F').replace('#', '%23')}"
    with Store.open(url) as store:
        add(store, ["spam"], np.array([[0, 1, 0, 2]]), np.array([[0, 1], [0, 2], [0, 1]]))
        before = dump(store)
    assert path.exists()
    with Store.open(url + "?mode=ro") as ro:
        assert dump(ro) == before
        # (and says the URL asked for it, not that the file needs another mode)
        with pytest.raises(StoreError, match="readonly database \\(the URL opens it read-only, mode=ro: this command writes\\)$"):
            add(ro, ["ham"], np.array([[1, 0, 1, 0]]))
    with Store.open(url) as store:
        assert dump(store) == before
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith("mail.db")) == []
    with pytest.raises(StoreError, match="no such database"):
        Store.open(f"sqlite:///{tmp_path / 'missing.db'}?mode=ro")
    assert not (tmp_path / "missing.db").exists()


def test_exclusive_refuses_a_second_holder_at_once_until_the_first_lets_go(any_db_url: str) -> None:
    # One `imap run` per account: a second one, from another connection (a
    # process, or another MX host on PostgreSQL), is refused, not queued.
    with Store.open(any_db_url) as first, Store.open(any_db_url) as second:
        with first.exclusive("an imap run of account 'a'"):
            with pytest.raises(StoreBusyError, match="an imap run of account 'a' is already running in another process"):
                with second.exclusive("an imap run of account 'a'"):
                    pass
            with second.exclusive("an imap run of account 'b'"):  # another name: its own lock
                pass
        with second.exclusive("an imap run of account 'a'"):
            pass


def test_a_sqlite_url_option_that_sqlite_does_not_read_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="'moed' is not one SQLite reads"):
        Store.open(f"sqlite:///{tmp_path / 'mail.db'}?moed=ro")
    assert not (tmp_path / "mail.db").exists()


def test_unknown_revision_raises_store_error(db_url: str) -> None:
    with Store.open(db_url) as store:
        with store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = '0000'"))
    # '0000' is not a revision of migrations/: the database is taken to be
    # from a newer spamfilter, so it is a StoreError but not SchemaOutOfDate.
    with pytest.raises(StoreError, match="revision 0000 is unknown") as info:
        Store.open(db_url)
    assert not isinstance(info.value, SchemaOutOfDate)


def test_older_known_revision_raises_schema_out_of_date(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store.open(db_url) as store:
        with store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = '0000'"))
    # There is only one revision so far; pretend '0000' is an older one.
    monkeypatch.setattr(Store, "_known_revisions", lambda self: {"0000", SCHEMA_REVISION})
    with pytest.raises(SchemaOutOfDate, match="spamfilter db upgrade"):
        Store.open(db_url)


def test_empty_database_without_upgrade_raises_schema_out_of_date(db_url: str) -> None:
    with pytest.raises(SchemaOutOfDate, match="empty database"):
        Store.open(db_url, upgrade_new=False)


def test_foreign_tables_without_revision_raise_store_error_and_are_left_as_they_were(db_url: str) -> None:
    # Refused by every command, but a refused command switched a SQLite
    # file to WAL, and `db upgrade` wrote spamfilter's tables beside its own.
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE other (x INTEGER)"))
    engine.dispose()
    with pytest.raises(StoreError, match="has tables but no spamfilter schema revision"):
        Store.open(db_url)
    store = Store.open(db_url, check=False)
    with pytest.raises(StoreError, match="has tables but no spamfilter schema revision: not upgraded"):
        store.upgrade()
    store.close()
    engine = sa.create_engine(db_url)
    with engine.connect() as conn:
        assert sa.inspect(conn).get_table_names() == ["other"]
        if engine.dialect.name == "sqlite":
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "delete"
    engine.dispose()


# -- counts and histogram ----------------------------------------------------


def test_random_training_and_untraining_keep_histogram_exact(store: Store) -> None:
    rng = np.random.default_rng(20261125)
    universe = [f"tok{i:03d}" for i in range(400)]
    state = np.zeros((len(universe), 4), dtype=np.int64)  # ham_docs spam_docs ham_terms spam_terms
    classes = np.zeros((3, 2), dtype=np.int64)
    batches = ["train", "train", "untrain", "mixed", "train", "untrain", "mixed", "untrain", "train", "untrain"]
    deleted = zero_buckets = 0
    known = np.zeros(len(universe), dtype=bool)
    for kind in batches:
        was_known = known
        idx = rng.choice(len(universe), size=int(rng.integers(50, 250)), replace=False)
        delta = np.zeros((len(idx), 4), dtype=np.int64)
        for row, i in enumerate(idx):
            current = state[i]
            untrain = kind == "untrain" or (kind == "mixed" and current[:2].any() and rng.random() < 0.5)
            if untrain:
                if rng.random() < 0.4:
                    d = -current  # all of it: the token leaves the vocabulary
                else:
                    docs = -rng.integers(0, current[:2] + 1)
                    # keep terms >= docs, and 0 where docs reach 0
                    new_docs = current[:2] + docs
                    new_terms = np.where(new_docs > 0, np.maximum(new_docs, current[2:] - rng.integers(0, 3, 2)), 0)
                    d = np.concatenate([docs, new_terms - current[2:]])
            else:
                docs = rng.integers(0, 4, 2)
                d = np.concatenate([docs, docs + np.where(docs > 0, rng.integers(0, 3, 2), 0)])
            delta[row] = d
        # never below zero: the store refuses totals that would go negative
        class_delta = np.maximum(np.vstack([rng.integers(-1, 3, 2), rng.integers(-1, 5, 2), rng.integers(-1, 4, 2)]), -classes)
        add(store, [universe[i] for i in idx], delta, class_delta)
        state[idx] += delta
        classes += class_delta
        assert (state >= 0).all()

        known = (state[:, 0] > 0) | (state[:, 1] > 0)
        expected_tokens = [(universe[i], *map(int, state[i])) for i in np.flatnonzero(known)]
        assert query(store, "SELECT token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens ORDER BY token") == expected_tokens
        hist = query(store, "SELECT label, doc_count, tokens FROM doc_histogram ORDER BY label, doc_count")
        assert hist == histogram_from_tokens(store)
        # k = 0 rows: tokens known in one class only
        zero_rows = {label: n for label, k, n in hist if k == 0}
        assert zero_rows.get(0, 0) == int((known & (state[:, 0] == 0)).sum())
        assert zero_rows.get(1, 0) == int((known & (state[:, 1] == 0)).sum())
        totals = store.totals()
        assert totals.vocabulary_size == len(expected_tokens) == int(known.sum())
        assert [h.tolist() for h in totals.histogram] == [[[k, n] for label, k, n in hist if label == c] for c in (0, 1)]
        assert totals.messages.tolist() == classes[0].tolist()
        assert totals.terms.tolist() == classes[1].tolist()
        assert totals.binary_terms.tolist() == classes[2].tolist()
        deleted += int((was_known & ~known).sum())
        zero_buckets += min(zero_rows.get(0, 0), zero_rows.get(1, 0))
    # the run did delete tokens and did fill both k = 0 buckets
    assert deleted > 0
    assert zero_buckets > 0


def test_token_whose_message_counts_reach_zero_is_deleted(store: Store) -> None:
    add(store, ["a", "b"], np.array([[1, 0, 2, 0], [0, 2, 0, 3]]))
    assert store.totals().vocabulary_size == 2
    add(store, ["a"], np.array([[-1, 0, -2, 0]]))
    assert dump(store)["tokens"] == [("b", 0, 2, 0, 3)]
    assert dump(store)["doc_histogram"] == [(0, 0, 1), (1, 2, 1)]
    add(store, ["b"], np.array([[0, -2, 0, -3]]))
    assert dump(store)["tokens"] == []
    assert dump(store)["doc_histogram"] == []
    assert store.totals().vocabulary_size == 0


def test_negative_count_raises_and_changes_nothing(store: Store) -> None:
    add(store, ["a", "b"], np.array([[2, 1, 3, 1], [0, 1, 0, 4]]), np.array([[2, 1], [3, 5], [1, 2]]))
    before = dump(store)
    # "b" would go to ham_docs -1; "c" is new and negative; "a" is fine and
    # would be deleted, "d" is new and fine: none of it may stay.
    token_list = ["a", "b", "c", "d"]
    delta = np.array([[-2, -1, -3, -1], [-1, 0, 0, 0], [0, -1, 0, -1], [1, 0, 1, 0]])
    with pytest.raises(StoreError, match="would go negative"):
        add(store, token_list, delta, np.array([[-1, 0], [-1, 0], [-1, 0]]))
    assert dump(store) == before


def test_token_counts_zeros_for_unknown_and_aligned_across_chunks(store: Store) -> None:
    known = [f"k{i:05d}" for i in range(2600)]
    counts = np.array([[i % 7 + 1, i % 3, i % 7 + 1 + i % 5, i % 3 * 2] for i in range(len(known))], dtype=np.int64)
    add(store, known, counts)
    rng = np.random.default_rng(7)
    asked = known + [f"u{i:05d}" for i in range(2100)]
    order = rng.permutation(len(asked))
    asked_shuffled = [asked[i] for i in order]
    with store.begin(write=False) as tx:
        got = rows(tx.token_counts(asked_shuffled))
    assert got.shape == (len(asked), 4)
    for row, i in enumerate(order):
        expected = counts[i] if i < len(known) else np.zeros(4, dtype=np.int64)
        assert got[row].tolist() == expected.tolist(), asked_shuffled[row]
    with store.begin(write=False) as tx:
        assert rows(tx.token_counts([])).shape == (0, 4)


# -- ledger blobs --------------------------------------------------------------


@pytest.mark.parametrize(
    "counts",
    [
        {},
        {"viagra": 3, "subject:free": 1, "bi:free money": 2},
        {"charset:utf\t8": 1, "tab\tand\tmore\t7": 2, "\t": 3, "": 4},
        {"charset:utf\n 8": 1, "\n": 2, "a\n\tb\n": 3, "trailing\n": 4},
        {"back\\slash": 1, "back\\nslash": 2, "\\": 3, "\\\n\\n": 4, "ümlaut 中文": 5},
    ],
    ids=["empty", "plain", "tabs", "newlines", "backslashes"],
)
def test_pack_unpack_round_trip(counts: dict[str, int]) -> None:
    assert unpack_token_counts(pack_token_counts(counts)) == counts


def test_tokens_from_folded_headers_survive_the_ledger() -> None:
    # compat32 keeps header folding inside parameter values; the tokenizer
    # squeezes the white space out, and the ledger round-trips the result.
    raw = b'From: <"x\n y"@example.com>\nSubject: hi\nContent-Type: text/plain;\n charset="utf\n 8"\nContent-Transfer-Encoding: 7bit\tx\n\nhello world\n'
    tokens = Tokenizer().tokenize(parse_message(MailItem("m", raw), max_bytes=1 << 16))
    assert "charset:utf8" in tokens
    assert "encoding:7bitx" in tokens
    assert not [t for t in tokens if any(c.isspace() for c in t)]
    counts = term_counts(tokens)
    assert unpack_token_counts(pack_token_counts(counts)) == counts


def test_upgrade_from_0001_keeps_the_counts(db_url: str) -> None:
    """A database made by revision 0001 (one model, no owners) upgrades to the
    head with its counts intact: they become the default owner's model."""
    url = db_url
    old = Store.open(url, upgrade_new=False, check=False)
    old.upgrade("0001")
    with old.engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO tokens VALUES ('free', 0, 2, 0, 3), ('meeting', 1, 0, 1, 0)"))
        conn.execute(sa.text("UPDATE class_totals SET messages = 1, terms = label + 1, binary_terms = 1"))
        conn.execute(sa.text("INSERT INTO doc_histogram VALUES (0, 0, 1), (0, 1, 1), (1, 0, 1), (1, 2, 1)"))
        conn.execute(sa.text("INSERT INTO messages VALUES ('d1', 1, :when, :blob)"), {"when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), "blob": b"\x00"})
    assert old.schema_revision() == "0001"
    old.close()
    with pytest.raises(SchemaOutOfDate):
        Store.open(url)
    store = Store.open(url, upgrade_new=False, check=False)
    store.upgrade()
    store.close()
    store = Store.open(url)
    assert store.schema_revision() == SCHEMA_REVISION
    with store.begin(write=False) as tx:
        assert rows(tx.token_counts(["free", "meeting"])).tolist() == [[0, 2, 0, 3], [1, 0, 1, 0]]
        totals = tx.totals()
        assert totals.messages.tolist() == [1, 1] and totals.terms.tolist() == [1, 2] and totals.vocabulary_size == 2
        assert tx.trained_labels(["d1"]) == {"d1": 1}
        assert tx.imap.records("acct", ["x"]) == {}
        assert rows(tx.token_counts(["free"], owner="alice")).tolist() == [[0, 0, 0, 0]]
    store.close()


def test_a_downgrade_below_the_feature_sums_and_back_sums_the_ledger_again(any_db_url: str) -> None:
    """Revision 0005 made the message features' sums empty: a database
    downgraded below it and upgraded again kept ledger entries with
    features the sums no longer held (forgetting one drove them negative;
    `db check` failed)."""
    from dataclasses import replace

    from alembic import command

    from spamfilter.config import Config
    from spamfilter.filter import Filter
    from spamfilter.tools.maintenance import Maintenance

    config = Config()
    config = replace(config, model=replace(config.model, features=True))
    mail = [(n % 2 == 0, MailItem(f"m{n}", f"Subject: note {n}\n\n{'buy cheap pills now ' * (n + 1)}see you {n}\n".encode())) for n in range(12)]
    with Filter.open(config, any_db_url) as f:
        f.train(mail)
        with f.store.engine.connect() as conn:
            before = sorted(tuple(r) for r in conn.execute(sa.text("SELECT * FROM feature_stats")))
        assert len(before) > 1 and all(r[3] > 0 for r in before)
        cfg = f.store._alembic_config()
        with f.store.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0004")
    old = Store.open(any_db_url, upgrade_new=False, check=False)
    old.upgrade()
    old.close()
    with Filter.open(config, any_db_url) as f:
        with f.store.engine.connect() as conn:
            assert sorted(tuple(r) for r in conn.execute(sa.text("SELECT * FROM feature_stats"))) == before
        assert Maintenance(f.store).check().ok


def test_upgrade_to_day_numbers_keeps_every_date_and_downgrade_gives_them_back(any_db_url: str) -> None:
    """Revision 0008 stores ``tokens.last_seen`` as days since 1970-01-01:
    the dates a 0007 database holds come out the same through the store,
    pruning by age still picks the same tokens, and a downgrade restores
    the dates themselves."""
    from alembic import command

    old = Store.open(any_db_url, upgrade_new=False, check=False)
    old.upgrade("0007")
    with old.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO tokens (owner, token, ham_docs, spam_docs, ham_terms, spam_terms, last_seen) VALUES "
                "('', 'old', 1, 0, 1, 0, '2024-01-01'), ('', 'recent', 0, 1, 0, 1, '2024-06-20'), "
                "('', 'undated', 1, 0, 1, 0, NULL), ('bob', 'old', 0, 1, 0, 1, '1970-01-02')"
            )
        )
        conn.execute(sa.text("UPDATE class_totals SET messages = 2 - label, terms = 2 - label, binary_terms = 2 - label WHERE owner = ''"))
    old.upgrade()
    with old.engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT owner, token, last_seen FROM tokens ORDER BY owner, token")).all()
    assert [tuple(r) for r in stored] == [("", "old", 19723), ("", "recent", 19894), ("", "undated", None), ("bob", "old", 1)]
    old.close()
    store = Store.open(any_db_url)
    with store.begin(write=False) as tx:
        assert [(t, when) for t, *_, when in tx.iter_tokens()] == [("old", date(2024, 1, 1)), ("recent", date(2024, 6, 20)), ("undated", None)]
        # in fewer than 2 messages and last seen by 2024-05-31: old and undated, not recent
        assert tx.prune_tokens(2, date(2024, 5, 31), dry_run=True)[0] == 2
    cfg = store._alembic_config()
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0007")
    with store.engine.connect() as conn:
        back = conn.execute(sa.text("SELECT owner, token, CAST(last_seen AS TEXT) FROM tokens ORDER BY owner, token")).all()
    assert [tuple(r) for r in back] == [("", "old", "2024-01-01"), ("", "recent", "2024-06-20"), ("", "undated", None), ("bob", "old", "1970-01-02")]
    store.close()


def test_a_ledger_from_before_record_entries_leaves_the_record_alone(any_db_url: str) -> None:
    """Revision 0009 keeps each trained message's calibration record entry
    in its ledger row. Down to 0008 and back, the rows have none (NULL) and
    the clock row is gone: the record keeps its weights, and `mark` and
    `forget` change the counts but leave the record as it is, as before."""
    from dataclasses import replace

    from alembic import command

    from spamfilter.config import Config
    from spamfilter.filter import Filter
    from spamfilter.nb.calibration import MAP_BINS
    from spamfilter.tools.maintenance import Maintenance

    config = Config()
    config = replace(config, store=replace(config.store, batch_size=4))
    mail = [(n % 2 == 0, MailItem(f"m{n}", f"Subject: note {n}\n\n{'buy cheap pills now ' if n % 2 == 0 else 'lunch at noon '}{n}\n".encode())) for n in range(12)]
    with Filter.open(config, any_db_url) as f:
        f.train(mail)
        with f.store.begin(write=False) as tx:
            history = tx.calibration_history(MAP_BINS)
            assert history.sum() > 0 and tx.record_clock() < 0
        cfg = f.store._alembic_config()
        with f.store.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0008")
        with f.store.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM calibration WHERE label = 2")).scalar() == 0
    old = Store.open(any_db_url, upgrade_new=False, check=False)
    old.upgrade()
    old.close()
    with Filter.open(config, any_db_url) as f:
        with f.store.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM messages WHERE record_bin IS NOT NULL OR record_weight IS NOT NULL")).scalar() == 0
        f.mark([(not s, item) for s, item in mail])
        f.forget(item for _, item in mail[:6])
        with f.store.begin(write=False) as tx:
            assert tx.calibration_history(MAP_BINS) == pytest.approx(history, rel=1e-12)
            assert tx.record_clock() == 0.0
            assert tx.totals().messages.tolist() == [3, 3]
        assert Maintenance(f.store).check().ok


@pytest.mark.parametrize(
    "counts",
    [
        {"free": 2, "money": 1, "bi:free+money": 1, "bi:money+free": 1},
        {"bi:free+money": 3},  # no words to pair with: the bigram stays text
        {"a": 1, "b+c": 1, "a+b": 1, "c": 2, "bi:a+b+c": 4, "bi:a+b": 1, "bi:": 1, "bi:+": 1, "bi:x+a": 1},
        {"subject:free": 1, "free": 1, "bi:free+free": 2, "bi:subject:free+free": 1, "ümlaut": 1, "bi:ümlaut+free": 1},
        {"back\\slash": 1, "new\nline": 1, "bi:back\\slash+new\nline": 5, "bi:new\nline+back\\slash": 1},
        # "bi:x" has no "+": read as x and "" it would come back as "bi:x+"
        {"": 1, "x": 1, "bi:x": 3, "bi:x+": 2, "bi:+x": 1},
    ],
    ids=["pairs", "unpaired", "plus-signs", "prefixes", "escapes", "empty-word"],
)
def test_ledger_bigrams_round_trip_exactly(counts: dict[str, int]) -> None:
    blob = pack_token_counts(counts)
    assert unpack_token_counts(blob) == counts
    paired = any(t.startswith("bi:") and "+" in t and t[3:].partition("+")[0] in counts and t[3:].partition("+")[2] in counts for t in counts)
    assert blob[:1] == (b"\x04" if paired else b"\x02")


def test_ledger_entries_of_a_real_message_keep_bigrams_as_positions() -> None:
    text = b"Subject: cheap meds online\n\n" + b" ".join(b"buy cheap meds online now and save money on every order" for _ in range(20)) + b"\n"
    tokens = Tokenizer().tokenize(parse_message(MailItem("m", text), max_bytes=1 << 16))
    counts = term_counts(tokens)
    assert sum(t.startswith("bi:") for t in counts) >= 10
    blob = pack_token_counts(counts)
    assert blob[:1] == b"\x04" and unpack_token_counts(blob) == counts
    as_text = b"\x02" + zlib.compress("\n".join(counts).encode() + b"\0" + ",".join(map(str, counts.values())).encode(), 1)
    assert unpack_token_counts(as_text) == counts  # entries written before read as they were
    assert len(blob) < len(as_text)


def test_ledger_positions_beyond_16_bits_round_trip() -> None:
    words = [f"w{i:05d}" for i in range(70_000)]
    counts = dict.fromkeys(words, 1) | {"bi:w00000+w69999": 1, "bi:w69999+w00001": 2, "bi:w00002+w00003": 1}
    blob = pack_token_counts(counts)
    assert blob[:1] == b"\x04" and unpack_token_counts(blob) == counts
    assert zlib.decompress(blob[1:])[8] == 4  # the positions were written 4 bytes wide


def test_a_text_date_written_by_a_process_of_the_old_code_still_reads(tmp_path: Path) -> None:
    """A daemon of the code before 0008 that kept its database open through
    `db upgrade` binds an ISO date; SQLite stores it as text in the integer
    column, and reading it must not fail (`db check`, `db export`).
    (PostgreSQL refuses the old daemon's write instead.)"""
    store = Store.open(f"sqlite:///{tmp_path / 'old-daemon.db'}")
    with store.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO tokens (owner, token, ham_docs, spam_docs, ham_terms, spam_terms, last_seen) VALUES ('', 'old', 1, 0, 1, 0, '2026-11-26'), ('', 'new', 0, 1, 0, 1, 20784)"
            )
        )
    with store.begin(write=False) as tx:
        assert [(t, when) for t, *_, when in tx.iter_tokens()] == [("new", date(2026, 11, 27)), ("old", date(2026, 11, 26))]
    # Pruned by its date (SQLite ranks text above every number, so no
    # --older-than took it), and a downgrade keeps its date (it became
    # 1975-07-14: its year read as a day number).
    with store.begin() as tx:
        assert tx.prune_tokens(2, date(2026, 11, 26), dry_run=True)[0] == 1
        assert tx.prune_tokens(2, date(2026, 11, 25), dry_run=True)[0] == 0
        assert tx.prune_tokens(2, date(2026, 11, 27), dry_run=True)[0] == 2
    from alembic import command

    cfg = store._alembic_config()
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0007")
    with store.engine.connect() as conn:
        assert [tuple(r) for r in conn.execute(sa.text("SELECT token, last_seen FROM tokens ORDER BY token"))] == [("new", "2026-11-27"), ("old", "2026-11-26")]
    store.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming another user needs root")
def test_a_database_behind_a_folder_the_user_cannot_enter_is_a_store_error(tmp_path: Path) -> None:
    # As the mail user of a learn-on-move pipe: Path.exists raised
    # PermissionError, and mark exited 70 with "internal error".
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert store_error_as_nobody(lambda: Store.open(f"sqlite:///{private / 'x.db'}").close()) == "permission denied"
    assert not (private / "x.db").exists()


def store_error_as_nobody(action: Callable[[], None]) -> str:
    """The StoreError ``action`` raises in a child process that became the
    user nobody ("none" when it raises none, "other: ..." for another error)."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        said = "other"
        try:
            os.setgid(65534)
            os.setuid(65534)
            action()
            said = "none"
        except StoreError as exc:
            said = "permission denied" if "permission denied" in str(exc) else str(exc)
        finally:
            os.write(writer, said.encode())
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as fh:
        said = fh.read().decode()
    os.waitpid(pid, 0)
    return said


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming another user needs root")
def test_reading_a_database_in_a_folder_the_user_cannot_write_says_what_sqlite_needs() -> None:
    # `stats` said only "attempt to write a readonly database": SQLite in
    # WAL mode makes the -shm beside the file even to read it.
    # Not under tmp_path: pytest's own folder is owner-only.
    shared = Path(tempfile.mkdtemp(prefix="spamfilter-shared-"))
    shared.chmod(0o755)
    Store.open(f"sqlite:///{shared / 'x.db'}").close()
    (shared / "x.db").chmod(0o644)

    def read() -> None:
        with Store.open(f"sqlite:///{shared / 'x.db'}") as store, store.begin(write=False) as tx:
            tx.totals()

    said = store_error_as_nobody(read)
    shutil.rmtree(shared)
    assert f"this user cannot write to its folder {shared} (no permission, or a read-only file system), where SQLite must create x.db-shm to read it" in said, said


def test_the_urls_own_options_reach_postgresql_beside_the_lock_timeout(fresh_postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A search_path in ?options= was dropped: the tables went to public.
    admin = sa.create_engine(fresh_postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text("CREATE SCHEMA sf"))
    url = f"{fresh_postgres_url}?options=-csearch_path%3Dsf"
    with Store.open(url, busy_timeout=7) as store, store.engine.connect() as conn:
        assert conn.execute(sa.text("SHOW search_path")).scalar() == "sf"
        assert conn.execute(sa.text("SHOW lock_timeout")).scalar() == "7s"
    with admin.connect() as conn:
        tables = set(conn.execute(sa.text("SELECT table_schema || '.' || table_name FROM information_schema.tables WHERE table_name = 'tokens'")).scalars())
    admin.dispose()
    assert tables == {"sf.tokens"}
    with Store.open(fresh_postgres_url, busy_timeout=0) as store, store.engine.connect() as conn:
        assert conn.execute(sa.text("SHOW lock_timeout")).scalar() == "1ms"  # not 0, which waits for ever
    monkeypatch.setenv("PGOPTIONS", "-c statement_timeout=12345")  # read when the URL names none
    with Store.open(fresh_postgres_url) as store, store.engine.connect() as conn:
        assert conn.execute(sa.text("SHOW statement_timeout")).scalar() == "12345ms"
    # A database the server does not have is what a missing SQLite file is (exit 66).
    missing = sa.engine.make_url(fresh_postgres_url).set(database="spamfilter_no_such_database").render_as_string(hide_password=False)
    with pytest.raises(NoSuchDatabase, match="no such database"):
        Store.open(missing)


def test_urls_are_shown_without_their_password_and_a_bad_one_is_a_store_error() -> None:
    from spamfilter.store import display_url

    assert "s3cret" not in display_url("postgresql+psycopg://u:s3cret@db.example.org/x")
    shown = display_url("postgresql+psycopg:///x?host=127.0.0.1&user=u&password=s3cret")
    assert "s3cret" not in shown and "password=***" in shown  # not URL-encoded (%2A%2A%2A)
    assert display_url("postgresql+psycopg://u:s3cret@db.example.org/x") == "postgresql+psycopg://u:***@db.example.org/x"
    for bad in ("postgresql+psycopg://u:s3cret@127.0.0.1:54x32/db", "postgresql+psycopg://u:s3/cret@127.0.0.1:54x32/db"):
        with pytest.raises(StoreError, match="not a database URL") as info:
            Store.open(bad)
        assert "s3" not in str(info.value) and "cret" not in str(info.value)


def test_forgetting_a_message_leaves_its_tokens_training_day_alone(any_db_url: str) -> None:
    # Forgetting is not training: it set the day of every token of the
    # message to today, which kept tokens left in one message from
    # `db prune --older-than`. Relabelling with `mark` is training.
    from spamfilter.config import Config
    from spamfilter.filter import Filter

    one = MailItem("one", b"Subject: shared words\n\nshared apple\n")
    two = MailItem("two", b"Subject: shared words\n\nshared pear\n")
    with Filter.open(Config(), any_db_url) as f:
        f.train([(True, one), (False, two)])
    engine = sa.create_engine(any_db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE tokens SET last_seen = 18000"))
    with Filter.open(Config(), any_db_url) as f:
        assert f.forget([one]).forgotten == 1
    with engine.connect() as conn:
        days = dict(conn.execute(sa.text("SELECT token, last_seen FROM tokens")).all())
    assert days and set(days.values()) == {18000}, days
    with Filter.open(Config(), any_db_url) as f:
        assert f.mark([(True, two)]).relabelled == 1
    with engine.connect() as conn:
        days = dict(conn.execute(sa.text("SELECT token, last_seen FROM tokens")).all())
    engine.dispose()
    today = (datetime.now(timezone.utc).date() - date(1970, 1, 1)).days
    assert set(days.values()) <= {today, today - 1} and "pear" in days, days


def test_upgrade_refuses_a_damaged_file(tmp_path: Path) -> None:
    from tests.tools.test_maintenance import damage_the_tokens_table

    # Every other write refused the file; `db upgrade` rewrote tables in it.
    path = tmp_path / "s.db"
    store = Store.open(f"sqlite:///{path}")
    with store.begin() as tx:
        tx.add_counts([f"token{i}" for i in range(3000)], TokenCounts(np.ones((2, 3000), dtype=np.int64), np.ones((2, 3000), dtype=np.int64)), ClassCounts.zeros())
    store.checkpoint()
    store.close()
    damage_the_tokens_table(path)
    before = path.read_bytes()
    store = Store.open(f"sqlite:///{path}", check=False)
    with pytest.raises(StoreError, match="damaged"):
        store.upgrade()
    store.close()
    assert path.read_bytes() == before
