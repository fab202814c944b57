"""Maintenance of a user's model: ``check``, ``prune``, ``reselect``,
``vacuum``, and the counts file (``export_counts`` / ``import_counts``), over
the store a ``Filter`` uses (``spamfilter db check | prune | reselect |
vacuum | export | import``).

    from spamfilter.config import load_config
    from spamfilter.filter import Filter
    from spamfilter.tools.maintenance import Maintenance

    with Filter.open(load_config()) as f:
        report = Maintenance(f.store).check()
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import TextIO

import numpy as np

from spamfilter.config import ModelConfig
from spamfilter.counts import MAX_COUNT, ClassCounts, FeatureStats, IntArray, TokenCounts
from spamfilter.errors import CountsFileError, ModelNotEmpty, StoreError
from spamfilter.filter import dependence
from spamfilter.filter.scoring import changed_settings
from spamfilter.nb import model
from spamfilter.nb.calibration import MAP_BINS, FloatArray
from spamfilter.retry import retrying
from spamfilter.store import Store, StoreTransaction
from spamfilter.tokenizer.features import FEATURE_NAMES
from spamfilter.tools.counts_file import COUNTS_HEADER, RECORD_SETTINGS, TOTALS_KEYS, CountsReader, escape_token
from spamfilter.verdicts import Label


class Maintenance:
    """Checks, prunes, vacuums, exports and imports the model of one store's owner."""

    def __init__(self, store: Store, write_deadline: float = 0.0) -> None:
        self.store = store
        #: Seconds ``prune`` is tried again while the database is busy; a
        #: transaction PostgreSQL ended to break a deadlock (with a `forget`
        #: or `mark` holding a ledger entry it rewrites) is tried again
        #: whatever this is (``retry.retrying``).
        self.write_deadline = write_deadline

    def check(self) -> CheckReport:
        """Verify that the stored counts of this user's model agree with each
        other, in one read snapshot (``spamfilter db check``).

        With the ledger's per-message token counts L and the token table T:

            class_totals.messages[c]     = ledger rows of class c + untracked
            class_totals.terms[c]        = sum_j T.terms[c,j]   (= sum of L's counts + untracked)
            class_totals.binary_terms[c] = sum_j T.docs[c,j]    (= sum of L's sizes + untracked)
            doc_histogram[c,k]           = #{j : T.docs[c,j] = k}, k = 0 included
            T[j]                         = sum over the ledger's messages of L[j]

        plus every count a whole number of at most MAX_COUNT (2^62 - 1;
        the comparisons are skipped when one is not), no negative count, no
        token in no message, terms >= docs and docs <= messages per class,
        and SQLite's integrity check. The last
        equation is the strongest; it is skipped for a store that was pruned or
        imported into (``untracked`` not zero), whose ledger no longer holds
        every count. On a SQLite file that fails the integrity check the
        counts may not be readable at all: the report then says so and lists
        what the integrity check found.
        """
        store = self.store
        problems = store.integrity_check()
        if problems is None:
            integrity = CheckItem("SQLite integrity_check", "skipped (not SQLite)")
        else:
            found = _Findings()
            found.extend(problems)
            integrity = found.item("SQLite integrity_check")
        try:
            with store.snapshot() as tx:
                found = _Findings()
                found.extend(tx.counts_out_of_range())
            in_range = found.item(f"every count is a whole number no larger than {MAX_COUNT} (2^62 - 1), every trained message ham or spam at a time")
            if in_range.status == "ok":
                items = [in_range, *self._compare_counts()]
            else:
                items = [in_range, CheckItem("the counts compared with each other and the ledger", "skipped (a count is out of range)")]
        except StoreError as exc:
            if not problems:
                raise
            items = [CheckItem("the stored counts", f"skipped (unreadable: {exc})")]
        return CheckReport(store.owner, store.display_url, (*items, integrity))

    def _compare_counts(self) -> list[CheckItem]:
        """The comparisons of ``check`` but SQLite's integrity check."""
        with self.store.snapshot() as tx:
            totals = tx.totals()
            untracked = tx.untracked().table()
            exact = not untracked.any()
            damaged = _Findings()
            ledger_rows, per_token = _ledger_sums(tx.iter_ledger(on_damaged=lambda d, why: damaged.add(f"message {d}: {why}")), per_token=exact)
            scan = _TokenScan(totals.messages.tolist())
            for token, hd, sd, ht, st, _ in tx.iter_tokens():
                row = [hd, sd, ht, st]
                scan.add(token, row)
                if exact:
                    expected = per_token.pop(token, None)
                    if expected != row:
                        scan.differ.add(f"token {token!r}: stored {row}, ledger {expected or [0, 0, 0, 0]}")
            for token, expected in sorted(per_token.items()):
                scan.differ.add(f"token {token!r}: not stored, ledger {expected}")
            pairs = dependence.differences(tx)
            features = _features_item(tx, imported=bool((untracked > 0).any()))
        stored = np.stack([totals.messages, totals.terms, totals.binary_terms])
        scan.negative.extend(f"class_totals {Label(c).decision} {name} is {int(stored[i, c])}" for i, name in enumerate(_TOTAL_NAMES) for c in (0, 1) if stored[i, c] < 0)
        for c in (0, 1):
            scan.negative.extend(f"doc_histogram {Label(c).decision} count {k} has {n} tokens" for k, n in totals.histogram[c].tolist() if n < 0)
        sums = scan.sums
        token_sums = np.array([[sums[2], sums[3]], [sums[0], sums[1]]], dtype=np.int64)
        plus = " + untracked" if not exact else ""
        items = [
            damaged.item("every ledger entry can be read"),
            scan.negative.item("no count is negative"),
            scan.empty.item("every stored token is in a message"),
            scan.uneven.item("occurrences >= messages >= 1 per class"),
            scan.beyond.item("no token is in more messages than its class has"),
            _compare_item("class totals (terms, binary_terms) = sums over the tokens", stored[1:], token_sums, "the tokens add up to", names=_TOTAL_NAMES[1:]),
            _histogram_item(totals.histogram, scan.histogram),
            _compare_item("class totals = sums over the ledger" + plus, stored, ledger_rows + untracked, "the ledger" + plus + " gives", names=_TOTAL_NAMES),
        ]
        items.append(features)
        if pairs is not None:
            found = _Findings()
            found.extend(pairs)
            items.append(found.item("one-dependence counts = sums over the ledger's messages"))
        if exact:
            items.append(scan.differ.item("token counts = sums over the ledger's messages"))
        else:
            why = [w for w, flag in (("pruned", (untracked[1:] < 0).any()), ("imported", (untracked > 0).any())) if flag]
            items.append(CheckItem("token counts = sums over the ledger's messages", f"skipped ({', '.join(why) or 'pruned'})"))
        return items

    def prune(self, min_count: int, older_than_days: int, *, dry_run: bool = False, today: date | None = None) -> PruneSummary:
        """Delete this user's tokens in fewer than ``min_count`` messages (spam
        and ham together) that were last trained ``older_than_days`` or more
        days ago (0: any day; a token without a date counts as old), in one
        transaction (``spamfilter db prune``).

        The class totals lose the pruned tokens' occurrences, so
        N[c] = sum_j N[c,j] over the tokens left and the multinomial estimates
        theta[c,j] = (N[c,j] + alpha) / (N[c] + alpha*V) still sum to 1 over
        the vocabulary left; message counts (priors, Bernoulli denominators)
        do not change. The pruned tokens leave the ledger's entries too
        (``StoreTransaction.prune_tokens``), so forgetting a message later
        subtracts only what is left of it, and a one-dependence selection's
        pair counts are counted again from the entries left. SQLite keeps the freed pages
        for reuse; ``vacuum`` gives them back to the file system.
        """
        if min_count < 0 or older_than_days < 0:
            raise ValueError("min_count and older_than_days must be >= 0")
        today = today or datetime.now(timezone.utc).date()
        # The sizes are of the file with its WAL copied in where readers let
        # it be: the deletes fill the WAL, which would count twice.
        checkpointed = dry_run or self.store.checkpoint()
        size_before = self.store.size_bytes()

        def step() -> tuple[int, int, ClassCounts]:
            with self.store.begin() as tx:
                if not dry_run:
                    tx.exclude_writers()  # before the count, or one a trainer commits meanwhile is left out of it
                before = tx.totals().vocabulary_size
                removed, counts = tx.prune_tokens(min_count, today - timedelta(days=older_than_days), dry_run=dry_run)
                if removed and not dry_run:
                    dependence.recount(tx)  # the entries' sizes, which a selection's pairs sum, changed
            return before, removed, counts

        before, removed, counts = retrying(step, self.write_deadline)
        checkpointed = dry_run or (self.store.checkpoint() and checkpointed)
        return PruneSummary(
            user=self.store.owner,
            tokens_before=before,
            tokens_removed=removed,
            ham_terms_removed=int(counts.terms[model.HAM]),
            spam_terms_removed=int(counts.terms[model.SPAM]),
            size_before=size_before,
            size_after=self.store.size_bytes(),
            dry_run=dry_run,
            checkpointed=checkpointed,
        )

    def reselect(self, m: ModelConfig) -> dependence.Selection:
        """Choose the one-dependence parents and children for ``m`` (its
        ``dependence``, ``aode_parents``, ``aode_children``,
        ``aode_child_support`` and ``aode_min_support``) from the counts, and rebuild their pair counts
        from the ledger, in one transaction (``spamfilter db reselect``);
        with ``dependence = "none"`` drop them."""
        with self.store.begin() as tx:
            if m.dependence == "none":
                tx.pairs.clear()
                return dependence.Selection([], 0, int(tx.ledger_counts().sum()), 0)
            return dependence.reselect(tx, m)

    def vacuum(self) -> VacuumSummary:
        """Give the database's free space back (``spamfilter db vacuum``);
        the sizes are of a SQLite file and its WAL (None elsewhere)."""
        before = self.store.size_bytes()
        self.store.vacuum()
        return VacuumSummary(self.store.display_url, before, self.store.size_bytes())

    def export_counts(self, out: TextIO) -> int:
        """Write this user's model to ``out`` in the counts format v2
        (``spamfilter db export``), from one read snapshot, streamed; returns
        the number of tokens written.

            # spamfilter counts v2 owner=<owner>
            # totals ham_messages=M0 spam_messages=M1 ham_terms=N0 spam_terms=N1 ham_binary_terms=B0 spam_binary_terms=B1
            # features label=C feature=I n=N total=T total_sq=Q          (each nonzero row)
            # calibration label=C bin=B weight=W                         (each nonzero bin)
            # record-settings {"model.alpha": 0.1, ...}                   (when known)
            # token<TAB>ham_docs<TAB>spam_docs<TAB>ham_terms<TAB>spam_terms
            <token><TAB><ham_docs><TAB><spam_docs><TAB><ham_terms><TAB><spam_terms>
            ...

        The features lines are the message features' sums per class (kept
        by every training, scored with ``[model] features``), the
        calibration lines the record the calibrated score is read off
        (weights written so that they read back exactly): without them an
        imported model gives the same log-odds but other scores and
        verdicts; the record-settings line the model and tokenizer settings
        the record was written under (``Scoring.settings``), so that an
        import does not read it under others. UTF-8, one token a line in code point order; in tokens and the owner
        a backslash, tab, newline and carriage return are written as \\\\,
        \\t, \\n and \\r, and a leading "#" as \\#. The ledger is not
        exported: imported counts cannot be forgotten message by message.
        """
        written = 0
        with self.store.snapshot() as tx:
            t = tx.totals()
            out.write(f"{COUNTS_HEADER} owner={escape_token(self.store.owner)}\n")
            values = (*t.messages.tolist(), *t.terms.tolist(), *t.binary_terms.tolist())
            out.write("# totals " + " ".join(f"{key}={v}" for key, v in zip(TOTALS_KEYS, values)) + "\n")
            sums = tx.feature_stats(len(FEATURE_NAMES))
            for c, i in zip(*np.nonzero(sums.n | sums.total | sums.total_sq)):
                out.write(f"# features label={c} feature={i} n={sums.n[c, i]} total={sums.total[c, i]} total_sq={sums.total_sq[c, i]}\n")
            history = tx.calibration_history(MAP_BINS)
            for c, b in zip(*np.nonzero(history)):
                out.write(f"# calibration label={c} bin={b} weight={float(history[c, b])!r}\n")
            settings = tx.record_settings()
            if settings is not None:
                out.write(f"{RECORD_SETTINGS}{settings}\n")
            out.write("# token\tham_docs\tspam_docs\tham_terms\tspam_terms\n")
            lines: list[str] = []
            added = [0, 0, 0, 0]
            for token, hd, sd, ht, st, _ in tx.iter_tokens():
                lines.append(f"{escape_token(token)}\t{hd}\t{sd}\t{ht}\t{st}\n")
                added = [added[0] + hd, added[1] + sd, added[2] + ht, added[3] + st]
                if len(lines) == 1000:
                    out.write("".join(lines))
                    written += len(lines)
                    lines = []
            out.write("".join(lines))
            written += len(lines)
        _check_exported(added, t.binary_terms.tolist() + t.terms.tolist(), self.store.display_url)
        return written

    def import_counts(self, lines: Iterable[str], *, replace: bool, into_empty: bool = False) -> ImportSummary:
        """Read counts in the format ``export_counts`` writes into this user's
        model, in one transaction (``spamfilter db import``).

        ``replace`` first deletes the user's model (tokens, totals,
        histogram, ledger, feature sums and calibration record); otherwise
        the counts, sums and record weights are added to it, and with
        ``into_empty`` only if it is empty, as seen inside the transaction
        (else ``ModelNotEmpty``: two imports started at once cannot both
        take an empty model for theirs). The
        histogram is kept in step token by token, the imported tokens' last
        seen day is today, and the imported totals are recorded as untracked
        (no ledger: they cannot be forgotten message by message). The file
        is checked as it is read: counts are whole numbers >= 0 with
        occurrences >= messages >= 1 in some class and no more messages
        than the totals line gives, and the token lines must add up to its
        terms and binary_terms (a truncated file fails). Each token comes
        once, in code point order (as ``export_counts`` writes them), holds
        no NUL and at most ``MAX_TOKEN_BYTES`` of UTF-8, and no count or sum
        goes past ``MAX_COUNT`` (2^62 - 1; the model's totals included,
        when adding), which leaves training headroom below what a 64-bit
        column holds. Each line is checked
        before its counts are written; raises ``CountsFileError`` naming the
        line, and the transaction leaves the model as it was. Read a file
        with ``read_counts_lines``, which bounds the line length.
        """
        reader = CountsReader(lines, feature_count=len(FEATURE_NAMES), calibration_bins=MAP_BINS)
        tokens = 0
        with self.store.begin() as tx:
            if not replace:
                if into_empty:
                    tx.exclude_writers()
                have = tx.totals()
                if into_empty and (have.classes.messages.any() or have.vocabulary_size):
                    raise ModelNotEmpty("the model is not empty")
                if into_empty:  # what a model emptied by `forget` kept (a record, sums) is not the file's
                    tx.clear_model()
                reader.room = MAX_COUNT - have.classes.table()
            else:
                # A trainer of this user would otherwise hold a row this
                # delete takes while it waits for the tokens: a deadlock.
                tx.exclude_writers()
                tx.clear_model()
            for chunk in reader.chunks(5000):
                if not tokens:  # before the tokens, as a trainer writes them (see exclude_writers)
                    self._import_features(tx, reader)
                token_list = list(chunk)
                table = np.array([chunk[t] for t in token_list], dtype=np.int64).reshape(-1, 4).T
                tx.add_counts(token_list, TokenCounts(table[0:2].copy(), table[2:4].copy()), ClassCounts.zeros())
                tokens += len(token_list)
            imported = ClassCounts.from_table(reader.finish())
            tx.add_counts([], TokenCounts.zeros(0), imported)
            tx.add_untracked(imported)
            if not tokens:  # a file of no tokens
                self._import_features(tx, reader)
            self._import_record(tx, reader)
        return ImportSummary(self.store.owner, tokens, int(imported.messages[model.HAM]), int(imported.messages[model.SPAM]), replace)

    @staticmethod
    def _import_record(tx: StoreTransaction, reader: CountsReader) -> None:
        """Add the file's calibration record, and keep the settings it was
        written under: a model whose own record was written under other
        ones cannot take it."""
        history = np.zeros((2, MAP_BINS))
        for (c, b), weight in reader.calibration.items():
            history[c, b] = weight
        settings = reader.record_settings
        if settings is not None:
            Maintenance._import_record_settings(tx, settings, history)
        tx.record_calibration(1.0, history)

    @staticmethod
    def _import_record_settings(tx: StoreTransaction, settings: str, history: FloatArray) -> None:
        """``_import_record``'s check of the settings."""
        mine, kept = tx.record_settings(), tx.calibration_history(MAP_BINS).any()
        if not kept:  # nothing recorded here: the file's record, and its settings
            tx.start_record(settings, afresh=False)
        elif history.any() and mine is not None and changed_settings(mine, settings):
            raise CountsFileError(
                f"the file's calibration record was written under other settings than this model's ({'; '.join(changed_settings(mine, settings))}): "
                "import with --replace, or without the file's '# calibration' lines"
            )

    @staticmethod
    def _import_features(tx: StoreTransaction, reader: CountsReader) -> None:
        """Add the features lines' sums read so far (all of them: they come
        before the token lines)."""
        sums = FeatureStats.zeros(len(FEATURE_NAMES))
        for (c, i), (n, total, total_sq) in reader.features.items():
            sums.n[c, i], sums.total[c, i], sums.total_sq[c, i] = n, total, total_sq
        tx.add_feature_stats(sums)


