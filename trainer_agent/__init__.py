"""ETT% trainer agent: report a training job's phases, progress, checkpoints and failures.

Standard library only; the PyTorch and TorchRec hooks live in `trainer_agent.torch_hooks` and
import torch only when installed.
"""

from __future__ import annotations

from typing import Any

from trainer_agent.agent import (
    Agent,
    CheckpointSpan,
    PhaseSpan,
    allocation_base,
    detect_attempt,
    detect_in_place,
    detect_job_owner,
    detect_rank,
)

__all__ = [
    "Agent",
    "CheckpointSpan",
    "PhaseSpan",
    "allocation_base",
    "detect_attempt",
    "detect_in_place",
    "detect_job_owner",
    "detect_rank",
    "get_agent",
    "init",
]

_default: Agent | None = None


def init(
    *args: Any,
    model: str | None = None,
    gpus: int | None = None,
    labels: dict[str, str] | None = None,
    **kwargs: Any,
) -> Agent:
    """Create the process-wide agent (arguments as for Agent); later calls return the same one.

    With `model` (and `gpus`, `labels`) the agent reports the job itself (job_submitted now,
    job_ended when training ends) unless ETT_JOB_OWNER=scheduler says a scheduler hook does.
    """
    global _default
    if _default is None:
        _default = Agent(*args, model=model, gpus=gpus, labels=labels, **kwargs)
    return _default


def get_agent() -> Agent | None:
    """The agent made by init(), if any."""
    return _default
