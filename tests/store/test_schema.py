"""The SQLAlchemy tables in ``spamfilter/store/schema.py`` against the schema the migrations build.

The migrations are the schema's only source of change; the tables in code
are what the queries are written against. Alembic's autogenerate compares
the two: any difference (a column, a type, an index, a nullability) means one
of them was changed without the other.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from spamfilter.store import Store, metadata


def _differences(url: str, tables: sa.MetaData = metadata) -> list[object]:
    Store.open(url).close()
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
            return list(compare_metadata(context, tables))
    finally:
        engine.dispose()


def test_the_tables_in_code_match_the_migrated_schema(any_db_url: str) -> None:
    assert _differences(any_db_url) == []


def test_a_column_missing_from_the_migrations_is_found(any_db_url: str) -> None:
    changed = sa.MetaData()
    for table in metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["tokens"].append_column(sa.Column("not_migrated", sa.Integer, nullable=True))
    found = _differences(any_db_url, changed)
    assert [(d[0], d[3].name) for d in found if isinstance(d, tuple)] == [("add_column", "not_migrated")]
