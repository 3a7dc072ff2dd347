"""One question, one number: every surface answers the same as the metrics layer and an oracle.

Surfaces: REST (JSON), REST CSV (`format=csv`), the dashboard's data functions, the alert
indicators and `/metrics` (its ledger holds finished jobs only, so it is asked only about models
and teams whose jobs are all finished, over a range covering them all). The oracle is computed
here from the stored per-job results (whole jobs, GPUs NULL counted as 1): over a range covering
every job it must equal the day-split answers. Run on both databases, over the demo fleet and
over a hand-built fleet with a job of unknown GPU count, an open job and days cut by midnight.
"""

from __future__ import annotations

import csv
import io
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from backend.alerts import indicators
from backend.alerts.slos import SloSpec
from backend.config import Settings
from backend.db import Database
from backend.ett.models import JobResult
from backend.fleet.days import DAY_S, day_start
from backend.jobs.models import Job, Model
from dashboard import data
from dashboard.filters import Filters
from tests.backend.fleet.fleet_jobs import Job as Wire
from tests.dashboard.conftest import dashboard_request, seed_demo

# The REST name of the "team that owns a model" filter (issue 14 renames owner -> team; the
# integrator flips this one line if the rename lands).
TEAM_PARAM = "team"
PCT_TOL = 0.05  # points: answers may be rounded to 0.1 or finer
GPU_H_TOL = 0.02  # relative... and absolute GPU-hours, whichever is larger (see `agree`)
EFFECTIVE = "effective_training"


def agree(answers: dict[str, float | None], *, tol: float, rel: float = 0.0) -> float:
    """Every surface's number is the same (within rounding); returns it. Fails naming them."""
    values = [v for v in answers.values() if v is not None]
    assert len(values) == len(answers), f"a surface had no answer: {answers}"
    ref = values[0]
    bad = {k: v for k, v in answers.items() if abs(v - ref) > max(tol, rel * abs(ref))}
    assert not bad, f"surfaces disagree: {answers}"
    return ref


def test_agree_fails_when_one_surface_differs() -> None:
    """The comparison can fail: one surface off by more than rounding is named."""
    with pytest.raises(AssertionError, match="disagree"):
        agree({"rest": 86.2, "dashboard": 86.1, "alerts": 90.7}, tol=PCT_TOL)
    with pytest.raises(AssertionError, match="no answer"):
        agree({"rest": 86.2, "csv": None}, tol=PCT_TOL)
    assert agree({"rest": 86.21, "csv": 86.2}, tol=PCT_TOL) == 86.21


# ---- the hand-built fleet ----------------------------------------------------------------------


def hand_built(now: float) -> list[Wire]:
    """Two teams' models; a job whose GPU count no event names (NULL: counted as 1 GPU); an open
    job still training today; jobs cut by midnight; a failure."""
    today = day_start(now)
    t = today - DAY_S - 3 * 3600  # 21:00 UTC two days back: crosses into yesterday
    a1 = Wire("cons-a1")
    a1.add("job_submitted", ts=t, model="cons-a", gpus=2, labels={"owner": "team-a"})
    a1.add("attempt_started", 0, ts=t + 600)
    a1.phase(0, "trainer_init", t + 600, t + 1800)
    a1.progress(0, t + 1800, t + 9000, 0, 7200)
    a1.add("failure", 0, ts=t + 9000, kind="app_error")
    a1.add("attempt_ended", 0, ts=t + 9000, reason="failure")
    a1.add("attempt_started", 1, ts=t + 12_000)
    a1.phase(1, "trainer_init", t + 12_000, t + 13_000)
    a1.progress(1, t + 13_000, t + 20_000, 6000, 13_000)
    a1.add("attempt_ended", 1, ts=t + 20_000, reason="completed")
    a1.add("job_ended", ts=t + 20_100, status="succeeded")
    # No job_submitted and no GPU count anywhere: jobs.gpus is NULL; long and mostly lost, so
    # excluding it (or weighing it 0) moves every fleet number well past rounding.
    n = Wire("cons-nogpus")
    u = t + 3600
    n.add("attempt_started", 0, ts=u)
    n.phase(0, "trainer_init", u, u + 30_000)
    n.progress(0, u + 30_000, u + 40_000, 0, 10_000)
    n.add("attempt_ended", 0, ts=u + 40_000, reason="completed")
    n.add("job_ended", ts=u + 40_100, status="succeeded")
    b1 = Wire("cons-b1")
    v = today - DAY_S + 3600
    b1.add("job_submitted", ts=v, model="cons-b", gpus=1, labels={"owner": "team-b"})
    b1.add("attempt_started", 0, ts=v + 1200)
    b1.progress(0, v + 1800, v + 5400, 0, 3600)
    b1.add("attempt_ended", 0, ts=v + 5400, reason="completed")
    b1.add("job_ended", ts=v + 5500, status="succeeded")
    # Open: submitted yesterday evening, still training in today's (partial) bucket.
    live = Wire("cons-b-live")
    w = min(today - 2 * 3600, now - 7200)
    live.add("job_submitted", ts=w, model="cons-b", gpus=4, labels={"owner": "team-b"})
    live.add("attempt_started", 0, ts=w + 300)
    live.phase(0, "trainer_init", w + 300, w + 900)
    live.progress(0, w + 900, now - 600, 0, now - 600 - w - 900)
    return [a1, n, b1, live]


