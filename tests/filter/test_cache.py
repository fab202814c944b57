"""Scoring from memory: the filter's CountCache gives exactly the log-odds of
reading every count from the store, reads each token once per model version,
and follows training (its own, exactly; another process's, by dropping)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from spamfilter.analysis import Analysed as _Analysed
from spamfilter.answers import Refusal, Verdict
from spamfilter.config import Config
from spamfilter.counts import ClassCounts, TokenCounts, Totals
from spamfilter.filter import Filter
from spamfilter.filter.cache import CountCache, ModelView
from spamfilter.mail import MailItem, read_index
from spamfilter.nb import model
from spamfilter.store import StoreTransaction
from spamfilter.tokenizer import is_header_line
from spamfilter.vectorizer import Vocabulary, batch_vocabulary, count_matrix, term_counts

pytestmark = pytest.mark.corpus

EVENT_MODELS = ["multinomial-binary", "multinomial", "bernoulli"]


@pytest.fixture(scope="module")
def stream(corpora_dir: Path) -> list[tuple[bool, MailItem]]:
    return list(read_index(str(corpora_dir / "spamassassin" / "index")))[:700]


def config_for(event_model: str, **model_options: object) -> Config:
    c = Config()
    return replace(c, model=replace(c.model, event_model=event_model, **model_options))  # type: ignore[arg-type]


def reference_odds(f: Filter, items: list[MailItem]) -> list[float]:
    """The log-odds the filter gave before the cache: one batch, its own
    vocabulary, every token's counts read from the store, X from
    ``count_matrix`` over the known tokens in first-seen order."""
    docs = [term_counts(f.tokens(item)) for item in items]
    vocabulary = batch_vocabulary(docs)
    with f.store.begin(write=False) as tx:
        totals = tx.totals()
        counts = tx.token_counts(vocabulary.tokens)
    known = counts.known()
    columns = Vocabulary(t for t, k in zip(vocabulary.tokens, known) if k)
    m = f.config.model
    params = model.estimate(m.event_model, counts.take(known), totals, m.alpha)
    X = count_matrix(docs, columns, binary=params.binary)
    header = np.array([is_header_line(t) for t in columns.tokens], dtype=bool) if m.header_apart else None
    return model.log_odds(model.joint_log_likelihood(X, params, m.tempering, m.min_evidence, header=header, header_max_tokens=m.header_max_tokens)).tolist()


def odds(f: Filter, items: list[MailItem]) -> list[float]:
    out = []
    for r in f.classify(items):
        assert isinstance(r, Verdict), r
        out.append(r.log_odds)
    return out


class Reads:
    """Counts the token counts a filter reads from its store."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tokens = 0
        self.calls = 0
        original = StoreTransaction.token_counts

        def counting(tx: StoreTransaction, token_list: list[str], owner: str | None = None) -> TokenCounts:
            self.calls += 1
            self.tokens += len(token_list)
            return original(tx, token_list, owner)

        monkeypatch.setattr(StoreTransaction, "token_counts", counting)


@pytest.mark.parametrize("event_model", EVENT_MODELS)
@pytest.mark.parametrize("options", [{}, {"min_evidence": 3.0}, {"tempering": 0.0}])
def test_cached_scores_are_bit_identical_to_reading_every_count(
    tmp_path: Path, stream: list[tuple[bool, MailItem]], event_model: str, options: dict[str, object]
) -> None:
    config = config_for(event_model, **options)
    config = replace(config, store=replace(config.store, batch_size=50))
    with Filter.open(config, f"sqlite:///{tmp_path / 'c.db'}") as f:
        f.train(stream[:400])
        probe = [item for _, item in stream[400:700]]
        probe = [item for item, r in zip(probe, f.classify(probe)) if not isinstance(r, Refusal)]
        got = odds(f, probe)  # six batches through one cache, read twice
        assert odds(f, probe) == got
        assert got == reference_odds(f, probe)


def test_a_second_pass_reads_only_the_tokens_the_model_lacks(tmp_path: Path, stream: list[tuple[bool, MailItem]], monkeypatch: pytest.MonkeyPatch) -> None:
    config = replace(Config(), store=replace(Config().store, batch_size=40))
    with Filter.open(config, f"sqlite:///{tmp_path / 'c.db'}") as trainer:
        trainer.train(stream[:300])
    # A new filter, whose cache holds none of the counts training read.
    with Filter.open(config, f"sqlite:///{tmp_path / 'c.db'}") as f:
        probe = [item for _, item in stream[300:500]]
        distinct = set().union(*(f.tokens(item) for item in probe))
        reads = Reads(monkeypatch)
        first = odds(f, probe)
        known = len(f.scoring.cache)
        assert reads.calls == 5  # one query a batch, for the tokens new to the cache
        first_reads = reads.tokens
        # Each token read once in the first pass but those unknown to the
        # model, which come back in the batches that have them.
        assert len(distinct) <= first_reads < len(distinct) + (len(distinct) - known)
        assert 1000 < known < len(distinct)
        assert f.scoring.cache.rows().known().all()  # only what the model knows is held
        assert odds(f, probe) == first
        # The second pass asks only for the unknown ones.
        assert reads.tokens - first_reads == first_reads - known


