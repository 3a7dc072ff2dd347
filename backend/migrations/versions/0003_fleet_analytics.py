"""fleet analytics: rollups and owners (owned by the analytics work)

Revision ID: 0003
Revises: 0002
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "owner_mapping_versions",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column(
            "document",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_owner_mapping_versions")),
    )
    op.create_table(
        "fleet_job_days",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("day", sa.Float(), nullable=False),
        sa.Column("component", sa.String(length=32), nullable=False),
        sa.Column("phase", sa.String(length=128), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("gpu_s", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.job_id"],
            name=op.f("fk_fleet_job_days_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "job_id", "day", "component", "phase", name=op.f("pk_fleet_job_days")
        ),
    )
    with op.batch_alter_table("fleet_job_days", schema=None) as batch_op:
        batch_op.create_index("ix_fleet_job_days_day", ["day"], unique=False)

    op.create_table(
        "fleet_day_rollups",
        sa.Column("day", sa.Float(), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("component", sa.String(length=32), nullable=False),
        sa.Column("phase", sa.String(length=128), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("gpu_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint(
            "day", "model", "component", "phase", name=op.f("pk_fleet_day_rollups")
        ),
    )
    with op.batch_alter_table("fleet_day_rollups", schema=None) as batch_op:
        batch_op.create_index("ix_fleet_day_rollups_model_day", ["model", "day"], unique=False)

    op.create_table(
        "fleet_day_totals",
        sa.Column("day", sa.Float(), nullable=False),
        sa.Column("component", sa.String(length=32), nullable=False),
        sa.Column("phase", sa.String(length=128), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("gpu_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("day", "component", "phase", name=op.f("pk_fleet_day_totals")),
    )
    op.create_table(
        "fleet_failures",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("day", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("inferred", sa.Boolean(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.job_id"],
            name=op.f("fk_fleet_failures_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "idx", name=op.f("pk_fleet_failures")),
    )
    with op.batch_alter_table("fleet_failures", schema=None) as batch_op:
        batch_op.create_index("ix_fleet_failures_day_model", ["day", "model"], unique=False)

    op.create_table(
        "fleet_jobs",
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("day", sa.Float(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("attempts_excl_preemption", sa.Integer(), nullable=False),
        sa.Column("nof", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.job_id"],
            name=op.f("fk_fleet_jobs_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_fleet_jobs")),
    )
    with op.batch_alter_table("fleet_jobs", schema=None) as batch_op:
        batch_op.create_index("ix_fleet_jobs_day_model", ["day", "model"], unique=False)


def downgrade() -> None:
    """Revert this revision."""
    for table, index in (
        ("fleet_jobs", "ix_fleet_jobs_day_model"),
        ("fleet_failures", "ix_fleet_failures_day_model"),
        ("fleet_day_rollups", "ix_fleet_day_rollups_model_day"),
        ("fleet_job_days", "ix_fleet_job_days_day"),
    ):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_index(index)
        op.drop_table(table)
    op.drop_table("fleet_day_totals")
    op.drop_table("owner_mapping_versions")
