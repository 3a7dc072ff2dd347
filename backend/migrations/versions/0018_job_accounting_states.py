"""job_accounting_states: the settled prefix of each open job's accounting

Revision ID: 0018
Revises: 0015

Issue 29 item 1. An open job's accounting up to its settled point (docs/ACCOUNTING.md
"Incremental accounting") is kept as state, so that a batch of new events extends it instead
of re-reading every raw event. A job without a row is recomputed in full; dropping the table's
rows (or `ett recompute`) only costs time.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "job_accounting_states",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("last_event_row", sa.BigInteger(), nullable=False),
        sa.Column("event_rows", sa.Integer(), nullable=False),
        sa.Column("rules", sa.String(length=64), nullable=False),
        sa.Column("settled_at", sa.Float(), nullable=False),
        sa.Column("computed_at", sa.Float(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.job_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id"),
    )


def downgrade() -> None:
    """Revert this revision."""
    op.drop_table("job_accounting_states")
