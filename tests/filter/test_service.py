"""Tests of spamfilter.filter.Filter: training, forgetting, relabelling and
classifying keep the store's counts exact, and scores equal brute force."""

from __future__ import annotations

import email.message
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from spamfilter.answers import Refusal, TrainSummary, Verdict
from spamfilter.config import Config, ModelConfig, StoreConfig
from spamfilter.errors import NotTrainedError
from spamfilter.filter import Filter
from spamfilter.mail import MailItem, former_digest
from spamfilter.store import Store, unpack_token_counts
from spamfilter.vectorizer import term_counts

Rows = list[tuple[object, ...]]


def message(source: str, sender: str, subject: str, body: str, *, html: str | None = None) -> MailItem:
    msg = email.message.EmailMessage()
    msg["From"] = sender
    msg["To"] = "me@example.org"
    msg["Subject"] = subject
    msg["Message-ID"] = f"<{source}@{sender.rpartition('@')[2].strip('>')}>"
    msg.set_content(body)
    if html is not None:
        msg.add_alternative(html, subtype="html")
    return MailItem(source, msg.as_bytes())


HAM = [
    message("ham1", "alice@example.org", "Lunch on Friday?", "Shall we meet for lunch on Friday at noon? The usual place."),
    message("ham2", "bob@example.org", "Minutes of the meeting", "Attached are the minutes. Next meeting is Monday at noon."),
    message("ham3", "alice@example.org", "Re: Lunch on Friday?", "Friday works. See you at noon, lunch is on me this time."),
    message("ham4", "carol@example.net", "Draft report", "Please review the draft report before the meeting on Monday."),
]
SPAM = [
    message(
        "spam1",
        "winner@lottery.example",
        "You WON!!! Claim now",
        "Claim your prize money now! Free money, click here now.",
        html='<p>Claim your <b>FREE</b> prize at <a href="http://prize.example.com/claim">prize.example.com</a></p>',
    ),
    message("spam2", "deals@cheap.example", "Cheap meds, free shipping", "Cheap meds with free shipping. Order now and save money."),
    message("spam3", "winner@lottery.example", "Final notice: claim your prize", "Your prize money expires Friday. Claim now, it is free."),
]
LABELLED = [(False, m) for m in HAM] + [(True, m) for m in SPAM]
# Interleaved so that batches of a few messages mix both classes.
LABELLED = [LABELLED[i] for i in (0, 4, 1, 5, 2, 6, 3)]

UNSEEN = [
    message("new1", "alice@example.org", "Lunch Monday?", "Lunch on Monday at noon instead?"),
    message("new2", "prizes@lottery.example", "Claim your free prize", "Free prize money, claim now!!!"),
    message("new3", "dave@elsewhere.example", "Zebra xylophone", "Quixotic zebra plays xylophone."),
]
EVENT_MODELS = ["bernoulli", "multinomial", "multinomial-binary"]


def config(url: str, batch_size: int = 500, **model: object) -> Config:
    return Config(store=StoreConfig(url=url, batch_size=batch_size), model=replace(ModelConfig(), **model))  # type: ignore[arg-type]


def open_filter(tmp_path: Path, name: str, batch_size: int = 500, **model: object) -> Filter:
    url = f"sqlite:///{tmp_path / name}.db"
    return Filter.open(config(url, batch_size, **model))


def query(store: Store, sql: str) -> Rows:
    with store.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text(sql))]


def state(f: Filter, *, with_times: bool = True) -> dict[str, Rows]:
    """All tables, sorted; the ledger's packed counts unpacked. ``with_times=False``
    leaves out trained_at, to compare stores trained at different moments."""
    ledger = query(f.store, "SELECT digest, label, trained_at, token_counts FROM messages ORDER BY digest")
    return {
        "tokens": query(f.store, "SELECT token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens ORDER BY token"),
        "class_totals": query(f.store, "SELECT label, messages, terms, binary_terms FROM class_totals ORDER BY label"),
        "doc_histogram": query(f.store, "SELECT label, doc_count, tokens FROM doc_histogram ORDER BY label, doc_count"),
        "messages": [(d, lbl, *((t,) if with_times else ()), sorted(unpack_token_counts(blob).items())) for d, lbl, t, blob in ledger],
    }


