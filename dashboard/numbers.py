"""One way to write numbers on every page: thousands separators and sensible decimals."""

from __future__ import annotations

DASH = "—"


def pct(value: float | None) -> str:
    """A percentage: one decimal ("87.3%")."""
    return DASH if value is None else f"{value:,.1f}%"


def points(value: float | None) -> str:
    """A change of a percentage, in points with its sign ("+1.2 points")."""
    return DASH if value is None else f"{value:+,.1f} points"


def gpu_hours(value: float | None) -> str:
    """GPU-hours: no decimals from 100 up, one below ("12,345", "42.5", "0.3")."""
    if value is None:
        return DASH
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"


def count(value: int | None) -> str:
    """A count with thousands separators."""
    return DASH if value is None else f"{value:,}"


def minutes(seconds: float | None) -> str:
    """A duration in minutes with one decimal, as the Level-1 and Level-2 tables give them."""
    return DASH if seconds is None else f"{seconds / 60.0:,.1f} min"
