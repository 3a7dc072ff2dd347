"""Silences and acknowledgements from the owners page: admin token required, effects visible."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from backend.alerts.models import AlertState, Silence
from backend.app import create_app
from backend.auth import service as auth_service
from backend.config import Settings
from backend.db import Database
from dashboard import actions, data
from tests.dashboard.browser import Browser, browser_available, serve
from tests.dashboard.conftest import dashboard_request

NOW = 1_800_000_000.0


def _firing_alert(database: Database) -> str:
    with database.session() as s:
        s.add(
            AlertState(
                fingerprint="fp-sched",
                slo_name="scheduling-share",
                owner="scheduler",
                component="scheduling",
                model=None,
                severity="warning",
                labels={"owner": "scheduler", "component": "scheduling"},
                state="firing",
                value=16.0,
                objective=10.0,
                breach_started_at=NOW - 600,
                fired_at=NOW - 300,
                last_evaluated_at=NOW,
                episode=3,
                notified_firing=True,
                version=1,
                details={},
            )
        )
        s.commit()
    return "fp-sched"


def test_writes_need_an_admin_token(settings, database, make_token) -> None:
    reader = make_token("read")
    with dashboard_request(settings, database):
        for token, why in (
            (None, "Paste an admin token"),
            ("ett_nope", "Unknown token"),
            (reader, "needs admin"),
        ):
            with pytest.raises(actions.ActionRefused, match=why):
                actions.create_silence(
                    token=token,
                    owner="scheduler",
                    component=None,
                    model=None,
                    hours=2,
                    comment="maintenance",
                )
        assert data.alerts_view(None, NOW)["silences"] == []


def test_silence_created_listed_and_expired(settings, database, make_token) -> None:
    admin = make_token("admin", name="oncall")
    with dashboard_request(settings, database):
        with pytest.raises(actions.ActionRefused, match="comment"):
            actions.create_silence(
                token=admin, owner="scheduler", component=None, model=None, hours=2, comment=" "
            )
        with pytest.raises(actions.ActionRefused, match="end after it starts"):
            actions.create_silence(
                token=admin, owner="scheduler", component=None, model=None, hours=0, comment="x"
            )
        with pytest.raises(actions.ActionRefused, match="at least one matcher"):
            actions.create_silence(
                token=admin, owner=None, component=None, model=" ", hours=1, comment="x"
            )
        msg = actions.create_silence(
            token=admin,
            owner="scheduler",
            component="scheduling",
            model=None,
            hours=2,
            comment="queue migration",
            now=NOW,
        )
        [silence] = data.alerts_view("scheduler", NOW)["silences"]
        assert msg.startswith(f"Silence #{silence['id']} (owner=scheduler, component=scheduling)")
        assert silence["active"] and silence["ends_at"] == NOW + 7200
        assert silence["comment"] == "queue migration"
        assert "expired" in actions.expire_silence(
            token=admin, silence_id=silence["id"], now=NOW + 60
        )
        [after] = data.alerts_view("scheduler", NOW + 61)["silences"]
        assert not after["active"]
        with pytest.raises(actions.ActionRefused, match="no silence #999"):
            actions.expire_silence(token=admin, silence_id=999)


def test_acknowledge_marks_the_current_episode(settings, database, make_token) -> None:
    admin = make_token("admin", name="oncall")
    fp = _firing_alert(database)
    with dashboard_request(settings, database):
        [alert] = data.alerts_view("scheduler", NOW)["alerts"]
        assert alert["acked_by"] == ""
        assert actions.acknowledge(token=admin, fingerprint=fp, comment="looking") == (
            "Alert acknowledged by oncall."
        )
        [alert] = data.alerts_view("scheduler", NOW)["alerts"]
        assert alert["acked_by"] == "oncall"
        with pytest.raises(actions.ActionRefused, match="no longer exists"):
            actions.acknowledge(token=admin, fingerprint="nope", comment="")


@pytest.fixture(scope="module")
def owners_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """An app on an empty SQLite database with one admin token; yields (base URL, token)."""
    from backend import migrate

    home = tmp_path_factory.mktemp("owners")
    url = f"sqlite:///{home / 'ett.db'}"
    migrate.upgrade(url)
    database = Database(url)
    with database.session() as s:
        _, token = auth_service.create(db_session=s, name="oncall", scope="admin")
    app = create_app(Settings(home=home, database_url=url), database=database, start_workers=False)
    with serve(app) as base:
        yield base, token
    database.dispose()


@pytest.mark.browser
@pytest.mark.skipif(not browser_available(), reason="needs chromium and chromedriver")
def test_silence_from_the_owners_page_in_a_browser(owners_site: tuple[str, str]) -> None:
    base, token = owners_site
    b = Browser()
    try:
        b.get(base + "/owners?owner=scheduler")
        b.wait_for("#owners-silence-btn")
        b.find_all("#owners-silence-comment")[0].send_keys("queue migration")
        b.click("#owners-silence-btn")
        assert "admin token" in b.wait_for_text("#owners-action-msg", "token").text
        b.find_all("#owners-token")[0].send_keys(token)
        b.click("#owners-silence-btn")
        msg = b.wait_for_text("#owners-action-msg", "is active until").text
        assert msg.startswith("Silence #1 (owner=scheduler)")
        cells: Any = b.wait_for_text("#owners-silences-table", "queue migration")
        assert "scheduler" in cells.text
        assert b.severe() == []
    finally:
        b.close()


@pytest.fixture(scope="module")
def absurd_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """An app whose database already holds a silence that ends in the year 31,000,000,000."""
    from backend import migrate

    home = tmp_path_factory.mktemp("absurd")
    url = f"sqlite:///{home / 'ett.db'}"
    migrate.upgrade(url)
    database = Database(url)
    with database.session() as s:
        _, token = auth_service.create(db_session=s, name="oncall", scope="admin")
        s.add(
            Silence(
                owner="scheduler",
                starts_at=NOW,
                ends_at=1e18,
                comment="stored by an old server",
                created_by="api",
                created_at=NOW,
            )
        )
        s.commit()
    app = create_app(Settings(home=home, database_url=url), database=database, start_workers=False)
    with serve(app) as base:
        yield base, token
    database.dispose()


@pytest.mark.browser
@pytest.mark.skipif(not browser_available(), reason="needs chromium and chromedriver")
def test_absurd_silence_neither_breaks_nor_enters_the_owners_page(
    absurd_site: tuple[str, str],
) -> None:
    base, token = absurd_site
    b = Browser()
    try:
        b.get(base + "/owners?owner=scheduler")
        cells: Any = b.wait_for_text("#owners-silences-table", "stored by an old server")
        assert "9999-12-31" in cells.text
        b.find_all("#owners-token")[0].send_keys(token)
        hours = b.find_all("#owners-silence-hours")[0]
        hours.clear()
        hours.send_keys("87600")
        b.find_all("#owners-silence-comment")[0].send_keys("ten years")
        b.click("#owners-silence-btn")
        msg = b.wait_for_text("#owners-action-msg", "at most").text
        assert "at most 30d" in msg and "ETT_SILENCE_MAX_DURATION_S" in msg
        assert "ten years" not in b.text("#owners-silences-table")
        assert b.severe() == []
    finally:
        b.close()
