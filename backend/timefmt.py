"""RFC 3339 UTC formatting for the read API."""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(epoch_s: float | None) -> str | None:
    """Epoch seconds to RFC 3339 UTC with millisecond precision ('...Z'); None stays None."""
    if epoch_s is None:
        return None
    return (
        datetime.fromtimestamp(epoch_s, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
