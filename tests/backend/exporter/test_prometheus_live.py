"""A real Prometheus scrapes a live `ett serve`: its recording rules agree with the REST API, the
live gauges follow an open job, and every PromQL expression of the Grafana dashboard runs.

The fleet (small_fleet.py) lies within the hour before the test, so the 1h, 1d and 7d windows of
the recording rules and of REST hold the same finished jobs. Each model is made known (its
job_submitted) and scraped at zero before its jobs finish, as in production, where a model is
known from its first event long before a job of it finishes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from backend.alerts.slos import DEFAULT_SLOS_FILE as SHIPPED_SLOS
from tests.backend.exporter import small_fleet
from tests.backend.exporter.live_stack import LiveStack, wait_for
from tests.conftest import DIALECTS, empty_database

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "dashboards"
WINDOWS = {"1h": 3600.0, "1d": 86400.0, "7d": 7 * 86400.0}
FINISHED = 3


@pytest.fixture(scope="module", params=DIALECTS)
def stack(
    request: pytest.FixtureRequest, _databases: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveStack]:
    """ett serve + Prometheus on a database holding the small fleet's three finished jobs."""
    from backend.auth import service

    db = _databases.get(request.param)
    empty_database(db)
    with db.session() as s:
        _, read = service.create(db_session=s, name="prometheus", scope="read")
        _, ingest = service.create(db_session=s, name="agents", scope="ingest")
    live = LiveStack(
        workdir=tmp_path_factory.mktemp(f"prom-{request.param}"),
        database_url=db.url,
        read_token=read,
        ingest_token=ingest,
    )
    try:
        live.start()
        now = time.time()
        jobs = [
            small_fleet.finished_a(now - 3000),
            small_fleet.finished_b(now - 2900),
            small_fleet.finished_c(now - 2800),
        ]
        live.post(small_fleet.submissions(jobs))
        wait_for(
            "two scrapes of the models' zero ledger series",
            lambda: live.scalar("min(count_over_time(ett_gpu_seconds_total[1m])) >= 2"),
        )
        answer = live.post(small_fleet.rest_of(jobs) + [{"event_id": "bad", "job_id": "a-1"}])
        assert answer["accepted"] == sum(len(j.events) - 1 for j in jobs)
        assert len(answer["rejected"]) == 1
        wait_for(
            "the finished jobs in the ledger",
            lambda: live.scalar("sum(ett_finished_jobs_total)") == FINISHED,
        )
        yield live
    finally:
        live.close()


# REST rounds its answers (docs/API.md): percentages to 2 decimals, GPU-hours to 3, shares to 4.
PCT, GPU_H, SHARE = 5e-3, 5e-4, 5e-5


def _whole_days(since: float) -> dict[str, str]:
    """The UTC days from the one holding `since` through today, as an inclusive date range."""
    day = time.strftime("%Y-%m-%d", time.gmtime(since))
    return {"start": day, "end": time.strftime("%Y-%m-%d", time.gmtime())}


def _converged(stack: LiveStack, expr: str, expected: float, rel: float = 1e-9) -> float:
    """The rule's value once it has been evaluated on the newest scrape (bounded wait)."""

    def probe() -> float | None:
        got = stack.scalar(expr)
        return got if got is not None and abs(got - expected) <= rel * abs(expected) else None

    try:
        return wait_for(f"{expr} = {expected}", probe, timeout_s=20.0)
    except AssertionError:
        return stack.scalar(expr) or float("nan")


def test_scrape_needs_and_uses_the_bearer_token(stack: LiveStack) -> None:
    """/metrics refuses a scrape without a token; Prometheus' target (with one) is up."""
    assert stack.http.get(stack.ett_url + "/metrics").status_code == 401
    wait_for("the ett target up", lambda: stack.scalar('up{job="ett"}') == 1.0)
    targets = stack.http.get(stack.prom_url + "/api/v1/targets").json()["data"]["activeTargets"]
    assert [t["labels"]["job"] for t in targets] == ["ett"]
    assert targets[0]["scrapeUrl"] == stack.ett_url + "/metrics"


