"""deploy/: the rule files are current and pass promtool, the Grafana provisioning is consistent,
and docker-compose's monitoring profile mounts exactly these files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.backend.exporter.live_stack import need

ROOT = Path(__file__).resolve().parents[3]
PROM = ROOT / "deploy" / "prometheus"
GRAFANA = ROOT / "deploy" / "grafana"
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DEFAULT = re.compile(r"\$\{[A-Z_]+:-([^}]*)\}")


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_rule_files_are_generated_from_the_current_tables() -> None:
    """The committed YAML is what generate_rules.py writes."""
    done = _run(sys.executable, str(PROM / "generate_rules.py"), "--check")
    assert done.returncode == 0, done.stderr


def test_promtool_check_rules() -> None:
    """promtool accepts every rule file."""
    done = _run(
        need("promtool"), "check", "rules", *map(str, sorted((PROM / "rules").glob("*.yml")))
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == 2


def test_promtool_unit_tests_fire_and_do_not_fire() -> None:
    """promtool test rules: recording values, alerts that fire and ones that must not."""
    test = PROM / "tests" / "ett_rules_test.yml"
    done = _run(need("promtool"), "test", "rules", str(test))
    assert done.returncode == 0, done.stdout + done.stderr
    doc = yaml.safe_load(test.read_text())
    alerts = [a for t in doc["tests"] for a in t["alert_rule_test"]]
    fired = {e["exp_labels"]["model"] for a in alerts for e in a["exp_alerts"]}
    # m-good and m-spike must stay silent; m-hung's hang fires ETTHungGPUs
    assert fired == {"m-bad", "m-eighty", "m-hung"}
    names = {a["alertname"] for a in alerts}
    assert names == {
        "ETTErrorBudgetBurnFast",
        "ETTErrorBudgetBurnMedium",
        "ETTErrorBudgetBurnSlow",
        "ETTHungGPUs",
    }


def test_compose_prometheus_config_is_valid(tmp_path: Path) -> None:
    """promtool check config on deploy/prometheus/prometheus.yml with its container paths here."""
    token = tmp_path / "token"
    token.write_text("")
    text = (PROM / "prometheus.yml").read_text()
    text = text.replace("/etc/prometheus/rules/", str(PROM / "rules") + "/")
    text = text.replace("/etc/prometheus/ett-read-token", str(token))
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(text)
    done = _run(need("promtool"), "check", "config", str(cfg))
    assert done.returncode == 0, done.stdout + done.stderr
    scrape = yaml.safe_load(text)["scrape_configs"][0]
    assert scrape["metrics_path"] == "/metrics"
    assert scrape["static_configs"][0]["targets"] == ["api:8050"]
    assert "--port" in COMPOSE["services"]["api"]["command"]
    api_cmd = COMPOSE["services"]["api"]["command"]
    assert api_cmd[api_cmd.index("--port") + 1] == "8050"


def _dashboards() -> list[tuple[Path, dict[str, Any]]]:
    return [(p, json.loads(p.read_text())) for p in sorted((GRAFANA / "dashboards").glob("*.json"))]


def _panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in doc["panels"]:
        out.append(p)
        out += p.get("panels", [])
    return out


def test_dashboard_json_structure() -> None:
    """schemaVersion, unique panel ids, every datasource reference the provisioned one."""
    ds = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "ett-prometheus.yml").read_text()
    )
    uid = ds["datasources"][0]["uid"]
    assert ds["datasources"][0]["type"] == "prometheus"
    docs = _dashboards()
    assert docs
    recorded = {
        r["record"]
        for f in (PROM / "rules").glob("*.yml")
        for g in yaml.safe_load(f.read_text())["groups"]
        for r in g["rules"]
        if "record" in r
    }
    for path, doc in docs:
        assert isinstance(doc["schemaVersion"], int) and doc["schemaVersion"] >= 36, path
        assert doc["uid"] and doc["title"]
        panels = _panels(doc)
        ids = [p["id"] for p in panels]
        assert len(ids) == len(set(ids)), f"{path.name}: duplicate panel ids"
        kinds = {p["type"] for p in panels}
        assert {"timeseries", "row"} <= kinds
        for p in panels:
            assert set(p["gridPos"]) == {"x", "y", "w", "h"}
            if p["type"] == "row":
                continue
            assert p["datasource"] == {"type": "prometheus", "uid": uid}, p["title"]
            refs = [t["refId"] for t in p["targets"]]
            assert refs and len(refs) == len(set(refs)), p["title"]
            for t in p["targets"]:
                assert t["datasource"]["uid"] == uid
                for name in re.findall(r"[a-z_]+:[a-z_]+:[a-z0-9_]+", t["expr"]):
                    assert name in recorded, f"{p['title']}: {name} is not a recording rule"
        variables = {v["name"]: v for v in doc["templating"]["list"]}
        assert {"model", "team", "owner"} <= set(variables)
        for v in variables.values():
            assert v["datasource"]["uid"] == uid
            assert v["query"]["query"].startswith("label_values(")
        used = " ".join(t["expr"] for p in panels for t in p.get("targets", []))
        for name in ("model", "team", "owner"):
            assert f"${name}" in used, f"template variable {name} is used by no panel"
        titles = " ".join(p["title"].lower() for p in panels)
        for topic in ("fleet ett%", "by component", "by owner", "nof by kind", "running jobs"):
            assert topic in titles, topic


def _host_path(volume: str) -> Path:
    host = DEFAULT.sub(lambda m: m.group(1), volume).split(":")[0]
    return (ROOT / host).resolve()


def _mounts(svc: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of a service's bind mounts (compose defaults applied)."""
    out = {}
    for v in svc["volumes"]:
        parts = DEFAULT.sub(lambda m: m.group(1), v).split(":")
        if parts[0].startswith("./"):
            out[parts[1]] = (ROOT / parts[0]).resolve()
    return out


