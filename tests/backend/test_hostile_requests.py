"""Hostile requests outside ingest answer 4xx in words, never 5xx (issue 12 defect 9)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from backend.app import create_app


@pytest.fixture
def full_client(settings: Any, database: Any) -> Any:
    """The app with its dashboard mounted, as `ett serve` runs it."""
    app = create_app(settings, database=database, start_workers=False, with_dashboard=True)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize(
    "path",
    [
        "/_dash-component-suites/%2e%2e/%2e%2e/etc/passwd",
        "/_dash-component-suites/dash/..%2f..%2fapp.py",
        "/_dash-component-suites/nope/x.js",
    ],
)
def test_dotdot_under_component_suites_is_404(full_client, path: str) -> None:
    r = full_client.get(path)
    assert r.status_code == 404, r.text[:300]
    assert r.json()["detail"].startswith("no such dashboard file")


@pytest.mark.parametrize(("method", "path"), [("PUT", "/api/v1/owners"), ("PUT", "/api/v1/slos/x")])
def test_json_nested_past_1000_levels_is_400(
    full_client, admin_token, method: str, path: str
) -> None:
    body = "[" * 5000 + "]" * 5000
    r = full_client.request(
        method,
        path,
        content=body,
        headers={"Authorization": f"Bearer {admin_token}", "Content-Type": "application/json"},
    )
    assert r.status_code == 400, r.text[:300]
    assert r.json()["detail"]


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/jobs?model=a%00b",
        "/api/v1/jobs/a%00b/ett",
        "/api/v1/silences?owner=x%00",
        "/api/v1/models/m%00",
    ],
)
def test_nul_in_a_parameter_is_422(full_client, admin_token, url: str) -> None:
    r = full_client.get(url, headers={"Authorization": f"Bearer {admin_token}"})
    assert r.status_code == 422, r.text[:300]
    assert "NUL" in r.json()["detail"]


def test_integer_parameter_past_64_bits_is_422(full_client, admin_token) -> None:
    r = full_client.delete(
        f"/api/v1/silences/{2**70}", headers={"Authorization": f"Bearer {admin_token}"}
    )
    assert r.status_code == 422, r.text[:300]
    assert r.json()["detail"] == f"silence_id: {2**70} is out of range (integers are 64-bit)"


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/jobs/%ED%A0%80/ett",
        "/api/v1/models/%ED%A0%80",
        "/api/v1/jobs/%ED%A0%80/critical-path",
    ],
)
def test_lone_surrogate_in_a_path_is_a_4xx(full_client, url: str) -> None:
    r = full_client.get(url)
    assert 400 <= r.status_code < 500, r.text[:300]
    assert r.json()["detail"]
