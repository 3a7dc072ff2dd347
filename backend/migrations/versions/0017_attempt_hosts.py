"""attempt_hosts: each attempt's hosts, with its exposure, failures and TTR GPU-seconds there

Revision ID: 0017
Revises: 0015

Issue 27 items 3-4. attempt_started.hosts and heartbeat.host name an attempt's hosts; every
recompute stores them, one row per (job, attempt, host), for the Nodes page and the lemon-node
test. attempts.hosts_total is how many hosts the attempt had (its first MAX_HOSTS are rows).
Empty for jobs stored before: `ett recompute --all` fills it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "attempt_hosts",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=256), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("failure_ts", sa.Float(), nullable=True),
        sa.Column("failure_kind", sa.String(length=16), nullable=True),
        sa.Column("failure_cause", sa.String(length=64), nullable=True),
        sa.Column("ttr_gpu_s", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.job_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "attempt", "host"),
    )
    op.create_index(
        "ix_attempt_hosts_host_started", "attempt_hosts", ["host", "started_at"], unique=False
    )
    op.create_index("ix_attempt_hosts_started_at", "attempt_hosts", ["started_at"], unique=False)
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("hosts_total", sa.Integer(), nullable=True))


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("attempts", schema=None) as batch_op:
        batch_op.drop_column("hosts_total")
    op.drop_index("ix_attempt_hosts_started_at", table_name="attempt_hosts")
    op.drop_index("ix_attempt_hosts_host_started", table_name="attempt_hosts")
    op.drop_table("attempt_hosts")
