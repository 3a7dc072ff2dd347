"""held_events: a model-scoped token's events for a job whose job_submitted has not come yet

Revision ID: 0014
Revises: 0013

Issue 24 item 6. Only a job_submitted gives a job its model; until it arrives, the other events a
token limited to models sends for that job wait here, and are released into raw_events (or
refused into rejected_events, with the reason) when it does.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "held_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("event_id", sa.String(length=64), nullable=False),
        sa.Column("received_at", sa.Float(), nullable=False),
        sa.Column("token_name", sa.String(length=128), nullable=True),
        sa.Column("token_models", _JSON, nullable=False),
        sa.Column("payload", _JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_held_events")),
    )
    op.create_index("ix_held_events_job_id", "held_events", ["job_id", "id"], unique=False)


def downgrade() -> None:
    """Revert this revision."""
    op.drop_index("ix_held_events_job_id", table_name="held_events")
    op.drop_table("held_events")
