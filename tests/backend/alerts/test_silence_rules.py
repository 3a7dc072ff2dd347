"""One set of silence rules for REST and dashboard; absurd rows and NUL never cause a 500."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from backend.alerts.models import Silence
from backend.app import create_app
from backend.config import Settings
from backend.db import Database
from dashboard import actions
from dashboard.pages import owners
from tests.dashboard.conftest import dashboard_request, find, whole

DAY = 86400.0


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _post(client: TestClient, token: str, body: dict[str, Any] | str) -> Any:
    if isinstance(body, str):  # raw JSON: NaN, Infinity and escapes that json= cannot send
        headers = {**_auth(token), "Content-Type": "application/json"}
        return client.post("/api/v1/silences", content=body, headers=headers)
    return client.post("/api/v1/silences", json=body, headers=_auth(token))


def test_rest_silences_have_a_maximum_a_comment_and_the_token_as_actor(
    client: TestClient, make_token: Any
) -> None:
    admin = make_token("admin", name="oncall")
    base = {"owner": "scheduler", "comment": "queue upgrade"}
    for absurd in ("3650d", 315_360_000, "9" * 400 + "d"):
        r = _post(client, admin, {**base, "duration": absurd})
        assert r.status_code == 422, (absurd, r.text)
    r = _post(client, admin, {**base, "duration": "3650d"})
    assert (
        "at most 30d" in r.json()["detail"] and "ETT_SILENCE_MAX_DURATION_S" in r.json()["detail"]
    )
    far = time.time() + 3650 * DAY
    assert _post(client, admin, {**base, "ends_at": far}).status_code == 422
    for raw in (
        '{"owner": "s", "comment": "x", "duration": Infinity}',
        '{"owner": "s", "comment": "x", "duration": NaN}',
    ):
        r = _post(client, admin, raw)
        assert r.status_code == 422 and "finite" in r.json()["detail"], r.text
    r = _post(client, admin, {"owner": "scheduler", "duration": "1h"})
    assert r.status_code == 422 and "comment" in r.text
    r = _post(client, admin, {**base, "comment": "   ", "duration": "1h"})
    assert r.status_code == 422 and "needs a comment" in r.json()["detail"]
    r = _post(client, admin, {**base, "duration": "1h", "created_by": "ceo"})
    assert r.status_code == 422 and "created_by is not accepted" in r.text
    r = _post(client, admin, {**base, "duration": "30d"})
    assert r.status_code == 201, r.text
    assert r.json()["created_by"] == "oncall"
    listed = client.get("/api/v1/silences").json()
    assert [s["created_by"] for s in listed] == ["oncall"]


def test_the_maximum_is_a_setting(settings: Settings, database: Database, make_token: Any) -> None:
    admin = make_token("admin", name="oncall")
    tight = settings.model_copy(update={"silence_max_duration_s": 3600.0})
    app = create_app(tight, database=database, start_workers=False, with_dashboard=False)
    with TestClient(app) as c:
        r = _post(c, admin, {"owner": "scheduler", "comment": "x", "duration": "2h"})
        assert r.status_code == 422 and "at most 1h" in r.json()["detail"]
        assert _post(c, admin, {"owner": "scheduler", "comment": "x", "duration": "1h"}).is_success


def test_a_nul_in_a_silence_or_channel_is_a_422_on_both_databases(
    client: TestClient, make_token: Any
) -> None:
    admin = make_token("admin")
    for field in ("owner", "component", "model", "comment"):
        body = {"owner": "scheduler", "comment": "x", "duration": "1h", field: "a\x00b"}
        r = _post(client, admin, body)
        assert r.status_code == 422 and "NUL" in r.text, (field, r.text)
    raw = '{"owner": "scheduler", "comment": "lone \\ud800", "duration": "1h"}'
    r = _post(client, admin, raw)
    assert r.status_code == 422 and "comment" in r.text
    hook = {"name": "hook", "kind": "webhook", "target": "http://127.0.0.1:9/x"}
    for path, body in (
        ("/api/v1/owners/sch%00ed/channels/hook", hook),
        ("/api/v1/owners/scheduler/channels/hook", {**hook, "target": "http://127.0.0.1:9/\x00"}),
        ("/api/v1/owners/scheduler/channels/hook", {**hook, "options": {"headers": {"X": "\x00"}}}),
    ):
        r = client.put(path, json=body, headers=_auth(admin))
        assert r.status_code == 422 and "NUL" in r.text, (path, r.text)
    for path in (
        "/api/v1/silences?owner=a%00b",
        "/api/v1/owners/a%00b/status",
        "/api/v1/owners/a%00b/channels",
        "/api/v1/slos/a%00b",
        "/api/v1/slos?owner=a%00b",
        "/api/v1/alerts?model=a%00b",
    ):
        r = client.get(path, headers=_auth(admin))
        assert r.status_code == 422 and "NUL" in r.text, (path, r.text)
    r = client.post("/api/v1/alerts/a%00b/ack", json={}, headers=_auth(admin))
    assert r.status_code == 422 and "NUL" in r.text
    r = client.post("/api/v1/alerts/x/ack", json={"comment": "\x00"}, headers=_auth(admin))
    assert r.status_code == 422 and "NUL" in r.text
    assert client.delete(f"/api/v1/silences/{2**70}", headers=_auth(admin)).status_code == 422
    # Nothing was stored.
    assert client.get("/api/v1/silences").json() == []
    assert client.get("/api/v1/owners/scheduler/channels", headers=_auth(admin)).json() == []


def _store_absurd_rows(database: Database, now: float) -> list[float]:
    """Rows as an old server could store them (the write rules came later)."""
    ends = [1e18, math.inf]
    if database.dialect == "postgresql":
        ends.append(math.nan)  # SQLite stores NaN as NULL, which the schema refuses
    with database.session() as s:
        for end in ends:
            s.add(
                Silence(
                    owner="scheduler",
                    component=None,
                    model=None,
                    starts_at=now - 60,
                    ends_at=end,
                    comment="ten years of quiet",
                    created_by="api",
                    created_at=now - 60,
                )
            )
        s.commit()
    return ends


def test_stored_absurd_silences_never_break_the_reads(
    client: TestClient, settings: Settings, database: Database
) -> None:
    now = time.time()
    ends = _store_absurd_rows(database, now)
    r = client.get("/api/v1/silences")
    assert r.status_code == 200, r.text
    shown = [s["ends_at"] for s in r.json()]
    assert shown.count("9999-12-31T00:00:00.000Z") == 2 and len(shown) == len(ends)
    status = client.get("/api/v1/owners/scheduler/status")
    assert status.status_code == 200, status.text
    assert len(status.json()["silences"]) >= 2
    assert client.get("/api/v1/silences", params={"active": "true"}).status_code == 200
    with dashboard_request(settings, database):
        page = whole(owners, owner="scheduler")
    rows = find(page, "owners-silences-table").data
    assert len(rows) == len(ends)
    assert {r["ends_at"] for r in rows} >= {"9999-12-31 00:00"}


def test_dashboard_uses_the_same_rules(
    settings: Settings, database: Database, make_token: Any
) -> None:
    admin = make_token("admin", name="oncall")
    with dashboard_request(settings, database):
        for hours, why in (
            (24 * 3650, "at most 30d"),
            (0, "end after it starts"),
            (float("inf"), "duration in hours"),
        ):
            with pytest.raises(actions.ActionRefused, match=why):
                actions.create_silence(
                    token=admin,
                    owner="scheduler",
                    component=None,
                    model=None,
                    hours=hours,
                    comment="x",
                )
        with pytest.raises(actions.ActionRefused, match="NUL"):
            actions.create_silence(
                token=admin,
                owner="scheduler",
                component=None,
                model="m\x00",
                hours=1,
                comment="x",
            )
        msg = actions.create_silence(
            token=admin,
            owner="scheduler",
            component=None,
            model=None,
            hours=24 * 30,
            comment="migration",
        )
        assert "is active until" in msg
    with database.session() as s:
        [row] = s.query(Silence).all()
        assert row.created_by == "oncall" and row.ends_at - row.starts_at == 30 * DAY
