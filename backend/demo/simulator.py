"""One simulated training job: its plan, and the wire events (SPEC section 3) its agent would send.

Pure and deterministic: a plan fully decides the events. Times are Unix epoch seconds (floats,
rounded to the millisecond), a form the wire protocol accepts as is.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from typing import Any

Event = dict[str, Any]

# Trainer-init sub-stages before the first batch, in the order a baseline trainer runs them (§IV-A).
INIT_STAGES: tuple[str, ...] = (
    "device_init",
    "process_group",
    "preprocessing",
    "train_module",
    "plugins",
    "pre_training_setup",
)
# Sub-stages that run beside the DPP warm-up once components start in parallel (§IV-A3).
_MODEL_BRANCH: tuple[str, ...] = ("train_module", "plugins", "pre_training_setup")
_ENDED_REASON = {"preemption": "preempted"}
_MESSAGES = {
    "preemption": "allocation reclaimed by a higher-priority job",
    "app_error": "trainer raised: CUDA error: an illegal memory access was encountered",
    "infra": "NCCL watchdog: collective timed out after 1800000 ms (host unreachable)",
    "induced": "benchmark: job terminated on purpose (controlled failure)",
    "unknown": "attempt stopped reporting",
}
# The causes a demo failure of each kind has (docs/ACCOUNTING.md "Failure causes"), with the
# message an agent or the SLURM hooks would send; one is picked from the job and attempt alone
# (no draw of the fleet's random stream, so the fleet's numbers stay as they were).
_CAUSES: dict[str, tuple[tuple[str, str], ...]] = {
    "preemption": (("preemption", "SLURM job state PREEMPTED; requeued"),),
    "app_error": (
        ("gpu_oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB"),
        ("cuda_error", "RuntimeError: CUDA error: an illegal memory access was encountered"),
        ("exception", "ValueError: embedding index out of range"),
        ("dataloader", "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed."),
    ),
    "infra": (
        ("gpu_hardware", "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."),
        ("nccl_error", "NCCL error: remote process exited or there was a network error"),
        ("node_failure", "SLURM job state NODE_FAIL"),
    ),
    "induced": (("injected", _MESSAGES["induced"]),),
}
# A silent attempt (it just stops sending) the scheduler later explains, but one in
# _SILENT_UNEXPLAINED, which stays a failure of unknown cause.
_SILENT_UNEXPLAINED = 4
# Jobs of at least this many GPUs (several hosts) report a failure from the failed rank and,
# as cascade, NCCL timeouts from two others.
_CASCADE_GPUS = 16


def _pick(job_id: str, attempt: int, n: int) -> int:
    """A fixed choice of one of n for a job's attempt (the same on every run)."""
    return zlib.crc32(f"{job_id}:{attempt}".encode()) % n


def _emit_failure(em: _Emitter, plan: JobPlan, attempt: int, t: float, failure: Any) -> None:
    """The failure events of one interruption: the initiating report, its cascade, or for a
    silent attempt the scheduler's explanation (mostly)."""
    if failure.kind == "silent":
        if _pick(plan.job_id, attempt, _SILENT_UNEXPLAINED) == 0:
            return
        # the node stopped answering: SLURM's NODE_FAIL, stamped when the node went
        em.add("failure", attempt, ts=t, kind="infra", cause="node_failure",
               message="SLURM job state NODE_FAIL (node stopped answering)",
               scope="allocation")  # fmt: skip
        return
    options = _CAUSES.get(failure.kind)
    if options is None:
        em.add("failure", attempt, ts=t, kind=failure.kind, message=_MESSAGES[failure.kind])
        return
    cause, message = options[_pick(plan.job_id, attempt, len(options))]
    ranks = plan.gpus > _CASCADE_GPUS - 1 and failure.kind in ("app_error", "infra")
    rank = _pick(plan.job_id, attempt + 7, plan.gpus) if ranks else None
    em.add("failure", attempt, ts=t, kind=failure.kind, cause=cause, message=message,
           **({"rank": rank} if rank is not None else {}))  # fmt: skip
    if rank is None:
        return
    for k, other in enumerate(r for r in (0, 1, 2) if r != rank):
        if k == 2:
            break
        em.add("failure", attempt, ts=t + failure.teardown_s * (0.3 + 0.1 * k), kind="infra",
               cause="nccl_timeout", rank=other,
               message=f"[Rank {other}] Watchdog caught collective operation timeout")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Startup:
    """The start-up of one attempt: queue wait, hardware, trainer-init stages, restore, compile."""

    queue_s: float
    hardware_s: float
    stages: dict[str, float]
    first_batch_s: float
    compile_s: float
    restore_s: float = 0.0
    # Synthetic fast-batch: compilation no longer waits for the DPP warm-up (§IV-A2).
    fast_batch: bool = False
    # Model creation runs beside the DPP warm-up instead of before it (§IV-A3).
    parallel_init: bool = False


