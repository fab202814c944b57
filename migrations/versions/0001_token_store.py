"""The token store: per-token class counts, class totals, count histogram, trained messages.

Revision ID: 0001
Revises:
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("token", sa.Text(), primary_key=True),
        sa.Column("ham_docs", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("spam_docs", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("ham_terms", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("spam_terms", sa.BigInteger(), nullable=False, server_default="0"),
        sqlite_with_rowid=False,
    )
    totals = op.create_table(
        "class_totals",
        sa.Column("label", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("messages", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("terms", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("binary_terms", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.bulk_insert(totals, [{"label": 0}, {"label": 1}])
    op.create_table(
        "doc_histogram",
        sa.Column("label", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("doc_count", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "messages",
        sa.Column("digest", sa.String(32), primary_key=True),
        sa.Column("label", sa.SmallInteger(), nullable=False),
        sa.Column("trained_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("token_counts", sa.LargeBinary(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("messages")
    op.drop_table("doc_histogram")
    op.drop_table("class_totals")
    op.drop_table("tokens")
