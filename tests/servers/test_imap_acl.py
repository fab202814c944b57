"""``imap run`` on folders the user may not fully write: a Dovecot with ACLs.

Dovecot's ACL plugin (``dovecot-acl`` files in the Maildir) takes rights
away from the owner: without ``w`` the server keeps no keyword a client
stores (and says OK); without ``s`` and ``w`` the folder cannot be
selected read-write at all. Either must stop the run with a clear error,
not be taken for a lost connection or reported as done.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from dovecot import DOVECOT_BINARY, Dovecot, ImapUser
from test_imap import PASSWORD_ENV, account_config, run

from spamfilter.errors import ImapError, ImapUnavailable
from spamfilter.filter import Filter
from spamfilter.mail import MailItem

pytestmark = pytest.mark.corpus

ACL = """
mail_plugins = $mail_plugins acl
protocol imap {
  mail_plugins = $mail_plugins imap_acl
}
plugin {
  acl = vfile
}
"""


@pytest.fixture(scope="module")
def acl_server() -> Iterator[Dovecot]:
    if not DOVECOT_BINARY.is_file():
        if os.environ.get("CI"):
            pytest.fail("dovecot-imapd is not installed")
        pytest.skip("dovecot-imapd is not installed")
    with Dovecot.start(extra_config=ACL) as server:
        yield server


@pytest.fixture(scope="module")
def mail(corpora_dir: Path) -> tuple[list[bytes], list[bytes]]:
    root = corpora_dir / "spamassassin"
    rows = [line.split() for line in (root / "index").read_text().splitlines() if line.strip()]
    random.Random(3).shuffle(rows)
    spam = [(root / p).read_bytes() for label, p in rows if label == "spam"][:60]
    ham = [(root / p).read_bytes() for label, p in rows if label == "ham"][:60]
    return spam, ham


def _user(server: Dovecot, mail: tuple[list[bytes], list[bytes]], rights: str) -> ImapUser:
    spam, ham = mail
    user = server.add_user()
    server.append(user, "INBOX", spam[50:] + ham[50:])
    server.append(user, "Junk", [])
    acl = user.maildir / "dovecot-acl"  # the INBOX's rights: the Maildir's root
    acl.write_text(f"owner {rights}\n")
    os.chown(acl, server.mail_uid, server.mail_gid)
    return user


def _trained(config: object, db: str, mail: tuple[list[bytes], list[bytes]]) -> None:
    spam, ham = mail
    with Filter.open(config, db) as f:  # type: ignore[arg-type]
        f.train([(True, MailItem(f"s{i}", m)) for i, m in enumerate(spam[:50])] + [(False, MailItem(f"h{i}", m)) for i, m in enumerate(ham[:50])])


def test_a_read_only_inbox_is_a_clear_error_not_a_lost_connection(
    acl_server: Dovecot, mail: tuple[list[bytes], list[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = _user(acl_server, mail, "lr")
    config = account_config(acl_server, user, train_spam_folder="", train_ham_folder="", retries=3)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    _trained(config, db, mail)
    pauses: list[float] = []
    with pytest.raises(ImapError, match="read-only") as info:
        run(config, db, monkeypatch, user, sleep=pauses.append)
    assert not isinstance(info.value, ImapUnavailable) and pauses == []  # not retried
    # No bytes repr (b'...') in the message; a user name may end in "b" before its quote.
    assert "INBOX" in str(info.value) and re.search(r"(?<!\w)b'", str(info.value)) is None


def test_keywords_the_server_would_not_keep_are_an_error_not_done(
    acl_server: Dovecot, mail: tuple[list[bytes], list[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = _user(acl_server, mail, "lrs")  # may select and set \Seen, not write keywords
    config = account_config(acl_server, user, train_spam_folder="", train_ham_folder="", spam_action="keyword")
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    _trained(config, db, mail)
    monkeypatch.setenv(PASSWORD_ENV, user.password)
    with pytest.raises(ImapError, match=r"does not keep the keyword \$Junk"):
        run(config, db, monkeypatch, user)
    assert not any(b"$Junk" in flags for _, _, flags in acl_server.folder_messages(user, "INBOX"))


def test_moves_go_on_where_the_folder_keeps_no_keywords(
    acl_server: Dovecot, mail: tuple[list[bytes], list[bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on a server without custom keywords: $Junk is left out, the spam still moved.
    user = _user(acl_server, mail, "lrstei")  # everything but writing flags
    config = account_config(acl_server, user, train_spam_folder="", train_ham_folder="")
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    _trained(config, db, mail)
    events: list[object] = []
    summary = run(config, db, monkeypatch, user, on_event=events.append)
    assert summary.moved == summary.spam > 0 and summary.flagged == 0
    assert len(acl_server.folder_messages(user, "Junk")) == summary.spam
    assert any(getattr(e, "kind", "") == "skipped" and "$Junk" in getattr(e, "detail", "") for e in events)