# ---- the surfaces ------------------------------------------------------------------------------


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Surfaces:
    """Asks one question of every surface over [lo, hi) (whole UTC days)."""

    def __init__(
        self, client: TestClient, settings: Settings, database: Database, lo: float, hi: float
    ) -> None:
        self.client, self.settings, self.database = client, settings, database
        self.lo, self.hi = lo, hi
        self.range = {"start": _iso(lo), "end": _iso(hi)}
        self.filters = Filters(
            start=datetime.fromtimestamp(lo, UTC).date(),
            end=datetime.fromtimestamp(hi, UTC).date() - timedelta(days=1),
            bucket="day",
        )
        assert self.filters.start_ts == lo and self.filters.end_ts == hi
        self._ledger: dict[tuple[str, str, str, str], float] | None = None

    # REST and CSV
    def get(self, path: str, **params: Any) -> Any:
        """GET /api/v1 JSON."""
        r = self.client.get(f"/api/v1{path}", params={**self.range, **params})
        assert r.status_code == 200, r.text
        return r.json()

    def csv(self, path: str, **params: Any) -> list[dict[str, str]]:
        """GET /api/v1 CSV rows."""
        r = self.client.get(f"/api/v1{path}", params={**self.range, **params, "format": "csv"})
        assert r.status_code == 200, r.text
        return list(csv.DictReader(io.StringIO(r.text)))

    def csv_ett(self, **params: Any) -> tuple[float | None, float]:
        """(ETT%, lost GPU-h) from the fleet ETT% CSV's per-bucket rows."""
        rows = self.csv("/fleet/ett", **params)
        wall = sum(float(r["wall_gpu_h"] or 0) for r in rows)
        eff = sum(float(r["effective_gpu_h"] or 0) for r in rows)
        lost = sum(float(r["lost_gpu_h"] or 0) for r in rows)
        return (100.0 * eff / wall if wall > 0 else None), lost

    # the dashboard's data functions
    def dash(self, fn: Callable[..., Any], *args: Any, **filters: Any) -> Any:
        """Call a dashboard data function in a request bound to the test database."""
        f = Filters(**{**self.filters.__dict__, **filters})
        with dashboard_request(self.settings, self.database):
            return fn(*args, f)

    # the alert indicators
    def alert(self, indicator: str, component: str, **spec: Any) -> float | None:
        """The indicator's value over the window [lo, hi]."""
        slo = SloSpec.model_validate(
            {
                "name": "consistency",
                "owner": "test",
                "component": component,
                "indicator": indicator,
                "objective": 50,
                "window": self.hi - self.lo,
                # no volume guard: the number itself is compared, whatever the fleet's size
                "min_jobs": 0,
                "min_gpu_hours": 0,
                **spec,
            }
        )
        with self.database.session() as s:
            evals = indicators.measure(s, slo, self.hi)
        assert len(evals) == 1, evals
        return evals[0].value

    # /metrics
    def ledger(self) -> dict[tuple[str, str, str, str], float]:
        """Net booked GPU-seconds per (model, team, component, phase) from GET /metrics."""
        if self._ledger is None:
            r = self.client.get("/metrics")
            assert r.status_code == 200, r.text
            net: dict[tuple[str, str, str, str], float] = defaultdict(float)
            self.owner_of: dict[tuple[str, str], str] = {}
            for fam in text_string_to_metric_families(r.text):
                for smp in fam.samples:
                    lb = smp.labels
                    if smp.name == "ett_gpu_seconds_total":
                        net[(lb["model"], lb["team"], lb["component"], lb["phase"])] += smp.value
                    elif smp.name == "ett_gpu_seconds_corrections_total":
                        sign = 1.0 if lb["sign"] == "added" else -1.0
                        key = (lb["model"], lb["team"], lb["component"], lb["phase"])
                        net[key] += sign * smp.value
                    elif smp.name == "ett_phase_owner_info":
                        self.owner_of[(lb["component"], lb["phase"])] = lb["owner"]
            self._ledger = dict(net)
        return self._ledger

    def ledger_sum(self, **match: str) -> tuple[float | None, float]:
        """(ETT%, lost GPU-h) of the ledger series matching model= / team= / owner=."""
        eff = wall = 0.0
        owner = match.pop("owner", None)
        for (model, team, comp, phase), v in self.ledger().items():
            if match.get("model") not in (None, model) or match.get("team") not in (None, team):
                continue
            if owner is not None and (comp == EFFECTIVE or self.owner_of[(comp, phase)] != owner):
                continue
            wall += v
            eff += v if comp == EFFECTIVE else 0.0
        return (100.0 * eff / wall if wall > 0 else None), (wall - eff) / 3600.0


