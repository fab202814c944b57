"""``spamfilter imap run`` against a real Dovecot on loopback (tests/dovecot.py).

Every scenario gets its own IMAP user and its own SQLite database; mail comes
from ../shared/corpora/spamassassin. Nothing of the IMAP protocol is mocked.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import sqlalchemy as sa
from dovecot import Dovecot, ImapUser, dovecot_server  # noqa: F401

from spamfilter.config import Config, ImapAccount, config_from_dict
from spamfilter.errors import ConfigError, ImapAuthError, ImapError, ImapUnavailable, StoreBusyError
from spamfilter.filter import Filter
from spamfilter.imap.session import ImapSession
from spamfilter.imap.summary import Event, RunSummary
from spamfilter.imap.sync import run_account
from spamfilter.mail import MailItem, digest_bytes, former_digest
from spamfilter.store import Store

pytestmark = pytest.mark.corpus

PASSWORD_ENV = "SPAMFILTER_TEST_IMAP_PASSWORD"
HANG = 60.0  # seconds: only to turn a hang into a failure


@dataclass(frozen=True)
class Sample:
    train_spam: list[bytes]
    train_ham: list[bytes]
    inbox_spam: list[bytes]
    inbox_ham: list[bytes]

    @property
    def inbox(self) -> list[bytes]:
        return self.inbox_spam + self.inbox_ham


@pytest.fixture(scope="module")
def sample(corpora_dir: Path) -> Sample:
    root = corpora_dir / "spamassassin"
    rows = [line.split() for line in (root / "index").read_text().splitlines() if line.strip()]
    random.Random(7).shuffle(rows)
    spam = [(root / p).read_bytes() for label, p in rows if label == "spam"][:110]
    ham = [(root / p).read_bytes() for label, p in rows if label == "ham"][:200]
    # Distinct messages only: the corpus has a few exact duplicates.
    spam = list({digest_bytes(m): m for m in spam}.values())
    ham = list({digest_bytes(m): m for m in ham}.values())
    return Sample(spam[:80], ham[:140], spam[80:105], ham[140:190])


def account_config(server: Dovecot, user: ImapUser, **overrides: object) -> Config:
    table: dict[str, object] = {
        "host": server.host,
        "port": server.tls_port,
        "security": "tls",
        "ca_file": str(server.ca_file),
        "username": user.name,
        "password_env": PASSWORD_ENV,
        "train_spam_folder": "Train/Spam",
        "train_ham_folder": "Train/Ham",
        "chunk_size": 20,
        "retries": 0,
    }
    table.update(overrides)
    return config_from_dict({"imap": {"test": table}})


def setup_mailbox(server: Dovecot, sample: Sample) -> ImapUser:
    user = server.add_user()
    server.append(user, "Train/Spam", sample.train_spam)
    server.append(user, "Train/Ham", sample.train_ham)
    server.append(user, "INBOX", sample.inbox)
    return user


def run(config: Config, db: str, monkeypatch: pytest.MonkeyPatch, user: ImapUser, **kwargs: object) -> RunSummary:
    monkeypatch.setenv(PASSWORD_ENV, user.password)
    with Filter.open(config, db) as f:
        return run_account(f, config.imap[0], **kwargs)  # type: ignore[arg-type]


def digests(server: Dovecot, user: ImapUser, folder: str) -> Counter[str]:
    return Counter(digest_bytes(raw) for _, raw, _ in server.folder_messages(user, folder))


def snapshot(server: Dovecot, user: ImapUser, folders: list[str]) -> dict[str, list[tuple[int, str, tuple[bytes, ...]]]]:
    return {f: [(uid, digest_bytes(raw), tuple(sorted(flags))) for uid, raw, flags in server.folder_messages(user, f)] for f in folders}


FOLDERS = ["INBOX", "Junk", "Train/Spam", "Train/Ham"]


def test_classify_and_move_from_training_folders(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = setup_mailbox(dovecot_server, sample)
    config = account_config(dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    summary = run(config, db, monkeypatch, user)

    assert summary.trained_spam == len(sample.train_spam)
    assert summary.trained_ham == len(sample.train_ham)
    assert summary.classified == len(sample.inbox)
    assert summary.created == ["Junk"]
    junk = digests(dovecot_server, user, "Junk")
    inbox = digests(dovecot_server, user, "INBOX")
    spam = {digest_bytes(m) for m in sample.inbox_spam}
    ham = {digest_bytes(m) for m in sample.inbox_ham}
    assert summary.moved == summary.spam == sum(junk.values())
    # Every message once, in one of the two folders.
    assert sum(junk.values()) + sum(inbox.values()) == len(sample.inbox)
    assert set(junk) | set(inbox) == spam | ham
    # Exactly the messages the library calls spam with the same training.
    with Filter.open(Config(), "sqlite://") as reference:
        reference.train([(True, m) for m in _items(sample.train_spam)] + [(False, m) for m in _items(sample.train_ham)])
        expected = {v.digest for v in reference.classify(_items(sample.inbox)) if getattr(v, "verdict", "") == "spam"}
    assert set(junk) == expected
    # With this small training set: most spam caught, at most 2 of 50 ham lost.
    assert len(set(junk) & spam) >= 0.8 * len(spam)
    assert len(set(junk) & ham) <= 2
    # The spam carries $Junk; nothing was marked \Seen by the filter.
    for folder in FOLDERS:
        for _, _, flags in dovecot_server.folder_messages(user, folder):
            assert b"\\Seen" not in flags
            assert (b"$Junk" in flags) == (folder == "Junk")
    # Training folders are left as they were ("leave" is the default).
    assert sum(digests(dovecot_server, user, "Train/Spam").values()) == len(sample.train_spam)
    with Filter.open(config, db) as f:
        stats = f.stats()
    assert (stats.spam_messages, stats.ham_messages) == (len(sample.train_spam), len(sample.train_ham))

    # A second run finds nothing to do and changes nothing.
    before = snapshot(dovecot_server, user, FOLDERS)
    again = run(config, db, monkeypatch, user)
    assert (again.classified, again.moved, again.flagged, again.trained_spam, again.trained_ham) == (0, 0, 0, 0, 0)
    assert snapshot(dovecot_server, user, FOLDERS) == before


def test_each_message_is_digested_once(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import spamfilter.imap.sync
    import spamfilter.mail

    hashed: Counter[bytes] = Counter()

    def counting(raw: bytes) -> str:
        hashed[raw] += 1
        return digest_bytes(raw)

    monkeypatch.setattr(spamfilter.imap.sync, "digest_bytes", counting)
    monkeypatch.setattr(spamfilter.mail, "digest_bytes", counting)
    user = setup_mailbox(dovecot_server, sample)
    summary = run(account_config(dovecot_server, user), f"sqlite:///{tmp_path / 'sf.db'}", monkeypatch, user)
    assert summary.moved > 0
    everything = sample.train_spam + sample.train_ham + sample.inbox
    # The server stores the messages with CRLF line ends: count, not compare, them.
    assert sorted(hashed.values()) == [1] * len(everything)


def test_learns_from_what_the_user_moves(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = setup_mailbox(dovecot_server, sample)
    config = account_config(dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    run(config, db, monkeypatch, user)

    # The user drags one message from the inbox to Junk, and one back.
    inbox = dovecot_server.folder_messages(user, "INBOX")
    junk = dovecot_server.folder_messages(user, "Junk")
    to_junk_uid, to_junk_raw, _ = inbox[0]
    back_uid, back_raw, _ = junk[0]
    with dovecot_server.client(user, "INBOX") as c:
        c.move([to_junk_uid], "Junk")
        c.select_folder("Junk")
        c.move([back_uid], "INBOX")

    summary = run(config, db, monkeypatch, user)
    assert (summary.trained_spam, summary.trained_ham, summary.classified, summary.moved) == (1, 1, 0, 0)
    with Filter.open(config, db) as f, f.store.begin(write=False) as tx:
        labels = tx.trained_labels([digest_bytes(to_junk_raw), digest_bytes(back_raw)])
    assert labels == {digest_bytes(to_junk_raw): 1, digest_bytes(back_raw): 0}
    # The message moved back stays in the inbox, now marked $NotJunk.
    flags = {digest_bytes(raw): fl for _, raw, fl in dovecot_server.folder_messages(user, "INBOX")}
    assert b"$NotJunk" in flags[digest_bytes(back_raw)] and b"$Junk" not in flags[digest_bytes(back_raw)]
    assert digest_bytes(to_junk_raw) in digests(dovecot_server, user, "Junk")

    # The user changes their mind: back to Junk; the training follows.
    with dovecot_server.client(user, "INBOX") as c:
        uid = next(u for u, raw, _ in dovecot_server.folder_messages(user, "INBOX") if digest_bytes(raw) == digest_bytes(back_raw))
        c.move([uid], "Junk")
    summary = run(config, db, monkeypatch, user)
    assert (summary.trained_spam, summary.trained_ham) == (1, 0)
    with Filter.open(config, db) as f, f.store.begin(write=False) as tx:
        assert tx.trained_labels([digest_bytes(back_raw)]) == {digest_bytes(back_raw): 1}
        assert f.stats().spam_messages == len(sample.train_spam) + 2

    quiet = run(config, db, monkeypatch, user)
    assert (quiet.trained_spam, quiet.trained_ham, quiet.moved, quiet.flagged) == (0, 0, 0, 0)


def _one_run_and_its_first_spam(server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ImapUser, Config, str, tuple[int, bytes]]:
    """A mailbox after one run: its user, config, database, and the UID and
    bytes of the first message the run filed in Junk."""
    user = setup_mailbox(server, sample)
    config = account_config(server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    run(config, db, monkeypatch, user)
    uid, raw, _ = server.folder_messages(user, "Junk")[0]
    return user, config, db, (uid, raw)


def test_a_dry_run_sees_a_message_moved_back_from_junk_as_the_run_does(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The dry run did not drop the moved message's UID from Junk, so it took
    # the message back in the inbox for new mail and said it would file it
    # in Junk again; the run learns it as ham and leaves it.
    user, config, db, (uid, raw) = _one_run_and_its_first_spam(dovecot_server, sample, tmp_path, monkeypatch)
    with dovecot_server.client(user, "Junk") as c:
        c.move([uid], "INBOX")

    def said(dry_run: bool) -> tuple[list[tuple[str, str]], tuple[int, int, int]]:
        events: list[Event] = []
        summary = run(config, db, monkeypatch, user, dry_run=dry_run, on_event=events.append)
        return [(e.kind, e.detail) for e in events if e.kind in ("trained", "moved", "classified")], (summary.trained_ham, summary.classified, summary.moved)

    dry = said(True)
    assert dry == ([("trained", "ham (moved back to INBOX)")], (1, 0, 0))
    assert said(False) == dry
    assert digest_bytes(raw) in digests(dovecot_server, user, "INBOX")


def test_a_dry_run_counts_the_training_the_run_does(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The dry run counted every message of the training folders; the run
    # counts what training changes: not a message the model holds with
    # that label already, nor a second copy of one.
    user = dovecot_server.add_user()
    spam, ham = sample.train_spam[:6], sample.train_ham[:6]
    dovecot_server.append(user, "Train/Spam", [*spam, spam[0], spam[1]])  # two copies
    dovecot_server.append(user, "Train/Ham", [*ham, spam[5]])  # a spam filed as ham here
    config = account_config(dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    with Filter.open(config, db) as f:
        f.train([(True, MailItem("s", raw)) for raw in spam[:3]] + [(False, MailItem("h", raw)) for raw in ham[:2]])

    def said(dry_run: bool) -> tuple[list[str], tuple[int, int]]:
        events: list[Event] = []
        summary = run(config, db, monkeypatch, user, dry_run=dry_run, on_event=events.append)
        return sorted(e.detail for e in events if e.kind == "trained"), (summary.trained_spam, summary.trained_ham)

    dry = said(True)
    # spam: 3 new of 8 (3 held, 2 copies); ham: 4 new of 6 and the spam relabelled
    assert dry[1] == (3, 5)
    assert sum("trained so already" in detail for detail in dry[0]) == 3 + 2 + 2
    assert said(False) == dry


def test_a_store_from_before_annotations_left_digests_still_knows_the_moves(
    dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Mail that carries mailbox annotations (as Thunderbird leaves on mail
    # it copies to an IMAP folder): a store written before they were left
    # out of digests holds its records under the former digests, and the
    # move back out of Junk was taken for new mail and filed again.
    def annotated(raw: bytes) -> bytes:
        return b"X-Mozilla-Status: 0001\r\nX-Mozilla-Status2: 00000000\r\n" + raw

    user = dovecot_server.add_user()
    dovecot_server.append(user, "Train/Spam", sample.train_spam)
    dovecot_server.append(user, "Train/Ham", sample.train_ham)
    dovecot_server.append(user, "INBOX", [annotated(m) for m in sample.inbox])
    config = account_config(dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    run(config, db, monkeypatch, user)
    renamed = 0
    with Filter.open(config, db) as f, f.store.engine.begin() as conn:
        for folder in ("INBOX", "Junk"):
            for _, raw, _ in dovecot_server.folder_messages(user, folder):
                old, new = former_digest(raw), digest_bytes(raw)
                assert old is not None
                for table in ("messages", "imap_messages", "imap_uids"):
                    renamed += conn.execute(sa.text(f"UPDATE {table} SET digest = :old WHERE digest = :new"), {"old": old, "new": new}).rowcount
    assert renamed >= len(sample.inbox)
    back_uid, back_raw, _ = dovecot_server.folder_messages(user, "Junk")[0]
    with dovecot_server.client(user, "Junk") as c:
        c.move([back_uid], "INBOX")
    summary = run(config, db, monkeypatch, user)
    assert (summary.trained_spam, summary.trained_ham, summary.classified, summary.moved) == (0, 1, 0, 0)
    assert digest_bytes(back_raw) in digests(dovecot_server, user, "INBOX")
    with Filter.open(config, db) as f, f.store.begin(write=False) as tx:
        assert tx.trained_labels([digest_bytes(back_raw)]) == {digest_bytes(back_raw): 0}


def test_a_move_back_by_copy_and_deleted_is_learned_as_ham(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Mail clients that move by COPY, then \Deleted on the original, and
    # expunge later: the copy left in Junk, flagged \Deleted, counted as
    # still there, so the one in the inbox was taken for a second copy of
    # filed spam and filed to Junk again, nothing learned.
    user, config, db, (back_uid, back_raw) = _one_run_and_its_first_spam(dovecot_server, sample, tmp_path, monkeypatch)
    with dovecot_server.client(user, "Junk") as c:
        c.copy([back_uid], "INBOX")
        c.add_flags([back_uid], [b"\\Deleted"])
    summary = run(config, db, monkeypatch, user)
    assert (summary.trained_spam, summary.trained_ham, summary.classified, summary.moved) == (0, 1, 0, 0)
    with Filter.open(config, db) as f, f.store.begin(write=False) as tx:
        assert tx.trained_labels([digest_bytes(back_raw)]) == {digest_bytes(back_raw): 0}
    assert digest_bytes(back_raw) in digests(dovecot_server, user, "INBOX")


def test_keyword_mode_and_the_users_keywords(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = setup_mailbox(dovecot_server, sample)
    config = account_config(dovecot_server, user, spam_action="keyword")
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    summary = run(config, db, monkeypatch, user)
    assert summary.moved == 0 and summary.spam > 0
    inbox = dovecot_server.folder_messages(user, "INBOX")
    assert len(inbox) == len(sample.inbox)
    flagged = [(uid, raw) for uid, raw, fl in inbox if b"$Junk" in fl]
    clean = [(uid, raw) for uid, raw, fl in inbox if b"$Junk" not in fl]
    assert len(flagged) == summary.spam

    # The mail client marks one spam "not junk" and one ham "junk".
    with dovecot_server.client(user, "INBOX") as c:
        c.remove_flags([flagged[0][0]], ["$Junk"])
        c.add_flags([flagged[0][0]], ["$NotJunk"])
        c.add_flags([clean[0][0]], ["$Junk"])
    summary = run(config, db, monkeypatch, user)
    assert (summary.trained_ham, summary.trained_spam, summary.moved) == (1, 1, 0)
    with Filter.open(config, db) as f, f.store.begin(write=False) as tx:
        labels = tx.trained_labels([digest_bytes(flagged[0][1]), digest_bytes(clean[0][1])])
    assert labels == {digest_bytes(flagged[0][1]): 0, digest_bytes(clean[0][1]): 1}
    quiet = run(config, db, monkeypatch, user)
    assert (quiet.trained_spam, quiet.trained_ham, quiet.flagged) == (0, 0, 0)


def test_trained_messages_can_be_filed(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = dovecot_server.add_user()
    dovecot_server.append(user, "Train/Spam", sample.train_spam[:30])
    dovecot_server.append(user, "Train/Ham", sample.train_ham[:40])
    dovecot_server.append(user, "INBOX", sample.inbox_ham[:5])
    config = account_config(dovecot_server, user, trained_action="move")
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    summary = run(config, db, monkeypatch, user)
    assert (summary.trained_spam, summary.trained_ham) == (30, 40)
    # Trained ham is filed in the inbox but not classified as if it were new,
    # nor counted new again there (nor trained spam in Junk).
    assert summary.classified == 5 and summary.seen == 30 + 40 + 5
    assert sum(digests(dovecot_server, user, "Train/Spam").values()) == 0
    assert sum(digests(dovecot_server, user, "Train/Ham").values()) == 0
    junk = digests(dovecot_server, user, "Junk")
    inbox = digests(dovecot_server, user, "INBOX")
    assert {digest_bytes(m) for m in sample.train_spam[:30]} <= set(junk)
    assert {digest_bytes(m) for m in sample.train_ham[:40]} <= set(inbox)
    assert sum(junk.values()) == 30 + summary.spam and sum(inbox.values()) == 45 - summary.spam
    quiet = run(config, db, monkeypatch, user)
    assert (quiet.classified, quiet.moved, quiet.trained_spam, quiet.trained_ham) == (0, 0, 0, 0)


def test_a_training_message_that_is_not_mail_is_neither_filed_nor_recorded_as_trained(
    dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was refused, yet said to be "trained", filed in Junk and recorded
    # as trained from the training folder.
    user = dovecot_server.add_user()
    junk = bytes(range(256)) * 40  # binary: refused as not mail
    dovecot_server.append(user, "Train/Spam", [*sample.train_spam[:20], junk])
    dovecot_server.append(user, "Train/Ham", sample.train_ham[:30])
    config = account_config(dovecot_server, user, trained_action="move")
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    events: list[Event] = []
    # A dry run says what the run will do: it said "would be trained" of it.
    dry = run(config, db, monkeypatch, user, dry_run=True, on_event=events.append)
    assert (dry.trained_spam, dry.trained_ham, dry.errors) == (20, 30, 1)
    [refused] = [e for e in events if e.kind == "refused"]
    assert refused.folder == "Train/Spam" and refused.uid == 21 and refused.detail.startswith("not a mail message (no header block")
    events.clear()
    summary = run(config, db, monkeypatch, user, on_event=events.append)
    assert (summary.trained_spam, summary.trained_ham, summary.errors) == (20, 30, 1)
    assert [(e.folder, e.uid, e.detail) for e in events if e.kind == "refused"] == [(refused.folder, refused.uid, refused.detail)]
    assert sum(e.kind == "trained" and e.folder == "Train/Spam" for e in events) == 20
    [(_, stored, _)] = dovecot_server.folder_messages(user, "Train/Spam")  # as the server keeps it
    assert len(digests(dovecot_server, user, "Junk")) == 20
    with Filter.open(config, db) as f, f.store.begin(write=False) as tx:
        assert tx.trained_labels([digest_bytes(stored)]) == {}
        assert tx.imap.records("test", [digest_bytes(stored)]) == {}
    quiet = run(config, db, monkeypatch, user)  # and not read again
    assert (quiet.trained_spam, quiet.errors, quiet.seen) == (0, 0, 0)


def test_what_the_run_refuses_is_named_on_stderr_without_verbose(dovecot_server: Dovecot, sample: Sample, tmp_path: Path) -> None:
    # Counted in "errors 2" and never read again, it was named nowhere.
    user = dovecot_server.add_user()
    dovecot_server.append(user, "Train/Spam", [*sample.train_spam[:5], bytes(range(256)) * 40])
    dovecot_server.append(user, "Train/Ham", sample.train_ham[:5])
    dovecot_server.append(user, "INBOX", [sample.inbox_ham[0], b"\x00\x01\x02\x03" * 1000])
    config = write_config(tmp_path / "c.toml", dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    done = subprocess.run(spamfilter_cmd(config, db), env=env_with(user.password), capture_output=True, text=True, timeout=120)
    assert done.returncode == 65, done.stderr
    skipped = [line for line in done.stderr.splitlines() if line.startswith("spamfilter: skipped ")]
    assert skipped == [
        "spamfilter: skipped Train/Spam uid 6: not a mail message (no header block, and its first 4096 bytes look binary: "
        "464 control bytes, 2032 bytes above 0x7F; compressed mail must be decompressed first)",
        "spamfilter: skipped INBOX uid 2: not a mail message (no header block, 3000 of the first 4000 bytes are control bytes)",
    ], done.stderr
    assert "errors 2" in done.stdout


def test_a_folder_to_classify_that_the_server_lacks_is_an_error_not_created(dovecot_server: Dovecot, sample: Sample, tmp_path: Path) -> None:
    # Created, a misspelt name filtered nothing and the run said "errors 0".
    user = setup_mailbox(dovecot_server, sample)
    config = write_config(tmp_path / "c.toml", dovecot_server, user, classify_folders=["INBOX", "Inobx"])
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    for dry in ([], ["--dry-run"]):
        done = subprocess.run(spamfilter_cmd(config, db, *dry), env=env_with(user.password), capture_output=True, text=True, timeout=120)
        assert done.returncode == 78, done.stderr
        assert done.stderr == "spamfilter: imap.test.classify_folders: the server has no folder 'Inobx' (a folder to classify is never created)\n"
    with dovecot_server.client(user, "INBOX") as c:
        assert not c.folder_exists("Inobx")


def test_the_inbox_copy_of_spam_copied_to_the_training_folder_is_filed(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Copied (not moved) to Train/Spam before the run had classified the
    # inbox: the inbox copy was taken for one the user had moved there
    # from another folder, and left unfiled for good.
    user = setup_mailbox(dovecot_server, sample)
    copied = sample.inbox_spam[0]
    dovecot_server.append(user, "Train/Spam", [copied])
    config = account_config(dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    summary = run(config, db, monkeypatch, user)
    assert summary.trained_spam == len(sample.train_spam) + 1
    assert digest_bytes(copied) in digests(dovecot_server, user, "Junk")
    assert digest_bytes(copied) not in digests(dovecot_server, user, "INBOX")


def test_ham_taught_through_the_ham_training_folder_and_moved_back_stays_in_the_inbox(
    dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The way to mend a false positive through the training folders: Junk ->
    # Train/Ham (trained ham) -> INBOX. It must stay there, not be
    # classified again and filed to Junk (while trained as ham).
    user, config, db, (uid, raw) = _one_run_and_its_first_spam(dovecot_server, sample, tmp_path, monkeypatch)
    with dovecot_server.client(user, "Junk") as c:
        c.move([uid], "Train/Ham")
    taught = run(config, db, monkeypatch, user)
    assert taught.trained_ham == 1 and trained_labels(config, db, [digest_bytes(raw)]) == {digest_bytes(raw): 0}
    uid = next(u for u, r, _ in dovecot_server.folder_messages(user, "Train/Ham") if digest_bytes(r) == digest_bytes(raw))
    with dovecot_server.client(user, "Train/Ham") as c:
        c.move([uid], "INBOX")
    back = run(config, db, monkeypatch, user)
    assert (back.classified, back.moved, back.trained_spam, back.trained_ham) == (0, 0, 0, 0)
    assert digest_bytes(raw) in digests(dovecot_server, user, "INBOX") and digest_bytes(raw) not in digests(dovecot_server, user, "Junk")


def test_a_copy_and_deleted_move_broken_before_its_expunge_is_finished(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its originals are marked \Deleted, which the next pass no longer
    # counts as mail in the folder: it took the moves for done and left them
    # marked, shown in the inbox by clients that show deleted mail.
    user = setup_mailbox(dovecot_server, sample)
    config = account_config(dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    real = ImapSession.expunge
    broken = []

    def store_then_break(self: ImapSession, uids: Sequence[int]) -> None:
        if not broken and self.folder == "INBOX":
            broken.append(list(uids))
            self._call("STORE +FLAGS \\Deleted", self.client.add_flags, list(uids), [b"\\Deleted"], silent=True)
            raise ImapUnavailable("connection lost (test)")
        real(self, uids)

    monkeypatch.setattr(ImapSession, "expunge", store_then_break)
    with pytest.raises(ImapUnavailable):
        run(config, db, monkeypatch, user, use_move=False)
    assert broken and broken[0]
    monkeypatch.setattr(ImapSession, "expunge", real)
    run(config, db, monkeypatch, user, use_move=False)
    inbox = dovecot_server.folder_messages(user, "INBOX")
    assert not [u for u, _, flags in inbox if b"\\Deleted" in flags]
    assert len(inbox) + len(dovecot_server.folder_messages(user, "Junk")) == len(sample.inbox)


def test_copy_fallback_expunges_only_the_moved_messages(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = setup_mailbox(dovecot_server, sample)
    # Someone else's message, flagged \Deleted but not expunged, must survive.
    bystander = b"From: a@example.org\r\nSubject: keep me\r\nMessage-ID: <keep@example.org>\r\n\r\nnot expunged by us\r\n"
    dovecot_server.append(user, "INBOX", [bystander], flags=["\\Deleted"])
    config = account_config(dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    summary = run(config, db, monkeypatch, user, use_move=False)
    assert summary.moved == summary.spam > 0
    inbox = digests(dovecot_server, user, "INBOX")
    junk = digests(dovecot_server, user, "Junk")
    assert digest_bytes(bystander) in inbox
    assert sum(inbox.values()) + sum(junk.values()) == len(sample.inbox) + 1
    assert max(junk.values()) == 1 and max(inbox.values()) == 1


def test_uidvalidity_change_rereads_without_retraining(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = setup_mailbox(dovecot_server, sample)
    config = account_config(dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    first = run(config, db, monkeypatch, user)
    with dovecot_server.client(user) as c:
        before = c.select_folder("INBOX")[b"UIDVALIDITY"]
    # Dovecot renumbers a Maildir whose uid list and index are gone.
    for name in os.listdir(user.maildir):
        if name.startswith("dovecot-uidlist") or name.startswith("dovecot.index"):
            os.remove(user.maildir / name)
    with dovecot_server.client(user) as c:
        assert c.select_folder("INBOX")[b"UIDVALIDITY"] != before
    again = run(config, db, monkeypatch, user)
    assert again.seen == first.ham + first.unsure  # the inbox is read again ...
    assert (again.classified, again.moved, again.trained_spam, again.trained_ham) == (0, 0, 0, 0)  # ... and nothing else


def test_a_keyword_set_before_the_folder_was_renumbered_is_still_learned(
    dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The keywords seen were kept by UID only: renumbered, the folder's
    # messages were recorded with the keywords they had then, and a $Junk
    # the user had set since the last run was taken as seen, never learned.
    user = setup_mailbox(dovecot_server, sample)
    config = account_config(dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    run(config, db, monkeypatch, user)
    uid, raw, _ = dovecot_server.folder_messages(user, "INBOX")[0]
    with dovecot_server.client(user, "INBOX") as c:
        c.add_flags([uid], ["$Junk"])
    for name in os.listdir(user.maildir):  # Dovecot renumbers a Maildir whose uid list and index are gone
        if name.startswith("dovecot-uidlist") or name.startswith("dovecot.index"):
            os.remove(user.maildir / name)
    again = run(config, db, monkeypatch, user)
    assert (again.classified, again.trained_spam, again.trained_ham, again.moved) == (0, 1, 0, 1)
    assert trained_labels(config, db, [digest_bytes(raw)]) == {digest_bytes(raw): 1}
    assert digest_bytes(raw) in digests(dovecot_server, user, "Junk")


def test_dry_run_changes_nothing(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = setup_mailbox(dovecot_server, sample)
    config = account_config(dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    # A model trained elsewhere, so the dry run can classify.
    with Filter.open(config, db) as f:
        f.train([(True, m) for m in _items(sample.train_spam)] + [(False, m) for m in _items(sample.train_ham)])
    db_before = (tmp_path / "sf.db").read_bytes()
    before = snapshot(dovecot_server, user, ["INBOX", "Train/Spam", "Train/Ham"])
    events: list[object] = []
    summary = run(config, db, monkeypatch, user, dry_run=True, on_event=events.append)
    assert summary.classified == len(sample.inbox) and summary.moved == summary.spam > 0
    assert any(getattr(e, "kind", "") == "moved" for e in events)
    assert snapshot(dovecot_server, user, ["INBOX", "Train/Spam", "Train/Ham"]) == before
    with dovecot_server.client(user) as c:
        assert not c.folder_exists("Junk")
    # The database file is byte for byte the same (after a checkpoint of both).
    with Filter.open(config, db) as f:
        f.store.engine.dispose()
    assert (tmp_path / "sf.db").read_bytes() == db_before


def _items(messages: list[bytes]) -> list[object]:
    from spamfilter.mail import MailItem

    return [MailItem(f"m{i}", m) for i, m in enumerate(messages)]


# -- the command, as a process ------------------------------------------------


def write_config(path: Path, server: Dovecot, user: ImapUser, **overrides: object) -> Path:
    table: dict[str, object] = {
        "host": server.host,
        "port": server.port,
        "security": "starttls",
        "ca_file": str(server.ca_file),
        "username": user.name,
        "password_env": PASSWORD_ENV,
        "train_spam_folder": "Train/Spam",
        "train_ham_folder": "Train/Ham",
        "chunk_size": 20,
        "retries": 0,
    }
    table.update(overrides)
    lines = ["[imap.test]"] + [f"{k} = {_toml(v)}" for k, v in table.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _toml(value: object) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value).lower() if isinstance(value, bool) else str(value)


def spamfilter_cmd(config: Path, db: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "spamfilter", "--config", str(config), "--db", db, "imap", "run", *args]


def env_with(password: str) -> dict[str, str]:
    return {**os.environ, PASSWORD_ENV: password}


def test_wrong_password_and_unreachable_server_are_clear_errors(dovecot_server: Dovecot, tmp_path: Path) -> None:
    user = dovecot_server.add_user(password="right-horse-battery")
    config = write_config(tmp_path / "c.toml", dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    done = subprocess.run(spamfilter_cmd(config, db), env=env_with("wrong-password-xyz"), capture_output=True, text=True, timeout=60)
    assert done.returncode == 77, done.stderr
    assert "refused the login" in done.stderr and "Traceback" not in done.stderr
    assert "wrong-password-xyz" not in done.stderr + done.stdout

    # Nothing listens on this port: retried with backoff, then exit 68.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    config = write_config(tmp_path / "d.toml", dovecot_server, user, port=closed_port, retries=1)
    # The pauses between attempts: test_library_errors (an injected sleep).
    done = subprocess.run(spamfilter_cmd(config, db), env=env_with(user.password), capture_output=True, text=True, timeout=60)
    assert done.returncode == 68, done.stderr
    assert "connection refused" in done.stderr and "gave up after 2 attempts" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_second_run_of_an_account_while_one_runs_is_refused_at_once(dovecot_server: Dovecot, tmp_path: Path) -> None:
    # Two runs at once (cron runs that overlap) moved the same spam twice:
    # 29 of 800 messages ended up in Junk two times.
    user = dovecot_server.add_user()
    config = write_config(tmp_path / "c.toml", dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    with Store.open(db) as store, store.exclusive("an imap run of account 'test'"):
        done = subprocess.run(spamfilter_cmd(config, db), env=env_with(user.password), capture_output=True, text=True, timeout=60)
    assert done.returncode == 75, done.stderr
    assert "an imap run of account 'test' is already running in another process" in done.stderr
    assert "Traceback" not in done.stderr
    dry = subprocess.run([*spamfilter_cmd(config, db), "--dry-run"], env=env_with(user.password), capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr  # a dry run takes no lock
    # ... and says what it would do ("created folders" it did not create).
    assert "test: would create folders Junk, Train/Spam, Train/Ham" in dry.stdout and "(dry run: nothing was changed)" in dry.stdout
    with Store.open(db) as store, store.exclusive("an imap run of account 'test'"):
        pass  # and the lock was let go


def test_a_loop_goes_on_past_another_run_of_the_account_and_a_login_the_server_cannot_check(dovecot_server: Dovecot, tmp_path: Path) -> None:
    # Both ended `imap run --loop` for good: a run from cron holding the
    # account (exit 75), and a user database away for a moment, which the
    # server answers NO [UNAVAILABLE] and which was reported as a wrong
    # password (exit 77).
    user = dovecot_server.add_user()
    account = account_config(dovecot_server, user).imap[0]
    passwd = dovecot_server.passwd_dir / user.name
    passwd.chmod(0)
    try:
        with pytest.raises(ImapUnavailable, match=r"cannot check the login of .* now \(\[UNAVAILABLE\]"):
            ImapSession.connect(account, user.password).close()
    finally:
        passwd.chmod(0o644)
    config = write_config(tmp_path / "c.toml", dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    err = tmp_path / "err"
    with Store.open(db) as store, store.exclusive("an imap run of account 'test'"), open(err, "w") as stderr:
        looping = subprocess.Popen(
            [*spamfilter_cmd(config, db), "--loop", "--interval", "1"], env=env_with(user.password), stdout=subprocess.PIPE, stderr=stderr, text=True
        )
        deadline = time.monotonic() + HANG
        while err.read_text().count("already running in another process") < 2:
            assert looping.poll() is None, err.read_text()
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.1)
    try:
        assert looping.stdout is not None
        assert "classified" in looping.stdout.readline()  # a whole run once the other let go
        assert "next try in 1 s" in err.read_text() and "Traceback" not in err.read_text()
    finally:
        looping.terminate()
        looping.wait(HANG)


def test_a_run_whose_lock_another_run_took_meanwhile_stops_before_its_next_step(
    dovecot_server: Dovecot, sample: Sample, fresh_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A PostgreSQL session lock goes with its connection: after a server
    # restart a second run could start, and the first went on moving and
    # training beside it until it ended. It now asks for its lock before
    # each step and stops there (75) if another run holds it.
    import sqlalchemy as sa

    user = setup_mailbox(dovecot_server, sample)
    config = account_config(dovecot_server, user)
    folders = ["INBOX", "Train/Spam", "Train/Ham"]
    before = snapshot(dovecot_server, user, folders)
    admin = sa.create_engine(fresh_postgres_url, isolation_level="AUTOCOMMIT")
    other = Store.open(fresh_postgres_url)
    holding: list[object] = []

    def lock_lost_and_taken(event: object) -> None:
        if holding:
            return
        with admin.connect() as conn:  # the run's lock connection goes, as in a restart
            # Only this database's (other workers run beside it), and wait
            # until each is gone: a backend ends after the call returns.
            ended = (
                conn.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid, 60000) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid()"
                        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                    )
                )
                .scalars()
                .all()
            )
            assert ended and all(ended)  # false: still there after the 60 s
        lock = other.exclusive("an imap run of account 'test'")
        lock.__enter__()  # a second run starts in the gap
        holding.append(lock)

    try:
        with pytest.raises(StoreBusyError, match="lost its lock with its connection .* another process holds it now"):
            run(config, fresh_postgres_url, monkeypatch, user, on_event=lock_lost_and_taken)
        assert holding, "the run reached no step"
        assert snapshot(dovecot_server, user, folders) == before  # nothing moved or flagged
        with Filter.open(config, fresh_postgres_url) as f:
            stats = f.stats()
        assert (stats.spam_messages, stats.ham_messages) == (0, 0)  # nothing trained
    finally:
        for lock in holding:
            lock.__exit__(None, None, None)  # type: ignore[attr-defined]
        other.close()
        admin.dispose()


@pytest.mark.parametrize("use_move", [True, False], ids=["MOVE", "COPY-and-expunge"])
def test_a_move_of_messages_another_client_expunged_meanwhile_moves_the_rest(dovecot_server: Dovecot, use_move: bool) -> None:
    # Another client expunged one of them after this session had seen it:
    # the server refused the whole MOVE (NO [EXPUNGEISSUED]) and the run
    # stopped with 71.
    user = dovecot_server.add_user()
    dovecot_server.append(user, "INBOX", [f"Subject: m{i}\r\nMessage-ID: <m{i}@example.test>\r\n\r\nbody {i}\r\n".encode() for i in range(4)])
    dovecot_server.append(user, "Junk", [])
    account = account_config(dovecot_server, user).imap[0]
    with ImapSession.connect(account, user.password) as session:
        session.select("INBOX")
        uids = session.uids()
        assert len(uids) == 4
        with dovecot_server.client(user, "INBOX") as other:
            other.delete_messages([uids[1]])
            other.expunge()
        session.move(uids, "Junk", use_move=use_move)
    with dovecot_server.client(user, "Junk") as junk:
        subjects = sorted(m[b"ENVELOPE"].subject for m in junk.fetch(junk.search("ALL"), ["ENVELOPE"]).values())
    assert subjects == [b"m0", b"m2", b"m3"]
    with dovecot_server.client(user, "INBOX") as inbox:
        assert inbox.search("ALL") == []


def expunged_before_each_move(monkeypatch: pytest.MonkeyPatch, server: Dovecot, user: ImapUser, command: str, times: int) -> list[bytes]:
    """Another client expunges the last message of each of the run's first
    ``times`` MOVE (or COPY, ``command``) commands just before it is sent,
    so the server refuses it with NO [EXPUNGEISSUED], retry after retry.
    The messages expunged, as they were."""
    from imapclient import IMAPClient

    original = getattr(IMAPClient, command)
    gone: list[bytes] = []

    def raced(self: IMAPClient, messages: list[int], folder: str) -> object:
        if len(gone) < times:
            uid = messages[-1]
            with server.client(user, "INBOX") as other:
                gone.append(other.fetch([uid], ["BODY.PEEK[]"])[uid][b"BODY[]"])
                other.delete_messages([uid])
                other.uid_expunge([uid])
        return original(self, messages, folder)

    monkeypatch.setattr(IMAPClient, command, raced)
    return gone


@pytest.mark.parametrize("use_move", [True, False], ids=["MOVE", "COPY-and-expunge"])
def test_a_move_refused_again_and_again_for_expunged_messages_is_retried(
    dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use_move: bool
) -> None:
    # A second NO [EXPUNGEISSUED] in a row stopped the run with 71 (the
    # retry was sent once); the next run went on cleanly. Three in a row
    # now end as one run: the rest moved, nothing lost or doubled.
    clean_user = setup_mailbox(dovecot_server, sample)
    clean = run(account_config(dovecot_server, clean_user), tmp_path_db(tmp_path, "clean"), monkeypatch, clean_user, use_move=use_move)
    clean_junk, clean_inbox = digests(dovecot_server, clean_user, "Junk"), digests(dovecot_server, clean_user, "INBOX")
    user = setup_mailbox(dovecot_server, sample)
    config = account_config(dovecot_server, user)
    db = tmp_path_db(tmp_path, "raced")
    with monkeypatch.context() as m:
        gone = expunged_before_each_move(m, dovecot_server, user, "move" if use_move else "copy", 3)
        summary = run(config, db, monkeypatch, user, use_move=use_move)
    assert len(gone) == 3
    lost = Counter(map(digest_bytes, gone))
    assert not lost & clean_inbox  # spam each, so the moves met them
    assert digests(dovecot_server, user, "Junk") == clean_junk - lost
    assert digests(dovecot_server, user, "INBOX") == clean_inbox
    assert (summary.classified, summary.spam, summary.moved, summary.flagged) == (clean.classified, clean.spam, clean.moved - 3, clean.flagged)
    assert_nothing_left(config, db, monkeypatch, user)


def test_a_move_refused_for_expunged_messages_five_times_stops_the_run(dovecot_server: Dovecot) -> None:
    user = dovecot_server.add_user()
    mail = [f"Subject: m{i}\r\nMessage-ID: <m{i}@example.test>\r\n\r\nbody {i}\r\n".encode() for i in range(8)]
    dovecot_server.append(user, "INBOX", mail)
    dovecot_server.append(user, "Junk", [])
    account = account_config(dovecot_server, user).imap[0]
    with pytest.MonkeyPatch.context() as m:
        gone = expunged_before_each_move(m, dovecot_server, user, "move", 5)
        with ImapSession.connect(account, user.password) as session, pytest.raises(ImapError, match="EXPUNGEISSUED.*refused 5 times in a row"):
            session.select("INBOX")
            session.move(session.uids(), "Junk")
    assert len(gone) == 5
    assert dovecot_server.folder_messages(user, "Junk") == []
    # Refused five times, nothing moved: the other client's five gone, the rest still there.
    assert gone == mail[:2:-1]
    assert digests(dovecot_server, user, "INBOX") == Counter(map(digest_bytes, mail[:3]))


def test_no_fetch_names_more_uids_than_a_command_line_holds(dovecot_server: Dovecot, monkeypatch: pytest.MonkeyPatch) -> None:
    # The sizes of ten chunks were asked in one FETCH: with chunk_size 1000
    # (allowed up to 10,000 then) a folder of years of mail sent 10,000 UIDs
    # in one line, which Dovecot refuses ("Too long argument"), every run.
    user = dovecot_server.add_user()
    dovecot_server.fill_maildir(user, "INBOX", (f"Subject: m{i}\r\n\r\nbody {i}\r\n".encode() for i in range(1500)))
    account = account_config(dovecot_server, user).imap[0]
    named: list[int] = []
    with ImapSession.connect(account, user.password) as session:
        session.select("INBOX")
        uids = session.uids()
        real_fetch = session.client.fetch

        def fetch(messages: list[int], *args: object, **kwargs: object) -> object:
            named.append(len(messages))
            return real_fetch(messages, *args, **kwargs)

        monkeypatch.setattr(session.client, "fetch", fetch)
        got = [m.uid for chunk in session.fetch(uids, chunk_size=200, chunk_bytes=1 << 30) for m in chunk]
    assert got == uids and len(uids) == 1500
    assert max(named) <= 1000 and sum(named) == 3000  # every UID once for its size, once for its body
    with pytest.raises(ConfigError, match="chunk_size must be between 1 and 1000"):
        account_config(dovecot_server, user, chunk_size=1001)


def test_plain_text_to_a_remote_host_is_refused() -> None:
    with pytest.raises(ConfigError, match="loopback"):
        config_from_dict({"imap": {"x": {"host": "mail.example.org", "security": "none", "username": "u", "password_env": "P"}}})
    config_from_dict({"imap": {"x": {"host": "127.0.0.1", "security": "none", "username": "u", "password_env": "P"}}})


def test_inbox_in_any_case_is_one_folder() -> None:
    account = {"host": "127.0.0.1", "security": "none", "username": "u", "password_env": "P", "classify_folders": ["INBOX"]}
    with pytest.raises(ConfigError, match="folders must all differ"):
        config_from_dict({"imap": {"x": {**account, "train_ham_folder": "Inbox"}}})
    config_from_dict({"imap": {"x": {**account, "train_ham_folder": "INBOX/Ham"}}})


def test_library_errors(dovecot_server: Dovecot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = dovecot_server.add_user()
    config = account_config(dovecot_server, user)
    monkeypatch.setenv(PASSWORD_ENV, "nope")
    with Filter.open(config, "sqlite://") as f, pytest.raises(ImapAuthError):
        run_account(f, config.imap[0])
    account = ImapAccount(name="x", host="127.0.0.1", port=1, security="none", username="u", password_env=PASSWORD_ENV, retries=2)
    pauses: list[float] = []
    with Filter.open(config, "sqlite://") as f, pytest.raises(ImapUnavailable, match="gave up after 3 attempts"):
        run_account(f, account, sleep=pauses.append)
    assert pauses == [1.0, 2.0]
    # Doubling without a bound, the 20 retries allowed waited 6 days.
    pauses.clear()
    with Filter.open(config, "sqlite://") as f, pytest.raises(ImapUnavailable, match="gave up after 11 attempts"):
        run_account(f, replace(account, retries=10), sleep=pauses.append)
    assert pauses == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0, 60.0]


@pytest.mark.parametrize("ca_file", ["/nonexistent/ca.pem", "{tmp}", "{tmp}/not-a-certificate.pem"])
def test_a_ca_file_that_cannot_be_loaded_is_a_config_error_before_any_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ca_file: str) -> None:
    # It was taken for an unreachable server (68) and tried again for 16 s.
    (tmp_path / "not-a-certificate.pem").write_text("hello\n")
    monkeypatch.setenv(PASSWORD_ENV, "x")
    account = ImapAccount(name="x", host="127.0.0.1", port=1, security="tls", username="u", password_env=PASSWORD_ENV, ca_file=ca_file.format(tmp=tmp_path), retries=2)
    pauses: list[float] = []
    with Filter.open(Config(), "sqlite://") as f, pytest.raises(ConfigError, match=r"imap\.x\.ca_file: cannot load"):
        run_account(f, account, sleep=pauses.append)
    assert pauses == []


def test_killed_runs_end_like_one_clean_run(dovecot_server: Dovecot, sample: Sample, tmp_path: Path) -> None:
    clean_user = setup_mailbox(dovecot_server, sample)
    killed_user = setup_mailbox(dovecot_server, sample)
    clean_cfg = write_config(tmp_path / "clean.toml", dovecot_server, clean_user, chunk_size=3)
    killed_cfg = write_config(tmp_path / "killed.toml", dovecot_server, killed_user, chunk_size=2)
    clean_db = f"sqlite:///{tmp_path / 'clean.db'}"
    killed_db = f"sqlite:///{tmp_path / 'killed.db'}"
    subprocess.run(spamfilter_cmd(clean_cfg, clean_db), env=env_with(clean_user.password), check=True, capture_output=True, timeout=300)

    final = sum(digests(dovecot_server, clean_user, "Junk").values())
    assert final >= 12

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(spamfilter_cmd(killed_cfg, killed_db), env=env_with(killed_user.password), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def kill_when(proc: subprocess.Popen[bytes], reached: Callable[[], bool]) -> bool:
        """SIGKILL ``proc`` as soon as ``reached()``; False if it ended first."""
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if reached():
                break
            time.sleep(0.01)
        alive = proc.poll() is None
        if alive:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        return alive

    def trained() -> int:
        try:
            with sqlite3.connect(tmp_path / "killed.db") as conn:
                return int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
        except sqlite3.OperationalError:  # no schema yet
            return 0

    # Kill -9 during training, once it has committed 40, then 120 of the
    # 220 messages of the training folders ...
    kills = 0
    in_ledger: list[int] = []
    for target in (40, 120):
        kills += kill_when(start(), lambda target=target: trained() >= target)
        in_ledger.append(trained())
    # ... then in the middle of filing spam: as soon as the spam folder holds
    # a given number of messages, while the run goes on moving more.
    in_junk: list[int] = []
    watcher = dovecot_server.client(killed_user)
    try:
        for target in (1, final // 3, 2 * final // 3):
            kills += kill_when(start(), lambda target=target: watcher.folder_exists("Junk") and watcher.folder_status("Junk", ["MESSAGES"])[b"MESSAGES"] >= target)
            in_junk.append(watcher.folder_status("Junk", ["MESSAGES"])[b"MESSAGES"])
    finally:
        watcher.logout()
    print(f"kills: {kills}; trained after the first two: {in_ledger}; spam folder after each of the last three: {in_junk} of {final}")
    assert kills == 5, "a run ended before it could be killed"
    assert all(n < len(sample.train_spam) + len(sample.train_ham) for n in in_ledger), "a kill missed the training"
    assert any(0 < n < final for n in in_junk), "no kill landed in the middle of filing spam"
    subprocess.run(spamfilter_cmd(killed_cfg, killed_db), env=env_with(killed_user.password), check=True, capture_output=True, timeout=300)

    for folder in FOLDERS:
        assert digests(dovecot_server, killed_user, folder) == digests(dovecot_server, clean_user, folder), folder
    every = sum((digests(dovecot_server, killed_user, f) for f in ("INBOX", "Junk")), Counter())
    assert every == Counter({digest_bytes(m): 1 for m in sample.inbox})
    # The same model as the clean run, too.
    with Filter.open(Config(), killed_db) as a, Filter.open(Config(), clean_db) as b:
        sa, sb = a.stats(), b.stats()
    assert (sa.spam_messages, sa.ham_messages, sa.tokens) == (sb.spam_messages, sb.ham_messages, sb.tokens)
    # And a further run does nothing.
    done = subprocess.run(
        spamfilter_cmd(killed_cfg, killed_db, "--format", "json"), env=env_with(killed_user.password), check=True, capture_output=True, text=True, timeout=300
    )
    assert '"classified": 0' in done.stdout and '"moved": 0' in done.stdout and '"trained_spam": 0' in done.stdout


def _peak_rss_mb(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run ``cmd``; (peak resident MB, seconds, stdout)."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - started
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, err
    return usage.ru_maxrss / 1024, seconds, out


def test_a_folder_of_5000_messages_runs_in_bounded_memory(dovecot_server: Dovecot, sample: Sample, corpora_dir: Path, tmp_path: Path) -> None:
    root = corpora_dir / "spamassassin"
    trained = {digest_bytes(m) for m in sample.train_spam + sample.train_ham}
    messages: dict[str, bytes] = {}
    for line in (root / "index").read_text().splitlines():
        raw = (root / line.split()[1]).read_bytes()
        if digest_bytes(raw) not in trained:
            messages.setdefault(digest_bytes(raw), raw)
        if len(messages) == 5000:
            break
    assert len(messages) == 5000
    bulk = list(messages.values())
    peaks = {}
    for n in (500, 5000):
        user = dovecot_server.add_user()
        dovecot_server.append(user, "Train/Spam", sample.train_spam)
        dovecot_server.append(user, "Train/Ham", sample.train_ham)
        dovecot_server.fill_maildir(user, "INBOX", bulk[:n])
        config = write_config(tmp_path / f"c{n}.toml", dovecot_server, user, chunk_size=100)
        peak, seconds, out = _peak_rss_mb(spamfilter_cmd(config, f"sqlite:///{tmp_path / f'{n}.db'}", "--format", "json"), env_with(user.password))
        assert f'"classified": {n}' in out
        peaks[n] = peak
        print(f"{n} messages: peak RSS {peak:.0f} MB, {seconds:.1f} s ({n / seconds:.0f} messages/s with start-up and training)")
    # Ten times the mail, (almost) the same memory: fetching is chunked.
    assert peaks[5000] < peaks[500] + 40, peaks


def test_password_from_a_command_and_its_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    from spamfilter.imap.session import account_password

    account = ImapAccount(name="x", username="u", password_command="printf 'pa ss\\n'")
    assert account_password(account) == "pa ss"
    failing = ImapAccount(name="x", username="u", password_command="echo hunter2 >&2; exit 3")
    with pytest.raises(ConfigError, match="exited with status 3") as info:
        account_password(failing)
    assert "hunter2" not in str(info.value)
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    with pytest.raises(ConfigError, match=PASSWORD_ENV):
        account_password(ImapAccount(name="x", username="u", password_env=PASSWORD_ENV))


def test_an_unknown_certificate_is_refused(dovecot_server: Dovecot, tmp_path: Path) -> None:
    user = dovecot_server.add_user()
    # No ca_file: the test server's self-signed certificate is not trusted.
    config = write_config(tmp_path / "c.toml", dovecot_server, user, port=dovecot_server.tls_port, security="tls", ca_file="")
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    done = subprocess.run(spamfilter_cmd(config, db), env=env_with(user.password), capture_output=True, text=True, timeout=60)
    assert done.returncode == 71, done.stderr
    assert "certificate was not accepted" in done.stderr and "Traceback" not in done.stderr
    # verify = false is the explicit way out.
    config = write_config(tmp_path / "d.toml", dovecot_server, user, port=dovecot_server.tls_port, security="tls", ca_file="", verify=False)
    done = subprocess.run(spamfilter_cmd(config, db, "--dry-run"), env=env_with(user.password), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_second_copy_of_filed_spam_is_not_taken_for_a_move_back(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The same spam in two classify folders (a mail client's labels, Sieve :copy).
    user = dovecot_server.add_user()
    dovecot_server.append(user, "Train/Spam", sample.train_spam)
    dovecot_server.append(user, "Train/Ham", sample.train_ham)
    dovecot_server.append(user, "INBOX", sample.inbox_spam)
    dovecot_server.append(user, "Lists", sample.inbox_spam)
    config = account_config(dovecot_server, user, classify_folders=["INBOX", "Lists"])
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    summary = run(config, db, monkeypatch, user)
    assert summary.trained_ham == len(sample.train_ham)  # no spam trained as ham
    junk = digests(dovecot_server, user, "Junk")
    caught = {d for d in junk}
    assert caught and all(n == 2 for n in junk.values())  # both copies filed
    for folder in ("INBOX", "Lists"):
        assert not caught & set(digests(dovecot_server, user, folder))
    quiet = run(config, db, monkeypatch, user)
    assert (quiet.classified, quiet.moved, quiet.trained_spam, quiet.trained_ham) == (0, 0, 0, 0)


def test_a_second_copy_of_spam_in_a_later_chunk_of_the_same_pass_is_not_taken_for_a_move_back(
    dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The spam folder's digests were read once before the pass: a copy in a
    # later chunk of one the pass had filed looked moved back, was learned
    # as ham and left in the inbox with $NotJunk.
    user = dovecot_server.add_user()
    dovecot_server.append(user, "Train/Spam", sample.train_spam)
    dovecot_server.append(user, "Train/Ham", sample.train_ham)
    spam = sample.inbox_spam[:1]
    dovecot_server.append(user, "INBOX", [*spam, *sample.inbox_ham[:2], *spam])
    config = account_config(dovecot_server, user, chunk_size=2)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    summary = run(config, db, monkeypatch, user)
    assert summary.trained_ham == len(sample.train_ham)  # no spam trained as ham
    assert list(digests(dovecot_server, user, "Junk").values()) == [2]  # both copies filed
    assert len(digests(dovecot_server, user, "INBOX")) == 2
    quiet = run(config, db, monkeypatch, user)
    assert (quiet.classified, quiet.moved, quiet.trained_spam, quiet.trained_ham) == (0, 0, 0, 0)


def test_limit_counts_classified_messages_only(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = setup_mailbox(dovecot_server, sample)
    config = account_config(dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    first = run(config, db, monkeypatch, user, limit=10)
    assert first.classified == 10
    second = run(config, db, monkeypatch, user, limit=10)
    assert second.classified == 10
    rest = run(config, db, monkeypatch, user)
    assert first.classified + second.classified + rest.classified == len(sample.inbox)


def _drop_once(monkeypatch: pytest.MonkeyPatch, method: str, when: object = None) -> list[int]:
    """Make ImapSession.<method> lose the connection once (a real network
    failure at that point), after the real call when ``when == "after"``."""
    from spamfilter.imap import session as imap_module

    return _drop_once_on(monkeypatch, imap_module.ImapSession, method, when)


def _drop_once_on(monkeypatch: pytest.MonkeyPatch, owner: type, method: str, when: object = None) -> list[int]:
    """``_drop_once`` for a method of any class."""
    original = getattr(owner, method)
    calls: list[int] = []

    def failing(self: object, *args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            if when == "after":
                original(self, *args, **kwargs)
            raise ImapUnavailable("connection lost (injected)")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(owner, method, failing)
    return calls


def test_copy_fallback_broken_between_copy_and_expunge(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = setup_mailbox(dovecot_server, sample)
    config = account_config(dovecot_server, user, retries=2)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    # The first expunge never happens: the copies are in Junk, the originals
    # still in the inbox, and the pass starts again after a reconnect.
    calls = _drop_once(monkeypatch, "expunge")
    summary = run(config, db, monkeypatch, user, use_move=False, sleep=lambda s: None)
    assert summary.retries == 1 and len(calls) >= 2
    assert summary.trained_ham == len(sample.train_ham)  # nothing trained as ham by mistake
    junk = digests(dovecot_server, user, "Junk")
    inbox = digests(dovecot_server, user, "INBOX")
    assert max(junk.values()) == 1 and max(inbox.values()) == 1
    assert not set(junk) & set(inbox)
    assert sum(junk.values()) + sum(inbox.values()) == len(sample.inbox)
    quiet = run(config, db, monkeypatch, user, use_move=False)
    assert (quiet.classified, quiet.moved, quiet.trained_spam, quiet.trained_ham) == (0, 0, 0, 0)


def test_a_move_asked_for_by_a_keyword_is_finished_after_a_break(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = setup_mailbox(dovecot_server, sample)
    config = account_config(dovecot_server, user, retries=2)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    run(config, db, monkeypatch, user)
    uid, raw, _ = dovecot_server.folder_messages(user, "INBOX")[0]
    with dovecot_server.client(user, "INBOX") as c:
        c.add_flags([uid], ["$Junk"])
    calls = _drop_once(monkeypatch, "move")
    summary = run(config, db, monkeypatch, user, sleep=lambda s: None)
    assert summary.retries == 1 and len(calls) >= 2
    assert digest_bytes(raw) in digests(dovecot_server, user, "Junk")
    assert digest_bytes(raw) not in digests(dovecot_server, user, "INBOX")
    with Filter.open(config, db) as f, f.store.begin(write=False) as tx:
        assert tx.trained_labels([digest_bytes(raw)]) == {digest_bytes(raw): 1}
        assert not tx.imap.pending("test", "INBOX")


@pytest.mark.parametrize("again", [False, True], ids=["once", "broken-while-looking"])
def test_moves_a_broken_run_left_pending_survive_a_renumbered_folder(
    dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, again: bool
) -> None:
    user = setup_mailbox(dovecot_server, sample)
    config = account_config(dovecot_server, user, retries=1)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    from spamfilter.imap import session as imap_module

    def lost(self: object, *args: object, **kwargs: object) -> object:
        raise ImapUnavailable("connection lost (injected)")

    # Every move breaks off: the run ends with its moves out of the inbox pending.
    with monkeypatch.context() as m:
        m.setattr(imap_module.ImapSession, "move", lost)
        with pytest.raises(ImapUnavailable):
            run(config, db, monkeypatch, user)
    with Filter.open(config, db) as f, f.store.begin(write=False) as tx:
        pending = {r.digest for r in tx.imap.pending("test", "INBOX")}
    assert pending
    # Then the server renumbers the inbox: the recorded UIDs mean nothing.
    for name in os.listdir(user.maildir):
        if name.startswith("dovecot-uidlist") or name.startswith("dovecot.index"):
            os.remove(user.maildir / name)
    if again:
        # The connection breaks while the pass looks for them: the pass after
        # must still know the folder was renumbered.
        from spamfilter.imap import sync as sync_module

        _drop_once_on(monkeypatch, sync_module.ImapRun, "_pending_here")
    summary = run(config, db, monkeypatch, user, sleep=lambda s: None)
    assert summary.retries == int(again)
    # The pending messages are moved, not taken for mail the user moved back.
    assert summary.trained_ham == 0 and summary.classified == len(sample.inbox) - 20  # the first chunk was classified before
    junk, inbox = digests(dovecot_server, user, "Junk"), digests(dovecot_server, user, "INBOX")
    assert pending <= set(junk) and not pending & set(inbox)
    assert max(junk.values()) == max(inbox.values()) == 1 and sum(junk.values()) + sum(inbox.values()) == len(sample.inbox)
    with Filter.open(config, db) as f, f.store.begin(write=False) as tx:
        assert not tx.imap.pending("test", "INBOX")
        assert set(tx.trained_labels(sorted(pending)).values()) <= {1}


def test_a_dry_run_creates_no_database(dovecot_server: Dovecot, tmp_path: Path) -> None:
    user = dovecot_server.add_user()
    config = write_config(tmp_path / "c.toml", dovecot_server, user)
    done = subprocess.run(spamfilter_cmd(config, str(tmp_path / "new.db"), "--dry-run"), env=env_with(user.password), capture_output=True, text=True, timeout=60)
    assert done.returncode == 66, done.stderr
    assert "no such database" in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "c.toml"]


def test_keyword_and_report_modes_respect_what_the_user_set(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = dovecot_server.add_user()
    dovecot_server.append(user, "Train/Spam", sample.train_spam)
    dovecot_server.append(user, "Train/Ham", sample.train_ham)
    spam = sample.inbox_spam
    dovecot_server.append(user, "INBOX", spam[:8])
    dovecot_server.append(user, "INBOX", spam[8:12], flags=["$Junk"])
    dovecot_server.append(user, "INBOX", spam[12:16], flags=["$NotJunk"])
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    # "report" changes nothing on the server: no folder created, no flag set.
    report = run(account_config(dovecot_server, user, spam_action="report"), db, monkeypatch, user)
    assert report.spam >= 12 and report.created == [] and report.flagged == 0
    with dovecot_server.client(user) as c:
        assert not c.folder_exists("Junk")
    # "keyword" flags the spam that lacks $Junk, and leaves what the user marked $NotJunk alone.
    user2 = dovecot_server.add_user()
    for folder, messages in (("Train/Spam", sample.train_spam), ("Train/Ham", sample.train_ham), ("INBOX", spam[:8])):
        dovecot_server.append(user2, folder, messages)
    dovecot_server.append(user2, "INBOX", spam[8:12], flags=["$Junk"])
    dovecot_server.append(user2, "INBOX", spam[12:16], flags=["$NotJunk"])
    events: list[object] = []
    summary = run(account_config(dovecot_server, user2, spam_action="keyword"), tmp_path_db(tmp_path, "kw"), monkeypatch, user2, on_event=events.append)
    flags = {digest_bytes(raw): set(fl) for _, raw, fl in dovecot_server.folder_messages(user2, "INBOX")}
    caught = [d for d in map(digest_bytes, spam[:8]) if b"$Junk" in flags[d]]
    assert len(caught) >= 6 and summary.flagged == len(caught)  # the four already flagged are not counted
    assert all(flags[digest_bytes(m)] & {b"$Junk", b"$NotJunk"} == {b"$NotJunk"} for m in spam[12:16])
    assert sum(getattr(e, "kind", "") == "kept" for e in events) == 4


def tmp_path_db(tmp_path: Path, name: str) -> str:
    return f"sqlite:///{tmp_path / f'{name}.db'}"


def counts(s: RunSummary) -> tuple[int, ...]:
    """Every count of a run's summary."""
    return (s.seen, s.classified, s.spam, s.ham, s.unsure, s.moved, s.flagged, s.trained_spam, s.trained_ham, s.errors)


