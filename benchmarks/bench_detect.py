"""Detection: how soon a hang, a crash loop and a restart storm page their owner, and how often
a healthy job is paged falsely.

    .venv/bin/python benchmarks/bench_detect.py                 # the live fleet, then the replay
    .venv/bin/python benchmarks/bench_detect.py --faults 2 --json out.json
    .venv/bin/python benchmarks/bench_detect.py --skip-live     # the demo replay alone

Part 1, a live fleet through the real path, all on 127.0.0.1: a scratch Postgres database,
`ett serve --role api` replicas and `ett worker` processes (bench_load's cluster: the workers run
the recompute, the bounds worker and the live pass, each under its claim or lease), a real HTTP
receiver behind every owner's webhook channel and a real Alertmanager (its route's group_wait
1 s) behind every owner's alertmanager channel. Each model's history (finished jobs) is sent
through ingest first and the bounds are learned from it by the workers. Then simulated agents
send, at the wall clock and at the agent's own rates (30 s progress windows, idle windows when
the loop stops, heartbeats, phase_started when a phase begins), a fleet of healthy jobs whose
phases vary naturally (one per model compiles cold at twice its median: inside its bound), and
`--faults` jobs of each fault: a hang inside trainer_init.process_group, a hung loop with live
heartbeats, a hang in a long cold compile, a restart storm (an attempt every 12 s, each
training new data), a crash loop that never advances (an attempt every 15 s, none past the
cursor of the first). Measured, per fault and channel: the first firing notice of the expected
SLO for the job, from the fault's start and from the bound's crossing (the bench computes both
from the bounds GET /api/v1/live/bounds serves); p50, p95, max; notices about healthy jobs
(false pages). Time is compressed only in the history: the models' phases take seconds to a
minute, so their learned bounds are short and a run takes minutes; the loop keeps the real 30 s
windows, so its bound is the real one a 30 s-window model learns.

Part 2, the demo fleet's history replayed through the evaluator: every job of a demo fleet
(backend/demo) as its agent had sent it by each instant (`simulator.cut_at`, every
`--replay-step` seconds of its life), computed by the engine, judged by `live_state` with the
bounds learned from the jobs finished before that instant, and measured by the live SLOs
(`alerts.live.measure_live`): every evaluation is a page. The demo fleet is healthy, so each is
false.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.alerts.slos import load_slo_file  # noqa: E402
from tests.backend.alerts.conftest import (  # noqa: E402
    ALERTMANAGER_BIN,
    alertmanager_config,
    free_port,
    serve_receiver,
)
from tests.cluster import Cluster  # noqa: E402

WINDOW_S = 30.0
HEARTBEAT_S = 30.0
OWNERS = (
    "trainer",
    "compiler",
    "cluster",
    "data",
    "checkpoint",
    "scheduler",
    "fleet",
    "publishing",
)
# model -> (process group s, cold compile s, warm compile s): the medians; draws are +-15 %
MODELS = {"ranker": (10.0, 40.0, 15.0), "dlrm": (6.0, 60.0, 20.0)}
EXPECTED = {
    "process_group": ("hung_beyond_bound", "trainer"),
    "loop": ("hung_beyond_bound", "trainer"),
    "compile": ("hung_beyond_bound", "compiler"),
    "storm": ("restart_storm", "cluster"),
    "crash_loop": ("crash_loop", "trainer"),
}


class Agent:
    """One simulated trainer: events with the wall-clock instant its agent would send each."""

    def __init__(self, job_id: str, model: str, t0: float, gpus: int = 8) -> None:
        self.job_id, self.model, self.t0 = job_id, model, t0
        self.out: list[tuple[float, dict[str, Any]]] = []
        self.n = 0
        self.fault_at: float | None = None
        self.crossing: float | None = None
        self.ev("job_submitted", None, t0, ts=t0, model=model, gpus=gpus, labels={"owner": "ml"})

    def ev(self, etype: str, attempt: int | None, at: float, **fields: Any) -> None:
        self.n += 1
        e = {"event_id": f"{self.job_id}-{self.n}", "job_id": self.job_id, "type": etype}
        if attempt is not None:
            e["attempt"] = attempt
        e.update(fields)
        self.out.append((at, e))

    def phase(self, a: int, name: str, start: float, seconds: float | None) -> float:
        """A phase: phase_started at its start; its `phase` at its end (None: it never ends)."""
        sid = f"{self.job_id}-{a}-{name}-{start:.3f}"
        self.ev("phase_started", a, start, phase=name, start=start, span_id=sid)
        if seconds is None:
            return float("inf")
        self.ev(
            "phase", a, start + seconds, phase=name, start=start, end=start + seconds, span_id=sid
        )
        return start + seconds

    def beats(self, a: int, start: float, until: float) -> None:
        t = start + HEARTBEAT_S
        while t <= until:
            self.ev("heartbeat", a, t, ts=t)
            t += HEARTBEAT_S

    def windows(
        self, a: int, start: float, until: float, cursor: float, advance: bool = True
    ) -> tuple[float, float]:
        t = start
        while t + WINDOW_S <= until:
            step = 30.0 if advance else 0.0
            self.ev(
                "progress",
                a,
                t + WINDOW_S,
                start=t,
                end=t + WINDOW_S,
                cursor_start=cursor,
                cursor_end=cursor + step,
                steps=int(step),
            )
            cursor += step
            t += WINDOW_S
        return t, cursor

    def due(self, now: float) -> list[dict[str, Any]]:
        ready = [e for at, e in self.out if at <= now]
        self.out = [(at, e) for at, e in self.out if at > now]
        return ready


def _draw(rng: random.Random, median: float) -> float:
    return median * rng.uniform(0.85, 1.15)


def startup(
    ag: Agent,
    a: int,
    t: float,
    rng: random.Random,
    *,
    warm: bool,
    compile_s: float | None = None,
    pg_s: float | None = -1.0,
) -> float:
    """Set-up 2 s, trainer_init with a process group, (a restore,) a compile; the loop's start."""
    pg, cold, warm_c = MODELS[ag.model]
    ag.ev("attempt_started", a, t, ts=t)
    s = t + 2
    pg_len = _draw(rng, pg) if pg_s == -1.0 else pg_s
    init_end = s + 1 + (pg_len if pg_len is not None else 0) + 2
    ag.phase(a, "trainer_init", s, None if pg_len is None else init_end - s)
    end = ag.phase(a, "trainer_init.process_group", s + 1, pg_len)
    if pg_len is None:
        return end
    c0 = init_end
    if warm:
        c0 = ag.phase(a, "checkpoint_restore", c0, 5.0)
    length = compile_s if compile_s is not None else _draw(rng, warm_c if warm else cold)
    return ag.phase(a, "pt2_compile", c0, length)


