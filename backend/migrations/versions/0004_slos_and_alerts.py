"""slos and alerts (owned by the alerts work)

Revision ID: 0004
Revises: 0003
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    op.create_table(
        "alert_channels",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("target", sa.String(length=2048), nullable=False),
        sa.Column(
            "options",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_channels")),
        sa.UniqueConstraint("owner", "name", name="uq_alert_channels_owner_name"),
    )
    op.create_table(
        "alert_evaluator_lease",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=True),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("acquired_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_alert_evaluator_lease")),
    )
    op.create_table(
        "alert_notifications",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("episode", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column(
            "message",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("claimed_by", sa.String(length=128), nullable=True),
        sa.Column("claimed_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("redeliveries", sa.Integer(), nullable=False),
        sa.Column("retry_at", sa.Float(), nullable=True),
        sa.Column(
            "pending_channels",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "delivered_channels",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_notifications")),
        sa.UniqueConstraint("fingerprint", "episode", "kind", name="uq_alert_notifications_notice"),
    )
    with op.batch_alter_table("alert_notifications", schema=None) as batch_op:
        batch_op.create_index("ix_alert_notifications_status", ["status"], unique=False)

    op.create_table(
        "alert_silences",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("owner", sa.String(length=128), nullable=True),
        sa.Column("component", sa.String(length=64), nullable=True),
        sa.Column("model", sa.String(length=256), nullable=True),
        sa.Column("starts_at", sa.Float(), nullable=False),
        sa.Column("ends_at", sa.Float(), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_silences")),
    )
    with op.batch_alter_table("alert_silences", schema=None) as batch_op:
        batch_op.create_index("ix_alert_silences_ends_at", ["ends_at"], unique=False)

    op.create_table(
        "alert_states",
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("slo_name", sa.String(length=128), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("component", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=True),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column(
            "labels",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("objective", sa.Float(), nullable=False),
        sa.Column("breach_started_at", sa.Float(), nullable=True),
        sa.Column("fired_at", sa.Float(), nullable=True),
        sa.Column("resolved_at", sa.Float(), nullable=True),
        sa.Column("last_evaluated_at", sa.Float(), nullable=False),
        sa.Column("episode", sa.Integer(), nullable=False),
        sa.Column("notified_firing", sa.Boolean(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column(
            "details",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("fingerprint", name=op.f("pk_alert_states")),
    )
    with op.batch_alter_table("alert_states", schema=None) as batch_op:
        batch_op.create_index("ix_alert_states_owner_state", ["owner", "state"], unique=False)
        batch_op.create_index("ix_alert_states_slo_name", ["slo_name"], unique=False)

    op.create_table(
        "slos",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("component", sa.String(length=64), nullable=False),
        sa.Column("indicator", sa.String(length=32), nullable=False),
        sa.Column("objective", sa.Float(), nullable=False),
        sa.Column(
            "spec",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_slos")),
    )
    with op.batch_alter_table("slos", schema=None) as batch_op:
        batch_op.create_index("ix_slos_owner", ["owner"], unique=False)

    op.create_table(
        "alert_acks",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("episode", sa.Integer(), nullable=False),
        sa.Column("acknowledged_by", sa.String(length=128), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["fingerprint"],
            ["alert_states.fingerprint"],
            name=op.f("fk_alert_acks_fingerprint_alert_states"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_acks")),
    )
    with op.batch_alter_table("alert_acks", schema=None) as batch_op:
        batch_op.create_index("ix_alert_acks_fingerprint", ["fingerprint"], unique=False)

    op.create_table(
        "alert_deliveries",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column(
            "notification_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
        sa.Column("fingerprint", sa.String(length=64), nullable=True),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("channel", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["notification_id"],
            ["alert_notifications.id"],
            name=op.f("fk_alert_deliveries_notification_id_alert_notifications"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_deliveries")),
    )
    with op.batch_alter_table("alert_deliveries", schema=None) as batch_op:
        batch_op.create_index("ix_alert_deliveries_at", ["at"], unique=False)
        batch_op.create_index(
            "ix_alert_deliveries_notification_id", ["notification_id"], unique=False
        )


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("alert_deliveries", schema=None) as batch_op:
        batch_op.drop_index("ix_alert_deliveries_notification_id")
        batch_op.drop_index("ix_alert_deliveries_at")

    op.drop_table("alert_deliveries")
    with op.batch_alter_table("alert_acks", schema=None) as batch_op:
        batch_op.drop_index("ix_alert_acks_fingerprint")

    op.drop_table("alert_acks")
    with op.batch_alter_table("slos", schema=None) as batch_op:
        batch_op.drop_index("ix_slos_owner")

    op.drop_table("slos")
    with op.batch_alter_table("alert_states", schema=None) as batch_op:
        batch_op.drop_index("ix_alert_states_slo_name")
        batch_op.drop_index("ix_alert_states_owner_state")

    op.drop_table("alert_states")
    with op.batch_alter_table("alert_silences", schema=None) as batch_op:
        batch_op.drop_index("ix_alert_silences_ends_at")

    op.drop_table("alert_silences")
    with op.batch_alter_table("alert_notifications", schema=None) as batch_op:
        batch_op.drop_index("ix_alert_notifications_status")

    op.drop_table("alert_notifications")
    op.drop_table("alert_evaluator_lease")
    op.drop_table("alert_channels")
