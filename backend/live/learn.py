"""Learn the bounds from finished jobs: read new final results once, keep their samples, refresh.

`refresh(db_session, settings)` is one pass (the live pass runs it every
ETT_BOUNDS_REFRESH_INTERVAL_S, `ett live bounds --refresh` on demand):

1. the finished jobs whose stored result has not given its samples yet (or changed since) give
   them now (`live_sampled_jobs` remembers which result did); a job that reopened takes its
   samples back: it is being judged, and a bound never learns from the job it judges;
2. each (model, phase, variant) keeps its most recent `max_samples` samples, so the table stays
   bounded and a bound follows the history as it moves;
3. every key those samples touched is learned again, for its model and for the fleet.

Idempotent: two passes at once write the same rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import and_, delete, func, or_, select
from sqlalchemy.orm import Session

from backend.config import Settings
from backend.db import insert_for
from backend.ett.models import JobResult
from backend.live.bounds import BoundRules, learn, samples_of
from backend.live.models import BoundSample, LearnedBound, SampledJob

Key = tuple[str, str, str]  # (model or "", phase, variant)


def rules_of(settings: Settings | None) -> BoundRules:
    """The statistic's parameters from the settings (the defaults without)."""
    if settings is None:
        return BoundRules()
    return BoundRules(
        percentile=settings.bounds_percentile,
        factor=settings.bounds_factor,
        floor_s=settings.bounds_floor_s,
        min_samples=settings.bounds_min_samples,
        max_samples=settings.bounds_max_samples,
    )


def _forget(db_session: Session, job_ids: list[str]) -> set[Key]:
    """Drop these jobs' samples and marks; the keys they held."""
    touched: set[Key] = set()
    for i in range(0, len(job_ids), 500):
        chunk = job_ids[i : i + 500]
        touched |= {
            (m, p, v)
            for m, p, v in db_session.execute(
                select(BoundSample.model, BoundSample.phase, BoundSample.variant)
                .where(BoundSample.job_id.in_(chunk))
                .distinct()
            )
        }
        db_session.execute(delete(BoundSample).where(BoundSample.job_id.in_(chunk)))
        db_session.execute(delete(SampledJob).where(SampledJob.job_id.in_(chunk)))
    return touched


def sample_new_results(db_session: Session, *, limit: int = 2000) -> tuple[int, set[Key]]:
    """Read up to `limit` finished results not sampled yet; (jobs read, keys touched)."""
    stmt = (
        select(
            JobResult.job_id,
            JobResult.model,
            JobResult.computed_at,
            JobResult.result["spans"],
            JobResult.result["live"],
        )
        .outerjoin(SampledJob, SampledJob.job_id == JobResult.job_id)
        .where(
            JobResult.provisional.is_(False),
            or_(SampledJob.job_id.is_(None), SampledJob.computed_at != JobResult.computed_at),
        )
        .order_by(JobResult.computed_at, JobResult.job_id)
        .limit(limit)
    )
    rows = db_session.execute(stmt).all()
    touched = _forget(db_session, [r[0] for r in rows])
    samples: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    for job_id, model, computed_at, spans, live in rows:
        for s in samples_of({"spans": spans, "live": live}):
            samples.append(
                {
                    "job_id": job_id,
                    "model": model or "",
                    "phase": s.phase[:128],
                    "variant": s.variant,
                    "attempt": s.attempt,
                    "value_s": s.value_s,
                    "at": s.at,
                }
            )
            touched.add((model or "", s.phase[:128], s.variant))
        marks.append({"job_id": job_id, "computed_at": computed_at})
    for i in range(0, len(samples), 5000):
        db_session.execute(BoundSample.__table__.insert(), samples[i : i + 5000])
    if marks:
        db_session.execute(SampledJob.__table__.insert(), marks)
    return len(rows), touched


def forget_reopened(db_session: Session) -> set[Key]:
    """Jobs sampled once and open again (a late event) take their samples back."""
    ids = list(
        db_session.scalars(
            select(SampledJob.job_id)
            .join(JobResult, JobResult.job_id == SampledJob.job_id)
            .where(JobResult.provisional.is_(True))
        )
    )
    return _forget(db_session, ids) if ids else set()


def _recent(db_session: Session, where: Any, n: int) -> list[float]:
    """The values of the `n` most recent samples matching `where`, oldest first."""
    rows = db_session.execute(
        select(BoundSample.value_s, BoundSample.at)
        .where(where)
        .order_by(BoundSample.at.desc(), BoundSample.id.desc())
        .limit(n)
    ).all()
    return [v for v, _at in reversed(rows)]


