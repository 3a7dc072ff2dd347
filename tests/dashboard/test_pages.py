"""Every page's layout on a seeded database (both dialects): the numbers equal the REST answers.

Layouts are called in-process inside a Flask request bound to the test database; the browser
tests (test_browser.py) then check the same pages render and navigate in Chromium.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from backend.config import Settings
from backend.db import Database
from dashboard.components import NO_DATA_HINT
from dashboard.pages import compare, fleet, job, live, models, owners
from dashboard.palette import COMPONENT_LABELS
from tests.dashboard.conftest import dashboard_request, find, ids, pct_matches, seed_demo, whole


def _range() -> tuple[str, str, dict[str, str]]:
    """Today and 13 days before it, as URL filters and as REST start/end (end exclusive)."""
    end = datetime.now(UTC).date()
    start = end - timedelta(days=13)
    rest = {
        "start": f"{start.isoformat()}T00:00:00Z",
        "end": f"{(end + timedelta(days=1)).isoformat()}T00:00:00Z",
    }
    return start.isoformat(), end.isoformat(), rest


def _text(tree: Any, element_id: str) -> str:
    node = find(tree, element_id)
    assert node is not None, f"no #{element_id} on the page"
    return node.children if isinstance(node.children, str) else str(node.children)


# The tests that only read share one demo fleet per dialect (conftest: `demo_db`, `seeded`,
# `api`). The test that writes seeds its own (`seeded_here`, `api_here`).
@pytest.fixture
def seeded_here(database: Database, settings: Settings) -> Settings:
    """The demo fleet in this test's own database, for a test that writes beside it."""
    seed_demo(database, settings)
    return settings


@pytest.fixture
def api_here(seeded_here: Settings, database: Database) -> Any:
    """A REST client over this test's own seeded database."""
    app = create_app(seeded_here, database=database, start_workers=False, with_dashboard=False)
    with TestClient(app) as c:
        yield c


def test_fleet_page_headline_equals_the_rest_answers(
    api: TestClient, seeded: Settings, demo_db: Database
) -> None:
    start, end, rest = _range()
    ett = api.get("/api/v1/fleet/ett", params=rest).json()
    failures = api.get("/api/v1/fleet/failures", params=rest).json()
    with dashboard_request(seeded, demo_db):
        page = whole(fleet, start=start, end=end)
    assert pct_matches(_text(page, "fleet-ett"), ett["total"]["ett_pct"])
    assert _text(page, "fleet-jobs") == f"{failures['total']['jobs']:,}"
    assert _text(page, "fleet-failures") == f"{failures['total']['failures']:,}"
    assert _text(page, "fleet-lost") == f"{ett['total']['lost_gpu_h']:,.0f}"
    trend = find(page, "fleet-trend-graph").figure
    drawn = [p for p in ett["series"] if p["ett_pct"] is not None]
    # Whole buckets on the solid line, partial ones (today, still in progress) hollow apart.
    complete = [p["ett_pct"] for p in drawn if not p["partial"]]
    partial = [p["ett_pct"] for p in drawn if p["partial"]]
    assert [y for y in trend.data[0].y if y is not None] == pytest.approx(complete, abs=5e-3)
    # Today is still in progress, so its bucket is partial; just after midnight it may hold no
    # GPU-time yet, and then nothing is drawn hollow.
    assert ett["series"][-1]["partial"]
    if partial:
        assert list(trend.data[-1].y) == pytest.approx(partial, abs=5e-3)
    level1 = find(page, "fleet-level1-graph").figure
    assert {t.name for t in level1.data} >= {"TTS", "TTR"}
    assert {
        "fleet-lost-component-graph",
        "fleet-lost-owner-graph",
        "fleet-nof-graph",
        "fleet-regressions-graph",
        "fleet-top-models-graph",
    } <= ids(page)


