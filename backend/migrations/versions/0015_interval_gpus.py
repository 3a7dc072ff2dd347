"""job_intervals.gpus and job_results' GPU-seconds: each second at its attempt's GPUs

Revision ID: 0015
Revises: 0014

Issue 24 item 3. An attempt on 48 of a job's 64 GPUs is charged 48: each interval keeps the
GPU count of its attempt (the job's outside attempts). NULL, in rows stored before, means the
job's count, as before; `ett recompute --all` fills it. job_results keeps the job's wall and
effective GPU-seconds so summed (NULL before: its seconds times its GPUs).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("job_intervals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gpus", sa.Integer(), nullable=True))
    with op.batch_alter_table("job_results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("e2e_gpu_s", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("effective_gpu_s", sa.Float(), nullable=True))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("job_results", schema=None) as batch_op:
        batch_op.drop_column("effective_gpu_s")
        batch_op.drop_column("e2e_gpu_s")
    with op.batch_alter_table("job_intervals", schema=None) as batch_op:
        batch_op.drop_column("gpus")