# ---- the oracle --------------------------------------------------------------------------------


def oracle(database: Database, *, models: set[str] | None = None) -> tuple[float, float]:
    """(ETT%, lost GPU-h) of whole jobs from the stored results: sum(effective x gpus) /
    sum(E2E x gpus), a job's GPU count NULL (no event named it) counted as 1."""
    eff = wall = 0.0
    with database.session() as s:
        for model, gpus, e2e, effective in s.execute(
            select(JobResult.model, Job.gpus, JobResult.e2e_s, JobResult.effective_s).join(
                Job, Job.job_id == JobResult.job_id
            )
        ):
            if models is not None and model not in models:
                continue
            g = gpus if gpus is not None else 1
            wall += e2e * g
            eff += effective * g
    return 100.0 * eff / wall, (wall - eff) / 3600.0


def finished_models(database: Database) -> tuple[set[str], dict[str, set[str]]]:
    """Models whose jobs are all final, and each team's models."""
    open_, all_ = set(), set()
    teams: dict[str, set[str]] = defaultdict(set)
    with database.session() as s:
        for model, provisional in s.execute(select(JobResult.model, JobResult.provisional)):
            if model:
                all_.add(model)
                if provisional:
                    open_.add(model)
        for name, owner in s.execute(select(Model.name, Model.owner)):
            if owner:
                teams[owner].add(name)
    return all_ - open_, teams


# ---- the questions -----------------------------------------------------------------------------


