"""The database-backed collector: every replica reading the same database exports the same numbers.

Families (docs/PROMETHEUS.md lists each with its labels):
- the ledger of finished jobs: `ett_gpu_seconds_total`, `ett_job_failures_total`,
  `ett_finished_jobs_total` and the correction counters `..._corrections_total{sign}`;
- what is live: running jobs and their GPUs by current component, open alerts, lags, the queue;
- the live states at the scrape's instant (backend/live): jobs and GPUs by state, the bad ones
  by model, team and owner, and rolling ETT% over 1h, 6h and 24h (open jobs included);
- joins for PromQL: `ett_phase_owner_info` (the owner mapping in force) and
  `ett_model_ett_objective_ratio` (the ETT% SLO objective that applies to each model).

Cardinality: model is capped by ETT_METRICS_MAX_MODELS (the oldest models keep their name, the
rest are folded into model="other", so a model never moves between series); team keeps its name
when the owner mapping names it or when it is among the first ETT_METRICS_MAX_TEAMS teams seen
(the teams of the oldest models), every other team is team="other" (ingest decides labels.owner,
so any ingest token could otherwise make a series per owner it invents); phase is one of the
owner mapping's names (catalogue phases, waste kinds, configured custom phases), an unknown
sub-stage is folded into its nearest known ancestor and anything else into phase="other".
Every (model, team) gets all its ledger series at zero from the moment its model is known, so
the first finished job of a model is an increase Prometheus sees, not a new series' first value.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.config import Settings
from backend.db import Database
from backend.ett.catalogue import FAILURE_KINDS
from backend.ett.models import JobInterval, JobResult
from backend.events.models import RawEvent
from backend.fleet.models import FAILURES, GPU_SECONDS, LedgerEntry
from backend.jobs.models import Job, Model
from backend.live import service as live_service
from backend.live.state import STATES
from backend.metrics.core import gpus_of, interval_gpus
from backend.metrics.window import rolling_ett
from backend.owners import service as owners_service
from backend.owners.mapping import Resolver

log = logging.getLogger("ett.metrics")

OTHER = "other"
UNKNOWN = "unknown"


class PhaseFolder:
    """Maps a stored phase to its exported label: a known name, its known ancestor, or 'other'."""

    def __init__(self, resolver: Resolver) -> None:
        self.pairs = sorted({(r["component"], r["phase"] or "") for r in resolver.rows()})
        self.known = {p for _c, p in self.pairs}

    def __call__(self, phase: str) -> str:
        """The exported phase label of a stored phase name ('' stays '': no phase)."""
        name = phase
        while name:
            if name in self.known:
                return name
            if "." not in name:
                break
            name = name.rsplit(".", 1)[0]
        return "" if not phase else OTHER


class ModelFolder:
    """Maps a model to its exported label: its own name for the first N models, else 'other'."""

    def __init__(self, ordered_models: Iterable[str], max_models: int) -> None:
        self.kept = set(list(ordered_models)[: max(max_models, 0)])

    def __call__(self, model: str) -> str:
        """The exported model label."""
        if not model:
            return UNKNOWN
        return model if model in self.kept else OTHER


class TeamFolder:
    """Maps a model's team to its exported label: kept teams by name, the rest 'other'.

    Kept: every team the owner mapping names (its owners), and the first `max_teams` teams in
    the order their models were first seen. No team: 'unknown'.
    """

    def __init__(self, ordered_teams: Iterable[str | None], max_teams: int, mapped: set[str]):
        first: list[str] = []
        seen: set[str] = set()
        for team in ordered_teams:
            if team and team not in seen:
                seen.add(team)
                first.append(team)
        self.kept = set(first[: max(max_teams, 0)]) | mapped
        self.known = len(seen)
        self.own = len(seen & self.kept)

    def __call__(self, team: str | None) -> str:
        """The exported team label."""
        if not team:
            return UNKNOWN
        return team if team in self.kept else OTHER


class AlertFacts(Protocol):
    """What the exporter shows of the alert evaluator, read by the alerts package that owns it.

    The composition root passes `backend.alerts.exported` in; the exporter imports no other
    consumer (docs/ARCHITECTURE.md).
    """

    def open_alert_counts(self, db_session: Session) -> Iterable[tuple[str, str, str, int]]:
        """(owner, severity, state, count) of the pending and firing alerts."""
        ...

    def ett_floor_slos(self, db_session: Session, settings: Settings) -> list[dict[str, Any]]:
        """The enabled ett_floor SLOs as {name, owner, objective, model}."""
        ...


class DatabaseCollector(Collector):
    """Reads the ledger and the live state on each scrape (one short read-only session)."""

    def __init__(
        self, database: Database, settings: Settings, *, alerts: AlertFacts | None = None
    ) -> None:
        self.database = database
        self.settings = settings
        self.alerts = alerts

    def describe(self) -> list[Metric]:
        """Nothing at registration: describing would need the database."""
        return []

    def collect(self) -> Iterator[Metric]:
        """All database-backed families; on a database error only `ett_exporter_database_up 0`."""
        started = time.perf_counter()
        up = GaugeMetricFamily(
            "ett_exporter_database_up", "1 when the last scrape could read the database."
        )
        try:
            # A read-only session: on SQLite it reads a WAL snapshot and never waits for the
            # write lock, so a long write (a recompute, a prune) does not hold the scrape.
            with self.database.read_session() as s:
                families = list(self._families(s, time.time()))
                s.rollback()
        except Exception:  # noqa: BLE001 - a scrape must answer even when the database does not
            log.exception("metrics scrape could not read the database")
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield from families
        yield up
        took = GaugeMetricFamily(
            "ett_exporter_collect_duration_seconds",
            "Time the last scrape spent reading the database.",
        )
        took.add_metric([], time.perf_counter() - started)
        yield took

    # ---- the families -------------------------------------------------------------------------

    def _families(self, s: Session, now: float) -> Iterator[Metric]:
        resolver = owners_service.resolver(db_session=s, settings=self.settings)
        phases = PhaseFolder(resolver)
        model_rows = [
            (n, o)
            for n, o in s.execute(
                select(Model.name, Model.owner).order_by(Model.created_at, Model.name)
            )
        ]
        models = ModelFolder((n for n, _o in model_rows), self.settings.metrics_max_models)
        mapped = {r["owner"] for r in resolver.rows() if r["owner"]}
        teams = TeamFolder((o for _n, o in model_rows), self.settings.metrics_max_teams, mapped)
        label_sets = {(models(n), teams(o)) for n, o in model_rows}
        yield from self._ledger(s, models, teams, phases, label_sets, resolver)
        yield from self._objectives(s, model_rows, models, teams)
        yield from self._running(s, models, teams, phases)
        yield from self._live(s, models, teams, dict(model_rows), now)
        yield from self._alerts(s)
        yield from self._lags(s, now)
        kept = GaugeMetricFamily(
            "ett_exporter_models",
            "Models known, by whether they are exported under their own name or folded into "
            'model="other" (ETT_METRICS_MAX_MODELS).',
            labels=["exported"],
        )
        n_own = sum(1 for n, _o in model_rows if models(n) == n)
        kept.add_metric(["own"], float(n_own))
        kept.add_metric(["folded"], float(len(model_rows) - n_own))
        yield kept
        kept_teams = GaugeMetricFamily(
            "ett_exporter_teams",
            "Models' teams known, by whether they are exported under their own name (named by "
            'the owner mapping or among the first ETT_METRICS_MAX_TEAMS) or folded into team="other".',
            labels=["exported"],
        )
        kept_teams.add_metric(["own"], float(teams.own))
        kept_teams.add_metric(["folded"], float(teams.known - teams.own))
        yield kept_teams

    def _ledger(
        self,
        s: Session,
        models: ModelFolder,
        teams: TeamFolder,
        phases: PhaseFolder,
        label_sets: set[tuple[str, str]],
        resolver: Resolver,
    ) -> Iterator[Metric]:
        gpu: dict[tuple[str, ...], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        fail: dict[tuple[str, ...], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        jobs: dict[tuple[str, str], float] = defaultdict(float)
        pairs = set(phases.pairs)
        rows = s.execute(
            select(
                LedgerEntry.series,
                LedgerEntry.model,
                LedgerEntry.team,
                LedgerEntry.key1,
                LedgerEntry.key2,
                func.sum(LedgerEntry.booked),
                func.sum(LedgerEntry.added),
                func.sum(LedgerEntry.removed),
            ).group_by(
                LedgerEntry.series,
                LedgerEntry.model,
                LedgerEntry.team,
                LedgerEntry.key1,
                LedgerEntry.key2,
            )
        )
        for series, model, team, key1, key2, booked, added, removed in rows:
            m, t = models(model), teams(team)
            label_sets.add((m, t))
            if series == GPU_SECONDS:
                ph = phases(key2)
                pairs.add((key1, ph))
                acc = gpu[(m, t, key1, ph)]
            elif series == FAILURES:
                acc = fail[(m, t, key1)]
            else:
                continue
            acc[0] += booked or 0.0
            acc[1] += added or 0.0
            acc[2] += removed or 0.0
        for model, team, n in s.execute(
            select(
                LedgerEntry.model, LedgerEntry.team, func.count(func.distinct(LedgerEntry.job_id))
            )
            .where(LedgerEntry.series == GPU_SECONDS, LedgerEntry.booked > 0)
            .group_by(LedgerEntry.model, LedgerEntry.team)
        ):
            jobs[(models(model), teams(team))] += float(n)

        for m, t in label_sets:
            for comp, ph in pairs:
                gpu[(m, t, comp, ph)]  # noqa: B018 - zero series from the start (see module doc)
            for kind in FAILURE_KINDS:
                fail[(m, t, kind)]  # noqa: B018
            jobs[(m, t)] += 0.0

        booked_gpu = CounterMetricFamily(
            "ett_gpu_seconds",
            "GPU-seconds of finished jobs by model, team, component and phase, booked when a "
            "job's final result is first stored; effective GPU-seconds are "
            'component="effective_training".',
            labels=["model", "team", "component", "phase"],
        )
        corr_gpu = CounterMetricFamily(
            "ett_gpu_seconds_corrections",
            "Changes to finished jobs' booked GPU-seconds made by later recomputes: "
            'sign="added" or "removed" (net = booked + added - removed).',
            labels=["model", "team", "component", "phase", "sign"],
        )
        for key, (b, a, r) in sorted(gpu.items()):
            booked_gpu.add_metric(list(key), b)
            corr_gpu.add_metric([*key, "added"], a)
            corr_gpu.add_metric([*key, "removed"], r)
        booked_fail = CounterMetricFamily(
            "ett_job_failures",
            "Failures of finished jobs by model, team and kind, booked with the job.",
            labels=["model", "team", "kind"],
        )
        corr_fail = CounterMetricFamily(
            "ett_job_failures_corrections",
            "Changes to finished jobs' booked failures made by later recomputes.",
            labels=["model", "team", "kind", "sign"],
        )
        for key, (b, a, r) in sorted(fail.items()):
            booked_fail.add_metric(list(key), b)
            corr_fail.add_metric([*key, "added"], a)
            corr_fail.add_metric([*key, "removed"], r)
        finished = CounterMetricFamily(
            "ett_finished_jobs", "Finished jobs booked into the ledger.", labels=["model", "team"]
        )
        for key, n in sorted(jobs.items()):
            finished.add_metric(list(key), n)
        owners = GaugeMetricFamily(
            "ett_phase_owner_info",
            "The owner mapping in force: the team and system owning each exported (component, "
            "phase); join on (component, phase) to group GPU-seconds by owner.",
            labels=["component", "phase", "owner", "system"],
        )
        for comp, ph in sorted(pairs):
            if comp == "effective_training":
                continue
            p = ph or None
            owners.add_metric([comp, ph, resolver.owner(comp, p), resolver.system(comp, p)], 1.0)
        yield from (booked_gpu, corr_gpu, booked_fail, corr_fail, finished, owners)

    def _objectives(
        self, s: Session, model_rows: list[Any], models: ModelFolder, teams: TeamFolder
    ) -> Iterator[Metric]:
        specs = [] if self.alerts is None else self.alerts.ett_floor_slos(s, self.settings)
        fam = GaugeMetricFamily(
            "ett_model_ett_objective_ratio",
            "The ETT% objective (as a ratio) of the ett_floor SLO that applies to each model, "
            "with that SLO's name and owner (the highest when several apply).",
            labels=["model", "team", "slo", "owner"],
        )
        best: dict[tuple[str, str], tuple[float, str, str]] = {}
        every: tuple[float, str, str] | None = None  # the best SLO that applies to all models
        named: dict[str, tuple[float, str, str]] = {}
        for spec in specs:
            cand = (spec["objective"] / 100.0, spec["name"], spec["owner"])
            if spec["model"] is None:
                every = cand if every is None or cand > every else every
            elif spec["model"] not in named or cand > named[spec["model"]]:
                named[spec["model"]] = cand
        for name, team in model_rows if (every is not None or named) else ():
            cands = [c for c in (every, named.get(name)) if c is not None]
            if not cands:
                continue
            key, cand = (models(name), teams(team)), max(cands)
            if key not in best or cand > best[key]:
                best[key] = cand
        for (m, t), (obj, slo, owner) in sorted(best.items()):
            fam.add_metric([m, t, slo, owner], obj)
        yield fam

    def _running(
        self, s: Session, models: ModelFolder, teams: TeamFolder, phases: PhaseFolder
    ) -> Iterator[Metric]:
        last_end = (
            select(JobInterval.job_id, func.max(JobInterval.end).label("end"))
            .join(JobResult, JobResult.job_id == JobInterval.job_id)
            .where(JobResult.provisional.is_(True))
            .group_by(JobInterval.job_id)
            .subquery()
        )
        stmt = (
            select(
                JobResult.job_id,
                JobResult.model,
                Model.owner,
                JobResult.gpus,
                JobInterval.component,
                JobInterval.gpus,
            )
            .join(last_end, last_end.c.job_id == JobResult.job_id)
            .join(
                JobInterval,
                (JobInterval.job_id == last_end.c.job_id) & (JobInterval.end == last_end.c.end),
            )
            .outerjoin(Model, Model.name == JobResult.model)
        )
        seen: set[str] = set()
        count: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
        for job_id, model, team, gpus, comp, now_gpus in s.execute(stmt):
            if job_id in seen:
                continue
            seen.add(job_id)
            acc = count[(models(model or ""), teams(team), comp)]
            acc[0] += 1
            acc[1] += interval_gpus(now_gpus, gpus)  # its current attempt's GPUs
        jobs = GaugeMetricFamily(
            "ett_running_jobs",
            "Open jobs by model, team and the component their latest second is in.",
            labels=["model", "team", "component"],
        )
        gpus_fam = GaugeMetricFamily(
            "ett_running_job_gpus",
            "GPUs held by open jobs (their current attempt's), by model, team and current "
            "component.",
            labels=["model", "team", "component"],
        )
        for key, (n, g) in sorted(count.items()):
            jobs.add_metric(list(key), n)
            gpus_fam.add_metric(list(key), g)
        yield jobs
        yield gpus_fam

    def _live(
        self,
        s: Session,
        models: ModelFolder,
        teams: TeamFolder,
        team_of: dict[str, str | None],
        now: float,
    ) -> Iterator[Metric]:
        """The live states at this scrape's instant: a bound crossed since the last stored
        result is seen now, so an alert on them can fire within two scrape intervals of it."""
        jobs = live_service.live_jobs(s, self.settings, now)
        by_state = GaugeMetricFamily(
            "ett_live_jobs",
            "Open jobs by live state (queued, starting, training, checkpointing, hung, "
            "crash_looping, restart_storm, silent).",
            labels=["state"],
        )
        gpus = GaugeMetricFamily(
            "ett_live_gpus", "GPUs of the open jobs by live state.", labels=["state"]
        )
        counts = {k: [0.0, 0.0] for k in STATES}
        for j in jobs:
            acc = counts.setdefault(j.state.kind, [0.0, 0.0])
            acc[0] += 1
            acc[1] += gpus_of(j.state.gpus)
        for state, (n, g) in counts.items():
            by_state.add_metric([state], n)
            gpus.add_metric([state], g)
        bad_jobs = GaugeMetricFamily(
            "ett_live_bad_jobs",
            "Open jobs in a bad live state (hung, crash_looping, restart_storm, silent) by "
            "model, team and the owner the state pages.",
            labels=["model", "team", "owner", "state"],
        )
        bad_gpus = GaugeMetricFamily(
            "ett_live_bad_gpus",
            "GPUs of the open jobs in a bad live state, by model, team, owner and state.",
            labels=["model", "team", "owner", "state"],
        )
        bad: dict[tuple[str, str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
        for j in jobs:
            if j.state.bad:
                key = (models(j.state.model or ""), teams(j.team), j.owner or UNKNOWN, j.state.kind)
                bad[key][0] += 1
                bad[key][1] += gpus_of(j.state.gpus)
        for key, (n, g) in sorted(bad.items()):
            bad_jobs.add_metric(list(key), n)
            bad_gpus.add_metric(list(key), g)
        yield from (by_state, gpus, bad_jobs, bad_gpus)
        rolling = rolling_ett(db_session=s, now=now, windows=live_service.ROLLING_WINDOWS_S)
        folded: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
        for model, per in rolling.items():
            if model is None:
                continue
            for w, r in per.items():
                acc = folded[
                    (models(model), teams(team_of.get(model)), live_service.ROLLING_NAMES[w])
                ]
                acc[0] += r.wall_gpu_h
                acc[1] += r.effective_gpu_h
        ratio = GaugeMetricFamily(
            "ett_live_ett_ratio",
            "Each model's GPU-weighted ETT% (as a ratio) over the trailing 1h, 6h and 24h, open "
            "jobs' provisional time included (absent without GPU-time).",
            labels=["model", "team", "window"],
        )
        for key, (wall, eff) in sorted(folded.items()):
            if wall > 0:
                ratio.add_metric(list(key), eff / wall)
        fleet = GaugeMetricFamily(
            "ett_live_fleet_ett_ratio",
            "The fleet's GPU-weighted ETT% (as a ratio) over the trailing 1h, 6h and 24h, open "
            "jobs' provisional time included.",
            labels=["window"],
        )
        for w, r in rolling[None].items():
            if r.wall_gpu_h > 0:
                fleet.add_metric([live_service.ROLLING_NAMES[w]], r.effective_gpu_h / r.wall_gpu_h)
        yield from (ratio, fleet)

    def _alerts(self, s: Session) -> Iterator[Metric]:
        fam = GaugeMetricFamily(
            "ett_open_alerts",
            "Alerts of the project's own evaluator that are pending or firing, by owner and "
            "severity.",
            labels=["owner", "severity", "state"],
        )
        if self.alerts is not None:
            for owner, severity, state, n in self.alerts.open_alert_counts(s):
                fam.add_metric([owner, severity, state], float(n))
        yield fam

    def _lags(self, s: Session, now: float) -> Iterator[Metric]:
        newest = s.scalar(select(RawEvent.received_at).order_by(RawEvent.id.desc()).limit(1))
        oldest_mark = s.scalar(select(func.min(Job.updated_at)).where(Job.dirty.is_(True)))
        queued = s.scalar(select(func.count()).select_from(Job).where(Job.dirty.is_(True)))
        ingest = GaugeMetricFamily(
            "ett_ingest_lag_seconds",
            "Seconds since the newest accepted event arrived (absent before the first).",
        )
        if newest is not None:
            ingest.add_metric([], max(now - newest, 0.0))
        recompute = GaugeMetricFamily(
            "ett_recompute_lag_seconds",
            "Age of the oldest recompute mark: how far the stored answers trail ingest (0 when "
            "nothing waits).",
        )
        recompute.add_metric([], max(now - oldest_mark, 0.0) if oldest_mark is not None else 0.0)
        queue = GaugeMetricFamily(
            "ett_recompute_queue_jobs", "Jobs marked for recompute (the recompute queue's depth)."
        )
        queue.add_metric([], float(queued or 0))
        yield from (ingest, recompute, queue)
