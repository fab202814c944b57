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
def empty_db_url(db_url: str) -> str:
    """A SQLite URL for a database with the schema and nothing trained
    (commands that only read refuse a database that does not exist)."""
    Store.open(db_url).close()
    return db_url


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """A new token store on ``tmp_path``, at the current schema revision."""
    with Store.open(db_url) as opened:
        yield opened


# -- PostgreSQL --------------------------------------------------------------

#: A server where the tests may create a database (trust auth on this machine).
POSTGRES_ADMIN_URL = os.environ.get("SPAMFILTER_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a database created for this test session on the PostgreSQL
    server, dropped at the end. Fails in CI if the server cannot be reached
    (elsewhere the test is skipped)."""
    import secrets

    import sqlalchemy as sa

    admin = sa.create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"spamfilter_test_{os.getpid()}_{secrets.token_hex(3)}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as exc:
        admin.dispose()
        reason = f"PostgreSQL at {POSTGRES_ADMIN_URL} is unreachable: {exc.orig}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    url = sa.engine.make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def fresh_postgres_url(postgres_url: str) -> str:
    """The session's PostgreSQL database, emptied (a new public schema)."""
    import sqlalchemy as sa

    engine = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text("DROP SCHEMA public CASCADE"))
        conn.execute(sa.text("CREATE SCHEMA public"))
    engine.dispose()
    return postgres_url


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty database on each backend in turn."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'spamfilter.db'}"
    return str(request.getfixturevalue("fresh_postgres_url"))


# -- the generated sample mail -------------------------------------------------


@pytest.fixture(scope="session")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated sample mail (corpora/make_sample.py), once per session.
    Read only: tests that change mail copy it first."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("sample")
    script = Path(__file__).resolve().parents[1] / "corpora" / "make_sample.py"
    subprocess.run([sys.executable, str(script), "--out", str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def sample_db(sample: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite database trained on the sample's training mailboxes through
    the command line, once per session. Read only."""
    from typer.testing import CliRunner

    from spamfilter.cli import app

    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'sample.db'}"
    result = CliRunner().invoke(app, ["--db", url, "train", "--spam", str(sample / "train-spam.mbox"), "--ham", str(sample / "train-ham.mbox")])
    assert result.exit_code == 0, result.output
    return url
