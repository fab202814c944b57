"""Two copies of a trained SQLite model: one that the code under test
teaches (``url``), and one to which the test applies what that should
amount to itself (``expected``). Comparing their counts, as ``spamfilter db
export`` writes them, checks a change exactly, or that there was none.

    from twin_models import TwinModels

    twins = TwinModels.copy(trained_url, tmp_path / "model.db", tmp_path / "expected.db", config)
    ...  # something that should learn `message` as spam
    twins.expect(True, message)
    twins.wait_as_expected()
"""

from __future__ import annotations

import io
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from spamfilter.config import load_config
from spamfilter.filter import Filter
from spamfilter.mail import MailItem
from spamfilter.tools.maintenance import Maintenance


def copy_sqlite(source: str, target: Path) -> str:
    """A copy of the SQLite database at URL ``source`` in file ``target``; its URL."""
    src, dst = sqlite3.connect(source.removeprefix("sqlite:///")), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return f"sqlite:///{target}"


def counts(url: str, config: Path, user: str | None = None) -> str:
    """``user``'s token counts and totals at ``url`` in the counts format
    of ``db export``: without its feature sums, which the bytes a mail
    server hands over move (its own line endings, a size), while the
    tokens are the message's."""
    out = io.StringIO()
    with Filter.open(load_config(config), url, user, create=False) as f:
        Maintenance(f.store).export_counts(out)
    return "".join(line for line in out.getvalue().splitlines(keepends=True) if not line.startswith("# features "))


@dataclass(frozen=True)
class TwinModels:
    """The model taught (``url``) and its expected state (``expected``),
    both read with the config file ``config``."""

    url: str
    expected: str
    config: Path

    @classmethod
    def copy(cls, trained: str, path: Path, expected_path: Path, config: Path) -> TwinModels:
        return cls(copy_sqlite(trained, path), copy_sqlite(trained, expected_path), config)

    def expect(self, is_spam: bool, message: bytes, user: str | None = None) -> None:
        """Mark ``message`` in the expected model, as feedback does."""
        with Filter.open(load_config(self.config), self.expected, user) as f:
            f.mark([(is_spam, MailItem("expected", message))])

    def as_expected(self, user: str | None = None) -> bool:
        return counts(self.url, self.config, user) == counts(self.expected, self.config, user)

    def wait_as_expected(self, user: str | None = None, wait: float = 30.0) -> None:
        """Until the two agree, for at most ``wait`` seconds."""
        want = counts(self.expected, self.config, user)
        deadline = time.monotonic() + wait
        while (got := counts(self.url, self.config, user)) != want and time.monotonic() < deadline:
            time.sleep(0.1)
        assert got == want