def history(model: str, t0: float, n: int, rng: random.Random) -> list[dict[str, Any]]:
    """n finished jobs of the model in the past: start-up, 8 windows, one restart in three."""
    events: list[dict[str, Any]] = []
    for i in range(n):
        ag = Agent(f"hist-{model}-{i:03d}", model, t0 + 900 * i)
        loop = startup(ag, 0, ag.t0 + 1, rng, warm=False)
        end, cursor = ag.windows(0, loop, loop + 8 * WINDOW_S, 0.0)
        if i % 3 == 0:
            ag.ev("failure", 0, end, ts=end, kind="preemption")
            ag.ev("attempt_ended", 0, end, ts=end, reason="preempted")
            loop = startup(ag, 1, end + 20, rng, warm=True)
            end, cursor = ag.windows(1, loop, loop + 4 * WINDOW_S, cursor - 60)
            a = 1
        else:
            a = 0
        ag.phase(a, "shutdown", end, 5.0)
        ag.ev("attempt_ended", a, end + 5, ts=end + 5, reason="completed")
        ag.ev("job_ended", None, end + 6, ts=end + 6, status="succeeded")
        events += [e for _at, e in ag.out]
    return events


def healthy(
    job_id: str,
    model: str,
    t0: float,
    until: float,
    rng: random.Random,
    *,
    compile_s: float | None = None,
    restart: bool = False,
) -> Agent:
    ag = Agent(job_id, model, t0)
    loop = startup(ag, 0, t0 + 1, rng, warm=False, compile_s=compile_s)
    if restart:
        end, cursor = ag.windows(0, loop, loop + 3 * WINDOW_S, 0.0)
        ag.beats(0, t0, end)
        ag.ev("failure", 0, end, ts=end, kind="preemption")
        ag.ev("attempt_ended", 0, end, ts=end, reason="preempted")
        loop = startup(ag, 1, end + 15, rng, warm=True)
        ag.windows(1, loop, until, cursor - 30)
        ag.beats(1, end + 15, until)
    else:
        ag.windows(0, loop, until, 0.0)
        ag.beats(0, t0, until)
    return ag


