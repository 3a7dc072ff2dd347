"""The `ett` command line, run as a user would: subprocesses against a temp SQLite database."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

ETT = str(Path(sys.executable).with_name("ett"))


def run(args: list[str], env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess:
    """Run ett with args."""
    return subprocess.run(
        [ETT, *args], env=env, capture_output=True, text=True, timeout=120, check=check
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment whose embedded database lives in tmp_path."""
    return {**os.environ, "ETT_HOME": str(tmp_path), "ETT_DATABASE_URL": ""}


def _walk(cmd: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    out = [(path, cmd)]
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            out += _walk(sub, [*path, name])
    return out


def test_help_on_every_command() -> None:
    from backend.cli import app

    root = typer.main.get_command(app)
    commands = _walk(root, [])
    names = {" ".join(p) for p, _ in commands}
    assert {"serve", "db upgrade", "token create", "token list", "token revoke"} <= names
    runner = CliRunner()
    for path, cmd in commands:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage:" in result.output, path
        assert (cmd.help or "").strip(), f"`ett {' '.join(path)}` has no help text"
        for param in cmd.params:
            if getattr(param, "param_type_name", "") == "option" and param.name != "help":
                assert param.help, f"option {param.name} of `ett {' '.join(path)}` has no help"


def test_serve_refuses_stale_schema_then_serves_healthz(env: dict[str, str]) -> None:
    refused = run(["serve", "--port", "1"], env, check=False)
    assert refused.returncode == 2
    assert "ett db upgrade" in refused.stderr

    assert "is at head" in run(["db", "upgrade"], env).stdout
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [ETT, "serve", "--host", "127.0.0.1", "--port", str(port), "--no-workers"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        body = None
        for _ in range(100):
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                body = r.json()
                break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert body is not None and body["status"] == "ok" and body["database"] == "sqlite"
        docs = httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=5).json()
        assert "/api/v1/events" in docs["paths"]
    finally:
        server.terminate()
        server.wait(10)


def test_token_create_prints_the_token_alone_on_the_last_line(env: dict[str, str]) -> None:
    run(["db", "upgrade"], env)
    out = run(["token", "create", "--name", "fleet", "--scope", "ingest", "--model", "A"], env)
    token = out.stdout.strip().splitlines()[-1]
    assert token.startswith("ett_") and len(token) > 30 and " " not in token
    listed = run(["token", "list"], env).stdout
    assert "fleet\tingest\tA" in listed and token not in listed
    dup = run(["token", "create", "--name", "fleet"], env, check=False)
    assert dup.returncode == 2 and "exists already" in dup.stderr
    bad = run(["token", "create", "--name", "x", "--scope", "root"], env, check=False)
    assert bad.returncode == 2 and "scope must be one of" in bad.stderr
    bad = run(["token", "create", "--name", "x", "--expires-in", "soon"], env, check=False)
    assert bad.returncode == 2 and "--expires-in: not a duration" in bad.stderr


def test_token_list_expiry_and_revoke(env: dict[str, str]) -> None:
    run(["db", "upgrade"], env)
    made = run(["token", "create", "--name", "ci", "--scope", "read", "--expires-in", "30d"], env)
    assert "expires 20" in made.stderr
    secret = made.stdout.strip().splitlines()[-1]
    run(["token", "create", "--name", "fleet"], env)
    lines = run(["token", "list"], env).stdout.strip().splitlines()
    assert lines[0].split("\t") == [
        "id", "name", "scope", "models", "created", "expires", "last used", "status",
    ]  # fmt: skip
    rows = {line.split("\t")[1]: line.split("\t") for line in lines[1:]}
    ci, fleet = rows["ci"], rows["fleet"]
    assert ci[2] == "read" and ci[3] == "*" and ci[6] == "never" and ci[7] == "active"
    assert ci[5] > ci[4] and fleet[5] == "never"  # 30 days later; fleet never expires
    assert secret not in "\n".join(lines)
    out = run(["token", "revoke", "ci"], env).stdout
    assert "'ci'" in out and "revoked since" in out
    run(["token", "revoke", fleet[0]], env)  # by id
    listed = json.loads(run(["token", "list", "--json"], env).stdout)
    assert {t["name"]: t["status"] for t in listed} == {"ci": "revoked", "fleet": "revoked"}
    assert all(t["revoked_at"] for t in listed) and secret not in json.dumps(listed)
    missing = run(["token", "revoke", "nobody"], env, check=False)
    assert missing.returncode == 2 and "no token named 'nobody'" in missing.stderr


def test_alerts_list_bad_state_exits_nonzero_listing_states(env: dict[str, str]) -> None:
    run(["db", "upgrade"], env)
    result = run(["alerts", "list", "--state", "bogus"], env, check=False)
    assert result.returncode == 2
    assert "firing" in result.stderr and "resolved" in result.stderr
    assert run(["alerts", "list", "--state", "firing"], env).returncode == 0


def test_owners_reaccount_marks_nothing_on_an_empty_database(env: dict[str, str]) -> None:
    run(["db", "upgrade"], env)
    assert run(["owners", "reaccount"], env).stdout.strip() == "0 jobs marked for recompute"


def test_serve_freezes_its_startup_heap_before_serving(env: dict[str, str]) -> None:
    """`ett serve` moves what it built at start-up out of the collector's generations before
    uvicorn runs (runtime.freeze_startup_heap): full collections under load walk only what
    requests allocate."""
    run(["db", "upgrade"], env)
    probe = (
        "import gc, uvicorn\n"
        "from backend import app\n"
        "seen = []\n"
        "uvicorn.run = lambda *a, **k: seen.append(gc.get_freeze_count())\n"
        "app.serve('127.0.0.1', 1, role='api', announce=lambda _m: None)\n"
        "print(seen[0])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) > 50_000  # the app, the dashboard and their modules
