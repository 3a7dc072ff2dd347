"""The agent ships alone into training images: it imports only the standard library.

PyTorch and TorchRec are allowed in the optional hooks modules, and only inside a function (so
importing any agent module never imports torch). The examples are training programs that use the
agent, not the agent: they may import torch and torchrec anywhere.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

AGENT = Path(__file__).resolve().parents[2] / "trainer_agent"
HOOKS = {"torch_hooks.py", "elastic.py"}
OPTIONAL = {"torch", "torchrec"}
EXAMPLES = AGENT / "examples"


def _imports(tree: ast.AST) -> list[tuple[str, int, bool]]:
    """(top-level module, line, inside a function) of each absolute import in a module."""
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend((a.name.split(".")[0], child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and not child.level and child.module:
                found.append((child.module.split(".")[0], child.lineno, in_function))
            visit(child, inside)

    visit(tree, False)
    return found


def offending_imports(root: Path = AGENT) -> list[str]:
    """Each import of the agent outside the standard library and the rules above, as file:line."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        if EXAMPLES in path.parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for module, line, in_function in _imports(tree):
            if module in sys.stdlib_module_names or module == "trainer_agent":
                continue
            if module in OPTIONAL and path.name in HOOKS and path.parent == root and in_function:
                continue
            bad.append(f"{path.relative_to(root.parent)}:{line} imports {module}")
    return bad


def test_agent_imports_only_the_standard_library() -> None:
    """No third-party import in the agent; torch/torchrec only inside the hooks' functions."""
    assert offending_imports() == []


def test_the_check_sees_a_module_level_torch_import(tmp_path: Path) -> None:
    """The checker itself: torch at module level in a hooks module, or yaml anywhere, is named."""
    agent = tmp_path / "trainer_agent"
    agent.mkdir()
    (agent / "torch_hooks.py").write_text("import torch\n\ndef f():\n    import torchrec\n")
    (agent / "sender.py").write_text("import json\nfrom yaml import safe_load\n")
    assert offending_imports(agent) == [
        "trainer_agent/sender.py:2 imports yaml",
        "trainer_agent/torch_hooks.py:1 imports torch",
    ]


def test_importing_every_agent_module_loads_no_third_party_package() -> None:
    """Importing each agent module (hooks included) leaves torch, torchrec and the server unloaded."""
    modules = [
        ".".join(p.relative_to(AGENT.parent).with_suffix("").parts)
        for p in sorted(AGENT.rglob("*.py"))
        if EXAMPLES not in p.parents and p.name != "__main__.py"
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'torch', 'torchrec', 'backend', 'ingest', 'dashboard', 'httpx', 'yaml', 'pydantic'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=AGENT.parent
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
