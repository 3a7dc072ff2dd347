"""What an alert says: what broke, by how much, since when, who drives it, where to look."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import urlencode

from backend.alerts.delivery import AlertMessage
from backend.alerts.slos import SloSpec
from backend.text import inline
from backend.timefmt import format_duration, rfc3339

INDICATOR_WORDS = {
    "gpu_time_share": "share of wall GPU-time",
    "duration_percentile": "per-attempt duration",
    "failures_per_job": "failures per job",
    "ett_floor": "ETT%",
    "no_progress_s": "time without progress while alive",
    "live_hung": "hung beyond its bound",
    "live_crash_loop": "crash looping",
    "live_restart_storm": "restart storm",
    "live_silent": "silent",
    "lemon_nodes": "lemon-node score (-log10 of the adjusted Poisson tail)",
}


@dataclass
class Evaluation:
    """One SLO measured over its window, for the whole scope or one model."""

    value: float | None
    jobs: int = 0
    model: str | None = None
    # Who drives the number: [{"model": ..., "value": ...}], [{"job_id": ..., "model": ..., "value": ...}]
    models: list[dict[str, Any]] = field(default_factory=list)
    job_drivers: list[dict[str, Any]] = field(default_factory=list)
    # A live indicator's instance is one job (`key`), owned by the team of what hangs, with the
    # bound, overrun and GPU-hours in `extra` (backend/alerts/live.py).
    key: str | None = None
    owner: str | None = None
    component: str | None = None
    phase: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def alert_labels(
    slo: SloSpec, model: str | None, evaluation: Evaluation | None = None
) -> dict[str, str]:
    """The identifying labels of one alert instance (what the fingerprint hashes)."""
    ev = evaluation
    labels = {
        "alertname": slo.name,
        "owner": (ev.owner if ev is not None and ev.owner else None) or slo.owner,
        "component": (ev.component if ev is not None and ev.component else None) or slo.component,
        "indicator": slo.indicator,
        "severity": slo.severity,
    }
    phase = ev.phase if ev is not None and ev.phase else slo.phase
    if phase:
        labels["phase"] = phase
    if model:
        labels["model"] = model
    elif slo.model:
        labels["model"] = slo.model
    if ev is not None and ev.key:
        labels["host" if slo.per_host else "job_id"] = ev.key
    return labels


def fingerprint(slo_name: str, owner: str, model: str | None, key: str | None = None) -> str:
    """A stable id for one alert instance: the same SLO, owner, model (and job) hash alike."""
    parts = (slo_name, owner, model or "") if key is None else (slo_name, owner, model or "", key)
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def format_value(slo: SloSpec, value: float | None) -> str:
    """A measured value in the indicator's own unit."""
    if value is None:
        return "no data"
    if slo.indicator in ("gpu_time_share", "ett_floor"):
        return f"{value:.1f}%"
    if slo.indicator in ("duration_percentile", "no_progress_s"):
        return f"{value / 60:.1f} min" if value >= 120 else f"{value:.0f} s"
    return f"{value:.2f}"


def describe_objective(slo: SloSpec) -> str:
    """The objective as a comparison, e.g. '<= 8.0%' or '>= 80.0%'."""
    return f"{'>=' if slo.is_floor else '<='} {format_value(slo, slo.objective)}"


def subject(slo: SloSpec) -> str:
    """What is measured, in words: 'trainer_init.first_batch p90 per-attempt duration'."""
    what = slo.phase or slo.component
    if slo.indicator == "duration_percentile":
        return f"{what} p{slo.percentile:g} {INDICATOR_WORDS[slo.indicator]}"
    if slo.indicator == "failures_per_job":
        kind = "" if slo.failure_kind in (None, "any") else f" ({slo.failure_kind})"
        return f"{INDICATOR_WORDS[slo.indicator]}{kind}"
    if slo.indicator == "ett_floor":
        return "ETT%"
    return f"{what} {INDICATOR_WORDS[slo.indicator]}"


def dashboard_url(
    public_url: str,
    slo: SloSpec,
    model: str | None,
    *,
    since: float | None = None,
    until: float | None = None,
) -> str:
    """The dashboard page that shows this breach: the model page, or the owner's page.

    The date range starts one window before the breach so the page shows the change; the end
    stays open (today) while the alert fires.
    """
    base = public_url.rstrip("/")
    query: dict[str, str] = {}
    if model:
        path, query["model"] = "/model", model
    else:
        path = "/owners"
        query["owner"], query["component"] = slo.owner, slo.component
        if slo.model:
            query["model"] = slo.model
    if since is not None:
        query["start"] = _day(since - slo.window_s)
    if until is not None:
        query["end"] = _day(until)
    return f"{base}{path}?{urlencode(query)}"


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).date().isoformat()


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds >= 7200:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


