"""tokens expire and are revoked with a time; stored silences made readable

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# 9999-12-31T00:00:00Z: the last time the API can show; a later end is clamped to 30 days.
_LAST_SHOWN_S = 253402214400.0
_CLAMP_S = 30 * 86400.0


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("revoked_at", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("expires_at", sa.Float(), nullable=True))

    # Silences from before the write rules: every one says why, and every end can be shown.
    op.execute(
        "UPDATE alert_silences SET comment = '(no comment given)' "
        "WHERE comment IS NULL OR trim(comment) = ''"
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE alert_silences SET ends_at = starts_at WHERE ends_at = 'NaN'::float8")
    op.execute(
        sa.text(
            "UPDATE alert_silences SET ends_at = starts_at + :clamp WHERE ends_at > :last"
        ).bindparams(clamp=_CLAMP_S, last=_LAST_SHOWN_S)
    )


def downgrade() -> None:
    """Revert this revision (the silence clean-up stays: it lost nothing that could be shown)."""
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_column("expires_at")
        batch_op.drop_column("revoked_at")
