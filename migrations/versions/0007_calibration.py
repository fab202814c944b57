"""Calibration history: per owner, class and bin of the model's log-odds,
the decayed weight of the messages of that class that scored in the bin
before they were learned (``spamfilter.nb.calibration``). Empty for a
model trained before: its scores follow the model's own log-odds, bounded
to [0.01, 0.99], until training records a history.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "calibration",
        sa.Column("owner", sa.Text(), primary_key=True),
        sa.Column("label", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("bin", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("weight", sa.Float(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("calibration")
