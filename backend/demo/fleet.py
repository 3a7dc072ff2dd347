"""The demo fleet: six benchmark pairs (paper §V-B) and a longitudinal fleet (§V-D) as job plans.

Numbers follow the paper: trainer init of ~15 min in seven sub-stages, a DPP warm-up of 3-5 min,
PT2 compilation from tens of minutes cold to 333 s (first attempt) and 176 s (recovery) once
optimized, checkpoints every 30 or 60 min whose blocking time falls by 77% with async saves,
in-trainer publishing of 25-55 min that standalone publishing cuts to 3.3 min or less, and
preemptions that dominate the failures. Everything is drawn from `random.Random` seeded by the
fleet seed and the model's name, so a model's jobs do not depend on how many models are drawn.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from backend.demo.progress import track
from backend.demo.simulator import (
    Event,
    Interruption,
    JobPlan,
    Stall,
    Startup,
    cut_at,
    job_events,
)

MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0

TEAMS = (
    "ads-ranking",
    "feed-ranking",
    "search-ranking",
    "video-recs",
    "notifications",
    "marketplace",
    "integrity",
)
CLUSTERS = ("cluster-east", "cluster-west", "cluster-north")
PLATFORMS = ("trainer-v1", "trainer-v2")
FAMILIES = ("ctr", "cvr", "ranker", "retrieval", "dlrm", "seq", "mtml", "twotower")
GPU_CHOICES = (8, 16, 24, 32, 48, 64, 96, 112, 128, 192, 256, 384, 512, 768, 1024, 1536, 2000)
GPU_WEIGHTS = (8, 10, 9, 10, 7, 9, 6, 5, 7, 5, 5, 3, 3, 2, 2, 1, 1)

# When each technique of §IV lands on a model, as a (from, to) share of the fleet's span.
ROLLOUT_WINDOWS: dict[str, tuple[float, float]] = {
    "init": (0.15, 0.45),
    "compile": (0.22, 0.55),
    "async_ckpt": (0.18, 0.50),
    "standalone_publish": (0.30, 0.65),
}
# The scheduler's changes (§IV-E) land per cluster, fleet-wide.
SCHEDULING_ROLLOUT: dict[str, float] = {
    "cluster-east": 0.38,
    "cluster-west": 0.43,
    "cluster-north": 0.48,
}
# A scheduler regression (§V-D): preemptions and queue waits grow for a while, then recover.
REGRESSION = (0.56, 0.68)
REGRESSION_PREEMPTION_FACTOR = 4.0
REGRESSION_QUEUE_FACTOR = 3.0
# Share of models that get no optimization work in the window (already efficient, small).
UNTOUCHED_SHARE = 0.1
# Where the benchmark pairs run, as a share of the span: before and after the rollout.
BENCHMARK_AT = (0.05, 0.72)


@dataclass(frozen=True, slots=True)
class Optimizations:
    """Which techniques of the paper's section IV a job runs with."""

    init: bool = False
    compile: bool = False
    async_ckpt: bool = False
    standalone_publish: bool = False
    scheduling: bool = False


BASELINE = Optimizations()
OPTIMIZED = Optimizations(True, True, True, True, True)


@dataclass(frozen=True)
class ModelProfile:
    """A model's constant traits: size, owner, phase costs before optimization, failure rates."""

    name: str
    owner: str
    gpus: int
    cluster: str
    platform: str
    tier: str
    train_s: float
    ckpt_interval_s: float
    ckpt_block_s: float
    compile_cold_s: float
    init_scale: float
    dpp_s: float
    queue_s: float
    requeue_s: float
    restore_s: float
    publish_s: float
    standalone_ready: bool = True
    # Expected failures per job before the scheduler work: preemption, app_error, infra, silent.
    failure_rates: dict[str, float] = field(default_factory=dict)
    cadence_days: float = 2.0
    # Technique -> the share of the span at which it lands (None: never in this window).
    rollout: dict[str, float | None] = field(default_factory=dict)
    jitter: float = 0.15


