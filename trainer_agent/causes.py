"""Failure causes from what the agent sees: the exception's type, a signal, the message.

The taxonomy is the server's (backend/ett/catalogue.py CAUSES, docs/ACCOUNTING.md "Failure
causes"); the agent ships alone and keeps this copy of each cause's failure kind
(tests/trainer_agent/test_agent_constants.py checks they agree). The patterns are data: one
table, PATTERNS, tried in order, the first match wins (tests/trainer_agent/test_causes.py).
"""

from __future__ import annotations

import re
import signal as _signal

# cause -> the failure kind it is sent as (the server's CAUSES[cause].kind).
CAUSE_KINDS: dict[str, str] = {
    "preemption": "preemption",
    "requeue": "preemption",
    "sigterm": "preemption",
    "maintenance": "infra",
    "user_cancel": "induced",
    "injected": "induced",
    "exception": "app_error",
    "nonzero_exit": "app_error",
    "crash_signal": "app_error",
    "signal": "app_error",
    "host_oom": "app_error",
    "gpu_oom": "app_error",
    "dataloader": "app_error",
    "cuda_error": "app_error",
    "hang": "app_error",
    "time_limit": "app_error",
    "gpu_hardware": "infra",
    "nccl_timeout": "infra",
    "nccl_error": "infra",
    "node_failure": "infra",
    "unknown": "unknown",
}

# Xid numbers (NVIDIA's XID catalogue) the program causes; any other Xid is the GPU's fault.
PROGRAM_XIDS = frozenset({13, 31, 43, 45})

# (cause, pattern over the exception's type name and message), in order: the first match wins.
# A more specific symptom comes before a general one (a CUDA OOM before a CUDA error).
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (cause, re.compile(pattern, re.IGNORECASE))
    for cause, pattern in (
        ("gpu_oom", r"CUDA out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED"),
        ("nccl_timeout", r"Watchdog caught collective operation timeout|NCCL.*timed? ?out"),
        ("nccl_timeout", r"collective operation timeout|ProcessGroupNCCL.*timeout"),
        (
            "gpu_hardware",
            r"uncorrectable ECC|ECC error|fallen off the bus|NVLink error|GPU is lost"
            r"|unrecoverable error.*GPU|row remapping",
        ),
        ("dataloader", r"DataLoader worker \(pid|dataloader worker.*(exited|killed|died)"),
        ("nccl_error", r"NCCL error|ncclSystemError|ncclRemoteError|ncclInternalError|NCCL WARN"),
        ("cuda_error", r"CUDA error|device-side assert|illegal memory access|cudaError"),
        ("host_oom", r"\bMemoryError\b|Cannot allocate memory|oom-kill|Out of memory: Killed"),
    )
)
# `NVRM: Xid (PCI:0000:3b:00): 79, pid=...` (the kernel log's form) or `Xid 79`.
_XID = re.compile(r"\bXid\b(?:\s*\([^)]*\))?\s*:?\s*(\d{1,3})\b", re.IGNORECASE)

_CRASH_SIGNALS = frozenset(
    getattr(_signal, name)
    for name in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL")
    if hasattr(_signal, name)
)


def from_message(text: str | None) -> str | None:
    """The cause a message names by a well-known pattern (Xid numbers included), or None."""
    if not text:
        return None
    for cause, pattern in PATTERNS:
        if pattern.search(text):
            return cause
    xid = _XID.search(text)
    if xid is not None:
        return "cuda_error" if int(xid.group(1)) in PROGRAM_XIDS else "gpu_hardware"
    return None


def from_exception(exc_type: type[BaseException], message: str | None = None) -> str:
    """The cause of an uncaught exception: its message's pattern, else its type's, else
    `exception`."""
    found = from_message(f"{exc_type.__name__}: {message or ''}")
    if found is not None:
        return found
    names = {k.__name__ for k in exc_type.__mro__}
    if "MemoryError" in names:
        return "host_oom"
    if "TimeoutError" in names and "DistBackendError" in names:
        return "nccl_timeout"
    return "exception"


def from_signal(signum: int) -> str:
    """The cause of a death by signal: a SIGTERM of unknown sender, a crash, or another signal."""
    if signum == _signal.SIGTERM:
        return "sigterm"
    if signum in _CRASH_SIGNALS:
        return "crash_signal"
    if signum == getattr(_signal, "SIGINT", None):
        return "user_cancel"
    return "signal"


def from_exit(code: int | None, text: str | None = None) -> str:
    """The cause of a process that exited: its output's pattern, else a negative code's signal,
    else `nonzero_exit` (a zero or missing code: unknown)."""
    found = from_message(text)
    if found is not None:
        return found
    if code is None or code == 0:
        return "unknown"
    if code < 0:
        return from_signal(-code)
    if code > 128 and code - 128 in _CRASH_SIGNALS | {_signal.SIGTERM}:
        return from_signal(code - 128)  # a shell's 128 + signal
    return "nonzero_exit"


def kind_of(cause: str) -> str:
    """The failure kind a cause is sent as (unknown for a name not in the table)."""
    return CAUSE_KINDS.get(cause, "unknown")
