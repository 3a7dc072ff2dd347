"""raw_events partitioned by the job's first month on Postgres; jobs.raw_pruned_at

Revision ID: 0011
Revises: 0010

Issue 18 item 2. Every row gets `job_month` (YYYYMM, UTC), the month its job was first seen
(jobs.created_at, else the job's earliest received_at): a per-job constant, so the idempotency
key (job_id, event_id, job_month) is as unique as (job_id, event_id). On Postgres the table is
rebuilt as a declaratively partitioned table, a RANGE partition per month of the data plus the
next months and a DEFAULT one. SQLite keeps one table (rebuilt by batch mode for the new key).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from backend.events.retention import ensure_partitions, next_month

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLS = "id, event_id, job_id, type, attempt, ts, received_at, payload"
_MONTH_SQL = (
    "CAST(to_char(to_timestamp(COALESCE(j.created_at, f.first_at)) AT TIME ZONE 'UTC', "
    "'YYYYMM') AS integer)"
)


def _upgrade_postgres() -> None:
    op.execute("ALTER TABLE raw_events RENAME TO raw_events_old")
    op.execute("ALTER TABLE raw_events_old RENAME CONSTRAINT pk_raw_events TO pk_raw_events_old")
    op.execute(
        "ALTER TABLE raw_events_old RENAME CONSTRAINT uq_raw_events_job_id_event_id "
        "TO uq_raw_events_old"
    )
    op.execute("ALTER INDEX ix_raw_events_job_id_id RENAME TO ix_raw_events_old_job_id_id")
    op.execute("ALTER SEQUENCE raw_events_id_seq OWNED BY NONE")
    op.execute(
        "CREATE TABLE raw_events ("
        " id BIGINT NOT NULL DEFAULT nextval('raw_events_id_seq'),"
        " event_id VARCHAR(64) NOT NULL, job_id VARCHAR(128) NOT NULL,"
        " type VARCHAR(32) NOT NULL, attempt INTEGER, ts FLOAT NOT NULL,"
        " received_at FLOAT NOT NULL, payload JSONB NOT NULL, job_month INTEGER NOT NULL,"
        " CONSTRAINT pk_raw_events PRIMARY KEY (id, job_month),"
        " CONSTRAINT uq_raw_events_job_id_event_id_job_month"
        " UNIQUE (job_id, event_id, job_month)"
        ") PARTITION BY RANGE (job_month)"
    )
    op.execute("ALTER SEQUENCE raw_events_id_seq OWNED BY raw_events.id")
    op.execute("CREATE INDEX ix_raw_events_job_id_id ON raw_events (job_id, id)")
    op.execute("CREATE TABLE raw_events_default PARTITION OF raw_events DEFAULT")
    op.execute(
        "CREATE TEMP TABLE _job_month ON COMMIT DROP AS "
        f"SELECT f.job_id, {_MONTH_SQL} AS job_month FROM "
        "(SELECT job_id, min(received_at) AS first_at FROM raw_events_old GROUP BY job_id) f "
        "LEFT JOIN jobs j ON j.job_id = f.job_id"
    )
    bind = op.get_bind()
    for month in bind.scalars(sa.text("SELECT DISTINCT job_month FROM _job_month ORDER BY 1")):
        op.execute(
            f"CREATE TABLE raw_events_p{month} PARTITION OF raw_events "
            f"FOR VALUES FROM ({month}) TO ({next_month(month)})"
        )
    op.execute(
        f"INSERT INTO raw_events ({_COLS}, job_month) "
        f"SELECT {', '.join('o.' + c for c in _COLS.split(', '))}, m.job_month "
        "FROM raw_events_old o JOIN _job_month m ON m.job_id = o.job_id ORDER BY o.id"
    )
    op.execute("DROP TABLE raw_events_old")
    ensure_partitions(bind)


def _upgrade_sqlite() -> None:
    with op.batch_alter_table("raw_events", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("job_month", sa.Integer(), nullable=False, server_default="0")
        )
    op.execute(
        "UPDATE raw_events SET job_month = (SELECT CAST(strftime('%Y%m', "
        "COALESCE((SELECT created_at FROM jobs WHERE jobs.job_id = raw_events.job_id), "
        "(SELECT min(r.received_at) FROM raw_events r WHERE r.job_id = raw_events.job_id)), "
        "'unixepoch') AS INTEGER))"
    )
    with op.batch_alter_table("raw_events", schema=None) as batch_op:
        batch_op.drop_constraint("uq_raw_events_job_id_event_id", type_="unique")
        batch_op.create_unique_constraint(
            "uq_raw_events_job_id_event_id_job_month", ["job_id", "event_id", "job_month"]
        )


def upgrade() -> None:
    """Apply this revision."""
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("raw_pruned_at", sa.Float(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        _upgrade_postgres()
    else:
        _upgrade_sqlite()


def downgrade() -> None:
    """Revert this revision (raw events already pruned stay gone)."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE raw_events RENAME TO raw_events_part")
        op.execute("ALTER TABLE raw_events_part RENAME CONSTRAINT pk_raw_events TO pk_part")
        op.execute(
            "ALTER TABLE raw_events_part RENAME CONSTRAINT "
            "uq_raw_events_job_id_event_id_job_month TO uq_part"
        )
        op.execute("ALTER INDEX ix_raw_events_job_id_id RENAME TO ix_part_job_id_id")
        op.execute("ALTER SEQUENCE raw_events_id_seq OWNED BY NONE")
        op.execute(
            "CREATE TABLE raw_events ("
            " id BIGINT NOT NULL DEFAULT nextval('raw_events_id_seq'),"
            " event_id VARCHAR(64) NOT NULL, job_id VARCHAR(128) NOT NULL,"
            " type VARCHAR(32) NOT NULL, attempt INTEGER, ts FLOAT NOT NULL,"
            " received_at FLOAT NOT NULL, payload JSONB NOT NULL,"
            " CONSTRAINT pk_raw_events PRIMARY KEY (id),"
            " CONSTRAINT uq_raw_events_job_id_event_id UNIQUE (job_id, event_id))"
        )
        op.execute("ALTER SEQUENCE raw_events_id_seq OWNED BY raw_events.id")
        op.execute(f"INSERT INTO raw_events ({_COLS}) SELECT {_COLS} FROM raw_events_part")
        op.execute("CREATE INDEX ix_raw_events_job_id_id ON raw_events (job_id, id)")
        op.execute("DROP TABLE raw_events_part CASCADE")
    else:
        with op.batch_alter_table("raw_events", schema=None) as batch_op:
            batch_op.drop_constraint("uq_raw_events_job_id_event_id_job_month", type_="unique")
            batch_op.create_unique_constraint(
                "uq_raw_events_job_id_event_id", ["job_id", "event_id"]
            )
            batch_op.drop_column("job_month")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("raw_pruned_at")