@dataclass(frozen=True)
class Conditions:
    """Fleet-wide conditions a job meets (the scheduler regression)."""

    preemption_factor: float = 1.0
    queue_factor: float = 1.0


def _stages(profile: ModelProfile, opts: Optimizations, rng: random.Random) -> dict[str, float]:
    s = profile.init_scale
    j = profile.jitter

    def d(base: float) -> float:
        return base * s * rng.uniform(1 - j, 1 + j)

    # Sharding metadata: one collective per table before the fix (110 s on 128 GPUs), 24 s after.
    sharding = 110.0 * min(3.0, max(0.4, math.sqrt(profile.gpus / 128)))
    if opts.init:
        sharding *= 24.0 / 110.0
    return {
        "device_init": d(40.0),
        "process_group": d(sharding),
        "preprocessing": d(60.0),
        "train_module": d(150.0),
        "plugins": d(45.0),
        "pre_training_setup": d(75.0),
    }


def startups(
    profile: ModelProfile, opts: Optimizations, rng: random.Random, cond: Conditions
) -> tuple[Startup, Startup]:
    """The first (cold) start-up of a job and the start-up of its recoveries."""
    j = profile.jitter
    cold = profile.compile_cold_s * rng.uniform(1 - j, 1 + j)
    if opts.compile:
        # §IV-B: fewer graphs, pruned autotuning and a portable cache; a recovery reads the
        # cache, so it compiles about half as long as a first attempt (176 s vs 333 s).
        first_compile, again_compile = cold * 0.5, cold * 0.15
    else:
        # Nondeterministic cache keys made a warm recovery cost most of a cold compile.
        first_compile, again_compile = cold, cold * 0.9
    spread = 3 * j  # queues vary more than the work itself
    queue = profile.queue_s * rng.uniform(1 - spread, 1 + spread) * cond.queue_factor
    requeue = profile.requeue_s * rng.uniform(1 - spread, 1 + spread) * cond.queue_factor
    if opts.scheduling:
        requeue *= 0.25
    restore = profile.restore_s * rng.uniform(1 - j, 1 + j) * (0.4 if opts.async_ckpt else 1.0)
    hardware = 120.0 * rng.uniform(0.7, 1.5)
    common = {"fast_batch": opts.init, "parallel_init": opts.init}
    first = Startup(
        queue_s=queue,
        hardware_s=hardware,
        stages=_stages(profile, opts, rng),
        first_batch_s=profile.dpp_s * rng.uniform(0.9, 1.1),
        compile_s=first_compile,
        **common,
    )
    again = Startup(
        queue_s=requeue,
        hardware_s=hardware * rng.uniform(0.8, 1.2),
        stages=_stages(profile, opts, rng),
        first_batch_s=profile.dpp_s * rng.uniform(0.9, 1.1),
        compile_s=again_compile,
        restore_s=restore,
        **common,
    )
    return first, again


def _poisson(rng: random.Random, mean: float) -> int:
    limit, k, p = math.exp(-mean), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def natural_failures(
    profile: ModelProfile,
    opts: Optimizations,
    rng: random.Random,
    cond: Conditions,
    train_s: float,
) -> tuple[Interruption, ...]:
    """Failures drawn from the model's rates, placed at random data positions."""
    rates = dict(profile.failure_rates)
    if opts.scheduling:
        # Stage-aware preemption, tenant knobs and crash-loop avoidance (§IV-E).
        rates["preemption"] = rates.get("preemption", 0.0) * 0.35
        rates["app_error"] = rates.get("app_error", 0.0) * 0.8
    rates["preemption"] = rates.get("preemption", 0.0) * cond.preemption_factor
    out = []
    for kind in ("preemption", "app_error", "infra", "silent"):
        for _ in range(_poisson(rng, rates.get(kind, 0.0))):
            out.append(
                Interruption(
                    at_s=train_s * rng.uniform(0.03, 0.97),
                    kind=kind,
                    teardown_s=rng.uniform(45.0, 150.0),
                )
            )
    return tuple(sorted(out, key=lambda i: i.at_s))


