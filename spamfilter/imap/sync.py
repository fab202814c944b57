"""``spamfilter imap run``: filter IMAP folders in place and learn from the user.

One pass over an account (``run_account``):

1. trains the messages new in the training folders (and files them in the
   spam folder / the inbox when ``trained_action = "move"``);
2. looks at the messages new in the spam folder: one the filter did not put
   there was moved there by the user, and is trained as spam, unless it
   carries a ``$NotJunk`` the run has not seen (the user's word that it is
   ham: trained as ham, and filed in the inbox when spam is moved);
3. classifies the messages new in each classify folder and acts on the
   verdict (move to the spam or unsure folder, or set ``$Junk``, or only
   report); a message the filter had filed as spam or unsure that shows up
   again in a classify folder was moved back by the user, and is trained as
   ham;
4. reads the ``$Junk`` / ``$NotJunk`` keywords mail clients set in the
   classify, unsure and spam folders, and trains the messages whose
   keyword contradicts what the filter believes.

"New" means a UID not handled before in that folder under its current
UIDVALIDITY (table ``imap_uids``). What the filter decided about each message
is kept by digest (table ``imap_messages``), so a message is recognised
wherever it moves, and a UIDVALIDITY change costs a re-read, not a retraining.

Crash safety: a move is recorded as pending, with the folder it starts
from, in its own committed transaction before it is sent, and as done after.
A run killed (or cut off) at any point leaves either the message in its
source folder with a pending record, and the next pass over that folder
finishes the move without classifying again, or the message moved, and the
pending record is closed: by the target folder's pass when moves are atomic
(RFC 6851 MOVE), else by the source folder's pass, which first looks for the
copy in the target (by digest, then Message-ID) so that it is not copied
twice. Messages are never expunged except by the COPY fallback of a move,
which expunges exactly the copied UIDs.

A message recorded as filed in the spam or unsure folder that shows up in a
classify folder while a copy is still in the spam or unsure folder is a
second copy (a label, a Sieve ``:copy``), classified like new mail; only when
the spam folder no longer holds it was it moved back by the user.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import replace

from spamfilter.answers import Refusal, Verdict
from spamfilter.config import ImapAccount
from spamfilter.errors import ImapError, ImapUnavailable, NotTrainedError
from spamfilter.filter import Filter
from spamfilter.imap import state as imap_state
from spamfilter.imap.session import JUNK, NOT_JUNK, Fetched, ImapSession, account_password, with_flags
from spamfilter.imap.state import JUNK_BIT, NOT_JUNK_BIT, Arrival, ImapRecord, ImapState, arrival, finished_move, keyword_bits, label_of, log_odds_of, needs_training
from spamfilter.imap.summary import Event, RunSummary
from spamfilter.mail import MailItem, digest_bytes, former_digest, not_mail
from spamfilter.nb import model
from spamfilter.store import nothing_to_check

EventSink = Callable[[Event], None]

#: How an event tells a move or flag that a broken-off pass made without hearing so.
_BROKEN_OFF = " (by a pass that was broken off)"


class ImapRun:
    """One pass over one account on an open session."""

    def __init__(
        self,
        spamfilter: Filter,
        account: ImapAccount,
        summary: RunSummary,
        *,
        dry_run: bool = False,
        on_event: EventSink | None = None,
        use_move: bool = True,
        still_held: Callable[[], None],
    ) -> None:
        self.filter = spamfilter
        # Asked before each step that must not be done twice (training,
        # keywords, moves): raises StoreBusyError if the run's lock was
        # lost and another run holds it now (Store.exclusive).
        self.still_held = still_held
        self.account = account
        self.summary = summary
        self.dry_run = dry_run
        self.on_event = on_event
        self.use_move = use_move
        self.inbox = account.classify_folders[0]
        self.state = ImapState(spamfilter, account.name, dry_run=dry_run)

    # -- plumbing -----------------------------------------------------------

    def _event(self, kind: str, folder: str, uid: int, detail: str) -> None:
        if self.on_event is not None:
            self.on_event(Event(kind, folder, uid, detail, self.dry_run))

    def _item(self, folder: str, message: Fetched, digest: str | None = None) -> MailItem:
        return MailItem(f"imap:{self.account.name}/{folder}/{message.uid}", message.raw, known_digest=digest)

    def _new(self, session: ImapSession, folder: str) -> Iterator[tuple[list[Fetched], list[str]]]:
        """Select ``folder``, finish the moves out of it that a broken run
        left pending, and yield its unhandled messages in chunks, each with
        the messages' digests."""
        validity = session.select(folder, readonly=self.dry_run)
        known = self.state.handled(folder, validity)
        uids = session.uids()
        # Moves out of here a broken run left (a dry run finishes none).
        pending = [] if self.dry_run else self.state.pending(folder)
        # The originals of a COPY-and-\\Deleted move broken off before its
        # expunge are still here to finish, \\Deleted as they are.
        present = set(session.uids(deleted=True) if pending else uids)
        if known is None:
            # Renumbered (or new): no UID recorded here means anything, so
            # the messages a broken run was moving out are found by digest;
            # the new UIDVALIDITY is recorded only once their moves are
            # finished, so a pass broken off meanwhile looks for them again.
            handled = self._pending_here(session, pending, sorted(present))
            self._finish_pending(session, folder, pending, handled)
            self.state.renumbered(folder, validity)
        else:
            self.state.forget_uids(folder, [u for u in known if u not in present])
            handled = {u: d for u, d in known.items() if u in present}
            self._finish_pending(session, folder, pending, handled)
        new = [u for u in uids if u not in handled]
        self._event("scanned", folder, 0, str(len(new)))
        for chunk in session.fetch(new, chunk_size=self.account.chunk_size, chunk_bytes=self.account.chunk_bytes):
            digests = [digest_bytes(m.raw) for m in chunk]
            self.state.adopt({former: d for m, d in zip(chunk, digests) if (former := former_digest(m.raw, d)) is not None})
            self.summary.see(folder, validity, zip([m.uid for m in chunk], digests))
            self._event("fetched", folder, 0, str(len(chunk)))
            yield chunk, digests

    def _pending_here(self, session: ImapSession, pending: Sequence[ImapRecord], uids: Sequence[int]) -> dict[int, str]:
        """UID -> digest of the messages among ``uids`` of a renumbered
        folder that a broken run was moving out (``pending``, their records):
        read from the server, since the UIDs recorded for them are void.
        Without such records (nearly always) nothing is read."""
        digests = {r.digest for r in pending}
        if not digests:
            return {}
        return {m.uid: d for chunk in self._fetch(session, uids) for m in chunk if (d := digest_bytes(m.raw)) in digests}

    def _finish_pending(self, session: ImapSession, folder: str, pending: Sequence[ImapRecord], handled: dict[int, str]) -> None:
        """Moves out of ``folder`` recorded as started but not as done
        (``pending``: the run doing them was killed or lost its connection):
        the messages still here are moved now; for the others the move is
        closed."""
        if not pending:
            return
        here: dict[str, list[int]] = {}
        for uid, digest in handled.items():
            here.setdefault(digest, []).append(uid)
        again = {uid: r for r in pending for uid in here.get(r.digest, [])}
        finished = [finished_move(r) for r in pending if r.digest not in here]
        if finished:
            self.state.commit(folder, finished)
            self.summary.moved += len(finished)  # gone from here: the broken pass moved them
            for r in finished:  # their UIDs here were not recorded
                self._event("moved", folder, 0, f"to {r.folder}{_BROKEN_OFF}")
        if again:
            messages = [m for chunk in self._fetch(session, sorted(again)) for m in chunk]
            self._move(session, folder, [(m, again[m.uid]) for m in messages], redo=True)

    def _fetch(self, session: ImapSession, uids: Sequence[int]) -> Iterator[list[Fetched]]:
        return session.fetch(uids, chunk_size=self.account.chunk_size, chunk_bytes=self.account.chunk_bytes)

    def _train(self, is_spam: bool, folder: str, messages: Sequence[Fetched], why: str, digests: Sequence[str] | None = None) -> set[int]:
        """Train ``messages`` of ``folder`` (their ``digests`` when known);
        the UIDs of those refused (not mail), which were not trained."""
        known = digests if digests is not None else [None] * len(messages)
        items = [self._item(folder, m, d) for m, d in zip(messages, known)]
        unchanged = {messages[i].uid for i in self.state.unchanged_by_training([item.digest for item in items], is_spam)} if messages else set()
        if self.dry_run or not messages:
            # What the real run would refuse before parsing (binary junk,
            # an empty message) is refused here too, and leave unchanged.
            refusals = [Refusal(item.source, reason) for item in items if (reason := not_mail(item)) is not None]
            refused_sources = {r.source for r in refusals}
            counted = sum(1 for m, item in zip(messages, items) if m.uid not in unchanged and item.source not in refused_sources)
            self.summary.trained_spam += counted if is_spam else 0
            self.summary.trained_ham += 0 if is_spam else counted
        else:
            self.still_held()
            result = self.filter.mark([(is_spam, item) for item in items])
            self.summary.trained_spam += result.trained_spam + (result.relabelled if is_spam else 0)
            self.summary.trained_ham += result.trained_ham + (0 if is_spam else result.relabelled)
            refusals = list(result.refused)
        uid_of = {item.source: m.uid for item, m in zip(items, messages)}
        refused: set[int] = set()
        for refusal in refusals:
            self.summary.errors += 1
            refused.add(uid_of.get(refusal.source, 0))
            self._event("refused", folder, uid_of.get(refusal.source, 0), refusal.why)
        for m in messages:
            if m.uid not in refused:
                self._event("trained", folder, m.uid, f"{'spam' if is_spam else 'ham'} ({why}{', trained so already' if m.uid in unchanged else ''})")
        return refused

    def _keywords(
        self, session: ImapSession, folder: str, uids: Sequence[int], add: Sequence[str], remove: Sequence[str], *, filing: bool = False, digests: Sequence[str] = ()
    ) -> tuple[Sequence[str], Sequence[str]]:
        """Add and remove keywords; one the folder would not keep is left
        out, or, where keywords are the action (``spam_action =
        "keyword"``), stops the run: reported as set, it would not be.
        ``spam_action = "report"`` changes none but those of training mail
        it files (``filing``). The keywords added and removed."""
        if not uids or (self.account.spam_action == "report" and not filing):
            return (), ()
        lost = [k for k in add if not self.dry_run and not session.keeps(k)]
        if lost:
            if self.account.spam_action == "keyword":
                raise ImapError(
                    f"{self.account.host}: {folder}: the server does not keep the keyword {lost[0]} here (not in its PERMANENTFLAGS: may this user write flags?)"
                )
            self._event("skipped", folder, 0, f"{' '.join(lost)}: the server keeps no such keyword here")
            add = [k for k in add if k not in lost]
            if not add and not remove:
                return (), ()
        if not self.dry_run:
            self.still_held()
            # Sent again: a copy found carrying them later was not set by a lost answer.
            self.summary.flag_resent(folder, digests, add)
            try:
                uids = session.set_keywords(uids, add, remove)  # less any another client expunged
            except ImapUnavailable:
                # The server may have set them before the answer was lost:
                # the pass after finds them set (see _act) and counts them
                # then, by ``digests`` (the messages' UIDs may change).
                self.summary.flag_unsure(folder, digests, add)
                raise
        # Told once done (or, in a dry run, as what would be done): a change
        # broken off is told by the pass that does it or finds it done.
        for uid in uids:
            self._event("flagged", folder, uid, " ".join([*(f"+{k}" for k in add), *(f"-{k}" for k in remove)]))
        self.summary.flagged += len(uids)
        return add, remove

    def _handled(self, folder: str, records: Sequence[ImapRecord], messages: Sequence[tuple[Fetched, str]]) -> None:
        """Write ``records`` and mark (message, digest) ``messages`` handled in
        ``folder``, with the keywords they carry now: a later change is news."""
        self.state.commit(folder, records, [(m.uid, d) for m, d in messages], [(m.uid, keyword_bits(m.flags)) for m, _ in messages])

    def _move(self, session: ImapSession, folder: str, moves: Sequence[tuple[Fetched, ImapRecord]], *, redo: bool = False) -> None:
        """Move messages of the selected ``folder`` to their records' folders:
        record the moves as pending (their UIDs here as handled, so a rerun
        finds them through ``_finish_pending``), move, then record them done.
        ``redo``: finishing a move a broken run started."""
        if not moves:
            return
        if not self.dry_run:
            self.still_held()
        moves = [(m, replace(r, pending=True, source=folder)) for m, r in moves]
        self.state.commit(folder, [r for _, r in moves], [(m.uid, r.digest) for m, r in moves])
        by_target: dict[str, list[tuple[Fetched, ImapRecord]]] = {}
        for m, r in moves:
            by_target.setdefault(r.folder, []).append((m, r))
        arrivals: list[Arrival] = []
        gone: set[int] = set()  # expunged by another client before they could be moved
        told: list[tuple[int, str]] = []
        for target, messages in by_target.items():
            uids = [m.uid for m, _ in messages]
            missing: set[int] = set()
            if not self.dry_run:
                self.still_held()
                self.summary.moving(target, [r.digest for _, r in messages])
                sending = self._not_yet_copied(session, folder, target, messages) if redo and not self._atomic_moves(session) else uids
                moved = session.move(sending, target, use_move=self.use_move)
                missing = set(sending) - set(moved.done)
                gone.update(missing)
                if moved.uidvalidity is not None:
                    arrivals.append(arrival(target, moved.uidvalidity, moved.uids, messages))
            told.extend((uid, target) for uid in uids if uid not in missing)
        # What another client expunged is recorded where it was last seen:
        # should it come back (that client moved it), it was not filed.
        done = [finished_move(replace(r, folder=folder) if m.uid in gone else r) for m, r in moves]
        self.state.moves_done(folder, done, [m.uid for m, _ in moves], arrivals)
        # Told once recorded done, as flags are once set (see _keywords): a
        # pass broken off before, even between two targets, leaves all of
        # these to the pass that finishes them (_finish_pending tells them).
        for uid, target in told:
            self._event("moved", folder, uid, f"to {target}")
        # Counted where a move is recorded done: a pass that breaks off
        # before this leaves them to the next pass, which counts them there.
        self.summary.moved += len(moves) - len(gone)

    def _atomic_moves(self, session: ImapSession) -> bool:
        """Whether moves are RFC 6851 MOVEs: a message is then never in both folders."""
        return self.use_move and session.has("MOVE")

    def _not_yet_copied(self, session: ImapSession, folder: str, target: str, moves: Sequence[tuple[Fetched, ImapRecord]]) -> list[int]:
        """For the COPY fallback finishing an interrupted move: the UIDs whose
        copy is not already in ``target`` (known there by digest, or found by
        Message-ID); the others are only expunged here."""
        in_target = self.state.folder_digests(target)
        copied = [m.uid for m, r in moves if r.digest in in_target]
        unsure = [(m, r.digest) for m, r in moves if m.uid not in copied]
        if unsure:
            session.select(target)
            for m, digest in unsure:  # only after a crash, so rarely more than a chunk
                message_id = m.message_id()
                found = session.search_message_id(message_id) if message_id else []
                if found and any(digest_bytes(f.raw) == digest for chunk in self._fetch(session, found) for f in chunk):
                    copied.append(m.uid)
            session.select(folder)
        if copied:
            session.expunge(copied)
        return [m.uid for m, _ in moves if m.uid not in copied]

    # -- the passes ---------------------------------------------------------

    def run(self, session: ImapSession) -> RunSummary:
        """Train, learn from the spam folder, classify, read keywords."""
        a = self.account
        folders = [a.spam_folder, a.unsure_folder, a.train_spam_folder, a.train_ham_folder, *a.classify_folders]
        session.check_names(a, [f for f in folders if f])
        exists = {folder: session.exists(folder) for folder in filter(None, folders)}
        creating = imap_state.folders_to_create(a, {folder for folder, there in exists.items() if not there})
        for folder in exists:
            if folder in creating:
                self.summary.created.append(folder)
                self._event("created", folder, 0, "folder")
                if not self.dry_run:
                    session.ensure_folder(folder)
        # A folder that does not exist yet (a dry run, or one "report" does
        # not create) holds nothing to read.
        usable = {folder for folder, there in exists.items() if there or (folder in creating and not self.dry_run)}
        for folder, is_spam in ((a.train_spam_folder, True), (a.train_ham_folder, False)):
            if folder in usable:
                self._training_folder(session, folder, is_spam)
        if a.spam_folder in usable:
            self._target_folder(session, a.spam_folder, learn=True)
        if a.unsure_folder in usable:
            self._target_folder(session, a.unsure_folder, learn=False)
        for folder in a.classify_folders:
            if folder in usable:
                self._classify_folder(session, folder)
        # The unsure folder before the spam folder, whose pass then sees
        # the mail marked $Junk in it arrive.
        for folder in (*a.classify_folders, a.unsure_folder, a.spam_folder):
            if folder in usable:
                self._keyword_feedback(session, folder)
        return self.summary

    def _training_folder(self, session: ImapSession, folder: str, is_spam: bool) -> None:
        label = model.SPAM if is_spam else model.HAM
        moving = self.account.trained_action == "move"
        target = (self.account.spam_folder if is_spam else self.inbox) if moving else folder
        for chunk, digests in self._new(session, folder):
            records = self.state.records(digests)
            fresh = [(m, d) for m, d in zip(chunk, digests) if needs_training(records.get(d), label)]
            refused = self._train(is_spam, folder, [m for m, _ in fresh], f"in {folder}", [d for _, d in fresh])
            if refused:
                # Not mail: handled (not read again each run), neither
                # recorded as trained nor filed.
                self._handled(folder, [], [(m, d) for m, d in zip(chunk, digests) if m.uid in refused])
                kept = [(m, d) for m, d in zip(chunk, digests) if m.uid not in refused]
                chunk, digests = [m for m, _ in kept], [d for _, d in kept]
            if is_spam and moving:
                chunk = with_flags(chunk, *self._keywords(session, folder, [m.uid for m in chunk], [JUNK], [NOT_JUNK], filing=True))
            new_records = [ImapRecord(d, label, "train", target) for d in digests]
            if moving:
                self._move(session, folder, list(zip(chunk, new_records)))
            else:
                self._handled(folder, new_records, list(zip(chunk, digests)))

    def _target_folder(self, session: ImapSession, folder: str, *, learn: bool) -> None:
        """The spam (``learn``) or unsure folder: a message the filter put
        here is recognised; one the user put in the spam folder is trained
        as spam."""
        atomic = self._atomic_moves(session) if not self.dry_run else True
        for chunk, digests in self._new(session, folder):
            records = self.state.records(digests)
            by_user: list[Fetched] = []
            said_ham: list[Fetched] = []
            updates: list[ImapRecord] = []
            arrived: list[ImapRecord] = []
            for m, d in zip(chunk, digests):
                r = records.get(d)
                if r is not None and r.folder == folder:
                    # Moved here by a run. If that run broke off before it
                    # recorded the move as done, a MOVE is known to be
                    # complete; after a COPY the original may still be in
                    # the source folder, whose pass finishes the move.
                    if r.pending and atomic:
                        updates.append(finished_move(r))
                        arrived.append(r)
                elif not learn:
                    continue
                elif m.has_keyword(NOT_JUNK) and label_of(r) != model.HAM:
                    # Marked "not junk" where the run did not see it (a mail
                    # client, before or after a move here): the user's word
                    # that it is ham. A message the run knows as ham carries
                    # its $NotJunk from before; moving it here is the news.
                    said_ham.append(m)
                elif r is not None and r.label == model.SPAM and r.origin != "filter":
                    updates.append(replace(r, folder=folder, pending=False))
                else:
                    by_user.append(m)
                    updates.append(ImapRecord(d, model.SPAM, "user", folder, False, r.log_odds if r else None))
            digest_of = dict(zip([m.uid for m in chunk], digests))
            self._train(True, folder, by_user, f"moved to {folder}", [digest_of[m.uid] for m in by_user])
            current = {m.uid: m for m in chunk} | {m.uid: m for m in with_flags(by_user, *self._keywords(session, folder, [m.uid for m in by_user], [JUNK], [NOT_JUNK]))}
            ham = {m.uid for m in said_ham}
            self._handled(folder, updates, [(current[u], d) for u, d in digest_of.items() if u not in ham])
            self.summary.moved += len(arrived)  # by a pass that broke off before it heard so
            for r in arrived:
                self._event("moved", r.source or folder, 0, f"to {folder}{_BROKEN_OFF}")
            self._relabel(session, folder, said_ham, [digest_of[m.uid] for m in said_ham], False, new=True)

    def _classify_folder(self, session: ImapSession, folder: str) -> None:
        a = self.account
        returned_to = {a.spam_folder, a.unsure_folder} - {""}
        # What the spam and unsure folders hold now (their passes ran first):
        # a message recorded as filed there that is also still there is a
        # second copy (a mail client's label, a Sieve :copy), not one the
        # user moved back.
        filed = self.state.folder_digests(a.spam_folder) | self.state.folder_digests(a.unsure_folder)
        # A copy of a message still in a training folder is classified as
        # new mail (copied there to teach); one moved out of it is the user's.
        taught = set().union(*(self.state.folder_digests(f) for f in (a.train_spam_folder, a.train_ham_folder) if f))
        for chunk, digests in self._new(session, folder):
            if self.summary.limit_left is not None and self.summary.limit_left <= 0:
                break
            records = self.state.records(digests)
            unknown: list[Fetched] = []
            handled: list[tuple[Fetched, str]] = []
            updates: list[ImapRecord] = []
            moved_back: list[Fetched] = []
            for m, d in zip(chunk, digests):
                r = records.get(d)
                if r is None or (r.folder in returned_to and d in filed) or (r.origin == "train" and d in taught):
                    unknown.append(m)
                elif r.folder == folder:
                    handled.append((m, d))
                elif r.folder in returned_to and not r.pending:
                    moved_back.append(m)
                    handled.append((m, d))
                    updates.append(ImapRecord(d, model.HAM, "user", folder, False, r.log_odds))
                else:
                    # Moved here by the user from another classify folder, or
                    # a copy of a message whose move is still pending elsewhere.
                    handled.append((m, d))
                    if not r.pending:
                        updates.append(replace(r, folder=folder))
            digest_of = dict(zip([m.uid for m in chunk], digests))
            self._train(False, folder, moved_back, f"moved back to {folder}", [digest_of[m.uid] for m in moved_back])
            back = {m.uid: m for m in with_flags(moved_back, *self._keywords(session, folder, [m.uid for m in moved_back], [NOT_JUNK], [JUNK]))}
            self._handled(folder, updates, [(back.get(m.uid, m), d) for m, d in handled])
            if self.summary.limit_left is not None:
                # --limit counts the messages classified, not those recognised.
                unknown = unknown[: self.summary.limit_left]
                self.summary.limit_left -= len(unknown)
            if unknown:
                # Filed by this pass: a copy in a later chunk was not moved back.
                filed |= self._act(session, folder, unknown, [digest_of[m.uid] for m in unknown])

    def _act(self, session: ImapSession, folder: str, messages: list[Fetched], digests: Sequence[str]) -> set[str]:
        """Classify and file ``messages`` of ``folder``; the digests of those moved out."""
        a = self.account
        try:
            results = list(self.filter.classify(self._item(folder, m, d) for m, d in zip(messages, digests)))
        except NotTrainedError:
            if not self.dry_run:
                raise
            # A dry run on an empty model: the real run trains first.
            for m in messages:
                self._event("classified", folder, m.uid, "after training (the model is not trained yet)")
            return set()
        stay: list[ImapRecord] = []
        handled: list[tuple[Fetched, str]] = []
        moves: list[tuple[Fetched, ImapRecord]] = []
        junk: list[tuple[Fetched, str]] = []
        junk_before: list[tuple[int, str]] = []  # (uid, digest) of spam that carries $Junk already
        for m, d, result in zip(messages, digests, results):
            if isinstance(result, Refusal):
                self._event("refused", folder, m.uid, result.why)
                handled.append((m, d))
                continue
            assert isinstance(result, Verdict)
            label = result.verdict.code
            self._event("classified", folder, m.uid, f"{result.verdict} (log-odds {result.log_odds:+.2f})")
            target = folder
            if m.has_keyword(NOT_JUNK):
                # Marked "not junk" before the filter saw it (a mail client
                # between two runs): the user's word stands; it stays as it is.
                # Recorded as ham, untrained (origin "filter"): what the run
                # now believes, so a $Junk set later is news and trains it.
                self._event("kept", folder, m.uid, f"{NOT_JUNK} set by the user")
                label = model.HAM
            elif label == model.SPAM and a.spam_action != "report":
                if not m.has_keyword(JUNK):
                    junk.append((m, d))
                else:
                    junk_before.append((m.uid, d))
                if a.spam_action == "move":
                    target = a.spam_folder
            elif label == model.UNSURE and a.unsure_folder and a.spam_action == "move":
                target = a.unsure_folder
            record = ImapRecord(d, label, "filter", target, target != folder, result.log_odds)
            if target == folder:
                stay.append(record)
                handled.append((m, d))
            else:
                moves.append((m, record))
        # Keywords first: a message that reaches the spam folder carries $Junk.
        keywords = self._keywords(session, folder, [m.uid for m, _ in junk], [JUNK], [], digests=[d for _, d in junk])
        flagged = {m.uid: m for m in with_flags([m for m, _ in junk], *keywords)}
        self._handled(folder, stay, [(flagged.get(m.uid, m), d) for m, d in handled])
        self._count_classified(folder, results, junk_before)
        self._move(session, folder, [(flagged.get(m.uid, m), r) for m, r in moves])
        return {r.digest for _, r in moves}

    def _count_classified(self, folder: str, results: Sequence[Verdict | Refusal], junk_before: Sequence[tuple[int, str]]) -> None:
        """Count a chunk's verdicts once recorded (a pass broken off before
        that classifies them again), and the $Junk that a broken pass of this
        run had set on its ``junk_before`` (uid, digest) without hearing so."""
        for result in results:
            if isinstance(result, Verdict):
                self.summary.add_verdict(result.verdict)
            else:
                self.summary.errors += 1
        for uid in self.summary.flag_found(folder, junk_before, JUNK):
            self._event("flagged", folder, uid, f"+{JUNK}{_BROKEN_OFF}")

    def _keyword_feedback(self, session: ImapSession, folder: str) -> None:
        """Train messages on which the user set $Junk or $NotJunk since the
        last look. Only a change counts: a keyword that was there when the
        message was first handled (recorded then, with those the run set) is
        not news, and two copies of one message with different keywords do
        not make the label flip on every run. A newly set $NotJunk wins over
        a $Junk left in place. A UID handled without its keywords recorded
        (by a version that recorded them only here) gets them recorded."""
        validity = session.select(folder, readonly=self.dry_run)
        junk = session.with_keyword(JUNK)
        not_junk = session.with_keyword(NOT_JUNK)
        handled = self.state.keywords(folder, validity)
        if handled is None:
            return  # renumbered since its pass: next run
        now = {u: (u in junk) * JUNK_BIT | (u in not_junk) * NOT_JUNK_BIT for u in handled}
        gained = {u: now[u] & ~before for u, (_, before) in handled.items() if before is not None}
        changed = {u: handled[u][0] for u, bits in gained.items() if bits}
        records = self.state.records(list(set(changed.values())))
        to_ham = [u for u, d in changed.items() if gained[u] & NOT_JUNK_BIT and label_of(records.get(d)) != model.HAM]
        to_spam = [u for u, d in changed.items() if gained[u] == JUNK_BIT and label_of(records.get(d)) != model.SPAM]
        for uids, is_spam in ((to_spam, True), (to_ham, False)):
            for messages in self._fetch(session, sorted(uids)):
                if self._relabel(session, folder, messages, [changed[m.uid] for m in messages], is_spam):
                    for m in messages:
                        now[m.uid] &= ~(NOT_JUNK_BIT if is_spam else JUNK_BIT)
        self.state.set_keywords(folder, [(u, k) for u, k in now.items() if handled[u][1] != k])

    def _relabel(self, session: ImapSession, folder: str, messages: Sequence[Fetched], digests: Sequence[str], is_spam: bool, *, new: bool = False) -> bool:
        """Train ``messages`` of ``folder`` (with their ``digests``) as the
        user marked them ($Junk: ``is_spam``; $NotJunk), drop the other
        keyword, and record them: with ``spam_action = "move"`` spam marked
        outside the spam folder is moved there and ham marked in it or in
        the unsure folder to the inbox; otherwise they stay. ``new``: not yet handled in ``folder``.
        Whether the other keyword was removed (``report`` leaves it)."""
        if not messages:
            return False
        label, mark = (model.SPAM, JUNK) if is_spam else (model.HAM, NOT_JUNK)
        target = folder
        if self.account.spam_action == "move":
            if is_spam and folder != self.account.spam_folder:
                target = self.account.spam_folder
            elif not is_spam and folder in (self.account.spam_folder, self.account.unsure_folder):
                target = self.inbox
        self._train(is_spam, folder, messages, f"marked {mark}", digests)
        # The other keyword goes, so the message says one thing.
        added, removed = self._keywords(session, folder, [m.uid for m in messages], [], [NOT_JUNK if is_spam else JUNK])
        messages = with_flags(messages, added, removed)
        known = self.state.records(digests)
        records = [ImapRecord(d, label, "user", target, False, log_odds_of(known.get(d))) for d in digests]
        if target != folder:
            self._move(session, folder, list(zip(messages, records)))
        elif new:
            self._handled(folder, records, list(zip(messages, digests)))
        else:
            self.state.commit(folder, records)
        return bool(removed)


