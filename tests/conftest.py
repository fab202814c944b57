"""Fixtures shared by the test modules."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from spamfilter.store import Store

# The labelled corpora live beside the repository, in ../shared/corpora, and
# are never copied into it (see shared/corpora/README.md).
CORPORA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "corpora"


@pytest.fixture(scope="session")
def corpora_dir() -> Path:
    """The folder holding the labelled corpora (``../shared/corpora``).

    Skips the test when it is missing, except in CI (``CI=true``), where a
    missing corpus is a failure: a green run must not hide untested code.
    """
    if not CORPORA_DIR.is_dir():
        reason = f"corpora folder {CORPORA_DIR} not found"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return CORPORA_DIR


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A SQLite URL for a database file that does not exist yet."""
    return f"sqlite:///{tmp_path / 'spamfilter.db'}"


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """A new token store on ``tmp_path``, at the current schema revision."""
    with Store.open(db_url) as opened:
        yield opened
