"""Model versions: a counter per owner that every change of its counts increases.

A long run (``classify`` of a mailbox, ``evaluate``, ``imap run``) keeps the
counts it has read in memory; the version tells it, with one small query per
batch, whether another process has trained since, so the copy is exact
without reading the counts again. Existing models start at version 1.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table("model_versions", sa.Column("owner", sa.Text(), primary_key=True), sa.Column("version", sa.BigInteger(), nullable=False))
    op.execute("INSERT INTO model_versions (owner, version) SELECT DISTINCT owner, 1 FROM class_totals")


def downgrade() -> None:
    op.drop_table("model_versions")
