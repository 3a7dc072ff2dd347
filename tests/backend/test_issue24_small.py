"""Issue 24 item 11, the small ones: each answers a 4xx in words or the right answer, never 5xx."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
import pytest
from dash import html
from fastapi.testclient import TestClient
from sqlalchemy import text

from backend.app import create_app
from backend.config import Settings
from backend.db import Database
from dashboard.components import annotation_list

# Generous: a wait behind the lock is the busy timeout, 30 s; an answer takes well under 1 s.
HANG_GUARD_S = 15.0


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_revoke_with_a_superscript_digit_is_404_not_500(
    client: TestClient, make_token: Callable[..., str]
) -> None:
    admin = make_token("admin", name="root")
    for ref in ("\u00b9", "\u00b2\u00b3", "\u0663"):  # ¹, ²³, Arabic-Indic three
        r = client.post(f"/api/v1/tokens/{ref}/revoke", headers=_auth(admin))
        assert r.status_code == 404, r.text
        assert r.json()["detail"].startswith(f"no token named {ref!r}")
    # An id in ASCII digits still finds its token.
    listed = client.get("/api/v1/tokens", headers=_auth(admin)).json()
    root_id = next(t["id"] for t in listed if t["name"] == "root")
    made = client.post("/api/v1/tokens", json={"name": "ci"}, headers=_auth(admin)).json()
    r = client.post(f"/api/v1/tokens/{made['id']}/revoke", headers=_auth(admin))
    assert r.status_code == 200 and r.json()["name"] == "ci" and r.json()["status"] == "revoked"
    assert made["id"] != root_id


def test_token_with_an_empty_model_list_is_refused(
    client: TestClient, make_token: Callable[..., str]
) -> None:
    admin = make_token("admin")
    r = client.post("/api/v1/tokens", json={"name": "nobody", "models": []}, headers=_auth(admin))
    assert r.status_code == 422, r.text
    assert "models: an empty list would let the token write no model" in r.json()["detail"]
    names = [t["name"] for t in client.get("/api/v1/tokens", headers=_auth(admin)).json()]
    assert "nobody" not in names
    # Leaving models out is still the unrestricted token, and a list limits it.
    r = client.post("/api/v1/tokens", json={"name": "some", "models": ["m1"]}, headers=_auth(admin))
    assert r.status_code == 201 and r.json()["models"] == ["m1"]
    r = client.post("/api/v1/tokens", json={"name": "any"}, headers=_auth(admin))
    assert r.status_code == 201 and r.json()["models"] is None


def test_metrics_answers_while_a_write_transaction_is_open(
    client: TestClient, database: Database
) -> None:
    # On SQLite a writer holds the database's one write lock until it commits (BEGIN IMMEDIATE).
    answers: list[Any] = []
    with database.engine.connect() as writer, writer.begin():
        writer.execute(text("UPDATE api_tokens SET revoked = revoked"))
        reader = threading.Thread(target=lambda: answers.append(client.get("/metrics")))
        reader.start()
        reader.join(HANG_GUARD_S)
        alive = reader.is_alive()
    reader.join()
    assert not alive, f"/metrics waited over {HANG_GUARD_S} s behind a write transaction"
    assert answers[0].status_code == 200
    assert "ett_exporter_database_up 1.0" in answers[0].text


@pytest.fixture
def full_client(settings: Settings, database: Database) -> Iterator[TestClient]:
    """The app with its dashboard mounted at "/", as `ett serve` runs it."""
    app = create_app(settings, database=database, start_workers=False, with_dashboard=True)
    with TestClient(app) as c:
        yield c


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/api/v1/events", "POST"),
        ("DELETE", "/api/v1/tokens", "GET, POST"),
        ("GET", "/v1/traces", "POST"),
    ],
)
def test_a_known_path_with_another_method_is_405(
    full_client: TestClient, method: str, path: str, allow: str
) -> None:
    r = full_client.request(method, path)
    assert r.status_code == 405, r.text[:200]
    assert r.headers["allow"] == allow
    assert r.json()["detail"] == f"{method} is not allowed on {path}; use {allow}"
    # An unknown API path is still a 404, and the dashboard still answers its pages.
    assert (
        full_client.get("/api/v1/no-such").json()["detail"] == "no such API path: /api/v1/no-such"
    )
    assert full_client.get("/").status_code == 200


@pytest.mark.parametrize("link", ["//evil.example/login", "/\\evil.example/login", "/a\\b"])
def test_an_annotation_link_that_leads_off_site_is_refused(
    client: TestClient, admin_token: str, link: str
) -> None:
    body = {"ts": "2026-06-01T00:00:00Z", "title": "rollout", "link": link}
    r = client.post("/api/v1/annotations", json=body, headers=_auth(admin_token))
    assert r.status_code == 422, r.text
    assert (
        "a path on this server starts with a single / and holds no backslash"
        in (r.json()["detail"])
    )
    for fine in ("/plan", "https://wiki.example/rollout/42"):
        ok = client.post(
            "/api/v1/annotations", json={**body, "link": fine}, headers=_auth(admin_token)
        )
        assert ok.status_code == 201 and ok.json()["link"] == fine


def test_a_stored_off_site_path_is_drawn_as_text_not_a_link() -> None:
    notes = pd.DataFrame(
        {
            "ts": pd.to_datetime(["2026-06-01", "2026-06-02"]),
            "title": ["old", "new"],
            "link": ["//evil.example/x", "/plan"],
            "model": [None, None],
        }
    )
    listed = annotation_list("notes", notes)
    assert listed is not None
    items = {str(li.children[1]): li.children[1] for li in listed.children[1].children}
    anchors = [c for c in items.values() if isinstance(c, html.A)]
    assert [(a.children, a.href) for a in anchors] == [("new", "/plan")]
    assert "old" in items  # the title alone, no anchor


@pytest.fixture
def locked(settings: Settings, database: Database) -> Iterator[TestClient]:
    """API and dashboard with reads closed to anonymous callers (the sign-in form is on)."""
    closed = settings.model_copy(update={"read_token_required": True})
    app = create_app(closed, database=database, start_workers=False)
    with TestClient(app, follow_redirects=False) as c:
        yield c


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Referer": "https://evil.example/page"},
        {"Sec-Fetch-Site": "cross-site"},
    ],
)
def test_a_cross_site_sign_in_is_refused(
    locked: TestClient, make_token: Callable[..., str], headers: dict[str, str]
) -> None:
    reader = make_token("read")
    r = locked.post("/login", data={"token": reader, "next": "/"}, headers=headers)
    assert r.status_code == 403, r.text
    assert r.json()["detail"].startswith("sign-in refused: the form was sent from ")
    assert "not from this dashboard" in r.json()["detail"]
    assert "ett_token" not in r.headers.get("set-cookie", "")
    # The dashboard's own form (same origin) signs in, with a SameSite=strict cookie.
    own = locked.post(
        "/login",
        data={"token": reader, "next": "/"},
        headers={"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"},
    )
    assert own.status_code == 303
    assert "SameSite=strict" in own.headers["set-cookie"]


def test_a_token_opens_a_request_while_a_writer_holds_its_row(
    client: TestClient, database: Database, make_token: Callable[..., str]
) -> None:
    # Issue 24 item 12: the once-a-minute last-use write waited behind any writer (SQLite's
    # 30 s busy timeout; on Postgres an unbounded wait for the token's row lock).
    admin = make_token("admin", name="root")
    answers: list[Any] = []
    with database.engine.connect() as writer, writer.begin():
        writer.execute(text("UPDATE api_tokens SET revoked = revoked"))
        call = threading.Thread(
            target=lambda: answers.append(client.get("/api/v1/tokens", headers=_auth(admin)))
        )
        call.start()
        call.join(HANG_GUARD_S)
        alive = call.is_alive()
        if alive:
            writer.rollback()
    call.join()
    assert not alive, f"a token request waited over {HANG_GUARD_S} s behind a writer"
    assert answers[0].status_code == 200, answers[0].text
    assert [t["name"] for t in answers[0].json()] == ["root"]
    assert answers[0].json()[0]["last_used_at"] is None  # skipped, not waited for
    # The skipped write is made by the next request, once the lock is free.
    listed = client.get("/api/v1/tokens", headers=_auth(admin)).json()
    assert listed[0]["last_used_at"] is not None
