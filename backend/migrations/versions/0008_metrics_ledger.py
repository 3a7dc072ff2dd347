"""metrics ledger: finished jobs' contributions to the exported Prometheus counters

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "metrics_ledger",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("series", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("team", sa.String(length=128), nullable=False),
        sa.Column("key1", sa.String(length=32), nullable=False),
        sa.Column("key2", sa.String(length=128), nullable=False),
        sa.Column("booked", sa.Float(), nullable=False),
        sa.Column("added", sa.Float(), nullable=False),
        sa.Column("removed", sa.Float(), nullable=False),
        sa.Column("booked_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint(
            "job_id", "series", "model", "team", "key1", "key2", name=op.f("pk_metrics_ledger")
        ),
    )
    with op.batch_alter_table("metrics_ledger", schema=None) as batch_op:
        batch_op.create_index("ix_metrics_ledger_series_model", ["series", "model"], unique=False)


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("metrics_ledger", schema=None) as batch_op:
        batch_op.drop_index("ix_metrics_ledger_series_model")
    op.drop_table("metrics_ledger")
