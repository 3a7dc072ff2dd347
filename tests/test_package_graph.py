"""The package-level import graph of backend/ has no cycle (docs/ARCHITECTURE.md, "The layers").

A package is a directory ``backend/<name>/`` or a top-level module ``backend/<name>.py``. Every
import counts, at module level or inside a function: a lazy import is still an import edge.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

BACKEND = Path(__file__).resolve().parents[1] / "backend"


def _package_of(path: Path) -> str:
    """The backend package a source file belongs to: ``backend/<name>/...`` or ``backend/<name>.py``."""
    rel = path.relative_to(BACKEND)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported_modules(path: Path) -> Iterator[tuple[str, int]]:
    """Each absolute dotted module an import statement of ``path`` names, with its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    rel = path.relative_to(BACKEND.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    here = parts if path.name == "__init__.py" else parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield module, node.lineno
            # ``from backend import retention`` names a package through its parent.
            for alias in node.names:
                yield f"{module}.{alias.name}", node.lineno


def package_graph() -> dict[str, dict[str, str]]:
    """Edges between backend packages: ``graph[a][b]`` is one import site (file:line) of b in a."""
    packages = {
        p.name if p.is_dir() else p.stem
        for p in BACKEND.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and p.name != "__init__.py")
    }
    graph: dict[str, dict[str, str]] = {name: {} for name in packages}
    for path in sorted(BACKEND.rglob("*.py")):
        if path.parent == BACKEND and path.name == "__init__.py":
            continue
        source = _package_of(path)
        for module, line in _imported_modules(path):
            bits = module.split(".")
            if len(bits) < 2 or bits[0] != "backend" or bits[1] not in packages:
                continue
            target = bits[1]
            if target != source:
                site = f"{path.relative_to(BACKEND.parent)}:{line} imports {module}"
                graph[source].setdefault(target, site)
    return graph


def find_cycle(graph: dict[str, dict[str, str]]) -> list[str] | None:
    """One cycle of the graph as a closed path of packages ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_finds_a_cycle_and_names_its_closing_edge() -> None:
    """The checker itself: a two-package loop is found, and its edges are the ones returned."""
    graph = {"a": {"b": "x"}, "b": {"c": "y"}, "c": {"a": "z"}, "d": {"a": "w"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": "x"}, "b": {}}) is None


def test_backend_package_graph_is_acyclic() -> None:
    """No import cycle between backend packages; a failure names each edge of the cycle."""
    graph = package_graph()
    assert {"events", "ett", "fleet", "metrics", "alerts"} <= set(graph)
    cycle = find_cycle(graph)
    if cycle is not None:
        edges = "\n".join(
            f"  {a} -> {b}: {graph[a][b]}" for a, b in zip(cycle, cycle[1:], strict=False)
        )
        raise AssertionError(
            f"backend packages import each other in a cycle {' -> '.join(cycle)}; the edges:\n"
            f"{edges}\nThe last edge closes it: move the imported function to the package it "
            "belongs to, or pass it in from the composition root (docs/ARCHITECTURE.md)."
        )
