"""Alembic migrations: the only source of the schema (`ett db upgrade`, backend.migrate)."""
