"""A real Prometheus sees a hang within two scrape intervals of its bound, and ETTHungGPUs fires.

`ett serve` exports the live states computed at each scrape's instant (no recompute needed: the
open span's start is stored), so the first scrape after the bound is crossed shows the hung GPUs,
the recording rule follows at the next evaluation, and the alert (no `for`) with it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from backend.db import Database
from backend.live import learn
from tests.backend.exporter.live_stack import (
    EVAL_INTERVAL_S,
    SCRAPE_INTERVAL_S,
    LiveStack,
    wait_for,
)
from tests.backend.live import fleet
from tests.conftest import DIALECTS, empty_database

GPUS = 16
LEAD_S = 6.0  # the bound is crossed this long after the job is posted


@pytest.fixture(scope="module", params=DIALECTS)
def stack(
    request: pytest.FixtureRequest, _databases: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveStack, Database]]:
    """ett serve + Prometheus on a database holding model m's finished history, bounds learned."""
    from backend.auth import service

    db = _databases.get(request.param)
    empty_database(db)
    with db.session() as s:
        _, read = service.create(db_session=s, name="prometheus", scope="read")
        _, ingest = service.create(db_session=s, name="agents", scope="ingest")
    live = LiveStack(
        workdir=tmp_path_factory.mktemp(f"prom-live-{request.param}"),
        database_url=db.url,
        read_token=read,
        ingest_token=ingest,
    )
    try:
        live.start()
        live.post(fleet.history("m", time.time() - 10 * 3600))
        with db.session() as s:
            learn.refresh(s)
            s.commit()
        yield live, db
    finally:
        live.close()


def _first_at(stack: LiveStack, expr: str, since: float, value: float) -> float | None:
    """The timestamp of the first sample of `expr` equal to `value` at or after `since`."""
    r = stack.http.get(
        stack.prom_url + "/api/v1/query_range",
        params={"query": expr, "start": since - 10, "end": time.time(), "step": 0.25},
    ).json()
    assert r["status"] == "success", r
    for series in r["data"]["result"]:
        for ts, v in series["values"]:
            if float(v) == value:
                return float(ts)
    return None


def test_the_hung_gpus_show_within_two_scrape_intervals_of_the_bound(
    stack: tuple[LiveStack, Database],
) -> None:
    live, _db = stack
    bound = live.rest("/api/v1/live/bounds", model="m", samples=0)["bounds"]
    pg = next(b for b in bound if b["phase"] == "trainer_init.process_group")
    assert pg["source"] == "model" and pg["bound_s"] == pytest.approx(85.65)
    now = time.time()
    opened = now + LEAD_S - pg["bound_s"]
    job = fleet.hung_in_phase("hung-pg", "m", opened - 10, "trainer_init.process_group", now)
    for ev in job.events:
        if ev["type"] == "job_submitted":
            ev["gpus"] = GPUS
    live.post(job.events)
    crossed = opened + pg["bound_s"]
    alerts = 'ALERTS{alertname="ETTHungGPUs",alertstate="firing"}'

    def firsts() -> tuple[float, float, float] | None:
        got = (
            _first_at(live, 'max(ett_live_gpus{state="hung"})', crossed - 5, GPUS),
            _first_at(live, "ett:live_hung_gpus:sum", crossed - 5, GPUS),
            _first_at(live, alerts, crossed - 5, 1),
        )
        return None if None in got else got  # type: ignore[return-value]

    seen, recorded, fired = wait_for("ETTHungGPUs firing", firsts, timeout_s=LEAD_S + 30)
    # never before the bound; the first scrape after it shows the GPUs
    assert seen >= crossed - 0.5
    assert seen - crossed <= 2 * SCRAPE_INTERVAL_S, seen - crossed
    assert recorded - crossed <= 2 * SCRAPE_INTERVAL_S + EVAL_INTERVAL_S
    assert fired - crossed <= 2 * SCRAPE_INTERVAL_S + EVAL_INTERVAL_S
    alert = live.query(alerts)[0]["metric"]
    assert (alert["model"], alert["team"], alert["owner"]) == ("m", "ranking", "trainer")
    by_model = live.by('model:ett_live_bad_gpus:sum{state="hung"}', "model")
    assert by_model == {"m": GPUS}
    # the rolling ETT% series agree with REST's (open jobs included; read a moment apart)
    rest = live.rest("/api/v1/live")
    for window in ("1h", "24h"):
        expected = rest["fleet"][window]["ett_pct"] / 100
        got = live.scalar(f'max(ett_live_fleet_ett_ratio{{window="{window}"}})')
        assert got == pytest.approx(expected, abs=0.02), window
    assert live.scalar('max(ett_live_ett_ratio{model="m",window="24h"})') is not None
    print(
        f"hung GPUs scraped {seen - crossed:.1f} s, alert {fired - crossed:.1f} s after the bound"
    )
