"""The SLURM hooks: PrologSlurmctld (an attempt starts), jobcomp/script (it ended), TaskProlog.

Each hook reads SLURM's record of the job (`squeue --json`), writes the events to the agent's
on-disk spool first, then sends them with the agent's sender for at most a few seconds. While
the ETT server is down the events wait in the spool; the next hook of any job (or
`python -m trainer_agent.slurm flush`) sends them. A hook never fails a job: errors are logged.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer_agent import events as ev
from trainer_agent.sender import Sender
from trainer_agent.slurm import convert, hostlist
from trainer_agent.spool import Spool, job_spool_dir
from trainer_agent.transport import HttpTransport

log = logging.getLogger("trainer_agent.slurm")

DEFAULT_DIR = "/var/spool/ett-slurm"
STATE_MAX_AGE_S = 30 * 24 * 3600.0
# After a failed send, hooks only spool for this long before one tries the server again.
DOWN_RETRY_S = 30.0
# How a send ended (_send_spool).
SENT = "sent"
TOKEN_REFUSED = "token refused"
NOT_REACHED = "not reached"
_GPU_SOURCES = {
    "allocation": "SLURM's allocation",
    "request": "the job's request",
    "comment": "the comment (no gres/gpu)",
    "default": "no count anywhere (1)",
}


@dataclass
class Settings:
    """Where to send, where to keep the spool and the per-job state, how long a hook may wait."""

    endpoint: str = ""
    token: str | None = None
    token_file: str | None = None
    directory: Path = Path(DEFAULT_DIR)
    timeout_s: float = 3.0
    job_id_template: str = convert.DEFAULT_JOB_ID_TEMPLATE
    cluster: str = ""
    squeue: str = "squeue"
    # SLURM's host-list expander; "" is scontrol beside squeue (trainer_agent/slurm/hostlist.py).
    scontrol: str = ""
    spool_max_bytes: int = 64 * 1024 * 1024
    # What the site trusts (docs/SLURM.md "What a job's comment may say").
    owner_map: str = ""
    allowed_owners: str = ""
    max_gpus_per_node: int = convert.DEFAULT_MAX_GPUS_PER_NODE

    @property
    def scontrol_path(self) -> str:
        """scontrol: as set, else the one beside squeue (a cluster's own SLURM prefix)."""
        if self.scontrol:
            return self.scontrol
        squeue = Path(self.squeue)
        return str(squeue.with_name("scontrol")) if squeue.parent != Path(".") else "scontrol"

    @property
    def policy(self) -> convert.TrustPolicy:
        """The owner mapping, allow-list and GPU bound; a broken mapping maps nothing (logged)."""
        try:
            return convert.TrustPolicy.parse(
                self.owner_map, self.allowed_owners, self.max_gpus_per_node
            )
        except ValueError as err:
            log.error("ett-slurm: ETT_SLURM_OWNER_MAP: %s; no job gets an owner from it", err)
            return convert.TrustPolicy.parse("", self.allowed_owners, self.max_gpus_per_node)

    @property
    def spool_root(self) -> Path:
        """The agent spool root (one folder per ETT job inside)."""
        return self.directory / "spool"

    @property
    def down_marker(self) -> Path:
        """Touched when a hook could not reach the server; removed when one could."""
        return self.directory / "server-down"

    @property
    def state_dir(self) -> Path:
        """One small JSON file per running SLURM job: its attempts' starts, its job_submitted."""
        return self.directory / "state"


def settings_from_env(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from ETT_ENDPOINT, ETT_TOKEN or ETT_TOKEN_FILE, ETT_SLURM_DIR and friends."""
    env = os.environ if environ is None else environ
    token = env.get("ETT_TOKEN") or None
    token_file = env.get("ETT_TOKEN_FILE")
    if not token and token_file:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip() or None
        except OSError as err:
            log.error("ett-slurm: cannot read the token file %s: %s", token_file, err)
    return Settings(
        endpoint=env.get("ETT_ENDPOINT", ""),
        token=token,
        token_file=token_file or None,
        directory=Path(env.get("ETT_SLURM_DIR") or DEFAULT_DIR),
        timeout_s=_env_number(env, "ETT_SLURM_TIMEOUT_S", 3.0),
        job_id_template=env.get("ETT_SLURM_JOB_ID_TEMPLATE") or convert.DEFAULT_JOB_ID_TEMPLATE,
        cluster=env.get("ETT_SLURM_CLUSTER", ""),
        squeue=env.get("ETT_SLURM_SQUEUE") or "squeue",
        scontrol=env.get("ETT_SLURM_SCONTROL") or "",
        spool_max_bytes=int(_env_number(env, "ETT_SPOOL_MAX_BYTES", 64 * 1024 * 1024)),
        owner_map=env.get("ETT_SLURM_OWNER_MAP", ""),
        allowed_owners=env.get("ETT_SLURM_ALLOWED_OWNERS", ""),
        max_gpus_per_node=max(
            1,
            int(_env_number(env, "ETT_SLURM_MAX_GPUS_PER_NODE", convert.DEFAULT_MAX_GPUS_PER_NODE)),
        ),
    )


def _env_number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        log.error("ett-slurm: %s=%r is not a number; using %s", name, raw, default)
        return default


# ---- SLURM's record ---------------------------------------------------------------------------


def query_job(
    slurm_job_id: str, squeue: str = "squeue", timeout_s: float = 10.0
) -> dict[str, Any] | None:
    """The job's record from `squeue --json` (None when SLURM does not answer or forgot it)."""
    # SLURM 22.05 ignores --jobs with --json and lists every job: filter here.
    cmd = [squeue, "--json", "--states=all", f"--jobs={slurm_job_id}"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        log.error("ett-slurm: %s failed: %s", " ".join(cmd), err)
        return None
    if out.returncode != 0:
        log.error("ett-slurm: %s exited %d: %s", " ".join(cmd), out.returncode, out.stderr[-500:])
        return None
    try:
        jobs = json.loads(out.stdout).get("jobs") or []
    except ValueError as err:
        log.error("ett-slurm: %s printed no JSON: %s", " ".join(cmd), err)
        return None
    for job in jobs:
        if str(job.get("job_id")) == str(slurm_job_id):
            return dict(job)
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, dict):  # later SLURM versions: {"set": true, "number": 123}
        value = value.get("number") if value.get("set", True) else None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


# ---- per-job state (prolog -> jobcomp) -------------------------------------------------------


def _state_path(settings: Settings, slurm_job_id: str) -> Path:
    safe = "".join(c for c in slurm_job_id if c.isalnum() or c in "_-") or "_"
    return settings.state_dir / f"{safe}.json"


def load_state(settings: Settings, slurm_job_id: str) -> dict[str, Any]:
    """What the prolog wrote for this job (empty when nothing was)."""
    try:
        data = json.loads(_state_path(settings, slurm_job_id).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save_state(settings: Settings, slurm_job_id: str, state: dict[str, Any]) -> None:
    """Write the job's state atomically (temp file, then rename)."""
    path = _state_path(settings, slurm_job_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as err:
        log.error("ett-slurm: cannot write the job state %s: %s", path, err)


def forget_state(settings: Settings, slurm_job_id: str) -> None:
    """Drop the job's state (its last attempt ended) and any state older than 30 days."""
    with contextlib.suppress(OSError):
        _state_path(settings, slurm_job_id).unlink()
    now = time.time()
    with contextlib.suppress(OSError):
        for entry in os.scandir(settings.state_dir):
            with contextlib.suppress(OSError):
                if now - entry.stat().st_mtime > STATE_MAX_AGE_S:
                    os.unlink(entry.path)


# ---- the hooks ---------------------------------------------------------------------------------


def prolog_slurmctld(environ: Mapping[str, str], settings: Settings) -> list[ev.Event]:
    """PrologSlurmctld: job_submitted (first start only) and attempt_started; returns the events."""
    slurm_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or ""
    if not slurm_id:
        raise ValueError("SLURM_JOB_ID is not set: run this as SLURM's PrologSlurmctld")
    attempt = int(environ.get("SLURM_JOB_RESTART_COUNT") or environ.get("SLURM_RESTART_COUNT") or 0)
    job = query_job(slurm_id, settings.squeue) or {}
    if not job:
        log.warning(
            "ett-slurm: job %s not found by squeue; using the prolog's environment", slurm_id
        )
        job = {
            "job_id": slurm_id,
            "name": environ.get("SLURM_JOB_NAME", ""),
            "comment": environ.get("SLURM_JOB_COMMENT", ""),
            "partition": environ.get("SLURM_JOB_PARTITION", ""),
            "nodes": environ.get("SLURM_JOB_NODELIST", ""),
        }
    cluster = environ.get("SLURM_CLUSTER_NAME") or settings.cluster or str(job.get("cluster") or "")
    job.setdefault("cluster", cluster)
    # A first start begins afresh: a state file of the same id is from an older job (ids wrap).
    state = load_state(settings, slurm_id) if attempt > 0 else {}
    ett_id = state.get("ett_job_id") or convert.ett_job_id(
        cluster, slurm_id, settings.job_id_template
    )
    meta = convert.job_meta(job, settings.policy)
    for warning in meta.warnings:
        log.warning("ett-slurm: job %s: %s", slurm_id, warning)
    log.info(
        "ett-slurm: job %s attempt %d: %d GPUs from %s",
        slurm_id,
        attempt,
        meta.gpus,
        _GPU_SOURCES.get(meta.gpus_from, meta.gpus_from),
    )
    out: list[ev.Event] = []
    submitted = state.get("submitted")
    submit_time = _number(job.get("submit_time"))
    if submitted is None and attempt == 0 and submit_time is not None:
        submitted = convert.submitted_event(ett_id, submit_time, meta)
    if submitted is None:
        log.warning(
            "ett-slurm: job %s attempt %d: its first SubmitTime is unknown (requeued before the "
            "integration saw it); no job_submitted sent",
            slurm_id,
            attempt,
        )
    else:
        out.append(submitted)  # again on every start: the same event id, stored once
    start = _number(job.get("start_time"))
    if start is None or start > time.time() + 60:
        start = time.time()
        log.warning("ett-slurm: job %s has no StartTime; using the prolog's clock", slurm_id)
    nodelist = str(job.get("nodes") or environ.get("SLURM_JOB_NODELIST") or "")
    hosts = hostlist.hostnames(nodelist, settings.scontrol_path)
    host = str(job.get("batch_host") or (hosts[0] if hosts else nodelist))
    number = convert.allocation_attempt(attempt)
    out.append(convert.started_event(ett_id, number, start, meta.gpus, host, hosts))
    attempts = dict(state.get("attempts") or {})
    attempts[str(attempt)] = start
    save_state(
        settings,
        slurm_id,
        {"ett_job_id": ett_id, "submitted": submitted, "attempts": attempts, "gpus": meta.gpus},
    )
    deliver(settings, ett_id, out)
    return out


def jobcomp(environ: Mapping[str, str], settings: Settings) -> list[ev.Event]:
    """jobcomp/script: the attempt's failure and attempt_ended, and job_ended when it is final."""
    slurm_id = environ.get("JOBID", "")
    job_state = (environ.get("JOBSTATE") or "").upper()
    if not slurm_id or not job_state:
        raise ValueError("JOBID/JOBSTATE are not set: run this as SLURM's jobcomp/script")
    end = _number(environ.get("END")) or time.time()
    start = _number(environ.get("START"))
    state = load_state(settings, slurm_id)
    job = query_job(slurm_id, settings.squeue)
    cluster = str((job or {}).get("cluster") or environ.get("CLUSTER") or settings.cluster or "")
    ett_id = state.get("ett_job_id") or convert.ett_job_id(
        cluster, slurm_id, settings.job_id_template
    )
    attempts = {int(k): float(v) for k, v in (state.get("attempts") or {}).items()}
    out: list[ev.Event] = []
    if not attempts and (job is None or not job.get("batch_host")):
        # Never started (cancelled or failed while pending): the job's whole life is its queue.
        out.extend(
            _never_started(ett_id, slurm_id, job, environ, cluster, end, job_state, settings)
        )
        forget_state(settings, slurm_id)
        deliver(settings, ett_id, out)
        return out
    attempt = _ended_attempt(attempts, start, job, job_state)
    requeued = _requeued(job_state, job, attempt)
    out.extend(
        convert.end_events(
            ett_id,
            convert.allocation_attempt(attempt),
            job_state,
            max(end, attempts.get(attempt, 0.0)),
            requeued=requeued,
            exit_code=environ.get("EXITCODE", ""),
        )
    )
    if not requeued:
        forget_state(settings, slurm_id)
    deliver(settings, ett_id, out)
    return out


def _ended_attempt(
    attempts: dict[int, float], start: float | None, job: Mapping[str, Any] | None, job_state: str
) -> int:
    if attempts:
        for number, started in attempts.items():
            if start is not None and int(started) == int(start):
                return number
        return max(attempts)
    restarts = int(_number((job or {}).get("restart_cnt")) or 0)
    return max(0, restarts - 1) if job_state in convert.REQUEUE_STATES else restarts


def _requeued(job_state: str, job: Mapping[str, Any] | None, attempt: int) -> bool:
    if job_state in convert.REQUEUE_STATES:
        return True
    if job is None:
        return False
    current = job.get("job_state") or ""
    if isinstance(current, list):  # SLURM 23.02+: a list of state flags, base state first
        current = current[0] if current else ""
    current = str(current).upper()
    restarts = int(_number(job.get("restart_cnt")) or 0)
    return restarts > attempt or current in convert.ALIVE_STATES


def _never_started(
    ett_id: str,
    slurm_id: str,
    job: Mapping[str, Any] | None,
    environ: Mapping[str, str],
    cluster: str,
    end: float,
    job_state: str,
    settings: Settings,
) -> list[ev.Event]:
    record = dict(job or {"job_id": slurm_id, "name": environ.get("JOBNAME", "")})
    record.setdefault("cluster", cluster)
    record.setdefault("partition", environ.get("PARTITION", ""))
    record.setdefault("account", environ.get("ACCOUNT", ""))
    meta = convert.job_meta(record, settings.policy)
    for warning in meta.warnings:
        log.warning("ett-slurm: job %s: %s", slurm_id, warning)
    submit = _number(environ.get("SUBMIT")) or _number(record.get("submit_time")) or end
    _, _, status = convert.end_outcome(job_state, requeued=False)
    submitted = convert.submitted_event(ett_id, min(submit, end), meta)
    ended = ev.job_ended(ett_id, end, status)
    ended["event_id"] = convert.event_id(ett_id, "job-ended")
    return [submitted, ended]


def task_prolog_lines(environ: Mapping[str, str], settings: Settings) -> list[str]:
    """The `export ...` lines a TaskProlog prints: the tasks report under the scheduler's job."""
    cluster = environ.get("SLURM_CLUSTER_NAME") or settings.cluster
    slurm_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or ""
    if not slurm_id:
        raise ValueError("SLURM_JOB_ID is not set: run this as SLURM's TaskProlog")
    ett_id = convert.ett_job_id(cluster, slurm_id, settings.job_id_template)
    restarts = environ.get("SLURM_RESTART_COUNT", "").strip()
    base = convert.allocation_attempt(int(restarts) if restarts.isdigit() else 0)
    return [
        "export ETT_JOB_OWNER=scheduler",
        f"export ETT_JOB_ID={ett_id}",
        f"export ETT_ATTEMPT_BASE={base}",
    ]


# ---- delivery ----------------------------------------------------------------------------------


def deliver(settings: Settings, ett_id: str, events: list[ev.Event]) -> bool:
    """Spool the events (durable first), then send them within the hook's time budget."""
    if not events:
        return True
    deadline = time.monotonic() + settings.timeout_s
    spool = Spool(job_spool_dir(settings.spool_root, ett_id), max_bytes=settings.spool_max_bytes)
    # Twice: another hook may remove the job's empty folder between mkdir and write.
    if not spool.write(events) and not spool.write(events):
        log.error(
            "ett-slurm: cannot spool %d events of %s in %s", len(events), ett_id, spool.directory
        )
    if not settings.endpoint:
        log.error(
            "ett-slurm: ETT_ENDPOINT is not set; %d events wait in %s", len(events), spool.directory
        )
        return False
    if server_marked_down(settings):
        # Another hook just failed to reach the server: spool only, so that an outage costs
        # SLURM one hook timeout per DOWN_RETRY_S, not one per job start and end.
        log.warning(
            "ett-slurm: ETT server marked down (%s: %s); %s's events wait in %s",
            settings.down_marker,
            _marked_reason(settings),
            ett_id,
            spool.directory,
        )
        return False
    outcome = _send_spool(settings, spool, deadline)
    if outcome == SENT:
        flush_all(settings, deadline)  # the server answers: send what earlier hooks left behind
    else:
        _say_why(settings, outcome, f"{ett_id}'s events wait in {spool.directory}")
    return outcome == SENT


def server_marked_down(settings: Settings) -> bool:
    """True while a hook failed to reach the server (or had its token refused) less than
    DOWN_RETRY_S ago."""
    try:
        lines = settings.down_marker.read_text(encoding="utf-8").splitlines()
        if not lines or lines[0].strip() != settings.endpoint:
            return False  # marked for another address
        return time.time() - settings.down_marker.stat().st_mtime < DOWN_RETRY_S
    except OSError:
        return False


def _marked_reason(settings: Settings) -> str:
    with contextlib.suppress(OSError):
        lines = settings.down_marker.read_text(encoding="utf-8").splitlines()
        if len(lines) > 1 and lines[1].strip() == TOKEN_REFUSED:
            return "it refused the token"
    return "not reached"


def _mark_server(settings: Settings, up: bool, why: str = NOT_REACHED) -> None:
    with contextlib.suppress(OSError):
        if up:
            settings.down_marker.unlink(missing_ok=True)
        else:
            settings.down_marker.parent.mkdir(parents=True, exist_ok=True)
            settings.down_marker.write_text(f"{settings.endpoint}\n{why}\n")


def _token_source(settings: Settings) -> str:
    if settings.token_file:
        return f"the token in {settings.token_file}"
    return (
        "ETT_TOKEN"
        if settings.token
        else "no token (neither --token-file, ETT_TOKEN_FILE nor ETT_TOKEN is set)"
    )


def _say_why(settings: Settings, outcome: str, waiting: str) -> None:
    """Log why a send failed: the server refused the token (and how to fix it), or was away."""
    if outcome == TOKEN_REFUSED:
        log.error(
            "ett-slurm: ETT server %s refused %s (HTTP 401/403); %s. Create an ingest token on "
            "the server (`ett token create --name slurm --scope ingest`), write it to the file "
            "that --token-file or ETT_TOKEN_FILE names, then run `python -m trainer_agent.slurm "
            "flush` to send what waits",
            settings.endpoint,
            _token_source(settings),
            waiting,
        )
    else:
        log.warning("ett-slurm: ETT server %s not reached; %s", settings.endpoint, waiting)


def _send_spool(settings: Settings, spool: Spool, deadline: float) -> str:
    """Send one spool until the deadline: SENT, TOKEN_REFUSED or NOT_REACHED."""
    left = deadline - time.monotonic()
    if left <= 0:
        return NOT_REACHED
    sender = Sender(
        HttpTransport(settings.endpoint, settings.token),
        spool,
        request_timeout_s=max(0.5, left),
        backoff_base_s=0.2,
        backoff_max_s=1.0,
    )
    delivered = sender.flush(left)
    sender.close(0.5)
    answered = sender.stats.sent + sender.stats.duplicates + sender.stats.rejected
    refused = sender.stats.auth_refused > 0 and not delivered
    # A refused token is marked too: each later hook would wait out its timeout on it.
    _mark_server(
        settings, up=answered > 0 or delivered, why=TOKEN_REFUSED if refused else NOT_REACHED
    )
    if delivered and not spool.pending_files():
        with contextlib.suppress(OSError):
            spool.directory.rmdir()  # only when empty: keeps flush_all's scan short
        return SENT
    return TOKEN_REFUSED if refused else NOT_REACHED


def flush_all(settings: Settings, deadline: float) -> bool:
    """Send every job's spooled events, oldest job first, until the deadline; True if all went."""
    try:
        folders = sorted(
            (e for e in os.scandir(settings.spool_root) if e.is_dir()),
            key=lambda e: e.stat().st_mtime,
        )
    except OSError:
        return True
    clean = True
    for folder in folders:
        spool = Spool(folder.path, max_bytes=settings.spool_max_bytes)
        if not spool.pending_files() and not spool.recover():
            continue
        outcome = _send_spool(settings, spool, deadline)
        if outcome != SENT:
            if outcome == TOKEN_REFUSED:
                _say_why(settings, outcome, f"the events wait in {settings.spool_root}")
            clean = False
            break
    return clean
