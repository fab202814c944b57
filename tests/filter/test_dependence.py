"""One-dependence counts in the store: kept exactly by training, forget and
mark, rebuilt by reselect, chosen on schedule, and scored as the maths says."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from spamfilter.answers import Verdict
from spamfilter.cli import app
from spamfilter.config import Config, ConfigError, ModelConfig, StoreConfig, validate
from spamfilter.filter import Filter, dependence
from spamfilter.mail import MailItem
from spamfilter.mail.sources import read_messages
from spamfilter.nb import aode
from spamfilter.store.pairs import unpack
from spamfilter.tools.maintenance import Maintenance
from tests.filter.test_service import query
from tests.nb.test_aode import loop_log_likelihood

AODE = {"dependence": "aode", "aode_parents": 12, "aode_children": 300, "aode_min_support": 3, "reselect_growth": 0.0}


def sample_mail(sample: Path) -> tuple[list[tuple[bool, MailItem]], list[MailItem]]:
    spam = list(read_messages([str(sample / "train-spam.mbox")]))
    ham = list(read_messages([str(sample / "train-ham.mbox")]))
    labelled = [pair for two in zip([(True, m) for m in spam], [(False, m) for m in ham]) for pair in two]
    return labelled, list(read_messages([str(sample / "inbox.mbox")]))


def open_aode(url: str, batch_size: int = 200, **model: object) -> Filter:
    m = replace(ModelConfig(), **{**AODE, **model})  # type: ignore[arg-type]
    return Filter.open(Config(store=StoreConfig(url=url, batch_size=batch_size), model=m))


def tables(f: Filter) -> dict[str, list[tuple[object, ...]]]:
    """The parents' rows, the children, and every pair count as (child, parent, ham, spam)."""
    parents = sorted(query(f.store, "SELECT token, ham_docs, spam_docs, ham_terms, spam_terms FROM aode_parents"))
    names = [str(r[0]) for r in parents]
    children = sorted(query(f.store, "SELECT token, counts FROM aode_pairs"))
    pairs = [(t, names[int(r[0])], int(r[1]), int(r[2])) for t, blob in children for r in unpack(bytes(blob))]  # type: ignore[arg-type]
    return {"parents": parents, "children": [(t,) for t, _ in children], "pairs": pairs}


def test_forget_and_mark_restore_the_pairs_exactly(any_db_url: str, sample: Path) -> None:
    labelled, _ = sample_mail(sample)
    with open_aode(any_db_url, batch_size=7) as f:
        f.train(labelled[:80])
        chosen = Maintenance(f.store).reselect(f.config.model)
        assert len(chosen.parents) == 12 and chosen.messages == 80 and chosen.pairs > 0
        rebuilt = tables(f)
        assert len(rebuilt["children"]) == chosen.children
        f.train(labelled[80:])  # seven at a time
        assert tables(f) != rebuilt
        before = tables(f)
        f.forget([m for _, m in labelled[:30]])
        assert tables(f) != before
        f.train(labelled[:30])
        assert tables(f) == before
        f.mark([(not is_spam, m) for is_spam, m in labelled[:5]])
        moved = tables(f)
        assert moved != before
        f.mark(labelled[:5])
        assert tables(f) == before


def test_a_prune_leaves_a_selection_s_store_consistent(tmp_path: Path, sample: Path) -> None:
    # A prune that rewrote the ledger's entries shrank the message sizes a
    # parent's occurrences are summed from: db check then failed (73).
    labelled, _ = sample_mail(sample)
    with open_aode(f"sqlite:///{tmp_path / 'a.db'}", dependence="spode") as f:
        f.train(labelled)
        Maintenance(f.store).reselect(f.config.model)
        assert Maintenance(f.store).check().ok
        assert Maintenance(f.store).prune(2, 0).tokens_removed > 0
        assert Maintenance(f.store).check().ok
        f.forget([m for _, m in labelled[:10]])
        assert Maintenance(f.store).check().ok


def test_incremental_counts_equal_a_rebuild_for_the_same_parents(tmp_path: Path, sample: Path) -> None:
    labelled, _ = sample_mail(sample)
    with open_aode(f"sqlite:///{tmp_path / 'a.db'}", batch_size=1) as f:
        f.train(labelled[:60])
        Maintenance(f.store).reselect(f.config.model)
        f.train(labelled[60:])
        incremental = tables(f)
        # rebuild the same parents and children from the whole ledger
        with f.store.begin() as tx:
            parents = [r[0] for r in incremental["parents"]]
            children = {r[0] for r in incremental["children"]}
            docs, labels = zip(*[(counts, label) for label, counts in tx.iter_ledger()])
            parent_rows, changes = dependence.pair_sums(sorted(parents), children, list(docs), list(labels), [1] * len(docs))
        assert sorted(parent_rows) == [r for r in incremental["parents"] if any(r[1:])]
        rebuilt = [(t, parents[int(r[0])], int(r[1]), int(r[2])) for t in sorted(changes) for r in changes[t]]
        assert rebuilt == incremental["pairs"]