# -- check results --------------------------------------------------------------

_TOTAL_NAMES = ("messages", "terms", "binary_terms")


def _ledger_sums(ledger: Iterable[tuple[int, dict[str, int]]], *, per_token: bool) -> tuple[IntArray, dict[str, list[int]]]:
    """Over the ledger's (label, token counts) rows: per class the messages,
    terms and binary_terms, shape (3, 2), and (with ``per_token``) each
    token's [ham_docs, spam_docs, ham_terms, spam_terms]."""
    rows = np.zeros((3, 2), dtype=np.int64)
    tokens: dict[str, list[int]] = {}
    for label, counts in ledger:
        rows[:, label] += (1, sum(counts.values()), len(counts))
        if per_token:
            for token, n in counts.items():
                row = tokens.get(token)
                if row is None:
                    row = tokens[token] = [0, 0, 0, 0]
                row[label] += 1
                row[2 + label] += n
    return rows, tokens


class _TokenScan:
    """What one pass over the token table finds: sums, the count histogram,
    and the tokens that break an invariant, per invariant."""

    def __init__(self, messages: list[int]) -> None:
        self.messages = messages
        self.sums = [0, 0, 0, 0]
        self.histogram: tuple[Counter[int], Counter[int]] = (Counter(), Counter())
        self.negative, self.empty, self.uneven, self.beyond, self.differ = (_Findings() for _ in range(5))

    def add(self, token: str, row: list[int]) -> None:
        """One token's [ham_docs, spam_docs, ham_terms, spam_terms]."""
        for i in range(4):
            self.sums[i] += row[i]
        self.histogram[0][row[0]] += 1
        self.histogram[1][row[1]] += 1
        if min(row) < 0:
            self.negative.add(f"token {token!r} has counts {row}")
        if row[0] <= 0 and row[1] <= 0:
            self.empty.add(f"token {token!r} is in no message")
        for label in (model.HAM, model.SPAM):
            docs, terms = row[label], row[2 + label]
            if docs > terms or (docs == 0) != (terms == 0):
                self.uneven.add(f"token {token!r}: {Label(label).decision} messages {docs}, occurrences {terms}")
            if docs > self.messages[label]:
                self.beyond.add(f"token {token!r} is in {docs} {Label(label).decision} messages of {self.messages[label]}")


