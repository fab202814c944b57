"""Alembic migration scripts of the spamfilter token store.

Installed as the package ``spamfilter.migrations`` so that an installed
spamfilter can create and upgrade databases without the source tree.
"""