def log_odds(f: Filter, items: list[MailItem]) -> list[float]:
    results = list(f.classify(items))
    assert all(isinstance(r, Verdict) for r in results)
    return [r.log_odds for r in results if isinstance(r, Verdict)]


@pytest.fixture
def trained(tmp_path: Path) -> Iterator[Filter]:
    f = open_filter(tmp_path, "trained")
    f.train(LABELLED)
    yield f
    f.close()


# -- training is order- and batch-independent ----------------------------------


def test_message_by_message_equals_all_at_once(tmp_path: Path) -> None:
    with open_filter(tmp_path, "one", batch_size=1) as one, open_filter(tmp_path, "all") as all_:
        s1 = one.train(LABELLED)
        s2 = all_.train(LABELLED)
        assert s1 == s2 == TrainSummary(trained_ham=4, trained_spam=3)
        assert state(one, with_times=False) == state(all_, with_times=False)
        assert one.store.totals().vocabulary_size == len(state(one)["tokens"]) > 50
        items = HAM + SPAM + UNSEEN
        assert log_odds(one, items) == log_odds(all_, items)


def test_class_totals_are_sums_over_the_messages(trained: Filter) -> None:
    counts = {m.source: term_counts(trained.tokens(m)) for _, m in LABELLED}
    expected = []
    for label, group in ((0, HAM), (1, SPAM)):
        c = [counts[m.source] for m in group]
        expected.append((label, len(c), sum(sum(x.values()) for x in c), sum(len(x) for x in c)))
    assert state(trained)["class_totals"] == expected


def test_retraining_the_same_messages_is_a_no_op(trained: Filter) -> None:
    before = state(trained)
    summary = trained.train(LABELLED)
    assert summary == TrainSummary(unchanged=len(LABELLED))
    assert state(trained) == before


def test_a_message_twice_in_one_batch_is_trained_once(tmp_path: Path) -> None:
    with open_filter(tmp_path, "twice") as twice, open_filter(tmp_path, "once") as once:
        assert twice.train([(True, SPAM[0]), (True, SPAM[0])]) == TrainSummary(trained_spam=1, unchanged=1)
        once.train([(True, SPAM[0])])
        assert state(twice, with_times=False) == state(once, with_times=False)


# -- forget --------------------------------------------------------------------


def test_forget_restores_the_exact_previous_state(trained: Filter) -> None:
    before = state(trained)
    extra = [(True, UNSEEN[1]), (False, UNSEEN[0]), (False, UNSEEN[2])]
    assert trained.train(extra) == TrainSummary(trained_ham=2, trained_spam=1)
    assert state(trained) != before
    summary = trained.forget([m for _, m in extra] + [MailItem("never", b"Subject: never trained\n\nx\n")])
    assert summary == TrainSummary(forgotten=3, unknown=1)
    assert state(trained) == before


@pytest.mark.parametrize("batch_size", [1, 2, 200])
def test_copies_of_a_forgotten_message_are_counted_once_whatever_the_batches(tmp_path: Path, batch_size: int) -> None:
    # A copy in a later batch was counted as "not trained", one in the same
    # batch not at all: the summary depended on the batch size.
    one, two = (m for _, m in LABELLED[:2])
    copies = [one, MailItem("crlf", one.raw.replace(b"\n", b"\r\n")), MailItem("filtered", b"X-Spam-Flag: YES\n" + one.raw), two]
    with open_filter(tmp_path, "a", batch_size=batch_size) as f:
        f.train(LABELLED[:2])
        assert f.forget(copies) == TrainSummary(forgotten=2)
        assert f.forget(copies) == TrainSummary(unknown=2)


def test_forgetting_everything_empties_the_store(trained: Filter) -> None:
    assert trained.forget([m for _, m in LABELLED]) == TrainSummary(forgotten=len(LABELLED))
    assert state(trained) == {"tokens": [], "class_totals": [(0, 0, 0, 0), (1, 0, 0, 0)], "doc_histogram": [], "messages": []}


