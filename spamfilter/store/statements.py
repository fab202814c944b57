"""The SQLAlchemy statements of the store, built once per dialect."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from spamfilter.store.schema import (
    CLOCK_LABEL,
    calibration,
    class_totals,
    feature_stats,
    imap_folders,
    imap_messages,
    imap_uids,
    messages,
    record_settings,
    untracked_totals,
)


class _Statements:
    """Every statement the store runs, built once per dialect.

    Building a SQLAlchemy construct costs more than running it on SQLite;
    with constant statements (IN lists as expanding parameters) each one is
    compiled once and then served from the engine's compiled cache, which
    took online classify-then-train from 64 to well over 100 messages/s.
    """

    def __init__(self, dialect: str) -> None:
        """Build every statement for ``dialect``: one assignment each, in one
        flat list, which makes this longer than 60 lines on purpose."""
        insert: Any = sqlite.insert
        if dialect == "postgresql":
            # Imported only for PostgreSQL: 18 ms of every SQLite start.
            from sqlalchemy.dialects import postgresql

            insert = postgresql.insert
        keys: sa.BindParameter[list[str]] = sa.bindparam("keys", expanding=True)
        own: sa.BindParameter[str] = sa.bindparam("own")
        self.labels = sa.select(messages.c.digest, messages.c.label).where((messages.c.owner == own) & messages.c.digest.in_(keys))
        self.take_ledger = (
            sa.delete(messages)
            .where((messages.c.owner == own) & messages.c.digest.in_(keys))
            .returning(messages.c.digest, messages.c.label, messages.c.trained_at, messages.c.token_counts, messages.c.record_bin, messages.c.record_weight)
        )
        self.record = sa.insert(messages)
        self.adopt_digest = _adopt_digest(messages, "owner", "own")
        self.rewrite_ledger = (
            sa.update(messages).where((messages.c.owner == sa.bindparam("own")) & (messages.c.digest == sa.bindparam("d"))).values(token_counts=sa.bindparam("entry"))
        )
        where_folder = (imap_uids.c.account == sa.bindparam("acct")) & (imap_uids.c.folder == sa.bindparam("fold"))
        self.imap_validity = sa.select(imap_folders.c.uidvalidity).where(
            (imap_folders.c.account == sa.bindparam("acct")) & (imap_folders.c.folder == sa.bindparam("fold"))
        )
        folder_row = insert(imap_folders)
        self.set_imap_validity = folder_row.on_conflict_do_update(
            index_elements=[imap_folders.c.account, imap_folders.c.folder], set_={"uidvalidity": folder_row.excluded.uidvalidity}
        )
        self.imap_uids = sa.select(imap_uids.c.uid, imap_uids.c.digest, imap_uids.c.keywords).where(where_folder)
        self.set_imap_keywords = sa.update(imap_uids).where(where_folder & (imap_uids.c.uid == sa.bindparam("u"))).values(keywords=sa.bindparam("k"))
        self.clear_imap_uids = sa.delete(imap_uids).where(where_folder)
        self.delete_imap_uids = sa.delete(imap_uids).where(where_folder & imap_uids.c.uid.in_(sa.bindparam("keys", expanding=True)))
        uid_row = insert(imap_uids)
        self.add_imap_uids = uid_row.on_conflict_do_update(
            index_elements=[imap_uids.c.account, imap_uids.c.folder, imap_uids.c.uid], set_={"digest": uid_row.excluded.digest, "keywords": None}
        )
        self.adopt_imap_record = _adopt_digest(imap_messages, "account", "acct")
        self.adopt_imap_uids = (
            sa.update(imap_uids).where((imap_uids.c.account == sa.bindparam("acct")) & (imap_uids.c.digest == sa.bindparam("old"))).values(digest=sa.bindparam("new"))
        )
        self.imap_records = sa.select(imap_messages).where((imap_messages.c.account == sa.bindparam("acct")) & imap_messages.c.digest.in_(keys))
        record_row = insert(imap_messages)
        self.put_imap_records = record_row.on_conflict_do_update(
            index_elements=[imap_messages.c.account, imap_messages.c.digest],
            set_={c: record_row.excluded[c] for c in ("label", "origin", "folder", "pending", "log_odds", "updated_at", "source")},
        )
        self.imap_pending = sa.select(imap_messages).where(
            (imap_messages.c.account == sa.bindparam("acct")) & imap_messages.c.pending & (imap_messages.c.source == sa.bindparam("src"))
        )
        totals_row = insert(class_totals)
        self.add_totals = totals_row.on_conflict_do_update(
            index_elements=[class_totals.c.owner, class_totals.c.label],
            set_={name: class_totals.c[name] + totals_row.excluded[name] for name in ("messages", "terms", "binary_terms")},
        )
        untracked_row = insert(untracked_totals)
        self.add_untracked = untracked_row.on_conflict_do_update(
            index_elements=[untracked_totals.c.owner, untracked_totals.c.label],
            set_={name: untracked_totals.c[name] + untracked_row.excluded[name] for name in ("messages", "terms", "binary_terms")},
        )
        own_history = calibration.c.owner == own
        self.calibration = sa.select(calibration.c.label, calibration.c.bin, calibration.c.weight).where(own_history)
        self.record_clock = sa.select(calibration.c.weight).where(own_history & (calibration.c.label == CLOCK_LABEL) & (calibration.c.bin == 0))
        self.decay_calibration = (
            sa.update(calibration).where(own_history & (calibration.c.label != CLOCK_LABEL)).values(weight=calibration.c.weight * sa.bindparam("decay"))
        )
        history_row = insert(calibration)
        self.add_calibration = history_row.on_conflict_do_update(
            index_elements=[calibration.c.owner, calibration.c.label, calibration.c.bin], set_={"weight": calibration.c.weight + history_row.excluded.weight}
        )
        self.record_settings = sa.select(record_settings.c.settings).where(record_settings.c.owner == own)
        settings_row = insert(record_settings)
        self.set_record_settings = settings_row.on_conflict_do_update(index_elements=[record_settings.c.owner], set_={"settings": settings_row.excluded.settings})
        self.forget_record_settings = sa.delete(record_settings).where(record_settings.c.owner == own)
        self.clear_history = sa.delete(calibration).where(own_history & (calibration.c.label != CLOCK_LABEL))
        self.drop_record_entries = sa.update(messages).where((messages.c.owner == own) & messages.c.record_bin.is_not(None)).values(record_bin=None, record_weight=None)
        feature_row = insert(feature_stats)
        self.add_feature_stats = feature_row.on_conflict_do_update(
            index_elements=[feature_stats.c.owner, feature_stats.c.label, feature_stats.c.feature],
            set_={name: feature_stats.c[name] + feature_row.excluded[name] for name in ("n", "total", "total_sq")},
        )


def _adopt_digest(table: sa.Table, key: str, param: str) -> sa.Update:
    """UPDATE ``table``'s rows of digest :old (and ``key`` = :``param``) to
    digest :new, unless the table holds :new for that key already."""
    other = table.alias("other")  # not the row being updated
    held = sa.select(other.c.digest).where((other.c[key] == sa.bindparam(param)) & (other.c.digest == sa.bindparam("new")))
    return sa.update(table).where((table.c[key] == sa.bindparam(param)) & (table.c.digest == sa.bindparam("old")) & ~held.exists()).values(digest=sa.bindparam("new"))
