"""A private Dovecot IMAP server for tests.

``Dovecot.start()`` writes a configuration into a fresh directory under
``/tmp``, makes a self-signed certificate for ``localhost``, starts
``/usr/sbin/dovecot`` on two free loopback ports (plain/STARTTLS and implicit
TLS) and waits until it accepts connections. ``stop()`` ends the master and
every process it started, then removes the directory.

Test modules get a started server from the session fixture::

    from dovecot import dovecot_server  # noqa: F401

    def test_something(dovecot_server: Dovecot) -> None:
        user = dovecot_server.add_user()
        ...

(``tests`` has no ``__init__.py``, so pytest puts ``tests/`` itself on
``sys.path`` and this module imports as ``dovecot``.)

Mail processes may not run as root, so when the tests run as root the mail
is owned by ``nobody:nogroup`` (65534); otherwise by the current user.
"""

from __future__ import annotations

import grp
import itertools
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import pytest
from imapclient import IMAPClient, imap_utf7

DOVECOT_BINARY = Path("/usr/sbin/dovecot")
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
# Mail uid/gid when running as root: nobody/nogroup.
ROOT_MAIL_UID = 65534
ROOT_MAIL_GID = 65534

_CONFIG_TEMPLATE = """\
base_dir = {workdir}/run
state_dir = {workdir}/state
log_path = {log_path}
info_log_path = {log_path}
protocols = imap
listen = 127.0.0.1
ssl = yes
ssl_cert = <{cert}
ssl_key = <{key}
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_failure_delay = 0
first_valid_uid = {first_valid_uid}
mail_location = maildir:~/Maildir
default_login_user = {login_user}
default_internal_user = {internal_user}
{internal_group}namespace inbox {{
  inbox = yes
  separator = /
}}
service imap-login {{
  # No chroot: a non-root master cannot chroot, and tests gain nothing.
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {tls_port}
    ssl = yes
  }}
}}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {passwd_dir}/%u
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={workdir}/home/%u
}}
protocol imap {{
  mail_max_userip_connections = 100
}}
# No auth penalty: after a failed login, anvil would delay every later
# login from 127.0.0.1 by 2 s and more. The auth process cannot open a
# socket of mode 0, so it runs without penalty tracking.
service anvil {{
  chroot =
  unix_listener anvil-auth-penalty {{
    mode = 0
  }}
}}
"""


