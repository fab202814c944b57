"""The tables (created and changed only by the Alembic revisions in
``migrations/``; tests/store/test_schema.py checks the two agree)."""

from __future__ import annotations

from datetime import date, timedelta

import sqlalchemy as sa

from spamfilter.errors import StoreInconsistent

#: The Alembic head this code reads and writes; tests check it is the
#: migrations' head. Kept as a constant so opening a store needs no Alembic import.
SCHEMA_REVISION = "0010"

metadata = sa.MetaData()

#: The day 0 of ``DayNumber``.
EPOCH = date(1970, 1, 1)


class DayNumber(sa.types.TypeDecorator[date]):
    """A date stored as its day number since 1970-01-01 (an integer): two
    or three bytes a row in SQLite, where an ISO date is ten. Python sees a
    ``date``; raw SQL binds ``day_number(d)``."""

    impl = sa.Integer
    cache_ok = True

    def process_bind_param(self, value: date | None, dialect: sa.Dialect) -> int | None:
        return None if value is None else day_number(value)

    def process_result_value(self, value: int | str | None, dialect: sa.Dialect) -> date | None:
        try:
            if isinstance(value, str):
                # An ISO date a process of the code before revision 0008 wrote
                # into a SQLite file upgraded under it (SQLite keeps the text).
                return date.fromisoformat(value)
            return None if value is None else EPOCH + timedelta(days=value)
        except (ValueError, OverflowError, TypeError) as exc:
            # A damaged file: said as such (exit 73), not an internal error.
            raise StoreInconsistent(f"a token's last training day is not a date ({value!r}: {exc}); the database is damaged") from None


def day_number(day: date) -> int:
    """``day`` as ``DayNumber`` stores it."""
    return (day - EPOCH).days