@dataclass(frozen=True, slots=True)
class Interruption:
    """A failure when the job's data position first reaches `at_s` seconds of training."""

    at_s: float
    # A failure kind of SPEC section 3, or "silent": the attempt just stops sending.
    kind: str
    teardown_s: float = 60.0


@dataclass(frozen=True, slots=True)
class Stall:
    """A data stall (the cursor does not move) when the data position reaches `at_s`."""

    at_s: float
    duration_s: float


@dataclass(frozen=True)
class JobPlan:
    """Everything that decides one job's events."""

    job_id: str
    model: str
    gpus: int
    labels: dict[str, str]
    submitted_at: float
    train_s: float
    ckpt_interval_s: float
    ckpt_block_s: float
    ckpt_commit_s: float
    # Attempt i starts up as startups[min(i, len - 1)]: a first (cold) start, then recoveries.
    startups: tuple[Startup, ...]
    interruptions: tuple[Interruption, ...] = ()
    stalls: tuple[Stall, ...] = ()
    publish_s: float = 0.0
    shutdown_s: float = 60.0
    release_s: float = 20.0
    window_s: float = 900.0
    samples_per_s: float = 1000.0
    steps_per_s: float = 2.0
    ckpt_bytes: int = 0
    # How the job ends: "succeeded"; "failed" (it gives up at its last failure, not restarted);
    # "cancelled" (its owner stops it at `cancel_at_s` of training).
    outcome: str = "succeeded"
    cancel_at_s: float | None = None


