"""One way to write numbers on every page: thousands separators and sensible decimals."""

from __future__ import annotations

DASH = "—"
# A trend against a range that ran less than this share of the current range's GPU-hours
# (or under MIN_BASE_GPU_H) compares against too little to mean anything: it is not shown.
MIN_BASE_SHARE = 0.1
MIN_BASE_GPU_H = 1.0


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


def base_too_small(base_gpu_h: float | None, current_gpu_h: float | None) -> bool:
    """True when a trend's base range holds too few GPU-hours to compare against."""
    if base_gpu_h is None:
        return False
    floor = max(MIN_BASE_GPU_H, MIN_BASE_SHARE * (current_gpu_h or 0.0))
    return base_gpu_h < floor
