"""The filters every page reads from its URL query, so that a link reproduces the view."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal
from urllib.parse import urlencode

from backend.fleet.days import DAY_S
from backend.params import DEFAULT_DAYS, ReadBounds
from backend.timefmt import parse_day

BUCKETS = ("day", "week", "month")
__all__ = ["DEFAULT_DAYS", "QUICK_RANGES", "REFRESH_S", "Filters", "auto_bucket", "quick_range"]
# The quick ranges (`range=` in the URL): label, whole UTC days ending today. A link with one
# stays relative: opened tomorrow, it shows the days up to tomorrow. The last 24 hours are
# yesterday and today (a page's range is whole days).
QUICK_RANGES: dict[str, tuple[str, int]] = {
    "24h": ("24 h", 2),
    "7d": ("7 d", 7),
    "30d": ("30 d", 30),
    "90d": ("90 d", 90),
}
# Auto-refresh (`refresh=` in the URL): seconds between reloads of the page; 0 is off.
REFRESH_S: dict[str, int] = {"off": 0, "30s": 30, "1m": 60, "5m": 300}
# Past two months a bar per day is too thin to read: ranges this long default to weeks.
WEEKLY_AFTER_DAYS = 62
MONTHLY_AFTER_DAYS = 730


def auto_bucket(start: date, end: date) -> str:
    """The bucket a range of this length gets when the URL names none."""
    days = (end - start).days
    if days >= MONTHLY_AFTER_DAYS:
        return "month"
    return "week" if days >= WEEKLY_AFTER_DAYS else "day"


def quick_range(key: Any, today: date) -> tuple[date, date] | None:
    """The days a quick range (`24h`, `7d`, `30d`, `90d`) covers, ending today; None if unknown."""
    if not isinstance(key, str) or key not in QUICK_RANGES:
        return None
    return today - timedelta(days=QUICK_RANGES[key][1] - 1), today


def _parse_date(value: Any, side: Literal["start", "end"], today: date) -> date | None:
    """A URL bound as an inclusive UTC day, read by the one parser (backend.timefmt)."""
    if not value or not isinstance(value, str):
        return None
    if len(value) > 10 and value[4:5] == "-" and value[10:11] in ("T", " "):
        value = value[:10]  # a page's range is whole days: a date-time keeps its day
    return parse_day(value, side, today=today)


def _parse_label(value: Any) -> tuple[str, str] | None:
    if not value or not isinstance(value, str) or "=" not in value:
        return None
    key, _, val = value.partition("=")
    key, val = key.strip(), val.strip()
    return (key, val) if key and val else None


def _bounded(
    start: date, end: date, bucket: str, bounds: ReadBounds
) -> tuple[date, date, str | None]:
    """The range held to the read bounds (the REST answers 422; a page shortens and says so)."""
    lo = datetime.fromtimestamp(bounds.time_min, UTC).date()
    hi = datetime.fromtimestamp(bounds.time_max, UTC).date() - timedelta(days=1)
    notes = []
    if start < lo or end > hi or end < lo or start > hi:
        start, end = min(max(start, lo), hi), min(max(end, lo), hi)
        notes.append(f"dates held to {lo.isoformat()}..{hi.isoformat()}")
    max_days = int(bounds.max_days(bucket))
    if (end - start).days + 1 > max_days:
        start = end - timedelta(days=max_days - 1)
        notes.append(
            f"range shortened to the last {max_days} days, the limit for bucket={bucket} "
            "(setting ETT_MAX_SERIES_POINTS)"
        )
    return start, end, "; ".join(notes) or None


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


@dataclass(frozen=True)
class Filters:
    """Date range (inclusive UTC days), model, team, label (key=value) and trend bucket.

    `team` is the team a JOB belongs to (its owner label, else its model's team:
    backend/jobs/team.py; the fleet, models, jobs and compare pages filter by it); `owner` is
    the team that owns a COMPONENT, read only by the owners page. Elsewhere an
    old `owner=` link is read as `team=` (a deprecated alias).
    """

    start: date
    end: date
    model: str | None = None
    team: str | None = None
    owner: str | None = None
    label: tuple[str, str] | None = None
    bucket: str = "day"
    extra: dict[str, str] = field(default_factory=dict)
    # Set when the URL asked for more than the read bounds allow (shown above the page).
    notice: str | None = None

    @classmethod
    def from_query(
        cls,
        query: dict[str, Any],
        *,
        today: date | None = None,
        bounds: ReadBounds | None = None,
        component_owner: bool = False,
    ) -> Filters:
        """Parse a page's query arguments; bad or missing values fall back to the defaults.

        With `component_owner` (the owners page) `owner=` is the component owner; otherwise
        it is the deprecated alias of `team=`.
        """
        today = today or datetime.now(UTC).date()
        bounds = bounds or ReadBounds()
        end = _parse_date(query.get("end"), "end", today) or today
        start = _parse_date(query.get("start"), "start", today) or end - timedelta(
            days=bounds.default_range_days - 1
        )
        if start > end:
            start, end = end, start
        quick = quick_range(query.get("range"), today)
        if quick is not None:  # a quick range is relative to today: it wins over stale dates
            start, end = quick
        bucket = query.get("bucket")
        if bucket not in BUCKETS:
            bucket = auto_bucket(start, end)
        start, end, notice = _bounded(start, end, bucket, bounds)
        known = {"start", "end", "model", "team", "owner", "label", "bucket"}
        extra = {k: str(v) for k, v in query.items() if k not in known and v not in (None, "")}
        owner = _text(query.get("owner"))
        team = _text(query.get("team"))
        if not component_owner:
            team, owner = team or owner, None
        return cls(
            start=start,
            end=end,
            model=_text(query.get("model")),
            team=team,
            owner=owner,
            label=_parse_label(query.get("label")),
            bucket=bucket,
            extra=extra,
            notice=notice,
        )

    @property
    def start_ts(self) -> float:
        """Range start as epoch seconds (00:00 UTC of the start day)."""
        return datetime(self.start.year, self.start.month, self.start.day, tzinfo=UTC).timestamp()

    @property
    def end_ts(self) -> float:
        """Range end as epoch seconds (24:00 UTC of the end day, exclusive)."""
        return self.start_ts + ((self.end - self.start).days + 1) * DAY_S

    @property
    def default_bucket(self) -> str:
        """The bucket a range of this length gets when the URL names none."""
        return auto_bucket(self.start, self.end)

    @property
    def quick(self) -> str | None:
        """The quick range these filters were asked for (and still show), if any."""
        key = self.extra.get("range")
        return key if key in QUICK_RANGES else None

    @property
    def refresh_s(self) -> int:
        """Seconds between auto-refreshes of the page (0: off)."""
        return REFRESH_S.get(self.extra.get("refresh", "off"), 0)

    @property
    def label_text(self) -> str | None:
        """The label filter as `key=value`."""
        return f"{self.label[0]}={self.label[1]}" if self.label else None

    def query(self, **overrides: Any) -> dict[str, str]:
        """The query arguments that reproduce these filters, with overrides (None drops a key)."""
        out: dict[str, str] = {"start": self.start.isoformat(), "end": self.end.isoformat()}
        if self.model:
            out["model"] = self.model
        if self.team:
            out["team"] = self.team
        if self.owner:
            out["owner"] = self.owner
        if self.label_text:
            out["label"] = self.label_text
        if self.bucket != self.default_bucket:
            out["bucket"] = self.bucket
        out.update(self.extra)
        for key, value in overrides.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = str(value)
        return out

    def href(self, path: str, **overrides: Any) -> str:
        """A link to `path` carrying these filters."""
        return f"{path}?{urlencode(self.query(**overrides))}"

    def with_window(self, days: int, query: dict[str, Any]) -> Filters:
        """These filters over the last `days` whole days to their end (today included) when the
        URL names no start; the bucket follows the new range unless the URL names one."""
        if query.get("start"):
            return self
        start = self.end - timedelta(days=days - 1)
        bucket = query.get("bucket")
        return replace(
            self, start=start, bucket=bucket if bucket in BUCKETS else auto_bucket(start, self.end)
        )

    def window_label(self, today: date | None = None) -> str:
        """The range in words for a headline number: "last 30 d", or "2026-01-01 to 2026-01-31"."""
        today = today or datetime.now(UTC).date()
        if self.end == today:
            return f"last {(self.end - self.start).days + 1} d"
        return f"{self.start.isoformat()} to {self.end.isoformat()}"

    def with_(self, **changes: Any) -> Filters:
        """A copy with some fields changed."""
        return replace(self, **changes)