def _token_count_columns() -> list[sa.Column[object]]:
    """D[c,j] and N[c,j] per class: a token's counts, and a parent's."""
    return [
        sa.Column("ham_docs", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("spam_docs", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("ham_terms", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("spam_terms", sa.BigInteger(), nullable=False, server_default="0"),
    ]


tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("owner", sa.Text(), primary_key=True),
    sa.Column("token", sa.Text(), primary_key=True),
    *_token_count_columns(),
    sa.Column("last_seen", DayNumber(), nullable=True),
    sqlite_with_rowid=False,
)


def _class_total_columns() -> list[sa.Column[object]]:
    """(owner, label) -> messages, terms, binary_terms: the class totals and
    the untracked totals have the same shape."""
    return [
        sa.Column("owner", sa.Text(), primary_key=True),
        sa.Column("label", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("messages", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("terms", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("binary_terms", sa.BigInteger(), nullable=False, server_default="0"),
    ]


class_totals = sa.Table("class_totals", metadata, *_class_total_columns())

doc_histogram = sa.Table(
    "doc_histogram",
    metadata,
    sa.Column("owner", sa.Text(), primary_key=True),
    sa.Column("label", sa.SmallInteger(), primary_key=True, autoincrement=False),
    sa.Column("doc_count", sa.BigInteger(), primary_key=True, autoincrement=False),
    sa.Column("tokens", sa.BigInteger(), nullable=False),
)

messages = sa.Table(
    "messages",
    metadata,
    sa.Column("owner", sa.Text(), primary_key=True),
    sa.Column("digest", sa.String(32), primary_key=True),
    sa.Column("label", sa.SmallInteger(), nullable=False),
    sa.Column("trained_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("token_counts", sa.LargeBinary(), nullable=False),
    # Where training put the message in the calibration record: the bin of
    # its score, and log(its weight there) less the owner's record clock at
    # the time (``CLOCK_LABEL``); NULL when nothing was recorded.
    sa.Column("record_bin", sa.SmallInteger(), nullable=True),
    sa.Column("record_weight", sa.Float(), nullable=True),
)

untracked_totals = sa.Table("untracked_totals", metadata, *_class_total_columns())

model_versions = sa.Table("model_versions", metadata, sa.Column("owner", sa.Text(), primary_key=True), sa.Column("version", sa.BigInteger(), nullable=False))

feature_stats = sa.Table(
    "feature_stats",
    metadata,
    sa.Column("owner", sa.Text(), primary_key=True),
    sa.Column("label", sa.SmallInteger(), primary_key=True, autoincrement=False),
    sa.Column("feature", sa.SmallInteger(), primary_key=True, autoincrement=False),
    sa.Column("n", sa.BigInteger(), nullable=False, server_default="0"),
    sa.Column("total", sa.BigInteger(), nullable=False, server_default="0"),
    sa.Column("total_sq", sa.BigInteger(), nullable=False, server_default="0"),
)

# The calibration history (``spamfilter.nb.calibration``): per class and
# bin of the log-odds, the decayed weight of the messages scored there
# before they were learned; and one row of label ``CLOCK_LABEL`` (bin 0)
# whose weight is the owner's record clock, the sum of the logs of the
# decays applied to the history.
CLOCK_LABEL = 2
calibration = sa.Table(
    "calibration",
    metadata,
    sa.Column("owner", sa.Text(), primary_key=True),
    sa.Column("label", sa.SmallInteger(), primary_key=True, autoincrement=False),
    sa.Column("bin", sa.SmallInteger(), primary_key=True, autoincrement=False),
    sa.Column("weight", sa.Float(), nullable=False, server_default="0"),
)


def record_version_owner(owner: str) -> str:
    """The name under which ``model_versions`` counts the writes of
    ``owner``'s calibration record: a record written without a count write
    (an online run's message it scored and did not learn) moves no model
    version, yet changes the scores. No user's name (printable only) can
    be it."""
    return f"{owner}\ncalibration record"


# The model and tokenizer settings (JSON) each owner's calibration record
# was written under; no row: not known (written before, or imported).
record_settings = sa.Table("record_settings", metadata, sa.Column("owner", sa.Text(), primary_key=True), sa.Column("settings", sa.Text(), nullable=False))

# One-dependence counts (``spamfilter.nb.aode``): the parents chosen by
# ``db reselect`` with D[c,p] and N[c,p], and a row per child token j with
# D[c,p,j] for the parents p seen with it (packed, ``store.pairs``), over
# the messages in the ledger.
aode_parents = sa.Table(
    "aode_parents",
    metadata,
    sa.Column("owner", sa.Text(), primary_key=True),
    sa.Column("token", sa.Text(), primary_key=True),
    *_token_count_columns(),
    sqlite_with_rowid=False,
)

aode_pairs = sa.Table(
    "aode_pairs",
    metadata,
    sa.Column("owner", sa.Text(), primary_key=True),
    sa.Column("token", sa.Text(), primary_key=True),
    sa.Column("counts", sa.LargeBinary(), nullable=False),
    sqlite_with_rowid=False,
)

aode_selection = sa.Table(
    "aode_selection",
    metadata,
    sa.Column("owner", sa.Text(), primary_key=True),
    sa.Column("messages", sa.BigInteger(), nullable=False),
    sa.Column("selected_at", sa.DateTime(timezone=True), nullable=False),
)

imap_folders = sa.Table(
    "imap_folders",
    metadata,
    sa.Column("account", sa.Text(), primary_key=True),
    sa.Column("folder", sa.Text(), primary_key=True),
    sa.Column("uidvalidity", sa.BigInteger(), nullable=False),
)

imap_uids = sa.Table(
    "imap_uids",
    metadata,
    sa.Column("account", sa.Text(), primary_key=True),
    sa.Column("folder", sa.Text(), primary_key=True),
    sa.Column("uid", sa.BigInteger(), primary_key=True, autoincrement=False),
    sa.Column("digest", sa.String(32), nullable=False),
    sa.Column("keywords", sa.SmallInteger(), nullable=True),
)

imap_messages = sa.Table(
    "imap_messages",
    metadata,
    sa.Column("account", sa.Text(), primary_key=True),
    sa.Column("digest", sa.String(32), primary_key=True),
    sa.Column("label", sa.SmallInteger(), nullable=False),
    sa.Column("origin", sa.String(8), nullable=False),
    sa.Column("folder", sa.Text(), nullable=False),
    sa.Column("pending", sa.Boolean(), nullable=False),
    sa.Column("log_odds", sa.Float(), nullable=True),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("source", sa.Text(), nullable=True),
)

COUNT_COLUMNS = ("ham_docs", "spam_docs", "ham_terms", "spam_terms")

# Rows per multi-row statement: 5 bound values a token keeps far below
# SQLite's 32,766-variable limit and PostgreSQL's 65,535.
_CHUNK = 2000
