"""Builders for SPEC section 3 wire events (times as Unix epoch seconds)."""

from __future__ import annotations

import uuid
from typing import Any

FAILURE_KINDS = ("preemption", "app_error", "infra", "induced", "unknown")
ATTEMPT_END_REASONS = ("completed", "failure", "preempted", "cancelled")
# job_ended statuses (docs/PROTOCOL.md): the first three from trainers, the rest from schedulers.
JOB_STATUSES = (
    "succeeded",
    "failed",
    "cancelled",
    "preempted",
    "timeout",
    "node_failure",
    "out_of_memory",
)
MAX_MESSAGE_CHARS = 4096
# The server's default heartbeat timeout (ETT_HEARTBEAT_TIMEOUT_S, backend/liveness.py): an
# attempt silent this long is taken for dead. The agent ships alone and keeps this copy
# (tests/trainer_agent/test_agent_constants.py checks they agree); it beats every fifth of it.
SERVER_HEARTBEAT_TIMEOUT_S = 300.0
HEARTBEAT_S = SERVER_HEARTBEAT_TIMEOUT_S / 5
# Attempt numbers: allocation x ALLOCATION_STRIDE + in-place restart within it (docs/AGENT.md
# "Attempt numbers"). A scheduler's requeue starts a new allocation (0, 1000, 2000, ...); a
# torchrun group restart on the same allocation is the next number (0, 1, 2, ...).
ALLOCATION_STRIDE = 1000
# The most hosts one attempt_started names (docs/PROTOCOL.md "Hosts"): past it the sender keeps
# the first MAX_HOSTS in sorted order and says how many there were in hosts_total.
MAX_HOSTS = 1024

Event = dict[str, Any]


def new_event_id() -> str:
    """A fresh idempotency key: 32 hex chars, unique across hosts and restarts."""
    return uuid.uuid4().hex


def new_span_id() -> str:
    """An id shared by a span's phase_started and phase events: 16 hex chars."""
    return uuid.uuid4().hex[:16]


def make_event(job_id: str, etype: str, attempt: int | None, **fields: Any) -> Event:
    """One wire event; fields whose value is None are left out (optional and not sent)."""
    event: Event = {"event_id": new_event_id(), "job_id": job_id, "type": etype}
    if attempt is not None:
        event["attempt"] = attempt
    for key, value in fields.items():
        if value is not None:
            event[key] = value
    return event


def truncate_message(message: str) -> str:
    """Cut a failure message to the 4 KiB the protocol allows, keeping its tail (the error line)."""
    text = str(message)
    if len(text.encode("utf-8")) <= MAX_MESSAGE_CHARS:
        return text
    tail = text.encode("utf-8")[-(MAX_MESSAGE_CHARS - 4) :].decode("utf-8", errors="ignore")
    return "... " + tail


def job_submitted(
    job_id: str,
    ts: float,
    model: str,
    gpus: int,
    labels: dict[str, str] | None = None,
    config: dict[str, Any] | None = None,
) -> Event:
    """The scheduler accepted the job."""
    return make_event(
        job_id,
        "job_submitted",
        None,
        ts=ts,
        model=model,
        gpus=int(gpus),
        labels=labels,
        config=config,
    )


def job_ended(job_id: str, ts: float, status: str) -> Event:
    """The job's last allocation was released."""
    if status not in JOB_STATUSES:
        raise ValueError(f"status must be one of {JOB_STATUSES}, got {status!r}")
    return make_event(job_id, "job_ended", None, ts=ts, status=status)


def host_list(hosts: list[str] | tuple[str, ...]) -> tuple[list[str], int | None]:
    """(hosts, hosts_total) as attempt_started carries them: distinct, sorted, cut to MAX_HOSTS
    (hosts_total is the full count when it was cut, else None)."""
    distinct = sorted({h.strip()[:256] for h in hosts if isinstance(h, str) and h.strip()})
    if len(distinct) <= MAX_HOSTS:
        return distinct, None
    return distinct[:MAX_HOSTS], len(distinct)