BOUND_SOURCES = {
    "model": "learned from {n} samples of the model's own finished jobs",
    "fleet": "the fleet's bound ({n} samples of every model's finished jobs)",
    "override": "set in the SLO file",
    "default": "the shipped default (too little history to learn one)",
    "heartbeat_timeout": "the heartbeat timeout",
}


def _what(slo: SloSpec, ev: Evaluation) -> str:
    x = ev.extra
    if slo.indicator == "live_hung":
        where = "the training loop" if ev.phase == "loop" else (ev.phase or "a phase")
        return f"hung in {inline(where)}"
    if slo.indicator == "live_crash_loop":
        n = (x.get("detail") or {}).get("attempts_without_progress")
        return f"crash looping ({n} attempts in a row without getting past the data cursor)"
    if slo.indicator == "live_restart_storm":
        d = x.get("detail") or {}
        return f"in a restart storm ({d.get('attempts')} attempts in {_minutes(d.get('window_s'))})"
    return "silent (no event, not even a heartbeat)"


def build_live_message(
    slo: SloSpec,
    evaluation: Evaluation,
    *,
    status: Literal["firing", "resolved"],
    ended_at: float | None,
    public_url: str,
) -> AlertMessage:
    """Render one notice of a live indicator: one job, what it is stuck in, for how long."""
    ev = evaluation
    x = ev.extra
    job, model = ev.key or "", ev.model
    labels = alert_labels(slo, model, ev)
    owner = labels["owner"]
    since = float(x.get("since") or 0.0)
    what = _what(slo, ev)
    scope = f"job {inline(job)}" + (f" (model {inline(model)})" if model else "")
    bound_s = x.get("bound_s")
    overrun = _minutes(ev.value)
    burned = float(x.get("lost_gpu_h") or 0.0)
    if status == "firing":
        title = f"{owner}: {scope} is {what}"
        if slo.indicator == "live_hung":
            title += f" for {overrun} past its bound of {_minutes(bound_s)}"
        title += f"; {burned:,.2f} GPU-hours burned"
    else:
        title = f"{owner}: {scope} is no longer {what.split(' (')[0]} (it moved on or ended)"
    source = BOUND_SOURCES.get(x.get("bound_source") or "", "")
    lines = [
        f"Job {inline(job)}"
        + (f", model {inline(model)}" if model else "")
        + f", {x.get('gpus')} GPUs, attempt {x.get('attempt')}."
    ]
    if ev.phase:
        lines.append(f"Phase: {inline(ev.phase)} (component {inline(ev.component or '')}).")
    if bound_s is not None:
        lines.append(
            f"Bound: {_minutes(bound_s)}, {source.format(n=x.get('bound_samples'))}."
            if source
            else f"Bound: {_minutes(bound_s)}."
        )
    if status == "firing":
        lines.append(f"Overrun: {overrun} past the bound, crossed at {rfc3339(since)}.")
    else:
        lines.append(f"Bad from {rfc3339(since)} to {rfc3339(ended_at or since)}.")
    lines.append(
        f"GPU-hours burned: {burned:,.2f} since the last effective instant, "
        f"{float(x.get('lost_gpu_h_per_h') or 0.0):,.1f} more per hour."
    )
    if slo.runbook_url:
        lines.append(f"Runbook: {inline(slo.runbook_url)}")
    link = f"{public_url.rstrip('/')}/job?{urlencode({'job_id': job})}"
    lines.append(f"Job page: {link}")
    annotations = {
        "summary": title,
        "description": "\n".join(lines),
        "value": overrun,
        "objective": f"bound {_minutes(bound_s)}" if bound_s is not None else "",
        "window": format_duration(slo.window_s),
        "since": rfc3339(since) or "",
        "dashboard": link,
        "job": inline(job),
        "bound": _minutes(bound_s) if bound_s is not None else "",
        "overrun": overrun,
        "gpu_hours_burned": f"{burned:.2f}",
    }
    if model:
        annotations["models"] = inline(model)
    if ev.phase:
        annotations["phase"] = inline(ev.phase)
    if slo.runbook_url:
        annotations["runbook_url"] = slo.runbook_url
    return AlertMessage(
        fingerprint=fingerprint(slo.name, owner, model, ev.key),
        status=status,
        labels=labels,
        annotations=annotations,
        starts_at=since,
        ends_at=ended_at if status == "resolved" else None,
        generator_url=link,
        title=title,
        text="\n".join(lines[:-1]),
    )