@pytest.mark.parametrize(
    ("broken", "when", "use_move"),
    [
        ("set_keywords", None, True),
        ("move", None, True),
        ("fetch", None, True),
        # The server did it, the answer was lost: before, the pass after read
        # the moved spam again in Junk (seen 313 for 295), and found $Junk
        # set on spam it did not count as flagged (flagged 5 for 23).
        ("move", "after", True),
        ("set_keywords", "after", True),
        ("expunge", None, False),  # copied to Junk, the originals still in the inbox
    ],
    ids=["set_keywords", "move", "fetch", "move-answer-lost", "set_keywords-answer-lost", "copied-not-expunged"],
)
def test_a_pass_broken_off_and_retried_counts_each_message_once(
    dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str, when: str | None, use_move: bool
) -> None:
    clean_user = setup_mailbox(dovecot_server, sample)
    clean_events: list[Event] = []
    clean = run(account_config(dovecot_server, clean_user), tmp_path_db(tmp_path, "clean"), monkeypatch, clean_user, use_move=use_move, on_event=clean_events.append)
    user = setup_mailbox(dovecot_server, sample)
    calls = _drop_once(monkeypatch, broken, when)
    events: list[Event] = []
    summary = run(
        account_config(dovecot_server, user, retries=2),
        tmp_path_db(tmp_path, "broken"),
        monkeypatch,
        user,
        sleep=lambda s: None,
        use_move=use_move,
        on_event=events.append,
    )
    assert summary.retries == 1 and len(calls) >= 2
    assert counts(summary) == counts(clean)
    for folder in FOLDERS:
        assert digests(dovecot_server, user, folder) == digests(dovecot_server, clean_user, folder), folder
    # --verbose tells each move and each change of flags once, as the summary
    # counts them: a change retried was told twice, one broken off as done.
    for run_events, run_summary in ((clean_events, clean), (events, summary)):
        told = Counter(e.kind for e in run_events)
        assert (told["moved"], told["flagged"]) == (run_summary.moved, run_summary.flagged)
    uids_told = Counter((e.folder, e.uid) for e in events if e.kind == "moved" and e.uid)
    assert all(n == 1 for n in uids_told.values())