@dataclass(frozen=True, slots=True)
class CheckItem:
    """One comparison of ``Maintenance.check``: what was compared, its status
    ("ok", "failed" or "skipped (why)") and the problems found."""

    name: str
    status: str
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CheckReport:
    """What ``Maintenance.check`` found for one user's model."""

    user: str
    database: str
    items: tuple[CheckItem, ...]

    @property
    def ok(self) -> bool:
        """No comparison failed."""
        return all(item.status != "failed" for item in self.items)


@dataclass(frozen=True, slots=True)
class PruneSummary:
    """What ``Maintenance.prune`` removed (or would remove, ``dry_run``); the
    sizes are of a SQLite file and its WAL, None on other databases. The WAL
    is copied into the file before each size is taken; ``checkpointed`` is
    False when readers kept part of it there (the sizes then include it)."""

    user: str
    tokens_before: int
    tokens_removed: int
    ham_terms_removed: int
    spam_terms_removed: int
    size_before: int | None
    size_after: int | None
    dry_run: bool
    checkpointed: bool = True


@dataclass(frozen=True, slots=True)
class VacuumSummary:
    """Database size before and after ``Maintenance.vacuum`` (None unless SQLite)."""

    database: str
    size_before: int | None
    size_after: int | None


@dataclass(frozen=True, slots=True)
class ImportSummary:
    """What ``Maintenance.import_counts`` read: the tokens and the messages of
    the totals line; ``replaced``: the model was emptied first."""

    user: str
    tokens: int
    ham_messages: int
    spam_messages: int
    replaced: bool


