"""The service's own health, counted in this process: ingest outcomes, request latency,
recompute failures, alert deliveries, worker passes. Each replica exports its own; sum them in
PromQL.

A bottom module: it imports no domain, so the write path (ingest, recompute, the workers) and the
consumers (alert delivery, the exporter) all count here without importing one another.

The collectors are created unregistered (registry=None) and added to each app's registry, so
several apps in one process (tests) share them without clashing in the global registry.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# `_created` series double the exposition and Prometheus 2.42 does not use them.
disable_created_metrics()

INGEST_EVENTS = Counter(
    "ett_ingest_events",
    "Events POSTed to /api/v1/events by outcome (accepted, duplicate, rejected) and, for "
    "rejected ones, the field or rule that refused them.",
    ["outcome", "reason"],
    registry=None,
)
HTTP_DURATION = Histogram(
    "ett_http_request_duration_seconds",
    "Time to answer an HTTP request, by route template, method and status class.",
    ["route", "method", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=None,
)
RECOMPUTE_FAILURES = Counter(
    "ett_recompute_failures",
    "Jobs whose recompute raised (they stay marked and are retried).",
    registry=None,
)
ALERT_DELIVERIES = Counter(
    "ett_alert_deliveries",
    "Attempts to deliver an alert notice, by channel kind and outcome.",
    ["channel", "outcome"],
    registry=None,
)

WORKER_PASSES = Counter(
    "ett_worker_passes",
    "Passes of this process's periodic workers (recompute, alerts, delivery) by outcome.",
    ["worker", "outcome"],
    registry=None,
)
WORKER_LAST_SUCCESS = Gauge(
    "ett_worker_last_success_timestamp_seconds",
    "When each periodic worker of this process last finished a pass without error.",
    ["worker"],
    registry=None,
)

# Every label combination that can occur starts at 0, so a first event is an increase to see
# (the alert channels' kinds are registered by backend.alerts.delivery, which knows them).
INGEST_EVENTS.labels("accepted", "")
INGEST_EVENTS.labels("duplicate", "")

PROCESS_COLLECTORS = (
    INGEST_EVENTS,
    HTTP_DURATION,
    RECOMPUTE_FAILURES,
    ALERT_DELIVERIES,
    WORKER_PASSES,
    WORKER_LAST_SUCCESS,
)

# The field names and rules an ingest rejection can name; anything else is "other".
REJECT_REASONS = frozenset(
    {
        "event",
        "event_id",
        "job_id",
        "type",
        "attempt",
        "ts",
        "model",
        "gpus",
        "labels",
        "config",
        "host",
        "phase",
        "start",
        "end",
        "span_id",
        "cursor_start",
        "cursor_end",
        "steps",
        "blocking_end",
        "committed",
        "cursor",
        "bytes",
        "ok",
        "kind",
        "message",
        "reason",
        "status",
        "conflicting_duplicate",
        "job_pruned",
    }
)
_REASON = re.compile(r"[A-Za-z_]+")


def reject_reason(error: str) -> str:
    """The bounded `reason` label of an ingest rejection: its leading field or rule name."""
    m = _REASON.match(error or "")
    name = m.group(0) if m else ""
    return name if name in REJECT_REASONS else "other"


def count_ingest(*, accepted: int, duplicates: int, rejected: Iterable[dict[str, Any]]) -> None:
    """Count one batch's outcome."""
    if accepted:
        INGEST_EVENTS.labels("accepted", "").inc(accepted)
    if duplicates:
        INGEST_EVENTS.labels("duplicate", "").inc(duplicates)
    for r in rejected:
        INGEST_EVENTS.labels("rejected", reject_reason(str(r.get("error", "")))).inc()


def count_delivery(*, channel_kind: str, outcome: str) -> None:
    """Count one delivery attempt (channel kinds and outcomes are fixed sets in the code)."""
    ALERT_DELIVERIES.labels(channel_kind, outcome).inc()


def route_template(scope: Scope) -> str:
    """The matched route's template (`/api/v1/jobs/{job_id}/ett`), never a raw path: bounded."""
    path = scope.get("path", "")
    route = scope.get("route")
    if route is None:
        return "unmatched" if path == "/api" or path.startswith("/api/") else "dashboard"
    fmt = getattr(route, "path_format", None) or getattr(route, "path", "")
    try:
        rendered = fmt.format(**(scope.get("path_params") or {}))
    except (KeyError, IndexError, ValueError):
        return fmt
    # The route's own path is relative to the routers it was included in: keep their prefix.
    return path[: len(path) - len(rendered)] + fmt if path.endswith(rendered) else fmt


class RequestTimer:
    """ASGI middleware: observes every HTTP request's duration under its route template."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Time the request; the label is the matched route, never the raw path."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            HTTP_DURATION.labels(
                route_template(scope), scope.get("method", "GET"), f"{status[0] // 100}xx"
            ).observe(time.perf_counter() - start)
