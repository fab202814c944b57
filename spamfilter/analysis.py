"""Messages to token counts: parse, tokenize and identify, here or on other cores.

Reading mail is most of the work of classifying and training (parsing MIME,
decoding, tokenizing: about 80% of a classify run once the counts come from
memory), and it needs nothing from the store, so ``analyse`` can hand it to
worker processes while this one scores and writes. Workers get the raw bytes
of a chunk of messages and send back each one's digest and token counts, or
why it was refused; the results come back in input order, whatever the
number of workers, and are the same as analysing here (tested).

Workers are forked (the parent's modules are already loaded, so a worker
starts in milliseconds) and only a few chunks are in flight at a time, so a
mailbox of any size never sits whole in a queue. A short input is analysed
here: starting workers costs more than it saves. A worker ends when its
parent does, however the parent ends (`_end_with_parent`).
"""

from __future__ import annotations

import email.message
import os
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from concurrent.futures import Future

from spamfilter.answers import Refusal
from spamfilter.config import TokenizerConfig
from spamfilter.errors import MailParseError, WorkerLost
from spamfilter.mail import MailItem, former_digest, parse_message, without_filter_fields
from spamfilter.tokenizer import Tokenizer
from spamfilter.tokenizer.features import TextShape, message_features
from spamfilter.vectorizer import term_counts

#: Messages per task sent to a worker: big enough that pickling and the
#: round trip are small beside the tokenizing (~1-2 ms a message), small
#: enough to keep the workers evenly busy.
CHUNK = 32

#: Inputs shorter than this are analysed in this process.
MIN_PARALLEL = 4 * CHUNK

#: Packs a message's ledger entry from its token counts and features (a
#: module-level function, so that it pickles to the workers by name).
LedgerPacker = Callable[[dict[str, int], tuple[int, ...]], bytes]

#: What a worker sends back for a message it read: digest, token counts,
#: features, the ledger entry when the analyser packs one, and the former
#: digest (``mail.former_digest``).
Outcome = tuple[str, dict[str, int], tuple[int, ...], bytes | None, str | None]


@dataclass(frozen=True, slots=True)
class Analysed:
    """A message read as mail: where it came from, its identity, its
    token counts and its fixed-point feature vector
    (``tokenizer.features``; not its bytes: a batch of them is held while
    it is scored or trained)."""

    source: str
    digest: str
    counts: dict[str, int]
    features: tuple[int, ...] = ()
    #: The message's ledger entry (``store.ledger.pack_ledger_entry`` of
    #: its counts and features), packed by an analyser made for training
    #: so that the workers do it; None where the store packs it.
    entry: bytes | None = None
    #: The digest a store trained before may hold the message under
    #: (``mail.former_digest``), or None.
    former: str | None = None


class Analyser:
    """Reads messages with one tokenizer configuration. Picklable, so a
    worker gets its own copy with each chunk: only the configuration
    travels, and the worker builds its tokenizer from it (compiled patterns
    and the engine state of a tokenizer are not for pickling)."""

    def __init__(
        self,
        config: TokenizerConfig,
        max_bytes: int,
        tokenizer: Tokenizer | None = None,
        *,
        features: bool = True,
        ledger: LedgerPacker | None = None,
        formers: bool = True,
    ) -> None:
        self.config = config
        self.max_bytes = max_bytes
        self._tokenizer = tokenizer
        #: Whether the message features are computed; without them ``Analysed.features`` is ().
        self.features = features
        #: What packs each message's ledger entry here (``Analysed.entry``;
        #: the store's ``pack_ledger_entry``, handed over by the filter, as
        #: this module knows nothing of the store), for training: the
        #: reading processes do it instead of the writing one.
        self.ledger = ledger
        #: Whether ``Analysed.former`` is worked out (for learning: a store
        #: trained before may hold the message under it; classifying never
        #: asks).
        self.formers = formers

    def __getstate__(self) -> tuple[TokenizerConfig, int, bool, LedgerPacker | None, bool]:
        return self.config, self.max_bytes, self.features, self.ledger, self.formers

    def __setstate__(self, state: tuple[TokenizerConfig, int, bool, LedgerPacker | None, bool]) -> None:
        self.config, self.max_bytes, self.features, self.ledger, self.formers = state
        self._tokenizer = None

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = Tokenizer(self.config)
        return self._tokenizer

    def tokens(self, item: MailItem) -> list[str]:
        """The message's tokens; raises ``MailParseError`` if it is not mail."""
        return self.tokenizer.tokenize(self._parse(item)[0])

    def _parse(self, item: MailItem) -> tuple[email.message.Message, int]:
        """The parsed message and its size, both without the filter's own
        fields (`without_filter_fields`), so a message filtered, then
        trained from its folder, reads as the one that came in."""
        head, size = without_filter_fields(item.raw, self.max_bytes)
        read = item if head is item.raw else MailItem(item.source, head)
        return parse_message(read, max_bytes=self.max_bytes), size

    def one(self, item: MailItem) -> Analysed | Refusal:
        """Digest, token counts and features of one message, or why it is refused."""
        outcome = self._outcome(item)
        if isinstance(outcome, str):
            return Refusal(item.source, outcome)
        return Analysed(item.source, *outcome)

    def _read(self, item: MailItem) -> tuple[dict[str, int], tuple[int, ...]]:
        """Token counts and features from one parse and one tokenizer pass."""
        message, size = self._parse(item)
        if not self.features:
            return term_counts(self.tokenizer.tokenize(message)), ()
        shape = TextShape()
        tokens = self.tokenizer.tokenize(message, shape)
        return term_counts(tokens), message_features(message, tokens, size, shape)

    def _outcome(self, item: MailItem) -> Outcome | str:
        try:
            counts, features = self._read(item)
        except MailParseError as exc:
            return str(exc)
        except Exception as exc:  # noqa: BLE001 - one message's failure is that message's
            # A message is input from strangers, and parsing and tokenizing
            # run third-party code on it (the email package, regular
            # expressions): a 50 MB text once made a regexp guard raise
            # TimeoutError, which ended whole train and classify runs.
            # Whatever one message raises refuses that message and names
            # the error; the run goes on.
            return f"cannot be read: {type(exc).__name__}: {exc}"
        digest = item.digest
        former = former_digest(item.raw, digest) if self.formers else None
        return digest, counts, features, None if self.ledger is None else self.ledger(counts, features), former

    def remote(self, chunk: list[MailItem]) -> list[Outcome | str]:
        """``one`` for each message of a chunk, in a worker: only the digest,
        counts, features and ledger entry (or the refusal's reason) travel
        back, not the message."""
        return [self._outcome(item) for item in chunk]


