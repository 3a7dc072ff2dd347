"""The standard what-ifs of every model and the fleet's ranking of opportunities; pure.

Owners come in as a function (component, phase) -> team, so this module needs no database.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from backend.planner.model import (
    COLD_PARTS,
    DEFAULT_STAGING_FRACTION,
    PART_COMPONENT,
    Change,
    ModelInputs,
    optimal_interval_s,
    what_if,
)

OwnerOf = Callable[[str, str | None], str]
# Where each lever's owner is looked up in the owners mapping: (component, phase).
LEVER_OWNER_KEY: dict[str, tuple[str, str | None]] = {
    **{part: (part, None) for part in COLD_PARTS},  # a start-up component: its owner
    "teardown": ("scheduling", None),
    "checkpoint_restore": (PART_COMPONENT["checkpoint_restore"], "checkpoint_restore"),
    "shutdown": ("shutdown", None),
    "stalled": ("wasted_training", "stalled"),
    "checkpoint": ("wasted_training", "checkpoint_blocking"),
    # Failure kinds: who can make them rarer (preemptions are the scheduler's, §IV-E).
    "preemption": ("scheduling", None),
    "infra": ("hardware_setup", None),
    "app_error": ("trainer_init", None),
}
P25_LEVERS: tuple[str, ...] = (*COLD_PARTS, "teardown", "checkpoint_restore", "shutdown")
COMPILE_CACHE_CUT = 0.8
LEVER_LABELS: dict[str, str] = {
    "scheduling": "Queue wait (scheduling)",
    "teardown": "Failed-attempt teardown",
    "hardware_setup": "Hardware setup",
    "trainer_init": "Trainer init",
    "checkpoint_restore": "Checkpoint restore",
    "pt2_compile": "PT2 compile",
    "shutdown": "Final shutdown / publish",
}
# Failures a benchmark causes on purpose are nobody's opportunity.
NOT_A_LEVER_KINDS = frozenset({"induced"})
SEVERAL = "several teams"
CSBT_KEY = "checkpoint_blocking"


@dataclass(frozen=True)
class WhatIf:
    """A named change, the lever it pulls and whether the fleet ranking counts it."""

    id: str
    title: str
    lever: str
    change: Change
    ranked: bool = True


@dataclass(frozen=True)
class WhatIfOutcome:
    """A what-if's predicted effect on one model."""

    id: str
    title: str
    lever: str
    owner: str
    ranked: bool
    ett_pct_before: float
    ett_pct_after: float
    gpu_h_per_day_freed: float
    tts_saving_s: float
    cascade_saving_s: float
    change: Change


def fleet_p25(fits: Mapping[str, ModelInputs]) -> dict[str, tuple[float, float]]:
    """Per lever, the 25th percentile over models of its cold-start and per-recovery seconds
    (and of CSBT under `checkpoint_blocking`)."""
    out: dict[str, tuple[float, float]] = {}
    for lever in P25_LEVERS:
        if lever == "shutdown":
            cold = [i.final_shutdown_s for i in fits.values()]
            rec = [0.0]
        else:
            cold = [i.cold_start_s.get(lever, 0.0) for i in fits.values()]
            rec = [i.recovery_s.get(lever, 0.0) for i in fits.values()]
        out[lever] = (_p25(cold), _p25(rec))
    out[CSBT_KEY] = (_p25([i.csbt_s for i in fits.values()]), 0.0)
    return out


def _p25(values: list[float]) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=4, method="inclusive")[0]


def to_p25_change(inputs: ModelInputs, lever: str, p25: tuple[float, float]) -> Change | None:
    """The change that brings a lever down to the fleet's p25 (None when already at or below)."""
    cold_p, rec_p = p25
    if lever == "shutdown":
        if inputs.final_shutdown_s <= cold_p:
            return None
        return Change(final_shutdown_s=cold_p)
    cold = inputs.cold_start_s.get(lever, 0.0)
    rec = inputs.recovery_s.get(lever, 0.0)
    if cold <= cold_p and rec <= rec_p:
        return None
    return Change(
        set_cold_s={lever: min(cold, cold_p)} if lever in COLD_PARTS else {},
        set_recovery_s={lever: min(rec, rec_p)},
    )


