"""The trainer agent: phases, progress windows, checkpoints, failures and attempt lifecycle."""

from __future__ import annotations

import atexit
import functools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TypeVar

from trainer_agent import causes
from trainer_agent import events as ev
from trainer_agent.sender import Sender
from trainer_agent.spool import Spool, default_spool_root, job_spool_dir
from trainer_agent.transport import HttpTransport, Transport

log = logging.getLogger("trainer_agent")

F = TypeVar("F", bound=Callable[..., Any])
_INF = float("inf")
# What a process must set to report; an agent without them says so once per process.
SETTINGS_HELP = (
    "set ETT_ENDPOINT (the server, e.g. http://127.0.0.1:8050), ETT_TOKEN (an ingest token: "
    "`ett token create --name NAME --scope ingest` on the server) and ETT_JOB_ID"
)
_said_disabled = False


def _say_disabled(job_id: str, endpoint: str) -> None:
    global _said_disabled
    if _said_disabled:
        return
    _said_disabled = True
    missing = [
        name for name, value in (("ETT_ENDPOINT", endpoint), ("ETT_JOB_ID", job_id)) if not value
    ]
    log.warning(
        "trainer_agent: %s not set: this process reports nothing to ETT; %s",
        " and ".join(missing),
        SETTINGS_HELP,
    )


def _env_int(environ: dict[str, str] | None, names: tuple[str, ...]) -> int:
    env = os.environ if environ is None else environ
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def _env_digits(env: Any, name: str) -> int | None:
    value = str(env.get(name, "")).strip()
    return int(value) if value.isascii() and value.isdigit() else None


def allocation_base(environ: dict[str, str] | None = None) -> int:
    """The first attempt number of the current allocation: ETT_ATTEMPT_BASE (the SLURM
    integration's TaskProlog exports it), else SLURM_RESTART_COUNT x ALLOCATION_STRIDE, else 0."""
    env = os.environ if environ is None else environ
    base = _env_digits(env, "ETT_ATTEMPT_BASE")
    if base is not None:
        return base
    requeues = _env_digits(env, "SLURM_RESTART_COUNT")
    return requeues * ev.ALLOCATION_STRIDE if requeues is not None else 0


def detect_attempt(environ: dict[str, str] | None = None) -> int:
    """This process's attempt: ETT_ATTEMPT as is (trainer_agent.elastic sets it), else the
    allocation's base plus torchrun's TORCHELASTIC_RESTART_COUNT (docs/AGENT.md)."""
    env = os.environ if environ is None else environ
    exact = _env_digits(env, "ETT_ATTEMPT")
    if exact is not None:
        return exact
    restarts = _env_digits(env, "TORCHELASTIC_RESTART_COUNT") or 0
    return allocation_base(env) + min(restarts, ev.ALLOCATION_STRIDE - 1)


def detect_in_place(environ: dict[str, str] | None = None) -> bool:
    """True when this attempt restarts in place on the previous attempt's capacity (a torchrun
    group restart): ETT_ATTEMPT_IN_PLACE, else TORCHELASTIC_RESTART_COUNT > 0 without ETT_ATTEMPT."""
    env = os.environ if environ is None else environ
    flag = str(env.get("ETT_ATTEMPT_IN_PLACE", "")).strip().lower()
    if flag:
        return flag in ("1", "true", "yes")
    if _env_digits(env, "ETT_ATTEMPT") is not None:
        return False
    return (_env_digits(env, "TORCHELASTIC_RESTART_COUNT") or 0) > 0


def detect_rank(environ: dict[str, str] | None = None) -> int:
    """The global rank of this process: RANK (torchrun), else SLURM_PROCID, else 0."""
    return _env_int(environ, ("RANK", "SLURM_PROCID"))


def detect_local_rank(environ: dict[str, str] | None = None) -> int | None:
    """The rank of this process on its host: LOCAL_RANK (torchrun), else SLURM_LOCALID, else None."""
    env = os.environ if environ is None else environ
    for name in ("LOCAL_RANK", "SLURM_LOCALID"):
        value = env.get(name, "").strip()
        if value.isascii() and value.isdigit():
            return int(value)
    return None


