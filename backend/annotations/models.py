"""The annotations table."""

from __future__ import annotations

from sqlalchemy import BigInteger, Float, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base


class Annotation(Base):
    """A dated note: a time, a title, and optionally the model and team it concerns, and a link."""

    __tablename__ = "annotations"
    __table_args__ = (Index("ix_annotations_ts", "ts"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    ts: Mapped[float] = mapped_column(Float)
    title: Mapped[str] = mapped_column(String(200))
    model: Mapped[str | None] = mapped_column(String(256))
    team: Mapped[str | None] = mapped_column(String(128))
    link: Mapped[str | None] = mapped_column(String(2048))
    created_by: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)
