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


def alert_labels(slo: SloSpec, model: str | None) -> dict[str, str]:
    """The identifying labels of one alert instance (what the fingerprint hashes)."""
    labels = {
        "alertname": slo.name,
        "owner": slo.owner,
        "component": slo.component,
        "indicator": slo.indicator,
        "severity": slo.severity,
    }
    if slo.phase:
        labels["phase"] = slo.phase
    if model:
        labels["model"] = model
    elif slo.model:
        labels["model"] = slo.model
    return labels


def fingerprint(slo_name: str, owner: str, model: str | None) -> str:
    """A stable id for one alert instance: the same SLO, owner and model always hash alike."""
    key = "\x1f".join((slo_name, owner, model or ""))
    return hashlib.sha256(key.encode()).hexdigest()[:32]


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
    model = evaluation.model
    labels = alert_labels(slo, model)
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
