"""The fleet now: every open job's live state, from the stored results and the learned bounds.

One read of the open jobs' stored live facts (no raw event), one of the bounds of their models;
then the pure `live_state` per job. REST (GET /api/v1/live), the Live page, /metrics and the
live alert pass all call `live_jobs`, so they answer the same on every replica for one `now`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.config import Settings
from backend.ett.catalogue import CUSTOM_PREFIX
from backend.ett.models import JobResult
from backend.jobs.models import Job, Model
from backend.jobs.team import job_team
from backend.live import learn
from backend.live.bounds import LOOP, UNATTRIBUTED, Bound, BoundSet, Override
from backend.live.overrides import overrides_in
from backend.live.state import STATES, Detection, LiveRules, LiveState, live_state
from backend.metrics.window import rolling_ett
from backend.owners import service as owners_service

# Who a detection pages when no SLO of its indicator says (the shipped SLOs say the same).
DEFAULT_OWNERS: dict[str, str] = {
    "loop": "trainer",
    "crash_looping": "trainer",
    "restart_storm": "cluster",
    "silent": "cluster",
}
ROLLING_WINDOWS_S = (3600.0, 6 * 3600.0, 86400.0)
ROLLING_NAMES = {3600.0: "1h", 6 * 3600.0: "6h", 86400.0: "24h"}


def live_rules(settings: Settings | None) -> LiveRules:
    """The detectors' parameters from the settings."""
    if settings is None:
        return LiveRules()
    return LiveRules(
        heartbeat_timeout_s=settings.heartbeat_timeout_s,
        abandon_timeout_s=settings.abandon_timeout_s,
        crash_loop_attempts=settings.live_crash_loop_attempts,
        restart_storm_attempts=settings.live_restart_storm_attempts,
        restart_storm_window_s=settings.live_restart_storm_window_s,
    )


def overrides(settings: Settings | None) -> tuple[Override, ...]:
    """The bound overrides of the SLO file in force (read again when the file changes)."""
    return overrides_in(settings.slos_file if settings else None)


def bound_sets(
    db_session: Session, settings: Settings | None, models: Iterable[str | None]
) -> dict[str | None, BoundSet]:
    """A BoundSet per model (learned rows, the fleet's, the file's overrides)."""
    wanted = set(models)
    learned = learn.learned_rows(db_session, wanted)
    ov = overrides(settings)
    return {m: BoundSet(m, learned, ov) for m in wanted}