def detect_host(environ: dict[str, str] | None = None) -> str:
    """The name of the host this process runs on: ETT_HOST, else the system's host name."""
    env = os.environ if environ is None else environ
    return env.get("ETT_HOST", "").strip()[:256] or socket.gethostname()[:256]


JOB_OWNERS = ("trainer", "scheduler")


def detect_job_owner(environ: dict[str, str] | None = None) -> str:
    """Who reports job_submitted and job_ended: ETT_JOB_OWNER (trainer or scheduler), default trainer."""
    env = os.environ if environ is None else environ
    value = env.get("ETT_JOB_OWNER", "").strip().lower()
    if not value:
        return "trainer"
    if value not in JOB_OWNERS:
        log.warning(
            "trainer_agent: ETT_JOB_OWNER=%r is not one of %s; the trainer owns the job",
            value,
            "|".join(JOB_OWNERS),
        )
        return "trainer"
    return value


def _restart_may_follow(environ: dict[str, str] | None = None) -> bool:
    """True under torchrun while restarts are left: a failed attempt does not end the job."""
    env = os.environ if environ is None else environ
    most = env.get("TORCHELASTIC_MAX_RESTARTS", "").strip()
    if not most.isdigit():
        return False
    done = env.get("TORCHELASTIC_RESTART_COUNT", "0").strip()
    return (int(done) if done.isdigit() else 0) < int(most)


def process_start_time() -> float | None:
    """When this process started (epoch seconds): /proc on Linux, else `ps`; None if neither."""
    started = _proc_start_time()
    return started if started is not None else _ps_start_time()


def _ps_start_time() -> float | None:
    # macOS and the BSDs: elapsed time from ps ([[dd-]hh:]mm:ss), whole seconds.
    try:
        out = subprocess.run(
            ["ps", "-o", "etime=", "-p", str(os.getpid())],
            capture_output=True,
            text=True,
            timeout=2,
            check=True,
        ).stdout.strip()
        days, _, clock = out.rpartition("-")
        seconds = 0.0
        for part in clock.split(":"):
            seconds = seconds * 60 + float(part)
        return time.time() - seconds - (int(days) * 86400 if days else 0)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _proc_start_time() -> float | None:
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        start_ticks = int(fields[19])
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
        # Age from uptime (10 ms resolution), not /proc/stat's btime: that one is whole seconds
        # and drifts from the wall clock, which put attempts up to a second before the last end.
        age = max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
        return time.time() - age
    except (OSError, ValueError, IndexError):
        return None


class PhaseSpan:
    """`with agent.phase(name):` or `@agent.phase(name)`: one completed span per entry."""

    def __init__(self, agent: Agent, name: str) -> None:
        self._agent = agent
        self.name = name
        self._starts: list[tuple[float, str]] = []

    def __enter__(self) -> PhaseSpan:
        try:
            start = self._agent._clock()
            span_id = ev.new_span_id()
            self._starts.append((start, span_id))
            self._agent._phase_enter(self.name, start, span_id)
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: phase enter failed")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            start, span_id = self._starts.pop() if self._starts else (self._agent._clock(), None)
            self._agent._phase_exit(self.name, start, self._agent._clock(), span_id)
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: phase exit failed")

    def __call__(self, func: F) -> F:
        """Use as a decorator: every call of `func` is one span."""

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with PhaseSpan(self._agent, self.name):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class CheckpointSpan:
    """One checkpoint save: begin, blocking done (training resumes), committed (durable) or failed."""

    def __init__(self, agent: Agent, cursor: float | None, sync: bool) -> None:
        self._agent = agent
        self.sync = sync
        self.start = agent._clock()
        self.cursor = cursor if cursor is not None else agent.cursor
        self.blocking_end: float | None = None
        self.bytes: int | None = None
        self._sent = False
        self._lock = threading.Lock()
        agent._progress_break(self.start)
        agent._pending_checkpoints.add(self)

    def __enter__(self) -> CheckpointSpan:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.failed()
            return
        self.blocking_done()
        if self.sync:
            self.committed()

    def blocking_done(self, ts: float | None = None) -> None:
        """Training resumes: the blocking part of the save is over."""
        try:
            if self.blocking_end is None:
                self.blocking_end = self._agent._clock() if ts is None else ts
                self._agent._progress_resume(self.blocking_end)
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: checkpoint blocking_done failed")

    def committed(self, ts: float | None = None, bytes: int | None = None) -> None:
        """The checkpoint is durable; sends the checkpoint event."""
        try:
            now = self._agent._clock() if ts is None else ts
            if self.blocking_end is None:
                self.blocking_done(now)
            if bytes is not None:
                self.bytes = int(bytes)
            self._send(committed=max(now, self.blocking_end or now), ok=True)
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: checkpoint committed failed")

    def failed(self, ts: float | None = None) -> None:
        """The save failed (ok=false); sends the checkpoint event."""
        try:
            if self.blocking_end is None:
                self.blocking_done(ts)
            self._send(committed=None, ok=False)
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: checkpoint failed() failed")

    def _send(self, committed: float | None, ok: bool) -> None:
        with self._lock:
            if self._sent:
                return
            self._sent = True
        self._agent._pending_checkpoints.discard(self)
        blocking_end = self.blocking_end if self.blocking_end is not None else self.start
        self._agent._emit(
            "checkpoint",
            start=self.start,
            blocking_end=max(blocking_end, self.start),
            committed=committed,
            cursor=self.cursor if self.cursor is not None and self.cursor >= 0 else None,
            bytes=self.bytes,
            ok=ok,
        )


