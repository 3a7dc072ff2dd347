"""URL filters: parsed from a page's query, written back so a link reproduces the view."""

from __future__ import annotations

from datetime import date
from urllib.parse import parse_qsl, urlsplit

from dashboard.filters import DEFAULT_DAYS, Filters

TODAY = date(2026, 5, 20)


def test_defaults_are_the_last_180_days_by_week() -> None:
    f = Filters.from_query({}, today=TODAY)
    assert f.end == TODAY
    assert (f.end - f.start).days == DEFAULT_DAYS - 1
    assert f.bucket == "week" and f.model is None and f.label is None
    assert f.end_ts - f.start_ts == DEFAULT_DAYS * 86400.0


def test_short_ranges_default_to_days_and_only_a_chosen_bucket_is_written() -> None:
    short = Filters.from_query({"start": "2026-05-01", "end": "2026-05-14"}, today=TODAY)
    assert short.bucket == "day" and "bucket" not in short.query()
    weekly = Filters.from_query(
        {"start": "2026-05-01", "end": "2026-05-14", "bucket": "week"}, today=TODAY
    )
    assert weekly.query()["bucket"] == "week"


def test_a_link_reproduces_the_filters() -> None:
    query = {
        "start": "2026-04-01",
        "end": "2026-04-30",
        "model": "model a",
        "team": "data",
        "label": "variant=baseline",
        "bucket": "week",
        "job_id": "j-1",
    }
    f = Filters.from_query(query, today=TODAY)
    href = f.href("/model")
    parts = urlsplit(href)
    assert parts.path == "/model"
    again = Filters.from_query(dict(parse_qsl(parts.query)), today=TODAY)
    assert again == f
    assert f.label == ("variant", "baseline")
    assert f.start_ts == 1775001600.0  # 2026-04-01T00:00:00Z
    assert f.end_ts == 1775001600.0 + 30 * 86400.0


def test_bad_values_fall_back_instead_of_failing() -> None:
    f = Filters.from_query(
        {"start": "not-a-date", "end": "2026-02-30", "bucket": "hour", "label": "novalue"},
        today=TODAY,
    )
    assert f.end == TODAY and f.bucket == "week" and f.label is None
    swapped = Filters.from_query({"start": "2026-05-10", "end": "2026-05-01"}, today=TODAY)
    assert swapped.start == date(2026, 5, 1) and swapped.end == date(2026, 5, 10)


def test_overrides_change_or_drop_keys() -> None:
    f = Filters.from_query({"model": "m", "start": "2026-05-01", "end": "2026-05-02"}, today=TODAY)
    q = dict(parse_qsl(urlsplit(f.href("/job", job_id="x", model=None)).query))
    assert q == {"start": "2026-05-01", "end": "2026-05-02", "job_id": "x"}


def test_owner_is_the_team_alias_except_on_the_owners_page() -> None:
    old_link = Filters.from_query({"owner": "search-ranking"}, today=TODAY)
    assert old_link.team == "search-ranking" and old_link.owner is None
    assert old_link.query()["team"] == "search-ranking" and "owner" not in old_link.query()
    both = Filters.from_query({"team": "ads", "owner": "checkpoint"}, today=TODAY)
    assert both.team == "ads" and both.owner is None
    owners_page = Filters.from_query(
        {"team": "ads", "owner": "checkpoint"}, today=TODAY, component_owner=True
    )
    assert owners_page.team == "ads" and owners_page.owner == "checkpoint"
    assert owners_page.query()["owner"] == "checkpoint"


def test_relative_and_inclusive_dates_like_the_api() -> None:
    """The page reads `-7d` and an end date as the REST API does (backend.timefmt)."""
    from datetime import date

    today = date(2026, 11, 30)
    f = Filters.from_query({"start": "-7d"}, today=today)
    assert (f.start, f.end) == (date(2026, 11, 24), today)
    f = Filters.from_query({"start": "2026-11-01", "end": "2026-11-30"}, today=today)
    assert f.end_ts - f.start_ts == 30 * 86400.0


def test_a_quick_range_is_relative_to_today_and_wins_over_stale_dates() -> None:
    week = Filters.from_query(
        {"range": "7d", "start": "2020-01-01", "end": "2020-02-01"}, today=TODAY
    )
    assert (week.start, week.end) == (date(2026, 5, 14), TODAY)
    assert week.quick == "7d" and week.bucket == "day"
    # The link keeps the range: opened two days later it shows the seven days up to then.
    later = Filters.from_query(week.query(), today=date(2026, 5, 22))
    assert (later.start, later.end) == (date(2026, 5, 16), date(2026, 5, 22))
    day = Filters.from_query({"range": "24h"}, today=TODAY)
    assert (day.start, day.end) == (date(2026, 5, 19), TODAY)  # yesterday and today
    quarter = Filters.from_query({"range": "90d"}, today=TODAY)
    assert (quarter.end - quarter.start).days == 89 and quarter.bucket == "week"
    unknown = Filters.from_query({"range": "13d", "start": "2026-05-01"}, today=TODAY)
    assert unknown.quick is None and unknown.start == date(2026, 5, 1)


def test_auto_refresh_reads_from_the_url() -> None:
    assert Filters.from_query({"refresh": "30s"}, today=TODAY).refresh_s == 30
    assert Filters.from_query({"refresh": "5m"}, today=TODAY).refresh_s == 300
    assert Filters.from_query({"refresh": "1s"}, today=TODAY).refresh_s == 0
    assert Filters.from_query({}, today=TODAY).refresh_s == 0