def detection_owners(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """Who each kind of detection pages when it is not a phase's hang: the shipped live SLOs'
    owners (the alert pass pages the owner of the SLO in force, backend/alerts/live.py)."""
    return {**DEFAULT_OWNERS, **(overrides or {})}


@dataclass
class LiveJob:
    """One open job's live state, with its team and the owner its bad state pages."""

    state: LiveState
    team: str | None
    owner: str | None
    labels: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON shape (times as epoch seconds)."""
        return {**self.state.to_dict(), "team": self.team, "owner": self.owner}


class OwnerOf:
    """Who a detection pages: a phase's owner in the mapping; the SLO's owner for the rest."""

    def __init__(
        self,
        db_session: Session,
        settings: Settings | None,
        owners: Mapping[str, str] | None = None,
    ) -> None:
        self.resolver = owners_service.resolver(db_session=db_session, settings=settings)
        self.custom = self.resolver.custom_phase_components()
        self.owners = detection_owners(owners)

    def component(self, d: Detection) -> str | None:
        """The detection's component, custom phases mapped as configured."""
        if d.phase and d.phase.startswith(CUSTOM_PREFIX):
            name = d.phase
            while name:
                if name in self.custom:
                    return self.custom[name]
                name = name.rsplit(".", 1)[0] if "." in name else ""
        return d.component

    def __call__(self, d: Detection) -> str:
        """The owning team of one detection."""
        if d.kind == "hung":
            if d.phase in (LOOP, UNATTRIBUTED) or d.phase is None:
                return self.owners["loop"]
            d.component = self.component(d)
            return self.resolver.owner(d.component or "unattributed", d.phase)
        return self.owners.get(d.kind, "trainer")


def _open_rows(db_session: Session, model: str | None, job_id: str | None = None) -> list[Any]:
    stmt = (
        select(
            JobResult.job_id,
            JobResult.model,
            JobResult.gpus,
            JobResult.submitted_at,
            JobResult.result["live"],
            Job.labels,
            Model.owner,
        )
        .join(Job, Job.job_id == JobResult.job_id)
        .outerjoin(Model, Model.name == JobResult.model)
        .where(JobResult.provisional.is_(True))
        .order_by(JobResult.job_id)
    )
    if model is not None:
        stmt = stmt.where(JobResult.model == model)
    if job_id is not None:
        stmt = stmt.where(JobResult.job_id == job_id)
    return list(db_session.execute(stmt))


def live_jobs(
    db_session: Session,
    settings: Settings | None,
    now: float | None = None,
    *,
    model: str | None = None,
    job_id: str | None = None,
    owners: Mapping[str, str] | None = None,
) -> list[LiveJob]:
    """Every open job's live state at `now`, bad ones first (most GPU-hours burned first).

    `owners` names who the non-phase detections page (`loop`, `crash_looping`,
    `restart_storm`, `silent`); the shipped SLOs' owners by default.
    """
    now = time.time() if now is None else now
    rows = _open_rows(db_session, model, job_id)
    bounds = bound_sets(db_session, settings, (r[1] for r in rows))
    rules = live_rules(settings)
    owner_of = OwnerOf(db_session, settings, owners)
    out = []
    for job_id, m, gpus, submitted, facts, labels, model_owner in rows:
        result = {
            "job_id": job_id,
            "model": m,
            "gpus": gpus,
            "submitted_at": submitted,
            "provisional": True,
            "live": facts or {},
        }
        state = live_state(result, bounds[m], now, rules)
        if state is None:
            continue
        for d in state.detections:
            d.detail.setdefault("owner", owner_of(d))
        if state.primary is not None:
            state.component = state.primary.component
        labels = labels or {}
        owner = state.primary.detail["owner"] if state.primary is not None else None
        out.append(LiveJob(state, job_team(labels, model_owner), owner, labels))
    out.sort(
        key=lambda j: (
            not j.state.bad,
            -(j.state.primary.lost_gpu_h if j.state.primary else 0.0),
            j.state.job_id or "",
        )
    )
    return out


def bounds_of(
    db_session: Session, settings: Settings | None, model: str, *, samples: int = 0
) -> list[dict[str, Any]]:
    """The bounds in force for a model: every key its history or the fleet's has, the loop and
    set-up, with where each came from and (samples > 0) the most recent samples behind it."""
    keys = {
        ("loop", ""),
        ("hardware_setup", ""),
        ("trainer_init", ""),
        ("checkpoint_restore", ""),
        ("pt2_compile", "cold"),
        ("pt2_compile", "warm"),
    }
    for _scope, phase, variant in learn.learned_rows(db_session, [model]):
        keys.add((phase, variant))
    for o in overrides(settings):
        if not any(c in o.phase for c in "*?["):
            keys.add((o.phase, o.variant or ""))
    bset = bound_sets(db_session, settings, [model])[model]
    out = []
    for phase, variant in sorted(keys):
        b: Bound = bset(phase, variant)
        doc = b.to_dict()
        if samples > 0 and b.source in ("model", "fleet"):
            doc["sample_values"] = learn.samples_for(
                db_session,
                model=model if b.source == "model" else "",
                phase=b.from_phase,
                variant=b.from_variant,
                limit=min(samples, settings.bounds_max_samples if settings else 200),
            )
        out.append(doc)
    return out


def fleet_now(
    db_session: Session, settings: Settings | None, now: float | None = None
) -> dict[str, Any]:
    """What the fleet is doing now: GPUs and jobs by live state, the bad jobs, rolling ETT%."""
    now = time.time() if now is None else now
    jobs = live_jobs(db_session, settings, now)
    gpus: dict[str, int] = dict.fromkeys(STATES, 0)
    counts: dict[str, int] = dict.fromkeys(STATES, 0)
    for j in jobs:
        # "unknown": a result stored before live facts existed (`ett recompute` gives them)
        kind = j.state.kind
        gpus[kind] = gpus.get(kind, 0) + j.state.gpus
        counts[kind] = counts.get(kind, 0) + 1
    rolling = rolling_ett(db_session=db_session, now=now, windows=ROLLING_WINDOWS_S)
    teams = dict(db_session.execute(select(Model.name, Model.owner)).all())

    def windows(per: dict[float, Any]) -> dict[str, Any]:
        return {
            ROLLING_NAMES[w]: {
                "ett_pct": r.ett_pct,
                "wall_gpu_h": r.wall_gpu_h,
                "effective_gpu_h": r.effective_gpu_h,
            }
            for w, r in per.items()
        }

    models = [
        {"model": m, "team": teams.get(m), "windows": windows(per)}
        for m, per in rolling.items()
        if m is not None
    ]
    models.sort(key=lambda r: -(r["windows"]["24h"]["wall_gpu_h"] or 0.0))
    return {
        "now": now,
        "gpus_by_state": gpus,
        "jobs_by_state": counts,
        "open_jobs": len(jobs),
        "bad_jobs": [j.to_dict() for j in jobs if j.state.bad],
        "jobs": [j.to_dict() for j in jobs],
        "fleet": windows(rolling[None]),
        "models": models,
    }


def bad_counts(jobs: Iterable[LiveJob]) -> dict[tuple[str | None, str | None, str], list[int]]:
    """(model, team, state kind) -> [jobs, GPUs] of the jobs in a bad state (for /metrics)."""
    out: dict[tuple[str | None, str | None, str], list[int]] = defaultdict(lambda: [0, 0])
    for j in jobs:
        if j.state.bad:
            acc = out[(j.state.model, j.team, j.state.kind)]
            acc[0] += 1
            acc[1] += j.state.gpus
    return out
