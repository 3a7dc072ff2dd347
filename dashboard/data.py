"""The dashboard's reads: the backend's service functions, called in-process.

Every number a page shows comes through here, from the same functions the REST views call,
so the dashboard and the API agree. Answers are plain dicts and pandas data frames.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pandas as pd
from sqlalchemy.orm import Session

from backend.advice import service as advice_service
from backend.alerts import acks as alert_acks
from backend.alerts import history as alerts_history
from backend.alerts import read as alert_read
from backend.alerts import silences as alert_silences
from backend.alerts import store
from backend.annotations import service as annotations_service
from backend.compare import service as compare_service
from backend.db import describe_error
from backend.ett.catalogue import COMPONENTS
from backend.fleet.days import bucket_start
from backend.jobs import quarantine
from backend.live import service as live_service
from backend.metrics import core as metrics_core
from backend.metrics import fleet as metrics_fleet
from backend.metrics import nodes as metrics_nodes
from backend.metrics import reads as metrics_reads
from backend.metrics import reliability as metrics_reliability
from backend.owners import service as owners_service
from backend.planner import service as planner_service
from backend.results import read as results_read
from backend.workloads import service as workloads_service
from dashboard.context import current
from dashboard.filters import Filters

# The most jobs a table or chart asks for at once (the REST pages hold 50 by default).
MAX_JOBS = 5_000
MAX_MODELS = 5_000

T = TypeVar("T")


@contextmanager
def session() -> Iterator[Session]:
    """A session on the request's database (for writes: the owner actions)."""
    with current().database.session() as s:
        yield s


@contextmanager
def read_session() -> Iterator[Session]:
    """A read-only session on the request's database (never waits for the recompute writer)."""
    with current().database.read_session() as s:
        yield s


def to_datetime(values: Any) -> pd.Series:
    """Epoch seconds or RFC 3339 strings to UTC timestamps."""
    series = pd.Series(values)
    if series.empty:
        return pd.Series([], dtype="datetime64[ns, UTC]")
    if pd.api.types.is_numeric_dtype(series):
        return pd.to_datetime(series, unit="s", utc=True)
    return pd.to_datetime(series, utc=True, format="ISO8601")


