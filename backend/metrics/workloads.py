"""Per-model answers: headline numbers with their trend, and a model page's aggregates."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from sqlalchemy.orm import Session

from backend.config import Settings
from backend.ett.catalogue import FAILURE_KINDS
from backend.fleet.days import day_start
from backend.metrics import core
from backend.metrics.fleet import by_model
from backend.metrics.reads import (
    failures_by_kind_exact,
    gpu_rows,
    jobs_submitted,
    jobs_with_time,
)
from backend.owners import service as owners_service


def model_headlines(
    *,
    db_session: Session,
    models: list[str],
    start: float,
    end: float,
    team: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Model -> headline over [start, end) (ETT%, trend against the window before it of the same
    length, null with `trend_reason` on too small a base; wall and lost GPU-hours, top lost
    component) and jobs submitted in the range; with `team`, of that team's jobs only."""
    span = end - start
    now = by_model(db_session, start, end, models, None, team)
    # The previous window ends where the current one's first UTC day begins (no day twice).
    before = by_model(db_session, start - span, day_start(start), models, None, team)
    base_jobs = jobs_with_time(
        db_session=db_session, start=start - span, end=day_start(start), models=models, team=team
    )
    jobs = jobs_submitted(db_session=db_session, start=start, end=end, team=team)
    return {
        m: {
            "jobs": int(jobs.get(m, 0)),
            **core.headline(now.get(m, {}), before.get(m), base_jobs.get(m, 0)),
        }
        for m in models
    }


def model_summary(
    *,
    db_session: Session,
    model: str,
    start: float,
    end: float,
    bucket: str = "day",
    settings: Settings | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """A model's aggregates over [start, end): headline and trend, components, lost GPU-hours by
    owner, failures by kind and the ETT% series (partial buckets flagged)."""
    # One read of the model's rollup rows over both windows serves every number below.
    cut = day_start(start)
    rows = gpu_rows(
        db_session=db_session,
        start=start - (end - start),
        end=end,
        group=("day", "component", "phase"),
        models=[model],
    )
    current_comps: dict[str, float] = defaultdict(float)
    before: dict[str, float] = defaultdict(float)
    current = []
    for day, comp, phase, _wall, gpu in rows:
        if day >= cut:
            current_comps[comp] += gpu
            current.append((day, comp, phase, gpu))
        else:
            before[comp] += gpu
    series = core.series_from_rows(
        [(d, c, g) for d, c, _p, g in current],
        start=start,
        end=end,
        bucket=bucket,
        now=time.time() if now is None else now,
    )
    by_owner = core.lost_from_rows(
        [(c, p, g) for _d, c, p, g in current],
        by="owner",
        resolver=owners_service.resolver(db_session=db_session, settings=settings),
    )
    base_jobs = jobs_with_time(
        db_session=db_session, start=start - (end - start), end=cut, models=[model]
    ).get(model, 0)
    kinds = dict.fromkeys(FAILURE_KINDS, 0)
    kinds.update(failures_by_kind_exact(db_session=db_session, model=model, start=start, end=end))
    return {
        **core.headline(dict(current_comps), dict(before) if before else None, base_jobs),
        "components_gpu_h": series["total"]["components_gpu_h"],
        "lost_by_owner": by_owner,
        "nof_by_kind": kinds,
        "series": series["series"],
    }