def test_training_by_another_process_drops_the_copy(tmp_path: Path, stream: list[tuple[bool, MailItem]]) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    probe = [item for _, item in stream[500:600]]
    with Filter.open(Config(), url) as reader, Filter.open(Config(), url) as writer:
        writer.train(stream[:250])
        before = odds(reader, probe)
        writer.train(stream[250:500])
        after = odds(reader, probe)
        with Filter.open(Config(), url) as fresh:
            assert after == odds(fresh, probe)
        assert after != before


def test_a_record_another_process_adds_without_training_is_seen_at_once(tmp_path: Path, stream: list[tuple[bool, MailItem]]) -> None:
    # `train --train-mode toe` records the messages it scores right and does
    # not learn: no count changes, so no model version moved, and a daemon
    # kept giving the scores of the record before, until the next training.
    from spamfilter.config import TrainMode

    url = f"sqlite:///{tmp_path / 'c.db'}"
    probe = [item for _, item in stream[600:700]]
    with Filter.open(Config(), url) as reader, Filter.open(Config(), url) as writer:
        writer.train(stream[:400])
        before = [(v.score, v.log_odds) for v in reader.classify(probe) if isinstance(v, Verdict)]
        # Later mail the model already files right: toe learns none of it.
        later = stream[400:600]
        verdicts = [v for v in writer.classify([item for _, item in later]) if isinstance(v, Verdict)]
        right = [(is_spam, item) for (is_spam, item), v in zip(later, verdicts) if v.verdict.value == ("spam" if is_spam else "ham")]
        assert len(right) > 100
        with writer.store.begin(write=False) as tx:
            counts_before = tx.versions([""])
        summary = writer.train(right, train_mode=TrainMode.toe)
        assert summary.trained_spam + summary.trained_ham == 0
        with writer.store.begin(write=False) as tx:
            assert tx.versions([""]) == counts_before  # no count moved
        after = [(v.score, v.log_odds) for v in reader.classify(probe) if isinstance(v, Verdict)]
        with Filter.open(Config(), url) as fresh:
            assert after == [(v.score, v.log_odds) for v in fresh.classify(probe) if isinstance(v, Verdict)]
        assert [s for s, _ in after] != [s for s, _ in before]


@pytest.mark.parametrize("event_model", EVENT_MODELS)
def test_online_learning_keeps_the_copy_exact(tmp_path: Path, stream: list[tuple[bool, MailItem]], event_model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    config = config_for(event_model)
    with Filter.open(config, f"sqlite:///{tmp_path / 'a.db'}") as cached, Filter.open(config, f"sqlite:///{tmp_path / 'b.db'}") as cold:
        cached.train(stream[:60])
        cold.train(stream[:60])
        cached.scoring.cache.clear()  # training kept the counts it wrote: start the online run from none
        reads = Reads(monkeypatch)
        steps = stream[60:160]
        warm = [s.result.log_odds for s in cached.learn_online(steps) if isinstance(s.result, Verdict)]
        warm_reads = reads.tokens
        cold_odds = []
        for step in steps:
            cold.scoring.cache.clear()  # every message scored from the store
            result = next(iter(cold.learn_online([step]))).result
            if isinstance(result, Verdict):
                cold_odds.append(result.log_odds)
        assert warm == cold_odds
        # The copy was kept across the training steps: each token was read
        # once (a token new to the model is trained at once, and the copy
        # takes its counts from the write), where reading afresh read the
        # common ones at every step.
        distinct = set().union(*(cached.tokens(item) for _, item in steps if isinstance(cached.analyser.one(item), _Analysed)))
        assert warm_reads == len(distinct) < reads.tokens - warm_reads


def test_the_copy_is_bounded() -> None:
    totals = Totals(ClassCounts.zeros(), 0, (np.zeros((0, 2), np.int64), np.zeros((0, 2), np.int64)))
    cache = CountCache(max_tokens=10)
    key = (("",), (1,))
    cache.reset(key, ModelView(totals, ("",)))
    ones = TokenCounts(np.ones((2, 8), np.int64), np.ones((2, 8), np.int64))
    cache.add([f"t{i}" for i in range(8)], ones)
    assert len(cache) == 8
    cache.add(["unknown"], TokenCounts.zeros(1))
    assert len(cache) == 8 and "unknown" not in cache.index  # unknown tokens are not held
    # A batch that fits reads only its new tokens; one that would pass the
    # bound starts the copy afresh and reads all of its tokens.
    assert sorted(cache.make_room([{"t0": 1, "x": 1}])) == ["x"] and len(cache) == 8
    batch = [{"t0": 1, "x": 1, "y": 1, "z": 1}]
    assert sorted(cache.make_room(batch)) == ["t0", "x", "y", "z"]
    assert len(cache) == 0 and cache.valid_for(key)


def test_a_bounded_copy_scores_exactly(tmp_path: Path, stream: list[tuple[bool, MailItem]]) -> None:
    config = replace(Config(), store=replace(Config().store, batch_size=30))
    with Filter.open(config, f"sqlite:///{tmp_path / 'c.db'}") as f:
        f.train(stream[:400])
        probe = [item for _, item in stream[400:550]]
        unbounded = odds(f, probe)
        held = len(f.scoring.cache)
        f.scoring.cache = CountCache(max_tokens=held // 3)  # passed several times over the run
        assert odds(f, probe) == unbounded
        assert len(f.scoring.cache) <= held // 3 + 5000