def plan_job(
    profile: ModelProfile,
    opts: Optimizations,
    rng: random.Random,
    *,
    job_id: str,
    submitted_at: float,
    labels: dict[str, str] | None = None,
    interruptions: tuple[Interruption, ...] | None = None,
    cond: Conditions | None = None,
    window_s: float = 900.0,
    stall_chance: float = 0.15,
) -> JobPlan:
    """One job of a model under the given optimizations (failures drawn unless given)."""
    cond = cond or Conditions()
    j = profile.jitter
    train_s = profile.train_s * rng.uniform(1 - j / 3, 1 + j / 3)
    first, again = startups(profile, opts, rng, cond)
    if interruptions is None:
        interruptions = natural_failures(profile, opts, rng, cond, train_s)
    if not opts.scheduling:
        # Before crash-loop detection a failing attempt held its allocation until timeouts fired.
        interruptions = tuple(replace(i, teardown_s=i.teardown_s * 5) for i in interruptions)
    stalls: tuple[Stall, ...] = ()
    if rng.random() < stall_chance:
        stalls = (Stall(at_s=train_s * rng.uniform(0.1, 0.9), duration_s=rng.uniform(120, 480)),)
    block = profile.ckpt_block_s * rng.uniform(1 - j, 1 + j)
    if opts.async_ckpt:
        # Async save with native staging: 77% less blocking (Fig. 4); the upload continues after.
        block, commit = block * 0.23, block * 1.5
    else:
        commit = 2.0
    if opts.standalone_publish and profile.standalone_ready:
        publish, shutdown = 0.0, rng.uniform(90.0, 190.0)
    else:
        publish, shutdown = profile.publish_s * rng.uniform(1 - j, 1 + j), rng.uniform(50.0, 110.0)
    return JobPlan(
        job_id=job_id,
        model=profile.name,
        gpus=profile.gpus,
        labels={
            "owner": profile.owner,
            "cluster": profile.cluster,
            "platform": profile.platform,
            "tier": profile.tier,
            **(labels or {}),
        },
        submitted_at=submitted_at,
        train_s=train_s,
        ckpt_interval_s=profile.ckpt_interval_s,
        ckpt_block_s=block,
        ckpt_commit_s=commit,
        startups=(first, again),
        interruptions=interruptions,
        stalls=stalls,
        publish_s=publish,
        shutdown_s=shutdown,
        release_s=rng.uniform(10.0, 40.0),
        window_s=window_s,
        samples_per_s=profile.gpus * 1500.0,
        steps_per_s=4.0,
        ckpt_bytes=profile.gpus * 1_500_000_000,
    )


# --- The six benchmark models of Fig. 6 -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class BenchmarkModel:
    """One of the paper's models A-F: its size and its costs before optimization."""

    letter: str
    gpus: int
    owner: str
    ckpt_interval_min: float
    train_h: float
    compile_min: float
    queue_min: float
    requeue_min: float
    restore_min: float
    publish_min: float
    block_s: float
    init_scale: float
    # Minutes after the last save at which the two induced failures hit (the replay each costs).
    replay_min: tuple[float, float]
    # E and F had no standalone publishing when measured (§V-B): same shutdown in both jobs.
    standalone_ready: bool


