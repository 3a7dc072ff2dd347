"""SLURM's view of a job turned into wire-protocol events (pure: no I/O, no clock).

Conventions (see docs/SLURM.md). The comment is the job owner's free text, so nothing that
counts or charges comes from it unchecked (`TrustPolicy`):
- the ETT job id is `slurm-{cluster}-{job_id}` (a template; the TaskProlog exports the same id);
- the model comes from the job's comment, `--comment=ett-model=<name>`, else the job name;
- the GPU count from SLURM's allocation (`gres/gpu` of the allocated TRES), else the job's GPU
  request (`--gpus`, `--gres=gpu:n`, `--gpus-per-node`, `--gpus-per-task`), else `ett-gpus=<n>`
  of the comment if it is at most `max_gpus_per_node` per node, else 1 (with a warning);
- the owner label from the site's mapping of the job's account or partition, else an
  `ett-owner=` (or `ett-team=`) of the comment that the site's allow-list names, else none;
- any other `ett-<key>=<value>` token of the comment becomes the label `<key>`, at most
  MAX_COMMENT_LABELS of them, bounded in size, never a label the hooks set themselves.
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

from trainer_agent import causes
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
# SLURM state -> the failure's cause (docs/ACCOUNTING.md "Failure causes"); FAILED's comes
# from its exit code (end_cause).
END_CAUSES: dict[str, str] = {
    "CANCELLED": "user_cancel",
    "FAILED": "nonzero_exit",
    "OUT_OF_MEMORY": "host_oom",
    "TIMEOUT": "time_limit",
    "DEADLINE": "time_limit",
    "NODE_FAIL": "node_failure",
    "BOOT_FAIL": "node_failure",
    "PREEMPTED": "preemption",
}
REQUEUED_END = ("preemption", "preempted", "failed")
UNKNOWN_END = ("unknown", "failure", "failed")
# squeue job_state values of a job that will run again (or runs already) after a requeue.
ALIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "REQUEUED", "SUSPENDED"})

_TOKEN_SPLIT = re.compile(r"[\s,;]+")
# One node's entry of squeue's gres_detail: `gpu:2(IDX:0-1)` or `gpu:a100:2(IDX:0,1)`.
_GRES_DETAIL = re.compile(r"^gpu(?::[^:(]+)?:(\d+)(?:\(|$)")
# Labels the hooks set from SLURM's own record (or the owner mapping); a comment never sets them.
RESERVED_LABELS = frozenset(
    {"owner", "team", "tier", "scheduler", "cluster", "partition", "account", "slurm_job_id"}
)
MAX_COMMENT_LABELS = 16
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
MAX_LABEL_VALUE = 256
MAX_MODEL = 256
DEFAULT_MAX_GPUS_PER_NODE = 8


@dataclass(frozen=True)
class TrustPolicy:
    """What the site trusts: who owns a job (by account or partition, or an allow-list of the
    owners a comment may name) and how many GPUs a comment may claim per node."""

    owner_by_account: dict[str, str] = field(default_factory=dict)
    owner_by_partition: dict[str, str] = field(default_factory=dict)
    # Owners a job's comment may name; "*" lets the comment name any (not recommended).
    allowed_owners: frozenset[str] = frozenset()
    max_gpus_per_node: int = DEFAULT_MAX_GPUS_PER_NODE

    @classmethod
    def parse(
        cls, owner_map: str = "", allowed: str = "", max_gpus_per_node: int = 0
    ) -> TrustPolicy:
        """From `account:<name>=<team>,partition:<name>=<team>` and `team1,team2` (or `*`)."""
        by_account: dict[str, str] = {}
        by_partition: dict[str, str] = {}
        for entry in filter(None, (e.strip() for e in re.split(r"[\s,;]+", owner_map or ""))):
            where, _, rest = entry.partition(":")
            name, _, team = rest.partition("=")
            if where not in ("account", "partition") or not name or not team:
                raise ValueError(
                    f"owner map entry {entry!r}: write account:<name>=<team> or "
                    "partition:<name>=<team>"
                )
            (by_account if where == "account" else by_partition)[name] = team
        owners = frozenset(filter(None, (o.strip() for o in re.split(r"[\s,;]+", allowed or ""))))
        return cls(
            owner_by_account=by_account,
            owner_by_partition=by_partition,
            allowed_owners=owners,
            max_gpus_per_node=max_gpus_per_node or DEFAULT_MAX_GPUS_PER_NODE,
        )

    def owner(self, job: Mapping[str, Any], claimed: str | None) -> tuple[str | None, str | None]:
        """The job's owner label and, when the comment's claim was not taken, why."""
        account, partition = str(job.get("account") or ""), str(job.get("partition") or "")
        mapped = self.owner_by_account.get(account) or self.owner_by_partition.get(partition)
        if mapped:
            if claimed and claimed != mapped:
                return mapped, (
                    f"ett-owner={claimed!r} ignored: account {account!r} / partition "
                    f"{partition!r} belongs to {mapped!r} (ETT_SLURM_OWNER_MAP)"
                )
            return mapped, None
        if not claimed:
            return None, None
        if "*" in self.allowed_owners or claimed in self.allowed_owners:
            return claimed, None
        return None, (
            f"ett-owner={claimed!r} ignored: not an owner the site allows a comment to name "
            "(ETT_SLURM_ALLOWED_OWNERS), and account and partition map to no owner "
            "(ETT_SLURM_OWNER_MAP)"
        )


DEFAULT_POLICY = TrustPolicy()
_GPU_TRES = re.compile(r"(?:^|,)(?:gres[:/])?gpu(:[^:=,]+)?[:=](\d+)(?=,|$)")


@dataclass(frozen=True)
class JobMeta:
    """What job_submitted says about a SLURM job, and what had to be guessed."""

    model: str
    gpus: int
    labels: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    # Where the GPU count came from: allocation, request, comment or default.
    gpus_from: str = "default"


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
    """GPUs SLURM allocated to a job, else those it requested (squeue --json fields), or None
    when it asked for none."""
    alloc = allocated_gpus(job)
    if alloc:
        return alloc
    return requested_gpus(job)


def allocated_gpus(job: Mapping[str, Any]) -> int | None:
    """GPUs of SLURM's allocation: `gres/gpu` of the allocated TRES (a site that accounts for
    GPUs, AccountingStorageTRES=gres/gpu), else the per-node `gres_detail` of a running job."""
    counted = _gpu_count(job.get("tres_alloc_str"))
    if counted:
        return counted
    total = 0
    for entry in job.get("gres_detail") or []:
        match = _GRES_DETAIL.match(str(entry))
        if match:
            total += int(match.group(1))
    return total or None


def requested_gpus(job: Mapping[str, Any]) -> int | None:
    """GPUs the job asked SLURM for (--gpus, --gres=gpu:n, --gpus-per-node, --gpus-per-task)."""
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


def job_meta(job: Mapping[str, Any], policy: TrustPolicy = DEFAULT_POLICY) -> JobMeta:
    """Model, GPU count and labels of a job from SLURM's record (allocation, account,
    partition), the site's policy and, within bounds, the job's comment."""
    tokens = parse_comment(job.get("comment"))
    warnings: list[str] = []
    model = _bounded_text(tokens.pop("model", ""), MAX_MODEL)
    if not model:
        model = _bounded_text(str(job.get("name") or ""), MAX_MODEL) or "unknown"
        warnings.append(
            f"no ett-model=<name> in the job's comment; using the job name {model!r} as the model"
        )
    gpus, gpus_from = _gpus(job, tokens.pop("gpus", ""), policy, warnings)
    labels = {"scheduler": "slurm"}
    for key in ("cluster", "partition", "account"):
        if job.get(key):
            labels[key] = _bounded_text(str(job[key]), MAX_LABEL_VALUE)
    if job.get("job_id") is not None:
        labels["slurm_job_id"] = str(job["job_id"])
    claimed = tokens.pop("owner", None) or tokens.pop("team", None)
    tokens.pop("team", None)
    owner, why = policy.owner(job, claimed)
    if owner:
        labels["owner"] = owner
    if why:
        warnings.append(why)
    kept = 0
    for key, value in tokens.items():
        if key in RESERVED_LABELS:
            warnings.append(f"ett-{key}= ignored: the hooks set {key!r} from SLURM's record")
        elif not _LABEL_KEY.match(key) or not _bounded_text(value, MAX_LABEL_VALUE):
            warnings.append(
                f"ett-{key[:64]}= ignored: a label key is a-z, 0-9, _.- (at most 64) and its "
                f"value printable text of at most {MAX_LABEL_VALUE} characters"
            )
        elif kept >= MAX_COMMENT_LABELS:
            warnings.append(f"ett-{key}= ignored: at most {MAX_COMMENT_LABELS} labels a comment")
        else:
            labels[key] = value
            kept += 1
    return JobMeta(model=model, gpus=gpus, labels=labels, warnings=warnings, gpus_from=gpus_from)


def _gpus(
    job: Mapping[str, Any], claim: str, policy: TrustPolicy, warnings: list[str]
) -> tuple[int, str]:
    """SLURM's allocated or requested GPUs; the comment's only without them, and bounded."""
    allocated = allocated_gpus(job)
    own, source = (allocated, "allocation") if allocated else (requested_gpus(job), "request")
    claimed = _int(claim) if claim else None
    if claim and not claimed:
        warnings.append(f"ett-gpus={claim[:32]!r} is not a positive integer; ignored")
    if own:
        if claimed and claimed != own:
            warnings.append(
                f"ett-gpus={claimed} ignored: SLURM gave the job {own} GPUs (its allocated "
                "or requested gres/gpu)"
            )
        return own, source
    if claimed:
        nodes = _int(job.get("node_count")) or 1
        bound = policy.max_gpus_per_node * nodes
        if claimed <= bound:
            return claimed, "comment"
        warnings.append(
            f"ett-gpus={claimed} ignored: over {policy.max_gpus_per_node} per node for "
            f"{nodes} node(s) (ETT_SLURM_MAX_GPUS_PER_NODE); counting 1 GPU"
        )
        return 1, "default"
    warnings.append(
        "the job requested no GPUs (no --gpus/--gres=gpu) and its comment has no "
        "ett-gpus=<n>; counting 1 GPU"
    )
    return 1, "default"


def _bounded_text(value: str, limit: int) -> str:
    """The value when it is printable text within `limit` characters, else ''."""
    if not value or len(value) > limit or not value.isprintable():
        return ""
    return value


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


def started_event(
    ett_id: str,
    attempt: int,
    start_time: float,
    gpus: int,
    host: str,
    hosts: list[str] | None = None,
) -> ev.Event:
    """attempt_started at SLURM's StartTime of this attempt, with its allocation's hosts
    (SLURM_JOB_NODELIST expanded; the first MAX_HOSTS sorted, and hosts_total past them)."""
    names, total = ev.host_list(hosts or [])
    event = ev.make_event(
        ett_id,
        "attempt_started",
        attempt,
        ts=float(start_time),
        gpus=gpus,
        host=host[:256] or None,
        hosts=names or None,
        hosts_total=total,
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


def end_cause(state: str, requeued: bool, exit_code: str = "") -> str:
    """The cause of a SLURM end: its state's, a requeue's, or for FAILED its exit code's
    (`code:signal`, SLURM's ExitCode): a signal's cause, else a nonzero exit's."""
    state = state.upper()
    if requeued and (END_STATES.get(state, UNKNOWN_END)[0] is None or state in REQUEUE_STATES):
        return "requeue"  # the same test as end_outcome's
    if state == "FAILED":
        code, _, sig = (exit_code or "").partition(":")
        signum = _int(sig)
        if signum:
            return causes.from_signal(signum)
        return causes.from_exit(_int(code) or 1)
    return END_CAUSES.get(state, "unknown")


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
            cause=end_cause(state, requeued, exit_code),
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