def analyse(analyser: Analyser, items: Iterable[MailItem], jobs: int = 1, ahead: int = 0) -> Iterator[Analysed | Refusal]:
    """``analyser.one`` of each message, in input order, on ``jobs`` processes.

    ``ahead``: how many messages the workers may read beyond the one being
    returned (at least three chunks a worker). The caller scores a batch at
    a time; with a batch's worth ahead the workers keep reading while it
    does, where with three chunks they ran dry and a 2-core classify was no
    faster than one process.
    """
    it = iter(items)
    head = list(islice(it, MIN_PARALLEL))
    if jobs <= 1 or len(head) < MIN_PARALLEL:
        yield from map(analyser.one, head)
        yield from map(analyser.one, it)
        return
    # Imported here: a delivery filter reads one message and never needs a
    # pool (the two modules cost 11 ms of every start).
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    # Only this process holds the write end: the kernel closes it however
    # this process ends, and the workers' reads of the other end return.
    lifeline = os.pipe()
    executor = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"), initializer=_end_with_parent, initargs=lifeline)
    try:
        # Only the sources wait here with their chunk's future: the bytes
        # went to the worker, and a message's bytes are not needed again.
        pending: deque[tuple[list[str], Future[list[Outcome | str]]]] = deque()
        for chunk in _chunks(head, it):
            try:
                future = executor.submit(analyser.remote, chunk)
            except BrokenProcessPool as exc:  # a worker died since the last answer
                raise WorkerLost(f"a process reading mail died before it finished: {exc}") from None
            pending.append(([item.source for item in chunk], future))
            if len(pending) >= max(3 * jobs, -(-ahead // CHUNK)):
                yield from _collect(*pending.popleft())
        while pending:
            yield from _collect(*pending.popleft())
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
        for fd in lifeline:
            os.close(fd)


def _end_with_parent(read_end: int, write_end: int) -> None:
    """In a worker: end this process as soon as its parent has ended.

    A worker waits for tasks on a queue whose pipe every worker also holds
    open, so a parent killed with SIGKILL left its workers (70-80 MB each)
    waiting for good, adopted by init. The parent keeps the write end of a
    pipe of its own; a worker closes its inherited copy, and a thread blocks
    reading the other end until the parent's copy closes with the parent.

    Ctrl-C reaches every process of the terminal's group: a worker ignores
    it (it printed a traceback of its own), and the parent, which stops
    the run and says so, shuts the pool down.
    """
    os.close(write_end)
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def wait() -> None:
        try:
            while os.read(read_end, 1):
                pass
        finally:
            os._exit(1)

    import threading

    threading.Thread(target=wait, name="end-with-parent", daemon=True).start()


def analyse_labelled(analyser: Analyser, labelled: Iterable[tuple[bool, MailItem]], jobs: int = 1, ahead: int = 0) -> Iterator[tuple[bool, Analysed | Refusal]]:
    """``analyse`` of (is_spam, message) pairs: each result with its label,
    in input order."""
    labels: deque[bool] = deque()

    def items() -> Iterator[MailItem]:
        for is_spam, item in labelled:
            labels.append(is_spam)
            yield item

    for result in analyse(analyser, items(), jobs, ahead):
        yield labels.popleft(), result


def _chunks(head: list[MailItem], rest: Iterator[MailItem]) -> Iterator[list[MailItem]]:
    for start in range(0, len(head), CHUNK):
        yield head[start : start + CHUNK]
    while chunk := list(islice(rest, CHUNK)):
        yield chunk


def _collect(sources: list[str], result: Future[list[Outcome | str]]) -> Iterator[Analysed | Refusal]:
    from concurrent.futures.process import BrokenProcessPool

    try:
        outcomes = result.result()
    except BrokenProcessPool as exc:
        # A worker died (killed, out of memory, a crash in C code): its
        # chunk will never come back, and waiting would hang the run.
        raise WorkerLost(f"a process reading mail died before it finished (one of {sources[0]} ...): {exc}") from None
    for source, outcome in zip(sources, outcomes):
        yield Refusal(source, outcome) if isinstance(outcome, str) else Analysed(source, *outcome)
