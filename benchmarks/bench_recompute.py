"""Worker cost per 30 s batch of an open job by its age, full recompute against incremental.

Through the worker's own path on Postgres: one agent batch (a progress window every 30 s, a
heartbeat every 60 s, a checkpoint every 30 min) goes through ingest, then `recompute_dirty`
recomputes the job. "full" drops the job's settled state first (the full recompute from every
raw event, as before issue 29); "incremental" extends it. Ages 1 h, 1 d, 7 d and 30 d.

    python benchmarks/bench_recompute.py [--ages 1h,1d,7d,30d] [--batches 20] [--db URL]

The target (issue 29 item 7): the 30-day batch within 2x of the 1-hour one, incremental.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import insert  # noqa: E402

from backend.db import Database  # noqa: E402
from backend.ett.models import JobAccountingState  # noqa: E402
from backend.ett.store import forget_states  # noqa: E402
from backend.events.models import RawEvent  # noqa: E402
from backend.events.retention import month_of  # noqa: E402
from backend.jobs.models import Job  # noqa: E402
from backend.results import recompute  # noqa: E402
from benchmarks._pg import scratch_postgres  # noqa: E402
from ingest import service as ingest_service  # noqa: E402

AGES = {"1h": 3_600.0, "1d": 86_400.0, "7d": 7 * 86_400.0, "30d": 30 * 86_400.0}
WINDOW_S = 30.0
HEARTBEAT_S = 60.0
CHECKPOINT_S = 1_800.0


class Agent:
    """One training job's agent at the real rates, from `start` on."""

    def __init__(self, job_id: str, start: float) -> None:
        self.job_id = job_id
        self.t = start
        self.cursor = 0.0
        self.n = 0

    def _ev(self, etype: str, **kw: Any) -> dict[str, Any]:
        self.n += 1
        return {"event_id": f"{self.job_id}-{self.n}", "job_id": self.job_id, "type": etype, **kw}

    def opening(self) -> list[dict[str, Any]]:
        """Submission, the attempt's start and its init phase (10 min)."""
        t = self.t
        out = [
            self._ev("job_submitted", ts=t, model="bench", gpus=64),
            self._ev("attempt_started", attempt=0, ts=t, host="h", gpus=64),
            self._ev("phase", attempt=0, phase="trainer_init", start=t, end=t + 600.0),
        ]
        self.t = t + 600.0
        return out

    def window(self) -> list[dict[str, Any]]:
        """The next 30 s of the loop: a window, a heartbeat every 60 s, a save every 30 min."""
        t = self.t
        out = [
            self._ev(
                "progress",
                attempt=0,
                start=t,
                end=t + WINDOW_S,
                cursor_start=self.cursor,
                cursor_end=self.cursor + 300.0,
                steps=300,
            )
        ]
        self.t = t = t + WINDOW_S
        self.cursor += 300.0
        if int(t // HEARTBEAT_S) != int((t - WINDOW_S) // HEARTBEAT_S):
            out.append(self._ev("heartbeat", attempt=0, ts=t))
        if int(t // CHECKPOINT_S) != int((t - WINDOW_S) // CHECKPOINT_S):
            out.append(self._ev("checkpoint", attempt=0, start=t, blocking_end=t + 4.0))
            self.t = t + 4.0
        return out


def _load_history(db: Database, agent: Agent, until: float) -> int:
    """Insert the job's history straight into raw_events (as ingest stores it); its size."""
    events = agent.opening()
    while agent.t + WINDOW_S < until:
        events += agent.window()
    created = events[0]["ts"]
    with db.session() as s:
        s.execute(
            insert(Job).values(
                job_id=agent.job_id, dirty=True, created_at=created, updated_at=created
            )
        )
        rows = [
            {
                "event_id": ev["event_id"],
                "job_id": agent.job_id,
                "type": ev["type"],
                "attempt": ev.get("attempt"),
                "ts": ev.get("ts", ev.get("start")),
                "received_at": created,
                "payload": ev,
                "job_month": month_of(created),
            }
            for ev in events
        ]
        for i in range(0, len(rows), 5_000):
            s.execute(insert(RawEvent), rows[i : i + 5_000])
        s.commit()
    return len(events)


def measure(db: Database, age_s: float, batches: int, mode: str) -> dict[str, Any]:
    """Median worker CPU and wall seconds of recompute_dirty per 30 s batch."""
    # The job's clock: its history ends now, and each timed batch is sent at the end of its
    # 30 s (time compressed: the worker is told that "now").
    end = time.time()
    agent = Agent(f"bench-{mode}-{int(age_s)}-{time.time_ns()}", end - age_s)
    n = _load_history(db, agent, end)
    with db.session() as s:
        # The first compute is full in both modes.
        recompute.recompute_dirty(db_session=s, now=agent.t)
    cpu: list[float] = []
    wall: list[float] = []
    for _ in range(batches):
        batch = agent.window()
        with db.session() as s:
            ingest_service.ingest_batch(db_session=s, events=batch, token=None)
            if mode == "full":
                forget_states(db_session=s, job_ids=[agent.job_id])
            s.commit()
        with db.session() as s:
            c0, w0 = time.process_time(), time.perf_counter()
            done = recompute.recompute_dirty(db_session=s, now=agent.t)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        assert done == 1, done
        n += len(batch)
    with db.session() as s:
        kept = s.get(JobAccountingState, agent.job_id) is not None
    if mode == "incremental" and not kept:
        raise SystemExit(f"the {age_s:.0f} s job kept no settled state: nothing was extended")
    return {
        "mode": mode,
        "age_s": age_s,
        "events": n,
        "cpu_s": statistics.median(cpu),
        "wall_s": statistics.median(wall),
    }


def main() -> None:
    """Print one row per age and mode, and the 30 d / 1 h ratios."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ages", default="1h,1d,7d,30d")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--full-batches", type=int, default=5, help="batches timed in full mode")
    parser.add_argument("--db", help="a migrated Postgres URL (default: a scratch database)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args()
    ages = [a.strip() for a in args.ages.split(",") if a.strip()]
    unknown = [a for a in ages if a not in AGES]
    if unknown:
        parser.error(f"unknown ages {unknown}: choose among {', '.join(AGES)}")

    def run(url: str) -> list[dict[str, Any]]:
        db = Database(url)
        rows = []
        try:
            for age in ages:
                for mode, k in (("full", args.full_batches), ("incremental", args.batches)):
                    rows.append({"age": age, **measure(db, AGES[age], k, mode)})
                    r = rows[-1]
                    print(
                        f"{age:>4} {mode:>12} {r['events']:>8} events  "
                        f"cpu {r['cpu_s'] * 1e3:8.1f} ms  wall {r['wall_s'] * 1e3:8.1f} ms",
                        flush=True,
                    )
        finally:
            db.dispose()
        return rows

    if args.db:
        rows = run(args.db)
    else:
        with scratch_postgres("ett_bench_recompute") as url:
            rows = run(url)
    by = {(r["age"], r["mode"]): r for r in rows}
    for mode in ("full", "incremental"):
        if (ages[0], mode) in by and (ages[-1], mode) in by:
            lo, hi = by[(ages[0], mode)], by[(ages[-1], mode)]
            print(
                f"{mode}: {ages[-1]} / {ages[0]} = cpu {hi['cpu_s'] / lo['cpu_s']:.2f}x, "
                f"wall {hi['wall_s'] / lo['wall_s']:.2f}x"
            )
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
