"""REST: the fleet now (GET /live), one open job's live state, a model's learned bounds."""

from __future__ import annotations

import time
from typing import Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Query

from backend.auth.deps import ReadAccess
from backend.deps import SessionDep, SettingsDep
from backend.live import service
from backend.live.learn import rules_of
from backend.live.schemas import BoundsAnswer, LiveFleet, LiveJobOut
from backend.timefmt import rfc3339

router = APIRouter(prefix="/live", tags=["live"])


def _job_out(doc: dict[str, Any]) -> LiveJobOut:
    detections = [
        {
            **d,
            "since": rfc3339(d["since"]),
            "started_at": rfc3339(d.get("started_at")),
            "owner": d["detail"].get("owner"),
            "detail": {k: v for k, v in d["detail"].items() if k != "owner"},
        }
        for d in doc["detections"]
    ]
    return LiveJobOut(
        **{k: v for k, v in doc.items() if k not in ("since", "detections")},
        since=rfc3339(doc["since"]),
        job_url="/job?" + urlencode({"job_id": doc["job_id"] or ""}),
        detections=detections,
    )


@router.get("", response_model=LiveFleet, summary="The fleet now: GPUs by live state, bad jobs")
def fleet_now(
    _auth: ReadAccess,
    db_session: SessionDep,
    settings: SettingsDep,
    jobs: Literal["bad", "all"] = Query("bad", description="list the bad jobs, or every open job"),
) -> Any:
    """GPUs and jobs by live state right now, the jobs in a bad state (owner, bound, overrun,
    GPU-hours burned), and the fleet's and each model's ETT% over the last 1 h, 6 h and 24 h,
    open jobs' provisional time included (docs/ALERTS.md, "Live states")."""
    doc = service.fleet_now(db_session, settings, time.time())
    listed = doc["bad_jobs"] if jobs == "bad" else doc["jobs"]
    return LiveFleet(
        now=rfc3339(doc["now"]) or "",
        gpus_by_state=doc["gpus_by_state"],
        jobs_by_state=doc["jobs_by_state"],
        open_jobs=doc["open_jobs"],
        jobs=[_job_out(j) for j in listed],
        fleet=doc["fleet"],
        models=doc["models"],
    )


@router.get("/jobs/{job_id:path}", response_model=LiveJobOut, summary="One open job's live state")
def live_job(job_id: str, _auth: ReadAccess, db_session: SessionDep, settings: SettingsDep) -> Any:
    """The job's live state now; 404 when the job is unknown or no longer open."""
    for job in service.live_jobs(db_session, settings, time.time(), job_id=job_id):
        return _job_out(job.to_dict())
    raise HTTPException(404, f"job {job_id!r} is not open: a finished job has no live state")


@router.get("/bounds", response_model=BoundsAnswer, summary="A model's learned bounds")
def bounds(
    _auth: ReadAccess,
    db_session: SessionDep,
    settings: SettingsDep,
    model: str = Query(..., min_length=1, max_length=256),
    samples: int = Query(20, ge=0, le=1000, description="how many of the samples to list"),
) -> Any:
    """The bound in force for each phase, hardware set-up and the loop of a model: the value,
    where it came from (the model's history, the fleet's, an override, the shipped default),
    how many samples it was learned from and the most recent of them."""
    rows = service.bounds_of(db_session, settings, model, samples=samples)
    for row in rows:
        for sample in row.get("sample_values") or []:
            sample["at"] = rfc3339(sample["at"])
    r = rules_of(settings)
    return BoundsAnswer(
        model=model,
        statistic={
            "percentile": r.percentile,
            "factor": r.factor,
            "floor_s": r.floor_s,
            "min_samples": r.min_samples,
            "max_samples": r.max_samples,
        },
        bounds=rows,
    )
