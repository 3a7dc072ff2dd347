"""Shared FastAPI dependencies: the database session and settings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from backend.config import Settings


def get_db(request: Request) -> Iterator[Session]:
    """One session per request, from the app's database."""
    yield from request.app.state.db.sessions()


def get_settings_dep(request: Request) -> Settings:
    """The app's settings."""
    return request.app.state.settings


SessionDep = Annotated[Session, Depends(get_db)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