def test_fleet_page_filters_by_model_and_label(
    api: TestClient, seeded: Settings, demo_db: Database
) -> None:
    start, end, rest = _range()
    expected = api.get(
        "/api/v1/fleet/ett", params={**rest, "model": "model-a", "label": "variant=baseline"}
    ).json()
    with dashboard_request(seeded, demo_db):
        page = whole(fleet, start=start, end=end, model="model-a", label="variant=baseline")
        unknown = whole(fleet, start=start, end=end, owner="no-such-team")
    assert pct_matches(_text(page, "fleet-ett"), expected["total"]["ett_pct"])
    assert find(page, "fleet-filter-label").value == "variant=baseline"
    assert find(page, "fleet-filter-model").value == "model-a"
    assert "no-such-team" in str(find(unknown, "fleet-empty").children)


def test_a_filter_no_model_matches_says_so_instead_of_no_data(
    seeded: Settings, demo_db: Database
) -> None:
    start, end, _rest = _range()
    with dashboard_request(seeded, demo_db):
        # "checkpoint" owns a component, not a model: an old owner= link on other pages.
        fleet_page = whole(fleet, start=start, end=end, owner="checkpoint")
        models_page = whole(models, start=start, end=end, team="checkpoint")
        jobs_page = whole(job, start=start, end=end, team="checkpoint")
        owners_page = whole(owners, start=start, end=end, owner="checkpoint")
    fleet_empty = str(find(fleet_page, "fleet-empty").children)
    assert "No job belongs to team 'checkpoint'" in fleet_empty
    assert find(fleet_page, "fleet-filter-team").value == "checkpoint"
    for page, element_id in ((models_page, "model-empty"), (jobs_page, "job-empty")):
        node = find(page, element_id)
        assert node.children[0].children.endswith("matches these filters"), element_id
        assert "load the demo" not in str(node.children), element_id
    # On the owners page owner= is the component owner: its rows, no empty state.
    assert find(owners_page, "owners-empty") is None
    held = {r["owner"] for r in find(owners_page, "owners-components-table").data}
    assert held == {"checkpoint"}
    assert find(owners_page, "owners-filter-owner").value == "checkpoint"


def test_model_page_equals_the_rest_answer(
    api: TestClient, seeded: Settings, demo_db: Database
) -> None:
    start, end, rest = _range()
    answer = api.get("/api/v1/models/model-c", params=rest).json()
    jobs = api.get("/api/v1/jobs", params={**rest, "model": "model-c"}).json()
    with dashboard_request(seeded, demo_db):
        page = whole(models, model="model-c", start=start, end=end)
        listing = whole(models, start=start, end=end)
    assert pct_matches(_text(page, "model-ett"), answer["ett_pct"])
    assert _text(page, "model-jobs") == f"{answer['job_count']:,}"
    table = find(page, "model-jobs-table")
    shown = {r["job"].split("]")[0].lstrip("[") for r in table.data}
    assert shown == {j["job_id"] for j in jobs["jobs"]} == {"model-c-baseline", "model-c-optimized"}
    bars = find(page, "model-l2-graph").figure
    assert {row[0] for t in bars.data if t.type == "bar" for row in t.customdata} == shown
    assert find(page, "model-checkpoint-graph") is not None
    names = {r["model"].split("]")[0].lstrip("[") for r in find(listing, "model-list-table").data}
    assert {"model-a", "model-f"} <= names
    # What eats the model's ETT%: the lost GPU-hours by component and owner, as REST has them.
    lost = find(page, "model-lost-component-graph").figure
    drawn = {t.name: sum(t.y) for t in lost.data}
    expected = {
        COMPONENT_LABELS[c]: v
        for c, v in answer["components_gpu_h"].items()
        if c != "effective_training" and v > 0
    }
    assert drawn == pytest.approx(expected, rel=1e-6, abs=1e-3)
    by_owner = find(page, "model-lost-owner-graph").figure
    assert sum(sum(t.x) for t in by_owner.data) == pytest.approx(
        sum(r["gpu_h"] for r in answer["lost_by_owner"]), rel=1e-6, abs=1e-2
    )
    level1 = find(page, "model-level1-graph").figure
    tts = next(t for t in level1.data if t.name == "TTS")
    assert sorted(tts.y) == pytest.approx(sorted(j["tts_s"] / 60.0 for j in jobs["jobs"]))
    top = {
        r["model"].split("]")[0].lstrip("["): r["top_lost"]
        for r in find(listing, "model-list-table").data
    }
    c_top = max(expected, key=lambda k: expected[k])
    assert top["model-c"] == c_top