def test_scores_are_the_formulas_over_the_trained_messages(tmp_path: Path, sample: Path) -> None:
    labelled, inbox = sample_mail(sample)
    with open_aode(f"sqlite:///{tmp_path / 'a.db'}") as f:
        f.train(labelled)
        Maintenance(f.store).reselect(f.config.model)
        verdicts = [v for v in f.classify(inbox) if isinstance(v, Verdict)]
        docs = [f.analyser.one(m).counts for _, m in labelled]  # type: ignore[union-attr]
        naive = [v.log_odds for v in Filter.open(replace(f.config, model=replace(f.config.model, dependence="none"))).classify(inbox) if isinstance(v, Verdict)]
        parents = [r[0] for r in tables(f)["parents"]]
        children = {r[0] for r in tables(f)["children"]}
    vocabulary = sorted({t for d in docs for t in d})
    ids = {t: i for i, t in enumerate(vocabulary)}
    train = [({ids[t] for t in d}, int(is_spam)) for d, (is_spam, _) in zip(docs, labelled)]
    m = f.config.model
    differ = 0
    for v, item, nb in zip(verdicts, inbox, naive):
        x = {ids[t] for t in f.analyser.one(item).counts if t in ids}  # type: ignore[union-attr]
        ham, spam = loop_log_likelihood(train, [ids[p] for p in parents], x, len(vocabulary), m.alpha, m.tempering, m.aode_min_support, {ids[c] for c in children})
        assert v.log_odds == pytest.approx(spam - ham, abs=1e-9)
        differ += abs(v.log_odds - nb) > 1e-6
    assert differ == len(inbox)


def test_training_chooses_the_parents_when_the_ledger_has_grown(tmp_path: Path, sample: Path) -> None:
    labelled, _ = sample_mail(sample)
    with open_aode(f"sqlite:///{tmp_path / 'a.db'}", batch_size=20, reselect_growth=2.0) as f:
        f.train(labelled[:40])
        assert query(f.store, "SELECT messages FROM aode_selection") == []
        f.train(labelled[40:60])  # 60 >= 50: the first choice
        assert query(f.store, "SELECT messages FROM aode_selection") == [(60,)]
        f.train(labelled[60:100])  # 100 < 120: not yet
        assert query(f.store, "SELECT messages FROM aode_selection") == [(60,)]
        f.train(labelled[100:])
        assert query(f.store, "SELECT messages FROM aode_selection") == [(120,)]
        assert len(tables(f)["parents"]) == 12


def test_spode_keeps_one_parent(tmp_path: Path, sample: Path) -> None:
    labelled, inbox = sample_mail(sample)
    with open_aode(f"sqlite:///{tmp_path / 'a.db'}", dependence="spode") as f:
        f.train(labelled)
        s = Maintenance(f.store).reselect(f.config.model)
        assert len(s.parents) == 1
        assert len([v for v in f.classify(inbox) if isinstance(v, Verdict)]) == len(inbox)


def test_db_reselect_and_dropping_the_counts(tmp_path: Path, sample: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    config = tmp_path / "aode.toml"
    config.write_text("[model]\n" + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in AODE.items()))
    runner = CliRunner()
    train = runner.invoke(app, ["--db", url, "train", "--spam", str(sample / "train-spam.mbox"), "--ham", str(sample / "train-ham.mbox")])
    assert train.exit_code == 0, train.output
    result = runner.invoke(app, ["--db", url, "--config", str(config), "db", "reselect"])
    assert result.exit_code == 0, result.output
    pairs = len(tables(Filter.open(Config(store=StoreConfig(url=url))))["pairs"])
    assert result.stdout.strip() == f"chose 12 parent(s) and 300 child tokens for the default user: {pairs} pair counts from 120 trained messages"
    dropped = runner.invoke(app, ["--db", url, "db", "reselect"])
    assert dropped.stdout.strip() == "no parents for the default user: one-dependence counts dropped (120 trained messages)"
    assert query(Filter.open(Config(store=StoreConfig(url=url))).store, "SELECT count(*) FROM aode_pairs") == [(0,)]


@pytest.mark.parametrize(
    ("model", "store", "words"),
    [
        ({"dependence": "tan"}, {}, "model.dependence must be one of none, spode, aode"),
        ({"dependence": "aode", "event_model": "bernoulli"}, {}, 'needs event_model = "multinomial-binary"'),
        ({"dependence": "aode"}, {"shared_model": "merge"}, 'does not combine with store.shared_model = "merge"'),
        ({"aode_parents": 10, "aode_children": 5}, {}, "model.aode_children must be between aode_parents"),
        ({"reselect_growth": 1.0}, {}, "model.reselect_growth must be 0"),
    ],
)
def test_bad_dependence_settings_are_refused(model: dict[str, object], store: dict[str, object], words: str) -> None:
    config = Config(model=replace(ModelConfig(), **model), store=replace(StoreConfig(), **store))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        validate(config)


