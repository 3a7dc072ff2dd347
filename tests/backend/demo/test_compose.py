"""docker-compose.yml, Dockerfile and .env.example name only things that exist in the project.

Docker cannot run here, so this parses the files and checks each service, command, option,
port, dependency, health check, variable and copied path against the code.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from backend.cli import app as ett_app
from backend.config import Settings

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
ETT_SERVICES = [name for name, svc in SERVICES.items() if "build" in svc]
VAR = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::?-[^}]*)?\}")


def ett_invocations(command: list[str]) -> list[list[str]]:
    """Every `ett ...` argument list in a command, including inside `sh -c` scripts."""
    if command[:2] != ["sh", "-c"]:
        return [command[1:]] if command and command[0] == "ett" else []
    script = command[2].replace("$$", "$")  # compose's escape for a literal $
    scripts = []
    inner = re.compile(r"\$\(([^()]*)\)")
    while m := inner.search(script):  # command substitutions, innermost first
        scripts.append(m.group(1))
        script = script[: m.start()] + "SUBSTITUTED" + script[m.end() :]
    scripts.append(script)
    found = []
    for text in scripts:
        for segment in re.split(r"[;|&]+", text):
            words = shlex.split(segment)
            if "ett" in words:
                found.append(words[words.index("ett") + 1 :])
    return found


def resolve(args: list[str]) -> Any:
    """Parse args against the real `ett` CLI: unknown commands or options raise."""
    cmd: Any = typer.main.get_command(ett_app)
    ctx = cmd.make_context("ett", list(args), resilient_parsing=True)
    rest = list(args)
    while hasattr(cmd, "get_command"):  # a group (typer may vendor its own click)
        assert rest, "a command group needs a sub-command"
        sub = cmd.get_command(ctx, rest[0])
        assert sub is not None, f"no command {rest[0]!r}"
        ctx = sub.make_context(rest[0], list(rest[1:]), parent=ctx, resilient_parsing=True)
        cmd, rest = sub, rest[1:]
    # Strict parse of the leaf: an unknown option or a bad value raises a usage error.
    leaf = cmd.make_context(ctx.info_name, list(rest), parent=ctx.parent)
    assert not leaf.args, f"unexpected arguments {leaf.args}"
    return cmd


def test_services_and_their_roles_exist():
    assert {"postgres", "migrate", "api", "worker", "lb"} <= set(SERVICES)
    pg = SERVICES["postgres"]
    assert pg["image"].startswith("postgres:")
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    volume = pg["volumes"][0].split(":")[0]
    assert volume in COMPOSE["volumes"]
    assert SERVICES["migrate"]["restart"] == "no"


@pytest.mark.parametrize("name", ETT_SERVICES)
def test_every_ett_service_builds_from_the_dockerfile_and_runs_a_real_command(name: str):
    svc = SERVICES[name]
    assert (ROOT / svc["build"] / "Dockerfile").is_file()
    invocations = ett_invocations(svc["command"])
    assert invocations, f"{name} runs no ett command"
    for args in invocations:
        resolve(args)
    env = svc["environment"]
    assert env["ETT_DATABASE_URL"].startswith("postgresql://")
    assert "@postgres:5432/" in env["ETT_DATABASE_URL"]


def test_commands_match_their_roles():
    assert ett_invocations(SERVICES["migrate"]["command"]) == [["db", "upgrade"]]
    assert resolve(ett_invocations(SERVICES["api"]["command"])[0]).name == "serve"
    assert ett_invocations(SERVICES["api"]["command"])[0][:3] == ["serve", "--role", "api"]
    assert resolve(ett_invocations(SERVICES["worker"]["command"])[0]).name == "worker"


def test_two_api_replicas_and_two_workers_behind_the_load_balancer():
    for name in ("api", "worker"):
        replicas = SERVICES[name]["deploy"]["replicas"]
        assert re.fullmatch(r"\$\{[A-Z_]+:-2\}", str(replicas)), replicas
    lb = SERVICES["lb"]
    assert lb["image"].startswith("haproxy:")
    config = lb["volumes"][0].split(":")[0]
    text = (ROOT / config).read_text()
    port = SERVICES["api"]["command"][-1]
    assert f"server-template api 8 api:{port}" in text
    assert "option httpchk GET /healthz" in text
    published = lb["ports"][0].rsplit(":", 1)
    assert published[0].startswith("127.0.0.1:") and f"bind :{published[1]}" in text
    assert "ports" not in SERVICES["api"]  # only through the balancer


def test_dependencies_name_services_with_valid_conditions():
    for name, svc in SERVICES.items():
        for dep, spec in svc.get("depends_on", {}).items():
            assert dep in SERVICES, f"{name} depends on unknown {dep}"
            assert spec["condition"] in {
                "service_started",
                "service_healthy",
                "service_completed_successfully",
            }
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[dep], f"{dep} has no healthcheck"
    api = SERVICES["api"]["depends_on"]
    assert api["postgres"]["condition"] == "service_healthy"
    assert api["migrate"]["condition"] == "service_completed_successfully"
    assert SERVICES["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"


HAPROXY = shutil.which("haproxy") or (
    "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None
)


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (scripts/test_services.sh)")
def test_the_load_balancer_config_is_valid_haproxy():
    config = ROOT / SERVICES["lb"]["volumes"][0].split(":")[0]
    out = subprocess.run(
        [str(HAPROXY), "-c", "-f", str(config)], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0 and "valid" in out.stdout + out.stderr, out.stdout + out.stderr


def test_the_api_port_and_health_check_match_the_app(tmp_path: Path):
    from backend.app import create_app

    api = SERVICES["api"]
    args = api["command"]
    port = args[args.index("--port") + 1]
    assert api["expose"] == [port]
    published = SERVICES["lb"]["ports"][0].rsplit(":", 1)
    assert published[0].startswith("127.0.0.1:")
    probe = " ".join(api["healthcheck"]["test"])
    url = re.search(r"http://127\.0\.0\.1:(\d+)(/[\w/]*)", probe)
    assert url and url.group(1) == port
    app = create_app(Settings(home=tmp_path), check_schema=False, with_dashboard=False)
    assert url.group(2) in app.openapi()["paths"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"EXPOSE {port}" in dockerfile


def test_dockerfile_copies_existing_paths_and_runs_a_real_command():
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    copies = [line.split()[1:-1] for line in lines if line.startswith("COPY ")]
    assert copies
    for sources in copies:
        for src in sources:
            assert (ROOT / src).exists(), f"Dockerfile copies missing {src}"
    # Everything pyproject packages must be copied, or `pip install .` builds a broken image.
    copied = {s for sources in copies for s in sources}
    for package in ("backend", "ingest", "dashboard", "trainer_agent"):
        assert package in copied
    cmd = next(line for line in lines if line.startswith("CMD "))
    args = json.loads(cmd[4:])
    assert args[0] == "ett"
    resolve(args[1:])


def test_variables_are_documented_and_settings_exist():
    example = ROOT / ".env.example"
    documented = {
        line.split("=", 1)[0]
        for line in example.read_text().splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    }
    used = set(VAR.findall((ROOT / "docker-compose.yml").read_text()))
    assert used <= documented, f"undocumented: {used - documented}"
    fields = {f"ETT_{name.upper()}" for name in Settings.model_fields}
    env_keys = {k for svc in SERVICES.values() for k in svc.get("environment", {})}
    for key in documented | env_keys:
        if key.startswith("ETT_"):
            assert key in fields, f"{key} is not a setting"