def test_job_page_equals_the_rest_answer(
    api: TestClient, seeded: Settings, demo_db: Database
) -> None:
    answer = api.get("/api/v1/jobs/model-b-baseline/ett").json()
    with dashboard_request(seeded, demo_db):
        page = whole(job, job_id="model-b-baseline")
        listing = whole(job)
        missing = whole(job, job_id="nope")
    assert pct_matches(_text(page, "job-ett"), answer["ett_pct"])
    assert _text(page, "job-nof") == str(answer["l1"]["nof"]) == "2"
    assert _text(page, "job-tts") == f"{answer['l1']['tts_s'] / 60.0:.1f} min"
    assert _text(page, "job-e2e") == f"{answer['e2e_s'] / 60.0:.1f} min"
    timeline = find(page, "job-timeline-graph").figure
    rows = {y for t in timeline.data if t.type == "bar" for y in t.y}
    assert rows == {f"attempt {a['attempt']}" for a in answer["attempts"]}
    failures = [t for t in timeline.data if t.name.endswith(" failure")]
    assert sum(len(t.x) for t in failures) == answer["l1"]["nof"]
    assert find(page, "job-critical-path-0") is not None
    assert find(page, "job-model-link").href.startswith("/model?")
    assert "model-b-baseline" in str(find(listing, "job-list-table").data)
    assert find(missing, "job-empty") is not None


def test_a_running_job_grows_while_its_page_is_open(
    post: Any, settings: Settings, database: Database
) -> None:
    import time

    now = time.time()
    events = _small_job(0, now + 3000.0)[:3]  # submitted ~70 min ago, still training, no end
    events[2]["end"] = now - 60.0
    assert post(events).json()["accepted"] == 3
    with dashboard_request(settings, database):
        page = whole(job, job_id="j000")
        figure, ett = job._grow_live_job(1, "j000")
    assert find(page, "job-live-interval").interval == job.LIVE_REFRESH_MS
    assert "provisional: still running" in str(page)
    assert any(s.line.dash == "dash" for s in figure.layout.shapes)  # the "now" line
    assert ett == _text(page, "job-ett")


def test_a_running_jobs_live_tail_is_shown_as_provisional(
    post: Any, client: Any, settings: Settings, database: Database
) -> None:
    import time

    now = time.time()
    events = _small_job(0, now + 3000.0)[:3]  # training until a minute ago, no end
    events[2]["end"] = now - 60.0
    assert post(events).json()["accepted"] == 3
    answer = client.get("/api/v1/jobs/j000/ett").json()
    assert answer["provisional"] and answer["live_tail_start"] is not None
    with dashboard_request(settings, database):
        page = whole(job, job_id="j000")
    l1 = {r["part"]: r for r in find(page, "job-l1-table").data}
    tail_min = l1["live tail (provisional)"]["minutes"]
    assert tail_min == pytest.approx(1.0, abs=0.1)
    # shown apart: neither final shutdown nor unattributed
    assert l1["final shutdown"]["minutes"] == pytest.approx(0.0, abs=1e-6)
    l2 = {r["component"]: r for r in find(page, "job-l2-table").data}
    assert l2["Live tail (provisional)"]["minutes"] == pytest.approx(tail_min)
    assert l2["Unattributed"]["minutes"] == pytest.approx(0.0, abs=1e-6)
    timeline = find(page, "job-timeline-graph").figure
    assert "in progress (provisional)" in {t.name for t in timeline.data}


