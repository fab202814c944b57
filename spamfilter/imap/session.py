"""One IMAP connection, through imapclient, with spamfilter's errors.

``ImapSession`` wraps exactly the operations ``spamfilter imap run`` needs:
select a folder (learning its UIDVALIDITY), list UIDs, fetch messages in
bounded chunks with ``BODY.PEEK[]`` (which never sets ``\\Seen``), search by
keyword, set keywords, and move messages (RFC 6851 MOVE, else COPY, flag
``\\Deleted`` and ``UID EXPUNGE`` of exactly those messages).

Errors leave this module as ``ImapAuthError`` (login refused, never retried),
``ImapUnavailable`` (the network: refused, timed out, connection dropped; the
caller may reconnect and retry) or ``ImapError`` (the server said NO or BAD).
The password is never part of an error message or a log line.
"""

from __future__ import annotations

import imaplib
import os
import re
import socket
import ssl
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any

from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientError, LoginError, ProtocolError

from spamfilter.config import ImapAccount
from spamfilter.errors import ConfigError, ImapAuthError, ImapError, ImapUnavailable

#: The keywords mail clients (Thunderbird, Apple Mail, K-9) use for junk.
JUNK = "$Junk"
NOT_JUNK = "$NotJunk"

#: How many times a MOVE or COPY the server refuses with ``NO
#: [EXPUNGEISSUED]`` is sent in all before the refusal stops the run.
EXPUNGE_TRIES = 5


@dataclass(frozen=True, slots=True)
class Fetched:
    """One message as fetched: its UID, bytes and flags (keywords included)."""

    uid: int
    raw: bytes
    flags: frozenset[str]

    def has_keyword(self, keyword: str) -> bool:
        """Whether it carries ``keyword`` (in any case, as IMAP compares them)."""
        return keyword.lower() in {f.lower() for f in self.flags}

    def message_id(self) -> str | None:
        """Its Message-ID field, or None."""
        head = self.raw.split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0]
        for line in head.splitlines():
            if line[:11].lower() == b"message-id:":
                value = line[11:].strip().decode("ascii", "replace")
                return value or None
        return None


def with_flags(messages: Sequence[Fetched], added: Sequence[str], removed: Sequence[str]) -> list[Fetched]:
    """``messages`` with the flags they carry once ``added`` and ``removed`` are applied."""
    gone = {k.lower() for k in [*added, *removed]}
    return [replace(m, flags=frozenset({f for f in m.flags if f.lower() not in gone} | set(added))) for m in messages]


