"""The daemon's open filters: one ``Filter`` per model (user), each used
under its own lock, the least recently used closed beyond ``max_users``.

A ``Filter`` is not thread-safe, so the requests of one model run one at a
time while those of different models run side by side; a reload (SIGHUP)
replaces the config, and each filter is closed once its request in flight
is done.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from spamfilter.config import Config
from spamfilter.service import Filter


class _Entry:
    """One model's filter and the lock it is used under."""

    __slots__ = ("filter", "lock", "closed")

    def __init__(self) -> None:
        self.filter: Filter | None = None
        self.lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        """Close the filter; the caller holds the lock."""
        self.closed = True
        if self.filter is not None:
            self.filter.close()
            self.filter = None


class FilterPool:
    """The open filters, one per model owner, least recently used first;
    beyond ``max_users`` an idle one is closed."""

    def __init__(self, config: Config, db_url: str | None, default_user: str | None, max_users: int = 64) -> None:
        self._config = config
        self._db_url = db_url
        self._default_user = default_user
        self._max_users = max_users
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def config(self) -> Config:
        return self._config

    def owner(self, user: str | None) -> str:
        """The model a request for ``user`` (None: no User header) uses."""
        if user is not None:
            return user
        return self._default_user if self._default_user is not None else self._config.store.user

    @contextmanager
    def lease(self, user: str | None) -> Iterator[tuple[str, Filter]]:
        """The owner and filter of ``user``'s model, held under its lock."""
        while True:
            with self._lock:
                config = self._config
                owner = self.owner(user)
                entry = self._entries.get(owner)
                if entry is None:
                    entry = self._entries[owner] = _Entry()
                    self._evict()
                self._entries.move_to_end(owner)
            with entry.lock:
                if entry.closed:
                    continue  # replaced by a reload or evicted meanwhile
                if entry.filter is None:
                    entry.filter = Filter.open(config, self._db_url, owner)
                yield owner, entry.filter
                return

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
        """Use ``config`` from now on; each open filter is closed once its
        request in flight (if any) is done."""
        with self._lock:
            old, self._entries, self._config = self._entries, OrderedDict(), config
        for entry in old.values():
            with entry.lock:
                entry.close()

    def close(self) -> None:
        """Close every filter (waiting for requests in flight)."""
        self.replace(self._config)