def run_account(
    spamfilter: Filter,
    account: ImapAccount,
    *,
    dry_run: bool = False,
    limit: int | None = None,
    on_event: EventSink | None = None,
    sleep: Callable[[float], None] = time.sleep,
    use_move: bool = True,
) -> RunSummary:
    """One pass over ``account``, reconnecting after network errors.

    Each pass is idempotent, so after a dropped connection the pass simply
    starts again; after ``account.retries`` reconnects (1, 2, 4, ... seconds
    apart, at most a minute) ``ImapUnavailable`` is raised. What was done before stays recorded.
    A refused login (``ImapAuthError``) is not retried.
    """
    password = account_password(account)
    summary = RunSummary(limit_left=limit)
    # One run per account at a time (cron runs that overlap, a --loop
    # left running): two moved the same spam to the spam folder twice.
    # A second one ends at once with StoreBusyError; a dry run changes
    # nothing and takes no lock.
    with nullcontext(nothing_to_check) if dry_run else spamfilter.store.exclusive(f"an imap run of account {account.name!r}") as still_held:
        return _passes(spamfilter, account, password, summary, dry_run=dry_run, on_event=on_event, sleep=sleep, use_move=use_move, still_held=still_held)


def _passes(
    spamfilter: Filter,
    account: ImapAccount,
    password: str,
    summary: RunSummary,
    *,
    dry_run: bool,
    on_event: EventSink | None,
    sleep: Callable[[float], None],
    use_move: bool,
    still_held: Callable[[], None],
) -> RunSummary:
    """`run_account`'s passes: one, or more after network errors."""
    attempt = 0
    first: ImapUnavailable | None = None
    while True:
        try:
            with ImapSession.connect(account, password) as session:
                run = ImapRun(spamfilter, account, summary, dry_run=dry_run, on_event=on_event, use_move=use_move, still_held=still_held)
                return run.run(session)
        except ImapUnavailable as exc:
            first = first or exc
            if attempt >= account.retries:
                tries = "1 attempt" if attempt == 0 else f"{attempt + 1} attempts"
                why = str(exc) if first is exc else f"{first}; then {exc}"
                raise ImapUnavailable(f"{why} (gave up after {tries}{'' if dry_run else summary.so_far()})") from None
            sleep(min(2.0**attempt, 60.0))  # at most a minute: 20 retries doubling waited 6 days
            attempt += 1
            summary.retries += 1