_B = BenchmarkModel
# fmt: off
BENCHMARK_MODELS: tuple[BenchmarkModel, ...] = (
    #   id  gpus  owner           ckpt train compile queue requeue restore publish block init replay
    _B("A",   8, "ads-ranking",    30, 7.9, 14.0,  5,  16,  6, 30,  55, 1.0, (14, 20), True),
    _B("B",  24, "feed-ranking",   30, 9.2,  6.0,  6,   4,  2, 26,  40, 0.7, (5, 6), True),
    _B("C",  64, "search-ranking", 60, 7.6, 16.0,  6,  18,  7, 40, 100, 1.0, (18, 24), True),
    _B("D", 112, "video-recs",     30, 7.3, 12.8,  5,  20,  8, 54,  70, 1.0, (16, 22), True),
    _B("E", 128, "marketplace",    60, 8.2, 24.0,  6,  30,  8,  8, 110, 1.1, (12, 16), False),
    _B("F", 256, "notifications",  30, 7.7, 36.0,  5,  34, 10,  3,  90, 1.3, (6, 8), False),
)
# fmt: on


def benchmark_profiles() -> list[tuple[ModelProfile, tuple[float, float]]]:
    """Models A-F as profiles, with their two replay lengths in minutes."""
    out = []
    for b in BENCHMARK_MODELS:
        profile = ModelProfile(
            name=f"model-{b.letter.lower()}",
            owner=b.owner,
            gpus=b.gpus,
            cluster="cluster-east",
            platform="trainer-v2",
            tier="benchmark",
            train_s=b.train_h * HOUR,
            ckpt_interval_s=b.ckpt_interval_min * MINUTE,
            ckpt_block_s=b.block_s,
            compile_cold_s=b.compile_min * MINUTE,
            init_scale=b.init_scale,
            dpp_s=240.0,
            queue_s=b.queue_min * MINUTE,
            requeue_s=b.requeue_min * MINUTE,
            restore_s=b.restore_min * MINUTE,
            publish_s=b.publish_min * MINUTE,
            standalone_ready=b.standalone_ready,
            jitter=0.03,
        )
        out.append((profile, b.replay_min))
    return out


