"""Annotations REST: POST (admin) and GET /api/v1/annotations."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field, field_validator

from backend.annotations import service
from backend.auth.deps import AdminAccess, ReadAccess
from backend.deps import SessionDep
from backend.params import epoch, time_range
from backend.text import link_problem
from backend.timefmt import rfc3339

router = APIRouter(prefix="/annotations", tags=["annotations"])


class AnnotationIn(BaseModel):
    """A dated note to draw on the trend charts it concerns."""

    ts: datetime = Field(description="when it happened (RFC 3339; naive times are UTC)")
    title: str = Field(min_length=1, max_length=200, examples=["PT2 compile cache rolled out"])
    model: str | None = Field(None, max_length=256, description="the model it concerns, if one")
    team: str | None = Field(None, max_length=128, description="the team (owns models) it concerns")
    link: str | None = Field(None, max_length=2048, description="a link to read more (http[s])")

    @field_validator("title", "model", "team", "link")
    @classmethod
    def _no_control_characters(cls, value: str | None) -> str | None:
        if value is not None and any(ord(c) < 32 for c in value):
            raise ValueError("must not contain control characters")
        return value

    @field_validator("link")
    @classmethod
    def _http_link(cls, value: str | None) -> str | None:
        problem = link_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value


class AnnotationOut(BaseModel):
    """A stored annotation."""

    id: int
    ts: str = Field(description="RFC 3339, UTC")
    title: str
    model: str | None
    team: str | None
    link: str | None
    created_by: str | None
    created_at: str = Field(description="RFC 3339, UTC")


class AnnotationList(BaseModel):
    """Annotations in the range, oldest first."""

    start: str
    end: str
    annotations: list[AnnotationOut]


def _out(doc: dict[str, object]) -> AnnotationOut:
    return AnnotationOut(
        **{**doc, "ts": rfc3339(doc["ts"]), "created_at": rfc3339(doc["created_at"])}
    )  # type: ignore[arg-type]


@router.post("", status_code=201, response_model=AnnotationOut, summary="Add an annotation (admin)")
def create_annotation(
    body: AnnotationIn, token: AdminAccess, db_session: SessionDep
) -> AnnotationOut:
    """Store a dated note, e.g. "checkpoint async_save enabled"; answers it with its id."""
    doc = service.create(
        db_session=db_session,
        ts=epoch(body.ts) or 0.0,
        title=body.title,
        model=body.model,
        team=body.team,
        link=body.link,
        created_by=token.name,
    )
    db_session.commit()
    return _out(doc)


@router.get("", response_model=AnnotationList, summary="Annotations in a range")
def list_annotations(
    _auth: ReadAccess,
    db_session: SessionDep,
    start: Annotated[datetime | None, Query(description="default end - 180 days")] = None,
    end: Annotated[datetime | None, Query(description="default now")] = None,
    model: Annotated[str | None, Query(description="this model's and the fleet-wide ones")] = None,
    team: Annotated[str | None, Query(description="this team's and the fleet-wide ones")] = None,
    limit: Annotated[int, Query(ge=1, le=service.MAX_LIST)] = service.MAX_LIST,
) -> AnnotationList:
    """Annotations with `start <= ts < end`, oldest first."""
    lo, hi = time_range(start, end)
    rows = service.list_annotations(
        db_session=db_session, start=lo, end=hi, model=model, team=team, limit=limit
    )
    return AnnotationList(
        start=rfc3339(lo) or "", end=rfc3339(hi) or "", annotations=[_out(r) for r in rows]
    )
