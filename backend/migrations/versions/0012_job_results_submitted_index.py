"""job_results for the job list at fleet scale: by submission time (its newest-first page without
sorting every job) and by job id and model prefix (its search; varchar_pattern_ops on Postgres,
whose default collation cannot serve LIKE 'prefix%')

Revision ID: 0012
Revises: 0011
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_index("ix_job_results_submitted_at", "job_results", ["submitted_at"], unique=False)
    for column in ("job_id", "model"):
        op.create_index(
            f"ix_job_results_{column}_prefix",
            "job_results",
            [column],
            unique=False,
            postgresql_ops={column: "varchar_pattern_ops"},
        )


def downgrade() -> None:
    """Revert this revision."""
    for column in ("job_id", "model"):
        op.drop_index(f"ix_job_results_{column}_prefix", table_name="job_results")
    op.drop_index("ix_job_results_submitted_at", table_name="job_results")