class _Emitter:
    """Collects one job's events, numbering their ids in emission order."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.events: list[Event] = []

    def add(self, etype: str, attempt: int | None, **fields: Any) -> Event:
        ev: Event = {
            "event_id": f"{self.job_id}:{len(self.events)}",
            "job_id": self.job_id,
            "type": etype,
        }
        if attempt is not None:
            ev["attempt"] = attempt
        for key, value in fields.items():
            ev[key] = round(value, 3) if isinstance(value, float) else value
        self.events.append(ev)
        return ev

    def phase(self, attempt: int, name: str, start: float, duration: float) -> float:
        self.add("phase", attempt, phase=name, start=start, end=start + duration)
        return start + duration


def _startup(em: _Emitter, attempt: int, t: float, su: Startup, restore: bool) -> float:
    """Emit hardware setup, trainer init, restore and compile; return when training can begin."""
    t = em.phase(attempt, "hardware_setup", t, su.hardware_s)
    t = em.phase(attempt, "trainer_init.device_init", t, su.stages["device_init"])
    t = em.phase(attempt, "trainer_init.process_group", t, su.stages["process_group"])
    if su.parallel_init:
        dpp = em.phase(attempt, "trainer_init.preprocessing", t, su.stages["preprocessing"])
        dpp = em.phase(attempt, "trainer_init.first_batch", dpp, su.first_batch_s)
        model = t
        for name in _MODEL_BRANCH:
            model = em.phase(attempt, f"trainer_init.{name}", model, su.stages[name])
        if restore:
            model = em.phase(attempt, "checkpoint_restore", model, su.restore_s)
        compile_start = t if su.fast_batch else dpp
        compiled = em.phase(attempt, "pt2_compile", compile_start, su.compile_s)
        return max(dpp, model, compiled)
    for name in INIT_STAGES[2:]:
        t = em.phase(attempt, f"trainer_init.{name}", t, su.stages[name])
    if restore:
        t = em.phase(attempt, "checkpoint_restore", t, su.restore_s)
    dpp = em.phase(attempt, "trainer_init.first_batch", t, su.first_batch_s)
    compile_start = t if su.fast_batch else dpp
    compiled = em.phase(attempt, "pt2_compile", compile_start, su.compile_s)
    return max(dpp, compiled)


class _Loop:
    """The training loop of one job across attempts: data position, checkpoints, windows."""

    def __init__(self, em: _Emitter, plan: JobPlan) -> None:
        self.em = em
        self.plan = plan
        self.high_water = 0.0
        self.saved: list[tuple[float, float]] = []  # (committed at, data position)
        self.stalls = sorted(plan.stalls, key=lambda s: s.at_s)

    def restore_point(self, at: float) -> float:
        """The data position of the last checkpoint durable at time `at`."""
        points = [pos for committed, pos in self.saved if committed <= at]
        return max(points, default=0.0)

    def _window(self, attempt: int, t: float, pos: float, span: float, moving: bool) -> float:
        p = self.plan
        end_pos = pos + span if moving else pos
        self.em.add(
            "progress",
            attempt,
            start=t,
            end=t + span,
            cursor_start=float(round(pos * p.samples_per_s)),
            cursor_end=float(round(end_pos * p.samples_per_s)),
            steps=int(span * p.steps_per_s) if moving else 0,
        )
        return t + span

    def checkpoint(self, attempt: int, t: float, pos: float) -> float:
        """Emit one save at data position `pos` starting at `t`; return when training resumes."""
        p = self.plan
        blocking_end = t + p.ckpt_block_s
        committed = blocking_end + p.ckpt_commit_s
        self.em.add(
            "checkpoint",
            attempt,
            start=t,
            blocking_end=blocking_end,
            committed=committed,
            cursor=float(round(pos * p.samples_per_s)),
            bytes=p.ckpt_bytes,
        )
        self.saved.append((round(committed, 3), pos))
        return blocking_end

    def run(self, attempt: int, t: float, pos: float, target: float) -> float:
        """Train from data position `pos` to `target` (exclusive of a save at `target`)."""
        p = self.plan
        interval = p.ckpt_interval_s
        marks: list[tuple[float, str, float]] = []
        k = int(pos // interval) + 1
        while k * interval < target - 1e-6:
            marks.append((k * interval, "checkpoint", 0.0))
            k += 1
        for stall in self.stalls:
            # A stall hits the first time the data position passes it, not during replay.
            if max(pos, self.high_water) < stall.at_s < target:
                marks.append((stall.at_s, "stall", stall.duration_s))
        marks.sort()
        marks.append((target, "end", 0.0))
        for mark, kind, duration in marks:
            while pos < mark - 1e-6:
                span = min(p.window_s, mark - pos)
                t = self._window(attempt, t, pos, span, moving=True)
                pos += span
            pos = mark
            if kind == "checkpoint":
                t = self.checkpoint(attempt, t, pos)
            elif kind == "stall":
                t = self._window(attempt, t, pos, duration, moving=False)
        self.high_water = max(self.high_water, pos)
        return t


# The demo fleet's hosts: DEMO_NODES nodes of GPUS_PER_NODE GPUs; two of them are lemons.
DEMO_NODES = 256
GPUS_PER_NODE = 8
LEMON_HOSTS: tuple[str, ...] = ("gpu-node-017", "gpu-node-142")
# The share of attempts ending in an unplanned failure that ran on a lemon node.
LEMON_SHARE = 0.6
_PLANNED = frozenset({"preemption", "induced"})


def host_name(i: int) -> str:
    """The demo's name of node i."""
    return f"gpu-node-{i:03d}"