def epoch(value: Any) -> float | None:
    """Epoch seconds from a float or an RFC 3339 string."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    return pd.Timestamp(value).timestamp()


def _labels(filters: Filters) -> dict[str, str] | None:
    return dict([filters.label]) if filters.label else None


def _or_none(fn: Callable[..., T], **kw: Any) -> T | None:
    """`fn(db_session=..., **kw)` in a fresh session, or None when it raises LookupError."""
    with read_session() as s:
        try:
            return fn(db_session=s, **kw)
        except LookupError:
            return None


# ---------------------------------------------------------------- names


def model_owners() -> dict[str, str | None]:
    """Model name -> owning team, for every model the system knows."""
    with read_session() as s:
        return metrics_fleet.model_owners(db_session=s)


def model_names() -> list[str]:
    """Every model name, sorted (the filter bar's search list)."""
    return sorted(model_owners())


def team_names() -> list[str]:
    """Every team some job belongs to (its owner label, else its model's), sorted (the Team
    filter's list): the teams a `team=` filter finds (backend.jobs.team)."""
    with read_session() as s:
        return metrics_reads.teams(db_session=s)


def owner_names() -> list[str]:
    """Every team that owns a component or phase, sorted (the owners page's Owner filter)."""
    return sorted(set(component_owners().values()))


def has_data() -> bool:
    """True once any model has sent a job (empty states say "no match" rather than "no data")."""
    return bool(model_owners())


def component_owners() -> dict[str, str]:
    """Component (and phase) -> owning team, from the owner mapping in force."""
    with read_session() as s:
        mapping = owners_service.current_mapping(db_session=s, settings=current().settings)
    out = {comp: e.owner for comp, e in mapping.components.items() if e.owner}
    out.update({phase: e.owner for phase, e in mapping.phases.items() if e.owner})
    return out


# ---------------------------------------------------------------- jobs


class JobUncomputable(Exception):
    """A job whose answer cannot be computed; str() is the error (it is quarantined)."""


def job_result(job_id: str) -> dict[str, Any] | None:
    """One job's answer, as GET /api/v1/jobs/{job_id}/ett gives it (times as epoch seconds).

    Raises JobUncomputable with the error when its computation fails.
    """
    with read_session() as s:
        try:
            return results_read.job_ett(db_session=s, job_id=job_id, settings=current().settings)
        except Exception as err:  # noqa: BLE001 - shown on the page, never a server error
            s.rollback()
            held = quarantine.status(db_session=s, job_id=job_id)
            raise JobUncomputable(held["error"] if held else describe_error(err)) from None


def job_quarantine(job_id: str) -> dict[str, Any] | None:
    """A job's quarantine (error, failures, next try as epoch seconds), or None."""
    with read_session() as s:
        return quarantine.status(db_session=s, job_id=job_id)


def critical_path(job_id: str) -> dict[str, Any] | None:
    """Each attempt's init critical path and the fast-batch what-if, or None when not computed."""
    return _or_none(advice_service.critical_path, job_id=job_id, settings=current().settings)


def jobs_frame(
    filters: Filters,
    *,
    model: str | None = None,
    limit: int = MAX_JOBS,
    sort: str = "-submitted_at",
) -> pd.DataFrame:
    """Jobs whose wall time meets the range (GET /api/v1/jobs), newest first by default."""
    with read_session() as s:
        rows, _total = results_read.list_jobs(
            db_session=s,
            model=model or filters.model,
            owner=filters.team,
            labels=_labels(filters),
            start=filters.start_ts,
            end=filters.end_ts,
            sort=sort,
            limit=limit,
        )
    columns = [
        "job_id",
        "model",
        "owner",
        "labels",
        "gpus",
        "status",
        "provisional",
        "submitted_at",
        "ended_at",
        "e2e_s",
        "effective_s",
        "ett_pct",
        "gpu_hours_lost",
        "nof",
        "tts_s",
        "recovery_s",
    ]
    return pd.DataFrame(rows, columns=columns)


@dataclass
class JobSearch:
    """One page of the Jobs list: the rows, how many jobs match in all, and where the page starts."""

    rows: list[dict[str, Any]]
    total: int
    offset: int


def search_jobs(
    filters: Filters,
    *,
    search: str | None,
    status: str | None,
    sort: str,
    limit: int,
    offset: int,
    component: str | None = None,
) -> JobSearch:
    """Jobs by id or model prefix, status, model, team and label, one page (server-side);
    with `component`, those with time in it inside the range.

    A search looks through every job, whatever the date range; without one the range applies.
    With `component`, rows carry component_gpu_h and sort may be by it.
    """
    ranged = not search
    with session() as s:
        rows, total = results_read.list_jobs(
            db_session=s,
            model=filters.model,
            owner=filters.team,
            labels=_labels(filters),
            status=status,
            start=filters.start_ts if ranged else None,
            end=filters.end_ts if ranged else None,
            sort=sort,
            limit=limit,
            offset=offset,
            search=search,
            component=component,
        )
    return JobSearch(rows, total, offset)


def labelled_jobs(filters: Filters, key: str, value: str, limit: int = 200) -> list[str]:
    """Ids of the jobs labelled key=value in the range, newest first (compare's suggestions)."""
    with session() as s:
        rows, _total = results_read.list_jobs(
            db_session=s,
            model=filters.model,
            owner=filters.team,
            labels={key: value},
            start=filters.start_ts,
            end=filters.end_ts,
            limit=limit,
        )
    return [r["job_id"] for r in rows]


def job_ids_like(search: str, limit: int = 20) -> list[str]:
    """Ids of the newest jobs whose id or model starts with `search` (any date)."""
    with session() as s:
        rows, _total = results_read.list_jobs(db_session=s, search=search, limit=limit)
    return [r["job_id"] for r in rows]


def job_statuses() -> list[str]:
    """Every job status stored."""
    with session() as s:
        return results_read.job_statuses(db_session=s)


def job_summaries(job_ids: list[str]) -> pd.DataFrame:
    """Per job: its L2 components (seconds), the four L1 lost parts, ETT% (compare's summaries)."""
    rows = []
    with read_session() as s:
        for job_id in job_ids:
            try:
                summary = compare_service.job_summary(db_session=s, job_id=job_id)
            except LookupError:
                continue
            comps = summary.get("components") or {}
            rows.append(
                {
                    **{k: summary.get(k) for k in ("job_id", "model", "ett_pct", "submitted_at")},
                    **{
                        k: summary.get(k, 0.0)
                        for k in ("tts_s", "recovery_s", "checkpoint_s", "shutdown_s")
                    },
                    **{c: float(comps.get(c, 0.0)) for c in COMPONENTS},
                }
            )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- fleet


def _bucket_dates(values: Any) -> pd.Series:
    return to_datetime(values).dt.tz_convert(None)


@dataclass
class FleetView:
    """Everything the fleet page draws (empty frames when nothing ran in the range)."""

    headline: dict[str, Any]
    series: pd.DataFrame
    lost_by_component: pd.DataFrame
    nof: pd.DataFrame
    regressions: pd.DataFrame
    error: str | None = None
    owner_components: pd.DataFrame = field(default_factory=pd.DataFrame)


def _empty_fleet(error: str | None = None) -> FleetView:
    return FleetView(
        {"ett_pct": None, "gpu_hours_lost": 0.0, "jobs": 0, "failures": 0, "wall_gpu_h": 0.0},
        pd.DataFrame(columns=["bucket", "ett_pct", "wall_gpu_h"]),
        pd.DataFrame(columns=["bucket", "component", "gpu_h"]),
        pd.DataFrame(columns=["bucket", "kind", "failures", "jobs"]),
        pd.DataFrame(columns=["model", "before_pct", "after_pct"]),
        error,
        pd.DataFrame(columns=["owner", "component", "gpu_h"]),
    )


def _owner_components(s: Session, filters: Filters) -> pd.DataFrame:
    by_owner = metrics_fleet.lost_gpu_hours(
        db_session=s,
        settings=current().settings,
        start=filters.start_ts,
        end=filters.end_ts,
        by="owner",
        model=filters.model,
        owner=filters.team,
        labels=_labels(filters),
    )
    return pd.DataFrame(
        [
            {"owner": r["owner"], "component": c, "gpu_h": v}
            for r in by_owner
            for c, v in r["components"].items()
        ],
        columns=["owner", "component", "gpu_h"],
    )


def owner_components(filters: Filters) -> pd.DataFrame:
    """Lost GPU-hours per owning team and component in the range (empty on a LookupError)."""
    with read_session() as s:
        try:
            return _owner_components(s, filters)
        except LookupError:
            return _empty_fleet().owner_components


def fleet_view(filters: Filters) -> FleetView:
    """Headline, ETT% trend, lost GPU-hours by component and owner, NoF per job, regressions."""
    scope = {"model": filters.model, "owner": filters.team, "labels": _labels(filters)}
    span = filters.end_ts - filters.start_ts
    with read_session() as s:
        try:
            ett = metrics_fleet.fleet_ett(
                db_session=s,
                start=filters.start_ts,
                end=filters.end_ts,
                bucket=filters.bucket,
                **scope,
            )
            failures = metrics_fleet.failure_series(
                db_session=s,
                start=filters.start_ts,
                end=filters.end_ts,
                bucket=filters.bucket,
                **scope,
            )
            owner_components = _owner_components(s, filters)
            regressed = metrics_fleet.regressions(
                db_session=s,
                before_start=filters.start_ts - span,
                before_end=filters.start_ts,
                after_start=filters.start_ts,
                after_end=filters.end_ts,
                owner=filters.team,
                labels=_labels(filters),
            )
        except LookupError as err:
            missing: str | None = str(err).strip("'\"")
        else:
            missing = None
    if missing is not None:
        # Outside the session above: SQLite allows one writer-capable session at a time.
        if filters.team and filters.team not in team_names():
            missing = (
                f"No job belongs to team {filters.team!r}: pick a team from the Team list, "
                "or clear it. (A team that owns a component is on the Owners page.)"
            )
        return _empty_fleet(missing)
    total = ett["total"]
    headline = {
        "ett_pct": total["ett_pct"],
        "gpu_hours_lost": total["lost_gpu_h"],
        "wall_gpu_h": total["wall_gpu_h"],
        "jobs": failures["total"]["jobs"],
        "failures": failures["total"]["failures"],
    }
    points = [p for p in ett["series"] if p["ett_pct"] is not None]
    series = pd.DataFrame(
        {
            "bucket": _bucket_dates([p["bucket"] for p in points]),
            "ett_pct": [p["ett_pct"] for p in points],
            "wall_gpu_h": [p["wall_gpu_h"] for p in points],
            "partial": [bool(p.get("partial")) for p in points],
        }
    )
    lost_rows = [
        {"bucket": p["bucket"], "component": c, "gpu_h": v}
        for p in ett["series"]
        for c, v in p["components_gpu_h"].items()
        if c != "effective_training" and v > 0
    ]
    lost = pd.DataFrame(lost_rows, columns=["bucket", "component", "gpu_h"])
    lost["bucket"] = (
        _bucket_dates(lost["bucket"].astype(float)) if not lost.empty else lost["bucket"]
    )
    nof_rows = [
        {"bucket": p["bucket"], "kind": k, "failures": n, "jobs": p["jobs"]}
        for p in failures["series"]
        for k, n in p["nof_by_kind"].items()
        if n
    ]
    nof = pd.DataFrame(nof_rows, columns=["bucket", "kind", "failures", "jobs"])
    if not nof.empty:
        nof["bucket"] = _bucket_dates(nof["bucket"].astype(float))
    reg = pd.DataFrame(
        [
            {
                "model": r["model"],
                "before_pct": r["ett_pct_before"],
                "after_pct": r["ett_pct_after"],
            }
            for r in regressed
            if r["model"] and (not filters.model or r["model"] == filters.model)
        ],
        columns=["model", "before_pct", "after_pct"],
    )
    return FleetView(headline, series, lost, nof, reg, None, owner_components)


def _weighted_level1(jobs: pd.DataFrame, key: pd.Series) -> pd.DataFrame:
    """GPU-weighted TTS per job and TTR per failure, and NoF per job, grouped by `key`."""
    points = metrics_core.weighted_level1(
        zip(key, jobs["gpus"], jobs["tts_s"], jobs["recovery_s"], jobs["nof"], strict=True)
    )
    return pd.DataFrame(points, columns=["x", "tts_min", "ttr_min", "nof"])


def fleet_level1(filters: Filters, nof: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The fleet's Level-1 view per bucket: GPU-weighted TTS and TTR, and NoF per job by kind.

    TTS and TTR come from the jobs submitted in each bucket, weighted by their GPUs; NoF by
    kind is the fleet page's failure series (`nof`: bucket, kind, failures, jobs).
    """
    with session() as s:
        rows = results_read.level1_rows(
            db_session=s,
            start=filters.start_ts,
            end=filters.end_ts,
            model=filters.model,
            owner=filters.team,
            labels=_labels(filters),
        )
    jobs = pd.DataFrame(rows, columns=["submitted_at", "gpus", "tts_s", "recovery_s", "nof"])
    if jobs.empty:
        return pd.DataFrame(columns=["x", "tts_min", "ttr_min", "nof"]), pd.DataFrame()
    key = _bucket_dates([bucket_start(float(t), filters.bucket) for t in jobs["submitted_at"]])
    points = _weighted_level1(jobs, key)
    kinds = pd.DataFrame(
        {
            "x": nof["bucket"],
            "kind": nof["kind"],
            "nof": nof["failures"] / nof["jobs"].where(nof["jobs"] > 0),
        }
    ).fillna({"nof": 0.0})
    return points, kinds


def model_level1(jobs: list[dict[str, Any]]) -> pd.DataFrame:
    """A model's Level-1 view, one point per job: TTS, TTR per failure, NoF."""
    frame = pd.DataFrame(jobs, columns=["job_id", "submitted_at", "tts_s", "recovery_s", "nof"])
    nof = frame["nof"].astype(float)
    return pd.DataFrame(
        {
            "x": to_datetime(frame["submitted_at"].astype(float).round()).dt.tz_convert(None),
            "job_id": frame["job_id"],
            "tts_min": frame["tts_s"].astype(float) / 60.0,
            "ttr_min": frame["recovery_s"].astype(float) / nof.where(nof > 0) / 60.0,
            "nof": nof,
        }
    )


def model_lost(page: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A model page's lost GPU-hours per bucket by component, and in the range by owner."""
    by_bucket = pd.DataFrame(
        [
            {"bucket": p["bucket"], "component": c, "gpu_h": v}
            for p in page["series"]
            for c, v in p["components_gpu_h"].items()
            if c != "effective_training" and v > 0
        ],
        columns=["bucket", "component", "gpu_h"],
    )
    if not by_bucket.empty:
        by_bucket["bucket"] = _bucket_dates(by_bucket["bucket"].astype(float))
    by_owner = pd.DataFrame(
        [
            {"owner": r["owner"], "component": c, "gpu_h": v}
            for r in page.get("lost_by_owner") or []
            for c, v in (r.get("components") or {}).items()
        ],
        columns=["owner", "component", "gpu_h"],
    )
    return by_bucket, by_owner


def owner_trend(filters: Filters, components: set[str]) -> pd.DataFrame:
    """Lost GPU-hours per bucket in the given components (an owner's), in the filters' scope."""
    with session() as s:
        try:
            ett = metrics_fleet.fleet_ett(
                db_session=s,
                start=filters.start_ts,
                end=filters.end_ts,
                bucket=filters.bucket,
                model=filters.model,
                owner=filters.team,
                labels=_labels(filters),
            )
        except LookupError:
            return pd.DataFrame(columns=["bucket", "component", "gpu_h"])
    frame = pd.DataFrame(
        [
            {"bucket": p["bucket"], "component": c, "gpu_h": v}
            for p in ett["series"]
            for c, v in p["components_gpu_h"].items()
            if c in components and v > 0
        ],
        columns=["bucket", "component", "gpu_h"],
    )
    if not frame.empty:
        frame["bucket"] = _bucket_dates(frame["bucket"].astype(float))
    return frame


def lost_drivers(
    filters: Filters, *, by: str, component: str, component_owner: str | None, top: int = 5
) -> list[dict[str, Any]]:
    """The models or jobs (by) that lost most GPU-hours in a component's parts a component
    owner owns, in the filters' scope (GET /fleet/lost?by=...&component=...); [] on a
    LookupError."""
    with session() as s:
        try:
            rows = metrics_fleet.lost_drivers(
                db_session=s,
                settings=current().settings,
                start=filters.start_ts,
                end=filters.end_ts,
                by=by,
                component=component,
                component_owner=component_owner,
                model=filters.model,
                owner=filters.team,
                labels=_labels(filters),
            )
        except LookupError:
            return []
    return rows[:top]


def annotations(filters: Filters, *, model: str | None = None) -> pd.DataFrame:
    """The annotations a chart in the range shows: the fleet-wide ones, plus the model's (or,
    with a team filter and no model, the team's models') own."""
    model = model or filters.model
    with session() as s:
        rows = annotations_service.list_annotations(
            db_session=s, start=filters.start_ts, end=filters.end_ts, model=model
        )
    if model is None:
        rows = [
            r
            for r in rows
            if r["model"] is None
            and (r["team"] is None or r["team"] == filters.team)
            or (filters.team is not None and r["team"] == filters.team)
        ]
    frame = pd.DataFrame(rows, columns=["ts", "title", "model", "team", "link"])
    # Whole seconds: plotly drops sub-microsecond parts with a warning.
    frame["ts"] = (
        _bucket_dates(frame["ts"].astype(float).round()) if not frame.empty else frame["ts"]
    )
    return frame


# ---------------------------------------------------------------- models


def models_table(filters: Filters) -> pd.DataFrame:
    """Every model with its ETT% in the range, trend, owner, jobs, GPU-hours lost (GET /models)."""
    with read_session() as s:
        rows, _total = workloads_service.list_models(
            db_session=s,
            start=filters.start_ts,
            end=filters.end_ts,
            owner=filters.team,
            sort="lost_gpu_h",
            limit=MAX_MODELS,
        )
    return pd.DataFrame(
        rows,
        columns=[
            "model",
            "owner",
            "tier",
            "jobs",
            "ett_pct",
            "trend_pp",
            "lost_gpu_h",
            "top_lost_component",
        ],
    )


def model_page(model: str, filters: Filters) -> dict[str, Any] | None:
    """One model's page answer (GET /api/v1/models/{model}), or None for an unknown model."""
    return _or_none(
        workloads_service.model_page,
        model=model,
        start=filters.start_ts,
        end=filters.end_ts,
        bucket=filters.bucket,
        settings=current().settings,
    )


def checkpoint_advice(model: str, filters: Filters) -> dict[str, Any] | None:
    """The model's checkpoint-interval advice (Eq. 2, Fig. 3) over the range."""
    return _or_none(
        advice_service.checkpoint_advice, model=model, start=filters.start_ts, end=filters.end_ts
    )


# ---------------------------------------------------------------- plan


def plan_model(model: str, filters: Filters) -> dict[str, Any] | None:
    """The model's plan (GET /api/v1/plan/models/{model}) over the range, or None if unknown."""
    return _or_none(
        planner_service.model_plan,
        model=model,
        start=filters.start_ts,
        end=filters.end_ts,
        settings=current().settings,
    )


def plan_fleet(filters: Filters) -> dict[str, Any]:
    """The fleet's ranked opportunities (GET /api/v1/plan/fleet) over the range."""
    with session() as s:
        return planner_service.fleet_plan(
            db_session=s,
            settings=current().settings,
            start=filters.start_ts,
            end=filters.end_ts,
        )


# ---------------------------------------------------------------- compare


def compare_pair(baseline: str, optimized: str) -> dict[str, Any] | None:
    """The paired comparison of two jobs (GET /api/v1/compare), or None if one is unknown."""
    return _or_none(compare_service.compare_jobs, baseline=baseline, optimized=optimized)


def compare_by_label(filters: Filters, key: str) -> dict[str, Any] | None:
    """Pairs chosen by label key=baseline / key=optimized (GET /api/v1/compare/pairs)."""
    return _or_none(
        compare_service.compare_by_label,
        baseline_label=(key, "baseline"),
        optimized_label=(key, "optimized"),
        model=filters.model,
        owner=filters.team,
        start=filters.start_ts,
        end=filters.end_ts,
    )


# ---------------------------------------------------------------- owners


def slo_unit(spec: Any, value: float | None) -> str:
    """An SLO value in its indicator's unit: "3.0 % of GPU-time", "600 s p90", "85.0 % ETT"."""
    if value is None:
        return "—"
    unit = spec.unit  # KeyError for an indicator without one: never a guessed unit
    if unit == "% of GPU-time":
        return f"{value:,.{2 if abs(value) < 1 else 1}f} {unit}"
    if unit == "% ETT":
        return f"{value:,.1f} {unit}"
    if unit == "s" and spec.percentile is not None:
        return f"{value:,.0f} s p{spec.percentile:g}"
    if unit in ("s", "s past bound"):
        return f"{value:,.0f} {unit}"
    if unit == "lemon score":
        return f"{unit} {value:,.1f}"
    if unit == "failures/job":
        return f"{value:,.2f} {unit}"
    raise ValueError(f"no format for the unit {unit!r} of SLO {spec.name!r}")


def slo_history(filters: Filters, owner: str | None) -> list[dict[str, Any]]:
    """Each SLO (the owner's, or all): its value now and its stored history in the range.

    Per SLO: its spec, `current` (the worst value of the evaluator's latest pass) and `points`:
    [(instant, worst value, breached)] from backend.alerts.history (the evaluator's measure at
    the end of past days and weeks; `ett demo` backfills them).
    """
    with session() as s:
        specs = [x for x in store.list_slos(db_session=s, owner=owner) if x.enabled]
        stored = alerts_history.points(
            db_session=s,
            names=[x.name for x in specs],
            start=filters.start_ts,
            end=filters.end_ts,
        )
        latest: dict[str, list[float]] = {}
        for a in alert_read.list_alerts(db_session=s, owner=owner, limit=5_000):
            if a.value is not None:
                latest.setdefault(a.slo_name, []).append(a.value)
    out = []
    for spec in specs:
        values = latest.get(spec.name)
        current = None if not values else (min(values) if spec.is_floor else max(values))
        out.append({"spec": spec, "current": current, "points": stored.get(spec.name, [])})
    return out


def alerts_view(
    owner: str | None, now: float, component: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """SLOs, alerts (not inactive) and silences, optionally one owner's (alerts: one component's)."""
    with read_session() as s:
        slos = [spec.to_doc() for spec in store.list_slos(db_session=s, owner=owner)]
        states = [
            a
            for a in alert_read.list_alerts(db_session=s, owner=owner, limit=200)
            if a.state != "inactive" and (not component or a.component == component)
        ]
        acks = alert_acks.acks_for(db_session=s, fingerprints=[a.fingerprint for a in states])
        alerts = [
            {
                "fingerprint": a.fingerprint,
                "slo": a.slo_name,
                "owner": a.owner,
                "component": a.component,
                "model": a.model or "",
                "severity": a.severity,
                "state": a.state,
                "value": a.value,
                "objective": a.objective,
                "since": a.fired_at or a.breach_started_at or a.last_evaluated_at,
                "models": ", ".join(str(m) for m in ((a.details or {}).get("models") or [])[:5]),
                # Only an acknowledgement of the current episode counts.
                "acked_by": next(
                    (
                        k.acknowledged_by
                        for k in acks.get(a.fingerprint, [])
                        if k.episode == a.episode
                    ),
                    "",
                ),
            }
            for a in states
        ]
        silences = [
            {
                "id": x.id,
                "owner": x.owner or "(any)",
                "component": x.component or "(any)",
                "model": x.model or "(any)",
                "starts_at": x.starts_at,
                "ends_at": x.ends_at,
                "active": x.starts_at <= now < x.ends_at,
                "comment": x.comment or "",
            }
            for x in alert_silences.list_silences(db_session=s, owner=owner)
        ]
    return {"slos": slos, "alerts": alerts, "silences": silences}


def alert_episodes(
    filters: Filters, owner: str | None, component: str | None = None
) -> list[dict[str, Any]]:
    """The alert episodes firing at some time in the range (GET /api/v1/alerts/episodes)."""
    with read_session() as s:
        specs = {x.name: x for x in store.list_slos(db_session=s, owner=owner)}
        items = alert_read.episode_docs(
            db_session=s,
            start=filters.start_ts,
            end=filters.end_ts,
            owner=owner,
            component=component,
        )
    return [{**e, "spec": specs.get(e["slo"])} for e in items]


def live_fleet(now: float | None = None) -> dict[str, Any]:
    """What the fleet is doing now (GET /api/v1/live): GPUs by live state, the bad jobs first,
    rolling ETT% of the fleet and each model (open jobs included)."""
    import time

    with read_session() as s:
        return live_service.fleet_now(s, current().settings, time.time() if now is None else now)


def model_bounds(model: str, samples: int = 0) -> list[dict[str, Any]]:
    """The bounds in force for a model (GET /api/v1/live/bounds): value, source, samples."""
    with read_session() as s:
        return live_service.bounds_of(s, current().settings, model, samples=samples)


def nodes_view(filters: Filters) -> dict[str, Any]:
    """Every host over the filters' dates, lemons first (backend.metrics.nodes; /fleet/nodes)."""
    with read_session() as s:
        return metrics_nodes.nodes(db_session=s, start=filters.start_ts, end=filters.end_ts)


def mttf_by_size(filters: Filters) -> list[dict[str, Any]]:
    """MTTF per GPU-count bucket over the filters' dates (backend.metrics.reliability)."""
    with read_session() as s:
        answer = metrics_reliability.mttf_by_size(
            db_session=s, start=filters.start_ts, end=filters.end_ts
        )
    return answer["buckets"]
