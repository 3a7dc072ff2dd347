"""annotations and SLO compliance history (owned by the dashboard work)

Revision ID: 0010
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "annotations",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=True),
        sa.Column("team", sa.String(length=128), nullable=True),
        sa.Column("link", sa.String(length=2048), nullable=True),
        sa.Column("created_by", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_annotations")),
    )
    op.create_index("ix_annotations_ts", "annotations", ["ts"], unique=False)
    op.create_table(
        "slo_history",
        sa.Column("slo", sa.String(length=128), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("breached", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("slo", "ts", name=op.f("pk_slo_history")),
    )


def downgrade() -> None:
    """Revert this revision."""
    op.drop_table("slo_history")
    op.drop_index("ix_annotations_ts", table_name="annotations")
    op.drop_table("annotations")