def test_train_forget_train_equals_train(tmp_path: Path) -> None:
    with open_filter(tmp_path, "a", batch_size=2) as a, open_filter(tmp_path, "b") as b:
        a.train(LABELLED)
        a.forget([m for _, m in LABELLED[::2]])
        a.train(LABELLED)
        b.train(LABELLED)
        assert state(a, with_times=False) == state(b, with_times=False)
        assert log_odds(a, UNSEEN) == log_odds(b, UNSEEN)


def test_message_with_folded_header_tokens_can_be_forgotten(trained: Filter) -> None:
    # The folded charset parameter must become one token without white space.
    raw = b'From: x@example.com\nSubject: hi\nContent-Type: text/plain;\n charset="utf\n 8"\n\nhello there\n'
    item = MailItem("folded", raw)
    assert "charset:utf8" in trained.tokens(item)
    before = state(trained)
    trained.train([(True, item)])
    assert trained.mark([(False, item)]) == TrainSummary(relabelled=1)
    assert trained.forget([item]) == TrainSummary(forgotten=1)
    assert state(trained) == before


# -- mark / conflicts ----------------------------------------------------------


def test_mark_moves_ham_to_spam_as_if_trained_spam_first(tmp_path: Path) -> None:
    moved = HAM[3]
    relabelled = [(True, m) if m is moved else (s, m) for s, m in LABELLED]
    with open_filter(tmp_path, "marked") as marked, open_filter(tmp_path, "direct") as direct:
        marked.train(LABELLED)
        assert marked.mark([(True, moved)]) == TrainSummary(relabelled=1)
        direct.train(relabelled)
        assert state(marked, with_times=False) == state(direct, with_times=False)
        assert log_odds(marked, UNSEEN) == log_odds(direct, UNSEEN)
        # marking again with the same label changes nothing
        before = state(marked)
        assert marked.mark([(True, moved)]) == TrainSummary(unchanged=1)
        assert state(marked) == before


def test_mark_of_an_untrained_message_trains_it(tmp_path: Path) -> None:
    with open_filter(tmp_path, "m") as m, open_filter(tmp_path, "t") as t:
        assert m.mark([(True, SPAM[0])]) == TrainSummary(trained_spam=1)
        t.train([(True, SPAM[0])])
        assert state(m, with_times=False) == state(t, with_times=False)


def test_train_with_the_opposite_label_is_a_conflict_and_changes_nothing(trained: Filter) -> None:
    before = state(trained)
    summary = trained.train([(True, HAM[0]), (False, SPAM[1]), (True, SPAM[0])])
    assert summary == TrainSummary(conflicts=2, unchanged=1)
    assert state(trained) == before


# -- classify ------------------------------------------------------------------


def test_classify_refuses_empty_messages_and_keeps_input_order(trained: Filter) -> None:
    f = Filter(trained.store, config(trained.store.url, batch_size=2))
    items = [UNSEEN[0], MailItem("empty", b""), UNSEEN[1], MailItem("blank", b"\n \n"), UNSEEN[2]]
    results = list(f.classify(items))
    assert [type(r) for r in results] == [Verdict, Refusal, Verdict, Refusal, Verdict]
    assert [getattr(r, "source") for r in results] == ["new1", "empty", "new2", "blank", "new3"]
    assert all("empty message" in r.reason for r in results if isinstance(r, Refusal))
    verdicts = [r for r in results if isinstance(r, Verdict)]
    assert [v.digest for v in verdicts] == [UNSEEN[0].digest, UNSEEN[1].digest, UNSEEN[2].digest]
    assert verdicts[0].log_odds < 0 < verdicts[1].log_odds
    assert verdicts[0].verdict == "ham"
    assert verdicts[1].verdict == "spam"
    # the same scores as one batch of all three
    assert [v.log_odds for v in verdicts] == log_odds(trained, UNSEEN)


def test_classify_only_refusals_needs_no_model(tmp_path: Path) -> None:
    with open_filter(tmp_path, "empty") as f:
        assert list(f.classify([MailItem("empty", b"")])) == [Refusal("empty", "empty: empty message")]


def test_classify_untrained_raises_not_trained(tmp_path: Path) -> None:
    with open_filter(tmp_path, "untrained") as f:
        with pytest.raises(NotTrainedError):
            list(f.classify(UNSEEN))
        f.train([(True, SPAM[0])])
        with pytest.raises(NotTrainedError, match="1 spam and 0 ham"):
            list(f.classify(UNSEEN))


