"""The fleet and model pages read once per load: the layout and the deferred part share one
read, for at most cache.TTL_S seconds, per database and filters."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from backend.config import Settings
from backend.db import Database
from backend.metrics import fleet as metrics_fleet
from dashboard import cache, data
from dashboard.pages import fleet, models
from tests.dashboard.conftest import dashboard_request, find, whole


def _counting(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[Any]:
    calls: list[Any] = []
    real = getattr(owner, name)

    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(args or kw)
        return real(*args, **kw)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_fleet_page_load_reads_the_fleet_once(
    seeded: Settings, demo_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    views = _counting(monkeypatch, data, "fleet_view")
    # The statements under it: the ETT series runs once, not once per half of the page.
    series = _counting(monkeypatch, metrics_fleet, "fleet_ett")
    with dashboard_request(seeded, demo_db):
        page = whole(fleet)
    assert find(page, "fleet-nof-graph") is not None  # the deferred part was drawn
    assert len(views) == 1
    assert len(series) == 1


def test_a_model_page_load_reads_the_model_once(
    seeded: Settings, demo_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = _counting(monkeypatch, data, "model_page")
    with dashboard_request(seeded, demo_db):
        page = whole(models, model="model-a")
    assert find(page, "model-level1-graph") is not None  # the deferred part was drawn
    assert len(reads) == 1


def test_the_answer_expires_and_other_filters_read_anew(
    seeded: Settings, demo_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(cache, "clock", lambda: now[0])
    views = _counting(monkeypatch, data, "fleet_view")
    with dashboard_request(seeded, demo_db):
        whole(fleet)
        whole(fleet)  # a second load within the TTL
        assert len(views) == 1
        whole(fleet, model="model-a")  # other filters: their own read
        assert len(views) == 2
        now[0] += cache.TTL_S  # new events show after at most the TTL
        whole(fleet)
        assert len(views) == 3


def test_a_changed_answer_does_not_change_the_remembered_one(
    seeded: Settings, demo_db: Database
) -> None:
    with dashboard_request(seeded, demo_db):
        first = fleet.fleet_view(data.Filters.from_query({}))
        first.headline["jobs"] = -1
        first.series.drop(first.series.index, inplace=True)
        again = fleet.fleet_view(data.Filters.from_query({}))
    assert again.headline["jobs"] > 0 and not again.series.empty


def test_concurrent_loads_compute_once(settings: Settings, database: Database) -> None:
    cache.clear()
    computed: list[int] = []
    answers: list[int] = []

    def slow() -> int:
        computed.append(1)
        time.sleep(0.2)
        return 42

    def load() -> None:
        with dashboard_request(settings, database):
            answers.append(cache.memo("slow", ("k",), slow))

    threads = [threading.Thread(target=load) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [42] * 6
    assert len(computed) == 1