@dataclass(frozen=True)
class ImapUser:
    """A mail account on the test server."""

    name: str
    password: str
    maildir: Path


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1.

    All sockets are held open together so the kernel hands out distinct
    ports; they are closed before returning (a small race is unavoidable).
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaps counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state follows the parenthesised command name.
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _terminate(pids: list[int]) -> None:
    """SIGTERM ``pids``; SIGKILL those still there after STOP_TIMEOUT."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            if _process_alive(pid):
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline and any(map(_process_alive, pids)):
            time.sleep(0.02)
        if not any(map(_process_alive, pids)):
            return


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc (empty if /proc is missing)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[-1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _maildir_folder_name(folder: str) -> str:
    """The Maildir++ directory name of an IMAP folder ("" for INBOX).

    The namespace separator is "/", stored on disk as "."; names are kept in
    modified UTF-7 as Dovecot does.
    """
    if folder.upper() == "INBOX":
        return ""
    if not folder or "." in folder or folder.startswith("/") or folder.endswith("/"):
        raise ValueError(f"unsupported folder name for a Maildir++ layout: {folder!r}")
    encoded = imap_utf7.encode(folder)
    name = encoded.decode("ascii") if isinstance(encoded, bytes) else str(encoded)
    return "." + name.replace("/", ".")


class Dovecot:
    """A running private Dovecot instance (see the module docstring)."""

    host: str = "127.0.0.1"

    def __init__(self, workdir: Path, port: int, tls_port: int, mail_uid: int, mail_gid: int, remove_workdir: bool, extra_config: str = "") -> None:
        self.workdir = workdir
        self.port = port
        self.tls_port = tls_port
        self.mail_uid = mail_uid
        self.mail_gid = mail_gid
        self.config_path = workdir / "dovecot.conf"
        self.ca_file = workdir / "cert.pem"
        self.key_file = workdir / "key.pem"
        self.log_path = workdir / "dovecot.log"
        self.passwd_dir = workdir / "passwd.d"
        self.home_root = workdir / "home"
        self.pid_path = workdir / "run" / "master.pid"
        self._remove_workdir = remove_workdir
        self._extra_config = extra_config
        self._pid: int | None = None
        self._counter = itertools.count(1)
        self._maildir_seq = itertools.count(1)

    # -- lifecycle ---------------------------------------------------------

    @classmethod
    def start(cls, workdir: Path | None = None, extra_config: str = "") -> Dovecot:
        """Start a server; its files go in ``workdir``.

        ``extra_config`` is appended to the configuration (e.g. plugins and
        their settings); ``{workdir}`` in it stands for the server's folder.

        Without ``workdir`` a fresh ``/tmp/spamfilter-dovecot-*`` directory
        (mode 0755) is made and removed again by ``stop()``. A given
        ``workdir`` is kept; it and its parents must be traversable by the
        mail uid (pytest's ``tmp_path`` is not: it is 0700).
        """
        if not DOVECOT_BINARY.is_file():
            raise RuntimeError("dovecot-imapd is not installed")
        if shutil.which("openssl") is None:
            raise RuntimeError("openssl is not installed")

        if os.geteuid() == 0:
            mail_uid, mail_gid = ROOT_MAIL_UID, ROOT_MAIL_GID
        else:
            mail_uid, mail_gid = os.getuid(), os.getgid()

        attempts = 3
        for attempt in range(1, attempts + 1):
            remove = workdir is None
            if workdir is None:
                tmp_root = "/tmp" if Path("/tmp").is_dir() else None
                directory = Path(tempfile.mkdtemp(prefix="spamfilter-dovecot-", dir=tmp_root))
            else:
                directory = workdir
                directory.mkdir(parents=True, exist_ok=True)
            directory = directory.resolve()
            directory.chmod(0o755)

            port, tls_port = _free_ports(2)
            server = cls(directory, port, tls_port, mail_uid, mail_gid, remove, extra_config)
            try:
                server._check_traversable()
                server._prepare()
                server._launch()
            except RuntimeError as error:
                server.stop()
                # Another process may take a port between _free_ports()
                # and Dovecot binding it: try again with new ports.
                if "Address already in use" in str(error) and attempt < attempts:
                    continue
                raise
            except BaseException:
                server.stop()
                raise
            return server
        raise AssertionError("unreachable")

    def _check_traversable(self) -> None:
        if os.geteuid() != 0:
            return
        for directory in [self.workdir, *self.workdir.parents]:
            mode = directory.stat().st_mode
            if not mode & 0o001:
                raise RuntimeError(f"{directory} is not traversable by uid {self.mail_uid}; start Dovecot without a workdir to use a fresh /tmp directory")

    def _prepare(self) -> None:
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                str(self.key_file),
                "-out",
                str(self.ca_file),
                "-days",
                "2",
                "-subj",
                "/CN=localhost",
                "-addext",
                "subjectAltName=DNS:localhost,IP:127.0.0.1",
            ],
            check=True,
            capture_output=True,
        )
        self.key_file.chmod(0o600)
        self.passwd_dir.mkdir(mode=0o755, exist_ok=True)
        self.home_root.mkdir(mode=0o755, exist_ok=True)
        self.home_root.chmod(0o755)

        if os.geteuid() == 0:
            login_user, internal_user = "dovenull", "dovecot"
            internal_group = ""
            first_valid_uid = 100
        else:
            # Everything runs as the current user, who cannot chown the
            # sockets to the "dovecot" group either.
            login_user = internal_user = pwd.getpwuid(os.getuid()).pw_name
            group = grp.getgrgid(os.getgid()).gr_name
            internal_group = f"default_internal_group = {group}\n"
            first_valid_uid = os.getuid()
        self.config_path.write_text(
            _CONFIG_TEMPLATE.format(
                workdir=self.workdir,
                log_path=self.log_path,
                cert=self.ca_file,
                key=self.key_file,
                passwd_dir=self.passwd_dir,
                port=self.port,
                tls_port=self.tls_port,
                uid=self.mail_uid,
                gid=self.mail_gid,
                first_valid_uid=first_valid_uid,
                login_user=login_user,
                internal_user=internal_user,
                internal_group=internal_group,
            )
            + self._extra_config.replace("{workdir}", str(self.workdir))
        )

    def _launch(self) -> None:
        # Not pipes: the daemonized master inherits them and would keep them
        # open, so waiting for their end would never return.
        output_path = self.workdir / "dovecot-start.out"
        with output_path.open("wb") as output:
            result = subprocess.run(
                [str(DOVECOT_BINARY), "-c", str(self.config_path)], stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, timeout=START_TIMEOUT
            )
        if result.returncode != 0:
            raise RuntimeError(f"dovecot failed to start (exit {result.returncode}):\n{output_path.read_text(errors='replace')}\n{self.log_tail()}")
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._pid is None and self.pid_path.is_file():
                text = self.pid_path.read_text().strip()
                if text.isdigit():
                    self._pid = int(text)
            if self._pid is not None and _port_open(self.host, self.port):
                return
            if self._pid is not None and not _process_alive(self._pid):
                break
            time.sleep(0.05)
        raise RuntimeError(f"dovecot did not accept connections on {self.host}:{self.port} within {START_TIMEOUT:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the Dovecot log ("" if there is none)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the master and its children; remove a workdir made by start()."""
        pid = self._pid
        if pid is None and self.pid_path.is_file():
            text = self.pid_path.read_text().strip()
            pid = int(text) if text.isdigit() else None
        if pid is not None and _process_alive(pid):
            # Children found now: once the master is gone they belong to
            # init and mail processes linger ~10 s before noticing.
            children = _descendants(pid)
            _terminate([pid])
            _terminate(children)
        self._pid = None
        if self._remove_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self._remove_workdir = False

    def __enter__(self) -> Dovecot:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- users -------------------------------------------------------------

    def add_user(self, name: str | None = None, password: str = "secret") -> ImapUser:
        """Add an account (a unique name when ``name`` is None).

        The account can log in as soon as this returns.
        """
        if name is None:
            name = f"u{next(self._counter)}{secrets.token_hex(4)}"
        if name in (".", "..") or any(ch in name for ch in ":/\\ \t\n\r\0%"):
            raise ValueError(f"unusable user name: {name!r}")
        if name != name.lower():
            # auth_username_format defaults to %Lu: Dovecot looks up "bob".
            raise ValueError(f"user names must be lower case: {name!r}")
        if not password or any(ch in password for ch in ":\n\r\0"):
            raise ValueError(f"unusable password: {password!r}")
        # One passwd-file per user, written atomically. Dovecot stats a
        # passwd-file at most once per second, so users appended to one
        # shared file would stay unknown for up to a second; a file nobody
        # has looked up yet is read at the first login.
        path = self.passwd_dir / name
        if path.exists():
            raise ValueError(f"user {name!r} exists already")
        tmp_path = self.passwd_dir / f".{name}.tmp"
        tmp_path.write_text(f"{name}:{{PLAIN}}{password}\n")
        tmp_path.chmod(0o644)
        os.rename(tmp_path, path)

        home = self.home_root / name
        home.mkdir(mode=0o700, exist_ok=True)
        self._chown(home)
        return ImapUser(name=name, password=password, maildir=home / "Maildir")

    # -- IMAP access -------------------------------------------------------

    def client(self, user: ImapUser, folder: str | None = None) -> IMAPClient:
        """A client logged in as ``user`` over the plain port (no TLS).

        With ``folder`` it is also selected (read-write). Log out when done,
        or use it as a context manager.
        """
        imap = IMAPClient(self.host, port=self.port, ssl=False, timeout=30)
        try:
            imap.login(user.name, user.password)
            if folder is not None:
                imap.select_folder(folder)
        except BaseException:
            imap.shutdown()
            raise
        return imap

    def append(self, user: ImapUser, folder: str, messages: Sequence[bytes], flags: Sequence[str | bytes] = ()) -> None:
        """APPEND ``messages`` to ``folder`` (created when missing)."""
        imap = self.client(user)
        try:
            if folder.upper() != "INBOX" and not imap.folder_exists(folder):
                imap.create_folder(folder)
            for message in messages:
                imap.append(folder, message, flags=tuple(flags))
        finally:
            imap.logout()

    def folder_messages(self, user: ImapUser, folder: str) -> list[tuple[int, bytes, tuple[bytes, ...]]]:
        """(uid, raw message, flags) of every message in ``folder``, by uid.

        The folder is examined read-only, so \\Seen is not set; the
        session-specific \\Recent flag is left out.
        """
        imap = self.client(user)
        try:
            imap.select_folder(folder, readonly=True)
            uids = sorted(int(uid) for uid in imap.search("ALL"))
            fetched: dict[int, dict[bytes, object]] = {}
            # imapclient 4 keeps only the ids it asked for ("1:*" gives
            # nothing); batches keep the command line short.
            for start in range(0, len(uids), 1000):
                fetched.update(imap.fetch(uids[start : start + 1000], ["BODY.PEEK[]", "FLAGS"]))
        finally:
            imap.logout()
        result: list[tuple[int, bytes, tuple[bytes, ...]]] = []
        for uid in uids:
            data = fetched[uid]
            raw = data[b"BODY[]"]
            flag_values = data[b"FLAGS"]
            assert isinstance(raw, bytes) and isinstance(flag_values, tuple)
            flags = tuple(bytes(flag) for flag in flag_values if flag != b"\\Recent")
            result.append((uid, raw, flags))
        return result

    # -- direct Maildir access -----------------------------------------------

    def fill_maildir(self, user: ImapUser, folder: str, messages: Iterable[bytes]) -> int:
        """Write ``messages`` straight into ``folder``'s Maildir ``new/``.

        Much faster than APPEND for bulk setup (thousands of messages in a
        second or two); Dovecot picks them up at the next SELECT/STATUS.
        Returns the number of messages written.
        """
        root = user.maildir
        folder_dir = root / _maildir_folder_name(folder)
        created: list[Path] = []
        for directory in (user.maildir.parent, root, folder_dir):
            if not directory.is_dir():
                directory.mkdir(mode=0o700)
                created.append(directory)
        for base in {root, folder_dir}:
            for sub in ("cur", "new", "tmp"):
                directory = base / sub
                if not directory.is_dir():
                    directory.mkdir(mode=0o700)
                    created.append(directory)
        if folder_dir != root and not (folder_dir / "maildirfolder").exists():
            (folder_dir / "maildirfolder").touch(mode=0o600)
            created.append(folder_dir / "maildirfolder")

        tmp_dir, new_dir = folder_dir / "tmp", folder_dir / "new"
        stamp, pid = int(time.time()), os.getpid()
        prefix = secrets.token_hex(4)
        count = 0
        chown = os.geteuid() == 0
        for message in messages:
            name = f"{stamp}.M{next(self._maildir_seq)}P{pid}R{prefix}.spamfilter-test,S={len(message)}"
            tmp_path = tmp_dir / name
            fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                _write_all(fd, message)
                if chown:
                    os.fchown(fd, self.mail_uid, self.mail_gid)
            finally:
                os.close(fd)
            os.rename(tmp_path, new_dir / name)
            count += 1
        for path in created:
            self._chown(path)
        return count

    def _chown(self, path: Path) -> None:
        if os.geteuid() == 0:
            os.chown(path, self.mail_uid, self.mail_gid)


@pytest.fixture(scope="session")
def dovecot_server() -> Iterator[Dovecot]:
    """A private Dovecot server for the whole session, stopped at the end.

    Skips when Dovecot is not installed, except in CI (``CI`` set), where
    that is a failure.
    """
    if not DOVECOT_BINARY.is_file():
        reason = "dovecot-imapd is not installed"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    with Dovecot.start() as server:
        yield server
