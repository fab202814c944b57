"""The package's import layers (STYLE.md section 2), checked with ``ast``.

1. cli imports service, maintenance, evaluation, reports, config, errors (and
   its own modules), never store, model or SQLAlchemy.
2. service / maintenance / evaluation / reports import the leaf modules.
3. Leaf modules import only errors and config from the package, never each
   other; model does no I/O and imports no SQLAlchemy; only store imports
   SQLAlchemy.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "spamfilter"
LEAVES = {"mail", "tokenizer", "vectorizer", "model", "store", "imap", "cache"}
BASE = {"errors", "config", "counts"}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every module name imported by the file (absolute names)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def top(name: str) -> str | None:
    """'spamfilter.tokenizer.mime' -> 'tokenizer'; None outside the package."""
    parts = name.split(".")
    return parts[1] if parts[0] == "spamfilter" and len(parts) > 1 else None


FILES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: module_name(p))
def test_module_imports_respect_the_layers(path: Path) -> None:
    name = module_name(path)
    layer = top(name) or "__init__"
    used = {top(i) for i in imports(path)} - {None, layer}
    used = {u for u in used if u in LEAVES | BASE | {"service", "maintenance", "evaluation", "reports", "cli", "imap"}}
    if layer in LEAVES:
        assert used <= BASE, f"{name} imports {sorted(used - BASE)}"
    if layer in BASE:
        assert used <= BASE, f"{name} imports {sorted(used - BASE)}"
    if layer == "cli":
        assert not used & {"store", "model"}, f"{name} imports {sorted(used & {'store', 'model'})}"
        assert not any(i.startswith("sqlalchemy") for i in imports(path)), name


@pytest.mark.parametrize("path", FILES, ids=lambda p: module_name(p))
def test_only_the_store_speaks_sql(path: Path) -> None:
    if module_name(path) == "spamfilter.store":
        return
    assert not any(i == "sqlalchemy" or i.startswith("sqlalchemy.") for i in imports(path)), module_name(path)


def test_the_model_does_no_io() -> None:
    used = imports(PACKAGE / "model.py")
    assert not {"os", "io", "pathlib", "open", "sqlite3", "sqlalchemy"} & used