# -- scores equal brute force over the whole vocabulary ------------------------


def brute_force_log_odds(f: Filter, item: MailItem, event_model: str, alpha: float, tempering: float) -> float:
    """log P(spam|x) - log P(ham|x) from the dumped tokens table, with plain
    numpy over every vocabulary token (no histogram, no shortcuts); the
    log-likelihood divided by n ** tempering, n the known token events."""
    rows = query(f.store, "SELECT token, ham_docs, spam_docs, ham_terms, spam_terms FROM tokens ORDER BY token")
    vocab = [r[0] for r in rows]
    counts = np.array([r[1:] for r in rows], dtype=np.float64)
    docs, terms = counts[:, 0:2].T, counts[:, 2:4].T  # (2, V)
    totals = query(f.store, "SELECT messages, terms, binary_terms FROM class_totals ORDER BY label")
    n_messages = np.array([t[0] for t in totals], dtype=np.float64)
    # the class totals agree with the table they summarise
    assert [t[1] for t in totals] == terms.sum(axis=1).tolist()
    assert [t[2] for t in totals] == docs.sum(axis=1).tolist()
    x_counts = term_counts(f.tokens(item))
    x = np.array([x_counts.get(t, 0) for t in vocab], dtype=np.float64)
    present = x > 0
    v = len(vocab)
    log_prior = np.log(n_messages) - np.log(n_messages.sum())
    jll = np.zeros(2)
    n = max(float(x.sum() if event_model == "multinomial" else present.sum()), 1.0)
    for c in (0, 1):
        if event_model == "bernoulli":
            theta = (docs[c] + alpha) / (n_messages[c] + 2 * alpha)
            jll[c] = log_prior[c] + (np.log(theta[present]).sum() + np.log(1 - theta[~present]).sum()) / n**tempering
        elif event_model == "multinomial":
            theta = (terms[c] + alpha) / (terms[c].sum() + alpha * v)
            jll[c] = log_prior[c] + (x * np.log(theta)).sum() / n**tempering
        else:
            theta = (docs[c] + alpha) / (docs[c].sum() + alpha * v)
            jll[c] = log_prior[c] + np.log(theta[present]).sum() / n**tempering
    return float(jll[1] - jll[0])


@pytest.mark.parametrize("tempering", [0.0, 0.5])
@pytest.mark.parametrize("alpha", [0.1, 1.0])
@pytest.mark.parametrize("event_model", EVENT_MODELS)
def test_log_odds_equal_brute_force_over_the_vocabulary(trained: Filter, event_model: str, alpha: float, tempering: float) -> None:
    # Forget one message so the histogram has been through an untrain too.
    trained.forget([HAM[1]])
    # one tempering over all tokens (the header lines apart: tests/filter/test_header_apart.py)
    f = Filter(trained.store, config(trained.store.url, event_model=event_model, alpha=alpha, tempering=tempering, header_apart=False))
    items = UNSEEN + HAM + SPAM
    got = log_odds(f, items)
    expected = [brute_force_log_odds(f, m, event_model, alpha, tempering) for m in items]
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)
    # the bernoulli absent-token sum runs over hundreds of tokens, so this is no
    # accident of a tiny vocabulary
    assert f.store.totals().vocabulary_size > 50


# -- mailbox annotations: neither identity nor evidence ------------------------

ANNOTATIONS = b"Status: RO\nX-Status: A\nX-Keywords: $Junk\nX-UID: 17\nContent-Length: 120\nX-Mozilla-Status: 0001\n"


def annotated(item: MailItem) -> MailItem:
    """The message as a mail client leaves it in an mbox after reading it."""
    head, _, body = item.raw.partition(b"\n\n")
    return MailItem(item.source + "-read", head + b"\n" + ANNOTATIONS + b"\n" + body)