class _Findings:
    """Problems of one kind: how many, and the first few to show."""

    SHOWN = 10

    def __init__(self) -> None:
        self.count = 0
        self.examples: list[str] = []

    def add(self, problem: str) -> None:
        self.count += 1
        if len(self.examples) < self.SHOWN:
            self.examples.append(problem)

    def extend(self, problems: Iterable[str]) -> None:
        for problem in problems:
            self.add(problem)

    def item(self, name: str) -> CheckItem:
        shown = list(self.examples)
        if self.count > len(shown):
            shown.append(f"... and {self.count - len(shown)} more")
        return CheckItem(name, "failed" if self.count else "ok", tuple(shown))


def _features_item(tx: StoreTransaction, *, imported: bool) -> CheckItem:
    """The message features' sums compared with those of the ledger's
    entries (skipped where an import added sums no entry holds)."""
    name = "message feature sums = sums over the ledger's messages"
    if imported:
        return CheckItem(name, "skipped (imported)")
    width = len(FEATURE_NAMES)
    stored, ledger = tx.feature_stats(width), tx.ledger_feature_sums(width)
    problems = tuple(
        f"{Label(c).decision} {FEATURE_NAMES[i]} {field}: stored {int(getattr(stored, field)[c, i])}, the ledger gives {int(getattr(ledger, field)[c, i])}"
        for field in ("n", "total", "total_sq")
        for c in (0, 1)
        for i in range(width)
        if getattr(stored, field)[c, i] != getattr(ledger, field)[c, i]
    )
    return CheckItem(name, "failed" if problems else "ok", problems)


