"""Per-user models in one database, and the shared model they can use."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spamfilter.answers import Verdict
from spamfilter.cli import app
from spamfilter.config import Config, StoreConfig, config_from_dict
from spamfilter.errors import ConfigError
from spamfilter.filter import Filter
from spamfilter.mail import MailItem
from spamfilter.nb.calibration import MAP_BINS, recorded
from spamfilter.tools.insight import Insight

pytestmark = pytest.mark.corpus


@pytest.fixture(scope="module")
def mail(corpora_dir: Path) -> dict[str, list[MailItem]]:
    root = corpora_dir / "spamassassin"
    rows = [line.split() for line in (root / "index").read_text().splitlines() if line.strip()]
    random.Random(3).shuffle(rows)
    spam = [MailItem(p, (root / p).read_bytes()) for label, p in rows if label == "spam"][:90]
    ham = [MailItem(p, (root / p).read_bytes()) for label, p in rows if label == "ham"][:90]
    return {"shared": [*spam[:40], *ham[:40]], "alice": [*spam[40:70], *ham[40:70]], "probe": [*spam[70:90], *ham[70:90]], "spam": spam}


def labelled(items: list[MailItem], spam: list[MailItem]) -> list[tuple[bool, MailItem]]:
    ids = {id(m) for m in spam}
    return [(id(m) in ids, m) for m in items]


def write_folders(where: Path, messages: list[tuple[bool, MailItem]]) -> tuple[Path, Path]:
    """The messages as files in where/spam and where/ham."""
    spam_dir, ham_dir = where / "spam", where / "ham"
    spam_dir.mkdir()
    ham_dir.mkdir()
    for i, (is_spam, m) in enumerate(messages):
        ((spam_dir if is_spam else ham_dir) / f"{i}.eml").write_bytes(m.raw)
    return spam_dir, ham_dir


def odds(f: Filter, items: list[MailItem]) -> list[float]:
    out = []
    for v in f.classify(items):
        assert isinstance(v, Verdict)
        out.append(v.log_odds)
    return out


def with_store(**store: object) -> Config:
    return replace(Config(), store=replace(StoreConfig(), **store))  # type: ignore[arg-type]


def test_users_models_are_kept_apart(tmp_path: Path, mail: dict[str, list[MailItem]]) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    with Filter.open(Config(), url) as shared:
        shared.train(labelled(mail["shared"], mail["spam"]))
    with Filter.open(Config(), url, user="alice") as alice:
        alice.train(labelled(mail["alice"], mail["spam"]))
        a = alice.stats()
    with Filter.open(Config(), url) as shared:
        s = shared.stats()
    with Filter.open(Config(), url, user="bob") as bob:
        b = bob.stats()
    assert (a.spam_messages, a.ham_messages, a.user) == (30, 30, "alice")
    assert (s.spam_messages, s.ham_messages, s.user) == (40, 40, "")
    assert (b.spam_messages, b.ham_messages, b.tokens) == (0, 0, 0)
    # Alice's model is exactly a model trained on her mail alone.
    with Filter.open(Config(), "sqlite://") as alone:
        alone.train(labelled(mail["alice"], mail["spam"]))
        expected = odds(alone, mail["probe"])
        assert alone.stats().tokens == a.tokens
    with Filter.open(Config(), url, user="alice") as alice:
        assert odds(alice, mail["probe"]) == pytest.approx(expected, abs=1e-9)
        # Forgetting in Alice's model leaves the shared one alone.
        alice.forget(mail["alice"][:10])
    with Filter.open(Config(), url) as shared:
        assert shared.stats() == s


def test_fallback_uses_the_shared_model_until_the_user_has_trained_enough(tmp_path: Path, mail: dict[str, list[MailItem]]) -> None:
    url = f"sqlite:///{tmp_path / 'fallback.db'}"
    config = with_store(shared_model="fallback", shared_min_messages=25)
    with Filter.open(Config(), url) as shared:
        shared.train(labelled(mail["shared"], mail["spam"]))
        shared_odds = odds(shared, mail["probe"])
    with Filter.open(config, url, user="carol") as carol:
        # Nothing trained: the shared model answers.
        assert odds(carol, mail["probe"]) == pytest.approx(shared_odds, abs=1e-9)
        some = labelled(mail["alice"], mail["spam"])
        carol.train([x for x in some if x[0]][:25] + [x for x in some if not x[0]][:24])
        # 25 spam, 24 ham: still not enough.
        assert odds(carol, mail["probe"]) == pytest.approx(shared_odds, abs=1e-9)
        # stats gives her own counts, and the record her scores are read
        # off: the shared model's (it gave her own record, read by nothing).
        waiting = carol.stats()
        with carol.store.begin(write=False) as tx:
            records = {owner: float(tx.calibration_history(MAP_BINS, owner=owner).sum()) for owner in ("", "carol")}
        assert (waiting.spam_messages, waiting.ham_messages, waiting.classified_by) == (25, 24, "")
        assert waiting.calibration_messages == records[""] != records["carol"]
        carol.train([x for x in some if not x[0]][24:25])
        own = odds(carol, mail["probe"])
        with carol.store.begin(write=False) as tx:
            hers = float(tx.calibration_history(MAP_BINS, owner="carol").sum())
        assert (carol.stats().classified_by, carol.stats().calibration_messages) == ("carol", hers)
    with Filter.open(Config(), url, user="carol") as carol_alone:
        assert own == pytest.approx(odds(carol_alone, mail["probe"]), abs=1e-9)
    assert own != pytest.approx(shared_odds, abs=1e-3)


def test_a_user_on_the_shared_model_records_its_scores_unscaled(tmp_path: Path, mail: dict[str, list[MailItem]]) -> None:
    """The calibration record is scaled by n / N when the model that scored
    a batch grows by it; a new user's batch is scored by the shared model,
    which the batch does not grow, so it is recorded as scored."""
    url = f"sqlite:///{tmp_path / 'fallback.db'}"
    config = with_store(shared_model="fallback", shared_min_messages=25)
    with Filter.open(Config(), url) as shared:
        shared.train(labelled(mail["shared"], mail["spam"]))
    batch = labelled(mail["probe"][:10] + mail["probe"][20:30], mail["spam"])
    with Filter.open(config, url, user="dora") as dora:
        scored = odds(dora, [m for _, m in batch])
        dora.train(batch)
        with dora.store.begin(write=False) as tx:
            history = tx.calibration_history(MAP_BINS)
    _, expected = recorded(np.array(scored), np.array([s for s, _ in batch]))
    assert history.sum() == pytest.approx(20.0, rel=0.02)  # twenty messages, barely decayed
    assert history == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_merge_equals_one_model_trained_on_both(tmp_path: Path, mail: dict[str, list[MailItem]]) -> None:
    url = f"sqlite:///{tmp_path / 'merge.db'}"
    config = with_store(shared_model="merge")
    with Filter.open(Config(), url) as shared:
        shared.train(labelled(mail["shared"], mail["spam"]))
    with Filter.open(config, url, user="dave") as dave:
        dave.train(labelled(mail["alice"], mail["spam"]))
        merged = odds(dave, mail["probe"])
    with Filter.open(Config(), "sqlite://") as union:
        union.train(labelled(mail["shared"] + mail["alice"], mail["spam"]))
        assert merged == pytest.approx(odds(union, mail["probe"]), abs=1e-9)


def test_merge_refuses_the_bernoulli_model() -> None:
    with pytest.raises(ConfigError, match="merge"):
        config_from_dict({"store": {"shared_model": "merge"}, "model": {"event_model": "bernoulli"}})


def test_cli_user_option(tmp_path: Path, mail: dict[str, list[MailItem]]) -> None:
    spam_dir, ham_dir = write_folders(tmp_path, labelled(mail["alice"], mail["spam"]))
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()
    result = runner.invoke(app, ["--db", db, "--user", "erin", "train", "--spam", str(spam_dir), "--ham", str(ham_dir)])
    assert result.exit_code == 0, result.output
    erin = json.loads(runner.invoke(app, ["--db", db, "--user", "erin", "stats", "--format", "json"]).stdout)
    default = json.loads(runner.invoke(app, ["--db", db, "stats", "--format", "json"]).stdout)
    assert (erin["spam_messages"], erin["ham_messages"], erin["user"]) == (30, 30, "erin")
    assert (default["spam_messages"], default["ham_messages"], default["tokens"]) == (0, 0, 0)


def test_a_database_password_never_reaches_the_output() -> None:
    runner = CliRunner()
    # a server that cannot be reached (75), one that refuses the role (74)
    for url, code in (("postgresql+psycopg://u:s3cret-pw@127.0.0.1:1/x", 75), ("postgresql+psycopg://nosuchrole:s3cret-pw@127.0.0.1:5432/test", 74)):
        result = runner.invoke(app, ["--db", url, "stats"])
        assert result.exit_code == code
        assert "s3cret-pw" not in result.output and "***" in result.output


def test_top_words_and_explain_describe_the_model_that_classifies(tmp_path: Path, mail: dict[str, list[MailItem]]) -> None:
    url = f"sqlite:///{tmp_path / 'insight.db'}"
    with Filter.open(Config(), url) as shared:
        shared.train(labelled(mail["shared"], mail["spam"]))
        shared_words = Insight(shared).top_words(10, min_count=3)
    fallback = with_store(shared_model="fallback", shared_min_messages=25)
    with Filter.open(fallback, url, user="gina") as gina:
        # Gina has trained nothing: the shared model classifies, and describes.
        assert Insight(gina).top_words(10, min_count=3) == shared_words
        probe = mail["probe"][0]
        verdict = next(iter(gina.classify([probe])))
        assert isinstance(verdict, Verdict)
        explanation = Insight(gina).explain(probe)
        assert explanation.log_odds == pytest.approx(verdict.log_odds, abs=1e-9)
    merge = with_store(shared_model="merge")
    with Filter.open(merge, url, user="hal") as hal:
        hal.train(labelled(mail["alice"], mail["spam"]))
        merged_words = Insight(hal).top_words(10, min_count=3)
    with Filter.open(Config(), "sqlite://") as union:
        union.train(labelled(mail["shared"] + mail["alice"], mail["spam"]))
        assert merged_words == Insight(union).top_words(10, min_count=3)


def test_taking_one_ledger_row_from_two_transactions_at_once(any_db_url: str, mail: dict[str, list[MailItem]]) -> None:
    """Of two writers forgetting (or relabelling) the same message at once,
    only one gets its ledger row, so its counts are subtracted once."""
    import threading
    import time

    from spamfilter.store import Store

    with Filter.open(Config(), any_db_url) as f:
        f.train(labelled(mail["alice"], mail["spam"]))
    digest = mail["alice"][0].digest
    got: dict[str, int] = {}

    def take(name: str, hold: float) -> None:
        with Store.open(any_db_url) as store, store.begin() as tx:
            got[name] = len(tx.take_messages([digest]))
            time.sleep(hold)

    first = threading.Thread(target=take, args=("first", 0.5))
    first.start()
    time.sleep(0.2)  # the first holds the row (or SQLite's write lock)
    take("second", 0.0)
    first.join()
    assert got == {"first": 1, "second": 0}


def test_imap_state_is_kept_per_user(any_db_url: str) -> None:
    from spamfilter.store import ImapRecord, Store

    with Store.open(any_db_url, owner="ann") as ann, Store.open(any_db_url, owner="bo") as bo:
        with ann.begin() as tx:
            tx.imap.set_uidvalidity("mail", "INBOX", 7)
            tx.imap.add_uids("mail", "INBOX", [(1, "d1")])
            tx.imap.put_records("mail", [ImapRecord("d1", 1, "filter", "Junk")])
        with bo.begin() as tx:
            assert tx.imap.uidvalidity("mail", "INBOX") is None
            assert tx.imap.uids("mail", "INBOX") == {}
            assert tx.imap.records("mail", ["d1"]) == {}
            tx.imap.set_uidvalidity("mail", "INBOX", 9)
        with ann.begin(write=False) as tx:
            assert tx.imap.uidvalidity("mail", "INBOX") == 7
            assert tx.imap.uids("mail", "INBOX") == {1: ("d1", None)}


@pytest.mark.parametrize("event_model", ["multinomial-binary", "multinomial", "bernoulli"])
def test_top_words_streams_the_vocabulary_and_keeps_the_exact_order(tmp_path: Path, mail: dict[str, list[MailItem]], event_model: str) -> None:
    """top-words keeps only the best n while the vocabulary streams by in
    chunks of 20,000: the result equals ranking the whole vocabulary at once."""
    import numpy as np
    import sqlalchemy as sa

    from spamfilter.nb import model

    config = replace(Config(), model=replace(Config().model, event_model=event_model))  # type: ignore[arg-type]
    with Filter.open(config, f"sqlite:///{tmp_path / 'words.db'}") as f:
        f.train(labelled(mail["shared"] + mail["alice"], mail["spam"]))
        with f.store.begin(write=False) as tx:
            totals = tx.totals()
            # The reference: the whole table at once, in code point order.
            table = sorted(tx.conn.execute(sa.text("SELECT token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens WHERE owner = ''")))
        tokens = [row[0] for row in table]
        rows = np.array([row[1:] for row in table], dtype=np.int64)
        assert len(tokens) > 20000  # more than one chunk
        counts = model.TokenCounts(doc_count=rows[:, 0:2].T.copy(), term_count=rows[:, 2:4].T.copy())
        theta = model.token_log_likelihood(event_model, counts, totals, config.model.alpha)
        for spam in (True, False):
            score = (theta[1] - theta[0]) * (1 if spam else -1)
            order = np.argsort(-score, kind="stable")[:50]
            expected = [(tokens[j], float(score[j])) for j in order.tolist()]
            got = [(w.token, w.score) for w in Insight(f).top_words(50, spam=spam, min_count=1)]
            assert got == expected


def test_the_report_names_the_user(tmp_path: Path, mail: dict[str, list[MailItem]]) -> None:
    spam_dir, ham_dir = write_folders(tmp_path, labelled(mail["alice"], mail["spam"]))
    db = f"sqlite:///{tmp_path / 'r.db'}"
    runner = CliRunner()
    assert runner.invoke(app, ["--db", db, "--user", "ivy<b>", "train", "--spam", str(spam_dir), "--ham", str(ham_dir)]).exit_code == 0
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["--db", db, "--user", "ivy<b>", "report", "--out", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "<th>user</th><td>ivy&lt;b&gt;</td>" in html


@pytest.mark.parametrize(
    ("mode", "said"),
    [("fallback", 'the shared model, until this one has 25 spam and 25 ham (shared_model = "fallback")'), ("merge", "this model's counts added to the shared model's")],
)
def test_stats_and_the_report_say_which_model_classifies_a_user_s_mail(tmp_path: Path, mail: dict[str, list[MailItem]], mode: str, said: str) -> None:
    # Under fallback the report showed the user's own counts above the
    # shared model's top words, and nothing said so.
    spam_dir, ham_dir = write_folders(tmp_path, labelled(mail["shared"], mail["spam"]))
    db = f"sqlite:///{tmp_path / 'w.db'}"
    config = tmp_path / "c.toml"
    config.write_text(f'[store]\nshared_model = "{mode}"\nshared_min_messages = 25\n')
    runner = CliRunner()
    assert runner.invoke(app, ["--db", db, "train", "--spam", str(spam_dir), "--ham", str(ham_dir)]).exit_code == 0
    for user, shown in (("", False), ("jo", True)):
        common = ["--db", db, "--config", str(config), *(["--user", user] if user else [])]
        table = runner.invoke(app, [*common, "stats"])
        assert table.exit_code == 0, table.output
        assert (f"classified by      {said}" in table.stdout) is shown, table.stdout
        out = tmp_path / f"r{user}.html"
        assert runner.invoke(app, [*common, "report", "--out", str(out)]).exit_code == 0
        assert ("<th>classified by</th>" in out.read_text()) is shown
    plain = runner.invoke(app, ["--db", db, "--user", "jo", "stats"])
    assert "classified by" not in plain.stdout
