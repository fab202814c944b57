"""The daemon's open filters: one ``Filter`` per model (user), each used
under its own lock, the least recently used closed beyond ``max_users``;
and which model answers a request.

One model unless told otherwise: every request is scored and learned with
the default model (``store.user``, or ``--user``), whatever ``User`` the
client names (spamc sends the Unix user it runs as). In per-user mode
(``serve --per-user``, ``daemon.per_user``) the request's ``User`` chooses
the model, as ``--user`` does, and a user without one follows
``store.shared_model``.

A ``Filter`` is not thread-safe, so the requests of one model run one at a
time while those of different models run side by side; a reload (SIGHUP)
replaces the config at once, without waiting, and each filter is closed
once its request in flight is done. The daemon keeps two pools over the
same models: one that scores and one whose filters learn (TELL), whose
writes give up after a bound (`for_writing`), so a request is never scored
behind a write waiting for a lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from spamfilter.config import Config, database_url
from spamfilter.errors import NoSuchDatabase, NotTrainedError, SpamfilterError, StoreBusyError, StoreError
from spamfilter.filter import Filter
from spamfilter.locations import default_location_url
from spamfilter.mail import MailItem
from spamfilter.store import display_url, sqlite_path

logger = logging.getLogger(__name__)


class _Entry:
    """One model's filter and the lock it is used under."""

    __slots__ = ("filter", "lock", "closed", "retired")

    def __init__(self) -> None:
        self.filter: Filter | None = None
        self.lock = threading.Lock()
        self.closed = False
        #: Replaced by a reload: closed by whoever holds the lock last.
        self.retired = False

    def retire(self) -> None:
        """Close the filter now if it is idle, else when its request ends."""
        self.retired = True
        if self.lock.acquire(blocking=False):
            try:
                self.close()
            finally:
                self.lock.release()

    def close(self) -> None:
        """Close the filter; the caller holds the lock."""
        self.closed = True
        if self.filter is not None:
            self.filter.close()
            self.filter = None