def test_revision_2_warnings_on_the_job_page_and_in_rest(
    post: Any, client: Any, settings: Settings, database: Database
) -> None:
    import time

    t0 = time.time() - 4000.0
    events = _small_job(1, t0 + 7201.0)  # finished job; its failure stamped before progress
    events.insert(3, {"event_id": "j001-f", "job_id": "j001", "type": "failure", "attempt": 0,
                      "ts": t0 + 3000.0, "kind": "app_error"})  # fmt: skip
    assert post(events).json()["rejected"] == []
    answer = client.get("/api/v1/jobs/j001/ett").json()
    warned = {w["code"]: w for w in answer["warnings"]}
    assert warned["failure_before_progress"]["event_ids"] == ["j001-f", "j001-p"]
    with dashboard_request(settings, database):
        page = whole(job, job_id="j001")
    block = str(find(page, "job-warnings"))
    assert "failure_before_progress" in block and "j001-f" in block
    assert warned["failure_before_progress"]["message"] in block


def test_compare_page_equals_the_rest_answer(
    api: TestClient, seeded: Settings, demo_db: Database
) -> None:
    start, end, rest = _range()
    pairs = api.get("/api/v1/compare/pairs", params=rest).json()
    one = api.get(
        "/api/v1/compare", params={"baseline": "model-e-baseline", "optimized": "model-e-optimized"}
    ).json()
    with dashboard_request(seeded, demo_db):
        page = compare.layout(start=start, end=end)
        pair = compare.layout(baseline="model-e-baseline", optimized="model-e-optimized")
        missing = compare.layout(baseline="model-e-baseline", optimized="nope")
    assert len(pairs["pairs"]) == 6
    assert _text(page, "compare-saved") == f"{pairs['total']['delta']['lost_s'] / 60.0:,.1f}"
    assert _text(page, "compare-cascade") == f"{pairs['total']['cascade']['tts_share'] * 100:.1f}%"
    assert _text(pair, "compare-saved") == f"{one['delta']['lost_s'] / 60.0:,.1f}"
    assert _text(pair, "compare-multiplier") == f"{one['restart_multiplier']:.1f}"
    assert find(missing, "compare-empty") is not None
    first = find(page, "compare-table").data[0]
    assert "/job?" in first["job"] and "baseline=model-a-baseline" in first["pair"]
    # Level-2 deltas beside the Level-1 ones: PT2 compile before and after, as REST has it.
    l2 = {r["component"]: r for r in find(pair, "compare-l2-table").data}
    b_compile = one["baseline"]["components"]["pt2_compile"] / 60.0
    o_compile = one["optimized"]["components"]["pt2_compile"] / 60.0
    assert l2["PT2 compile"]["baseline_min"] == pytest.approx(b_compile)
    assert l2["PT2 compile"]["delta_min"] == pytest.approx(o_compile - b_compile)
    assert "Eq. 3" in str(find(pair, "compare-terms").children)
    # The picker suggests labelled jobs per side; a named pair hides the pair-choosing filters.
    assert "model-a-baseline" in find(page, "compare-pick-baseline").options
    assert "model-a-optimized" in find(page, "compare-pick-optimized").options
    assert find(pair, "compare-pick-baseline").value == "model-e-baseline"
    assert find(pair, "compare-filters-hidden").style == {"display": "none"}
    assert find(page, "compare-filters-hidden") is None


