"""SLURM's view of a job turned into wire-protocol events (pure: no I/O, no clock).

Conventions (see docs/SLURM.md):
- the ETT job id is `slurm-{cluster}-{job_id}` (a template; the TaskProlog exports the same id);
- the model comes from the job's comment, `--comment=ett-model=<name>`, else the job name;
- the GPU count from `ett-gpus=<n>` in the comment, else the job's GPU request
  (`--gpus`, `--gres=gpu:n`, `--gpus-per-node`, `--gpus-per-task`), else 1 (with a warning);
- any other `ett-<key>=<value>` token of the comment becomes the label `<key>`.
Attempt numbers: allocation k (SLURM's restart count) is attempt k x 1000, the agent's
ALLOCATION_STRIDE; torchrun's in-place restarts inside it take the numbers after it (the
launcher numbers them), so both sides number every attempt alike. The end of an allocation is
sent with `scope: "allocation"`: the ETT engine gives it to the allocation's latest attempt.
Event ids are fixed per (job, attempt, kind), so a hook that runs twice stores nothing twice.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainer_agent import events as ev
from trainer_agent.events import ALLOCATION_STRIDE

DEFAULT_JOB_ID_TEMPLATE = "slurm-{cluster}-{job_id}"
COMMENT_PREFIX = "ett-"

# JobState values of a jobcomp record, grouped by what they mean for the attempt that ended.
REQUEUE_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
# SLURM state -> (failure kind or None, attempt_ended reason, job status when final); the
# statuses and kinds agree with the server's table (docs/ACCOUNTING.md, "How a job ended").
END_STATES: dict[str, tuple[str | None, str, str]] = {
    "COMPLETED": (None, "completed", "succeeded"),
    "CANCELLED": (None, "cancelled", "cancelled"),
    "FAILED": ("app_error", "failure", "failed"),
    "OUT_OF_MEMORY": ("app_error", "failure", "out_of_memory"),
    "TIMEOUT": ("app_error", "failure", "timeout"),
    "DEADLINE": ("app_error", "failure", "timeout"),
    "NODE_FAIL": ("infra", "failure", "node_failure"),
    "BOOT_FAIL": ("infra", "failure", "node_failure"),
    "PREEMPTED": ("preemption", "preempted", "preempted"),
}
REQUEUED_END = ("preemption", "preempted", "failed")
UNKNOWN_END = ("unknown", "failure", "failed")
# squeue job_state values of a job that will run again (or runs already) after a requeue.
ALIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "REQUEUED", "SUSPENDED"})

_TOKEN_SPLIT = re.compile(r"[\s,;]+")
_GPU_TRES = re.compile(r"(?:^|,)(?:gres[:/])?gpu(:[^:=,]+)?[:=](\d+)(?=,|$)")


@dataclass(frozen=True)
class JobMeta:
    """What job_submitted says about a SLURM job, and what had to be guessed."""

    model: str
    gpus: int
    labels: dict[str, str]
    warnings: list[str] = field(default_factory=list)


def ett_job_id(cluster: str, job_id: str, template: str = DEFAULT_JOB_ID_TEMPLATE) -> str:
    """The ETT job id of a SLURM job: the same in the hooks and in the job's tasks."""
    return template.format(cluster=cluster or "slurm", job_id=job_id)


def parse_comment(comment: str | None) -> dict[str, str]:
    """The `ett-<key>=<value>` tokens of a job comment (separated by spaces, commas or `;`)."""
    found: dict[str, str] = {}
    for token in _TOKEN_SPLIT.split(comment or ""):
        if not token.lower().startswith(COMMENT_PREFIX) or "=" not in token:
            continue
        key, value = token[len(COMMENT_PREFIX) :].split("=", 1)
        if key and value:
            found[key.lower()] = value
    return found


def gpus_from_tres(job: Mapping[str, Any]) -> int | None:
    """GPUs requested by a job (squeue --json fields), or None when it asked for none."""
    alloc = _gpu_count(job.get("tres_alloc_str"))
    if alloc:
        return alloc
    per_job = _gpu_count(job.get("tres_per_job"))
    if per_job:
        return per_job
    nodes = _int(job.get("node_count")) or 1
    per_node = _gpu_count(job.get("tres_per_node"))
    if per_node:
        return per_node * nodes
    tasks = _int(job.get("tasks")) or 1
    per_task = _gpu_count(job.get("tres_per_task"))
    if per_task:
        return per_task * tasks
    return None


