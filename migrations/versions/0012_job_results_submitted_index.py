"""job_results by submission time: the job list's newest-first page without a sort of every job

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


def downgrade() -> None:
    """Revert this revision."""
    op.drop_index("ix_job_results_submitted_at", table_name="job_results")