def test_owners_page_shows_lost_hours_and_slos(
    api_here: TestClient, seeded_here: Settings, database: Database
) -> None:
    start, end, rest = _range()
    lost = api_here.get("/api/v1/fleet/lost", params={**rest, "by": "owner"}).json()
    from backend.alerts import store
    from backend.alerts.slos import SloSpec

    with database.session() as s:
        store.put_slo(
            db_session=s,
            spec=SloSpec.model_validate(
                {
                    "name": "compile-share",
                    "owner": "compiler",
                    "component": "pt2_compile",
                    "indicator": "gpu_time_share",
                    "objective": 0.05,
                }
            ),
        )
        s.commit()
    from backend.alerts import cycle
    from backend.alerts import history as slo_history
    from backend.demo.loader import history_instants

    now = datetime.now(UTC).timestamp()
    with database.session() as s:
        slo_history.backfill(db_session=s, instants=history_instants(now - 14 * 86400, now))
        s.commit()
    cycle.evaluate_once(db=database, settings=seeded_here, release=True)
    with dashboard_request(seeded_here, database):
        page = whole(owners, start=start, end=end)
        one = whole(owners, start=start, end=end, owner="compiler")
        alert_link = whole(owners, owner="checkpoint", component="wasted_training")
    graph = find(page, "owners-lost-graph").figure
    assert sum(sum(t.x) for t in graph.data) == pytest.approx(lost["total_gpu_h"], rel=1e-6)
    assert "compile-share" in [r["name"] for r in find(page, "owners-slos-table").data]
    owners_shown = {r["owner"] for r in find(one, "owners-components-table").data}
    assert owners_shown == {"compiler"}
    narrowed = find(alert_link, "owners-components-table").data
    assert [(r["owner"], r["component"]) for r in narrowed] == [("checkpoint", "Wasted training")]
    # The SLO row: units, the value now, the status, a sparkline and its breach history.
    row = next(r for r in find(one, "owners-slos-table").data if r["name"] == "compile-share")
    assert row["objective"] == "≤ 0.05 % of GPU-time" and row["current"].endswith("% of GPU-time")
    compile_share = next(
        r
        for r in api_here.get("/api/v1/fleet/ett", params=rest).json()["total"].items()
        if r[0] == "components_gpu_h"
    )[1]["pt2_compile"]
    assert compile_share > 0 and row["status"] == "breached"  # any compile beats 0.05 %
    history = find(one, "owners-slo-history-graph").figure.data[0]
    cells = list(history.z[list(history.y).index("compile-share")])
    assert 1 in cells and len(cells) >= 7  # a point per day of the range the fleet has run
    assert row["breached"].startswith(f"{cells.count(1)} of {len(cells)}")
    assert len(row["history"]) == len(cells)
    assert find(one, "owners-trend-graph").figure.data  # the owner's lost GPU-hours trend


def test_every_page_says_what_to_do_on_an_empty_database(
    settings: Settings, database: Database
) -> None:
    with dashboard_request(settings, database):
        pages = {
            "fleet-empty": (whole(fleet), NO_DATA_HINT),
            "model-empty": (whole(models), NO_DATA_HINT),
            "job-empty": (whole(job), NO_DATA_HINT),
            "compare-empty": (compare.layout(), compare.HOW_TO),
            "owners-empty": (whole(owners), NO_DATA_HINT),
        }
    for element_id, (page, hint) in pages.items():
        node = find(page, element_id)
        assert node is not None, element_id
        assert node.children[-1].children == hint, element_id


def test_dashboard_and_api_share_one_port(settings: Settings, database: Database) -> None:
    app = create_app(settings, database=database, start_workers=False)
    with TestClient(app) as c:
        health = c.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert "/api/v1/events" in c.get("/openapi.json").json()["paths"]
        assert "swagger" in c.get("/docs").text.lower()
        assert c.get("/api/v1/jobs").status_code == 200
        assert c.get("/api/v1/no-such-route").status_code == 404
        index = c.get("/model?model=x")
        assert index.status_code == 200 and "_dash-renderer" in index.text
        layout = c.get("/_dash-layout")
        assert layout.status_code == 200 and "shell-nav-fleet" in layout.text


def _small_job(i: int, now: float) -> list[dict[str, Any]]:
    """One finished 1-hour job of model m<i>: 10 min of start-up, 50 min of training."""
    job_id, t0 = f"j{i:03d}", now - 7200.0 - i
    return [
        {"event_id": f"{job_id}-s", "job_id": job_id, "type": "job_submitted", "ts": t0,
         "model": f"m{i:03d}", "gpus": 8, "labels": {"owner": f"team{i % 25}"}},
        {"event_id": f"{job_id}-a", "job_id": job_id, "type": "attempt_started", "attempt": 0,
         "ts": t0 + 300.0},
        {"event_id": f"{job_id}-p", "job_id": job_id, "type": "progress", "attempt": 0,
         "start": t0 + 600.0, "end": t0 + 3600.0, "cursor_start": 0, "cursor_end": 1000 + i,
         "steps": 100},
        {"event_id": f"{job_id}-e", "job_id": job_id, "type": "attempt_ended", "attempt": 0,
         "ts": t0 + 3600.0, "reason": "completed"},
        {"event_id": f"{job_id}-x", "job_id": job_id, "type": "job_ended", "ts": t0 + 3600.0,
         "status": "succeeded"},
    ]  # fmt: skip


