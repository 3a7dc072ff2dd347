"""ETT_READ_TOKEN_REQUIRED closes the dashboard too: sign in with a read or admin token."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient

from backend.app import create_app

HTML = {"Accept": "text/html,application/xhtml+xml"}


@pytest.fixture
def locked(settings, database) -> Iterator[TestClient]:
    """API and dashboard with reads closed to anonymous callers."""
    closed = settings.model_copy(update={"read_token_required": True})
    app = create_app(closed, database=database, start_workers=False)
    with TestClient(app, follow_redirects=False) as c:
        yield c


def test_pages_answer_the_sign_in_form_and_other_requests_json(locked: TestClient) -> None:
    page = locked.get("/model?model=m", headers=HTML)
    assert page.status_code == 401 and "Sign in" in page.text
    assert 'value="/model?model=m"' in page.text  # back to the asked page afterwards
    layout = locked.get("/_dash-layout")
    assert layout.status_code == 401 and "/login" in layout.json()["detail"]
    assert locked.get("/api/v1/jobs").status_code == 401  # the REST reads stay closed too
    assert locked.get("/healthz").status_code == 200


def test_sign_in_with_a_read_token_opens_the_dashboard(
    locked: TestClient, make_token: Callable[..., str]
) -> None:
    reader, ingester = make_token("read"), make_token("ingest")
    for bad in ("ett_nope", ingester):
        r = locked.post("/login", data={"token": bad, "next": "/"})
        assert r.status_code == 401 and "not a live read or admin token" in r.text
        assert "ett_token" not in r.headers.get("set-cookie", "")
    r = locked.post("/login", data={"token": reader, "next": "/model?model=m"})
    assert r.status_code == 303 and r.headers["location"] == "/model?model=m"
    cookie = r.headers["set-cookie"]
    assert "ett_token=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    page = locked.get("/", headers=HTML)  # the client now sends the cookie
    assert page.status_code == 200 and "_dash-config" in page.text
    assert locked.get("/_dash-layout").status_code == 200
    out = locked.get("/logout")
    assert out.status_code == 303
    assert locked.get("/_dash-layout").status_code == 401


def test_bearer_header_works_and_next_stays_on_this_server(
    locked: TestClient, make_token: Callable[..., str]
) -> None:
    admin = make_token("admin")
    r = locked.get("/_dash-layout", headers={"Authorization": f"Bearer {admin}"})
    assert r.status_code == 200
    for target in ("//evil.example/x", "https://evil.example/", "javascript:alert(1)"):
        r = locked.post("/login", data={"token": admin, "next": target})
        assert r.status_code == 303 and r.headers["location"] == "/"


def test_open_by_default(settings, database) -> None:
    app = create_app(settings, database=database, start_workers=False)
    with TestClient(app) as c:
        page = c.get("/", headers=HTML)
        assert page.status_code == 200 and "_dash-config" in page.text
        assert "Sign in" not in c.get("/login", headers=HTML).text
