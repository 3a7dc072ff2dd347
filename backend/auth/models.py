"""API tokens, stored as SHA-256 hashes."""

from __future__ import annotations

from sqlalchemy import Boolean, Float, String
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base, JSONType
from backend.types import BigIntPK


class ApiToken(Base):
    """A bearer token: scope ingest, read or admin, optionally limited to some models."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    scope: Mapped[str] = mapped_column(String(16))
    models: Mapped[list[str] | None] = mapped_column(JSONType)
    created_at: Mapped[float] = mapped_column(Float)
    # Written at most once a minute per token (backend/auth/service.py: touch).
    last_used_at: Mapped[float | None] = mapped_column(Float)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    revoked_at: Mapped[float | None] = mapped_column(Float)
    # None: never expires.
    expires_at: Mapped[float | None] = mapped_column(Float)
