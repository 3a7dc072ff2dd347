"""A job's team: the one rule behind every `team=` filter and every job's `team` field.

A job's team is the team on that job: its `owner` submission label. A job without one (or
with an empty one) belongs to its model's team, `models.owner` (which ingest sets from the
owner label of the model's latest labelled submission). So two jobs of one model labelled
teamA and teamB belong to teamA and teamB: `/jobs`, `/fleet/*`, `/models`, `/compare/pairs`,
`/live` and the dashboard all read it here (docs/API.md, "Scope and grouping").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import func

from backend.jobs.models import Job, Model

TEAM_LABEL = "owner"


def job_team_sql() -> Any:
    """A job's team in SQL; the statement joins `jobs` and (outer) `models` on the job's model."""
    return func.coalesce(func.nullif(Job.labels[TEAM_LABEL].as_string(), ""), Model.owner)


def team_clause(team: str) -> Any:
    """SQL: the job belongs to `team` (the same joins as `job_team_sql`)."""
    return job_team_sql() == team


def job_team(labels: Mapping[str, Any] | None, model_team: str | None) -> str | None:
    """A job's team from its labels and its model's team: the rule of `job_team_sql`."""
    return (labels or {}).get(TEAM_LABEL) or model_team