def faulty(
    kind: str,
    job_id: str,
    model: str,
    t0: float,
    until: float,
    rng: random.Random,
    bounds: dict[str, dict[tuple[str, str], float]],
) -> Agent:
    b = bounds[model]
    ag = Agent(job_id, model, t0)
    if kind == "process_group":
        startup(ag, 0, t0 + 1, rng, warm=False, pg_s=None)
        ag.fault_at = t0 + 1 + 2 + 1
        ag.crossing = ag.fault_at + b[("trainer_init.process_group", "")]
        ag.beats(0, t0, until)
    elif kind == "compile":
        start = startup(ag, 0, t0 + 1, rng, warm=False, compile_s=0.0)
        ag.out = [
            (at, e)
            for at, e in ag.out
            if not (e["type"] == "phase" and e.get("phase") == "pt2_compile")
        ]
        ag.fault_at = start
        ag.crossing = start + b[("pt2_compile", "cold")]
        ag.beats(0, t0, until)
    elif kind == "loop":
        loop = startup(ag, 0, t0 + 1, rng, warm=False)
        stop, cursor = ag.windows(0, loop, loop + 3 * WINDOW_S, 0.0)
        ag.windows(0, stop, until, cursor, advance=False)  # the agent's idle windows
        ag.beats(0, t0, until)
        ag.fault_at = stop  # the last cursor advance: the end of the last advancing window
        ag.crossing = stop + b[("loop", "")]
    elif kind == "storm":
        cursor, t = 0.0, t0 + 1
        starts = []
        a = 0
        while t < until:
            ag.ev("attempt_started", a, t, ts=t)
            starts.append(t)
            ag.phase(a, "trainer_init", t + 1, 2.0)
            ag.ev(
                "progress",
                a,
                t + 9,
                start=t + 3,
                end=t + 9,
                cursor_start=cursor,
                cursor_end=cursor + 60,
                steps=6,
            )
            cursor += 60
            ag.ev("failure", a, t + 10, ts=t + 10, kind="infra")
            if a == 0:
                ag.fault_at = t + 10
            t += 12
            a += 1
        ag.crossing = starts[4]  # the 5th attempt within the hour (ETT_LIVE_RESTART_STORM_*)
    elif kind == "crash_loop":
        t = t0 + 1
        ag.ev("attempt_started", 0, t, ts=t)
        ag.ev(
            "progress", 0, t + 10, start=t + 4, end=t + 10, cursor_start=0, cursor_end=300, steps=6
        )
        ag.ev("failure", 0, t + 10, ts=t + 10, kind="app_error")
        ag.fault_at = t + 10
        fails = []
        a, t = 1, t + 15
        while t < until:
            ag.ev("attempt_started", a, t, ts=t)
            ag.phase(a, "checkpoint_restore", t + 1, 2.0)
            ag.ev(
                "progress",
                a,
                t + 8,
                start=t + 3,
                end=t + 8,
                cursor_start=240,
                cursor_end=280,
                steps=4,
            )
            ag.ev("failure", a, t + 9, ts=t + 9, kind="app_error")
            fails.append(t + 9)
            a, t = a + 1, t + 15
        ag.crossing = fails[2]  # the 3rd attempt in a row without progress (k = 3)
    else:
        raise ValueError(kind)
    return ag


