"""The write side of a filter: training, relabelling and forgetting, each
batch one transaction.

A batch's messages become one ``CountDelta`` (a relabelled message is
untrained with exactly the counts its ledger entry holds, then trained
afresh), written by one call to the store; the ledger records each message
so that ``forget`` and ``mark`` can subtract exactly what training added.
When the write is the only change since the ``CountCache`` was read, the
cache takes the counts the write returned once the transaction has
committed, instead of reading them again.

Every message ``train`` learns is also scored by the model as it was before
its batch, and that score goes into the calibration record
(``spamfilter.nb.calibration``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import islice
from typing import TypeVar

import numpy as np

from spamfilter.analysis import Analysed
from spamfilter.answers import Refusal, TrainSummary
from spamfilter.config import Config, counts_occurrences
from spamfilter.counts import TokenCounts, Totals
from spamfilter.filter import dependence
from spamfilter.filter.cache import CacheKey, ModelView
from spamfilter.filter.delta import CountDelta
from spamfilter.filter.scoring import Scoring
from spamfilter.mail import MailItem, former_digest, not_mail
from spamfilter.nb import model
from spamfilter.nb.calibration import growth
from spamfilter.nb.scorer import Evidence
from spamfilter.retry import retrying
from spamfilter.store import CountsWritten, Store, StoreTransaction
from spamfilter.tokenizer import is_header_line
from spamfilter.vectorizer import indexed_matrix, unseen_counts
from spamfilter.verdicts import Label

T = TypeVar("T")


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of ``size`` items (the last one shorter)."""
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch


