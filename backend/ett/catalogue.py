"""The phase catalogue of SPEC section 4: phase -> Level-2 component -> default owner."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# Level-2 components, in the order the REST answer and the views list them.
COMPONENTS: tuple[str, ...] = (
    "scheduling",
    "hardware_setup",
    "trainer_init",
    "pt2_compile",
    "effective_training",
    "wasted_training",
    "shutdown",
    "unattributed",
)
# What a cold start (and each recovery) pays before training: the components listed before it.
STARTUP_COMPONENTS: tuple[str, ...] = COMPONENTS[: COMPONENTS.index("effective_training")]
# Lost time: every component but effective training.
LOST_COMPONENTS: tuple[str, ...] = tuple(c for c in COMPONENTS if c != "effective_training")

# How the REST answers' OpenAPI describes a per-component field.
COMPONENTS_HELP = "per ETT component (scheduling, hardware_setup, trainer_init, ...)"

# Components a phase span (catalogue or configured custom phase) may land in.
PHASE_COMPONENTS: frozenset[str] = frozenset(
    {"scheduling", "hardware_setup", "trainer_init", "pt2_compile", "shutdown", "unattributed"}
)

# The three kinds of wasted training (the `phase` of a wasted_training interval).
WASTE_KINDS: tuple[str, ...] = ("replay", "checkpoint_blocking", "stalled")

FAILURE_KINDS: tuple[str, ...] = ("preemption", "app_error", "infra", "induced", "unknown")

# Failure domains (docs/ACCOUNTING.md "Failure causes"): whose fault a failure is.
FAILURE_DOMAINS: tuple[str, ...] = ("workload", "infrastructure", "scheduler", "unknown")


@dataclass(frozen=True, slots=True)
class Cause:
    """One failure cause: its domain, whether it was planned, and the kind it is counted as."""

    cause: str
    domain: str
    planned: bool
    kind: str
    meaning: str
    # A sign another failure may explain (a SIGTERM of unknown sender): it yields to any other
    # failure of its attempt when the initiating one is chosen (docs/ACCOUNTING.md).
    symptom: bool = False


# The taxonomy, in the order the REST answers and the job page list causes. The agent keeps a
# copy (trainer_agent/causes.py; tests/trainer_agent/test_agent_constants.py checks they agree).
CAUSES: dict[str, Cause] = {
    c.cause: c
    for c in (
        Cause("preemption", "scheduler", True, "preemption", "preempted for other work"),
        Cause(
            "requeue", "scheduler", True, "preemption", "requeued by the scheduler or an operator"
        ),
        Cause(
            "sigterm",
            "scheduler",
            True,
            "preemption",
            "SIGTERM from outside, sender unknown: a preemption unless the scheduler says otherwise",
            symptom=True,
        ),
        Cause("maintenance", "infrastructure", True, "infra", "stopped for planned maintenance"),
        Cause("user_cancel", "workload", True, "induced", "cancelled by a person (scancel)"),
        Cause("injected", "workload", True, "induced", "a failure injected on purpose (a drill)"),
        Cause("exception", "workload", False, "app_error", "an uncaught exception of the program"),
        Cause("nonzero_exit", "workload", False, "app_error", "the program exited with a code"),
        Cause(
            "crash_signal",
            "workload",
            False,
            "app_error",
            "killed by a crash signal (SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL)",
        ),
        Cause("signal", "workload", False, "app_error", "killed by another signal (SIGKILL, ...)"),
        Cause("host_oom", "workload", False, "app_error", "out of host memory (MemoryError, OOM)"),
        Cause("gpu_oom", "workload", False, "app_error", "out of GPU memory (CUDA out of memory)"),
        Cause("dataloader", "workload", False, "app_error", "a data-loader worker died"),
        Cause("cuda_error", "workload", False, "app_error", "a CUDA error of the program"),
        Cause("hang", "workload", False, "app_error", "stopped making progress (a watchdog)"),
        Cause("time_limit", "workload", False, "app_error", "killed at the job's time limit"),
        Cause(
            "gpu_hardware",
            "infrastructure",
            False,
            "infra",
            "a GPU hardware fault (ECC, fallen off the bus, NVLink: hardware Xid numbers)",
        ),
        Cause(
            "nccl_timeout",
            "infrastructure",
            False,
            "infra",
            "an NCCL watchdog or collective timeout",
        ),
        Cause("nccl_error", "infrastructure", False, "infra", "an NCCL or network error"),
        Cause("node_failure", "infrastructure", False, "infra", "a node of the allocation failed"),
        Cause("unknown", "unknown", False, "unknown", "no cause known"),
    )
}
FAILURE_CAUSES: tuple[str, ...] = tuple(CAUSES)
# A failure that names no cause (events from before causes): its kind's domain and plan.
_KIND_DOMAIN = {
    "preemption": "scheduler",
    "app_error": "workload",
    "infra": "infrastructure",
    "induced": "workload",
    "unknown": "unknown",
}
_KIND_CAUSE = {"preemption": "preemption", "induced": "injected"}
PLANNED_KINDS: frozenset[str] = frozenset({"preemption", "induced"})


def failure_cause(kind: str, cause: str | None) -> str:
    """The cause a failure counts under: its own when known, else its kind's (else unknown)."""
    if cause is not None and cause in CAUSES:
        return cause
    return _KIND_CAUSE.get(kind, "unknown")