def test_pages_stay_readable_with_500_models(
    post: Any, settings: Settings, database: Database
) -> None:
    import time

    now = time.time()
    events = [e for i in range(520) for e in _small_job(i, now)]
    answer = post(events)
    assert answer.status_code == 200 and answer.json()["accepted"] == len(events)
    with dashboard_request(settings, database):
        page = whole(fleet)
        listing = whole(models)
    assert len(find(page, "fleet-filter-model").options) == 520
    assert find(page, "fleet-filter-model").searchable
    top = find(page, "fleet-top-models-graph").figure
    assert len(top.data[0].y) == 10
    owners_fig = find(page, "fleet-lost-owner-graph").figure
    assert all(len(t.y) <= 13 for t in owners_fig.data)  # top teams plus "other"
    for graph_id in ("fleet-lost-component-graph", "fleet-nof-graph"):
        assert len(find(page, graph_id).figure.data) <= 10  # legends stay short
    table = find(listing, "model-list-table")
    assert len(table.data) == 520 and table.page_size == 25
    assert table.filter_action == "native"


def test_jobs_search_looks_through_every_job_one_page_at_a_time(
    api: TestClient, seeded: Settings, demo_db: Database
) -> None:
    every = api.get("/api/v1/jobs", params={"limit": 1000}).json()
    newest = max(every["jobs"], key=lambda j: j["submitted_at"])
    prefix = newest["job_id"][: len(newest["job_id"]) - 2]
    expected = {j["job_id"] for j in every["jobs"] if j["job_id"].startswith(prefix)}
    expected |= {j["job_id"] for j in every["jobs"] if (j["model"] or "").startswith(prefix)}
    far = ("2001-01-01", "2001-01-02")  # a search ignores the date range
    with dashboard_request(seeded, demo_db):
        found = whole(job, start=far[0], end=far[1], q=prefix)
        recent = whole(job, view="recent")
        second = whole(job, view="recent", page="2")
        nothing = whole(job, q="no-such-job-")
        failed = whole(job, q=prefix, status="failed")
    shown = find(found, "job-list-table").data
    assert {r["job"].split("]")[0].strip("[").replace("\\", "") for r in shown} == expected
    rows = find(recent, "job-list-table").data
    assert len(rows) == min(job.PAGE_SIZE, every["total"])
    assert rows[0]["submitted"] == newest["submitted_at"][:16].replace("T", " ")
    assert [r["submitted"] for r in rows] == sorted((r["submitted"] for r in rows), reverse=True)
    if every["total"] > job.PAGE_SIZE:
        assert find(recent, "job-page-next") is not None
        assert find(second, "job-page-prev") is not None
        assert find(second, "job-list-table").data[0]["job"] != rows[0]["job"]
    live = {j["job_id"] for j in every["jobs"] if j["provisional"]}
    assert all((r["status"] == "● live") == any(f"[{i}]" in r["job"] for i in live) for r in rows)
    assert "No job matches search 'no-such-job-'" in str(find(nothing, "job-empty").children)
    failed_table = find(failed, "job-list-table")
    failed_rows = failed_table.data if failed_table is not None else []
    assert all(r["status"] == "failed" for r in failed_rows)
    if failed_table is None:
        assert "status failed" in str(find(failed, "job-empty").children)