class Agent:
    """Reports one process's view of a training job; every method is safe and never raises."""

    def __init__(
        self,
        job_id: str | None = None,
        attempt: int | None = None,
        endpoint: str | None = None,
        token: str | None = None,
        *,
        spool_dir: str | os.PathLike[str] | None = None,
        spool_max_bytes: int | None = None,
        rank: int | None = None,
        report_progress: bool | None = None,
        report_attempt: bool | None = None,
        progress_window_s: float = 30.0,
        heartbeat_s: float | None = None,
        exit_timeout_s: float = 5.0,
        request_timeout_s: float = 10.0,
        gpus: int | None = None,
        host: str | None = None,
        install_handlers: bool = True,
        transport: Transport | None = None,
        clock: Callable[[], float] = time.time,
        model: str | None = None,
        labels: dict[str, str] | None = None,
        config: dict[str, Any] | None = None,
        job_owner: str | None = None,
    ) -> None:
        env = os.environ
        self.job_id = job_id or env.get("ETT_JOB_ID") or ""
        self.endpoint = endpoint or env.get("ETT_ENDPOINT") or ""
        token = token or env.get("ETT_TOKEN") or None
        self.attempt = detect_attempt() if attempt is None else _as_int(attempt, "attempt")
        self.in_place = detect_in_place() if attempt is None else False
        self.rank = detect_rank() if rank is None else _as_int(rank, "rank")
        self.report_progress = self.rank == 0 if report_progress is None else report_progress
        self.report_attempt = self.rank == 0 if report_attempt is None else report_attempt
        self.progress_window_s = float(progress_window_s)
        self.exit_timeout_s = float(exit_timeout_s)
        self._clock = clock
        self._pid = os.getpid()
        self.model = model or env.get("ETT_MODEL") or None
        self.labels = labels
        self.config = config
        self.gpus = gpus if gpus is not None else _env_int(None, ("ETT_GPUS", "WORLD_SIZE")) or None
        if job_owner is not None and job_owner not in JOB_OWNERS:
            log.warning("trainer_agent: job_owner=%r is not one of %s", job_owner, JOB_OWNERS)
            job_owner = None
        self.job_owner = job_owner or detect_job_owner()
        self.heartbeat_s = 0.0
        self._closing = False
        self._closed = False
        self._job_end_sent: str | None = None
        self._failure_kind: str | None = None
        self._ended_reason: str | None = None
        self._pending_checkpoints: set[CheckpointSpan] = set()
        # Progress state, written only by the thread that calls step().
        self._steps = 0
        self._last_t = 0.0
        self._last_c: float | None = None
        self._win_t: float | None = None
        self._win_c = 0.0
        self._win_n = 0
        self._win_due = 0.0
        self._break_depth = 0
        self._resume_pending = False
        self._step_thread: int | None = None
        # The sender thread closes a window the loop left open (a hang); the step thread only
        # takes this lock when it rolls a window, once per window period.
        self._win_lock = threading.RLock()
        self._step_s = 0.0
        self._stall_next = 0.0
        self._next_beat = 0.0
        self.enabled = bool(self.job_id) and (bool(self.endpoint) or transport is not None)
        if not self.enabled:
            _say_disabled(self.job_id, self.endpoint)
            self.step = self._step_disabled  # type: ignore[method-assign]
            self.sender: Sender | None = None
            return
        if not self.report_progress:
            self.step = self._step_disabled  # type: ignore[method-assign]
        if not token and transport is None:
            log.warning(
                "trainer_agent: ETT_TOKEN is not set: %s refuses events without a token; %s",
                self.endpoint,
                SETTINGS_HELP,
            )
        self.sender = None
        try:
            self._start(
                spool_dir,
                spool_max_bytes,
                heartbeat_s,
                request_timeout_s,
                gpus,
                host,
                token,
                transport,
            )
            if install_handlers:
                self._install_handlers()
        except Exception:  # noqa: BLE001 - a broken agent must not stop the trainer from starting
            log.exception("trainer_agent: start failed; the agent is disabled")
            self.enabled = False
            self.sender = None
            self.step = self._step_disabled  # type: ignore[method-assign]

    def _start(
        self,
        spool_dir: str | os.PathLike[str] | None,
        spool_max_bytes: int | None,
        heartbeat_s: float | None,
        request_timeout_s: float,
        gpus: int | None,
        host: str | None,
        token: str | None,
        transport: Transport | None,
    ) -> None:
        root = Path(spool_dir) if spool_dir is not None else default_spool_root()
        max_bytes = spool_max_bytes or int(os.environ.get("ETT_SPOOL_MAX_BYTES", 64 * 1024 * 1024))
        heartbeat = (
            (ev.HEARTBEAT_S if self.rank == 0 else 0.0) if heartbeat_s is None else heartbeat_s
        )
        self.heartbeat_s = float(heartbeat)
        if self.heartbeat_s >= ev.SERVER_HEARTBEAT_TIMEOUT_S:
            log.warning(
                "trainer_agent: heartbeat_s=%g is not below the server's default heartbeat "
                "timeout (%g s): between beats a live attempt may be taken for dead",
                self.heartbeat_s,
                ev.SERVER_HEARTBEAT_TIMEOUT_S,
            )
        ticks = [self.heartbeat_s] if self.heartbeat_s > 0 else []
        if self.report_progress and self.progress_window_s > 0:
            # A quarter window: a stopped loop shows as a stalled window within 1.25 windows.
            ticks.append(max(0.01, self.progress_window_s / 4))
        self.sender = Sender(
            transport if transport is not None else HttpTransport(self.endpoint, token),
            Spool(job_spool_dir(root, self.job_id), max_bytes=max_bytes),
            request_timeout_s=request_timeout_s,
            on_tick=self._tick if ticks else None,
            tick_interval_s=min(ticks) if ticks else 0.0,
        )
        self._next_beat = time.monotonic() + self.heartbeat_s
        started_at = self._clock()
        process_start = process_start_time()
        if process_start is not None and process_start > started_at:
            process_start = started_at
        if self.report_attempt:
            if self.job_owner == "trainer" and self.attempt == 0:
                self._submit_job(process_start or started_at)
            self._emit(
                "attempt_started",
                ts=process_start or started_at,
                gpus=gpus,
                host=host or detect_host(),
                in_place=True if self.in_place else None,
            )
        elif self.rank > 0 and detect_local_rank() == 0:
            # The first process of every other host names its host, once per attempt
            # (docs/PROTOCOL.md "Hosts"); rank 0's attempt_started names its own.
            self._emit("heartbeat", ts=started_at, host=host or detect_host())
        if process_start is not None and self.report_attempt:
            # Interpreter start and imports, up to this agent: trainer_init, not hardware_setup.
            self._emit(
                "phase",
                phase="trainer_init.process_start",
                start=process_start,
                end=started_at,
                span_id=ev.new_span_id(),
            )
        self.sender.start()

    def _submit_job(self, ts: float) -> None:
        if not self.model:
            log.warning(
                "trainer_agent: this trainer owns job %s but has no model, so no job_submitted is "
                "sent: pass init(model=..., gpus=...) or set ETT_MODEL (or ETT_JOB_OWNER=scheduler "
                "when a scheduler hook reports the job)",
                self.job_id,
            )
            return
        self._submit(
            ev.job_submitted(self.job_id, ts, self.model, self.gpus or 1, self.labels, self.config)
        )

    # ---- progress: the hot path ------------------------------------------------------------

    def step(self, cursor: float | None = None) -> None:
        """Record the end of one training step; `cursor` is the data position after it."""
        try:
            t = self._clock()
            n = self._steps + 1
            self._steps = n
            c = n if cursor is None else cursor
            self._last_t = t
            self._last_c = c
            if t >= self._win_due:
                self._roll_window(t, c, n)
        except Exception:  # noqa: BLE001
            pass

    def _step_disabled(self, cursor: float | None = None) -> None:
        pass

    @property
    def cursor(self) -> float | None:
        """The last cursor passed to step() (None before the first step)."""
        return self._last_c

    def _roll_window(self, t: float, c: float, n: int) -> None:
        if self._step_thread is None:
            self._step_thread = threading.get_ident()
        with self._win_lock:
            if t < self._win_due:
                return  # the sender thread just closed a stalled window
            if self._win_t is not None and n > self._win_n:
                self._step_s = (t - self._win_t) / (n - self._win_n)
                self._emit_progress(self._win_t, t, self._win_c, c, n - self._win_n)
            self._win_t, self._win_c, self._win_n = t, c, n
            self._win_due = t + self.progress_window_s

    def _tick(self) -> None:
        """Sender thread, every quarter window or heartbeat: heartbeat when due; close a stall."""
        if self._closing:
            return
        now = time.monotonic()
        if self.heartbeat_s > 0 and now >= self._next_beat:
            self._next_beat = now + self.heartbeat_s
            self.heartbeat()
        if self.report_progress and self.progress_window_s > 0 and self._win_t is not None:
            self._close_stalled_window(self._clock())

    def _close_stalled_window(self, now: float) -> None:
        """The loop has not stepped for a window (and 3 of its steps): send that time as stalled.

        A window [last step, now] with the cursor unchanged goes out every window period while
        the loop stays stopped, so a hang shows as stalled training, not as silence.
        """
        with self._win_lock:
            if self._win_t is None:
                return  # no first step yet, or inside a phase or checkpoint of the loop
            n, c, last = self._steps, self._last_c, self._last_t
            quiet = max(self.progress_window_s, 3.0 * self._step_s)
            if c is None or now - last < quiet or now < max(self._win_due, self._stall_next):
                return
            if self._steps != n:
                return  # a step came in meanwhile
            start = self._win_t
            if n > self._win_n and last > start:
                self._emit_progress(start, last, self._win_c, c, n - self._win_n)
                start = last
            self._emit_progress(start, now, c, c, 0)
            self._win_t, self._win_c, self._win_n = now, c, n
            self._win_due = now  # the next step closes [now, step] and opens a fresh window
            self._stall_next = now + self.progress_window_s

    def _emit_progress(self, start: float, end: float, c0: float, c1: float, steps: int) -> None:
        self._emit(
            "progress",
            start=start,
            end=max(start, end),
            cursor_start=max(0.0, float(c0)),
            cursor_end=max(0.0, float(c1)),
            steps=steps,
        )

    def _close_window(self, at: float | None) -> bool:
        """Emit the open window (ending at `at`, or at the last step); True if one was open."""
        with self._win_lock:
            return self._close_window_locked(at)

    def _close_window_locked(self, at: float | None) -> bool:
        if self._win_t is None:
            return False
        if self._steps > self._win_n and self._last_c is not None:
            end = self._last_t if at is None else max(at, self._last_t)
            self._emit_progress(
                self._win_t, end, self._win_c, self._last_c, self._steps - self._win_n
            )
        self._win_t = None
        self._win_due = 0.0
        return True

    def _progress_break(self, t: float) -> None:
        # Only the training thread's own spans cut the loop (a phase of another thread overlaps it).
        if self._step_thread is None or threading.get_ident() != self._step_thread:
            return
        with self._win_lock:
            self._break_depth += 1
            if self._break_depth == 1 and self._close_window_locked(t):
                self._resume_pending = True

    def _progress_resume(self, t: float) -> None:
        if self._step_thread is None or threading.get_ident() != self._step_thread:
            return
        with self._win_lock:
            if self._break_depth > 0:
                self._break_depth -= 1
            if self._break_depth == 0 and self._resume_pending and self._last_c is not None:
                self._resume_pending = False
                self._win_t, self._win_c, self._win_n = t, self._last_c, self._steps
                self._win_due = t + self.progress_window_s

    # ---- phases ----------------------------------------------------------------------------

    def phase(self, name: str) -> PhaseSpan:
        """A span of the phase catalogue, as a context manager or a decorator."""
        return PhaseSpan(self, name)

    def _phase_enter(self, name: str, start: float, span_id: str | None = None) -> None:
        self._progress_break(start)
        self._emit("phase_started", phase=name, start=start, span_id=span_id)

    def _phase_exit(self, name: str, start: float, end: float, span_id: str | None = None) -> None:
        self._emit("phase", phase=name, start=start, end=max(start, end), span_id=span_id)
        self._progress_resume(end)

    def record_phase(self, name: str, start: float, end: float, span_id: str | None = None) -> None:
        """Report a span measured elsewhere (epoch seconds)."""
        try:
            self._emit(
                "phase",
                phase=name,
                start=float(start),
                end=max(float(start), float(end)),
                span_id=span_id or ev.new_span_id(),
            )
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: record_phase failed")

    # ---- checkpoints -----------------------------------------------------------------------

    def checkpoint(self, cursor: float | None = None, *, sync: bool = True) -> CheckpointSpan:
        """`with agent.checkpoint():` around a save; with sync=False call .committed() later."""
        try:
            return CheckpointSpan(self, cursor, sync)
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: checkpoint failed")
            return _DeadCheckpoint(self)

    def checkpoint_begin(self, cursor: float | None = None) -> CheckpointSpan:
        """Explicit form: begin now; then call .blocking_done() and .committed() (or .failed())."""
        return self.checkpoint(cursor, sync=False)

    # ---- failures, heartbeats, lifecycle ---------------------------------------------------

    def failure(
        self,
        kind: str,
        message: str | None = None,
        ts: float | None = None,
        cause: str | None = None,
    ) -> None:
        """Record that this attempt failed (kind: preemption, app_error, infra, induced, unknown).

        `cause` is one of causes.CAUSE_KINDS (docs/ACCOUNTING.md "Failure causes"); without it
        the message's well-known patterns (causes.PATTERNS) may name one.
        """
        try:
            if kind not in ev.FAILURE_KINDS:
                log.warning("trainer_agent: unknown failure kind %r recorded as 'unknown'", kind)
                kind = "unknown"
            if cause is not None and cause not in causes.CAUSE_KINDS:
                log.warning("trainer_agent: unknown failure cause %r left out", cause)
                cause = None
            if cause is None:
                cause = causes.from_message(message)
            if self._failure_kind is None:
                self._failure_kind = kind
            self._emit(
                "failure",
                ts=self._clock() if ts is None else ts,
                kind=kind,
                message=ev.truncate_message(message) if message else None,
                cause=cause,
                rank=self.rank if type(self.rank) is int and self.rank >= 0 else None,
            )
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: failure() failed")

    def heartbeat(self) -> None:
        """Say this attempt is alive (sent periodically by the sender thread)."""
        self._emit("heartbeat", ts=self._clock())

    def job_submitted(
        self,
        model: str,
        gpus: int,
        labels: dict[str, str] | None = None,
        config: dict[str, Any] | None = None,
        ts: float | None = None,
    ) -> None:
        """Scheduler hook: the job was submitted (init(model=...) sends it when the trainer owns the job)."""
        try:
            ts = self._clock() if ts is None else ts
            self._submit(ev.job_submitted(self.job_id, ts, model, gpus, labels, config))
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: job_submitted failed")

    def job_ended(self, status: str, ts: float | None = None) -> None:
        """The job's last allocation was released; delivered even after close() (bounded wait)."""
        try:
            ts = self._clock() if ts is None else ts
            if self._job_end_sent is not None:
                log.warning(
                    "trainer_agent: job %s already ended (%s); sending job_ended(%s) as asked",
                    self.job_id,
                    self._job_end_sent,
                    status,
                )
            event = ev.job_ended(self.job_id, ts, status)
            self._job_end_sent = status
            self._submit(event)
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: job_ended failed")

    def attempt_ended(self, reason: str | None = None, ts: float | None = None) -> None:
        """Report the end of this attempt (once); the reason defaults from recorded failures."""
        try:
            if not self.enabled or not self.report_attempt or self._ended_reason is not None:
                return
            if not self._in_owner_process():
                return  # a forked child does not end its parent's attempt
            if reason is None:
                reason = {None: "completed", "preemption": "preempted"}.get(
                    self._failure_kind, "failure"
                )
            if reason not in ev.ATTEMPT_END_REASONS:
                reason = "failure"
            self._ended_reason = reason
            self._emit("attempt_ended", ts=self._clock() if ts is None else ts, reason=reason)
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: attempt_ended failed")

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait up to `timeout` s until every event so far reached the API; False if any did not."""
        if self.sender is None:
            return True
        ok = self.sender.flush(timeout)
        if not ok:
            self._log_undelivered("flush()")
        return ok

    def close(
        self, timeout: float | None = None, reason: str | None = None, status: str | None = None
    ) -> bool:
        """End the attempt (and the job, when the trainer owns it); True if everything reached the API.

        `status` (one of events.JOB_STATUSES) ends the job with that status; without it, a
        trainer-owned job ends `succeeded` when the attempt completed (no failure recorded),
        `cancelled` on KeyboardInterrupt, and `failed` after a failure unless torchrun may still
        restart it. Calls after close() are delivered too. Bounded by `timeout` (exit_timeout_s).
        """
        if self.sender is None:
            return True
        if status is not None and status not in ev.JOB_STATUSES:
            log.error("trainer_agent: close(status=%r): use one of %s", status, ev.JOB_STATUSES)
            status = None
        if reason is None and status is not None:
            reason = {
                "succeeded": "completed",
                "cancelled": "cancelled",
                "preempted": "preempted",
            }.get(status, "failure")
        if not self._closing:
            self._closing = True
            # Each part on its own: a bad cursor or a broken span must not keep attempt_ended back.
            for part in (
                lambda: self._close_window(None),
                self._send_pending_checkpoints,
                lambda: self.attempt_ended(reason),
                lambda: self._end_job(status),
            ):
                try:
                    part()
                except Exception:  # noqa: BLE001
                    log.exception("trainer_agent: close step failed")
        elif status is not None and self._job_end_sent is None:
            self._end_job(status)
        self._closed = True
        ok = self.sender.close(self.exit_timeout_s if timeout is None else timeout)
        if not ok:
            self._log_undelivered("close()")
        return ok

    def _end_job(self, status: str | None) -> None:
        """job_ended from the process that reports the attempt, when the trainer owns the job."""
        if not self.report_attempt or not self._in_owner_process() or self._job_end_sent:
            return
        if self.job_owner != "trainer":
            if status is not None:
                log.info(
                    "trainer_agent: ETT_JOB_OWNER=scheduler: the scheduler ends job %s, not "
                    "close(status=%s)",
                    self.job_id,
                    status,
                )
            return
        if status is None:
            reason = self._ended_reason or "completed"
            if reason == "completed":
                status = "succeeded"
            elif reason == "cancelled":
                status = "cancelled"
            elif _restart_may_follow():
                return  # torchrun restarts the workers: the job goes on
            else:
                status = "preempted" if reason == "preempted" else "failed"
        self.job_ended(status)

    def _log_undelivered(self, where: str) -> None:
        if self.sender is not None:
            log.warning(
                "trainer_agent: %s: not every event of job %s reached the API: %s",
                where,
                self.job_id,
                self.sender.undelivered_summary(),
            )

    def _send_pending_checkpoints(self) -> None:
        for span in list(self._pending_checkpoints):
            span._send(committed=None, ok=True)

    def stats(self) -> dict[str, int]:
        """Counters: submitted, sent, duplicates, rejected, spooled, dropped, retries, errors."""
        return self.sender.stats.as_dict() if self.sender is not None else {}

    def _emit(self, etype: str, **fields: Any) -> None:
        attempt = None if etype in ("job_submitted", "job_ended") else self.attempt
        self._submit(ev.make_event(self.job_id, etype, attempt, **fields))

    def _submit(self, event: dict[str, Any]) -> None:
        sender = self.sender
        if sender is None:
            return
        sender.submit(event)
        # After close() no thread would deliver it before exit: deliver it now, bounded.
        if self._closed and not sender.close(self.exit_timeout_s):
            self._log_undelivered(f"{event.get('type')} after close()")

    # ---- process hooks ---------------------------------------------------------------------

    def _install_handlers(self) -> None:
        atexit.register(self._at_exit)
        self._prev_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        self._prev_thread_excepthook = threading.excepthook
        threading.excepthook = self._thread_excepthook
        self._prev_sigterm: Any = None
        if threading.current_thread() is threading.main_thread():
            try:
                self._prev_sigterm = signal.getsignal(signal.SIGTERM)
                signal.signal(signal.SIGTERM, self._on_sigterm)
            except (ValueError, OSError) as err:
                log.warning("trainer_agent: cannot install the SIGTERM handler: %s", err)

    def _in_owner_process(self) -> bool:
        return os.getpid() == self._pid

    def _at_exit(self) -> None:
        if self._in_owner_process():
            self.close()
        elif self.sender is not None:
            self.sender.close(self.exit_timeout_s)

    def _excepthook(
        self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        try:
            if self._in_owner_process() and self._failure_kind is None:
                if issubclass(exc_type, KeyboardInterrupt):
                    self.attempt_ended("cancelled")
                else:
                    cause = causes.from_exception(exc_type, str(exc))
                    self.failure(
                        causes.kind_of(cause), _format_exception(exc_type, exc, tb), cause=cause
                    )
        except Exception:  # noqa: BLE001
            pass
        self._prev_excepthook(exc_type, exc, tb)

    def _thread_excepthook(self, args: Any) -> None:
        try:
            if (
                self._in_owner_process()
                and self._failure_kind is None
                and not issubclass(args.exc_type, SystemExit)
            ):
                where = f"in thread {args.thread.name}: " if args.thread is not None else ""
                cause = causes.from_exception(args.exc_type, str(args.exc_value))
                self.failure(
                    causes.kind_of(cause),
                    where + _format_exception(args.exc_type, args.exc_value, args.exc_traceback),
                    cause=cause,
                )
        except Exception:  # noqa: BLE001
            pass
        self._prev_thread_excepthook(args)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        prev = self._prev_sigterm
        try:
            if self._in_owner_process():
                # Under trainer_agent.elastic the launcher says why: another worker's death
                # (torchrun then stops the rest with SIGTERM) or its own signal (a preemption).
                if self._failure_kind is None and not _launcher_reports_failures():
                    # who sent it is the scheduler's to say: a cancel or a time limit
                    # (docs/ACCOUNTING.md "Failure causes"), else a preemption
                    self.failure("preemption", "SIGTERM received", cause="sigterm")
                if callable(prev):
                    self.flush(
                        self.exit_timeout_s
                    )  # the previous handler decides what happens next
                else:
                    self.close(reason=None if self._failure_kind else "preempted")
        except Exception:  # noqa: BLE001
            pass
        if callable(prev):
            prev(signum, frame)
        elif prev != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)


class _DeadCheckpoint(CheckpointSpan):
    """Returned when a checkpoint span could not be created: every method is a no-op."""

    def __init__(self, agent: Agent) -> None:  # noqa: D107
        self._agent = agent
        self.sync = True
        self.start = 0.0
        self.cursor = None
        self.blocking_end = None
        self.bytes = None
        self._sent = True
        self._lock = threading.Lock()


def _launcher_reports_failures() -> bool:
    """True under trainer_agent.elastic, which reports each attempt's failure with its cause."""
    env = os.environ
    return bool(env.get("ETT_ELASTIC_ROUND") and env.get("ETT_JOB_ID") and env.get("ETT_ENDPOINT"))


def _as_int(value: Any, name: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        log.error("trainer_agent: %s=%r is not an integer; using 0", name, value)
        return 0


def _format_exception(
    exc_type: type[BaseException], exc: BaseException | None, tb: TracebackType | None
) -> str:
    return "".join(traceback.format_exception(exc_type, exc, tb))
