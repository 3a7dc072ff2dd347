"""With ETT_READ_TOKEN_REQUIRED=true every read route refuses anonymous callers; tokens open them."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from backend.app import create_app

PARAMS = {"job_id": "no-such-job", "model": "no-such-model", "owner": "no-such-owner"}
# Channel settings hold webhook URLs and SMTP credentials, and the token list says who can do
# what: admin only, whatever the setting.
ADMIN_READS = {"/api/v1/owners/no-such-owner/channels", "/api/v1/tokens"}


def _get_routes(app) -> list[str]:
    paths = []
    for path, ops in app.openapi()["paths"].items():
        if "get" in ops and path.startswith("/api/v1"):
            paths.append(re.sub(r"\{(\w+)\}", lambda m: PARAMS.get(m.group(1), "x"), path))
    return paths


def test_every_read_route_needs_a_token_when_required(settings, database, make_token) -> None:
    locked = settings.model_copy(update={"read_token_required": True})
    app = create_app(locked, database=database, start_workers=False, with_dashboard=False)
    routes = _get_routes(app)
    assert len(routes) >= 15, routes
    reader = {"Authorization": f"Bearer {make_token('read')}"}
    ingester = {"Authorization": f"Bearer {make_token('ingest')}"}
    with TestClient(app) as c:
        for path in routes:
            anon = c.get(path)
            assert anon.status_code == 401, (path, anon.status_code, anon.text)
            assert "token" in anon.json()["detail"]
            assert c.get(path, headers=ingester).status_code == 403, path
            expected = 403 if path in ADMIN_READS else 200
            got = c.get(path, headers=reader).status_code
            assert (got == 403) == (expected == 403), (path, got)


def test_reads_open_by_default_but_channels_stay_admin(client, admin_token) -> None:
    for path in _get_routes(client.app):
        if path in ADMIN_READS:
            assert client.get(path).status_code == 401, path
            admin = {"Authorization": f"Bearer {admin_token}"}
            assert client.get(path, headers=admin).status_code not in (401, 403), path
        else:
            assert client.get(path).status_code not in (401, 403), path