def _prune(db_session: Session, key: Key, keep: int) -> None:
    """Keep the `keep` most recent samples of one (model, phase, variant)."""
    model, phase, variant = key
    where = and_(
        BoundSample.model == model, BoundSample.phase == phase, BoundSample.variant == variant
    )
    cutoff = db_session.execute(
        select(BoundSample.at, BoundSample.id)
        .where(where)
        .order_by(BoundSample.at.desc(), BoundSample.id.desc())
        .offset(keep - 1)
        .limit(1)
    ).first()
    if cutoff is None:
        return
    at, sid = cutoff
    db_session.execute(
        delete(BoundSample).where(
            where, or_(BoundSample.at < at, and_(BoundSample.at == at, BoundSample.id < sid))
        )
    )


def _write(
    db_session: Session,
    scope: str,
    phase: str,
    variant: str,
    values: list[float],
    rules: BoundRules,
    now: float,
) -> None:
    learned = learn(values, rules)
    key_where = and_(
        LearnedBound.scope == scope, LearnedBound.phase == phase, LearnedBound.variant == variant
    )
    if learned is None:
        db_session.execute(delete(LearnedBound).where(key_where))
        return
    bound_s, q = learned
    row = {"bound_s": bound_s, "quantile_s": q, "samples": len(values), "computed_at": now}
    stmt = insert_for(db_session, LearnedBound).values(
        scope=scope, phase=phase, variant=variant, **row
    )
    db_session.execute(
        stmt.on_conflict_do_update(index_elements=["scope", "phase", "variant"], set_=row)
    )


def relearn(db_session: Session, keys: Iterable[Key], rules: BoundRules, now: float) -> int:
    """Learn each key again, for its model and for the fleet; returns the bounds written."""
    keys = set(keys)
    n = 0
    for key in sorted(keys):
        _prune(db_session, key, rules.max_samples)
    for model, phase, variant in sorted(keys):
        if not model:
            continue
        values = _recent(
            db_session,
            and_(
                BoundSample.model == model,
                BoundSample.phase == phase,
                BoundSample.variant == variant,
            ),
            rules.max_samples,
        )
        _write(db_session, model, phase, variant, values, rules, now)
        n += 1
    for phase, variant in sorted({(p, v) for _m, p, v in keys}):
        values = _recent(
            db_session,
            and_(BoundSample.phase == phase, BoundSample.variant == variant),
            rules.max_samples,
        )
        _write(db_session, "", phase, variant, values, rules, now)
        n += 1
    return n


def refresh(
    db_session: Session,
    settings: Settings | None = None,
    *,
    now: float | None = None,
    batch: int = 2000,
    max_batches: int | None = None,
) -> dict[str, int]:
    """One learning pass (the caller commits): sample new finished jobs, learn touched keys."""
    now = time.time() if now is None else now
    rules = rules_of(settings)
    touched = forget_reopened(db_session)
    jobs = 0
    batches = 0
    while max_batches is None or batches < max_batches:
        read, keys = sample_new_results(db_session, limit=batch)
        jobs += read
        touched |= keys
        batches += 1
        if read < batch:
            break
    written = relearn(db_session, touched, rules, now)
    return {"jobs": jobs, "keys": len(touched), "bounds": written}


def learned_rows(
    db_session: Session, models: Iterable[str | None]
) -> dict[Key, tuple[float, int, float | None]]:
    """The learned bounds of these models and the fleet's, as a BoundSet wants them."""
    scopes = {m for m in models if m} | {""}
    out: dict[Key, tuple[float, int, float | None]] = {}
    scope_list = sorted(scopes)
    for i in range(0, len(scope_list), 500):
        for row in db_session.execute(
            select(
                LearnedBound.scope,
                LearnedBound.phase,
                LearnedBound.variant,
                LearnedBound.bound_s,
                LearnedBound.samples,
                LearnedBound.quantile_s,
            ).where(LearnedBound.scope.in_(scope_list[i : i + 500]))
        ):
            out[(row[0], row[1], row[2])] = (float(row[3]), int(row[4]), row[5])
    return out


def samples_for(
    db_session: Session, *, model: str, phase: str, variant: str, limit: int
) -> list[dict[str, Any]]:
    """The most recent samples of one key (the model's, or every model's for model ""), newest first."""
    where = and_(BoundSample.phase == phase, BoundSample.variant == variant)
    if model:
        where = and_(where, BoundSample.model == model)
    rows = db_session.execute(
        select(
            BoundSample.job_id,
            BoundSample.model,
            BoundSample.attempt,
            BoundSample.value_s,
            BoundSample.at,
        )
        .where(where)
        .order_by(BoundSample.at.desc(), BoundSample.id.desc())
        .limit(limit)
    ).all()
    return [
        {"job_id": j, "model": m or None, "attempt": a, "value_s": v, "at": at}
        for j, m, a, v, at in rows
    ]


def sample_count(db_session: Session) -> int:
    """Samples kept (for `ett live bounds`)."""
    return int(db_session.scalar(select(func.count()).select_from(BoundSample)) or 0)
