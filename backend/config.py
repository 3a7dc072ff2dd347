"""Settings, read from the environment (prefix ETT_) or passed explicitly in tests."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from backend.db import IDLE_IN_TRANSACTION_TIMEOUT_S, LOCK_TIMEOUT_S, POOL_TIMEOUT_S
from backend.liveness import ABANDON_TIMEOUT_S, HEARTBEAT_TIMEOUT_S

# The values of the enumerated settings: anything else fails at start, naming these.
RecomputeMode = Literal["inline", "background"]
ServeRole = Literal["all", "api", "worker"]
LogLevel = Literal["critical", "error", "warning", "info", "debug"]


def normalize_database_url(url: str) -> str:
    """Point plain postgres URLs at the psycopg 3 driver; leave other URLs as they are."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


# A job whose events (or open run to now) span longer is quarantined, not accounted.
MAX_JOB_SPAN_S = 366 * 86_400.0


class Settings(BaseSettings):
    """Every knob of the service; environment variables are ETT_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="ETT_", extra="ignore", env_file=None)

    home: Path = Field(default_factory=lambda: Path.home() / ".ett")
    database_url: str = ""
    read_token_required: bool = False
    max_batch_events: int = 10_000
    max_body_bytes: int = 5 * 1024 * 1024
    # A running attempt silent this long is taken for dead (backend/liveness.py).
    heartbeat_timeout_s: float = Field(default=HEARTBEAT_TIMEOUT_S, gt=0)
    # An open job silent this long ends at its last event, flagged abandoned (SPEC section 4).
    abandon_timeout_s: float = Field(default=ABANDON_TIMEOUT_S, gt=0)
    owners_file: Path | None = None
    slos_file: Path | None = None
    public_url: str = "http://127.0.0.1:8050"
    # inline: recompute touched jobs in the ingest request; background: a worker thread drains marks.
    recompute_mode: RecomputeMode = "background"
    recompute_interval_s: float = 1.0
    alert_eval_interval_s: float = 60.0
    # Queued notices and due redeliveries are sent this often between evaluation passes.
    alert_delivery_interval_s: float = 5.0
    alerts_enabled: bool = True
    # Live state (docs/ALERTS.md, "Live states"): the live pass pages hangs this often, under
    # its own lease; crash loop = k failed attempts in a row that never pass the high-water
    # cursor; restart storm = N attempts started within T seconds.
    live_eval_interval_s: float = Field(default=10.0, gt=0)
    live_crash_loop_attempts: int = Field(default=3, ge=1)
    live_restart_storm_attempts: int = Field(default=5, ge=2)
    live_restart_storm_window_s: float = Field(default=3600.0, gt=0)
    # Learned bounds: max(floor, factor x percentile) of a key's most recent max_samples
    # samples, once it has min_samples; refreshed from finished jobs this often.
    bounds_percentile: float = Field(default=95.0, gt=0, le=100)
    bounds_factor: float = Field(default=3.0, gt=0)
    bounds_floor_s: float = Field(default=60.0, ge=0)
    bounds_min_samples: int = Field(default=10, ge=1)
    bounds_max_samples: int = Field(default=200, ge=1)
    bounds_refresh_interval_s: float = Field(default=300.0, gt=0)
    # The longest a silence may last (REST and dashboard alike); ETT_SILENCE_MAX_DURATION_S.
    silence_max_duration_s: float = Field(default=30 * 86400.0, gt=0, le=366 * 86400.0)
    log_level: LogLevel = "info"
    # What `ett serve` runs when --role is not given: "all" (API, dashboard and the workers in
    # one process), "api" (API and dashboard only; `ett worker` processes do the rest) or
    # "worker" (the workers alone).
    serve_role: ServeRole = "all"
    # /metrics exports this many models under their own name (oldest first); the rest are "other".
    metrics_max_models: int = Field(default=50, ge=0)
    # /metrics exports the owner mapping's teams and this many models' teams (first seen first)
    # under their own name; the rest are team="other" (ingest's labels.owner is unbounded).
    metrics_max_teams: int = Field(default=50, ge=0)
    # The range every read and page answers when none is given: the last N whole UTC days,
    # today included (docs/API.md).
    default_range_days: int = Field(default=180, ge=1, le=3_660)
    # Read bounds (SPEC: every read is bounded; over a bound the API answers 422 naming it).
    max_series_points: int = 1_000  # buckets in one series: day -> 1,000 days, week -> 7,000
    max_range_days: float = 3_660.0  # any range without a bucket (lost, models, jobs, ...)
    max_page_limit: int = 5_000  # the largest `limit` (or `*_limit`) a read accepts
    max_offset: int = 1_000_000  # the largest `offset`: page with filters beyond it
    max_rows: int = 10_000  # rows in one answer or CSV export
    # Times an event may carry, and reads may name, in epoch seconds (2000-01-01 .. 2100-01-01).
    event_time_min: float = 946_684_800.0
    event_time_max: float = 4_102_444_800.0
    # Ingest: retries of a batch whose transaction hit a deadlock or serialization failure.
    ingest_retries: int = 5
    # Ingest: events a model-scoped token may have waiting per job before its job_submitted.
    max_held_events_per_job: int = Field(default=10_000, ge=0)
    # Postgres (docs/SCALING.md, "A frozen process"): ingest's and recompute's row-lock waits
    # give up after this long (503 with Retry-After); a session idle inside a transaction this
    # long is ended by the server, which releases its locks (a frozen worker's claim); a request
    # waits this long for a pooled connection, then is answered 503. 0 = no bound.
    lock_timeout_s: float = Field(default=LOCK_TIMEOUT_S, ge=0)
    idle_in_transaction_timeout_s: float = Field(default=IDLE_IN_TRANSACTION_TIMEOUT_S, ge=0)
    db_pool_timeout_s: float = Field(default=POOL_TIMEOUT_S, ge=0)
    # `ett serve` (docs/SCALING.md, "Serving without a proxy"): a request's head must arrive
    # within the header timeout and its body within the body timeout (else 408); an idle
    # kept-alive connection is closed after the keep-alive timeout; past the connection cap a
    # new connection displaces the oldest one still waiting for a request head. 0 = no bound.
    http_header_timeout_s: float = Field(default=10.0, ge=0)
    http_body_timeout_s: float = Field(default=60.0, ge=0)
    http_keep_alive_timeout_s: int = Field(default=5, ge=1)
    http_max_connections: int = Field(default=4096, ge=16)
    # Recompute: a job whose events (or open run to now) span longer is not accounted but
    # quarantined with the reason, its events kept (the rollups write a row per day it spans).
    max_job_span_s: float = Field(default=MAX_JOB_SPAN_S, gt=0)
    # Recompute: a job whose computation fails waits this long (doubling per failure, capped).
    quarantine_backoff_s: float = 30.0
    quarantine_backoff_max_s: float = 3_600.0

    @field_validator("recompute_mode", "log_level", "serve_role", mode="before")
    @classmethod
    def _any_case(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _default_database(self) -> Settings:
        if not self.database_url:
            self.database_url = f"sqlite:///{self.home / 'ett.db'}"
        self.database_url = normalize_database_url(self.database_url)
        return self

    @property
    def is_sqlite(self) -> bool:
        """True when the database is the embedded SQLite file."""
        return self.database_url.startswith("sqlite")


class SettingsError(ValueError):
    """The environment holds a setting the service cannot run with; the message says which."""


def describe_settings_error(err: ValidationError) -> str:
    """One line per bad setting: its variable, the value given and what it accepts."""
    lines = []
    for e in err.errors():
        name = "ETT_" + "_".join(str(part) for part in e["loc"]).upper()
        given = f"={e['input']!r}" if not isinstance(e.get("input"), dict) else ""
        lines.append(f"{name}{given}: {e['msg']}")
    return "invalid settings: " + "; ".join(lines)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings singleton; SettingsError names any bad ETT_ variable."""
    try:
        return Settings()
    except ValidationError as err:
        raise SettingsError(describe_settings_error(err)) from None
