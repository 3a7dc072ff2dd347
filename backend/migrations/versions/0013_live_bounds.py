"""Learned bounds for the live state: samples of finished jobs, the jobs sampled, the bounds

Revision ID: 0013
Revises: 0012
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIGINT_PK = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "live_bound_samples",
        sa.Column("id", BIGINT_PK, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("phase", sa.String(length=128), nullable=False),
        sa.Column("variant", sa.String(length=8), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("value_s", sa.Float(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.job_id"],
            name=op.f("fk_live_bound_samples_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_live_bound_samples")),
    )
    op.create_index("ix_live_bound_samples_job_id", "live_bound_samples", ["job_id"])
    op.create_index(
        "ix_live_bound_samples_model_key_at",
        "live_bound_samples",
        ["model", "phase", "variant", "at"],
    )
    op.create_index(
        "ix_live_bound_samples_key_at", "live_bound_samples", ["phase", "variant", "at"]
    )
    op.create_table(
        "live_sampled_jobs",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("computed_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.job_id"],
            name=op.f("fk_live_sampled_jobs_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_live_sampled_jobs")),
    )
    op.create_table(
        "live_bounds",
        sa.Column("scope", sa.String(length=256), nullable=False),
        sa.Column("phase", sa.String(length=128), nullable=False),
        sa.Column("variant", sa.String(length=8), nullable=False),
        sa.Column("bound_s", sa.Float(), nullable=False),
        sa.Column("quantile_s", sa.Float(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("computed_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "phase", "variant", name=op.f("pk_live_bounds")),
    )


def downgrade() -> None:
    """Revert this revision."""
    op.drop_table("live_bounds")
    op.drop_table("live_sampled_jobs")
    op.drop_index("ix_live_bound_samples_key_at", table_name="live_bound_samples")
    op.drop_index("ix_live_bound_samples_model_key_at", table_name="live_bound_samples")
    op.drop_index("ix_live_bound_samples_job_id", table_name="live_bound_samples")
    op.drop_table("live_bound_samples")
