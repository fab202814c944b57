"""Editing a config file line by line (``spamfilter tune --write``): each
``[section] key`` set in place, comments, order and line ends kept, the
result validated before it replaces the file."""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from spamfilter.config import Config, config_from_dict
from spamfilter.errors import ConfigError, OutputError
from spamfilter.locations import make_private_dirs, not_a_folder


def update_config_file(path: Path, changes: dict[tuple[str, str], object]) -> None:
    """Set ``[section] key = value`` in a TOML config file, keeping its
    comments and other lines; creates the file (and its folder) if missing.
    The result is validated before it replaces the old file. A link is
    followed (the file it names is changed), and the file keeps its mode
    (a new one is 0600). Raises ``ConfigError``."""
    path = _config_target(path)
    text, _ = _with_changes(path, _raw_text(path), changes)
    try:
        make_private_dirs(path.parent)
        mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o600
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {not_a_folder(path) or exc.strerror or exc}") from None


def check_config_writable(path: Path, keys: Sequence[tuple[str, str]]) -> None:
    """Raise now if `update_config_file` could not set these keys in
    ``path``: ``OutputError`` when the file cannot be written (a part of
    its path is a file, it is not a regular file, no permission),
    ``ConfigError`` when its layout (dotted keys, inline tables) is not one
    the line editor can change. Each key is rewritten with the value it
    has, which must leave every setting as it is."""
    path = _config_target(path)
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if (why := not_a_folder(path)) is not None:
        raise OutputError(f"cannot write {path}: {why}")
    if path.exists() and not path.is_file():
        raise OutputError(f"cannot write {path}: not a regular file")
    if (path.exists() and not os.access(path, os.W_OK)) or not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {path}: permission denied")
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    try:
        before = config_from_dict(tomllib.loads(text), origin=str(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    current = {(section, key): getattr(getattr(before, section), key) for section, key in keys}
    # A key not set (the cutoffs, None by default) is rehearsed with a value
    # of its own: its section must take a new line too.
    rehearsed = {k: _REHEARSAL[k] for k, v in current.items() if v is None and k in _REHEARSAL}
    _, after = _with_changes(path, text, {k: v for k, v in current.items() if v is not None} | rehearsed)
    expected = before
    for (section, key), value in rehearsed.items():
        expected = replace(expected, **{section: replace(getattr(expected, section), **{key: value})})
    if after != expected:
        raise ConfigError(f"{path}: its layout cannot be edited line by line; write the settings as `key = value` lines under [section] headers")


#: Values that ``check_config_writable`` writes, in rehearsal, for keys not set.
_REHEARSAL: dict[tuple[str, str], object] = {("decision", "ham_cutoff"): 0.25, ("decision", "spam_cutoff"): 0.75}


def _raw_text(path: Path) -> str:
    """``path``'s text with its line ends as they are ("" for no file)."""
    if not path.exists():
        return ""
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


def _config_target(path: Path) -> Path:
    """The file a config path names: a link's target, followed."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


_SECTION_RE = re.compile(r"\s*\[\s*([A-Za-z0-9_-]+)\s*\]\s*(?:#.*)?")


def _with_changes(path: Path, text: str, changes: dict[tuple[str, str], object]) -> tuple[str, Config]:
    """``text`` with each ``[section] key`` set, and the configuration it
    gives (so it is validated). Every line keeps its own line end; a line
    added takes the one most lines have. Raises ``ConfigError``."""
    lines = text.splitlines(keepends=True)
    crlf = sum(line.endswith("\r\n") for line in lines)
    eol = "\r\n" if crlf > len(lines) - crlf else "\n"
    if lines and lines[-1] == lines[-1].rstrip("\r\n"):
        lines[-1] += eol
    for (section, key), value in changes.items():
        rendered = f"{key} = {_toml_value(value)}"
        start = next((i for i, line in enumerate(lines) if (m := _SECTION_RE.fullmatch(line.rstrip("\r\n"))) and m.group(1) == section), None)
        if start is None:
            lines += [eol, f"[{section}]{eol}", rendered + eol]
            continue
        end = next((i for i in range(start + 1, len(lines)) if lines[i].strip().startswith("[")), len(lines))
        for i in range(start + 1, end):
            content = lines[i].rstrip("\r\n")
            if content.split("=", 1)[0].strip() == key and not content.lstrip().startswith("#"):
                lines[i] = rendered + _inline_comment(content) + lines[i][len(content) :]
                break
        else:
            lines.insert(end if end == len(lines) else end - (1 if not lines[end - 1].strip() else 0), rendered + eol)
    new = "".join(lines)
    try:
        return new, config_from_dict(tomllib.loads(new), origin=str(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: would become invalid TOML: {exc}") from None


def _inline_comment(line: str) -> str:
    """The comment after a ``key = value`` line's value, with the space
    before it ("   # laplace"), or "": the first "#" after which what
    precedes it parses as a TOML value (a "#" inside a string does not)."""
    rest = line.partition("=")[2]
    for at, char in enumerate(rest):
        if char != "#":
            continue
        try:
            tomllib.loads("v = " + rest[:at])
        except tomllib.TOMLDecodeError:
            continue
        return rest[len(rest[:at].rstrip()) :]
    return ""


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(float(value)) if isinstance(value, float) else str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
