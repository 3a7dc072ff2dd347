"""Compare REST: one baseline/optimized pair, or the pairs a label chooses."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, HTTPException, Query

from backend.auth.deps import ReadAccess
from backend.compare import service
from backend.compare.schemas import CompareAnswer, PairsAnswer
from backend.deps import SessionDep
from backend.params import (
    alias_query,
    call_service,
    csv_response,
    end_query,
    parse_labels,
    pick_alias,
    start_query,
    submitted_range,
    with_rfc3339,
)

router = APIRouter(prefix="/compare", tags=["compare"])


@router.get(
    "",
    summary="Compare a baseline job with an optimized job (Fig. 6, Eq. 3)",
    response_model=CompareAnswer,
)
def compare(
    _auth: ReadAccess,
    db_session: SessionDep,
    baseline: str = Query(..., min_length=1, max_length=128, description="baseline job id"),
    optimized: str = Query(..., min_length=1, max_length=128, description="optimized job id"),
) -> Any:
    """`delta`, `attribution`, `restart_multiplier`, `cascade`, `nof`, `warnings`, both jobs."""
    return with_rfc3339(
        call_service(
            service.compare_jobs, db_session=db_session, baseline=baseline, optimized=optimized
        )
    )


def _one_label(value: str, name: str) -> tuple[str, str]:
    labels = parse_labels([value])
    if len(labels) != 1:
        raise HTTPException(422, f"{name}: expected one key=value")
    return next(iter(labels.items()))


@router.get(
    "/pairs",
    summary="Compare every pair a label chooses, summed in minutes",
    response_model=PairsAnswer,
    responses={200: {"content": {"text/csv": {}}, "description": "JSON, or CSV with format=csv"}},
)
def compare_pairs(
    _auth: ReadAccess,
    db_session: SessionDep,
    baseline_label: str = Query("variant=baseline", description="key=value of baseline jobs"),
    optimized_label: str = Query("variant=optimized", description="key=value of optimized jobs"),
    pair_key: str | None = Query(None, description="label whose value pairs jobs in a model"),
    model: str | None = Query(None),
    team: str | None = Query(
        None, description="the jobs of this team (owner label, else the model's team)"
    ),
    owner: str | None = alias_query(
        "team", "the jobs of this team (owner label, else the model's team)"
    ),
    submitted_after: str | None = start_query("jobs submitted at or after", "none"),
    submitted_before: str | None = end_query("jobs submitted before (a date is inclusive)", "none"),
    start: str | None = alias_query("submitted_after", "jobs submitted at or after"),
    end: str | None = alias_query("submitted_before", "jobs submitted before"),
    format: Literal["json", "csv"] = Query("json"),
) -> Any:
    """`{"pairs": [...], "total": {...}, "unpaired": [...], "warnings": [...]}`."""
    lo, hi = submitted_range(
        pick_alias("submitted_after", submitted_after, "start", start),
        pick_alias("submitted_before", submitted_before, "end", end),
        names=("submitted_after", "submitted_before"),
    )
    answer = call_service(
        service.compare_by_label,
        db_session=db_session,
        baseline_label=_one_label(baseline_label, "baseline_label"),
        optimized_label=_one_label(optimized_label, "optimized_label"),
        pair_key=pair_key,
        model=model,
        owner=pick_alias("team", team, "owner", owner),
        start=lo,
        end=hi,
    )
    if format == "csv":
        rows = [
            {**p, "baseline": p["baseline"]["job_id"], "optimized": p["optimized"]["job_id"]}
            for p in answer["pairs"]
        ]
        cols = ["model", "baseline", "optimized"]
        cols += [f"delta.{k}" for k in ("tts_s", "recovery_s", "checkpoint_s", "shutdown_s")]
        cols += ["delta.lost_s", "restart_multiplier", "cascade.tts_bound_s"]
        cols += ["cascade.recovery_residual_s", "nof.baseline", "nof.optimized"]
        return csv_response(rows, cols, "compare-pairs.csv")
    return with_rfc3339({**answer, "submitted_after": lo, "submitted_before": hi})
