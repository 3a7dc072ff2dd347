"""job quarantine: jobs whose computation fails, with the error and the next try

Revision ID: 0007
Revises: 0006
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "job_quarantine",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("first_failed_at", sa.Float(), nullable=False),
        sa.Column("last_failed_at", sa.Float(), nullable=False),
        sa.Column("retry_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.job_id"],
            name=op.f("fk_job_quarantine_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_job_quarantine")),
    )
    op.create_index("ix_job_quarantine_retry_at", "job_quarantine", ["retry_at"], unique=False)


def downgrade() -> None:
    """Revert this revision."""
    op.drop_index("ix_job_quarantine_retry_at", table_name="job_quarantine")
    op.drop_table("job_quarantine")
