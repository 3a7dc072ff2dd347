"""Admin REST for tokens: list, create (the secret is shown once), revoke."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path
from pydantic import BaseModel, ConfigDict, Field

from backend.auth import service
from backend.auth.deps import AdminAccess
from backend.auth.schemas import TokenCreated, TokenRead
from backend.deps import SessionDep
from backend.text import CleanStr
from backend.timefmt import parse_duration

router = APIRouter(tags=["tokens"])


class TokenCreate(BaseModel):
    """POST /api/v1/tokens."""

    model_config = ConfigDict(extra="forbid")

    name: CleanStr = Field(min_length=1, max_length=128, description="unique, e.g. trainer-fleet")
    scope: Literal["ingest", "read", "admin"] = "ingest"
    models: list[Annotated[CleanStr, Field(min_length=1, max_length=256)]] | None = Field(
        default=None, max_length=1000, description="limit an ingest token to these models"
    )
    expires_in: str | float | None = Field(
        default=None, description="e.g. 30d, 12h or seconds; omitted: never expires"
    )


@router.get("/tokens", response_model=list[TokenRead])
def list_tokens(db_session: SessionDep, _: AdminAccess) -> list[dict[str, Any]]:
    """Every token: name, scope, models, created, expires, last used, revoked (never secrets)."""
    return [service.token_doc(t) for t in service.list_tokens(db_session=db_session)]


@router.post("/tokens", status_code=201, response_model=TokenCreated)
def create_token(body: TokenCreate, db_session: SessionDep, _: AdminAccess) -> dict[str, Any]:
    """Create a token; the answer's `token` is the secret, shown this once and stored hashed."""
    try:
        expires = parse_duration(body.expires_in) if body.expires_in is not None else None
        row, secret = service.create(
            db_session=db_session,
            name=body.name,
            scope=body.scope,
            models=body.models,
            expires_in_s=expires,
        )
    except ValueError as err:
        status = 409 if "exists already" in str(err) else 422
        raise HTTPException(status, str(err)) from err
    return {**service.token_doc(row), "token": secret}


@router.post("/tokens/{ref}/revoke", response_model=TokenRead)
def revoke_token(
    ref: Annotated[str, Path(max_length=128, description="the token's name or id")],
    db_session: SessionDep,
    _: AdminAccess,
) -> dict[str, Any]:
    """Revoke a token by name or id: every request with it is refused from now on."""
    try:
        row = service.revoke(db_session=db_session, ref=ref)
    except service.TokenNotFound as err:
        raise HTTPException(404, str(err)) from err
    return service.token_doc(row)