@pytest.mark.parametrize(("broken", "when"), [("move", None), ("set_keywords", "after")], ids=["move", "set_keywords-answer-lost"])
def test_a_folder_renumbered_before_the_retry_counts_each_message_once(
    dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str, when: str | None
) -> None:
    # The first move (or $Junk set, whose answer is lost) breaks off after
    # the inbox's first chunk was classified; the server renumbers the inbox
    # before the run reconnects, so the pass after reads all of it again.
    # The chunk's ham was counted new twice (seen 313 for 295), and the
    # spam flagged without hearing so was not counted flagged.
    clean_user = setup_mailbox(dovecot_server, sample)
    clean = run(account_config(dovecot_server, clean_user), tmp_path_db(tmp_path, "clean"), monkeypatch, clean_user)
    user = setup_mailbox(dovecot_server, sample)
    with dovecot_server.client(user) as c:
        before = c.select_folder("INBOX")[b"UIDVALIDITY"]

    def renumber(seconds: float) -> None:
        for name in os.listdir(user.maildir):
            if name.startswith("dovecot-uidlist") or name.startswith("dovecot.index"):
                os.remove(user.maildir / name)

    calls = _drop_once(monkeypatch, broken, when)
    summary = run(account_config(dovecot_server, user, retries=1), tmp_path_db(tmp_path, "broken"), monkeypatch, user, sleep=renumber)
    assert summary.retries == 1 and len(calls) >= 2
    with dovecot_server.client(user) as c:
        assert c.select_folder("INBOX")[b"UIDVALIDITY"] != before
    assert counts(summary) == counts(clean)
    for folder in FOLDERS:
        assert digests(dovecot_server, user, folder) == digests(dovecot_server, clean_user, folder), folder