def ask_everything(
    q: Surfaces, database: Database, *, model: str, team: str, owner: str, component: str
) -> dict[str, float]:
    """Fleet ETT%, one model's ETT% and lost GPU-h, one team's and one owner's lost GPU-h and one
    component's lost GPU-h, through every surface; returns the agreed numbers."""
    finals, teams = finished_models(database)
    out: dict[str, float] = {}

    # Fleet ETT% for the range.
    fleet = q.get("/fleet/ett")
    csv_pct, csv_lost = q.csv_ett()
    fleet_view = q.dash(data.fleet_view)
    fleet_answers = {
        "rest": fleet["total"]["ett_pct"],
        "csv": csv_pct,
        "dashboard": fleet_view.headline["ett_pct"],
        "alerts": q.alert("gpu_time_share", EFFECTIVE),
        "oracle": oracle(database)[0],
    }
    if all(m in finals for m in teams_models(database)):
        fleet_answers["metrics"] = q.ledger_sum()[0]
    out["fleet_ett_pct"] = agree(fleet_answers, tol=PCT_TOL)
    agree(
        {
            "rest": fleet["total"]["lost_gpu_h"],
            "csv": csv_lost,
            "dashboard": fleet_view.headline["gpu_hours_lost"],
            "oracle": oracle(database)[1],
        },
        tol=GPU_H_TOL,
        rel=1e-4,
    )

    # One model's ETT% and lost GPU-hours.
    page = q.get(f"/models/{model}")
    listed = {r["model"]: r for r in q.get("/models", limit=1000)["models"]}[model]
    listed_csv = {r["model"]: r for r in q.csv("/models", limit=1000)}[model]
    m_ett = q.get("/fleet/ett", model=model)["total"]
    m_csv_pct, m_csv_lost = q.csv_ett(model=model)
    m_page = q.dash(data.model_page, model)
    m_table = q.dash(data.models_table).set_index("model").loc[model]
    m_fleet = q.dash(data.fleet_view, model=model).headline
    pct_answers = {
        "rest /models/{m}": page["ett_pct"],
        "rest /models": listed["ett_pct"],
        "rest /fleet/ett": m_ett["ett_pct"],
        "csv /models": float(listed_csv["ett_pct"]),
        "csv /fleet/ett": m_csv_pct,
        "dashboard model page": m_page["ett_pct"],
        "dashboard models table": float(m_table["ett_pct"]),
        "dashboard fleet page": m_fleet["ett_pct"],
        "alerts": q.alert("ett_floor", EFFECTIVE, model=model),
        "oracle": oracle(database, models={model})[0],
    }
    lost_answers = {
        "rest /models/{m}": page["lost_gpu_h"],
        "rest /models": listed["lost_gpu_h"],
        "rest /fleet/ett": m_ett["lost_gpu_h"],
        "rest /fleet/lost": q.get("/fleet/lost", model=model)["total_gpu_h"],
        "csv /models": float(listed_csv["lost_gpu_h"]),
        "csv /fleet/ett": m_csv_lost,
        "csv /fleet/lost": sum(float(r["gpu_h"]) for r in q.csv("/fleet/lost", model=model)),
        "dashboard model page": m_page["lost_gpu_h"],
        "dashboard models table": float(m_table["lost_gpu_h"]),
        "dashboard fleet page": m_fleet["gpu_hours_lost"],
        "oracle": oracle(database, models={model})[1],
    }
    assert model in finals, f"pick a model whose jobs are all finished, not {model}"
    pct_answers["metrics"], lost_answers["metrics"] = q.ledger_sum(model=model)
    out["model_ett_pct"] = agree(pct_answers, tol=PCT_TOL)
    out["model_lost_gpu_h"] = agree(lost_answers, tol=GPU_H_TOL, rel=1e-4)

    # One team's lost GPU-hours (the team that owns models).
    team_models = teams[team]
    team_answers = {
        "rest /fleet/lost": q.get("/fleet/lost", **{TEAM_PARAM: team})["total_gpu_h"],
        "rest /fleet/ett": q.get("/fleet/ett", **{TEAM_PARAM: team})["total"]["lost_gpu_h"],
        "rest /models": sum(
            r["lost_gpu_h"] for r in q.get("/models", limit=1000, **{TEAM_PARAM: team})["models"]
        ),
        "csv /fleet/lost": sum(
            float(r["gpu_h"]) for r in q.csv("/fleet/lost", **{TEAM_PARAM: team})
        ),
        "dashboard fleet page": q.dash(data.fleet_view, team=team).headline["gpu_hours_lost"],
        "oracle": oracle(database, models=team_models)[1],
    }
    if team_models <= finals:
        team_answers["metrics"] = q.ledger_sum(team=team)[1]
    out["team_lost_gpu_h"] = agree(team_answers, tol=GPU_H_TOL, rel=1e-4)

    # One owner's lost GPU-hours (the team that owns a component or phase), fleet-wide and
    # inside the finished model (where /metrics can answer too).
    def owner_row(rows: list[dict[str, Any]]) -> float:
        return sum(float(r["gpu_h"]) for r in rows if r["owner"] == owner)

    frame = q.dash(data.owner_components)
    owner_answers = {
        "rest": owner_row(q.get("/fleet/lost", by="owner")["rows"]),
        "csv": owner_row(q.csv("/fleet/lost", by="owner")),
        "dashboard": float(frame[frame["owner"] == owner]["gpu_h"].sum()),
    }
    out["owner_lost_gpu_h"] = agree(owner_answers, tol=GPU_H_TOL, rel=1e-4)
    frame_m = q.dash(data.owner_components, model=model)
    agree(
        {
            "rest": owner_row(q.get("/fleet/lost", by="owner", model=model)["rows"]),
            "csv": owner_row(q.csv("/fleet/lost", by="owner", model=model)),
            "dashboard": float(frame_m[frame_m["owner"] == owner]["gpu_h"].sum()),
            "metrics": q.ledger_sum(model=model, owner=owner)[1],
        },
        tol=GPU_H_TOL,
        rel=1e-4,
    )

    # One component's lost GPU-hours: the alert's share of wall GPU-time times the wall.
    rest_comp = {r["component"]: r["gpu_h"] for r in q.get("/fleet/lost")["rows"]}
    share = q.alert("gpu_time_share", component)
    out["component_lost_gpu_h"] = agree(
        {
            "rest": rest_comp.get(component, 0.0),
            "csv": sum(
                float(r["gpu_h"]) for r in q.csv("/fleet/lost") if r["component"] == component
            ),
            "alerts": (share or 0.0) / 100.0 * fleet["total"]["wall_gpu_h"],
            "dashboard": float(
                fleet_view.lost_by_component.query("component == @component")["gpu_h"].sum()
            ),
        },
        tol=GPU_H_TOL,
        rel=1e-4,
    )
    return out


