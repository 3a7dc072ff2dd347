"""Paired comparison over stored job results: one pair by job ids, or pairs chosen by label."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.compare.cascade import compare_pair, compare_set, lost_parts
from backend.ett.models import JobResult
from backend.jobs.models import Job, Model
from backend.jobs.team import team_clause
from backend.metrics import core as metrics
from backend.metrics.reads import scope_models


def _summaries(s: Session, where: list[Any]) -> list[dict[str, Any]]:
    stmt = (
        select(
            JobResult.job_id,
            JobResult.model,
            JobResult.gpus,
            JobResult.status,
            JobResult.provisional,
            JobResult.submitted_at,
            JobResult.ended_at,
            JobResult.e2e_s,
            JobResult.effective_s,
            JobResult.e2e_gpu_s,
            JobResult.effective_gpu_s,
            JobResult.ett_pct,
            JobResult.nof,
            JobResult.result["l1"].label("l1"),
            JobResult.result["components"].label("components"),
            JobResult.result["attempts"].label("attempts"),
            Job.config,
            Job.labels,
        )
        .join(Job, Job.job_id == JobResult.job_id)
        .outerjoin(Model, Model.name == JobResult.model)
        .where(*where)
    )
    out = []
    for r in s.execute(stmt):
        parts = lost_parts({"l1": r.l1 or {}, "e2e_s": r.e2e_s, "effective_s": r.effective_s})
        effective_gpu_s, wall_gpu_s = metrics.job_gpu_s(
            {
                "gpus": r.gpus,
                "e2e_s": r.e2e_s,
                "effective_s": r.effective_s,
                "e2e_gpu_s": r.e2e_gpu_s,
                "effective_gpu_s": r.effective_gpu_s,
            }
        )
        out.append(
            {
                "job_id": r.job_id,
                "model": r.model,
                "gpus": r.gpus,
                "status": r.status,
                "provisional": bool(r.provisional),
                "submitted_at": r.submitted_at,
                "ended_at": r.ended_at,
                "e2e_s": r.e2e_s,
                "effective_s": r.effective_s,
                "ett_pct": r.ett_pct,
                "nof": r.nof,
                "labels": r.labels or {},
                "checkpoint_interval_s": (r.config or {}).get("checkpoint_interval_s"),
                "components": r.components or {},
                **parts,
                "lost_gpu_h": metrics.gpu_h(wall_gpu_s - effective_gpu_s),
                "attempt_gpus": metrics.attempt_gpus(r.attempts, r.gpus),
            }
        )
    return out


def job_summary(*, db_session: Session, job_id: str) -> dict[str, Any]:
    """One job's comparison summary (Level-1 lost parts, NoF, components); LookupError if none."""
    rows = _summaries(db_session, [JobResult.job_id == job_id])
    if not rows:
        raise LookupError(f"unknown job {job_id!r} (or not computed yet)")
    return rows[0]


def compare_jobs(*, db_session: Session, baseline: str, optimized: str) -> dict[str, Any]:
    """Compare two jobs: delta, attribution, restart_multiplier, cascade, nof, warnings."""
    b = job_summary(db_session=db_session, job_id=baseline)
    o = job_summary(db_session=db_session, job_id=optimized)
    return {"baseline": b, "optimized": o, **compare_pair(b, o)}


def compare_by_label(
    *,
    db_session: Session,
    baseline_label: tuple[str, str],
    optimized_label: tuple[str, str],
    pair_key: str | None = None,
    model: str | None = None,
    owner: str | None = None,
    start: float | None = None,
    end: float | None = None,
) -> dict[str, Any]:
    """Pairs of jobs chosen by label, compared one by one and summed (minutes included).

    Within a model, a job labelled `baseline_label` pairs with one labelled `optimized_label`:
    the ones sharing the value of label `pair_key` when given, else the latest submitted of
    each. Answers {"pairs": [...], "total": {...}, "unpaired": [...], "warnings": [...]}.
    """
    models = scope_models(db_session=db_session, model=model, owner=owner)
    where: list[Any] = []
    if models is not None:
        where.append(JobResult.model.in_(models))
    if owner is not None:
        where.append(team_clause(owner))
    if start is not None:
        where.append(JobResult.submitted_at >= start)
    if end is not None:
        where.append(JobResult.submitted_at < end)

    def side(label: tuple[str, str]) -> dict[tuple[str | None, str | None], dict[str, Any]]:
        k, v = label
        chosen: dict[tuple[str | None, str | None], dict[str, Any]] = {}
        rows = _summaries(db_session, [*where, Job.labels[k].as_string() == v])
        for r in sorted(rows, key=lambda r: (r["submitted_at"] or 0.0, r["job_id"])):
            key = (r["model"], r["labels"].get(pair_key) if pair_key else None)
            if pair_key and key[1] is None:
                continue
            chosen[key] = r
        return chosen

    base, opt = side(baseline_label), side(optimized_label)
    pairs = []
    for key in sorted(set(base) & set(opt), key=lambda k: (k[0] or "", k[1] or "")):
        b, o = base[key], opt[key]
        if b["job_id"] == o["job_id"]:
            continue
        pairs.append({"model": key[0], "baseline": b, "optimized": o, **compare_pair(b, o)})
    unpaired = [
        {"model": k[0], "pair": k[1], "job_id": side_rows[k]["job_id"], "role": role}
        for role, side_rows, other in (("baseline", base, opt), ("optimized", opt, base))
        for k in sorted(set(side_rows) - set(other), key=lambda k: (k[0] or "", k[1] or ""))
    ]
    warnings = [
        {**w, "model": p["model"], "baseline": p["baseline"]["job_id"]}
        for p in pairs
        for w in p["warnings"]
    ]
    return {"pairs": pairs, "total": compare_set(pairs), "unpaired": unpaired, "warnings": warnings}
