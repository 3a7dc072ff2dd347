"""FastAPI dependencies: bearer tokens for ingest, reads and admin."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from sqlalchemy.orm import Session

from backend.auth import service
from backend.auth.models import ApiToken
from backend.deps import SessionDep


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def authenticate(request: Request, db_session: Session, scope: str) -> ApiToken:
    """Resolve the request's token and check its scope, or raise 401/403."""
    secret = _bearer(request)
    if secret is None:
        raise HTTPException(
            401,
            "missing bearer token: send 'Authorization: Bearer <token>' "
            "(create one with `ett token create`)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    # A session of its own: recording the token's use commits, and must not take the request's
    # own transaction (or its locks) with it. It writes, so it is never the read-only engine
    # that GET requests get on SQLite.
    db = getattr(request.app.state, "db", None)
    bind = db.engine if db is not None else db_session.get_bind()
    with Session(bind, expire_on_commit=False) as auth_session:
        try:
            token = service.resolve(db_session=auth_session, secret=secret)
        except service.TokenRefused as err:
            raise HTTPException(401, str(err), headers={"WWW-Authenticate": "Bearer"}) from None
        auth_session.expunge(token)
    if not service.allows_scope(token, scope):
        raise HTTPException(
            403, f"token {token.name!r} has scope {token.scope!r}; this needs {scope!r} or admin"
        )
    return token


def require_read(request: Request, db_session: SessionDep) -> ApiToken | None:
    """Reads are open unless ETT_READ_TOKEN_REQUIRED=true, then read or admin scope."""
    if not request.app.state.settings.read_token_required:
        return None
    return authenticate(request, db_session, "read")


def require_admin(request: Request, db_session: SessionDep) -> ApiToken:
    """Writes to configuration need an admin token."""
    return authenticate(request, db_session, "admin")


ReadAccess = Annotated[ApiToken | None, Depends(require_read)]
AdminAccess = Annotated[ApiToken, Depends(require_admin)]
