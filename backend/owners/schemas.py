"""Response model of the owner mapping routes: GET/PUT/DELETE /owners (docs/API.md)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class OwnersAnswer(BaseModel):
    """GET/PUT/DELETE /owners: the mapping in force."""

    source: str = Field(description="api, file or default")
    version: int | None
    updated_at: str | None
    updated_by: str | None = None
    file: str | None = None
    components: dict[str, dict[str, Any]] = Field(description="component -> system, owner")
    phases: dict[str, dict[str, Any]] = Field(description="phase -> component, system, owner")
    rows: list[dict[str, Any]] = Field(description="phase, component, system, owner")
    jobs_marked: int | None = Field(
        None, description="jobs marked for recompute because a phase moved between components"
    )
