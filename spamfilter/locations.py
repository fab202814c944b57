"""Where spamfilter keeps its files by default, and how it makes folders.

The config file is ``$SPAMFILTER_CONFIG``, else
``$XDG_CONFIG_HOME/spamfilter/config.toml``; the database ``$SPAMFILTER_DB``,
else the SQLite file ``$XDG_DATA_HOME/spamfilter/spamfilter.db``, whose
folders are created owner-only on first use. ``spamfilter serve
--user-socket`` listens on ``$XDG_RUNTIME_DIR/spamfilter/spamd.sock``, where
``spamfilter filter`` looks for it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def default_config_path() -> Path | None:
    """``$SPAMFILTER_CONFIG``, else ``$XDG_CONFIG_HOME/spamfilter/config.toml``
    (``~/.config`` when unset); None when neither is set and the user has no
    home directory (no ``$HOME`` and no password entry: a container, ``env -i``)."""
    explicit = os.environ.get("SPAMFILTER_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or _in_home(".config")
    return None if base is None else Path(base) / "spamfilter" / "config.toml"


def _in_home(*parts: str) -> str | None:
    """``~/parts``, or None when the user's home cannot be told."""
    try:
        return str(Path.home().joinpath(*parts))
    except (RuntimeError, KeyError, OSError):
        return None


def environment_db_url() -> str | None:
    """``$SPAMFILTER_DB``, or None when it is unset or empty."""
    return os.environ.get("SPAMFILTER_DB") or None


def default_location_url() -> str | None:
    """The SQLite file in the user's data directory (its folders are created
    on first use, unlike those of a database named by the user); None when
    there is no such directory (`default_config_path`)."""
    base = os.environ.get("XDG_DATA_HOME") or _in_home(".local", "share")
    return None if base is None else "sqlite:///" + str(Path(base) / "spamfilter" / "spamfilter.db")


def make_private_dirs(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents owner-only (0700), whatever
    the umask, as the XDG base directory spec asks: under umask 000 they
    were 0777, and anyone could replace the 0600 database or the config
    inside. Folders that exist are left as they are. Returns the folders
    it created, outermost first. Raises ``OSError``."""
    created: list[Path] = []
    missing: list[Path] = []
    while not folder.exists() and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    for new in reversed(missing):
        try:
            # Created 0700 less the umask (never more open), then made 0700.
            os.mkdir(new, 0o700)
        except FileExistsError:
            continue  # another process made it meanwhile, the same way
        created.append(new)
        os.chmod(new, 0o700)
    return created


def not_a_folder(path: Path) -> str | None:
    """ "F is not a folder" when F, the nearest of ``path``'s folders that
    exists, is a file (a regular file, a device), so that ``path`` cannot
    be created (ENOTDIR, "Not a directory"; not a missing folder, not a
    permission); None otherwise."""
    for folder in path.parents:
        try:
            mode = os.stat(folder).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            return None
        return None if stat.S_ISDIR(mode) else f"{folder} is not a folder"
    return None


def default_socket_path() -> Path | None:
    """``$XDG_RUNTIME_DIR/spamfilter/spamd.sock``: the per-user socket of
    ``serve --user-socket``, which ``filter`` asks first; None without
    ``$XDG_RUNTIME_DIR`` (a folder only its user can enter, per the XDG
    base directory spec: no other user can put a socket there)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "spamfilter" / "spamd.sock" if runtime else None