def account_password(account: ImapAccount) -> str:
    """The account's password from its environment variable or command."""
    if account.password_env:
        value = os.environ.get(account.password_env)
        if value is None:
            raise ConfigError(f"imap.{account.name}: environment variable {account.password_env} is not set")
        return value
    if account.password_command:
        try:
            done = subprocess.run(account.password_command, shell=True, capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConfigError(f"imap.{account.name}: password_command failed: {type(exc).__name__}") from None
        if done.returncode != 0:
            # Its stderr may hold anything, even the password: not shown.
            raise ConfigError(f"imap.{account.name}: password_command exited with status {done.returncode}")
        return done.stdout.decode("utf-8", "replace").rstrip("\r\n")
    raise ConfigError(f"imap.{account.name}: set password_env or password_command")


def _ssl_context(account: ImapAccount) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=account.ca_file or None)
    except (OSError, ssl.SSLError) as exc:
        # The file, not the network: a config error at once, not a server
        # "unreachable" tried again for seconds (exit 68).
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
        raise ConfigError(f"imap.{account.name}.ca_file: cannot load {account.ca_file!r}: {reason}") from None
    if not account.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _decode(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


#: UIDs named in one command at most (a FETCH of a chunk, and of the
#: sizes of the chunks ahead): 1,000 UIDs of 10 digits make an 11 KB line.
MAX_UIDS = 1000


class ImapSession:
    """A logged-in connection to one account. Use ``ImapSession.connect``."""

    def __init__(self, client: IMAPClient, account: ImapAccount) -> None:
        self.client = client
        self.account = account
        self.folder: str | None = None
        self.readonly = False
        #: The selected folder's UIDVALIDITY.
        self.uidvalidity = 0
        #: The flags the selected folder keeps (PERMANENTFLAGS; None: all).
        self.permanent: frozenset[str] | None = None

    @classmethod
    def connect(cls, account: ImapAccount, password: str) -> ImapSession:
        """Connect with the account's security setting and log in."""
        where = f"{account.host}:{account.server_port}"
        client: IMAPClient | None = None
        try:
            context = _ssl_context(account)
            client = IMAPClient(
                account.host, port=account.server_port, ssl=account.security == "tls", ssl_context=context if account.security == "tls" else None, timeout=account.timeout
            )
            if account.security == "starttls":
                client.starttls(context)
            client.login(account.username, password)
        except LoginError as exc:
            _close(client)
            said = re.search(r"\[UNAVAILABLE\][^'\"]*", str(exc), re.IGNORECASE)
            if said is not None:
                # RFC 5530: the server cannot check logins now (its user
                # database is away); the password may be right.
                raise ImapUnavailable(f"{where}: the server cannot check the login of {account.username!r} now ({said.group(0).strip()})") from None
            raise ImapAuthError(f"{where}: the server refused the login of {account.username!r} (wrong user name or password?)") from None
        except ssl.SSLCertVerificationError as exc:
            _close(client)
            raise ImapError(f"{where}: the server's certificate was not accepted: {exc.verify_message} (set ca_file, or verify = false)") from None
        except (OSError, imaplib.IMAP4.abort, ssl.SSLError) as exc:
            _close(client)
            raise ImapUnavailable(f"{where}: cannot connect: {_reason(exc)}") from None
        except (IMAPClientError, imaplib.IMAP4.error) as exc:
            _close(client)
            raise ImapError(f"{where}: {_reason(exc)}") from None
        return cls(client, account)

    def close(self) -> None:
        """Log out (quietly: the connection may already be gone)."""
        _close(self.client)

    def __enter__(self) -> ImapSession:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` with imapclient's and the socket's errors as
        ours. The untyped boundary: imapclient ships no types, so what this
        returns is Any, and each caller makes it typed values (int, bool,
        bytes) at once."""
        try:
            return fn(*args, **kwargs)
        except imaplib.IMAP4.readonly:
            # A subclass of abort, but the server answered: not a network error to retry.
            raise ImapError(f"{self.account.host}: {what}: the folder is read-only for {self.account.username!r} (imap run writes to it: flags, moves)") from None
        except (OSError, imaplib.IMAP4.abort, ssl.SSLError) as exc:
            raise ImapUnavailable(f"{self.account.host}: {what}: connection lost: {_reason(exc)}") from None
        except (IMAPClientError, imaplib.IMAP4.error) as exc:
            raise ImapError(f"{self.account.host}: {what}: {_reason(exc)}") from None

    # -- folders ------------------------------------------------------------

    def has(self, capability: str) -> bool:
        """Whether the server announces ``capability`` (e.g. "MOVE")."""
        return bool(self._call("CAPABILITY", self.client.has_capability, capability))

    def ensure_folder(self, folder: str) -> bool:
        """Create ``folder`` if it does not exist; whether it was created."""
        if self.exists(folder):
            return False
        self._call(f"CREATE {folder}", self.client.create_folder, folder)
        return True

    def separator(self) -> str | None:
        """The server's hierarchy separator (LIST "" ""), None if it has none."""
        listed = self._call("LIST", self.client.list_folders, "", "")
        return next((_decode(delimiter) for _, delimiter, _ in listed if delimiter), None)

    def check_names(self, account: ImapAccount, folders: Sequence[str]) -> None:
        """Refuse (``ConfigError``) a folder name that ends with the server's
        hierarchy separator: the server refuses to create it, and once its
        parent exists says it exists while SELECT finds nothing of that name."""
        separator = self.separator()
        for folder in folders:
            if separator and folder.endswith(separator):
                raise ConfigError(f"imap.{account.name}: folder {folder!r} ends with the server's hierarchy separator {separator!r}: name it without")

    def exists(self, folder: str) -> bool:
        """Whether ``folder`` exists: a LIST of its name that answers that
        very name (in LIST, ``%`` and ``*`` are wildcards, so "Ju*" lists
        "Junk"; INBOX in any case is the inbox)."""
        listed = self._call(f"LIST {folder}", self.client.list_folders, "", folder)
        same = (lambda name: name.upper() == "INBOX") if folder.upper() == "INBOX" else folder.__eq__
        return any(same(_decode(name)) for _, _, name in listed)

    def select(self, folder: str, *, readonly: bool = False) -> int:
        """Select ``folder`` (EXAMINE when ``readonly``); its UIDVALIDITY."""
        info = self._call(f"SELECT {folder}", self.client.select_folder, folder, readonly=readonly)
        self.folder, self.readonly = folder, readonly
        kept = info.get(b"PERMANENTFLAGS")
        self.permanent = None if kept is None else frozenset(_decode(f).lower() for f in kept)
        if b"UIDVALIDITY" not in info:
            raise ImapError(f"{self.account.host}: SELECT {folder}: the server gave no UIDVALIDITY")
        self.uidvalidity = int(info[b"UIDVALIDITY"])
        return self.uidvalidity

    # -- reading ------------------------------------------------------------

    def uids(self, *, deleted: bool = False) -> list[int]:
        """The UIDs of the selected folder's messages not marked \\Deleted
        (with ``deleted``, all of them), ascending. A mail client that moves
        by COPY and \\Deleted, and expunges later, has moved the message
        all the same: its copy left behind is not one to classify, nor one
        still in the spam folder."""
        which = "ALL" if deleted else "UNDELETED"
        return sorted(int(u) for u in self._call(f"SEARCH {which}", self.client.search, which))

    def with_keyword(self, keyword: str) -> set[int]:
        """UIDs of the selected folder's messages carrying ``keyword``."""
        return {int(u) for u in self._call(f"SEARCH KEYWORD {keyword}", self.client.search, ["KEYWORD", keyword])}

    def fetch(self, uids: Sequence[int], *, chunk_size: int, chunk_bytes: int) -> Iterator[list[Fetched]]:
        """The messages ``uids`` in chunks of at most ``chunk_size`` messages
        and (but for a single larger message) ``chunk_bytes`` bytes, so memory
        stays bounded whatever the folder's size. Messages deleted meanwhile
        are left out."""
        # The sizes of several chunks are asked at once, but of at most
        # MAX_UIDS messages: a UID list is one command line, and servers
        # refuse long ones (Dovecot's limit is 64 KiB, about 9,000 UIDs).
        step = min(chunk_size * 10, MAX_UIDS)
        for start in range(0, len(uids), step):
            part = list(uids[start : start + step])
            sizes = self._call("FETCH RFC822.SIZE", self.client.fetch, part, ["RFC822.SIZE"])
            chunk: list[int] = []
            total = 0
            for uid in part:
                if uid not in sizes:
                    continue
                size = int(sizes[uid].get(b"RFC822.SIZE", 0))
                if chunk and (len(chunk) >= chunk_size or total + size > chunk_bytes):
                    yield self._fetch_bodies(chunk)
                    chunk, total = [], 0
                chunk.append(uid)
                total += size
            if chunk:
                yield self._fetch_bodies(chunk)

    def _fetch_bodies(self, uids: list[int]) -> list[Fetched]:
        data = self._call("FETCH BODY.PEEK[]", self.client.fetch, uids, ["BODY.PEEK[]", "FLAGS"])
        out = []
        for uid in uids:
            item = data.get(uid)
            if item is None or not isinstance(item.get(b"BODY[]"), (bytes, bytearray)):
                continue  # deleted meanwhile, or the server sent NIL
            flags = frozenset(_decode(f) for f in item.get(b"FLAGS", ()))
            out.append(Fetched(uid, bytes(item[b"BODY[]"]), flags))
        return out

    # -- changing -----------------------------------------------------------

    def keeps(self, keyword: str) -> bool:
        """Whether the selected folder keeps ``keyword`` (its PERMANENTFLAGS
        name it or allow new ones, ``\\*``). A server takes a STORE of one
        it does not keep and says OK: Dovecot for a user without the ACL
        right to write flags; servers without custom keywords."""
        return self.permanent is None or "\\*" in self.permanent or keyword.lower() in self.permanent

    def set_keywords(self, uids: Sequence[int], add: Sequence[str] = (), remove: Sequence[str] = ()) -> list[int]:
        """Add and remove keywords (flags) on messages of the selected
        folder. The UIDs still there: a STORE on a message another client
        expunged meanwhile does nothing and is answered OK all the same.
        The server tells each message it changed (an untagged FETCH); only
        when some are not told is the folder asked which are left."""
        if not uids:
            return []
        told: set[int] = set()
        for what, store, keywords in (("STORE +FLAGS", self.client.add_flags, add), ("STORE -FLAGS", self.client.remove_flags, remove)):
            if keywords:
                told.update(self._stored(what, store, uids, keywords))
        if told.issuperset(uids):
            return list(uids)
        try:
            return self._still_here(uids)
        except ImapUnavailable:
            # Done, but which are left is not known: all are counted, as
            # before the server was asked; the pass after goes on from here.
            return list(uids)

    def _stored(self, what: str, store: Any, uids: Sequence[int], keywords: Sequence[str]) -> set[int]:
        """Run a STORE; the asked UIDs the server's FETCH answers name. The
        FETCH answers queued before it (a NOOP's news of other clients'
        changes, keyed by sequence number, not UID) are dropped first, so
        none is taken for an answer; an answer that cannot be read tells
        nothing (the caller asks the folder)."""
        getattr(self.client._imap, "untagged_responses", {}).pop("FETCH", None)

        def store_and_read(*args: Any, **kwargs: Any) -> Any:
            try:
                return store(*args, **kwargs)
            except (KeyError, ProtocolError):
                return None  # stored, but a FETCH answer without FLAGS, or not parsed

        return set(self._call(what, store_and_read, list(uids), list(keywords), silent=False) or {})

    def _still_here(self, uids: Sequence[int]) -> list[int]:
        """Those of ``uids`` the selected folder still holds, after taking
        the server's news of other clients' expunges."""
        self._call("NOOP", self.client.noop)
        present = {int(p) for p in self._call("UID SEARCH", self.client.search, ["UID", ",".join(map(str, uids))])}
        return [u for u in uids if u in present]

    def move(self, uids: Sequence[int], folder: str, *, use_move: bool = True) -> Moved:
        """Move messages of the selected folder to ``folder``: MOVE where the
        server has it, else COPY, ``\\Deleted`` and UID EXPUNGE of exactly
        these messages (never a plain EXPUNGE, which would remove other
        messages someone marked deleted).

        Returns the UIDs moved (not those another client expunged meanwhile)
        and their new UIDs when the server tells them (UIDPLUS COPYUID).
        """
        if not uids:
            return Moved([])
        self._copyuid()  # drop any stale answer
        if use_move and self.has("MOVE"):
            return self._moved(self._present_after(f"MOVE to {folder}", self.client.move, uids, folder))
        if not self.has("UIDPLUS"):
            raise ImapError(f'{self.account.host}: the server has neither MOVE nor UIDPLUS, so messages cannot be moved safely; set spam_action = "keyword"')
        moved = self._moved(self._present_after(f"COPY to {folder}", self.client.copy, uids, folder))
        if moved.done:
            self.expunge(moved.done)
        return moved

    def _moved(self, done: list[int]) -> Moved:
        """``Moved`` for the ``done`` UIDs, with the server's COPYUID answer if any."""
        told = self._copyuid() if done else None
        return Moved(done) if told is None else Moved(done, *told)

    def _present_after(self, what: str, fn: Any, uids: Sequence[int], folder: str) -> list[int]:
        """Run a MOVE or COPY of ``uids``; when the server refuses it because
        some of them were expunged meanwhile by another client (``NO
        [EXPUNGEISSUED]``, RFC 5530: nothing was done), take the server's
        news of the expunges and run it again for those still there, up to
        ``EXPUNGE_TRIES`` times in all (a client that keeps expunging, as a
        busy mail client emptying a folder does, can be met more than once);
        then the refusal stands. The UIDs it was done for."""
        still = list(uids)
        tries = 0
        while True:
            tries += 1
            try:
                self._call(what, fn, still, folder)
                return still
            except ImapError as exc:
                if "EXPUNGEISSUED" not in str(exc).upper():
                    raise
                if tries >= EXPUNGE_TRIES:
                    raise ImapError(f"{exc} (refused {tries} times in a row: other clients kept expunging messages of {self.folder}; these were left there)") from None
            still = self._still_here(still)
            if not still:
                return []
            self._copyuid()

    def expunge(self, uids: Sequence[int]) -> None:
        """Flag ``\\Deleted`` and UID EXPUNGE exactly these messages."""
        self._call("STORE +FLAGS \\Deleted", self.client.add_flags, list(uids), [b"\\Deleted"], silent=True)
        self._call("UID EXPUNGE", self.client.uid_expunge, list(uids))

    def _copyuid(self) -> tuple[int, dict[int, int]] | None:
        # imaplib keeps response codes such as [COPYUID v src dst] among its
        # untagged responses; take (and so clear) the last one.
        answers = getattr(self.client._imap, "untagged_responses", {}).pop("COPYUID", None)
        if not answers:
            return None
        try:
            validity, source, target = _decode(answers[-1]).split()
            pairs = dict(zip(_uid_set(source), _uid_set(target), strict=True))
        except ValueError:
            return None
        return int(validity), pairs

    def search_message_id(self, message_id: str) -> list[int]:
        """UIDs in the selected folder whose Message-ID header contains ``message_id``."""
        return sorted(int(u) for u in self._call("SEARCH HEADER", self.client.search, ["HEADER", "Message-ID", message_id]))


@dataclass(frozen=True, slots=True)
class Moved:
    """The server's account of a move: the UIDs moved (``done``: those
    another client expunged meanwhile are left out) and, when the server
    told them (UIDPLUS COPYUID), the target folder's UIDVALIDITY and each
    moved message's new UID (old UID -> new UID)."""

    done: list[int]
    uidvalidity: int | None = None
    uids: dict[int, int] = field(default_factory=dict)


def _uid_set(text: str) -> list[int]:
    """``"4,7:9"`` -> [4, 7, 8, 9] (a UIDPLUS uid-set, in its order)."""
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition(":")
        a, b = int(low), int(high or low)
        out.extend(range(a, b + 1) if a <= b else range(a, b - 1, -1))
    return out


def _close(client: IMAPClient | None) -> None:
    if client is None:
        return
    try:
        client.logout()
    except Exception:  # noqa: BLE001 - already broken; nothing to tell
        try:
            client.shutdown()
        except Exception:  # noqa: BLE001
            pass


def _reason(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc.args[0]) if exc.args else type(exc).__name__
    if len(text) > 2 and text[:2] in ("b'", 'b"') and text[-1] == text[1]:
        text = text[2:-1]
    return text or type(exc).__name__
