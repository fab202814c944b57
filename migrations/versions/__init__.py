"""Alembic revisions, one file each, applied in order."""
