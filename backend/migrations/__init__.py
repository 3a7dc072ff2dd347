"""Alembic migrations: the only source of the schema."""
