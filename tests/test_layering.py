"""The package's import layers (STYLE.md section 2), checked with ``ast``.

Every module of the package (each ``.py`` file and each subpackage directly
under ``spamfilter/``) has a row in `ALLOWED`: the package modules it may
import. A module without a row fails, so a new module has to be placed in a
layer before it can go in. From the bottom up:

0. ``errors``; ``locations`` (the default paths; nothing); ``config``
   (errors and locations); ``verdicts`` (the names of the
   classes and verdicts; nothing, not even numpy); ``counts`` (the count
   types that cross from store to model; verdicts only); ``headers`` (the header fields the
   filter writes, which mail and tokenizer both know; nothing); ``retry``
   (trying a busy transaction again; errors only).
1. Leaves: ``mail``, ``tokenizer``, ``vectorizer``, ``nb`` (the naive Bayes
   mathematics: model, decision, gaussian, aode, the one scorer, the
   in-memory counts, the learning rule, calibration; no I/O), ``store`` (the only module that
   imports SQLAlchemy), ``spamd`` (the spamd protocol, standard library
   only, so that ``filter --connect`` starts fast), ``answers`` (what the
   filter answers: verdicts, refusals, training summaries, stats) import
   only the base, never each other.
2. ``analysis`` (reading mail, here or in worker processes) over mail,
   tokenizer, vectorizer and answers; ``filter`` (the library API: the
   model read into memory, its verdicts, the writes, online learning, the
   one-dependence counts) over them, store and nb; ``tools`` (evaluation, tuning, insight, the report and its
   plots, maintenance) over filter; ``imap`` (the session, what a run
   remembers, the run) over filter; ``daemon`` (the spamd server and the
   milter: their sockets, protocols, open filters and processes) over
   filter, tools (explain, for REPORT) and spamd.
3. ``cli`` over everything but ``store`` and ``nb``; ``__main__`` runs cli.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "spamfilter"

BASE = frozenset({"errors", "locations", "config", "counts", "headers", "verdicts"})
LEAVES = frozenset({"mail", "tokenizer", "vectorizer", "nb", "store", "spamd", "answers"})
_FILTER = BASE | {"mail", "tokenizer", "vectorizer", "nb", "store", "analysis", "answers", "retry"}

#: module -> the package modules it may import ("__init__" is the package itself).
ALLOWED: dict[str, frozenset[str]] = {
    "__init__": frozenset(),
    "errors": frozenset(),
    "locations": frozenset(),
    "config": frozenset({"errors", "locations"}),
    # The names of the classes and verdicts, plain Python (no numpy).
    "verdicts": frozenset(),
    "counts": frozenset({"verdicts"}),
    "headers": frozenset(),
    # How the filter tries a busy or raced transaction again.
    "retry": frozenset({"errors"}),
    **{leaf: BASE for leaf in LEAVES},
    "analysis": BASE | {"mail", "tokenizer", "vectorizer", "answers"},
    "filter": _FILTER,
    # Over filter: evaluation, tuning, insight, the report and its plots,
    # maintenance; filter never uses them.
    "tools": _FILTER | {"filter"},
    # The IMAP session, what a run remembers (through the store) and the run.
    "imap": _FILTER | {"filter"},
    "daemon": _FILTER | {"filter", "tools", "spamd"},
    "cli": BASE | {"mail", "filter", "answers", "tools", "imap", "daemon", "spamd"},
    "__main__": frozenset({"cli"}),
}

#: Modules that may not import SQLAlchemy, or anything doing I/O.
SQL_MODULES = frozenset({"store"})
_IO = frozenset({"os", "io", "pathlib", "sqlite3", "sqlalchemy", "shutil", "socket"})
NO_IO = {"nb": _IO}


def imports(path: Path) -> set[str]:
    """Every module name imported by the file (absolute names), also inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                raise AssertionError(f"{path}: relative import of {node.module!r}; the package uses absolute ones")
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def package_module(name: str, modules: set[str]) -> str | None:
    """'spamfilter.tokenizer.mime' -> 'tokenizer'; 'spamfilter' or a name the
    package itself defines ('spamfilter.__version__') -> '__init__'; None
    outside the package."""
    parts = name.split(".")
    if parts[0] != "spamfilter":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in modules else "__init__"


