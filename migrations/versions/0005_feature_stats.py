"""Feature statistics: per owner, class and message feature the integer sums
n, sum x and sum x^2 of the fixed-point feature values (Gaussian naive
Bayes, ``[model] features``). Messages trained before have no feature
vector in the ledger and count in none of the sums; entries that have one
(a database that was at this revision or later, downgraded below it and
upgraded again) are summed into the new table, so forgetting them later
subtracts what was added.

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


#: Bytes of a ledger entry read for its feature vector, which heads it.
_HEAD_BYTES = 1024


def upgrade() -> None:
    table = op.create_table(
        "feature_stats",
        sa.Column("owner", sa.Text(), primary_key=True),
        sa.Column("label", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("feature", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("n", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("total", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("total_sq", sa.BigInteger(), nullable=False, server_default="0"),
    )
    from spamfilter.store.ledger import DamagedEntry, unpack_features
    from spamfilter.tokenizer.features import FEATURE_NAMES

    sums: dict[tuple[str, int, int], list[int]] = {}
    heads = sa.text(f"SELECT owner, label, substr(token_counts, 1, {_HEAD_BYTES}) FROM messages")
    for owner, label, head in op.get_bind().execute(heads):
        try:
            x = unpack_features(bytes(head))
        except DamagedEntry:
            continue  # `db check` names it
        if len(x) != len(FEATURE_NAMES):
            continue
        for i, v in enumerate(x):
            row = sums.setdefault((owner, int(label), i), [0, 0, 0])
            row[0] += 1
            row[1] += v
            row[2] += v * v
    if sums:
        op.bulk_insert(table, [{"owner": o, "label": c, "feature": i, "n": n, "total": t, "total_sq": q} for (o, c, i), (n, t, q) in sums.items()])


def downgrade() -> None:
    op.drop_table("feature_stats")
