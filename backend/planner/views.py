"""Planner REST: a model's plan, the fleet's ranked opportunities, a custom what-if."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from backend.auth.deps import ReadAccess
from backend.deps import SessionDep, SettingsDep
from backend.params import (
    alias_query,
    call_service,
    end_query,
    pick_alias,
    rounded,
    start_query,
    time_range,
)
from backend.planner import service
from backend.planner.fit import DEFAULT_HALF_LIFE_DAYS
from backend.planner.schemas import CustomWhatIfOut, FleetPlanOut, ModelPlanOut, WhatIfIn

router = APIRouter(prefix="/plan", tags=["planner"])

_AFTER = start_query("fit on jobs submitted at or after", "submitted_before - 30 days")
_BEFORE = end_query("fit on jobs submitted before (a date is inclusive)", "the end of today")
_START = alias_query("submitted_after", "jobs submitted at or after")
_END = alias_query("submitted_before", "jobs submitted before")
_NAMES = ("submitted_after", "submitted_before")
# Fields whose name does not carry their unit's precision (docs/API.md, "Units and rounding"):
# rates are small numbers, kept to 6 significant digits; a delta of ETT% is in points.
_ROUNDING: dict[str, int | None] = {
    "failure_rate_per_gpu_h": None,
    "failure_rate_per_training_h": None,
    "ett_pct_delta": 2,
}


def _submitted(
    after: str | None, before: str | None, start: str | None, end: str | None
) -> tuple[float, float]:
    """The fit's [submitted_after, submitted_before), from the new names or their aliases."""
    return time_range(
        pick_alias("submitted_after", after, "start", start),
        pick_alias("submitted_before", before, "end", end),
        default_days=service.DEFAULT_PLAN_DAYS,
        names=_NAMES,
    )


_HALF_LIFE = Query(
    None,
    gt=0,
    le=3650,
    description="fit recency-weighted with this half-life, days (the former default: "
    f"{DEFAULT_HALF_LIFE_DAYS:g}); without it each cost is fitted at its current level, "
    "a recent regression excluded (docs/PLANNER.md)",
)


def _rounded(answer: Any) -> Any:
    """The planner's answer rounded as docs/API.md says."""
    return rounded(answer, by_key=_ROUNDING)


@router.get(
    "/models/{model}",
    response_model=ModelPlanOut,
    summary="A model's fitted inputs, predicted ETT% and standard what-ifs",
)
def model_plan(
    model: str,
    _auth: ReadAccess,
    db_session: SessionDep,
    settings: SettingsDep,
    submitted_after: str | None = _AFTER,
    submitted_before: str | None = _BEFORE,
    start: str | None = _START,
    end: str | None = _END,
    half_life_days: float | None = _HALF_LIFE,
) -> Any:
    """Fit, prediction (ETT%, lost GPU-hours a day by component) and what-ifs of one model."""
    lo, hi = _submitted(submitted_after, submitted_before, start, end)
    return _rounded(
        call_service(
            service.model_plan,
            db_session=db_session,
            settings=settings,
            model=model,
            start=lo,
            end=hi,
            half_life_days=half_life_days,
        )
    )


@router.get(
    "/fleet",
    response_model=FleetPlanOut,
    summary="The fleet's top opportunities by GPU-hours a day freed, with owners and models",
)
def fleet_plan(
    _auth: ReadAccess,
    db_session: SessionDep,
    settings: SettingsDep,
    submitted_after: str | None = _AFTER,
    submitted_before: str | None = _BEFORE,
    start: str | None = _START,
    end: str | None = _END,
    half_life_days: float | None = _HALF_LIFE,
    top: int = Query(20, ge=1, le=200, description="how many opportunities"),
) -> Any:
    """Every model's prediction and the what-ifs summed over the fleet, most GPU-hours first."""
    lo, hi = _submitted(submitted_after, submitted_before, start, end)
    return _rounded(
        call_service(
            service.fleet_plan,
            db_session=db_session,
            settings=settings,
            start=lo,
            end=hi,
            half_life_days=half_life_days,
            top=top,
        )
    )


@router.post(
    "/what-if",
    response_model=CustomWhatIfOut,
    summary="A custom change on one model (or every model): predicted ETT% and GPU-hours freed",
)
def what_if(
    body: WhatIfIn, _auth: ReadAccess, db_session: SessionDep, settings: SettingsDep
) -> Any:
    """Predict a custom change; 422 says which field is wrong and why."""
    lo, hi = time_range(
        pick_alias("submitted_after", body.submitted_after, "start", body.start),
        pick_alias("submitted_before", body.submitted_before, "end", body.end),
        default_days=service.DEFAULT_PLAN_DAYS,
        names=_NAMES,
    )
    return _rounded(
        call_service(
            service.custom_what_if,
            db_session=db_session,
            settings=settings,
            model=body.model,
            change=body.change.model_dump(exclude_defaults=True),
            start=lo,
            end=hi,
            half_life_days=body.half_life_days,
        )
    )
