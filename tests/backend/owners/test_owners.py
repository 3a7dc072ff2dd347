"""The owner mapping: defaults from SPEC section 4, file override, GET/PUT/DELETE, resolution."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from backend.config import Settings
from backend.owners import service
from backend.owners.mapping import DEFAULT_FILE, Resolver, load_file, parse_document

# Answers are rounded by unit (docs/API.md): pct 2 decimals, gpu_h and s 3.
_approx = functools.partial(pytest.approx, abs=5e-3)


def test_defaults_follow_the_spec_catalogue() -> None:
    res = Resolver(load_file(DEFAULT_FILE))
    assert res.owner("scheduling", "scheduling") == "scheduler"
    assert res.owner("hardware_setup", "hardware_setup") == "cluster"
    assert res.owner("trainer_init", "trainer_init.process_group") == "trainer"
    assert res.owner("trainer_init", "trainer_init.preprocessing") == "data"
    assert res.owner("trainer_init", "trainer_init.first_batch") == "data"
    assert res.owner("trainer_init", "checkpoint_restore") == "checkpoint"
    assert res.owner("pt2_compile", "pt2_compile.autotune") == "compiler"
    assert res.owner("wasted_training", "replay") == "checkpoint"
    assert res.owner("wasted_training", "checkpoint_blocking") == "checkpoint"
    assert res.owner("wasted_training", "stalled") == "data"
    assert res.owner("shutdown", "shutdown") == "trainer"
    assert res.owner("shutdown", "publish") == "publishing"
    assert res.owner("unattributed", None) == "unowned"
    assert res.system("pt2_compile", "pt2_compile") == "pt2 compiler"


# Components no team owns by design: effective training is not lost time, and unattributed time
# is, by definition, time nobody claimed. Every other component needs a default owner.
NO_OWNER = {"effective_training", "unattributed"}


def test_every_component_and_phase_has_a_default_owner() -> None:
    """A component missing from default_owners.yaml would silently become 'unowned'."""
    import yaml

    from backend.ett.catalogue import CATALOGUE, COMPONENTS, WASTE_KINDS

    raw = yaml.safe_load(DEFAULT_FILE.read_text())
    assert list(raw["components"]) == list(COMPONENTS)  # each one written, in catalogue order
    res = Resolver(load_file(DEFAULT_FILE))
    for component in COMPONENTS:
        owner, system = res.owner(component, None), res.system(component, None)
        if component in NO_OWNER:
            assert (owner, system) == ("unowned", "unowned"), component
        else:
            assert "unowned" not in (owner, system), component
    for entry in CATALOGUE:  # the catalogue's owner of each phase is the default file's
        assert res.owner(entry.component, entry.phase) == entry.owner, entry
    for kind in WASTE_KINDS:
        assert res.owner("wasted_training", kind) != "unowned", kind


def test_most_specific_phase_entry_wins() -> None:
    mapping = parse_document(
        {
            "components": {"trainer_init": {"owner": "trainer", "system": "trainer"}},
            "phases": {
                "trainer_init.preprocessing": {"owner": "data"},
                "custom.eval": {"component": "shutdown", "owner": "eval"},
                "custom.eval.upload": {"component": "shutdown", "system": "blob"},
            },
        }
    )
    res = Resolver(mapping)
    assert res.owner("trainer_init", "trainer_init.preprocessing.sub") == "data"
    assert res.system("trainer_init", "trainer_init.preprocessing") == "trainer"
    assert res.owner("shutdown", "custom.eval.upload") == "eval"
    assert res.system("shutdown", "custom.eval.upload") == "blob"
    assert res.custom_phase_components() == {
        "custom.eval": "shutdown",
        "custom.eval.upload": "shutdown",
    }
    assert res.owner("scheduling", "scheduling") == "unowned"  # missing components are unowned


@pytest.mark.parametrize(
    "doc",
    [
        {"components": {"gpu_melting": {"owner": "x"}}},
        {"phases": {"custom.x": {"owner": "x"}}},  # a custom phase needs its component
        {"phases": {"custom.x": {"component": "effective_training"}}},
        {"phases": {"pt2_compile": {"component": "shutdown"}}},  # catalogue fixes it
        {"phases": {"mystery": {"owner": "x"}}},
        {"components": {"scheduling": {"owner": "x", "colour": "red"}}},
    ],
)
def test_bad_documents_are_refused(doc: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        parse_document(doc)


def test_owners_file_overrides_defaults(tmp_path: Path, database: Any) -> None:
    path = tmp_path / "owners.toml"
    path.write_text('[components.scheduling]\nowner = "capacity"\nsystem = "slurm"\n')
    settings = Settings(home=tmp_path, database_url=database.url, owners_file=path)
    with database.session() as s:
        answer = service.describe(db_session=s, settings=settings)
        assert answer["source"] == "file"
        assert answer["components"]["scheduling"] == {"system": "slurm", "owner": "capacity"}
        assert service.resolver(db_session=s, settings=settings).owner("trainer_init", None) == (
            "unowned"
        )


def test_api_get_put_delete(client: Any, admin_token: str, ingest_token: str) -> None:
    got = client.get("/api/v1/owners").json()
    assert got["source"] == "default"
    assert {
        "phase": "publish",
        "component": "shutdown",
        "system": "publishing",
        "owner": "publishing",
    } in got["rows"]
    doc = {
        "components": {**got["components"], "scheduling": {"system": "k8s", "owner": "capacity"}},
        "phases": {**got["phases"], "custom.eval": {"component": "shutdown", "owner": "eval"}},
    }
    assert client.put("/api/v1/owners", json=doc).status_code == 401
    r = client.put("/api/v1/owners", json=doc, headers={"Authorization": f"Bearer {ingest_token}"})
    assert r.status_code == 403
    admin = {"Authorization": f"Bearer {admin_token}"}
    r = client.put("/api/v1/owners", json=doc, headers=admin)
    assert r.status_code == 200, r.text
    body = client.get("/api/v1/owners").json()
    assert body["source"] == "api" and body["version"] is not None
    assert body["components"]["scheduling"]["owner"] == "capacity"
    assert body["phases"]["custom.eval"]["component"] == "shutdown"
    csv_text = client.get("/api/v1/owners", params={"format": "csv"}).text
    assert csv_text.splitlines()[0] == "phase,component,system,owner"
    assert ",scheduling,k8s,capacity" in csv_text

    bad = client.put("/api/v1/owners", json={"phases": {"mystery": {"owner": "x"}}}, headers=admin)
    assert bad.status_code == 422 and "mystery" in bad.json()["detail"]
    assert client.get("/api/v1/owners").json()["components"]["scheduling"]["owner"] == "capacity"

    r = client.delete("/api/v1/owners", headers=admin)
    assert r.status_code == 200 and r.json()["source"] == "default"
    assert client.get("/api/v1/owners", params={"format": "yaml"}).status_code == 422


def test_engine_uses_custom_phase_mapping(client: Any, admin_token: str, post: Any) -> None:
    doc = {"phases": {"custom.eval": {"component": "shutdown", "owner": "eval"}}}
    headers = {"Authorization": f"Bearer {admin_token}"}
    assert client.put("/api/v1/owners", json=doc, headers=headers).status_code == 200
    t = 1_777_075_200.0
    events = [
        {
            "event_id": "e1",
            "job_id": "j",
            "type": "job_submitted",
            "ts": t,
            "model": "m",
            "gpus": 1,
        },
        {"event_id": "e2", "job_id": "j", "type": "attempt_started", "attempt": 0, "ts": t},
        {
            "event_id": "e3",
            "job_id": "j",
            "type": "phase",
            "attempt": 0,
            "phase": "custom.eval",
            "start": t,
            "end": t + 100,
        },
        {
            "event_id": "e4",
            "job_id": "j",
            "type": "job_ended",
            "ts": t + 100,
            "status": "succeeded",
        },
    ]
    assert post(events).status_code == 200
    rows = client.get(
        "/api/v1/fleet/lost",
        params={"start": "2026-04-25T00:00:00Z", "end": "2026-04-26T00:00:00Z", "by": "owner"},
    ).json()["rows"]
    assert rows == [
        {
            "owner": "eval",
            "gpu_h": _approx(100 / 3600),
            "share": 1.0,
            "components": {"shutdown": _approx(100 / 3600)},
        }
    ]