def job_meta(job: Mapping[str, Any]) -> JobMeta:
    """Model, GPU count and labels of a job from its comment, name, TRES and partition."""
    tokens = parse_comment(job.get("comment"))
    warnings: list[str] = []
    model = tokens.pop("model", "")
    if not model:
        model = str(job.get("name") or "") or "unknown"
        warnings.append(
            f"no ett-model=<name> in the job's comment; using the job name {model!r} as the model"
        )
    gpus_token = tokens.pop("gpus", "")
    gpus = _int(gpus_token) if gpus_token else None
    if gpus_token and not gpus:
        warnings.append(f"ett-gpus={gpus_token!r} is not a positive integer; ignored")
    if not gpus:
        gpus = gpus_from_tres(job)
    if not gpus:
        gpus = 1
        warnings.append(
            "the job requested no GPUs (no --gpus/--gres=gpu) and its comment has no "
            "ett-gpus=<n>; counting 1 GPU"
        )
    labels = {"scheduler": "slurm"}
    for key, source in (("cluster", "cluster"), ("partition", "partition")):
        if job.get(source):
            labels[key] = str(job[source])
    if job.get("job_id") is not None:
        labels["slurm_job_id"] = str(job["job_id"])
    labels.update(tokens)
    return JobMeta(model=model, gpus=gpus, labels=labels, warnings=warnings)


def event_id(ett_id: str, what: str) -> str:
    """A fixed event id for one fact of one job, unique across jobs (at most 64 characters)."""
    # Unique across jobs too: a server that dedupes by event id alone must not merge two jobs.
    base = (
        ett_id if len(ett_id) <= 40 else "slurm-" + hashlib.sha256(ett_id.encode()).hexdigest()[:20]
    )
    return f"{base}:{what}"[:64]


def allocation_attempt(restarts: int) -> int:
    """The attempt number of SLURM's allocation `restarts` (its restart count): x 1000."""
    return int(restarts) * ALLOCATION_STRIDE


def submitted_event(ett_id: str, submit_time: float, meta: JobMeta) -> ev.Event:
    """job_submitted at SLURM's SubmitTime (of the first submission, before any requeue)."""
    event = ev.job_submitted(ett_id, float(submit_time), meta.model, meta.gpus, meta.labels)
    event["event_id"] = event_id(ett_id, "submitted")
    return event


def started_event(ett_id: str, attempt: int, start_time: float, gpus: int, host: str) -> ev.Event:
    """attempt_started at SLURM's StartTime of this attempt."""
    event = ev.make_event(
        ett_id, "attempt_started", attempt, ts=float(start_time), gpus=gpus, host=host or None
    )
    event["event_id"] = event_id(ett_id, f"a{attempt}-started")
    return event


def end_outcome(state: str, requeued: bool) -> tuple[str | None, str, str]:
    """(failure kind or None, attempt_ended reason, final job status) for a SLURM end state."""
    outcome = END_STATES.get(state.upper(), UNKNOWN_END)
    if requeued and (outcome[0] is None or state.upper() in REQUEUE_STATES):
        # requeued by `scontrol requeue` or a preemption: the attempt was interrupted
        return REQUEUED_END
    if not requeued and state.upper() in REQUEUE_STATES:
        return UNKNOWN_END
    return outcome


def end_events(
    ett_id: str,
    attempt: int,
    state: str,
    end_time: float,
    *,
    requeued: bool,
    exit_code: str = "",
) -> list[ev.Event]:
    """failure (if any) and attempt_ended of the allocation starting with `attempt` (both
    allocation-scoped: they end its latest in-place restart); job_ended too when it is the last."""
    kind, reason, status = end_outcome(state, requeued)
    out: list[ev.Event] = []
    ts = float(end_time)
    if kind is not None:
        failure = ev.make_event(
            ett_id,
            "failure",
            attempt,
            ts=ts,
            kind=kind,
            message=_failure_message(state, requeued, exit_code),
            scope="allocation",
        )
        failure["event_id"] = event_id(ett_id, f"a{attempt}-failure")
        out.append(failure)
    ended = ev.make_event(
        ett_id, "attempt_ended", attempt, ts=ts, reason=reason, scope="allocation"
    )
    ended["event_id"] = event_id(ett_id, f"a{attempt}-ended")
    out.append(ended)
    if not requeued:
        job_ended = ev.job_ended(ett_id, ts, status)
        job_ended["event_id"] = event_id(ett_id, "job-ended")
        out.append(job_ended)
    return out


def _failure_message(state: str, requeued: bool, exit_code: str) -> str:
    text = f"SLURM job state {state}"
    if exit_code and exit_code != "0:0":
        text += f", exit code {exit_code}"
    if requeued:
        text += "; requeued (scontrol requeue, preemption or node failure)"
    return text


def _gpu_count(tres: Any) -> int | None:
    if not tres or not isinstance(tres, str):
        return None
    untyped: list[int] = []
    typed: list[int] = []
    for match in _GPU_TRES.finditer(tres):
        (typed if match.group(1) else untyped).append(int(match.group(2)))
    # `gres/gpu=4,gres/gpu:a100=4` counts the same four GPUs twice: the untyped total wins
    total = max(untyped) if untyped else sum(typed)
    return total or None


def _int(value: Any) -> int | None:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None
