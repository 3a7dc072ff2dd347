"""Tokens expire and are revoked, through the admin API; the refusal is immediate everywhere."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from backend.app import create_app
from backend.auth import service
from backend.auth.models import ApiToken
from backend.config import Settings
from backend.db import Database

HTML = {"Accept": "text/html"}


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _row(database: Database, name: str) -> ApiToken:
    with database.session() as s:
        row = s.scalar(select(ApiToken).where(ApiToken.name == name))
        assert row is not None
        s.expunge(row)
        return row


def test_admin_api_creates_lists_and_revokes(
    client: TestClient, database: Database, make_token: Callable[..., str]
) -> None:
    admin = make_token("admin", name="root")
    reader = make_token("read", name="viewer")
    assert client.get("/api/v1/tokens").status_code == 401
    assert client.get("/api/v1/tokens", headers=_auth(reader)).status_code == 403

    r = client.post(
        "/api/v1/tokens",
        json={"name": "fleet", "scope": "ingest", "models": ["m-a"], "expires_in": "30d"},
        headers=_auth(admin),
    )
    assert r.status_code == 201, r.text
    made = r.json()
    secret = made["token"]
    assert secret.startswith("ett_") and made["status"] == "active" and made["models"] == ["m-a"]
    assert made["expires_at"] > made["created_at"]  # RFC 3339 strings sort as times
    for bad, status, why in (
        ({"name": "fleet"}, 409, "exists already"),
        ({"name": "has space"}, 422, "not allowed"),
        ({"name": "12345"}, 422, "only digits"),
        ({"name": "a\x00b"}, 422, "NUL"),
        ({"name": "x", "scope": "root"}, 422, "scope"),
        ({"name": "x", "expires_in": "soon"}, 422, "not a duration"),
        ({"name": "x", "expires_in": 0}, 422, "positive"),
        ({"name": "x", "expires_in": 1e308}, 422, "at most 3650d"),
    ):
        r = client.post("/api/v1/tokens", json=bad, headers=_auth(admin))
        assert r.status_code == status and why in r.text, (bad, r.text)

    listed = client.get("/api/v1/tokens", headers=_auth(admin))
    assert listed.status_code == 200 and secret not in listed.text
    assert service.hash_token(secret) not in listed.text
    by_name = {t["name"]: t for t in listed.json()}
    assert set(by_name) == {"root", "viewer", "fleet"}
    assert set(by_name["fleet"]) == {
        "id", "name", "scope", "models", "prefix", "created_at", "expires_at",
        "last_used_at", "revoked_at", "status",
    }  # fmt: skip
    assert by_name["root"]["last_used_at"] is not None  # it was just used
    assert by_name["fleet"]["last_used_at"] is None

    ok = client.post("/api/v1/events", json={"events": []}, headers=_auth(secret))
    assert ok.status_code != 401
    r = client.post("/api/v1/tokens/fleet/revoke", headers=_auth(admin))
    assert r.status_code == 200 and r.json()["status"] == "revoked" and r.json()["revoked_at"]
    refused = client.post("/api/v1/events", json={"events": []}, headers=_auth(secret))
    assert refused.status_code == 401 and "'fleet' was revoked at" in refused.json()["detail"]
    # By id too; twice is harmless; unknown names are a 404 that says where to look.
    viewer_id = by_name["viewer"]["id"]
    assert client.post(f"/api/v1/tokens/{viewer_id}/revoke", headers=_auth(admin)).is_success
    assert client.post(f"/api/v1/tokens/{viewer_id}/revoke", headers=_auth(admin)).is_success
    r = client.get("/api/v1/tokens", headers=_auth(reader))  # 403 before: now not even known
    assert r.status_code == 401 and "'viewer' was revoked" in r.json()["detail"]
    r = client.post("/api/v1/tokens/nobody/revoke", headers=_auth(admin))
    assert r.status_code == 404 and "ett token list" in r.json()["detail"]
    assert client.post("/api/v1/tokens/a%00b/revoke", headers=_auth(admin)).status_code == 422


def test_an_expired_token_is_refused_with_the_reason(
    client: TestClient, database: Database
) -> None:
    with database.session() as s:
        _, old = service.create(
            db_session=s, name="old", scope="admin", expires_in_s=60, now=time.time() - 120
        )
        _, fresh = service.create(db_session=s, name="fresh", scope="admin", expires_in_s=3600)
    r = client.get("/api/v1/tokens", headers=_auth(old))
    assert r.status_code == 401 and "'old' expired at" in r.json()["detail"]
    assert "ett token create" in r.json()["detail"]
    r = client.get("/api/v1/tokens", headers=_auth(fresh))
    assert r.status_code == 200
    assert {t["name"]: t["status"] for t in r.json()} == {"old": "expired", "fresh": "active"}


def test_last_used_is_written_at_most_once_a_minute(
    client: TestClient, database: Database, make_token: Callable[..., str]
) -> None:
    admin = make_token("admin", name="root")
    assert _row(database, "root").last_used_at is None
    before = time.time()
    assert client.get("/api/v1/tokens", headers=_auth(admin)).status_code == 200
    first = _row(database, "root").last_used_at
    assert first is not None and first >= before
    for _ in range(5):
        client.get("/api/v1/tokens", headers=_auth(admin))
    assert _row(database, "root").last_used_at == first  # no write within the minute
    with database.session() as s:
        s.get(ApiToken, _row(database, "root").id).last_used_at = first - 61
        s.commit()
    client.get("/api/v1/tokens", headers=_auth(admin))
    assert _row(database, "root").last_used_at > first - 61


def test_revoking_closes_an_open_dashboard_session_at_once(
    settings: Settings, database: Database, make_token: Callable[..., str]
) -> None:
    reader = make_token("read", name="viewer")
    closed = settings.model_copy(update={"read_token_required": True})
    app: Any = create_app(closed, database=database, start_workers=False)
    with TestClient(app, follow_redirects=False) as c:
        r = c.post("/login", data={"token": reader, "next": "/"})
        assert r.status_code == 303
        assert c.get("/_dash-layout").status_code == 200
        assert c.get("/", headers=HTML).status_code == 200
        with database.session() as s:
            service.revoke(db_session=s, ref="viewer")
        # The very next request, with the same cookie, is refused.
        layout = c.get("/_dash-layout")
        assert layout.status_code == 401 and "'viewer' was revoked" in layout.json()["detail"]
        page = c.get("/", headers=HTML)
        assert page.status_code == 401 and "Sign in" in page.text
        assert "&#x27;viewer&#x27; was revoked at" in page.text  # says why, escaped
        # Expiry closes it the same way.
        with database.session() as s:
            _, soon = service.create(db_session=s, name="brief", scope="read", expires_in_s=3600)
        assert c.post("/login", data={"token": soon, "next": "/"}).status_code == 303
        assert c.get("/_dash-layout").status_code == 200
        with database.session() as s:
            s.get(ApiToken, _row(database, "brief").id).expires_at = time.time() - 1
            s.commit()
        assert c.get("/_dash-layout").status_code == 401
