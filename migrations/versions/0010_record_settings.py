"""The settings a calibration record was written under: per owner, the
model and tokenizer settings (as JSON) of the log-odds its history holds.
The record maps log-odds to P(spam), and other settings give other
log-odds (another event model, alpha or tempering), so a record written
under other settings is not read (the scores fall back to the model's own
probability, bounded to [0.01, 0.99]) and the next recording starts it
afresh. No row: not known (a record written before this revision, or
imported), taken to be of the current settings.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table("record_settings", sa.Column("owner", sa.Text(), primary_key=True), sa.Column("settings", sa.Text(), nullable=False))


def downgrade() -> None:
    op.drop_table("record_settings")