def test_ledger_equals_gpus_times_wall_time(stack: LiveStack) -> None:
    """Summed over components, ett_gpu_seconds_total is GPUs x E2E of each model's jobs."""
    jobs = stack.rest("/api/v1/jobs", limit=100)
    rows = jobs["jobs"] if isinstance(jobs, dict) else jobs
    expected: dict[str, float] = {}
    effective: dict[str, float] = {}
    for j in rows:
        expected[j["model"]] = expected.get(j["model"], 0.0) + j["gpus"] * j["e2e_s"]
        effective[j["model"]] = effective.get(j["model"], 0.0) + j["gpus"] * j["effective_s"]
    got = stack.by("sum by (model) (ett_gpu_seconds_total)", "model")
    assert set(got) == set(expected) == {"m-a", "m-b", "m-c"}
    for model, value in expected.items():
        assert got[model] == pytest.approx(value, rel=1e-6)
    eff = stack.by(
        'sum by (model) (ett_gpu_seconds_total{component="effective_training"})', "model"
    )
    for model, value in effective.items():
        assert eff[model] == pytest.approx(value, rel=1e-6)
    # The counters themselves (no window, no extrapolation) in REST's GPU-hours.
    week = _whole_days(time.time() - 7 * 86400)
    fleet = stack.rest("/api/v1/fleet/ett", **week)["total"]
    assert stack.scalar("sum(ett_gpu_seconds_total) / 3600") == pytest.approx(
        fleet["wall_gpu_h"], abs=GPU_H
    )
    lost = stack.by(
        'sum by (component) (ett_gpu_seconds_total{component!="effective_training"}) / 3600 > 0',
        "component",
    )
    rows = stack.rest("/api/v1/fleet/lost", by="component", **week)["rows"]
    assert lost == pytest.approx({r["component"]: r["gpu_h"] for r in rows}, abs=GPU_H)
    assert stack.scalar('sum(ett_job_failures_total{kind="preemption"})') == 1.0
    assert stack.scalar('sum(ett_job_failures_total{kind="app_error"})') == 1.0
    assert stack.scalar('sum(ett_ingest_events_total{outcome="rejected"})') == 1.0


@pytest.mark.parametrize("window", list(WINDOWS))
def test_recording_rules_agree_with_rest(stack: LiveStack, window: str) -> None:
    """Fleet and per-model ETT%, and lost GPU-time shares by component and owner, for 1h/1d/7d."""
    # REST reads day rollups and answers only whole UTC days (docs/API.md); every job of the
    # stack ran within the last hour, so the days holding the window hold the same jobs.
    span = _whole_days(time.time() - WINDOWS[window])
    fleet = stack.rest("/api/v1/fleet/ett", **span)["total"]["ett_pct"]
    got = _converged(stack, f"100 * ett:ett_ratio:rate{window}", fleet, rel=1e-4)
    assert got == pytest.approx(fleet, abs=PCT), f"fleet ETT% over {window}"
    for model in ("m-a", "m-b", "m-c"):
        rest = stack.rest("/api/v1/fleet/ett", model=model, **span)["total"]["ett_pct"]
        expr = f'100 * model:ett_ratio:rate{window}{{model="{model}"}}'
        got = _converged(stack, expr, rest, rel=1e-4)
        assert got == pytest.approx(rest, abs=PCT), (model, window)
    for by in ("component", "owner"):
        rows = stack.rest("/api/v1/fleet/lost", by=by, **span)["rows"]
        rest_share = {r[by]: r["share"] for r in rows}
        prom = stack.by(f"{by}:ett_lost_gpu_seconds:increase{window}", by)
        total = sum(prom.values())
        prom_share = {k: v / total for k, v in prom.items() if v > 0}
        assert prom_share == pytest.approx(rest_share, abs=SHARE), (by, window)


