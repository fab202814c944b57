"""Throughput of `spamfilter imap run` over a 5,000-message folder on a loopback Dovecot.

    python -m benchmarks.imap_run [--messages 5000] [--train 600]

Starts a private Dovecot (tests/dovecot.py), puts `--train` spamassassin
messages (half spam, half ham) in Train/Spam and Train/Ham and the next
`--messages` distinct ones in INBOX, then times, side by side on the same
messages and the same training:

1. `spamfilter imap run`: train from the folders, classify INBOX over IMAP
   (chunked BODY.PEEK[] fetches), set $Junk and MOVE the spam to Junk;
2. `spamfilter classify` of the same messages from a local Maildir (no network);
3. `bogofilter -b -T` classifying the same message files (trained with -B).

Each figure is messages per second of the whole command, start-up included;
the training time is reported separately.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from dovecot import Dovecot  # noqa: E402

from spamfilter.mail import digest_bytes  # noqa: E402

CORPUS = REPO.parent / "shared" / "corpora" / "spamassassin"


def load(n_train: int, n_messages: int) -> tuple[list[bytes], list[bytes], list[bytes]]:
    rows = [line.split() for line in (CORPUS / "index").read_text().splitlines() if line.strip()]
    seen: set[str] = set()
    spam: list[bytes] = []
    ham: list[bytes] = []
    rest: list[bytes] = []
    for label, path in rows:
        raw = (CORPUS / path).read_bytes()
        d = digest_bytes(raw)
        if d in seen:
            continue
        seen.add(d)
        if label == "spam" and len(spam) < n_train // 2:
            spam.append(raw)
        elif label == "ham" and len(ham) < n_train // 2:
            ham.append(raw)
        elif len(rest) < n_messages:
            rest.append(raw)
    return spam, ham, rest


def timed(cmd: list[str], check: bool = True, **kwargs: object) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=check, **kwargs)  # type: ignore[call-overload]
    return time.perf_counter() - started, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--train", type=int, default=600)
    args = parser.parse_args()
    spam, ham, inbox = load(args.train, args.messages)
    n_inbox = len(inbox)
    work = Path(tempfile.mkdtemp(prefix="spamfilter-bench-"))
    spamfilter = [sys.executable, "-m", "spamfilter"]
    results: dict[str, float] = {}
    try:
        with Dovecot.start() as server:
            user = server.add_user()
            server.append(user, "Train/Spam", spam)
            server.append(user, "Train/Ham", ham)
            server.fill_maildir(user, "INBOX", inbox)
            config = work / "config.toml"
            config.write_text(
                "[imap.bench]\n"
                f'host = "{server.host}"\nport = {server.tls_port}\nsecurity = "tls"\nca_file = "{server.ca_file}"\n'
                f'username = "{user.name}"\npassword_env = "BENCH_IMAP_PASSWORD"\n'
                'train_spam_folder = "Train/Spam"\ntrain_ham_folder = "Train/Ham"\n'
            )
            env = {**os.environ, "BENCH_IMAP_PASSWORD": user.password}
            db = f"sqlite:///{work / 'imap.db'}"
            t_imap, out = timed([*spamfilter, "--config", str(config), "--db", db, "imap", "run", "--format", "json"], env=env)
            summary = json.loads(out)
            results["imap run (train + classify + move)"] = t_imap
            print(f"imap run: {summary}", file=sys.stderr)
            assert summary["classified"] == len(inbox), summary

        # The same messages, local.
        maildir = work / "inbox"
        for sub in ("cur", "new", "tmp"):
            (maildir / sub).mkdir(parents=True)
        for i, raw in enumerate(inbox):
            (maildir / "new" / f"{i}.bench").write_bytes(raw)
        train_dir = work / "train"
        for name, msgs in (("spam", spam), ("ham", ham)):
            (train_dir / name).mkdir(parents=True)
            for i, raw in enumerate(msgs):
                (train_dir / name / f"{i}.eml").write_bytes(raw)
        local_db = f"sqlite:///{work / 'local.db'}"
        t_train, _ = timed([*spamfilter, "--db", local_db, "train", "--spam", str(train_dir / "spam"), "--ham", str(train_dir / "ham")])
        t_local, _ = timed([*spamfilter, "--db", local_db, "classify", "--format", "jsonl", str(maildir)])
        results["spamfilter classify (local Maildir)"] = t_local
        if shutil.which("bogofilter"):
            bogo_db = work / "bogo"
            bogo_db.mkdir()
            timed(["bogofilter", "-d", str(bogo_db), "-s", "-B", str(train_dir / "spam")])
            timed(["bogofilter", "-d", str(bogo_db), "-n", "-B", str(train_dir / "ham")])
            files = "\n".join(str(p) for p in sorted((maildir / "new").iterdir())) + "\n"
            # Its exit status is the last message's verdict (0, 1 or 2).
            t_bogo, out = timed(["bogofilter", "-d", str(bogo_db), "-b", "-T"], check=False, input=files)
            assert len(out.splitlines()) == n_inbox, "bogofilter did not classify every message"
            results["bogofilter -b -T (local files)"] = t_bogo
    finally:
        shutil.rmtree(work, ignore_errors=True)

    n = len(inbox)
    print(f"{n} messages to classify, {len(spam)} spam + {len(ham)} ham to train (spamassassin)")
    print(f"local training alone: {t_train:.1f} s")
    print(f"{'run':<40} {'seconds':>8} {'msg/s':>8}")
    for name, seconds in results.items():
        print(f"{name:<40} {seconds:>8.1f} {n / seconds:>8.0f}")


if __name__ == "__main__":
    main()