class Training:
    """Writes a user's counts, keeping ``scoring``'s cache coherent."""

    def __init__(self, store: Store, config: Config, scoring: Scoring, write_deadline: float) -> None:
        self.store = store
        self.config = config
        self.scoring = scoring
        self.write_deadline = write_deadline
        self._after_commit: Callable[[], None] | None = None

    def train(self, read: Iterable[tuple[Label, Analysed | Refusal]], *, relabel: bool) -> TrainSummary:
        """Train messages already read, one transaction per ``store.batch_size``."""
        total = TrainSummary()
        for results in batched(read, self.config.store.batch_size):
            refused = tuple(r for _, r in results if isinstance(r, Refusal))
            good = [(label, r) for label, r in results if isinstance(r, Analysed)]

            def step(good: list[tuple[Label, Analysed]] = good) -> TrainSummary:
                with self.write_transaction() as tx:
                    return self.train_batch(tx, good, relabel)

            total = total + retrying(step, self.write_deadline) + TrainSummary(refused=refused)
        return total

    def train_batch(
        self, tx: StoreTransaction, batch: Sequence[tuple[Label, Analysed]], relabel: bool, record: bool = True, records: Mapping[str, tuple[int, float]] | None = None
    ) -> TrainSummary:
        """Train one batch in ``tx`` (a ``write_transaction``); with
        ``relabel``, a message trained with the other label moves, and its
        calibration record entry with it. ``records``: the entries of
        messages the caller recorded itself (digest -> ``Scoring.record``'s)."""
        delta = CountDelta()
        moved = self._former_rows(tx, batch, delta)
        known = tx.trained_labels([a.digest for _, a in batch])
        add: dict[str, tuple[Label, Analysed]] = {}
        unchanged = conflicts = 0
        moving: list[str] = []
        for label, a in batch:
            previous = known.get(a.digest)
            if previous == label or (a.digest in add and add[a.digest][0] == label):
                unchanged += 1
            elif previous is None and a.digest not in add:
                add[a.digest] = (label, a)
            elif relabel:
                if previous is not None and a.digest not in add:
                    moving.append(a.digest)
                add[a.digest] = (label, a)
            else:
                conflicts += 1
        new = list(add.values()) if record and not relabel else []
        # The calibration record: how the model before this batch scores it.
        # Read off the write's own counts when the model is the owner's naive
        # Bayes alone (no read, no cache kept), else scored before the write.
        from_write = bool(new) and self._records_from_write(tx.owner)
        entries = dict(records or {})
        if new and not from_write:
            entries.update(self._record_before_learning(tx, new))
        totals = tx.totals() if from_write else None
        # A relabelled message is untrained with exactly the counts (and
        # features) recorded when it was trained, then trained afresh with
        # its new label; its record entry moves to the new label.
        for old in tx.take_messages(moving):
            delta.add(old.label, old.token_counts, -1, old.features)
            if old.record is not None:
                entries[old.digest] = old.record
                moved.append((old.label, *old.record, int(add[old.digest][0])))
        for label, a in add.values():
            delta.add(label, a.counts, +1, a.features)
        if moved:
            tx.lock_record()  # before the counts' rows, as a recording run takes them
        written = self.apply(tx, delta)
        if totals is not None and written is not None and totals.messages.all():
            entries.update(self._record_from_write(tx, new, written, delta, totals))
        if self.scoring.restarted(tx):
            moved = []  # entries of a record written under other settings, emptied by this batch's recording
        self.scoring.move_recorded(tx, moved)
        tx.record_messages([(d, label, a.counts, a.features, a.entry) for d, (label, a) in add.items()], records=entries)
        # With the batch in the ledger: a new choice of parents counts it.
        dependence.reselect_if_due(tx, self.config.model)
        new_labels = [label for d, (label, _) in add.items() if d not in moving]
        return TrainSummary(
            trained_ham=new_labels.count(model.HAM), trained_spam=new_labels.count(model.SPAM), unchanged=unchanged, relabelled=len(moving), conflicts=conflicts
        )

    def _former_rows(self, tx: StoreTransaction, batch: Sequence[tuple[Label, Analysed]], delta: CountDelta) -> list[tuple[int, int, float, int | None]]:
        """Move the batch's messages held under their former digests to their
        digests now (`adopt_digests`). A former row still there then is a
        copy, the same message trained under both digests before they were
        one (read and unread in an mbox): it is untrained into ``delta``, or
        `mark` would leave it with its old label for good. Returns its
        calibration record entries to take out (``Scoring.move_recorded``)."""
        formers = {a.former: a.digest for _, a in batch if a.former is not None}
        if not formers:
            return []
        tx.adopt_digests(formers)
        entries: list[tuple[int, int, float, int | None]] = []
        for copy in tx.take_messages(list(formers)):
            delta.add(copy.label, copy.token_counts, -1, copy.features)
            if copy.record is not None:
                entries.append((copy.label, *copy.record, None))
        return entries

    def _record_before_learning(self, tx: StoreTransaction, new: Sequence[tuple[Label, Analysed]]) -> dict[str, tuple[int, float]]:
        """Score the messages ``train`` is about to learn with the model as
        it is, and record those scores in the calibration history: mail the
        model has not seen yet, labelled. ``mark`` records nothing: the
        messages a user corrects are mostly the filter's errors, and a
        history of them would make every score look wrong."""
        view = self.scoring.cached_model(tx)
        if not view.totals.messages.all():
            return {}  # no model yet to score with
        verdicts = self.scoring.verdicts([a for _, a in new], tx)
        # The model that scored grows by the batch only when it holds the
        # owner's counts (not the shared model a new user falls back on).
        grown = growth(int(view.totals.messages.sum()), len(new)) if tx.owner in view.owners else 1.0
        entries = self.scoring.record(tx, [label for label, _ in new], [v.log_odds for v in verdicts], grown)
        return {a.digest: entry for (_, a), entry in zip(new, entries)}

    def _records_from_write(self, owner: str) -> bool:
        """Whether ``_record_from_write`` can score a batch: naive Bayes
        without message features, over the owner's counts alone."""
        m = self.config.model
        return m.dependence == "none" and not m.features and self.scoring.model_owners(owner) == (owner,)

    def _record_from_write(
        self, tx: StoreTransaction, new: Sequence[tuple[Label, Analysed]], written: CountsWritten, delta: CountDelta, totals: Totals
    ) -> dict[str, tuple[int, float]]:
        """Record how the model before the batch scored its new messages,
        from what the write returned: every token of the batch with its new
        counts, less the batch's own (``delta.written``), over the totals read
        before the write. The same scores as ``_record_before_learning``'s,
        without reading the counts first."""
        assert delta.written is not None
        before = TokenCounts(written.counts.doc_count - delta.written.doc_count, written.counts.term_count - delta.written.term_count)
        index = dict(zip(written.token_list, range(len(written.token_list))))
        docs, binary = [a.counts for _, a in new], not counts_occurrences(self.config.model.event_model)
        X, ids = indexed_matrix(docs, index, before.known_at, binary=binary)
        header = unseen = None
        if self.config.model.header_apart:
            header = np.fromiter((is_header_line(written.token_list[i]) for i in ids.tolist()), dtype=bool, count=ids.size)
        if self.config.model.unseen_weight:
            unseen = unseen_counts(docs, index, before.known_at, is_header_line, binary=binary)
        odds = self.scoring.scorer.log_odds(Evidence(before.take(ids), totals, X, header, unseen=unseen))
        entries = self.scoring.record(tx, [label for label, _ in new], odds.tolist(), growth(int(totals.messages.sum()), len(new)))
        return {a.digest: entry for (_, a), entry in zip(new, entries)}

    def forget(self, items: Iterable[MailItem]) -> TrainSummary:
        """Untrain messages: subtract exactly the counts their training added."""
        total = TrainSummary()
        # Copies of one message (another line ending, the filter's fields)
        # are one message, counted once however the batches fall.
        seen: set[str] = set()
        # Forgetting needs only the identity, not a parse: even a message the
        # current settings would refuse can be forgotten.
        for batch in batched(items, self.config.store.batch_size):
            # A file found in a folder that could not be read has no identity.
            refused = tuple(Refusal(item.source, item.unreadable_reason) for item in batch if item.unreadable_reason is not None)
            total = total + TrainSummary(refused=refused)
            named = {item.digest: item for item in batch if item.unreadable is None}
            digests = sorted(named.keys() - seen)
            # A message a store trained before holds under its former digest
            # is moved to its digest now, then forgotten (`adopt_digests`).
            formers = {former: d for d in digests if (former := former_digest(named[d].raw, d)) is not None}
            seen.update(digests)

            def step(digests: list[str] = digests, formers: dict[str, str] = formers) -> set[str]:
                with self.write_transaction() as tx:
                    tx.adopt_digests(formers)
                    # Taken out of the ledger first (DELETE ... RETURNING):
                    # a second process forgetting the same message at once
                    # gets nothing back and subtracts nothing. A former row
                    # still there is a copy of the message (trained under
                    # both digests): it goes too.
                    removed = tx.take_messages(digests + list(formers))
                    delta = CountDelta()
                    for old in removed:
                        delta.add(old.label, old.token_counts, -1, old.features)
                    # What is left of their calibration record entries goes
                    # too, the record taken first (`lock_record`).
                    entries = [(old.label, *old.record, None) for old in removed if old.record is not None]
                    if entries:
                        tx.lock_record()
                    self.apply(tx, delta)
                    self.scoring.move_recorded(tx, entries)
                    return {formers.get(old.digest, old.digest) for old in removed}

            forgotten = retrying(step, self.write_deadline)
            # What was not trained and is not mail either (empty, binary
            # junk) is refused as `train` refuses it, not "not trained".
            junk = [Refusal(named[d].source, reason) for d in digests if d not in forgotten and (reason := not_mail(named[d])) is not None]
            total = total + TrainSummary(forgotten=len(forgotten), unknown=len(digests) - len(forgotten) - len(junk), refused=tuple(junk))
        return total

    @contextmanager
    def write_transaction(self) -> Iterator[StoreTransaction]:
        """A write transaction; once it has committed, the cache takes the
        counts it wrote (see ``apply``)."""
        self._after_commit = None
        try:
            with self.store.begin() as tx:
                yield tx
        except BaseException:
            self._after_commit = None
            raise
        update, self._after_commit = self._after_commit, None
        if update is not None:
            update()

    def apply(self, tx: StoreTransaction, delta: CountDelta) -> CountsWritten | None:
        """Write ``delta`` in ``tx`` (a ``write_transaction``), and arrange
        for the cache to follow if it holds the model as it was just before;
        what was written.

        The cache is kept only when this write is the one change between
        the versions: the owner's version went up by exactly one from the
        one the cache holds (no other process wrote in between, so the
        versions need not be read again here) and the model that classifies
        this user's mail was and still is the user's own counts alone (the
        shared model of "fallback" or "merge" is not updated in place, it is
        read again).
        """
        cache = self.scoring.cache
        candidates = self.scoring.model_owners(tx.owner)
        before: CacheKey | None = cache.key
        own_before = cache.view is not None and cache.view.owners == (tx.owner,)
        written = delta.apply(tx)
        if written is None or before is None or before[0] != candidates:
            return written
        own = candidates.index(tx.owner)
        assert cache.view is not None
        owners: tuple[str, ...]
        if candidates == (tx.owner,):
            # The model is this owner's counts alone: its totals follow the
            # write in memory, as the store changed them.
            totals, owners = cache.view.totals.changed(written.classes, written.histogram), candidates
        else:
            totals, owners = self.scoring.model_of(tx)
        if not own_before or owners != (tx.owner,) or written.version != before[1][own] + 1:
            self._after_commit = cache.clear
            return written
        after = (candidates, tuple(written.version if i == own else v for i, v in enumerate(before[1])))
        view = ModelView(totals, owners)
        self._after_commit = lambda: cache.apply(before, after, written.token_list, written.counts, view)
        return written
