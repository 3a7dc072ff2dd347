"""docs/API.md states the meaning of every query parameter the API takes (issue 14)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "API.md"


def test_every_query_parameter_is_in_docs_api(client: Any) -> None:
    """Each query parameter name of /openapi.json appears in docs/API.md as `name`."""
    spec = client.get("/openapi.json").json()
    names = {
        p["name"]
        for ops in spec["paths"].values()
        for op in ops.values()
        if isinstance(op, dict)
        for p in op.get("parameters", [])
        if p.get("in") == "query"
    }
    text = DOC.read_text()
    documented = set(re.findall(r"`([a-z_]+)", text))
    missing = sorted(n for n in names if n not in documented)
    assert len(names) > 20
    assert not missing, f"query parameters missing from docs/API.md: {missing}"


# A schema that says something about the answer (FastAPI's bare `{"title": ...}` does not).
_TYPED = {"$ref", "type", "anyOf", "allOf", "oneOf", "items", "properties"}


def test_every_api_route_has_a_response_model(client: Any) -> None:
    """Every JSON operation under /api/v1 documents its 2xx answer's fields."""
    spec = client.get("/openapi.json").json()
    untyped = []
    for path, ops in spec["paths"].items():
        if not path.startswith("/api/v1"):
            continue
        for method, op in ops.items():
            ok = {k: v for k, v in op.get("responses", {}).items() if k.startswith("2")}
            for code, resp in ok.items():
                if code == "204":
                    continue
                schema = resp.get("content", {}).get("application/json", {}).get("schema")
                if not schema or not _TYPED & set(schema):
                    untyped.append(f"{method.upper()} {path}")
    assert not untyped, untyped