def test_a_message_read_in_its_mailbox_is_the_message_trained(trained: Filter) -> None:
    # A mail client marking a message read (Status, X-Status, ...) made it a
    # new message: trained twice, and `mark` relabelled a copy while the
    # original stayed with its old label.
    before = state(trained)
    read = [(is_spam, annotated(m)) for is_spam, m in LABELLED]
    assert trained.train(read) == TrainSummary(unchanged=len(LABELLED))
    assert state(trained) == before
    assert log_odds(trained, [m for _, m in read]) == log_odds(trained, [m for _, m in LABELLED])
    assert trained.mark([(True, annotated(HAM[0]))]) == TrainSummary(relabelled=1)
    assert trained.forget([annotated(HAM[0])]) == TrainSummary(forgotten=1)


def test_a_store_trained_before_finds_its_messages_under_their_former_digest(tmp_path: Path) -> None:
    # Digests kept the annotations before: a store trained then holds such a
    # message under that digest, which train, mark and forget still find.
    read = [(is_spam, annotated(m)) for is_spam, m in LABELLED]
    with open_filter(tmp_path, "before") as f, open_filter(tmp_path, "fresh") as fresh:
        assert f.train(read) == TrainSummary(trained_ham=4, trained_spam=3)
        with f.store.engine.begin() as conn:
            for _, m in read:
                assert former_digest(m.raw) is not None and former_digest(m.raw) != m.digest
                conn.execute(sa.text("UPDATE messages SET digest = :old WHERE digest = :new"), {"old": former_digest(m.raw), "new": m.digest})
        assert f.train(read) == TrainSummary(unchanged=len(read))
        assert f.train(LABELLED) == TrainSummary(unchanged=len(read))
        fresh.train(read)
        assert state(f, with_times=False) == state(fresh, with_times=False)
        # mark and forget, each on one message still under its former digest
        with f.store.engine.begin() as conn:
            for _, m in read[:2]:
                conn.execute(sa.text("UPDATE messages SET digest = :old WHERE digest = :new"), {"old": former_digest(m.raw), "new": m.digest})
        assert f.mark([(not read[0][0], read[0][1])]) == TrainSummary(relabelled=1)
        assert f.forget([read[1][1]]) == TrainSummary(forgotten=1)
        fresh.mark([(not read[0][0], read[0][1])])
        fresh.forget([read[1][1]])
        assert state(f, with_times=False) == state(fresh, with_times=False)


def test_a_message_held_under_both_digests_becomes_one_message(tmp_path: Path) -> None:
    # Trained read and unread before the annotations left digests: two rows
    # of one message. `mark` relabelled one and left the other with its old
    # label for good; now the former row goes when the message is met.
    item = annotated(SPAM[0])

    def trained_both_ways(f: Filter) -> None:
        f.train([(True, item)])
        with f.store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE messages SET digest = :old"), {"old": former_digest(item.raw)})
        assert f.train([(True, SPAM[0])]) == TrainSummary(trained_spam=1)
        assert len(state(f)["messages"]) == 2

    with open_filter(tmp_path, "a") as a, open_filter(tmp_path, "b") as b, open_filter(tmp_path, "c") as c, open_filter(tmp_path, "once") as once:
        once.train([(True, SPAM[0])])
        trained_both_ways(a)
        assert a.train([(True, item)]) == TrainSummary(unchanged=1)
        assert state(a, with_times=False) == state(once, with_times=False)
        trained_both_ways(b)
        assert b.mark([(False, item)]) == TrainSummary(relabelled=1)
        once.mark([(False, item)])
        assert state(b, with_times=False) == state(once, with_times=False)
        trained_both_ways(c)
        assert c.forget([item]) == TrainSummary(forgotten=1)
        assert state(c)["messages"] == [] and state(c)["tokens"] == []


def test_only_learning_works_out_former_digests(trained: Filter, monkeypatch: pytest.MonkeyPatch) -> None:
    # Classifying never asks for the former digest (a second hash of an
    # annotated message, and a scan of every header block).
    import spamfilter.analysis

    calls: list[bytes] = []
    real = spamfilter.analysis.former_digest

    def counted(raw: bytes, digest: str | None = None) -> str | None:
        calls.append(raw)
        return real(raw, digest)

    monkeypatch.setattr(spamfilter.analysis, "former_digest", counted)
    items = [annotated(m) for m in UNSEEN]
    assert len(list(trained.classify(items))) == len(items) and calls == []
    trained.train([(False, m) for m in items])
    assert len(calls) == len(items)
