"""The owner mapping as stored by `PUT /api/v1/owners`: one row per version, the newest wins."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, String
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base, JSONType
from backend.types import BigIntPK


class OwnerMappingVersion(Base):
    """One version of the phase -> component -> system -> owner document."""

    __tablename__ = "owner_mapping_versions"

    id: Mapped[int] = mapped_column(BigIntPK, primary_key=True, autoincrement=True)
    document: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[float] = mapped_column(Float)
    created_by: Mapped[str | None] = mapped_column(String(128))
