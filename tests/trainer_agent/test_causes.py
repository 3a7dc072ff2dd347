"""The agent's failure causes: the pattern table, exception types, signals, SLURM's ends."""

from __future__ import annotations

import signal

import pytest

from trainer_agent import causes
from trainer_agent.slurm import convert

# Messages as PyTorch, NCCL, the CUDA runtime and the kernel print them.
MESSAGES = [
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 "
        "GiB total capacity; 75.01 GiB already allocated)",
        "gpu_oom",
    ),
    (
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4121, "
        "OpType=ALLREDUCE, NumelIn=1048576, Timeout(ms)=600000) ran for 600016 milliseconds",
        "nccl_timeout",
    ),
    (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
        "remote process exited or there was a network error, NCCL version 2.19.3 "
        "ncclRemoteError: A call failed possibly due to a network error",
        "nccl_error",
    ),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda_error"),
    ("RuntimeError: CUDA error: device-side assert triggered", "cuda_error"),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "gpu_hardware"),
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", "gpu_hardware"),
    ("NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, An uncorrectable double bit error", "gpu_hardware"),
    ("NVRM: Xid (PCI:0000:3b:00): 94, pid=1234, Contained ECC error", "gpu_hardware"),
    ("NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, MMU Fault: ENGINE GRAPHICS", "cuda_error"),
    ("NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception", "cuda_error"),
    (
        "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. ",
        "dataloader",
    ),
    ("RuntimeError: DataLoader worker (pid(s) 17, 18) exited unexpectedly", "dataloader"),
    ("GPU 3 reported Xid 74 (NVLink)", "gpu_hardware"),
    ("MemoryError", "host_oom"),
    ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=42.0", "host_oom"),
    ("ValueError: bad shape (3, 4)", None),
    ("", None),
]


@pytest.mark.parametrize(("text", "cause"), MESSAGES)
def test_the_pattern_table(text: str, cause: str | None) -> None:
    assert causes.from_message(text) == cause


def test_every_pattern_names_a_cause_and_matches_some_message() -> None:
    matched = {causes.from_message(text) for text, _ in MESSAGES}
    for cause, pattern in causes.PATTERNS:
        assert cause in causes.CAUSE_KINDS
        assert cause in matched, pattern.pattern


class DistBackendError(RuntimeError):
    pass


class DistTimeout(DistBackendError, TimeoutError):
    pass


@pytest.mark.parametrize(
    ("exc_type", "message", "cause"),
    [
        (ValueError, "bad shape", "exception"),
        (MemoryError, "", "host_oom"),
        (RuntimeError, "CUDA out of memory. Tried to allocate 20 MiB", "gpu_oom"),
        (DistTimeout, "operation timed out after 1800 s", "nccl_timeout"),
        (KeyError, "'labels'", "exception"),
    ],
)
def test_causes_from_exceptions(exc_type: type[BaseException], message: str, cause: str) -> None:
    assert causes.from_exception(exc_type, message) == cause


def test_causes_from_signals_and_exit_codes() -> None:
    assert causes.from_signal(signal.SIGTERM) == "sigterm"
    assert causes.from_signal(signal.SIGSEGV) == "crash_signal"
    assert causes.from_signal(signal.SIGABRT) == "crash_signal"
    assert causes.from_signal(signal.SIGKILL) == "signal"
    assert causes.from_exit(-signal.SIGSEGV) == "crash_signal"
    assert causes.from_exit(128 + signal.SIGSEGV) == "crash_signal"
    assert causes.from_exit(3) == "nonzero_exit"
    assert causes.from_exit(1, "torch.OutOfMemoryError: CUDA out of memory") == "gpu_oom"
    assert causes.from_exit(0) == "unknown"


@pytest.mark.parametrize(
    ("state", "requeued", "exit_code", "cause", "kind"),
    [
        ("NODE_FAIL", False, "0:0", "node_failure", "infra"),
        ("BOOT_FAIL", False, "", "node_failure", "infra"),
        ("TIMEOUT", False, "0:15", "time_limit", "app_error"),
        ("DEADLINE", False, "", "time_limit", "app_error"),
        ("PREEMPTED", False, "0:15", "preemption", "preemption"),
        ("PREEMPTED", True, "0:15", "preemption", "preemption"),
        ("OUT_OF_MEMORY", False, "0:125", "host_oom", "app_error"),
        ("FAILED", False, "3:0", "nonzero_exit", "app_error"),
        ("FAILED", False, "0:11", "crash_signal", "app_error"),
        ("FAILED", False, "0:9", "signal", "app_error"),
        ("REQUEUED", True, "0:0", "requeue", "preemption"),
        ("COMPLETED", True, "0:0", "requeue", "preemption"),  # scontrol requeue
    ],
)
def test_slurm_ends_name_their_cause(
    state: str, requeued: bool, exit_code: str, cause: str, kind: str
) -> None:
    events = convert.end_events(
        "slurm-c-1", 0, state, 100.0, requeued=requeued, exit_code=exit_code
    )
    (failure,) = [e for e in events if e["type"] == "failure"]
    assert (failure["cause"], failure["kind"]) == (cause, kind)
    assert causes.kind_of(cause) == kind


def test_a_slurm_cancel_sends_no_failure() -> None:
    events = convert.end_events("slurm-c-1", 0, "CANCELLED", 100.0, requeued=False)
    assert [e["type"] for e in events] == ["attempt_ended", "job_ended"]
    assert events[-1]["status"] == "cancelled"
