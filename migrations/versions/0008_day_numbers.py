"""Token dates as day numbers: ``tokens.last_seen`` holds the days since
1970-01-01 as an integer instead of a date. In SQLite a date is stored as
ten characters of text and an integer in two or three bytes, which makes the
token table about a fifth smaller; PostgreSQL stores either in four bytes.
The values are converted in place; downgrading converts them back.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# julianday('1970-01-01') in SQLite.
_UNIX_EPOCH_JULIAN = 2440587.5


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("ALTER TABLE tokens ALTER COLUMN last_seen TYPE integer USING (last_seen - DATE '1970-01-01')")
        return
    # SQLite keeps whatever a row holds; convert the values first, then let
    # the batch copy (a new table, each value cast to the new type as it is
    # copied over) change the type.
    op.execute(f"UPDATE tokens SET last_seen = CAST(julianday(last_seen) - {_UNIX_EPOCH_JULIAN} AS INTEGER) WHERE last_seen IS NOT NULL")
    with op.batch_alter_table("tokens", recreate="always") as batch:
        batch.alter_column("last_seen", type_=sa.Integer(), existing_type=sa.Date(), existing_nullable=True)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("ALTER TABLE tokens ALTER COLUMN last_seen TYPE date USING (DATE '1970-01-01' + last_seen)")
        return
    # The other way round: the copy casts each value to the new type, which
    # would make a date's text the number of its year. So a date a process
    # of older code wrote as text after the upgrade becomes a day number
    # first, as every other row is (it came back as 1975).
    op.execute(f"UPDATE tokens SET last_seen = CAST(julianday(last_seen) - {_UNIX_EPOCH_JULIAN} AS INTEGER) WHERE typeof(last_seen) = 'text'")
    with op.batch_alter_table("tokens", recreate="always") as batch:
        batch.alter_column("last_seen", type_=sa.Date(), existing_type=sa.Integer(), existing_nullable=True)
    op.execute(f"UPDATE tokens SET last_seen = date(last_seen + {_UNIX_EPOCH_JULIAN}) WHERE last_seen IS NOT NULL")
