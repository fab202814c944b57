"""Fixtures shared by the test modules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
