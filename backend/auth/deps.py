"""FastAPI dependencies: bearer tokens for ingest, reads and admin."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from sqlalchemy import Engine
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


def authenticate(request: Request, db_session: Session | None, scope: str) -> ApiToken:
    """Resolve the request's token and check its scope, or raise 401/403.

    The lookup uses the app's database (`request.app.state.db`); `db_session` serves only an
    app without one.
    """
    secret = _bearer(request)
    if secret is None:
        raise HTTPException(
            401,
            "missing bearer token: send 'Authorization: Bearer <token>' "
            "(create one with `ett token create`)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    # The lookup reads in a session of its own, read-only on SQLite (it takes no write lock, so
    # it never waits behind a writer); recording the token's use, once a minute, is a separate
    # write with a bounded lock wait, outside the request's own transaction.
    db = getattr(request.app.state, "db", None)
    if db is not None and db.dialect == "postgresql":
        # One autocommit SELECT, no session: readers never wait on Postgres (MVCC).
        try:
            token = service.resolve_detached(engine=db.engine, secret=secret)
        except service.TokenRefused as err:
            raise HTTPException(401, str(err), headers={"WWW-Authenticate": "Bearer"}) from None
        return _with_scope(token, db.engine, scope)
    if db is not None:
        auth_session = db.read_session()
        engine = db.engine
    else:
        if db_session is None:
            raise RuntimeError("authenticate needs the app's database or a session")
        engine = db_session.get_bind()
        auth_session = Session(engine, expire_on_commit=False)
    with auth_session:
        try:
            token = service.resolve(db_session=auth_session, secret=secret, record_use=False)
        except service.TokenRefused as err:
            raise HTTPException(401, str(err), headers={"WWW-Authenticate": "Bearer"}) from None
        auth_session.expunge(token)
    return _with_scope(token, engine, scope)


def _with_scope(token: ApiToken, engine: Engine, scope: str) -> ApiToken:
    service.record_use(engine=engine, token=token)
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
