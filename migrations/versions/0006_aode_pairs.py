"""One-dependence counts (AODE/SPODE, ``[model] dependence``): the chosen
parent tokens with their per-class message and distinct-token counts, per
child token the per-class counts of messages holding it and each parent
(packed, see ``spamfilter.store.pairs``), and when they were chosen. Empty until ``spamfilter db reselect`` (or training
with a dependence model) chooses parents.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "aode_parents",
        sa.Column("owner", sa.Text(), primary_key=True),
        sa.Column("token", sa.Text(), primary_key=True),
        sa.Column("ham_docs", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("spam_docs", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("ham_terms", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("spam_terms", sa.BigInteger(), nullable=False, server_default="0"),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "aode_pairs",
        sa.Column("owner", sa.Text(), primary_key=True),
        sa.Column("token", sa.Text(), primary_key=True),
        sa.Column("counts", sa.LargeBinary(), nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "aode_selection",
        sa.Column("owner", sa.Text(), primary_key=True),
        sa.Column("messages", sa.BigInteger(), nullable=False),
        sa.Column("selected_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("aode_selection")
    op.drop_table("aode_pairs")
    op.drop_table("aode_parents")