def attempt_hosts(plan: JobPlan, attempt: int, ends_in: str | None) -> list[str]:
    """Where an attempt runs: ceil(gpus / 8) nodes drawn from the job id and attempt (the same
    every run); an attempt that ends in an unplanned failure ran on a lemon node LEMON_SHARE of
    the time, so the two lemons fail far more often than their exposure explains."""
    rng = random.Random(zlib.crc32(f"{plan.job_id}/{attempt}".encode()))
    n = min(DEMO_NODES, max(1, -(-plan.gpus // GPUS_PER_NODE)))
    lemons = {int(h.rsplit("-", 1)[1]) for h in LEMON_HOSTS}
    picked = rng.sample(range(DEMO_NODES), n)
    if ends_in is not None and ends_in not in _PLANNED and rng.random() < LEMON_SHARE:
        lemon = sorted(lemons)[rng.randrange(len(lemons))]
        if lemon not in picked:
            picked[0] = lemon
    return sorted(host_name(i) for i in picked)


def job_events(plan: JobPlan) -> list[Event]:
    """The complete event stream of a job that runs to its end, in emission order."""
    em = _Emitter(plan.job_id)
    t = plan.submitted_at
    em.add(
        "job_submitted",
        None,
        ts=t,
        model=plan.model,
        gpus=plan.gpus,
        labels=dict(plan.labels),
        config={"checkpoint_interval_s": plan.ckpt_interval_s},
    )
    loop = _Loop(em, plan)
    target = plan.train_s
    if plan.outcome == "cancelled" and plan.cancel_at_s is not None:
        target = min(plan.cancel_at_s, plan.train_s)
    pending = sorted((i for i in plan.interruptions if i.at_s < target), key=lambda i: i.at_s)
    attempt = 0
    pos = 0.0
    while True:
        su = plan.startups[min(attempt, len(plan.startups) - 1)]
        t += su.queue_s
        hosts = attempt_hosts(plan, attempt, pending[0].kind if pending else None)
        em.add("attempt_started", attempt, ts=t, gpus=plan.gpus, host=hosts[0], hosts=hosts)
        t = _startup(em, attempt, t, su, restore=attempt > 0)
        if not pending:
            break
        failure = pending.pop(0)
        t = loop.run(attempt, t, pos, failure.at_s)
        _emit_failure(em, plan, attempt, t, failure)
        if failure.kind != "silent":
            reason = _ENDED_REASON.get(failure.kind, "failure")
            em.add("attempt_ended", attempt, ts=t + failure.teardown_s, reason=reason)
            if plan.outcome == "failed" and not pending:
                em.add(
                    "job_ended", None, ts=t + failure.teardown_s + plan.release_s, status="failed"
                )
                return em.events
        pos = loop.restore_point(t)
        t += failure.teardown_s
        attempt += 1
    if target < plan.train_s:
        t = loop.run(attempt, t, pos, target)
        t = em.phase(attempt, "shutdown", t, plan.shutdown_s)
        em.add("attempt_ended", attempt, ts=t, reason="cancelled")
        em.add("job_ended", None, ts=t + plan.release_s, status="cancelled")
        return em.events
    t = loop.run(attempt, t, pos, plan.train_s)
    # The anchor checkpoint at the end of training, then publishing and shutdown on the GPUs.
    t = loop.checkpoint(attempt, t, plan.train_s)
    if plan.publish_s > 0:
        t = em.phase(attempt, "publish", t, plan.publish_s)
    t = em.phase(attempt, "shutdown", t, plan.shutdown_s)
    em.add("attempt_ended", attempt, ts=t, reason="completed")
    em.add("job_ended", None, ts=t + plan.release_s, status="succeeded")
    return em.events


def _done_at(ev: Event) -> float:
    for key in ("end", "blocking_end", "ts"):
        if key in ev:
            return ev[key]
    return ev["start"]


def cut_at(events: list[Event], now: float) -> list[Event]:
    """What the agent has sent by `now`: finished events, open phases, and a heartbeat if alive.

    Progress windows and checkpoints are sent once complete (a checkpoint once committed), so a
    later cut only adds events; an open phase gets its own id, and its `phase` follows later.
    """
    if not events or all(_done_at(ev) <= now for ev in events):
        return list(events)
    kept: list[Event] = []
    in_progress: set[int] = set()
    for ev in events:
        done = ev.get("committed", _done_at(ev))
        if done <= now:
            kept.append(ev)
            continue
        start = ev.get("start", ev.get("ts"))
        if ev.get("attempt") is not None and start <= now:
            in_progress.add(ev["attempt"])
        if ev["type"] == "phase" and ev["start"] <= now:
            kept.append(
                {
                    "event_id": f"{ev['event_id']}:open",
                    "job_id": ev["job_id"],
                    "type": "phase_started",
                    "attempt": ev["attempt"],
                    "phase": ev["phase"],
                    "start": ev["start"],
                }
            )
    # An attempt mid-work at `now` is alive: its agent's latest heartbeat says so.
    ended = {ev["attempt"] for ev in kept if ev["type"] in ("attempt_ended", "failure")}
    for attempt in sorted(in_progress - ended)[-1:]:
        job_id = events[0]["job_id"]
        kept.append(
            {
                "event_id": f"{job_id}:hb:{int(now)}",
                "job_id": job_id,
                "type": "heartbeat",
                "attempt": attempt,
                "ts": round(now, 3),
            }
        )
    return kept
