"""Which database and settings a dashboard request reads: bound per mount, looked up per request.

One Dash app serves the whole process (Dash's `@callback` registry is global), but each
`mount_dashboard` call may point at its own database (tests mount one per dialect). The mount
stores its context in the WSGI environ, and callbacks and layouts read it from there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import flask

from backend.config import Settings
from backend.db import Database

ENVIRON_KEY = "ett.dashboard"


@dataclass(frozen=True)
class DashboardContext:
    """The settings and database one mounted dashboard reads."""

    settings: Settings
    database: Database


def bind(wsgi_app: Callable[..., Iterable[bytes]], ctx: DashboardContext) -> Callable[..., Any]:
    """Wrap a WSGI app so every request carries `ctx`."""

    def bound(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        environ[ENVIRON_KEY] = ctx
        return wsgi_app(environ, start_response)

    return bound


def current() -> DashboardContext:
    """The context of the request being served."""
    ctx = flask.request.environ.get(ENVIRON_KEY)
    if ctx is None:
        raise RuntimeError("dashboard request without a bound database: use mount_dashboard()")
    return ctx
