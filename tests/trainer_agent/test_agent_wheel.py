"""The agent ships alone: the ett-agent wheel builds offline, installs in a bare venv and passes.

The wheel is built from trainer_agent/ (its own pyproject.toml) with `python -m build`, installed
with `pip --no-index --no-deps` into a fresh venv that holds nothing else (so it cannot need a
dependency), and the agent's standard-library tests run there against the installed copy, with no
server package importable. The test runner (pytest and its pure-Python dependencies) comes in
through PYTHONPATH, not through the venv. The code also stays within its Python 3.9 floor (vermin).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
# Stdlib-only agent tests (fake ingest API, no live server).
CORE_TESTS = ("test_agent_core.py", "test_agent_process.py")
SUPPORT = ("__init__.py", "conftest.py", "fake_ingest.py", "live_server.py")
RUNNER = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py.py")


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]


def test_python_floor_is_3_9() -> None:
    out = run([str(Path(sys.executable).parent / "vermin"), "--no-tips", "-t=3.9-", "--eval-annotations",
               str(REPO / "trainer_agent")])  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Minimum required versions: 3.9" in out.stdout or "3.8" in out.stdout, out.stdout


def test_wheel_installs_alone_and_passes_the_agent_tests(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(REPO / "trainer_agent", src, ignore=shutil.ignore_patterns("__pycache__"))
    built = run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir",
                 str(tmp_path / "dist"), str(src)])  # fmt: skip
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("ett_agent-*.whl"))
    bare = tmp_path / "bare"
    venv.create(bare)  # no pip inside: this venv's pip runs on it from outside
    py = str(bare / "bin" / "python")
    installed = run([sys.executable, "-m", "pip", "--python", py, "install", "--no-index",
                     "--no-deps", str(wheel)])  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    listed = run([py, "-c", "import importlib.metadata as m, json;"
                  "print(json.dumps(sorted(d.metadata['Name'] for d in m.distributions())))"],
                 cwd=tmp_path)  # fmt: skip
    assert json.loads(listed.stdout) == ["ett-agent"], listed.stdout + listed.stderr
    metadata = run([py, "-c", "import importlib.metadata as m; d = m.distribution('ett-agent');"
                    "print([r for r in d.requires or [] if 'extra ==' not in r]);"
                    "print(d.metadata['Requires-Python'])"])  # fmt: skip
    # No required dependency; torch only as the optional extra.
    assert metadata.stdout.split() == ["[]", ">=3.9"], metadata.stdout
    for name in ("backend", "ingest", "dashboard", "pydantic", "fastapi", "sqlalchemy"):
        probe = run([py, "-c", f"import {name}"], cwd=tmp_path)
        assert probe.returncode != 0, f"{name} importable in the bare venv"
    # The agent's tests, against the installed copy (no repository on sys.path).
    tests = tmp_path / "suite" / "tests"
    (tests / "trainer_agent").mkdir(parents=True)
    (tests / "__init__.py").write_text("")
    for name in (*SUPPORT, *CORE_TESTS):
        shutil.copy(REPO / "tests" / "trainer_agent" / name, tests / "trainer_agent" / name)
    runner = tmp_path / "runner"
    runner.mkdir()
    site = Path(pytest.__file__).resolve().parents[1]
    for name in RUNNER:
        if (site / name).exists():
            (runner / name).symlink_to(site / name)
    where = run([py, "-c", "import trainer_agent; print(trainer_agent.__file__)"], cwd=tmp_path)
    assert str(bare) in where.stdout, where.stdout
    result = run(
        [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/trainer_agent"],
        cwd=tmp_path / "suite",
        env={"PYTHONPATH": str(runner), "PATH": f"{bare / 'bin'}:/usr/bin:/bin",
             "HOME": str(tmp_path)},
    )  # fmt: skip
    tail = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 0, tail
    assert " passed" in result.stdout and " failed" not in result.stdout, tail
