"""IMAP state: per account and folder the UIDVALIDITY and the UIDs handled, and per message what was done.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "imap_folders",
        sa.Column("account", sa.Text(), primary_key=True),
        sa.Column("folder", sa.Text(), primary_key=True),
        sa.Column("uidvalidity", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "imap_uids",
        sa.Column("account", sa.Text(), primary_key=True),
        sa.Column("folder", sa.Text(), primary_key=True),
        sa.Column("uid", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("digest", sa.String(32), nullable=False),
        sa.Column("keywords", sa.SmallInteger(), nullable=True),
    )
    op.create_table(
        "imap_messages",
        sa.Column("account", sa.Text(), primary_key=True),
        sa.Column("digest", sa.String(32), primary_key=True),
        sa.Column("label", sa.SmallInteger(), nullable=False),
        sa.Column("origin", sa.String(8), nullable=False),
        sa.Column("folder", sa.Text(), nullable=False),
        sa.Column("pending", sa.Boolean(), nullable=False),
        sa.Column("log_odds", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("imap_messages")
    op.drop_table("imap_uids")
    op.drop_table("imap_folders")
