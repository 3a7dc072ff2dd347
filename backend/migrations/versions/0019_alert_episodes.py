"""alert_episodes: every firing-to-resolved cycle of an alert, kept after the next one starts

Revision ID: 0019
Revises: 0018

Issue 25 item 4. alert_states holds only an instance's current episode; the owners page lists
past ones (start, end, peak, who acknowledged, the channels notified), so the evaluator writes
one row per episode in the same transaction as the state change.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "alert_episodes",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("episode", sa.Integer(), nullable=False),
        sa.Column("slo_name", sa.String(length=128), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("component", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=True),
        sa.Column("breach_started_at", sa.Float(), nullable=True),
        sa.Column("fired_at", sa.Float(), nullable=False),
        sa.Column("resolved_at", sa.Float(), nullable=True),
        sa.Column("peak", sa.Float(), nullable=True),
        sa.Column("objective", sa.Float(), nullable=False),
        sa.Column("silenced_by", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["fingerprint"],
            ["alert_states.fingerprint"],
            name=op.f("fk_alert_episodes_fingerprint_alert_states"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_episodes")),
        sa.UniqueConstraint("fingerprint", "episode", name="uq_alert_episodes_episode"),
    )
    with op.batch_alter_table("alert_episodes", schema=None) as batch_op:
        batch_op.create_index(
            "ix_alert_episodes_owner_fired_at", ["owner", "fired_at"], unique=False
        )


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("alert_episodes", schema=None) as batch_op:
        batch_op.drop_index("ix_alert_episodes_owner_fired_at")
    op.drop_table("alert_episodes")