def build_host_message(
    slo: SloSpec,
    evaluation: Evaluation,
    *,
    status: Literal["firing", "resolved"],
    since: float,
    ended_at: float | None,
    public_url: str,
) -> AlertMessage:
    """Render one notice of a per-host indicator: the host became a lemon, or is one no longer."""
    ev = evaluation
    x = ev.extra
    host = inline(ev.key or "")
    labels = alert_labels(slo, None, ev)
    facts = (
        f"{x.get('unplanned_failures')} unplanned failures in "
        f"{float(x.get('exposure_node_days') or 0.0):.1f} node-days, "
        f"{float(x.get('expected_failures') or 0.0):.2f} expected at the fleet's rate "
        f"(q = {float(x.get('q_value') or 1.0):.2g}) over the last {format_duration(slo.window_s)}."
    )
    if status == "firing":
        title = f"{slo.owner}: host {host} is a lemon node (score {format_value(slo, ev.value)})"
        lines = [facts, f"A lemon since {rfc3339(since)}."]
    else:
        title = f"{slo.owner}: host {host} is no longer a lemon node"
        lines = [facts, f"A lemon from {rfc3339(since)} to {rfc3339(ended_at or since)}."]
    link = f"{public_url.rstrip('/')}/nodes?{urlencode({'start': _day(since - slo.window_s)})}"
    lines.append(f"Dashboard: {link}")
    annotations = {
        "summary": title,
        "description": "\n".join(lines),
        "value": format_value(slo, ev.value),
        "objective": describe_objective(slo),
        "window": format_duration(slo.window_s),
        "since": rfc3339(since) or "",
        "dashboard": link,
    }
    if slo.runbook_url:
        annotations["runbook_url"] = slo.runbook_url
    return AlertMessage(
        fingerprint=fingerprint(slo.name, labels["owner"], None, ev.key),
        status=status,
        labels=labels,
        annotations=annotations,
        starts_at=since,
        ends_at=ended_at if status == "resolved" else None,
        generator_url=link,
        title=title,
        text="\n".join(lines[:-1]),
    )


def build_message(
    slo: SloSpec,
    evaluation: Evaluation,
    *,
    status: Literal["firing", "resolved"],
    since: float,
    ended_at: float | None,
    public_url: str,
) -> AlertMessage:
    """Render one notice for one alert instance."""
    if slo.is_live:
        return build_live_message(
            slo, evaluation, status=status, ended_at=ended_at, public_url=public_url
        )
    model = evaluation.model
    labels = alert_labels(slo, model)
    if slo.per_host:
        return build_host_message(
            slo, evaluation, status=status, since=since, ended_at=ended_at, public_url=public_url
        )
    # Names come from ingest (any token) and go into lines of text: one line each, no tricks.
    scope = (
        f" for model {inline(model)}"
        if model
        else (f" for models {inline(slo.model)}" if slo.model else "")
    )
    head = f"{slo.owner}: {subject(slo)}{scope}"
    value_line = (
        f"Measured {format_value(slo, evaluation.value)} against an objective of "
        f"{describe_objective(slo)} over the last {format_duration(slo.window_s)}"
        f" ({evaluation.jobs} jobs)."
    )
    lines = [value_line]
    if status == "firing":
        title = (
            f"{head} is {format_value(slo, evaluation.value)}, objective {describe_objective(slo)}"
        )
        lines.append(f"Breached since {rfc3339(since)}.")
    else:
        title = f"{head} is back within objective ({format_value(slo, evaluation.value)})"
        lines.append(f"Breached from {rfc3339(since)} to {rfc3339(ended_at or since)}.")
    if evaluation.models:
        shown = ", ".join(
            f"{inline(d['model'])} ({format_value(slo, d['value'])})" for d in evaluation.models[:5]
        )
        lines.append(f"Models driving it: {shown}.")
    if evaluation.job_drivers:
        shown = ", ".join(
            f"{inline(d['job_id'])} ({format_value(slo, d['value'])})"
            for d in evaluation.job_drivers[:5]
        )
        lines.append(f"Jobs driving it: {shown}.")
    if slo.runbook_url:
        lines.append(f"Runbook: {inline(slo.runbook_url)}")
    link = dashboard_url(
        public_url,
        slo,
        model,
        since=since,
        until=ended_at if status == "resolved" else None,
    )
    lines.append(f"Dashboard: {link}")
    annotations = {
        "summary": title,
        "description": "\n".join(lines),
        "value": format_value(slo, evaluation.value),
        "objective": describe_objective(slo),
        "window": format_duration(slo.window_s),
        "since": rfc3339(since) or "",
        "dashboard": link,
    }
    if evaluation.models:
        annotations["models"] = ", ".join(inline(d["model"]) for d in evaluation.models[:10])
    if evaluation.job_drivers:
        annotations["jobs"] = ", ".join(inline(d["job_id"]) for d in evaluation.job_drivers[:10])
    if slo.runbook_url:
        annotations["runbook_url"] = slo.runbook_url
    return AlertMessage(
        fingerprint=fingerprint(slo.name, slo.owner, model),
        status=status,
        labels=labels,
        annotations=annotations,
        starts_at=since,
        ends_at=ended_at if status == "resolved" else None,
        generator_url=link,
        title=title,
        text="\n".join(lines[:-1]),
    )
