"""Calibration record entries in the ledger: each trained message's row
keeps where training put it in the calibration record (``record_bin``) and
its weight there (``record_weight``, the log of the weight less the owner's
record clock at the time), and the record gets a clock row per owner (label
2, bin 0: the sum of the logs of the decays applied). With them ``mark``
moves what is left of a relabelled message's entry to its new class, and
``forget`` takes it out. Rows trained before have neither (NULL): their
entries stay where they are, as before.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("messages", sa.Column("record_bin", sa.SmallInteger(), nullable=True))
    op.add_column("messages", sa.Column("record_weight", sa.Float(), nullable=True))


def downgrade() -> None:
    # The clock rows would be decayed as if they were history by the code before.
    op.execute("DELETE FROM calibration WHERE label = 2")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("record_weight")
        batch.drop_column("record_bin")