def standard_what_ifs(
    inputs: ModelInputs,
    p25: Mapping[str, tuple[float, float]],
    *,
    staging_fraction: float = DEFAULT_STAGING_FRACTION,
) -> list[WhatIf]:
    """The what-ifs every model gets: levers to the fleet p25, compile cache, tau*, async
    checkpointing, failures halved (each kind, and all), and the job on twice the GPUs."""
    out: list[WhatIf] = []
    for lever in P25_LEVERS:
        if lever not in p25:
            continue
        change = to_p25_change(inputs, lever, p25[lever])
        if change is not None:
            label = LEVER_LABELS.get(lever) or lever.replace("_", " ").capitalize()
            out.append(
                WhatIf(f"{lever}_to_fleet_p25", f"{label} to the fleet's p25", lever, change)
            )
    # A model whose compile (or blocking) is already at the fleet's p25 most likely has the
    # cache (or async saves) already: cutting it again would count the same gain twice.
    compile_p25 = p25.get("pt2_compile", (0.0, 0.0))[0]
    if inputs.cold_start_s.get("pt2_compile", 0.0) > compile_p25:
        out.append(
            WhatIf(
                "pt2_compile_cache",
                f"PT2 compile cache everywhere: compile -{COMPILE_CACHE_CUT:.0%}",
                "pt2_compile",
                Change(scale={"pt2_compile": 1.0 - COMPILE_CACHE_CUT}),
            )
        )
    tau = optimal_interval_s(inputs)
    if tau is not None:
        out.append(
            WhatIf(
                "checkpoint_interval_optimal",
                f"checkpoint interval to tau* = {tau / 60:.1f} min",
                "checkpoint",
                Change(interval_s=tau),
            )
        )
    if inputs.csbt_s > p25.get(CSBT_KEY, (0.0, 0.0))[0]:
        out.append(
            WhatIf(
                "async_checkpointing",
                f"async checkpointing: blocking cut to the staging copy ({staging_fraction:.0%})",
                "checkpoint",
                Change(csbt_scale=staging_fraction),
            )
        )
    for kind, rate in sorted(inputs.failure_rate_per_gpu_h.items()):
        if rate > 0 and kind not in NOT_A_LEVER_KINDS:
            out.append(
                WhatIf(
                    f"{kind}_failures_halved",
                    f"{kind} failures halved",
                    kind,
                    Change(failure_scale={kind: 0.5}),
                )
            )
    if inputs.failures_per_job > 0:
        out.append(
            WhatIf(
                "failures_halved",
                "failure rate halved (every kind)",
                "failures",
                Change(failure_scale={"*": 0.5}),
                ranked=False,
            )
        )
    out.append(
        WhatIf(
            "gpus_doubled",
            f"the same work on {inputs.gpus * 2} GPUs (failures scale per GPU)",
            "gpus",
            Change(gpus=inputs.gpus * 2),
            ranked=False,
        )
    )
    return out


def owner_of_lever(lever: str, owner_of: OwnerOf) -> str:
    """The team that owns a lever, from the owners mapping."""
    if lever in ("failures", "gpus"):
        return SEVERAL
    key = LEVER_OWNER_KEY.get(lever)
    return owner_of(*key) if key else "unowned"


def evaluate(inputs: ModelInputs, item: WhatIf, owner_of: OwnerOf) -> WhatIfOutcome:
    """Predict one what-if on one model."""
    r = what_if(inputs, item.change)
    return WhatIfOutcome(
        id=item.id,
        title=item.title,
        lever=item.lever,
        owner=owner_of_lever(item.lever, owner_of),
        ranked=item.ranked,
        ett_pct_before=r.before.ett_pct,
        ett_pct_after=r.after.ett_pct,
        gpu_h_per_day_freed=r.gpu_h_per_day_freed,
        tts_saving_s=r.tts_saving_s,
        cascade_saving_s=r.cascade_saving_s,
        change=item.change,
    )


@dataclass
class Opportunity:
    """One what-if summed over the fleet: GPU-hours a day freed, owner, contributing models."""

    id: str
    title: str
    lever: str
    owner: str
    gpu_h_per_day_freed: float = 0.0
    models: list[tuple[str, float]] = field(default_factory=list)


def rank(outcomes: Mapping[str, list[WhatIfOutcome]], top: int | None = None) -> list[Opportunity]:
    """The fleet's opportunities by GPU-hours a day freed (ranked what-ifs with a gain only)."""
    groups: dict[str, Opportunity] = {}
    for model, items in outcomes.items():
        for o in items:
            if not o.ranked or o.gpu_h_per_day_freed <= 0:
                continue
            # The title of a per-model what-if may carry the model's own value (tau*): group by id.
            opp = groups.get(o.id)
            if opp is None:
                title = (
                    "checkpoint interval to each model's tau*"
                    if o.id.startswith("checkpoint_interval")
                    else o.title
                )
                opp = groups[o.id] = Opportunity(o.id, title, o.lever, o.owner)
            opp.gpu_h_per_day_freed += o.gpu_h_per_day_freed
            opp.models.append((model, o.gpu_h_per_day_freed))
    ranked = sorted(groups.values(), key=lambda g: g.gpu_h_per_day_freed, reverse=True)
    for g in ranked:
        g.models.sort(key=lambda m: m[1], reverse=True)
    return ranked[:top] if top else ranked


def by_owner(opportunities: list[Opportunity]) -> dict[str, float]:
    """GPU-hours a day freed per owning team over a ranking (alternatives overlap: an upper sum)."""
    out: dict[str, float] = defaultdict(float)
    for o in opportunities:
        out[o.owner] += o.gpu_h_per_day_freed
    return dict(sorted(out.items(), key=lambda kv: kv[1], reverse=True))
