"""The composition root's processes: settings, database and workers for each process role.

Roles (docs/SCALING.md, "Roles"):

- ``api``: the REST API, ingest and the dashboard; no periodic work.
- ``worker``: recompute of dirty jobs, rollups, alert evaluation and delivery; no HTTP server.
- ``all``: both in one process (the default of plain ``ett serve``, for SQLite and the demo).

Any number of ``api`` and ``worker`` processes run against one Postgres: recompute claims jobs
with SKIP LOCKED, alert evaluation takes a lease, delivery claims each notice.
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any, get_args

from backend.config import ServeRole, Settings, get_settings
from backend.db import Database
from backend.workers import PeriodicWorker

log = logging.getLogger("ett.runtime")

# The process roles are the serve_role setting's values (backend.config.ServeRole).
Role = ServeRole
ROLES: tuple[str, ...] = get_args(ServeRole)

WorkerFactory = Callable[[Settings, Database], PeriodicWorker | None]


def worker_factories() -> list[WorkerFactory]:
    """The periodic loops a worker runs: recompute, alert evaluation, the live pass, alert
    delivery, bound learning."""
    from backend.alerts.live import make_bounds_worker, make_live_evaluator
    from backend.alerts.scheduled import make_alert_evaluator, make_delivery_worker
    from backend.results.recompute import make_recompute_worker

    return [
        make_recompute_worker,
        make_alert_evaluator,
        make_live_evaluator,
        make_delivery_worker,
        make_bounds_worker,
    ]


def build_settings() -> Settings:
    """The process's settings (environment, prefix ETT_)."""
    return get_settings()


def build_database(settings: Settings) -> Database:
    """The database of these settings, with their pool wait and idle-in-transaction bounds."""
    if settings.is_sqlite:
        return Database(settings.database_url)
    return Database(
        settings.database_url,
        pool_timeout_s=settings.db_pool_timeout_s,
        idle_in_transaction_timeout_s=settings.idle_in_transaction_timeout_s,
    )


def resolve_role(role: str | None, settings: Settings) -> Role:
    """The role to run: the one asked for, else ETT_SERVE_ROLE (default "all")."""
    chosen = (role or settings.serve_role or "all").strip().lower()
    if chosen not in ROLES:
        raise ValueError(f"unknown role {chosen!r}: choose one of {', '.join(ROLES)}")
    return chosen  # type: ignore[return-value]


def build_workers(
    settings: Settings,
    database: Database,
    role: Role = "all",
    factories: Sequence[WorkerFactory] | None = None,
) -> list[PeriodicWorker]:
    """The workers of this role (none for "api"), built but not started."""
    if role == "api":
        return []
    made = (factory(settings, database) for factory in (factories or worker_factories()))
    return [w for w in made if w is not None]


def start_all(workers: Sequence[PeriodicWorker]) -> None:
    """Start every worker."""
    for worker in workers:
        worker.start()


def stop_all(workers: Sequence[PeriodicWorker], timeout: float = 10.0) -> None:
    """Stop every worker: all are asked at once, then each is joined."""
    for worker in workers:
        worker.request_stop()  # all asked before any is waited on
    for worker in workers:
        worker.stop(timeout)


def freeze_startup_heap() -> None:
    """Collect once, then move every object alive now out of the collector's generations.

    For a long-running process, called once it has built what it serves (modules, the app, the
    dashboard's layouts: about 250,000 objects). A full collection otherwise walks them all,
    about 180 ms each time, which under ingest came twice in every 150 requests of 1,000
    events: 2.3 ms a request on average (docs/PERFORMANCE.md). Frozen objects are never
    collected, so this is for process entry points, not for code a test runs in-process.
    """
    gc.collect()
    gc.freeze()


def run_workers(
    settings: Settings | None = None,
    *,
    database: Database | None = None,
    stop: threading.Event | None = None,
    check_schema: bool = True,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
) -> list[PeriodicWorker]:
    """Run the worker role until SIGTERM/SIGINT (or `stop` is set); returns the stopped workers.

    With metrics_port the process's own health (worker passes, recompute failures, alert
    deliveries) is served for Prometheus on http://metrics_host:metrics_port/metrics.
    """
    from backend import migrate

    settings = settings or build_settings()
    db = database or build_database(settings)
    if check_schema:
        migrate.check_schema(db.engine)
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    workers = build_workers(settings, db, "worker")
    server = _serve_process_metrics(metrics_host, metrics_port) if metrics_port else None
    start_all(workers)
    log.info("worker running: %s", ", ".join(w.name for w in workers) or "nothing")
    try:
        while not stop.wait(1.0):
            pass
    finally:
        stop_all(workers)
        if server is not None:
            server.shutdown()
        db.dispose()
    return workers


def _serve_process_metrics(host: str, port: int) -> Any:
    """A /metrics server for this process's health collectors (a worker has no app)."""
    from prometheus_client import CollectorRegistry, start_http_server

    from backend.health import PROCESS_COLLECTORS

    registry = CollectorRegistry(auto_describe=True)
    for collector in PROCESS_COLLECTORS:
        registry.register(collector)
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server
