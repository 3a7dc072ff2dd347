"""ETT% SLURM integration: SLURM's record of each job turned into wire-protocol events.

`python -m trainer_agent.slurm --help` lists the hooks; docs/SLURM.md says how to install them.
Standard library only, like the rest of the trainer agent.
"""

from __future__ import annotations

from trainer_agent.slurm.convert import (
    DEFAULT_JOB_ID_TEMPLATE,
    JobMeta,
    end_events,
    ett_job_id,
    job_meta,
    parse_comment,
)

__all__ = [
    "DEFAULT_JOB_ID_TEMPLATE",
    "JobMeta",
    "end_events",
    "ett_job_id",
    "job_meta",
    "parse_comment",
]
