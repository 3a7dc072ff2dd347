"""The demo fleet carries hosts and two lemon nodes that the documented test finds (and no
others): through the engine, over the fleet's last 30 days."""

from __future__ import annotations

from collections import defaultdict

from backend.demo import fleet
from backend.demo.simulator import LEMON_HOSTS, cut_at, job_events
from backend.ett.engine import compute_job
from backend.metrics import lemons

NOW = 1_790_000_000.0
DAY = 86400.0


def test_the_demo_fleets_lemons_are_found_and_only_they() -> None:
    spec = fleet.FleetSpec(seed=7, models=40, days=40, now=NOW)
    start = NOW - 30 * DAY
    exposure: dict[str, float] = defaultdict(float)
    failures: dict[str, int] = defaultdict(int)
    named = 0
    for plan in fleet.plans(spec):
        if plan.submitted_at > NOW:
            continue
        result = compute_job(cut_at(job_events(plan), NOW), now=NOW)
        failed = {f.attempt: f for f in result.l1.failures}
        for a in result.attempts:
            assert a.hosts and len(a.hosts) == -(-result.gpus // 8), a
            named += 1
            end = a.ended_at if a.ended_at is not None else result.ended_at
            overlap = max(0.0, min(end, NOW) - max(a.started_at, start)) / DAY
            f = failed.get(a.attempt)
            for h in a.hosts:
                exposure[h] += overlap
                if f is not None and start <= f.ts < NOW and not lemons.is_planned(f.kind):
                    failures[h] += 1
    assert named > 100
    verdicts = lemons.lemon_test([(h, exposure[h], failures[h]) for h in sorted(exposure)])
    assert sorted(v.host for v in verdicts if v.lemon) == sorted(LEMON_HOSTS)