class FilterPool:
    """The open filters, one per model owner, least recently used first;
    beyond ``max_users`` an idle one is closed.

    default_user: the default model's owner (None: the config's
        ``store.user``). per_user: whether a request's ``User`` chooses its
        model (None: the config's ``daemon.per_user``). waits_within: the
        seconds a request, scoring or learning, may wait for another
        process's lock on the database, in all (None: the config's
        ``store.busy_timeout`` and ``write_deadline``; see ``lease``).
    """

    def __init__(
        self, config: Config, db_url: str | None, default_user: str | None, max_users: int = 64, *, per_user: bool | None = None, waits_within: float | None = None
    ) -> None:
        self._config = config
        self._db_url = db_url
        self._default_user = default_user
        self._max_users = max_users
        self._per_user = per_user
        self._waits_within = waits_within
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def config(self) -> Config:
        return self._config

    @property
    def waits_within(self) -> float | None:
        """Seconds a request waits for the model's lock, and for the
        database, before it fails (None: as long as the store's own deadline)."""
        return self._waits_within

    def for_writing(self, seconds: float) -> FilterPool:
        """A pool of other filters over the same models, whose writes (and
        waits for a lock another process holds) give up after ``seconds``."""
        return FilterPool(self._config, self._db_url, self._default_user, self._max_users, per_user=self._per_user, waits_within=seconds)

    def _open(self, config: Config, owner: str, *, create: bool = True, within: float | None = None) -> Filter:
        if within is None:
            return Filter.open(config, self._db_url, owner, create=create)
        return Filter.open(replace(config, store=config.store.within(within)), self._db_url, owner, create=create)

    @property
    def per_user(self) -> bool:
        """Whether a request's ``User`` header chooses its model."""
        return self._config.daemon.per_user if self._per_user is None else self._per_user

    def owner(self, user: str | None) -> str:
        """The model a request naming ``user`` (None: no User header) uses:
        in per-user mode that user's, else the default model."""
        if user is not None and self.per_user:
            return user
        return self._default_user if self._default_user is not None else self._config.store.user

    def describe(self) -> str:
        """Which models answer, from which database (for the log)."""
        default = self.owner(None)
        model = f"the model of user {default}" if default else "the default model"
        if self.per_user:
            shared = self._config.store.shared_model
            mode = f'per-user models: the model of the user a request names (shared_model = "{shared}"); {model} when it names none'
        else:
            mode = f"one model for every request, whatever user it names: {model}"
        return f"{mode}; database {display_url(database_url(self._db_url, self._config))}"

    def readiness(self) -> str | None:
        """Why the default model cannot score yet, before any request: a
        database not created yet, or (with one model for every request) a
        model without both spam and ham trained, under which every message
        is passed back unscanned; None when it can. A database that cannot
        be opened at all (a bad URL, a damaged file) raises its
        ``StoreError``: a daemon should not start on it."""
        url = database_url(self._db_url, self._config)
        try:
            f = self._open(self._config, self.owner(None), create=False, within=self._waits_within)
        except StoreBusyError as exc:
            return f"{exc}: requests wait at most {self._waits_within or self._config.store.write_deadline:g} s for it, then fail"
        except NoSuchDatabase as exc:
            path = sqlite_path(url)
            if path is None:
                # A server's database: `spamfilter train` cannot make one either.
                raise
            if not path.parent.is_dir() and url != default_location_url():
                # The daemon does not make folders: every request would fail.
                raise StoreError(f"{exc}, and its folder does not exist (`spamfilter --create-dirs train` makes both)") from None
            return f"{exc}: every message is passed back unscanned until `spamfilter train` trains the model"
        try:
            stats = f.stats()
        finally:
            f.close()
        if self.per_user:
            if self._config.store.shared_model == "none":
                # Each user's own model or nothing: new users' mail goes unscanned.
                return (
                    'per-user mode with store.shared_model = "none": mail for a user without a trained model of their own is'
                    ' passed back unscanned (shared_model = "fallback" scores it with the shared model)'
                )
            return None
        if stats.spam_messages and stats.ham_messages:
            return None
        return (
            f"the model has {stats.spam_messages} spam and {stats.ham_messages} ham trained: every message is passed back"
            " unscanned until `spamfilter train` gives it both"
        )

    def warm(self) -> None:
        """Classify a small built-in message with the default model, so that
        the first request is not the one to compile the reading patterns and
        read the model's totals and calibration map (45 ms of a first
        request, against 5 for the next). Nothing is written, and a database
        that does not exist is not created; a model that cannot score yet is
        left to ``readiness``'s warning."""
        try:
            with self.lease(None, create=False) as (_, f):
                list(f.classify([MailItem("(warm-up)", _WARM_UP)]))
        except SpamfilterError:
            pass
        except Exception:  # noqa: BLE001 - as for a request: the daemon outlives it
            logger.exception("warm-up: internal error")

    def unscored(self, owner: str, exc: SpamfilterError) -> str:
        """Why the model of ``owner`` gave no answer, for the log: an
        untrained model in per-user mode is a user's, under shared_model."""
        if not isinstance(exc, NotTrainedError) or owner == self.owner(None):
            return str(exc)
        return f'{exc}; the model of user {owner} (per-user mode, shared_model = "{self._config.store.shared_model}")'

    @contextmanager
    def lease(self, user: str | None, *, create: bool = True, until: float | None = None) -> Iterator[tuple[str, Filter]]:
        """The owner and filter of the model a request naming ``user`` uses
        (`owner`), held under its lock; without ``create`` a database that
        does not exist is ``NoSuchDatabase``, not made.

        With ``waits_within`` the wait for the model's lock (held by a
        request before, which may itself be waiting for the database) ends
        after that many seconds with ``StoreBusyError``, and so does the
        filter's own wait for another process's lock on the database: a
        request waits twice that at most, not in a queue behind every
        request before it. ``until`` (a ``time.monotonic`` time) ends the
        wait for the model's lock sooner: a request that has waited for
        something else first."""
        deadline = None if self._waits_within is None else time.monotonic() + self._waits_within
        if until is not None:
            deadline = until if deadline is None else min(deadline, until)
        while True:
            with self._lock:
                config = self._config
                owner = self.owner(user)
                entry = self._entries.get(owner)
                if entry is None:
                    entry = self._entries[owner] = _Entry()
                    self._evict()
                self._entries.move_to_end(owner)
            if not entry.lock.acquire(timeout=-1 if deadline is None else max(deadline - time.monotonic(), 0.0)):
                raise StoreBusyError(f"the model was in use by requests waiting for the database for {self._waits_within:g} s")
            try:
                if entry.closed:
                    continue  # replaced by a reload or evicted meanwhile
                if entry.filter is None:
                    entry.filter = self._open(config, owner, create=create, within=self._waits_within)
                try:
                    yield owner, entry.filter
                finally:
                    if entry.retired:
                        entry.close()
                return
            finally:
                entry.lock.release()

    def _evict(self) -> None:
        # Under self._lock; an entry in use is skipped, never waited for.
        for owner in list(self._entries)[: max(len(self._entries) - self._max_users, 0)]:
            entry = self._entries[owner]
            if entry.lock.acquire(blocking=False):
                try:
                    entry.close()
                finally:
                    entry.lock.release()
                del self._entries[owner]

    def replace(self, config: Config) -> None:
        """Use ``config`` from now on; each open filter is closed now if it
        is idle, else once its request in flight is done (never waited for)."""
        with self._lock:
            old, self._entries, self._config = self._entries, OrderedDict(), config
        for entry in old.values():
            entry.retire()

    def close(self) -> None:
        """Close every filter, waiting for requests in flight."""
        with self._lock:
            old, self._entries = self._entries, OrderedDict()
        for entry in old.values():
            with entry.lock:
                entry.close()


def reload_config(pools: Sequence[FilterPool], load: Callable[[], Config] | None, log: logging.Logger) -> None:
    """Read the configuration again (SIGHUP) and give it to ``pools``; on
    an error the old one stays, and ``log`` says why."""
    if load is None:
        return
    try:
        config = load()
    except SpamfilterError as exc:
        log.error("reload failed, keeping the old configuration: %s", exc)
        return
    except Exception:  # a reload never ends the daemon
        log.exception("reload failed (internal error), keeping the old configuration")
        return
    for pool in pools:
        pool.replace(config)
    log.info("configuration reloaded; %s", pools[0].describe())


#: What ``warm`` classifies: header lines, a text and an HTML part, a link and an address.
_WARM_UP = (
    b"Received: from mail.example.org (mail.example.org [192.0.2.1]) by mx.example.net; Fri, 27 Nov 2026 08:00:00 +0000\n"
    b"From: Warm Up <warm@example.org>\nTo: daemon@example.net\nSubject: warm-up\n"
    b"Message-ID: <warm-up@example.org>\nMIME-Version: 1.0\n"
    b'Content-Type: multipart/alternative; boundary="b"\n\n'
    b"--b\nContent-Type: text/plain; charset=utf-8\n\nSee https://www.example.org/page or write to info@example.org.\n"
    b'--b\nContent-Type: text/html; charset=utf-8\n\n<p>See <a href="https://www.example.org/page">the page</a>.</p>\n--b--\n'
)
