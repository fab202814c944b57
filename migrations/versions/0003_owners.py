"""Per-user models: an owner column in every count table; a last-seen date per token; untracked totals; the source folder of pending IMAP moves.

The existing counts become the model of owner "" (the default, shared model).
``untracked_totals`` keeps, per owner and class, how far the class totals
differ from the sums over the trained-message ledger after pruning or an
import of counts.
Primary keys change, so each table is rebuilt (create, copy, drop, rename),
which works the same on SQLite and PostgreSQL.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _rebuild(name: str, columns: list[sa.Column[object]], copied: list[str], **kwargs: object) -> None:
    op.create_table(f"{name}_new", sa.Column("owner", sa.Text(), primary_key=True), *columns, **kwargs)
    listed = ", ".join(copied)
    op.execute(f"INSERT INTO {name}_new (owner, {listed}) SELECT '', {listed} FROM {name}")
    op.drop_table(name)
    op.rename_table(f"{name}_new", name)


def upgrade() -> None:
    counts = ["ham_docs", "spam_docs", "ham_terms", "spam_terms"]
    _rebuild(
        "tokens",
        [
            sa.Column("token", sa.Text(), primary_key=True),
            *(sa.Column(c, sa.BigInteger(), nullable=False, server_default="0") for c in counts),
            sa.Column("last_seen", sa.Date(), nullable=True),
        ],
        ["token", *counts],
        sqlite_with_rowid=False,
    )
    _rebuild(
        "class_totals",
        [
            sa.Column("label", sa.SmallInteger(), primary_key=True, autoincrement=False),
            sa.Column("messages", sa.BigInteger(), nullable=False, server_default="0"),
            sa.Column("terms", sa.BigInteger(), nullable=False, server_default="0"),
            sa.Column("binary_terms", sa.BigInteger(), nullable=False, server_default="0"),
        ],
        ["label", "messages", "terms", "binary_terms"],
    )
    _rebuild(
        "doc_histogram",
        [
            sa.Column("label", sa.SmallInteger(), primary_key=True, autoincrement=False),
            sa.Column("doc_count", sa.BigInteger(), primary_key=True, autoincrement=False),
            sa.Column("tokens", sa.BigInteger(), nullable=False),
        ],
        ["label", "doc_count", "tokens"],
    )
    _rebuild(
        "messages",
        [
            sa.Column("digest", sa.String(32), primary_key=True),
            sa.Column("label", sa.SmallInteger(), nullable=False),
            sa.Column("trained_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("token_counts", sa.LargeBinary(), nullable=False),
        ],
        ["digest", "label", "trained_at", "token_counts"],
    )
    # Where a pending IMAP move started, so the run that finds the message
    # still there can finish it (and one that does not can close it).
    op.add_column("imap_messages", sa.Column("source", sa.Text(), nullable=True))
    # A move left pending by an older run has no source to finish it from:
    # close it (the message is in one of the two folders, and the next run
    # takes it as it finds it).
    op.execute(sa.text("UPDATE imap_messages SET pending = :no WHERE source IS NULL").bindparams(no=False))
    op.create_table(
        "untracked_totals",
        sa.Column("owner", sa.Text(), primary_key=True),
        sa.Column("label", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("messages", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("terms", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("binary_terms", sa.BigInteger(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    raise NotImplementedError("0003 cannot be undone: it would merge the users' models")
