"""Modules are imported under the names they have: no `read as service`, no `fleet as fleet_service`.

An alias may qualify a module's name (`owners_service` for `backend.owners.service`,
`alert_read` for `backend.alerts.read`); it may not call a module something it is not. The one
rule checked: only a module named `service` is imported as `service` or `<x>_service`.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = ("backend", "ingest", "dashboard", "trainer_agent", "tests", "benchmarks")


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def module_aliases(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, alias) of every project module imported under an alias in one file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, a.asname) for a in node.names if a.asname]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if a.asname and full.split(".")[0] in TREES and _is_module(full):
                    out.append((node.lineno, full, a.asname))
    return out


def test_only_a_service_module_is_called_a_service() -> None:
    wrong = []
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            for line, module, alias in module_aliases(path):
                named_service = alias == "service" or alias.endswith("_service")
                if named_service and module.rsplit(".", 1)[-1] != "service":
                    wrong.append(f"{path.relative_to(ROOT)}:{line}: {module} as {alias}")
    assert not wrong, "import these under their own names:\n" + "\n".join(wrong)


def test_the_check_sees_an_alias(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from backend.results import read as service\n"
        "import backend.fleet.rollups as r\n"
        "from backend.params import time_range as tr\n"  # a function, not a module
    )
    assert module_aliases(probe) == [
        (1, "backend.results.read", "service"),
        (2, "backend.fleet.rollups", "r"),
    ]