def test_trend_charts_draw_the_annotations_they_concern(
    api: TestClient, seeded: Settings, demo_db: Database
) -> None:
    start, end, rest = _range()
    every = api.get("/api/v1/annotations", params=rest).json()["annotations"]
    fleet_wide = sorted(a["title"] for a in every if a["model"] is None)
    model = next(a["model"] for a in every if a["model"])
    own = sorted(a["title"] for a in every if a["model"] in (None, model))
    assert fleet_wide and len(own) > len(fleet_wide)
    with dashboard_request(seeded, demo_db):
        page = whole(fleet, start=start, end=end)
        one = whole(models, start=start, end=end, model=model)

    def drawn(figure: Any) -> list[str]:
        return sorted(
            a.hovertext.split(" ", 2)[2] for a in figure.layout.annotations if a.hovertext
        )

    for graph_id in ("fleet-trend-graph", "fleet-lost-component-graph", "fleet-level1-graph"):
        assert drawn(find(page, graph_id).figure) == fleet_wide, graph_id
    for graph_id in ("model-trend-graph", "model-lost-component-graph", "model-level1-graph"):
        assert drawn(find(one, graph_id).figure) == own, graph_id
    assert f"{len(fleet_wide)} annotations" in str(find(page, "fleet-annotations").children)


def test_live_page_equals_the_rest_answer(
    api: TestClient, seeded: Settings, demo_db: Database
) -> None:
    rest = api.get("/api/v1/live", params={"jobs": "all"}).json()
    with dashboard_request(seeded, demo_db):
        page = live.layout()
    assert _text(page, "live-open-jobs") == f"{rest['open_jobs']:,}"
    assert _text(page, "live-training-gpus") == f"{rest['gpus_by_state']['training']:,}"
    bad = sum(j["gpus"] for j in rest["jobs"] if j["bad"])
    assert _text(page, "live-bad-gpus") == f"{bad:,}"
    rolling = {r["model"]: r for r in find(page, "live-rolling-table").data}
    assert rolling["(fleet)"]["ett_24h"] == pytest.approx(rest["fleet"]["24h"]["ett_pct"])
    gpus = find(page, "live-gpus-graph").figure.data[0]
    assert sum(gpus.x) == sum(rest["gpus_by_state"].values())


def test_job_page_shows_the_initiating_cause_and_its_cascade(
    post: Any, client: Any, settings: Settings, database: Database
) -> None:
    import time

    t0 = time.time() - 9000.0
    events = _small_job(2, t0 + 7202.0)
    events[3:4] = [  # attempt 0 fails at 3600 s: rank 3 OOMs, ranks 0 and 1 time out after
        {"event_id": "j002-f3", "job_id": "j002", "type": "failure", "attempt": 0,
         "ts": t0 + 3600.0, "kind": "app_error", "cause": "gpu_oom", "rank": 3,
         "message": "torch.OutOfMemoryError: CUDA out of memory"},
        {"event_id": "j002-f0", "job_id": "j002", "type": "failure", "attempt": 0,
         "ts": t0 + 4200.0, "kind": "infra", "cause": "nccl_timeout", "rank": 0},
        {"event_id": "j002-f1", "job_id": "j002", "type": "failure", "attempt": 0,
         "ts": t0 + 4201.0, "kind": "infra", "rank": 1},  # an old agent: no cause
    ]  # fmt: skip
    assert post(events).json()["rejected"] == []
    answer = client.get("/api/v1/jobs/j002/ett").json()
    assert answer["l1"]["nof"] == 1
    (f,) = answer["l1"]["failures"]
    assert (f["cause"], f["domain"], f["planned"], f["rank"]) == ("gpu_oom", "workload", False, 3)
    assert [(c["rank"], c["cause"], c["domain"]) for c in f["cascade"]] == [
        (0, "nccl_timeout", "infrastructure"),
        (1, "unknown", "infrastructure"),
    ]
    with dashboard_request(settings, database):
        page = whole(job, job_id="j002")
    (row,) = find(page, "job-failures-table").data
    assert (row["cause"], row["domain"], row["planned"], row["reported by"]) == (
        "gpu_oom",
        "workload",
        "unplanned",
        "rank 3",
    )
    assert row["cascade"] == "rank 0: nccl_timeout (+600 s); rank 1: unknown (+601 s)"