def _compare_item(name: str, stored: IntArray, expected: IntArray, what: str, *, names: Sequence[str]) -> CheckItem:
    """Compare (k, 2) stored class totals with what they should be."""
    problems = tuple(
        f"{Label(c).decision} {row}: stored {int(stored[i, c])}, {what} {int(expected[i, c])}"
        for i, row in enumerate(names)
        for c in (0, 1)
        if stored[i, c] != expected[i, c]
    )
    return CheckItem(name, "failed" if problems else "ok", problems)


def _histogram_item(stored: tuple[IntArray, IntArray], counted: tuple[Counter[int], Counter[int]]) -> CheckItem:
    """Compare doc_histogram with the recount from the tokens (empty buckets ignored)."""
    problems = []
    for c in (0, 1):
        have = {int(k): int(n) for k, n in stored[c].tolist() if n != 0}
        for k in sorted(set(have) | set(counted[c])):
            if have.get(k, 0) != counted[c].get(k, 0):
                problems.append(f"{Label(c).decision}, tokens in {k} messages: stored {have.get(k, 0)}, counted {counted[c].get(k, 0)}")
    findings = _Findings()
    findings.extend(problems)
    return findings.item("doc_histogram = recount from the tokens")


def _check_exported(sums: list[int], totals: list[int], where: str) -> None:
    """Refuse (``StoreError``) an export whose token lines do not add up to
    the totals it wrote (binary_terms, terms; as ``db import`` would refuse
    the file): a damaged SQLite file can give some of its rows and no error,
    and such an export is no backup."""
    if sums != totals:
        names = ("ham_binary_terms", "spam_binary_terms", "ham_terms", "spam_terms")
        wrong = next(i for i in range(4) if sums[i] != totals[i])
        raise StoreError(
            f"{where}: the database is damaged: its tokens add up to {names[wrong]}={sums[wrong]}, its totals say {totals[wrong]}; "
            "the export stops here, incomplete (`db export FILE` leaves FILE as it was; `spamfilter db check` lists the problems)"
        )
