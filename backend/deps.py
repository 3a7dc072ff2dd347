"""Shared FastAPI dependencies: the database session and settings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from backend.config import Settings

READ_METHODS = frozenset({"GET", "HEAD"})


def get_db(request: Request) -> Iterator[Session]:
    """One session per request, from the app's database: read-only for GET and HEAD.

    A GET that must write (rare: bookkeeping) opens its own `request.app.state.db.session()`.
    """
    db = request.app.state.db
    if request.method in READ_METHODS:
        yield from db.read_sessions()
    else:
        yield from db.sessions()


def get_settings_dep(request: Request) -> Settings:
    """The app's settings."""
    return request.app.state.settings


SessionDep = Annotated[Session, Depends(get_db)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
