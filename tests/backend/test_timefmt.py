"""One duration parser and one day for the product: durations, ages and relative times agree."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from backend.events import retention
from backend.fleet import days
from backend.timefmt import (
    DAY_S,
    DURATION_UNITS_S,
    day_start,
    format_duration,
    parse_duration,
    parse_instant,
)

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_796_040_000.0  # 2026-11-30T12:00:00Z


def _definitions(name: str) -> list[str]:
    """Where the server's packages define `name` (a function, or a module-level constant)."""
    found = []
    for package in ("backend", "ingest", "dashboard"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and node.name == name:
                    found.append(str(path.relative_to(ROOT)))
                targets = node.targets if isinstance(node, ast.Assign) else []
                if isinstance(node, ast.AnnAssign):
                    targets = [node.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    found.append(str(path.relative_to(ROOT)))
    return found


def test_one_day_and_one_unit_table() -> None:
    assert _definitions("day_start") == ["backend/timefmt.py"]
    assert _definitions("DAY_S") == ["backend/timefmt.py"]
    assert days.day_start is day_start and days.DAY_S == DAY_S == DURATION_UNITS_S["d"]
    assert day_start(NOW) == NOW - 12 * 3600


@pytest.mark.parametrize("unit", sorted(DURATION_UNITS_S))
def test_every_reader_of_a_duration_uses_the_same_units(unit: str) -> None:
    size = DURATION_UNITS_S[unit]
    assert parse_duration(f"3{unit}") == parse_duration(f" 3 {unit} ") == 3 * size
    if unit in ("d", "w"):  # days and weeks count back from the end of today
        assert parse_instant(f"-3{unit}", now=NOW).ts == day_start(NOW) + DAY_S - 3 * size
        assert retention.parse_age(f"3{unit}") == 3 * size
    else:
        assert parse_instant(f"-3{unit}", now=NOW).ts == NOW - 3 * size
        with pytest.raises(ValueError, match="days or weeks"):
            retention.parse_age(f"3{unit}")  # `3m` is minutes, never months: refused


def test_bare_numbers_and_bad_spellings() -> None:
    assert parse_duration(90) == parse_duration("90") == 90.0
    assert parse_instant("-90").ts == -90.0  # a bare negative number is an epoch, not relative
    for bad in ("", "ten", "-5s", "5y", "5 hours"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_duration(bad)
    for bad in ("", "0d", "10", "-4d", "400"):
        with pytest.raises(ValueError, match="not an age"):
            retention.parse_age(bad)
    with pytest.raises(ValueError, match="units d, w"):
        parse_duration("10", units=("d", "w"))
    assert [format_duration(s) for s in (7 * DAY_S, 6 * 3600, 1800, 90)] == [
        "7d",
        "6h",
        "30m",
        "90s",
    ]
