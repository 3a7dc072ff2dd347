"""GET /metrics: formats, access, the ledger's booking and corrections, cardinality, health."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from backend.app import create_app
from backend.config import Settings
from backend.db import Database
from backend.exporter.collector import DatabaseCollector
from backend.health import reject_reason, route_template
from tests.backend.exporter import small_fleet
from tests.conftest import post_events

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of a text exposition, keyed by (name, sorted labels)."""
    out: Samples = {}
    for fam in parse_text(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(found: Samples, name: str, **match: str) -> float:
    """The sum of a metric's samples whose labels include `match`."""
    return sum(
        v
        for (n, labels), v in found.items()
        if n == name and all(dict(labels).get(k) == x for k, x in match.items())
    )


def scrape(client: TestClient, **headers: str) -> Samples:
    """GET /metrics in the text format, parsed."""
    r = client.get("/metrics", headers=headers)
    assert r.status_code == 200, r.text
    return samples(r.text)


@pytest.fixture
def fleet(post: Callable[[list[dict[str, Any]]], Any]) -> float:
    """The three finished jobs of small_fleet; returns their base time."""
    t = time.time() - 4000
    jobs = [
        small_fleet.finished_a(t),
        small_fleet.finished_b(t + 10),
        small_fleet.finished_c(t + 20),
    ]
    assert post([e for j in jobs for e in j.events]).status_code == 200
    return t


def test_text_and_openmetrics_by_accept_header(client: TestClient, fleet: float) -> None:
    """Prometheus text by default, OpenMetrics when asked; both parse with the official parsers."""
    text = client.get("/metrics")
    assert text.headers["content-type"].startswith("text/plain; version=0.0.4")
    names = {f.name for f in parse_text(text.text)}
    assert {"ett_gpu_seconds", "ett_running_jobs", "ett_http_request_duration_seconds"} <= names
    om = client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert om.headers["content-type"].startswith("application/openmetrics-text")
    assert om.text.endswith("# EOF\n")
    fams = {f.name: f for f in parse_openmetrics(om.text)}
    assert fams["ett_gpu_seconds"].type == "counter"
    assert fams["ett_recompute_queue_jobs"].type == "gauge"


def test_metrics_is_not_the_dashboard_page(settings: Settings, database: Database) -> None:
    """With the dashboard mounted at /, /metrics still answers the exposition."""
    app = create_app(settings, database=database, start_workers=False, with_dashboard=True)
    with TestClient(app) as c:
        r = c.get("/metrics")
    assert r.status_code == 200
    assert "# TYPE ett_gpu_seconds_total counter" in r.text
    assert "<html" not in r.text.lower()


def test_read_token_required(
    settings: Settings, database: Database, make_token: Callable[..., str]
) -> None:
    """ETT_READ_TOKEN_REQUIRED=true: no token 401, an ingest token 403, a read token 200."""
    locked = settings.model_copy(update={"read_token_required": True})
    app = create_app(locked, database=database, start_workers=False, with_dashboard=True)
    with TestClient(app) as c:
        assert c.get("/metrics").status_code == 401
        ingest = make_token("ingest")
        assert c.get("/metrics", headers={"Authorization": f"Bearer {ingest}"}).status_code == 403
        read = make_token("read")
        r = c.get("/metrics", headers={"Authorization": f"Bearer {read}"})
    assert r.status_code == 200
    assert "ett_exporter_database_up 1.0" in r.text


def test_ledger_is_gpus_times_wall_time_of_finished_jobs(
    client: TestClient, fleet: float, post: Callable[[list[dict[str, Any]]], Any]
) -> None:
    """Summed over components each model's ledger is GPUs x E2E; an open job is not in it."""
    assert post(small_fleet.live(time.time() - 300).events).status_code == 200
    found = scrape(client)
    jobs = client.get("/api/v1/jobs", params={"limit": 100}).json()["jobs"]
    finished = [j for j in jobs if not j["provisional"]]
    assert len(finished) == 3 and len(jobs) == 4
    for model in ("m-a", "m-b", "m-c"):
        mine = [j for j in finished if j["model"] == model]
        wall = sum(j["gpus"] * j["e2e_s"] for j in mine)
        eff = sum(j["gpus"] * j["effective_s"] for j in mine)
        assert total(found, "ett_gpu_seconds_total", model=model) == pytest.approx(wall)
        assert total(
            found, "ett_gpu_seconds_total", model=model, component="effective_training"
        ) == pytest.approx(eff)
    assert total(found, "ett_finished_jobs_total") == 3
    assert total(found, "ett_job_failures_total", kind="preemption", model="m-b") == 1
    assert total(found, "ett_running_jobs", model="m-a") == 1
    assert total(found, "ett_running_job_gpus", model="m-a") == 16
    assert total(found, "ett_gpu_seconds_total", team="ranking") == pytest.approx(8 * 1360)


def test_a_recompute_that_changes_the_past_books_corrections(
    client: TestClient, fleet: float, post: Callable[[list[dict[str, Any]]], Any]
) -> None:
    """A late checkpoint moves 100 s x 8 GPUs of a-1 from effective to checkpoint_blocking:
    the booked counter stays, the correction counters carry the change, net = the new truth."""
    before = scrape(client)
    late = {
        "event_id": "a-1-late",
        "job_id": "a-1",
        "type": "checkpoint",
        "attempt": 0,
        "start": fleet + 1000,
        "blocking_end": fleet + 1100,
    }
    assert post([late]).json()["accepted"] == 1
    after = scrape(client)
    eff = {"model": "m-a", "component": "effective_training"}
    blk = {"model": "m-a", "component": "wasted_training", "phase": "checkpoint_blocking"}
    for key in (eff, blk):
        assert total(after, "ett_gpu_seconds_total", **key) == total(
            before, "ett_gpu_seconds_total", **key
        )
    corr = "ett_gpu_seconds_corrections_total"
    assert total(after, corr, sign="removed", **eff) == pytest.approx(800)
    assert total(after, corr, sign="added", **blk) == pytest.approx(800)
    assert total(after, corr, sign="added", **eff) == 0
    net = total(after, "ett_gpu_seconds_total", **eff) - total(after, corr, sign="removed", **eff)
    jobs = client.get("/api/v1/jobs", params={"model": "m-a"}).json()["jobs"]
    assert net == pytest.approx(jobs[0]["effective_s"] * 8)
    # Every counter only grew.
    for key, value in before.items():
        if key[0].endswith("_total"):
            assert after.get(key, 0.0) >= value, key


def test_zero_series_exist_before_a_model_finishes_a_job(
    client: TestClient, post: Callable[[list[dict[str, Any]]], Any]
) -> None:
    """A model known from a job_submitted already exports its ledger at 0 (Prometheus then
    sees the first finished job as an increase)."""
    post(small_fleet.submissions([small_fleet.finished_b(time.time() - 100)]))
    found = scrape(client)
    key = (
        "ett_gpu_seconds_total",
        (("component", "effective_training"), ("model", "m-b"), ("phase", ""), ("team", "ads")),
    )
    assert found[key] == 0.0
    assert found[("ett_finished_jobs_total", (("model", "m-b"), ("team", "ads")))] == 0.0
    assert total(found, "ett_job_failures_total", model="m-b") == 0.0
    kinds = {dict(k[1])["kind"] for k in found if k[0] == "ett_job_failures_total"}
    assert kinds == {"preemption", "app_error", "infra", "induced", "unknown"}


def test_models_beyond_the_cap_are_folded_into_other(
    settings: Settings, database: Database, fleet: float
) -> None:
    """ETT_METRICS_MAX_MODELS=1: the oldest model keeps its name, the rest are model="other"."""
    capped = settings.model_copy(update={"metrics_max_models": 1})
    app = create_app(capped, database=database, start_workers=False, with_dashboard=False)
    with TestClient(app) as c:
        found = scrape(c)
    models = {dict(k[1]).get("model") for k in found if k[0] == "ett_gpu_seconds_total"}
    assert models == {"m-a", "other"}
    assert total(found, "ett_gpu_seconds_total", model="other") == pytest.approx(
        2 * 1300 + 4 * 1100
    )
    assert total(found, "ett_exporter_models", exported="folded") == 2


def test_labels_are_bounded(
    client: TestClient, post: Callable[[list[dict[str, Any]]], Any]
) -> None:
    """No job id in any label; unknown custom phases fold into "other"; routes are templates."""
    j = small_fleet.finished_a(time.time() - 2000, job_id="job-with-a-unique-id")
    j.phase(0, "custom.never_configured", j.events[0]["ts"] + 60, j.events[0]["ts"] + 90)
    post(j.events)
    assert client.get("/api/v1/jobs/job-with-a-unique-id/ett").status_code == 200
    r = client.get("/metrics")
    assert "job-with-a-unique-id" not in r.text
    assert "custom.never_configured" not in r.text
    assert 'route="/api/v1/jobs/{job_id}/ett"' in r.text
    phases = {dict(k[1]).get("phase") for k in samples(r.text) if k[0] == "ett_gpu_seconds_total"}
    assert "other" in phases


def test_ingest_outcomes_are_counted(
    client: TestClient, post: Callable[[list[dict[str, Any]]], Any]
) -> None:
    """Accepted, duplicate and rejected (by reason) events each count once."""
    before = scrape(client)
    events = small_fleet.finished_b(time.time() - 2000).events[:3]
    post(events)
    post(events[:1] + [{"event_id": "x", "job_id": "b-1", "type": "bogus"}])
    after = scrape(client)

    def delta(**m: str) -> float:
        return total(after, "ett_ingest_events_total", **m) - total(
            before, "ett_ingest_events_total", **m
        )

    assert delta(outcome="accepted") == 3
    assert delta(outcome="duplicate") == 1
    assert delta(outcome="rejected", reason="type") == 1


def test_reject_reasons_and_route_templates_are_bounded() -> None:
    """Reasons are field or rule names from a fixed set; an unmatched path is never a label."""
    assert reject_reason("ts: 'x' is not an RFC 3339 time") == "ts"
    assert reject_reason("conflicting_duplicate") == "conflicting_duplicate"
    assert reject_reason("user-supplied nonsense: 12") == "other"
    assert route_template({"path": "/api/v1/no/such/path"}) == "unmatched"
    assert route_template({"path": "/some/page"}) == "dashboard"


def test_a_database_error_still_answers(tmp_path: Any, settings: Settings) -> None:
    """When the database cannot be read the scrape says so in ett_exporter_database_up 0."""
    broken = Database(f"sqlite:///{tmp_path / 'missing' / 'no.db'}")
    fams = list(DatabaseCollector(broken, settings).collect())
    assert [(f.name, [s.value for s in f.samples]) for f in fams] == [
        ("ett_exporter_database_up", [0.0])
    ]


def test_metrics_answers_with_a_token_through_the_ingest_helper(
    client: TestClient, ingest_token: str
) -> None:
    """The request-latency histogram counts ingest requests under their template."""
    post_events(client, ingest_token, [])
    found = scrape(client)
    assert (
        total(
            found, "ett_http_request_duration_seconds_count", route="/api/v1/events", method="POST"
        )
        >= 1
    )


def test_a_path_parameter_with_slashes_stays_out_of_the_route_label(
    client: TestClient, post: Callable[[list[dict[str, Any]]], Any]
) -> None:
    """`{job_id:path}` may hold slashes; the label is still the template."""
    post(small_fleet.finished_b(time.time() - 2000, job_id="team/run/7").events)
    assert client.get("/api/v1/jobs/team/run/7/ett").status_code == 200
    text = client.get("/metrics").text
    assert 'route="/api/v1/jobs/{job_id}/ett"' in text
    assert "team/run/7" not in text


def test_recompute_queue_lag_and_failures(
    client: TestClient,
    database: Database,
    fleet: float,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A marked job shows as queue depth and lag; a recompute that raises counts a failure."""
    from sqlalchemy import update

    from backend.jobs.models import Job
    from backend.results import recompute

    with database.session() as s:
        s.execute(
            update(Job).where(Job.job_id == "b-1").values(dirty=True, updated_at=time.time() - 30)
        )
        s.commit()
    before = scrape(client)
    assert total(before, "ett_recompute_queue_jobs") == 1
    assert 30 <= total(before, "ett_recompute_lag_seconds") < 300

    def broken(**_kw: Any) -> Any:
        raise RuntimeError("engine bug")

    monkeypatch.setattr(recompute, "compute_parts", broken)
    with database.session() as s:
        assert recompute.recompute_dirty(db_session=s, settings=settings) == 0
    after = scrape(client)
    assert (
        total(after, "ett_recompute_failures_total")
        == total(before, "ett_recompute_failures_total") + 1
    )
    assert total(after, "ett_recompute_queue_jobs") == 1  # it stays marked


def test_alert_deliveries_are_counted_by_channel_kind_and_outcome(
    client: TestClient, database: Database
) -> None:
    """Each delivery attempt the alert service logs is counted once."""
    from backend.alerts.delivery import Channel, DeliveryAttempt
    from backend.alerts.dispatch import record_attempt

    before = scrape(client)
    record = record_attempt(database, [(None, None)])
    hook = Channel(kind="slack", target="http://127.0.0.1:9/hook", owner="data", name="chat")
    record(
        DeliveryAttempt(
            channel=hook, attempt=1, started_at=time.time(), duration_s=0.1, outcome="retry"
        )
    )
    record(
        DeliveryAttempt(
            channel=hook, attempt=2, started_at=time.time(), duration_s=0.1, outcome="delivered"
        )
    )
    after = scrape(client)
    for outcome in ("retry", "delivered"):
        key = ("ett_alert_deliveries_total", (("channel", "slack"), ("outcome", outcome)))
        assert after[key] == before[key] + 1
    # Every (channel kind, outcome) exists from the start, so a first failure is an increase.
    kinds = {dict(k[1])["channel"] for k in after if k[0] == "ett_alert_deliveries_total"}
    assert kinds == {"webhook", "slack", "email", "alertmanager"}


def test_teams_outside_the_mapping_and_past_the_cap_are_folded_into_other(
    settings: Settings,
    database: Database,
    fleet: float,
    post: Callable[[list[dict[str, Any]]], Any],
) -> None:
    """ETT_METRICS_MAX_TEAMS=2: the first two teams and the owner mapping's teams keep their
    names; every other labels.owner ingest sends (here 120 invented ones) is team="other", so
    the series do not grow with the owners sent."""
    flood = [
        {
            "event_id": f"s-{i}",
            "job_id": f"flood-{i}",
            "type": "job_submitted",
            "ts": fleet + 30,
            "model": f"flood-{i}",
            "gpus": 1,
            "labels": {"owner": "data" if i == 7 else f"invented-{i}"},
        }
        for i in range(120)
    ]
    assert post(flood).status_code == 200
    capped = settings.model_copy(update={"metrics_max_teams": 2, "metrics_max_models": 200})
    app = create_app(capped, database=database, start_workers=False, with_dashboard=False)
    with TestClient(app) as c:
        found = scrape(c)
    teams = {dict(k[1]).get("team") for k in found if k[0] == "ett_gpu_seconds_total"}
    # ranking and ads are the first two teams seen; data is a team of the owner mapping.
    assert teams == {"ranking", "ads", "data", "other"}
    for name in ("ett_finished_jobs_total", "ett_job_failures_total", "ett_live_ett_ratio"):
        assert {dict(k[1]).get("team") for k in found if k[0] == name} <= teams
    # m-c's team (search, the third seen) is folded, with its booked GPU-seconds.
    assert total(found, "ett_gpu_seconds_total", model="m-c", team="other") > 0
    assert total(found, "ett_gpu_seconds_total", model="m-c", team="search") == 0
    assert total(found, "ett_exporter_teams", exported="own") == 3
    assert total(found, "ett_exporter_teams", exported="folded") == 120 - 1 + 1