def failure_domain(kind: str, cause: str | None) -> str:
    """The failure's domain (workload, infrastructure, scheduler or unknown): its cause's, else
    its kind's."""
    row = CAUSES.get(cause) if cause is not None else None
    if row is not None and row.cause != "unknown":
        return row.domain
    return _KIND_DOMAIN.get(kind, "unknown")


def is_planned(kind: str, cause: str | None = None) -> bool:
    """Whether a failure was planned (preemption, maintenance, user cancel, a drill): its
    cause's answer when the cause is known, else its kind's (preemption and induced are)."""
    row = CAUSES.get(cause) if cause is not None else None
    if row is not None and row.cause != "unknown":
        return row.planned
    return kind in PLANNED_KINDS


@dataclass(frozen=True, slots=True)
class JobEnd:
    """How one `job_ended.status` is read: the job's status and the failure it implies.

    `failure_kind` is the kind of the failure a job ending so has in its last attempt when that
    attempt reported none (None: the status is no failure); `inferred` says whether that kind
    is a guess (plain `failed` names no cause). `cause` is that failure's cause (CAUSES; its
    domain and plan follow from it), or for a status that is no failure, why the job stopped.
    """

    status: str
    failure_kind: str | None
    inferred: bool
    meaning: str
    cause: str | None = None


# Every status a job_ended may carry (the wire protocol's list, docs/PROTOCOL.md), in order.
JOB_ENDS: dict[str, JobEnd] = {
    e.status: e
    for e in (
        JobEnd("succeeded", None, False, "the job finished its work"),
        JobEnd("failed", "unknown", True, "the job failed; the emitter names no cause", "unknown"),
        JobEnd(
            "cancelled",
            None,
            False,
            "stopped on purpose (scancel, Ctrl-C): not a failure",
            "user_cancel",
        ),
        JobEnd(
            "preempted",
            "preemption",
            False,
            "preempted by the scheduler for other work, and not requeued",
            "preemption",
        ),
        JobEnd(
            "timeout",
            "app_error",
            False,
            "killed at the time limit the job asked for (SLURM TIMEOUT, DEADLINE)",
            "time_limit",
        ),
        JobEnd(
            "node_failure",
            "infra",
            False,
            "a node of its allocation failed (SLURM NODE_FAIL, BOOT_FAIL)",
            "node_failure",
        ),
        JobEnd(
            "out_of_memory",
            "app_error",
            False,
            "killed for using more memory than it was given (SLURM OUT_OF_MEMORY)",
            "host_oom",
        ),
    )
}
JOB_STATUSES: tuple[str, ...] = tuple(JOB_ENDS)

# Attempt numbers as the trainer agent and the SLURM hooks give them (docs/AGENT.md "Attempt
# numbers"): allocation x ALLOCATION_STRIDE + in-place restart within it. The agent keeps a copy
# (trainer_agent/events.py; tests/trainer_agent/test_agent_constants.py checks they agree).
ALLOCATION_STRIDE = 1000

# The most hosts one attempt names (attempt_started.hosts; docs/PROTOCOL.md "Hosts"): a sender
# with more sends the first MAX_HOSTS in sorted order and hosts_total; the engine keeps at most
# this many per attempt. The agent keeps a copy (trainer_agent/events.py).
MAX_HOSTS = 1024


