"""Token creation and lookup; tokens are shown once and stored as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.auth.models import ApiToken

SCOPES = ("ingest", "read", "admin")
TOKEN_PREFIX = "ett_"


def hash_token(token: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create(
    *, db_session: Session, name: str, scope: str, models: Sequence[str] | None = None
) -> tuple[ApiToken, str]:
    """Create a token; returns the row and the secret, which is never stored."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    if db_session.scalar(select(ApiToken).where(ApiToken.name == name)) is not None:
        raise ValueError(f"a token named {name!r} exists already; pick another --name")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(
        name=name,
        token_hash=hash_token(secret),
        prefix=secret[:10],
        scope=scope,
        models=sorted(set(models)) if models else None,
        created_at=time.time(),
        revoked=False,
    )
    db_session.add(row)
    db_session.commit()
    return row, secret


def lookup(*, db_session: Session, secret: str) -> ApiToken | None:
    """The live token for a secret, or None."""
    row = db_session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(secret)))
    if row is None or row.revoked:
        return None
    return row


def allows_scope(token: ApiToken, wanted: str) -> bool:
    """Admin tokens may do anything; others only their own scope."""
    return token.scope == "admin" or token.scope == wanted


def allows_model(token: ApiToken, model: str | None) -> bool:
    """Whether the token may write jobs of this model (None: unrestricted tokens only)."""
    if not token.models:
        return True
    return model is not None and model in token.models
