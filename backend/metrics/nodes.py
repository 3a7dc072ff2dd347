"""Per-host reliability over a range, from attempt_hosts: the Nodes page and /api/v1/nodes.

A host's exposure is the time its attempts ran on it (each attempt's span clipped to the
range), in node-days; a failure counts on every host of its attempt ("the failures it was part
of"), dated by its time; its TTR's GPU-hours are the attempt's GPUs times the TTR
(backend.ett.store.host_rows). Lemon nodes are ranked by backend.metrics.lemons.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.jobs.models import AttemptHost
from backend.metrics import lemons
from backend.timefmt import DAY_S


def node_rows(*, db_session: Session, start: float, end: float) -> list[Any]:
    """attempt_hosts rows of attempts that overlap [start, end)."""
    stmt = select(
        AttemptHost.host,
        AttemptHost.job_id,
        AttemptHost.started_at,
        AttemptHost.ended_at,
        AttemptHost.failures,
        AttemptHost.failure_ts,
        AttemptHost.failure_kind,
        AttemptHost.failure_cause,
        AttemptHost.ttr_gpu_s,
    ).where(AttemptHost.started_at < end, AttemptHost.ended_at >= start)
    return list(db_session.execute(stmt))


def nodes(*, db_session: Session, start: float, end: float) -> dict[str, Any]:
    """Every host's attempts, failures by cause, failures per node-day, TTR GPU-hours and lemon
    verdict over [start, end); lemons first (by score), then by failure rate."""
    if end <= start:
        raise ValueError("end must be after start")
    acc: dict[str, dict[str, Any]] = defaultdict(
        lambda: {
            "attempts": 0,
            "jobs": set(),
            "exposure_s": 0.0,
            "failures": 0,
            "unplanned": 0,
            "by_cause": defaultdict(int),
            "ttr_gpu_s": 0.0,
        }
    )
    for host, job_id, s, e, n_fail, f_ts, kind, cause, ttr_gpu_s in node_rows(
        db_session=db_session, start=start, end=end
    ):
        a = acc[host]
        a["attempts"] += 1
        a["jobs"].add(job_id)
        a["exposure_s"] += max(0.0, min(e, end) - max(s, start))
        if n_fail and f_ts is not None and start <= f_ts < end:
            a["failures"] += n_fail
            a["by_cause"][cause or kind or "unknown"] += n_fail
            if not lemons.is_planned(kind, cause):
                a["unplanned"] += n_fail
            a["ttr_gpu_s"] += ttr_gpu_s or 0.0
    hosts = sorted(acc)
    verdicts = {
        v.host: v
        for v in lemons.lemon_test(
            [(h, acc[h]["exposure_s"] / DAY_S, acc[h]["unplanned"]) for h in hosts]
        )
    }
    rows = []
    for h in hosts:
        a, v = acc[h], verdicts[h]
        days = a["exposure_s"] / DAY_S
        rows.append(
            {
                "host": h,
                "attempts": a["attempts"],
                "jobs": len(a["jobs"]),
                "exposure_node_days": days,
                "failures": a["failures"],
                "unplanned_failures": a["unplanned"],
                "failures_by_cause": dict(sorted(a["by_cause"].items())),
                "failures_per_node_day": a["unplanned"] / days if days > 0 else None,
                "ttr_lost_gpu_h": a["ttr_gpu_s"] / 3600.0,
                "expected_failures": v.expected,
                "p_value": v.p_value,
                "q_value": v.q_value,
                "lemon_score": v.score,
                "lemon": v.lemon,
            }
        )
    rows.sort(
        key=lambda r: (
            not r["lemon"],
            -(r["lemon_score"] or 0.0),
            -(r["failures_per_node_day"] or 0.0),
            r["host"],
        )
    )
    total_days = sum(r["exposure_node_days"] for r in rows)
    total_unplanned = sum(r["unplanned_failures"] for r in rows)
    return {
        "start": start,
        "end": end,
        "fleet": {
            "hosts": len(rows),
            "lemons": sum(1 for r in rows if r["lemon"]),
            "exposure_node_days": total_days,
            "unplanned_failures": total_unplanned,
            "failures_per_node_day": total_unplanned / total_days if total_days > 0 else None,
        },
        "test": {
            "method": "Poisson upper tail against the rest of the fleet's rate, "
            "Benjamini-Hochberg adjusted over the hosts tested",
            "min_exposure_node_days": lemons.MIN_EXPOSURE_DAYS,
            "min_failures": lemons.MIN_FAILURES,
            "alpha": lemons.ALPHA,
        },
        "nodes": rows,
    }
