"""A private Postfix on loopback for the milter tests: its own configuration,
queue and Maildirs in a folder of its own, SMTP on free loopback ports, each
port with the milter it names, delivery by virtual(8) into
``mail/<user>/``. Needs Debian's ``postfix`` and root (Postfix's master
runs as root and its daemons as the ``postfix`` user)."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from dovecot import _descendants, _terminate

POSTFIX = shutil.which("postfix") or ("/usr/sbin/postfix" if os.path.exists("/usr/sbin/postfix") else None)

#: Delivery is by virtual(8) as this uid and gid (nobody), into mail/<user>/.
_MAIL_ID = 65534

_MAIN_CF = """\
compatibility_level = 3.6
queue_directory = {root}/queue
data_directory = {root}/data
maillog_file = {root}/postfix.log
maillog_file_prefixes = {root}
mail_owner = postfix
myhostname = mx.example.test
mydomain = example.test
myorigin = example.test
mydestination =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
alias_maps =
alias_database =
local_recipient_maps =
relayhost =
biff = no
non_smtpd_milters =
milter_default_action = accept
virtual_mailbox_domains = example.test
virtual_mailbox_base = {root}/mail
virtual_mailbox_maps = inline:{{ {boxes} }}
virtual_uid_maps = static:{uid}
virtual_gid_maps = static:{uid}
"""

#: The services a message passes through, none chrooted (nothing is copied
#: into the queue folder).
_SERVICES = """\
pickup    unix  n - n 60 1 pickup
cleanup   unix  n - n -  0 cleanup
qmgr      unix  n - n 300 1 qmgr
rewrite   unix  - - n -  - trivial-rewrite
bounce    unix  - - n -  0 bounce
defer     unix  - - n -  0 bounce
trace     unix  - - n -  0 bounce
verify    unix  - - n -  1 verify
proxymap  unix  - - n -  - proxymap
smtp      unix  - - n -  - smtp
showq     unix  n - n -  - showq
error     unix  - - n -  - error
retry     unix  - - n -  - error
discard   unix  - - n -  - discard
virtual   unix  - n n -  - virtual
anvil     unix  - - n -  1 anvil
scache    unix  - - n -  1 scache
postlog   unix-dgram n - n - 1 postlogd
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Postfix:
    """A running private Postfix. ``smtpd`` maps each SMTP port to the
    milter (``inet:HOST:PORT``) its smtpd uses; ``users`` get a Maildir;
    ``header_checks``: the text of a regexp header_checks table."""

    def __init__(self, smtpd: dict[int, str], users: list[str], hang: float, header_checks: str = "") -> None:
        assert POSTFIX is not None
        self.hang = hang
        self.root = Path(tempfile.mkdtemp(prefix="spamfilter-postfix-"))
        # virtual(8) runs as nobody and has to reach the Maildirs.
        self.root.chmod(0o755)
        for sub in ("etc", "queue", "data", "mail"):
            (self.root / sub).mkdir()
        os.chown(self.root / "data", pwd.getpwnam("postfix").pw_uid, -1)
        os.chown(self.root / "mail", _MAIL_ID, _MAIL_ID)
        boxes = ", ".join(f"{u}@example.test={u}/" for u in users)
        main = _MAIN_CF.format(root=self.root, boxes=boxes, uid=_MAIL_ID)
        if header_checks:
            # A regexp table, as docs/integration.md shows it.
            (self.root / "etc" / "header_checks").write_text(header_checks)
            main += f"header_checks = regexp:{self.root}/etc/header_checks\n"
        (self.root / "etc" / "main.cf").write_text(main)
        listeners = "".join(f"127.0.0.1:{port} inet n - n - - smtpd -o smtpd_milters={m}\n" for port, m in smtpd.items())
        (self.root / "etc" / "master.cf").write_text(listeners + _SERVICES)
        self.ports = list(smtpd)
        self._postfix("start")
        self._wait_for_ports()

    def _postfix(self, command: str) -> None:
        assert POSTFIX is not None
        r = subprocess.run([POSTFIX, "-c", str(self.root / "etc"), command], capture_output=True, timeout=self.hang)
        if r.returncode != 0:
            raise AssertionError(f"postfix {command} failed: {r.stderr.decode(errors='replace')}\n{self.log()}")

    def _wait_for_ports(self) -> None:
        deadline = time.monotonic() + self.hang
        for port in self.ports:
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise AssertionError(f"Postfix did not listen on {port}: {self.log()}") from None
                    time.sleep(0.1)

    def log(self) -> str:
        path = self.root / "postfix.log"
        return path.read_text(errors="replace") if path.exists() else "(no log)"

    def delivered(self, user: str, count: int) -> list[bytes]:
        """The messages in ``user``'s Maildir, once there are ``count`` of them."""
        new = self.root / "mail" / user / "new"
        deadline = time.monotonic() + self.hang
        while len(files := sorted(new.glob("*")) if new.is_dir() else []) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(files)} of {count} messages delivered to {user}: {self.log()}")
            time.sleep(0.1)
        return [f.read_bytes() for f in files]

    def stop(self) -> None:
        """Stop Postfix (its master and every daemon, killed if they
        linger) and remove its folder."""
        pid_file = self.root / "queue" / "pid" / "master.pid"
        pids: list[int] = []
        if pid_file.exists():
            master = int(pid_file.read_text().strip())
            pids = [master, *_descendants(master)]
        try:
            self._postfix("stop")
        except (AssertionError, subprocess.TimeoutExpired):
            pass
        _terminate(pids)
        shutil.rmtree(self.root, ignore_errors=True)