def test_moves_a_broken_pass_made_without_hearing_so_are_counted(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean_user = setup_mailbox(dovecot_server, sample)
    clean = run(account_config(dovecot_server, clean_user), tmp_path_db(tmp_path, "clean"), monkeypatch, clean_user)
    user = setup_mailbox(dovecot_server, sample)
    _drop_once(monkeypatch, "move", when="after")  # the server moved them; the answer was lost
    summary = run(account_config(dovecot_server, user, retries=2), tmp_path_db(tmp_path, "broken"), monkeypatch, user, sleep=lambda s: None)
    assert summary.retries == 1
    assert (summary.moved, summary.classified, summary.spam) == (clean.moved, clean.classified, clean.spam)


def test_a_run_that_gives_up_says_what_broke_first_and_what_it_had_done(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spamfilter.imap import session as imap_module

    def lost(self: object, *args: object, **kwargs: object) -> object:
        raise ImapUnavailable("connection lost (injected)")

    user = setup_mailbox(dovecot_server, sample)
    monkeypatch.setattr(imap_module.ImapSession, "move", lost)
    with pytest.raises(ImapUnavailable) as info:
        run(account_config(dovecot_server, user, retries=1), tmp_path_db(tmp_path, "sf"), monkeypatch, user, sleep=lambda s: None)
    text = str(info.value)
    assert text.startswith("connection lost (injected)") and "gave up after 2 attempts" in text
    assert "done and recorded before: " in text and f"{len(sample.train_spam) + len(sample.train_ham)} trained" in text


def test_moves_to_two_folders_broken_between_them_are_counted_once(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spamfilter.imap import session as imap_module

    clean_user = setup_mailbox(dovecot_server, sample)
    clean = run(account_config(dovecot_server, clean_user, unsure_folder="Unsure"), tmp_path_db(tmp_path, "clean"), monkeypatch, clean_user)
    user = setup_mailbox(dovecot_server, sample)
    original = imap_module.ImapSession.move
    targets: list[str] = []

    def second_target_breaks(self: imap_module.ImapSession, uids: list[int], target: str, **kwargs: object) -> object:
        targets.append(target)
        if len(set(targets)) == 2 and targets.count(target) == 1:
            raise ImapUnavailable("connection lost (injected)")
        return original(self, uids, target, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(imap_module.ImapSession, "move", second_target_breaks)
    events: list[Event] = []
    summary = run(
        account_config(dovecot_server, user, unsure_folder="Unsure", retries=1),
        tmp_path_db(tmp_path, "broken"),
        monkeypatch,
        user,
        sleep=lambda s: None,
        on_event=events.append,
    )
    assert summary.retries == 1 and len(set(targets)) == 2
    assert clean.unsure > 0 and summary.moved == clean.moved
    # --verbose told the first target's moves twice: when made, and again
    # when the pass after found them done.
    assert sum(e.kind == "moved" for e in events) == summary.moved


def test_a_copy_the_user_marked_junk_is_not_counted_as_flagged_by_a_lost_store(
    dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first $Junk STORE breaks off before the server sees it; some of
    # its spam have byte-identical copies in the inbox that the user had
    # marked $Junk. The pass after counted those copies as flagged by the
    # lost STORE, besides the STORE it sent again.
    def mailbox() -> ImapUser:
        user = dovecot_server.add_user()
        dovecot_server.append(user, "INBOX", sample.inbox_spam[:3], flags=["$Junk"])  # in the first chunk
        dovecot_server.append(user, "Train/Spam", sample.train_spam)
        dovecot_server.append(user, "Train/Ham", sample.train_ham)
        dovecot_server.append(user, "INBOX", sample.inbox)
        return user

    clean_user = mailbox()
    clean = run(account_config(dovecot_server, clean_user), tmp_path_db(tmp_path, "clean"), monkeypatch, clean_user)
    user = mailbox()
    calls = _drop_once(monkeypatch, "set_keywords")
    summary = run(account_config(dovecot_server, user, retries=1), tmp_path_db(tmp_path, "broken"), monkeypatch, user, sleep=lambda s: None)
    assert summary.retries == 1 and len(calls) >= 2
    assert counts(summary) == counts(clean)


def test_a_flag_set_on_a_message_another_client_expunged_is_not_counted(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Another client expunges one of a chunk's spam between the run's fetch
    # and its $Junk STORE, which the server answers OK all the same: it was
    # counted (and told) as flagged.
    from spamfilter.imap import session as imap_module

    user = setup_mailbox(dovecot_server, sample)
    original = imap_module.ImapSession.set_keywords
    gone: list[int] = []

    def expunged_first(self: imap_module.ImapSession, uids: list[int], add: list[str] = [], remove: list[str] = []) -> list[int]:  # noqa: B006
        if not gone and add == ["$Junk"]:
            with dovecot_server.client(user, "INBOX") as other:
                other.delete_messages(uids[:1])
                other.expunge()
            gone.append(uids[0])
        return original(self, uids, add, remove)

    monkeypatch.setattr(imap_module.ImapSession, "set_keywords", expunged_first)
    events: list[Event] = []
    summary = run(account_config(dovecot_server, user, spam_action="keyword"), tmp_path_db(tmp_path, "kw"), monkeypatch, user, on_event=events.append)
    carrying = sum(b"$Junk" in flags for _, _, flags in dovecot_server.folder_messages(user, "INBOX"))
    assert gone and carrying > 0
    assert summary.flagged == carrying
    assert [e.uid for e in events if e.kind == "flagged" and e.uid in gone] == []


def test_keywords_set_are_told_for_the_messages_still_there(dovecot_server: Dovecot, monkeypatch: pytest.MonkeyPatch) -> None:
    # The UIDs a keyword change reached: not one another client expunged,
    # though a FETCH answer queued before the STORE (a NOOP's news of
    # another client's change, keyed by sequence number) names its number.
    user = dovecot_server.add_user()
    dovecot_server.append(user, "INBOX", [f"Subject: m{i}\r\n\r\nbody {i}\r\n".encode() for i in range(4)])
    account = account_config(dovecot_server, user).imap[0]
    with ImapSession.connect(account, user.password) as session:
        session.select("INBOX")
        uids = session.uids()
        with dovecot_server.client(user, "INBOX") as other:
            other.delete_messages([uids[1]])
            other.expunge()
        session.client._imap.untagged_responses["FETCH"] = [f"{uids[1]} (FLAGS (\\Seen))".encode()]
        assert session.set_keywords(uids, ["$Junk"]) == [uids[0], *uids[2:]]
        # Told by the server for every one: nothing more is asked.
        assert session.set_keywords(uids[2:], ["$NotJunk"], ["$Junk"]) == uids[2:]
        # Dovecot answers no FETCH for a message the change leaves as it
        # was: the folder is asked, and those still there are told.
        assert session.set_keywords(uids, [], ["$Junk"]) == [uids[0], *uids[2:]]

        # The connection lost while asking, after the change was made: it
        # is told for all (the pass after goes on), not lost with an error.
        def lost(self: ImapSession, asked: list[int]) -> list[int]:
            raise ImapUnavailable("connection lost (injected)")

        monkeypatch.setattr(ImapSession, "_still_here", lost)
        assert session.set_keywords(uids, [], ["$Junk"]) == uids
    with dovecot_server.client(user, "INBOX") as inbox:
        flags = inbox.get_flags(inbox.search("ALL"))
    assert [sorted(set(f) & {b"$Junk", b"$NotJunk"}) for f in flags.values()] == [[], [b"$NotJunk"], [b"$NotJunk"]]


def test_report_creates_only_the_spam_folder_that_filed_training_mail_needs() -> None:
    from spamfilter.imap.state import folders_to_create

    missing = {"Junk", "Unsure", "Train/Spam"}
    account = ImapAccount(name="x", host="127.0.0.1", security="none", username="u", password_env="P", unsure_folder="Unsure")
    assert folders_to_create(account, missing) == missing
    assert folders_to_create(replace(account, spam_action="report"), missing) == set()
    assert folders_to_create(replace(account, spam_action="report", trained_action="move"), missing) == {"Junk"}


def press(server: Dovecot, user: ImapUser, folder: str, uid: int, *, junk: bool) -> None:
    """A mail client's "junk" (or "not junk") button on message ``uid`` of ``folder``."""
    on, off = ("$Junk", "$NotJunk") if junk else ("$NotJunk", "$Junk")
    with server.client(user, folder) as c:
        c.remove_flags([uid], [off])
        c.add_flags([uid], [on])


def assert_nothing_left(config: Config, db: str, monkeypatch: pytest.MonkeyPatch, user: ImapUser) -> None:
    """One more run finds nothing to train, move or flag."""
    quiet = run(config, db, monkeypatch, user)
    assert (quiet.trained_spam, quiet.trained_ham, quiet.moved, quiet.flagged) == (0, 0, 0, 0)


def trained_labels(config: Config, db: str, digests: list[str]) -> dict[str, int]:
    """The label each of ``digests`` is trained with (absent: not trained)."""
    with Filter.open(config, db) as f, f.store.begin(write=False) as tx:
        return tx.trained_labels(digests)


def test_not_junk_on_mail_in_the_spam_folder_is_the_users_ham(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Marked "not junk" in a mail client before the run saw them: they were
    # trained as spam, and their $NotJunk replaced by $Junk.
    user = dovecot_server.add_user()
    dovecot_server.append(user, "Train/Spam", sample.train_spam)
    dovecot_server.append(user, "Train/Ham", sample.train_ham)
    marked = sample.inbox_ham[:2]
    dovecot_server.append(user, "Junk", marked, flags=["$NotJunk"])
    config = account_config(dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    summary = run(config, db, monkeypatch, user)
    assert (summary.trained_spam, summary.trained_ham) == (len(sample.train_spam), len(sample.train_ham) + 2)
    assert trained_labels(config, db, [digest_bytes(m) for m in marked]) == {digest_bytes(m): 0 for m in marked}
    # Filed where ham goes (spam_action = "move"), still saying $NotJunk.
    flags = {digest_bytes(raw): fl for _, raw, fl in dovecot_server.folder_messages(user, "INBOX")}
    assert all(b"$NotJunk" in flags[digest_bytes(m)] and b"$Junk" not in flags[digest_bytes(m)] for m in marked)
    assert not {digest_bytes(m) for m in marked} & set(digests(dovecot_server, user, "Junk"))
    assert_nothing_left(config, db, monkeypatch, user)


def test_report_changes_no_keyword_in_an_existing_spam_folder(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # "report" set $Junk on the mail the user had put in Junk, took $NotJunk
    # off it, and took $Junk off what the user marked $NotJunk.
    user = dovecot_server.add_user()
    dovecot_server.append(user, "Train/Spam", sample.train_spam)
    dovecot_server.append(user, "Train/Ham", sample.train_ham)
    dovecot_server.append(user, "INBOX", sample.inbox_ham[:10])
    spam = sample.inbox_spam
    dovecot_server.append(user, "Junk", spam[:4])
    dovecot_server.append(user, "Junk", spam[4:6], flags=["$Junk"])
    dovecot_server.append(user, "Junk", spam[6:8], flags=["$Junk", "$NotJunk"])
    config = account_config(dovecot_server, user, spam_action="report")
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    folders = ["INBOX", "Junk"]
    before = snapshot(dovecot_server, user, folders)
    first = run(config, db, monkeypatch, user)
    assert (first.trained_spam, first.trained_ham, first.flagged, first.moved) == (len(sample.train_spam) + 6, len(sample.train_ham) + 2, 0, 0)
    assert snapshot(dovecot_server, user, folders) == before

    # The user marks one "not junk" (leaving $Junk) and moves one back to the inbox.
    junk = {digest_bytes(raw): uid for uid, raw, _ in dovecot_server.folder_messages(user, "Junk")}
    with dovecot_server.client(user, "Junk") as c:
        c.add_flags([junk[digest_bytes(spam[4])]], ["$NotJunk"])
        c.move([junk[digest_bytes(spam[0])]], "INBOX")
    before = snapshot(dovecot_server, user, folders)
    second = run(config, db, monkeypatch, user)
    assert (second.trained_spam, second.trained_ham, second.flagged, second.moved) == (0, 2, 0, 0)
    assert snapshot(dovecot_server, user, folders) == before
    assert trained_labels(config, db, [digest_bytes(spam[0]), digest_bytes(spam[4])]) == {digest_bytes(spam[0]): 0, digest_bytes(spam[4]): 0}
    # The $Junk left beside $NotJunk is not taken for news: no flip back.
    quiet = run(config, db, monkeypatch, user)
    assert (quiet.trained_spam, quiet.trained_ham, quiet.flagged) == (0, 0, 0)


def test_keywords_set_in_the_unsure_folder_are_learnt(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # $Junk and $NotJunk on mail the filter had filed as unsure were ignored:
    # only the classify folders and the spam folder were read for keywords.
    user = setup_mailbox(dovecot_server, sample)
    dovecot_server.append(user, "Junk", [])
    dovecot_server.append(user, "Unsure", [])
    config = account_config(dovecot_server, user, unsure_folder="Unsure")
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    first = run(config, db, monkeypatch, user)
    unsure = dovecot_server.folder_messages(user, "Unsure")
    assert first.unsure == len(unsure) >= 2
    (ham_uid, ham_raw, _), (spam_uid, spam_raw, _) = unsure[:2]
    with dovecot_server.client(user, "Unsure") as c:
        c.add_flags([ham_uid], ["$NotJunk"])
        c.add_flags([spam_uid], ["$Junk"])
    summary = run(config, db, monkeypatch, user)
    assert (summary.trained_ham, summary.trained_spam, summary.moved) == (1, 1, 2)
    assert trained_labels(config, db, [digest_bytes(ham_raw), digest_bytes(spam_raw)]) == {digest_bytes(ham_raw): 0, digest_bytes(spam_raw): 1}
    # Filed as spam_action = "move" files what was learnt: spam in Junk, ham in the inbox.
    assert digest_bytes(spam_raw) in digests(dovecot_server, user, "Junk")
    assert digest_bytes(ham_raw) in digests(dovecot_server, user, "INBOX")
    assert not {digest_bytes(ham_raw), digest_bytes(spam_raw)} & set(digests(dovecot_server, user, "Unsure"))
    assert_nothing_left(config, db, monkeypatch, user)


@pytest.mark.parametrize("junk_exists", [False, True], ids=["first-run-creates-Junk", "Junk-exists"])
def test_keywords_set_after_the_run_filed_a_message_are_news(
    dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, junk_exists: bool
) -> None:
    # The keywords of a message filed or moved by a run were recorded only by
    # the keyword pass of a later run, so what the user set in between was
    # taken as already there: $NotJunk on spam a first run filed in the Junk
    # it created, and $Junk on that message once moved back to the inbox.
    user = setup_mailbox(dovecot_server, sample)
    if junk_exists:
        dovecot_server.append(user, "Junk", [])
    config = account_config(dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    first = run(config, db, monkeypatch, user)
    assert first.created == ([] if junk_exists else ["Junk"])
    uid, raw, _ = dovecot_server.folder_messages(user, "Junk")[0]
    press(dovecot_server, user, "Junk", uid, junk=False)
    second = run(config, db, monkeypatch, user)
    assert (second.trained_ham, second.trained_spam, second.moved) == (1, 0, 1)
    assert digest_bytes(raw) in digests(dovecot_server, user, "INBOX")

    # The user changes their mind in the inbox: "junk" after all.
    uid = next(u for u, r, _ in dovecot_server.folder_messages(user, "INBOX") if digest_bytes(r) == digest_bytes(raw))
    press(dovecot_server, user, "INBOX", uid, junk=True)
    third = run(config, db, monkeypatch, user)
    assert (third.trained_ham, third.trained_spam, third.moved) == (0, 1, 1)
    assert digest_bytes(raw) in digests(dovecot_server, user, "Junk")
    assert trained_labels(config, db, [digest_bytes(raw)]) == {digest_bytes(raw): 1}
    assert_nothing_left(config, db, monkeypatch, user)


def test_mail_kept_for_not_junk_can_later_be_marked_junk(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Kept in the inbox for its $NotJunk, it was recorded with its verdict
    # (spam), so a $Junk set later agreed with the record and was ignored.
    user = dovecot_server.add_user()
    dovecot_server.append(user, "Train/Spam", sample.train_spam)
    dovecot_server.append(user, "Train/Ham", sample.train_ham)
    dovecot_server.append(user, "INBOX", sample.inbox_spam[:6], flags=["$NotJunk"])
    config = account_config(dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    events: list[object] = []
    first = run(config, db, monkeypatch, user, on_event=events.append)
    called_spam = {e.uid for e in events if getattr(e, "kind", "") == "classified" and e.detail.startswith("spam")}  # type: ignore[attr-defined]
    kept = {e.uid for e in events if getattr(e, "kind", "") == "kept"}  # type: ignore[attr-defined]
    assert kept & called_spam and first.moved == 0 and first.trained_spam == len(sample.train_spam)
    uid = min(kept & called_spam)
    raw = next(r for u, r, _ in dovecot_server.folder_messages(user, "INBOX") if u == uid)
    press(dovecot_server, user, "INBOX", uid, junk=True)
    second = run(config, db, monkeypatch, user)
    assert (second.trained_spam, second.trained_ham, second.moved) == (1, 0, 1)
    assert digest_bytes(raw) in digests(dovecot_server, user, "Junk")
    assert trained_labels(config, db, [digest_bytes(raw)]) == {digest_bytes(raw): 1}


def test_json_output_stays_json_with_dry_run_and_verbose(dovecot_server: Dovecot, sample: Sample, tmp_path: Path) -> None:
    # The event lines of --verbose and --dry-run went to stdout ahead of the JSON.
    import json

    user = dovecot_server.add_user()
    dovecot_server.append(user, "Train/Spam", sample.train_spam[:20])
    dovecot_server.append(user, "Train/Ham", sample.train_ham[:20])
    dovecot_server.append(user, "INBOX", sample.inbox_spam[:3] + sample.inbox_ham[:3])
    config = write_config(tmp_path / "c.toml", dovecot_server, user)
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    for args in (["--verbose"], ["--dry-run"], ["--dry-run", "--verbose"]):
        if args == ["--verbose"]:
            dovecot_server.append(user, "INBOX", sample.inbox_ham[3:4])
        else:
            dovecot_server.append(user, "INBOX", sample.inbox_ham[4:6])
        done = subprocess.run(spamfilter_cmd(config, db, "--format", "json", *args), env=env_with(user.password), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["account"] == "test" and summary["dry_run"] == ("--dry-run" in args) and summary["classified"] > 0
        assert "INBOX uid " in done.stderr and ": classified " in done.stderr  # the events, on stderr


def test_a_folder_name_with_list_wildcards_is_taken_as_written(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # LIST "Ju*" answers "Junk": the spam folder "Ju*" was taken to exist,
    # never created, and the run stopped with 71 ("SELECT Ju*: ... doesn't exist").
    user = setup_mailbox(dovecot_server, sample)
    dovecot_server.append(user, "Junk", [])
    config = account_config(dovecot_server, user, spam_folder="Ju*")
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    summary = run(config, db, monkeypatch, user)
    assert summary.created == ["Ju*"] and summary.moved > 0
    assert len(digests(dovecot_server, user, "Ju*")) == summary.moved
    assert not digests(dovecot_server, user, "Junk")


def test_a_folder_name_ending_in_the_separator_is_a_config_error(dovecot_server: Dovecot, sample: Sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # "Junk/" passed validation: the first run failed to create it ("Ends with
    # hierarchy separator"), every later one with "CREATE Junk/: ALREADYEXISTS".
    user = setup_mailbox(dovecot_server, sample)
    dovecot_server.append(user, "Junk", [])
    config = account_config(dovecot_server, user, spam_folder="Junk/")
    db = f"sqlite:///{tmp_path / 'sf.db'}"
    before = snapshot(dovecot_server, user, ["INBOX", "Junk"])
    with pytest.raises(ConfigError, match=r"imap\.test: folder 'Junk/' ends with the server's hierarchy separator '/'"):
        run(config, db, monkeypatch, user)
    assert snapshot(dovecot_server, user, ["INBOX", "Junk"]) == before
