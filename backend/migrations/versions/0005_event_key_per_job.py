"""event idempotency key per job: (job_id, event_id) instead of a global event_id

Revision ID: 0005
Revises: 0004

SPEC revision 2, section 3: another job may reuse an event id. Existing rows keep their data
(a global key is also unique per job). On SQLite the table is rebuilt by batch mode.
Downgrade refuses nothing itself: it fails if two jobs now share an event id.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("raw_events", schema=None) as batch_op:
        batch_op.drop_constraint("uq_raw_events_event_id", type_="unique")
        batch_op.create_unique_constraint("uq_raw_events_job_id_event_id", ["job_id", "event_id"])


def downgrade() -> None:
    """Revert this revision."""
    with op.batch_alter_table("raw_events", schema=None) as batch_op:
        batch_op.drop_constraint("uq_raw_events_job_id_event_id", type_="unique")
        batch_op.create_unique_constraint("uq_raw_events_event_id", ["event_id"])