def pct(xs: list[float], q: float) -> float | None:
    """The q-th percentile, linear (numpy's default)."""
    if not xs:
        return None
    ys = sorted(xs)
    k = (len(ys) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(ys) - 1)
    return ys[lo] + (ys[hi] - ys[lo]) * (k - lo)


def summary(xs: list[float]) -> dict[str, Any]:
    return {
        "n": len(xs),
        "p50_s": None if not xs else round(pct(xs, 50) or 0.0, 1),
        "p95_s": None if not xs else round(pct(xs, 95) or 0.0, 1),
        "max_s": None if not xs else round(max(xs), 1),
    }


def start_alertmanager(home: Path, receiver_url: str) -> tuple[subprocess.Popen[bytes], str]:
    if ALERTMANAGER_BIN is None:
        raise SystemExit("prometheus-alertmanager is not installed: bash scripts/test_services.sh")
    cfg = alertmanager_config(receiver_url, OWNERS)
    cfg["route"]["group_wait"] = "1s"
    path = home / "alertmanager.yml"
    path.write_text(yaml.safe_dump(cfg))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (home / "alertmanager.log").open("wb")
    proc = subprocess.Popen(
        [
            ALERTMANAGER_BIN,
            f"--config.file={path}",
            f"--storage.path={home / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/-/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("alertmanager did not start")


def slo_file(home: Path, receiver_url: str, am_url: str) -> Path:
    slos = []
    for s in load_slo_file().slos:
        doc = s.to_doc()
        doc["window"], doc["for"] = doc.pop("window_s"), doc.pop("for_s")
        slos.append(doc)
    channels = {
        o: [
            {"name": "hook", "kind": "webhook", "target": f"{receiver_url}/hook/{o}"},
            {"name": "am", "kind": "alertmanager", "target": am_url},
        ]
        for o in OWNERS
    }
    path = home / "slos.yaml"
    path.write_text(yaml.safe_dump({"slos": slos, "channels": channels}))
    return path


def run_live(args: argparse.Namespace, url: str, home: Path) -> dict[str, Any]:
    rng = random.Random(args.seed)
    with serve_receiver() as receiver:
        am, am_url = start_alertmanager(home, receiver.url)
        env = {
            "ETT_SLOS_FILE": str(slo_file(home, receiver.url, am_url)),
            "ETT_BOUNDS_REFRESH_INTERVAL_S": "5",
            "ETT_PUBLIC_URL": "http://127.0.0.1:8050",
            "ETT_LOG_LEVEL": "warning",
        }
        cluster = Cluster(url, home / "cluster", apis=args.apis, workers=args.workers, env=env)
        token = cluster.token()
        cluster.start()
        client = httpx.Client(timeout=60, headers={"Authorization": f"Bearer {token}"})
        urls = [a.url for a in cluster.apis]
        try:
            now = time.time()
            for model in MODELS:
                r = client.post(
                    urls[0] + "/api/v1/events",
                    json={"events": history(model, now - 30 * 3600, args.history, rng)},
                )
                r.raise_for_status()
            bounds: dict[str, dict[tuple[str, str], float]] = {}
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and len(bounds) < len(MODELS):
                for model in MODELS:
                    got = client.get(
                        urls[-1] + "/api/v1/live/bounds", params={"model": model, "samples": 0}
                    ).json()
                    rows = {(b["phase"], b["variant"]): b for b in got["bounds"]}
                    keys = [
                        ("loop", ""),
                        ("trainer_init.process_group", ""),
                        ("pt2_compile", "cold"),
                    ]
                    if all(rows[k]["source"] == "model" for k in keys if k in rows) and all(
                        k in rows for k in keys
                    ):
                        bounds[model] = {k: rows[k]["bound_s"] for k in rows}
                time.sleep(1)
            if len(bounds) < len(MODELS):
                raise SystemExit("the workers did not learn the bounds within 3 minutes")
            print(
                json.dumps(
                    {
                        "bounds": {
                            m: {
                                f"{p}{':' + v if v else ''}": round(x, 1) for (p, v), x in b.items()
                            }
                            for m, b in bounds.items()
                        }
                    }
                ),
                flush=True,
            )
            t0 = time.time() + 2
            until = t0 + args.duration
            agents: list[Agent] = []
            faults: list[tuple[str, Agent]] = []
            for model in MODELS:
                for i in range(args.healthy):
                    agents.append(
                        healthy(
                            f"ok-{model}-{i:02d}",
                            model,
                            t0 + rng.uniform(0, 20),
                            until,
                            rng,
                            restart=(i % 4 == 3),
                        )
                    )
                median = MODELS[model][1]
                agents.append(
                    healthy(
                        f"ok-{model}-slowcompile", model, t0 + 5, until, rng, compile_s=2 * median
                    )
                )
                for kind in EXPECTED:
                    for i in range(args.faults):
                        ag = faulty(
                            kind,
                            f"bad-{kind}-{model}-{i}",
                            model,
                            t0 + rng.uniform(0, 40),
                            until,
                            rng,
                            bounds,
                        )
                        agents.append(ag)
                        faults.append((kind, ag))
            slow_ok = {m: (2 * MODELS[m][1], bounds[m][("pt2_compile", "cold")]) for m in MODELS}
            print(
                json.dumps(
                    {
                        "agents": len(agents),
                        "faults": len(faults),
                        "slow_cold_compile_vs_bound": slow_ok,
                    }
                ),
                flush=True,
            )
            sent = 0
            i = 0
            last_fault = max(ag.crossing or 0 for _k, ag in faults)
            stop_at = min(until, last_fault + args.grace)
            while time.time() < stop_at:
                tick = time.time()
                for ag in agents:
                    events = ag.due(tick)
                    if events:
                        client.post(
                            urls[i % len(urls)] + "/api/v1/events", json={"events": events}
                        ).raise_for_status()
                        sent += len(events)
                        i += 1
                time.sleep(max(0.0, 1.0 - (time.time() - tick)))
            time.sleep(3)
            return measure(
                receiver,
                faults,
                {ag.job_id for ag in agents if ag.job_id.startswith("ok-")},
                sent,
                bounds,
            )
        finally:
            client.close()
            cluster.stop()
            am.terminate()
            try:
                am.wait(timeout=10)
            except subprocess.TimeoutExpired:
                am.kill()


def measure(
    receiver: Any,
    faults: list[tuple[str, Agent]],
    healthy_ids: set[str],
    sent: int,
    bounds: dict[str, Any],
) -> dict[str, Any]:
    first: dict[tuple[str, str, str], float] = {}  # (channel, alertname, job) -> first arrival
    false_pages: list[dict[str, Any]] = []
    other: dict[str, int] = defaultdict(int)
    for req in receiver.requests:
        channel = "alertmanager" if req.path.startswith("/am/") else "webhook"
        for alert in (req.body or {}).get("alerts", []):
            if alert["status"] != "firing":
                continue
            job = alert["labels"].get("job_id")
            name = alert["labels"].get("alertname")
            if job is None:
                other[f"{channel}:{name}"] += 1
                continue
            key = (channel, name, job)
            first[key] = min(first.get(key, req.at), req.at)
            if job in healthy_ids and channel == "webhook":
                false_pages.append(
                    {"job": job, "alertname": name, "state": alert["annotations"].get("summary")}
                )
    out: dict[str, Any] = {
        "events_sent": sent,
        "false_pages": len(false_pages),
        "false_page_detail": false_pages[:10],
        "fleet_alerts_fired": dict(other),
        "by_fault": {},
        "missed": [],
    }
    for channel in ("webhook", "alertmanager"):
        from_fault: list[float] = []
        from_bound: list[float] = []
        for kind, ag in faults:
            name, _owner = EXPECTED[kind]
            at = first.get((channel, name, ag.job_id))
            if at is None:
                out["missed"].append(f"{channel}:{ag.job_id}")
                continue
            assert ag.fault_at is not None and ag.crossing is not None
            from_fault.append(at - ag.fault_at)
            from_bound.append(at - ag.crossing)
            per = out["by_fault"].setdefault(
                f"{channel}:{kind}", {"from_fault": [], "from_bound": []}
            )
            per["from_fault"].append(round(at - ag.fault_at, 1))
            per["from_bound"].append(round(at - ag.crossing, 1))
        out[channel] = {"from_fault": summary(from_fault), "from_bound": summary(from_bound)}
    loops = out["by_fault"].get("webhook:loop", {}).get("from_fault", [])
    out["loop_paged_after_last_progress_max_s"] = max(loops) if loops else None
    out["loop_bound_s"] = {m: round(b[("loop", "")], 1) for m, b in bounds.items()}
    p95 = [out[c]["from_bound"]["p95_s"] for c in ("webhook", "alertmanager")]
    out["targets"] = {
        "p95_after_bound_le_60s": all(x is not None and x <= 60 for x in p95),
        "hung_loop_paged_within_5min_of_last_progress": bool(loops) and max(loops) <= 300,
        "zero_false_pages": not false_pages,
        "every_fault_paged": not out["missed"],
    }
    return out


def run_replay(args: argparse.Namespace) -> dict[str, Any]:
    """The demo fleet's history, judged at every step of every job's life by the live SLOs."""
    from backend.alerts.live import measure_live
    from backend.demo import fleet as demo_fleet
    from backend.demo.simulator import cut_at, job_events
    from backend.ett.engine import compute_job
    from backend.live.bounds import BoundRules, BoundSet, learn_all, samples_of
    from backend.live.service import LiveJob
    from backend.live.state import live_state

    now = time.time()
    spec = demo_fleet.FleetSpec(
        seed=args.seed, models=args.replay_models, days=args.replay_days, now=now
    )
    by_job: dict[str, list[dict[str, Any]]] = {}
    for plan in demo_fleet.plans(spec):
        if plan.submitted_at < now:
            # the whole plan, cut at each judged instant below (not at the fleet's now)
            events = job_events(plan)
            by_job[events[0]["job_id"]] = with_heartbeats(events)
    finals = {}
    for job_id, evs in by_job.items():
        r = compute_job(evs, now=now)
        if not r.provisional:
            finals[job_id] = (r.ended_at, r.model, r.to_dict(with_spans=True))
    rows_by_end = sorted(
        (end, model, s.phase, s.variant, s.value_s, s.at)
        for end, model, doc in finals.values()
        for s in samples_of(doc)
    )
    live_slos = [s for s in load_slo_file().slos if s.is_live]
    rules = BoundRules()
    pages: set[tuple[str, str, str]] = set()
    silences: set[tuple[str, str, str]] = set()
    judged = 0
    states: dict[str, int] = defaultdict(int)
    learned_at = -1.0
    learned: dict[Any, Any] = {}
    started = time.time()
    steps = []
    for job_id, evs in by_job.items():
        r = compute_job(evs, now=now)
        t = r.submitted_at + args.replay_step
        while t < min(r.ended_at, now):
            steps.append((t, job_id))
            t += args.replay_step
    steps.sort()
    for t, job_id in steps:
        if t - learned_at >= 3600:
            learned = learn_all(
                ((m, p, v, x, at) for end, m, p, v, x, at in rows_by_end if end < t), rules
            )
            learned_at = t
        evs = by_job[job_id]
        result = compute_job(cut_at(evs, t), now=t).to_dict(with_spans=True)
        state = live_state(result, BoundSet(result.get("model"), learned), t)
        if state is None:
            continue
        judged += 1
        states[state.kind] += 1
        job = LiveJob(state, None, None)
        for d in state.detections:
            d.detail.setdefault("owner", "trainer")
        sent = cut_at(evs, t)
        quiet = t - max(_sent_at(e) for e in sent)
        for slo in live_slos:
            for ev in measure_live(slo, [job]):
                # A silence the agent's own events show (the demo simulates processes that stop
                # sending) is a true page, checked here on the raw events, not on our state.
                true = ev.extra["state"] == "silent" and quiet > HEARTBEAT_TIMEOUT_S
                (silences if true else pages).add((job_id, slo.name, ev.extra["state"]))
    return {
        "jobs": len(by_job),
        "events": sum(len(v) for v in by_job.values()),
        "judged_instants": judged,
        "states": dict(states),
        "false_pages": len({(j, s) for j, s, _st in pages}),
        "false_page_detail": sorted(pages)[:10],
        "true_silences": sorted(silences)[:10],
        "seconds": round(time.time() - started, 1),
    }


HEARTBEAT_TIMEOUT_S = 300.0
HEARTBEAT_EVERY_S = 60.0  # the agent's default (trainer_agent heartbeat_s)


def _sent_at(ev: dict[str, Any]) -> float:
    """The latest instant an event names (when its agent sends it)."""
    for key in ("end", "blocking_end", "ts", "start"):
        if isinstance(ev.get(key), int | float):
            return float(ev[key])
    return 0.0


def with_heartbeats(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The demo's events plus the heartbeats a real agent sends every 60 s while its attempt
    runs (from its start to its last event): the demo's own events name no idle heartbeat."""
    spans: dict[int, list[float]] = {}
    for ev in events:
        a = ev.get("attempt")
        if a is None:
            continue
        lo_hi = spans.setdefault(a, [float("inf"), float("-inf")])
        t = ev.get("ts", ev.get("start"))
        if ev["type"] == "attempt_started" and isinstance(t, int | float):
            lo_hi[0] = min(lo_hi[0], float(t))
        lo_hi[1] = max(lo_hi[1], _sent_at(ev))
    job_id = events[0]["job_id"]
    out = list(events)
    for a, (lo, hi) in spans.items():
        t = lo + HEARTBEAT_EVERY_S
        while t < hi:
            out.append(
                {
                    "event_id": f"{job_id}:beat:{a}:{int(t)}",
                    "job_id": job_id,
                    "type": "heartbeat",
                    "attempt": a,
                    "ts": t,
                }
            )
            t += HEARTBEAT_EVERY_S
    return out


def main(argv: list[str] | None = None) -> int:
    from benchmarks._pg import scratch_postgres

    signal.signal(signal.SIGTERM, signal.default_int_handler)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--faults", type=int, default=3, help="jobs of each fault per model")
    p.add_argument("--healthy", type=int, default=12, help="healthy jobs per model")
    p.add_argument("--history", type=int, default=20, help="finished jobs per model to learn from")
    p.add_argument(
        "--duration", type=float, default=600.0, help="the longest the live fleet runs (s)"
    )
    p.add_argument(
        "--grace", type=float, default=90.0, help="how long past the last crossing it runs"
    )
    p.add_argument("--apis", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=23)
    p.add_argument("--replay-models", type=int, default=30)
    p.add_argument("--replay-days", type=float, default=14.0)
    p.add_argument("--replay-step", type=float, default=120.0)
    p.add_argument("--skip-live", action="store_true")
    p.add_argument("--skip-replay", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    if not args.skip_live:
        with (
            tempfile.TemporaryDirectory(prefix="ett-detect-") as tmp,
            scratch_postgres("ett_detect") as url,
        ):
            report["live"] = run_live(args, url, Path(tmp))
        report["live"]["load_average_1m"] = round(os.getloadavg()[0], 1)
        print(json.dumps({"live": report["live"]}, indent=2), flush=True)
    if not args.skip_replay:
        report["replay"] = run_replay(args)
        print(json.dumps({"replay": report["replay"]}, indent=2), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    ok = all(report.get("live", {}).get("targets", {"x": True}).values())
    ok = ok and report.get("replay", {}).get("false_pages", 0) == 0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