def benchmark_plans(seed: int, start: float, span_s: float, window_s: float) -> list[JobPlan]:
    """A baseline job (before the rollout) and an optimized one (after) per model, 2 failures each."""
    plans = []
    for profile, replay_min in benchmark_profiles():
        interval = profile.ckpt_interval_s
        # The same two induced failures in both jobs: same data positions, so the same replay.
        saves = int(profile.train_s // interval)
        at = (
            round(saves * 0.3) * interval + replay_min[0] * MINUTE,
            round(saves * 0.7) * interval + replay_min[1] * MINUTE,
        )
        induced = tuple(Interruption(at_s=a, kind="induced", teardown_s=60.0) for a in at)
        for variant, opts, share in (
            ("baseline", BASELINE, BENCHMARK_AT[0]),
            ("optimized", OPTIMIZED, BENCHMARK_AT[1]),
        ):
            rng = random.Random(f"{seed}:bench:{profile.name}:{variant}")
            submitted = start + share * span_s + rng.uniform(0, 6 * HOUR)
            plan = plan_job(
                profile,
                opts,
                rng,
                job_id=f"{profile.name}-{variant}",
                submitted_at=submitted,
                labels={"variant": variant, "pair": f"{profile.name}-pair", "benchmark": "true"},
                interruptions=induced,
                window_s=window_s,
                stall_chance=0.0,
            )
            # Fix the data volume inside a pair (same input range), so only the overhead differs.
            plans.append(replace(plan, train_s=profile.train_s))
    return plans


# --- The longitudinal fleet -----------------------------------------------------------------


def fleet_profile(seed: int, index: int) -> ModelProfile:
    """The index-th model of the longitudinal fleet (independent of the fleet's size)."""
    rng = random.Random(f"{seed}:model:{index}")
    family = FAMILIES[index % len(FAMILIES)]
    owner = TEAMS[rng.randrange(len(TEAMS))]
    name = f"{owner.split('-')[0]}-{family}-{index:03d}"
    untouched = rng.random() < UNTOUCHED_SHARE
    gpus = rng.choices(GPU_CHOICES, GPU_WEIGHTS)[0]
    if untouched:
        gpus = min(gpus, 64)
    size = math.log2(gpus / 8) / math.log2(2000 / 8)  # 0 for 8 GPUs, 1 for 2,000
    heavy_publish = rng.random() < 0.75 and not untouched
    rollout: dict[str, float | None] = {}
    for technique, (lo, hi) in ROLLOUT_WINDOWS.items():
        rollout[technique] = None if untouched else rng.uniform(lo, hi)
    return ModelProfile(
        name=name,
        owner=owner,
        gpus=gpus,
        cluster=CLUSTERS[rng.randrange(len(CLUSTERS))],
        platform=PLATFORMS[rng.randrange(len(PLATFORMS))],
        tier=rng.choice(("tier-1", "tier-2", "tier-2", "tier-3")),
        train_s=rng.uniform(8.6, 9.8) * HOUR,
        ckpt_interval_s=rng.choice((30.0, 60.0)) * MINUTE,
        ckpt_block_s=rng.uniform(35.0, 80.0) * (1 + size),
        compile_cold_s=(rng.uniform(6, 12) + 24 * size * rng.uniform(0.6, 1.2))
        * MINUTE
        * (0.5 if untouched else 1.0),
        init_scale=rng.uniform(0.8, 1.3),
        dpp_s=rng.uniform(180.0, 300.0),
        queue_s=rng.uniform(3.0, 9.0) * MINUTE,
        requeue_s=rng.uniform(10.0, 24.0) * MINUTE,
        restore_s=rng.uniform(3.0, 8.0) * MINUTE * (1 + size),
        publish_s=rng.uniform(25.0, 45.0) * MINUTE if heavy_publish else rng.uniform(3, 8) * 60,
        standalone_ready=heavy_publish,
        failure_rates={
            "preemption": rng.uniform(0.12, 0.45) * (0.4 if untouched else 1.0),
            "app_error": rng.uniform(0.05, 0.2),
            "infra": rng.uniform(0.03, 0.1),
            "silent": 0.04,
        },
        cadence_days=rng.choice((1.0, 1.5, 2.0, 3.0, 4.0)),
        rollout=rollout,
    )


# Shares of fleet jobs that do not succeed (of those with a failure to give up at, for
# "failed"): a fleet where every job succeeds is not a fleet.
FAILED_SHARE = 0.5
CANCELLED_SHARE = 0.04


def with_outcome(plan: JobPlan, rng: random.Random) -> JobPlan:
    """The plan, ending failed (it gives up at its last real failure) or cancelled, sometimes."""
    real = [i for i in plan.interruptions if i.kind != "silent"]
    draw = rng.random()
    if draw < CANCELLED_SHARE:
        return replace(plan, outcome="cancelled", cancel_at_s=plan.train_s * rng.uniform(0.1, 0.7))
    if real and draw < CANCELLED_SHARE + FAILED_SHARE and real[-1].kind in ("app_error", "infra"):
        return replace(plan, outcome="failed")
    return plan


def _day_label(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y%m%d")


def fleet_plans(
    seed: int, models: int, start: float, span_s: float, until: float, window_s: float
) -> Iterator[JobPlan]:
    """Every job of the longitudinal fleet submitted in [start, until), model by model."""
    for index in range(models):
        profile = fleet_profile(seed, index)
        rng = random.Random(f"{seed}:jobs:{profile.name}")
        t = start + rng.uniform(0, profile.cadence_days) * DAY
        n = 0
        while t < until:
            # Past the span (the live feed's horizon) the fleet stays as it ended.
            share = min(1.0, (t - start) / span_s)
            opts = Optimizations(
                **{
                    k: v is not None and share >= v
                    for k, v in profile.rollout.items()
                    if k in ROLLOUT_WINDOWS
                },
                scheduling=share >= SCHEDULING_ROLLOUT[profile.cluster],
            )
            regressed = REGRESSION[0] <= share < REGRESSION[1]
            cond = (
                Conditions(REGRESSION_PREEMPTION_FACTOR, REGRESSION_QUEUE_FACTOR)
                if regressed
                else Conditions()
            )
            plan = plan_job(
                profile,
                opts,
                rng,
                job_id=f"{profile.name}-{_day_label(t)}-{n}",
                submitted_at=t,
                cond=cond,
                window_s=window_s,
            )
            yield with_outcome(plan, random.Random(f"{seed}:outcome:{plan.job_id}"))
            n += 1
            t += profile.cadence_days * DAY * rng.uniform(0.8, 1.2)


@dataclass(frozen=True)
class FleetSpec:
    """The size and time span of a demo fleet."""

    seed: int = 7
    models: int = 40
    days: float = 182.0
    now: float = 0.0
    window_s: float = 900.0
    benchmarks: bool = True

    @property
    def start(self) -> float:
        """The first instant of the fleet's span."""
        return self.now - self.days * DAY


def plans(spec: FleetSpec, until: float | None = None) -> Iterator[JobPlan]:
    """Every job plan of the fleet submitted before `until` (default: now), benchmarks first."""
    span = spec.days * DAY
    until = spec.now if until is None else until
    if spec.benchmarks:
        yield from benchmark_plans(spec.seed, spec.start, span, spec.window_s)
    yield from fleet_plans(spec.seed, spec.models, spec.start, span, until, spec.window_s)


def fleet_events(spec: FleetSpec) -> Iterator[Event]:
    """Every event the fleet's agents have sent by `spec.now`, job by job."""
    for plan in plans(spec):
        if plan.submitted_at > spec.now:
            continue
        yield from cut_at(job_events(plan), spec.now)


ROLLOUT_TITLES: dict[str, str] = {
    "init": "trainer init fixes rolled out (sharding metadata, dataloader)",
    "compile": "PT2 compile cache rolled out",
    "async_ckpt": "checkpoint async_save enabled",
    "standalone_publish": "standalone model publish enabled",
}


def fleet_annotations(spec: FleetSpec) -> list[dict[str, Any]]:
    """The annotations of the fleet's own rollouts and incidents up to `spec.now`, oldest first.

    Fleet-wide: the scheduler changes per cluster and the scheduler regression. Per model: when
    each technique of section IV reached it (model and team set).
    """
    span = spec.days * DAY
    notes: list[dict[str, Any]] = [
        {"ts": spec.start + share * span, "title": f"scheduler changes rolled out on {cluster}"}
        for cluster, share in SCHEDULING_ROLLOUT.items()
    ]
    notes.append(
        {
            "ts": spec.start + REGRESSION[0] * span,
            "title": "scheduler regression: more preemptions, longer queues",
        }
    )
    notes.append({"ts": spec.start + REGRESSION[1] * span, "title": "scheduler regression fixed"})
    for index in range(spec.models):
        profile = fleet_profile(spec.seed, index)
        for technique, share in profile.rollout.items():
            if share is None or technique not in ROLLOUT_TITLES:
                continue
            notes.append(
                {
                    "ts": spec.start + share * span,
                    "title": ROLLOUT_TITLES[technique],
                    "model": profile.name,
                    "team": profile.owner,
                }
            )
    return sorted((n for n in notes if n["ts"] <= spec.now), key=lambda n: (n["ts"], n["title"]))


def count_events(spec: FleetSpec, *, progress: bool = False) -> int:
    """How many events `fleet_events(spec)` yields (a progress bar's total); with `progress`,
    a bar of the jobs counted (the whole fleet is simulated once for it)."""
    due = [plan for plan in plans(spec) if plan.submitted_at <= spec.now]
    return sum(
        len(cut_at(job_events(plan), spec.now))
        for plan in track(due, "simulate", "job", enabled=progress)
    )
