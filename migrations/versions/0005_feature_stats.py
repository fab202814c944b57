"""Feature statistics: per owner, class and message feature the integer sums
n, sum x and sum x^2 of the fixed-point feature values (Gaussian naive
Bayes, ``[model] features``). Messages trained before have no feature
vector in the ledger and count in none of the sums.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "feature_stats",
        sa.Column("owner", sa.Text(), primary_key=True),
        sa.Column("label", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("feature", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("n", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("total", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("total_sq", sa.BigInteger(), nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("feature_stats")
