"""What `pip install .` puts in place: every package of the source tree."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_directory_is_installed() -> None:
    """setuptools installs the packages pyproject.toml lists, and only those:
    a subpackage left out works in an editable install and is missing from a
    real one (`import spamfilter.nb` would fail after `pip install .`)."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(tool["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "spamfilter").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
    # migrations/ goes in as spamfilter.migrations, with every revision
    assert tool["package-dir"]["spamfilter.migrations"] == "migrations"
    assert {"spamfilter.migrations", "spamfilter.migrations.versions"} <= listed
    assert listed - found == {"spamfilter.migrations", "spamfilter.migrations.versions"}