def test_rank_uses_the_ledger_counts(tmp_path: Path, sample: Path) -> None:
    labelled, _ = sample_mail(sample)
    with open_aode(f"sqlite:///{tmp_path / 'a.db'}") as f:
        f.train(labelled)
        s = Maintenance(f.store).reselect(f.config.model)
        rows = query(f.store, "SELECT token, ham_docs, spam_docs FROM tokens")
    names = [str(r[0]) for r in rows]
    doc_count = np.array([[r[1] for r in rows], [r[2] for r in rows]], dtype=np.int64)
    assert s.parents == sorted(aode.rank_tokens(names, doc_count, np.array([60, 60]), 3)[:12])


def test_explain_adds_up_to_the_one_dependence_log_odds(tmp_path: Path, sample: Path) -> None:
    from spamfilter.tools.insight import Insight

    labelled, inbox = sample_mail(sample)
    with open_aode(f"sqlite:///{tmp_path / 'a.db'}") as f:
        f.train(labelled)
        Maintenance(f.store).reselect(f.config.model)
        verdict = next(iter(f.classify(inbox[:1])))
        e = Insight(f).explain(inbox[0])
    assert isinstance(verdict, Verdict)
    assert e.log_odds == pytest.approx(verdict.log_odds, abs=1e-9)
    assert e.prior + sum(c.contribution for c in e.tokens) == pytest.approx(e.log_odds, abs=1e-9)
    term = [c for c in e.tokens if c.token == "dependence:aode"]
    assert len(term) == 1 and term[0].contribution != 0.0


def test_a_new_choice_of_parents_is_seen_by_a_filter_holding_the_old_counts(tmp_path: Path, sample: Path) -> None:
    labelled, inbox = sample_mail(sample)
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with open_aode(url) as f:
        f.train(labelled)
        Maintenance(f.store).reselect(f.config.model)
        first = [v.log_odds for v in f.classify(inbox) if isinstance(v, Verdict)]
        with open_aode(url, aode_parents=5) as other:
            Maintenance(other.store).reselect(other.config.model)
        again = [v.log_odds for v in f.classify(inbox) if isinstance(v, Verdict)]
        with open_aode(url) as fresh:
            want = [v.log_odds for v in fresh.classify(inbox) if isinstance(v, Verdict)]
    assert again == want and again != first


def test_db_check_compares_the_one_dependence_counts_with_the_ledger(tmp_path: Path, sample: Path) -> None:
    labelled, _ = sample_mail(sample)
    with open_aode(f"sqlite:///{tmp_path / 'a.db'}", batch_size=9) as f:
        f.train(labelled[:60])
        Maintenance(f.store).reselect(f.config.model)
        f.train(labelled[60:])
        f.forget([m for _, m in labelled[:7]])
        items = {i.name: i for i in Maintenance(f.store).check().items}
        assert items["one-dependence counts = sums over the ledger's messages"].status == "ok"
        token, blob = query(f.store, "SELECT token, counts FROM aode_pairs WHERE length(counts) > 0 ORDER BY token LIMIT 1")[0]
        rows = unpack(bytes(blob)).copy()  # type: ignore[arg-type]
        rows[0, 2] += 1
        with f.store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE aode_pairs SET counts = :b WHERE token = :t"), {"b": rows.astype("<i4").tobytes(), "t": token})
        item = {i.name: i for i in Maintenance(f.store).check().items}["one-dependence counts = sums over the ledger's messages"]
        assert item.status == "failed" and item.problems[0].startswith(f"child {token!r}: stored")
        # A ledger entry that cannot be read is listed, not the end of the check.
        with f.store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE messages SET token_counts = substr(token_counts, 1, 20) WHERE digest = (SELECT min(digest) FROM messages)"))
        items = {i.name: i for i in Maintenance(f.store).check().items}
        assert items["every ledger entry can be read"].status == "failed"


def _train_part(url: str, part: list[tuple[bool, bytes, str]], reselect: bool) -> None:
    with open_aode(url, batch_size=3) as f:
        if reselect:
            Maintenance(f.store).reselect(f.config.model)
        f.train([(spam, MailItem(source, raw)) for spam, raw, source in part])


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_concurrent_training_and_reselect_keep_the_counts_exact(backend: str, tmp_path: Path, sample: Path, request: pytest.FixtureRequest) -> None:
    import multiprocessing

    url = f"sqlite:///{tmp_path / 'a.db'}" if backend == "sqlite" else str(request.getfixturevalue("fresh_postgres_url"))
    labelled, _ = sample_mail(sample)
    with open_aode(url) as f:
        f.train(labelled[:60])
        Maintenance(f.store).reselect(f.config.model)
    rest = [(spam, m.raw, m.source) for spam, m in labelled[60:]]
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_train_part, args=(url, rest[i::4], i == 0)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
        assert w.exitcode == 0
    with open_aode(url) as f:
        items = {i.name: i for i in Maintenance(f.store).check().items}
        assert items["one-dependence counts = sums over the ledger's messages"].status == "ok", items
        assert int(query(f.store, "SELECT count(*) FROM messages")[0][0]) == 120  # type: ignore[call-overload]
