"""Response models of the token routes: a token as listed, and a new one with its secret."""

from __future__ import annotations

from pydantic import BaseModel


class TokenRead(BaseModel):
    """A token as listed (never its secret)."""

    id: int
    name: str
    scope: str
    models: list[str] | None
    prefix: str | None
    created_at: str | None
    expires_at: str | None
    last_used_at: str | None
    revoked_at: str | None
    status: str


class TokenCreated(TokenRead):
    """A new token: `token` is the secret, shown this once."""

    token: str