@pytest.mark.parametrize("name", ["prometheus", "grafana"])
def test_monitoring_profile_mounts_existing_files(name: str) -> None:
    """Both services sit in the `monitoring` profile and every bind mount exists in deploy/."""
    svc = COMPOSE["services"][name]
    assert svc["profiles"] == ["monitoring"]
    binds = [v for v in svc["volumes"] if v.startswith(("./", "${"))]
    assert binds
    for v in binds:
        assert _host_path(v).exists(), v
    named = [v.split(":")[0] for v in svc["volumes"] if not v.startswith(("./", "${"))]
    for v in named:
        assert v in COMPOSE["volumes"]
    assert svc["ports"][0].startswith("127.0.0.1:")


def test_grafana_provisioning_paths_match_the_compose_mounts() -> None:
    """The dashboard provider reads where compose mounts the JSON; the datasource URL is the
    compose Prometheus."""
    svc = COMPOSE["services"]["grafana"]
    mounts = _mounts(svc)
    prov = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "ett.yml").read_text())
    path = prov["providers"][0]["options"]["path"]
    assert mounts[path] == (GRAFANA / "dashboards").resolve()
    assert mounts["/etc/grafana/provisioning"] == (GRAFANA / "provisioning").resolve()
    ds = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "ett-prometheus.yml").read_text()
    )
    assert ds["datasources"][0]["url"] == "http://prometheus:9090"
    home = svc["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (GRAFANA / "dashboards" / Path(home).name).is_file() and home.startswith(path)
    prom = COMPOSE["services"]["prometheus"]
    targets = _mounts(prom)
    assert targets["/etc/prometheus/prometheus.yml"] == (PROM / "prometheus.yml").resolve()
    assert targets["/etc/prometheus/rules"] == (PROM / "rules").resolve()
    assert targets["/etc/prometheus/ett-read-token"] == (PROM / "no-token").resolve()
