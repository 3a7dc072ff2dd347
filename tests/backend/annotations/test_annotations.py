"""Annotations REST: admin writes, anyone with read access lists; the range and scope filters."""

from __future__ import annotations

from fastapi.testclient import TestClient


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_admin_adds_and_everyone_lists_in_range_and_scope(
    client: TestClient, admin_token: str, ingest_token: str
) -> None:
    new = {
        "ts": "2026-06-01T12:00:00Z",
        "title": "PT2 compile cache rolled out",
        "model": "ads-ranker",
        "link": "https://example.invalid/rollout/42",
    }
    created = client.post("/api/v1/annotations", json=new, headers=_auth(admin_token))
    assert created.status_code == 201, created.text
    doc = created.json()
    assert doc["ts"].startswith("2026-06-01T12:00:00") and doc["title"] == new["title"]
    assert doc["created_by"] and isinstance(doc["id"], int)
    fleet_wide = {"ts": "2026-06-03T00:00:00Z", "title": "checkpoint async_save enabled"}
    assert client.post(
        "/api/v1/annotations", json=fleet_wide, headers=_auth(admin_token)
    ).is_success
    other = {"ts": "2026-06-02T00:00:00Z", "title": "other model", "model": "search"}
    assert client.post("/api/v1/annotations", json=other, headers=_auth(admin_token)).is_success

    window = {"start": "2026-05-01T00:00:00Z", "end": "2026-07-01T00:00:00Z"}
    every = client.get("/api/v1/annotations", params=window).json()
    assert [a["title"] for a in every["annotations"]] == [
        "PT2 compile cache rolled out",
        "other model",
        "checkpoint async_save enabled",
    ]
    one = client.get("/api/v1/annotations", params={**window, "model": "ads-ranker"}).json()
    assert [a["title"] for a in one["annotations"]] == [
        "PT2 compile cache rolled out",
        "checkpoint async_save enabled",
    ]
    # end is exclusive: an annotation exactly at end is left out.
    upto = client.get(
        "/api/v1/annotations", params={"start": window["start"], "end": "2026-06-03T00:00:00Z"}
    ).json()
    assert "checkpoint async_save enabled" not in [a["title"] for a in upto["annotations"]]


def test_writing_needs_an_admin_token_and_a_valid_body(
    client: TestClient, admin_token: str, ingest_token: str
) -> None:
    body = {"ts": "2026-06-01T00:00:00Z", "title": "x"}
    assert client.post("/api/v1/annotations", json=body).status_code == 401
    assert (
        client.post("/api/v1/annotations", json=body, headers=_auth(ingest_token)).status_code
        == 403
    )
    for bad in (
        {"ts": "2026-06-01T00:00:00Z", "title": ""},
        {"ts": "yesterday", "title": "x"},
        {"ts": "2026-06-01T00:00:00Z", "title": "x", "link": "javascript:alert(1)"},
        {"ts": "2026-06-01T00:00:00Z", "title": "a\nb"},
    ):
        answer = client.post("/api/v1/annotations", json=bad, headers=_auth(admin_token))
        assert answer.status_code == 422, bad