def ensure_live_job(stack: LiveStack) -> None:
    """Add the open job once (16 GPUs of m-a) and wait until Prometheus has scraped it."""
    if stack.scalar("sum(ett_running_jobs)") != 1.0:
        stack.post(small_fleet.live(time.time() - 300).events)
        wait_for(
            "the open job in ett_running_jobs", lambda: stack.scalar("sum(ett_running_jobs)") == 1.0
        )


def test_live_gauges_follow_an_open_job_the_ledger_does_not(stack: LiveStack) -> None:
    """An open job shows in the running gauges, never in the finished-jobs ledger."""
    before = stack.scalar("sum(ett_gpu_seconds_total)")
    ensure_live_job(stack)
    assert stack.scalar("sum(ett_running_job_gpus)") == 16.0
    assert stack.scalar("sum(ett_gpu_seconds_total)") == before
    assert stack.scalar("sum(ett_finished_jobs_total)") == FINISHED
    assert stack.scalar("max(ett_recompute_queue_jobs)") == 0.0
    assert stack.scalar("max(ett_ingest_lag_seconds)") < 120


def _unguarded_slo_file(workdir: Path) -> Path:
    """The shipped SLOs without their volume guards: the small fleet has one job per model."""
    doc = yaml.safe_load(SHIPPED_SLOS.read_text(encoding="utf-8"))
    for slo in doc["slos"]:
        slo["min_jobs"] = 0
        slo["min_gpu_hours"] = 0
    path = workdir / "slos-unguarded.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _evaluate_alerts(stack: LiveStack) -> None:
    """One pass of the project's own SLO evaluator, so open alerts exist (m-b is below 80%)."""
    ett = Path(sys.executable).with_name("ett")
    env = stack.env() | {
        "ETT_ALERTS_ENABLED": "true",
        "ETT_SLOS_FILE": str(_unguarded_slo_file(stack.workdir)),
    }
    subprocess.run(
        [str(ett), "alerts", "evaluate"], env=env, check=True, timeout=60, capture_output=True
    )
    wait_for("open alerts scraped", lambda: stack.scalar("sum(ett_open_alerts)"))


def dashboard_exprs(doc: dict[str, Any]) -> list[tuple[int, str]]:
    """(panel id, expr) of every target of every panel, rows' nested panels included."""
    out = []
    for p in doc["panels"]:
        for inner in [p, *p.get("panels", [])]:
            out += [(inner["id"], t["expr"]) for t in inner.get("targets", [])]
    return out


def substitute(expr: str, values: dict[str, str]) -> str:
    """Grafana's template variables replaced as Grafana would (All -> the allValue regex)."""
    fixed = {"__range": "1h", "__rate_interval": "1m", "__interval": "15s", "__range_s": "3600"}
    out = re.sub(r"\$(__\w+)", lambda m: fixed[m.group(1)], expr)
    return re.sub(r"\$(\w+)", lambda m: values[m.group(1)], out)


def test_every_dashboard_expression_runs_and_returns_data(stack: LiveStack) -> None:
    """With All selected every query answers series; with one value picked each still parses."""
    ensure_live_job(stack)
    _evaluate_alerts(stack)
    for path in sorted(DASHBOARD.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        variables = [v["name"] for v in doc["templating"]["list"]]
        everything = {v: ".*" for v in variables}
        one = {
            v: stack.http.get(f"{stack.prom_url}/api/v1/label/{v}/values").json()["data"][0]
            for v in variables
        }
        exprs = dashboard_exprs(doc)
        assert len(exprs) >= 20
        empty = []
        for pid, expr in exprs:
            if not stack.query(substitute(expr, everything)):
                empty.append((pid, expr))
            stack.query(substitute(expr, one))  # raises when it does not parse
        assert not empty, f"{path.name}: expressions with no data: {empty}"