def top_level_modules(package: Path) -> dict[str, list[Path]]:
    """Each module directly under the package with the files that make it up."""
    modules: dict[str, list[Path]] = {}
    for entry in sorted(package.iterdir()):
        if entry.is_file() and entry.suffix == ".py":
            modules[entry.stem] = [entry]
        elif entry.is_dir() and (entry / "__init__.py").is_file():
            modules[entry.name] = sorted(entry.rglob("*.py"))
    return modules


def violations(package: Path) -> list[str]:
    """Every import in the package at `package` that breaks the layers, one line each."""
    problems: list[str] = []
    modules = top_level_modules(package)
    for module, files in modules.items():
        allowed = ALLOWED.get(module)
        if allowed is None:
            problems.append(f"{module}: in no layer; add it to ALLOWED in tests/test_layering.py")
            continue
        for path in files:
            names = imports(path)
            # The package's __init__ holds only the version, and imports
            # nothing (its own row), so any module may use it.
            used = {package_module(n, set(modules)) for n in names} - {None, module, "__init__"}
            for bad in sorted(u for u in used - allowed if u is not None):
                problems.append(f"{path.relative_to(package.parent)}: {module} may not import {bad}")
            if module not in SQL_MODULES and any(n == "sqlalchemy" or n.startswith("sqlalchemy.") for n in names):
                problems.append(f"{path.relative_to(package.parent)}: only store speaks SQL")
            for bad in sorted(NO_IO.get(module, frozenset()) & {n.split(".")[0] for n in names}):
                problems.append(f"{path.relative_to(package.parent)}: {module} does no I/O, imports {bad}")
    return problems


def test_every_module_respects_the_layers() -> None:
    assert violations(PACKAGE) == []


def test_every_layer_rule_names_a_known_module() -> None:
    # maintenance is placed before it exists; every other row names a module.
    known = set(top_level_modules(PACKAGE)) | {"maintenance"}
    assert set(ALLOWED) <= known
    for allowed in ALLOWED.values():
        assert allowed <= known


def _copy_package(tmp_path: Path) -> Path:
    copy = tmp_path / "spamfilter"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert violations(copy) == []
    return copy


@pytest.mark.parametrize(
    ("module", "line", "expected"),
    [
        ("nb/model.py", "from spamfilter import imap, tools", "nb may not import imap"),
        ("nb/scorer.py", "from spamfilter.tools.report import render", "nb may not import tools"),
        ("nb/model.py", "import os", "nb does no I/O, imports os"),
        ("tools/plots.py", "from spamfilter.daemon.pool import FilterPool", "tools may not import daemon"),
        ("mail/parse.py", "from spamfilter import tokenizer", "mail may not import tokenizer"),
        ("filter/core.py", "from spamfilter.tools.evaluation import run_online", "filter may not import tools"),
        ("filter/scoring.py", "from spamfilter.imap.sync import run_account", "filter may not import imap"),
        ("tools/report.py", "from spamfilter.imap.sync import run_account", "tools may not import imap"),
        ("tools/evaluation.py", "import sqlalchemy as sa", "only store speaks SQL"),
        ("tokenizer/mime.py", "from spamfilter.store import Store", "tokenizer may not import store"),
        ("cli/train.py", "from spamfilter.store import Store", "cli may not import store"),
        ("cli/db.py", "from spamfilter.nb import model", "cli may not import nb"),
        ("imap/sync.py", "from spamfilter.tools.evaluation import run_online", "imap may not import tools"),
    ],
)
def test_a_forbidden_import_in_a_copy_of_the_package_is_caught(tmp_path: Path, module: str, line: str, expected: str) -> None:
    copy = _copy_package(tmp_path)
    target = copy / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    found = violations(copy)
    assert any(expected in problem for problem in found), found


def test_a_module_in_no_layer_is_caught(tmp_path: Path) -> None:
    copy = _copy_package(tmp_path)
    (copy / "newthing.py").write_text('"""Not yet placed in a layer."""\n', encoding="utf-8")
    assert violations(copy) == ["newthing: in no layer; add it to ALLOWED in tests/test_layering.py"]


def test_the_tools_may_use_the_filter_but_not_the_daemons(tmp_path: Path) -> None:
    copy = _copy_package(tmp_path)
    target = copy / "tools" / "maintenance.py"
    target.write_text("from spamfilter.filter import Filter\nfrom spamfilter.store import Store\n", encoding="utf-8")
    assert violations(copy) == []
    with target.open("a", encoding="utf-8") as f:
        f.write("from spamfilter.daemon.server import Server\n")
    assert violations(copy) == [f"{Path('spamfilter', 'tools', 'maintenance.py')}: tools may not import daemon"]
