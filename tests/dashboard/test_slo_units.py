"""Issue 25 item 3: every SLO indicator has its unit, and the owners page writes values in it."""

from __future__ import annotations

import re
from typing import get_args

import pytest
from fastapi.testclient import TestClient

from backend.alerts import store
from backend.alerts.slos import INDICATOR_UNITS, Indicator, SloSpec, load_slo_file
from backend.db import Database
from dashboard import data

# Hand-checked against what each indicator measures (backend/alerts/indicators.py, live.py).
EXPECTED = {
    "gpu_time_share": "% of GPU-time",
    "duration_percentile": "s",
    "failures_per_job": "failures/job",
    "ett_floor": "% ETT",
    "no_progress_s": "s",
    "live_hung": "s past bound",
    "live_crash_loop": "s past bound",
    "live_restart_storm": "s past bound",
    "live_silent": "s past bound",
    "lemon_nodes": "lemon score",
}


def _names_unit(text: str, unit: str) -> bool:
    """The unit stands after the number, or first (a score): "600 s p90", "lemon score 1.3"."""
    return re.search(rf"(^|\d ){re.escape(unit)}( |$)", text) is not None


def _spec(indicator: str) -> SloSpec:
    extra: dict[str, object] = {"percentile": 90} if indicator == "duration_percentile" else {}
    component = "any" if indicator.startswith("live_") else "trainer_init"
    return SloSpec(
        name=f"t_{indicator}",
        owner="team",
        component=component,
        indicator=indicator,
        objective=1800.0 if indicator not in ("gpu_time_share", "ett_floor") else 50.0,
        **extra,
    )


def test_every_indicator_type_has_its_unit() -> None:
    assert set(get_args(Indicator)) == set(EXPECTED) == set(INDICATOR_UNITS)
    for indicator, unit in EXPECTED.items():
        assert _spec(indicator).unit == unit, indicator


@pytest.mark.parametrize("indicator", sorted(EXPECTED))
def test_the_owners_page_writes_each_indicator_in_its_unit(indicator: str) -> None:
    spec = _spec(indicator)
    text = data.slo_unit(spec, spec.objective)
    assert _names_unit(text, EXPECTED[indicator]), text
    if indicator != "failures_per_job":
        assert "failures/job" not in text, text
    if EXPECTED[indicator].startswith("s"):
        # The case: 1,800 seconds read as "1,800.00 failures/job".
        assert text.startswith("1,800 s"), text


def test_every_shipped_slo_is_written_in_its_indicators_unit() -> None:
    shipped = load_slo_file().slos
    assert shipped, "the product ships SLOs"
    seen = set()
    for spec in shipped:
        text = data.slo_unit(spec, spec.objective)
        assert _names_unit(text, EXPECTED[spec.indicator]), (spec.name, text)
        assert ("failures/job" in text) == (spec.indicator == "failures_per_job"), (spec.name, text)
        seen.add(spec.indicator)
    # The shipped file covers seconds, shares, scores and failures: each took its own branch.
    assert {"duration_percentile", "live_hung", "lemon_nodes", "failures_per_job"} <= seen
    p90 = next(s for s in shipped if s.indicator == "duration_percentile")
    assert data.slo_unit(p90, 600.0) == f"600 s p{p90.percentile:g}"


def test_the_slo_list_names_each_unit_in_rest(
    client: TestClient, admin_token: str, database: Database
) -> None:
    with database.session() as s:
        store.sync_from_file(db_session=s, slo_file=load_slo_file())
        s.commit()
    r = client.get("/api/v1/slos", headers={"Authorization": f"Bearer {admin_token}"})
    assert r.status_code == 200, r.text
    body = r.json()
    rows = body["items"] if isinstance(body, dict) else body
    assert rows
    for row in rows:
        assert row["unit"] == EXPECTED[row["indicator"]], row["name"]