def teams_models(database: Database) -> set[str]:
    """Every model with a stored job."""
    with database.session() as s:
        return {m for m in s.scalars(select(JobResult.model).distinct()) if m}


# ---- the tests ---------------------------------------------------------------------------------


def test_hand_built_fleet_answers_one_number_everywhere(
    client: TestClient,
    settings: Settings,
    database: Database,
    post: Callable[[list[dict[str, Any]]], Any],
) -> None:
    now = time.time()
    jobs = hand_built(now)
    r = post([e for j in jobs for e in j.events])
    assert r.status_code in (200, 202), r.text
    with database.session() as s:
        stored = {
            r.job_id: r
            for r in s.execute(select(JobResult.job_id, JobResult.gpus, JobResult.provisional))
        }
    # No event names cons-nogpus's size: the engine stores it as 1 GPU, the rule every aggregate
    # applies to a NULL count (docs/METRICS.md).
    assert not any("gpus" in e for e in jobs[1].events)
    assert stored["cons-nogpus"].gpus == 1 and stored["cons-b-live"].provisional is True

    today = day_start(now)
    lo, hi = today - 3 * DAY_S, today + DAY_S
    q = Surfaces(client, settings, database, lo, hi)
    got = ask_everything(
        q,
        database,
        model="cons-a",
        team="team-a",
        owner=owner_of_trainer_init(q),
        component="trainer_init",
    )
    # The NULL-GPU job counts as 1 GPU: weighing it 0 (or leaving it out) gives another number.
    without = fleet_pct_without(database, "cons-nogpus")
    assert abs(got["fleet_ett_pct"] - without) > 1.0

    # Partial buckets: today is still in progress; the earlier whole days are not partial.
    series = q.get("/fleet/ett")["series"]
    assert [p["partial"] for p in series] == [False, False, False, True]
    weekly = q.get("/fleet/ett", bucket="week")["series"]
    assert weekly[-1]["partial"] is True
    fails = q.get("/fleet/failures")["series"]
    assert [p["partial"] for p in fails] == [False, False, False, True]
    view = q.dash(data.fleet_view)
    assert bool(view.series["partial"].iloc[-1]) and not view.series["partial"].iloc[0]


def owner_of_trainer_init(q: Surfaces) -> str:
    """The team the owner mapping in force gives trainer_init (the busiest lost component here)."""
    rows = q.get("/fleet/lost", by="owner")["rows"]
    return next(r["owner"] for r in rows if "trainer_init" in r["components"])


def fleet_pct_without(database: Database, job_id: str) -> float:
    """The fleet ETT% a rule that drops this job would answer."""
    eff = wall = 0.0
    with database.session() as s:
        for jid, gpus, e2e, effective in s.execute(
            select(JobResult.job_id, JobResult.gpus, JobResult.e2e_s, JobResult.effective_s)
        ):
            if jid != job_id:
                wall += e2e * gpus
                eff += effective * gpus
    return 100.0 * eff / wall


def test_demo_fleet_answers_one_number_everywhere(
    client: TestClient, settings: Settings, database: Database
) -> None:
    now = seed_demo(database, settings)
    finals, teams = finished_models(database)
    model = sorted(finals)[0]
    team = next(t for t, ms in sorted(teams.items()) if model in ms)
    today = day_start(now)
    with database.session() as s:
        first = min(s.scalars(select(JobResult.submitted_at)))
    lo, hi = day_start(first), today + DAY_S
    q = Surfaces(client, settings, database, lo, hi)
    got = ask_everything(
        q, database, model=model, team=team, owner=owner_of_trainer_init(q), component="scheduling"
    )
    assert 0 < got["fleet_ett_pct"] < 100 and got["model_lost_gpu_h"] > 0
    assert datetime.fromtimestamp(hi - 1, UTC).date() == q.filters.end
