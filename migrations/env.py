"""Alembic environment: runs revisions on the connection spamfilter hands over.

``spamfilter.store`` calls Alembic with an open connection in
``config.attributes["connection"]``; the ``alembic`` command line (with the
repository's ``alembic.ini``) instead passes a URL via ``sqlalchemy.url`` or
``$SPAMFILTER_DB``.
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy import create_engine

from spamfilter.store import metadata

config = context.config
connection = config.attributes.get("connection")

if connection is not None:
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    url = os.environ.get("SPAMFILTER_DB") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("set SPAMFILTER_DB or sqlalchemy.url to the database URL")
    engine = create_engine(url)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