def attempt_label(attempt: object, in_place: bool = False) -> str | None:
    """An attempt number in words under that scheme ("requeue 1, in-place restart 1" for
    1001), or None when it needs none: an attempt of the first allocation that is not an
    in-place restart (0, or another emitter's own 1, 2, ...)."""
    if type(attempt) is not int or attempt < 0:
        return None
    requeues, restart = divmod(attempt, ALLOCATION_STRIDE)
    if requeues == 0 and not (in_place and restart):
        return None
    parts = [f"requeue {requeues}"] if requeues else []
    if restart:
        parts.append(f"in-place restart {restart}")
    return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class PhaseEntry:
    """One catalogue row: a phase, the component it lands in, and the team that owns it."""

    phase: str
    component: str
    owner: str


# Catalogue order also breaks ties in partition rule 3 (earlier row wins).
CATALOGUE: tuple[PhaseEntry, ...] = (
    PhaseEntry("scheduling", "scheduling", "scheduler"),
    PhaseEntry("hardware_setup", "hardware_setup", "cluster"),
    PhaseEntry("trainer_init", "trainer_init", "trainer"),
    # Process start to the agent's start: interpreter start-up and imports (torch, torchrec).
    PhaseEntry("trainer_init.process_start", "trainer_init", "trainer"),
    PhaseEntry("trainer_init.device_init", "trainer_init", "trainer"),
    PhaseEntry("trainer_init.process_group", "trainer_init", "trainer"),
    PhaseEntry("trainer_init.preprocessing", "trainer_init", "data"),
    PhaseEntry("trainer_init.train_module", "trainer_init", "trainer"),
    PhaseEntry("trainer_init.plugins", "trainer_init", "trainer"),
    PhaseEntry("trainer_init.pre_training_setup", "trainer_init", "trainer"),
    PhaseEntry("trainer_init.first_batch", "trainer_init", "data"),
    PhaseEntry("checkpoint_restore", "trainer_init", "checkpoint"),
    PhaseEntry("pt2_compile", "pt2_compile", "compiler"),
    PhaseEntry("shutdown", "shutdown", "trainer"),
    PhaseEntry("publish", "shutdown", "publishing"),
)

_BY_NAME: dict[str, PhaseEntry] = {e.phase: e for e in CATALOGUE}
_RANK: dict[str, int] = {e.phase: i for i, e in enumerate(CATALOGUE)}
# Families whose sub-stages (`<family>.<anything>`) inherit the family's row.
_FAMILIES: tuple[str, ...] = ("trainer_init", "pt2_compile")
CUSTOM_PREFIX = "custom."


@dataclass(frozen=True, slots=True)
class Resolution:
    """Where a phase name lands: its component, and whether the catalogue or config knew it."""

    component: str
    known: bool


def resolve_phase(phase: str, custom_phases: Mapping[str, str] | None = None) -> Resolution:
    """Map a phase name to its component; unknown or unmapped names land in unattributed."""
    entry = _BY_NAME.get(phase)
    if entry is not None:
        return Resolution(entry.component, True)
    for family in _FAMILIES:
        if phase.startswith(family + "."):
            return Resolution(_BY_NAME[family].component, True)
    if custom_phases:
        # The most specific configured ancestor wins: `custom.a.b` falls back to `custom.a`.
        name = phase
        while True:
            mapped = custom_phases.get(name)
            if mapped is not None:
                if mapped in PHASE_COMPONENTS:
                    return Resolution(mapped, True)
                return Resolution("unattributed", False)
            if "." not in name:
                break
            name = name.rsplit(".", 1)[0]
    return Resolution("unattributed", False)


def catalogue_rank(phase: str) -> int:
    """Position of a phase in the catalogue (sub-stages after their family); unknown last."""
    rank = _RANK.get(phase)
    if rank is not None:
        return rank
    for family in _FAMILIES:
        if phase.startswith(family + "."):
            return _RANK[family]
    return len(CATALOGUE)


def is_ancestor(ancestor: str, phase: str) -> bool:
    """True when `ancestor` is a strict name-ancestor of `phase` (`a` of `a.b`)."""
    return len(phase) > len(ancestor) and phase.startswith(ancestor) and phase[len(ancestor)] == "."
