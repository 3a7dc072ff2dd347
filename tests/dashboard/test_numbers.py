"""One number format, trend notes hidden on a tiny base, the vendored plotly.js bundle."""

from __future__ import annotations

import re

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs_version

from dashboard import numbers
from dashboard.app import PLOTLY_BUNDLE
from dashboard.components import trend_note


def test_one_format_for_pct_gpu_hours_counts_and_durations() -> None:
    assert numbers.pct(87.26) == "87.3%" and numbers.pct(None) == "—"
    assert numbers.points(-1.25) == "-1.2 points" and numbers.points(2.0) == "+2.0 points"
    assert numbers.gpu_hours(12345.6) == "12,346" and numbers.gpu_hours(42.46) == "42.5"
    assert numbers.count(1234567) == "1,234,567"
    assert numbers.minutes(750) == "12.5 min" and numbers.minutes(80_040) == "1,334.0 min"


def test_trend_note_says_why_when_the_backend_gives_no_trend() -> None:
    shown, cls = trend_note(-2.0, 80.0, None, 12)
    assert shown == "-2.0 points vs 80.0% in the range before (12 jobs)" and cls == "ett-down"
    reason = "the range before holds 1 job (a trend needs 3)"
    assert trend_note(None, 60.0, reason, 1) == (f"no trend: {reason}", "")
    assert trend_note(None, 60.0) == (None, "")


def test_the_vendored_plotly_bundle_matches_plotly_and_draws_every_trace_used() -> None:
    head = PLOTLY_BUNDLE.read_text(encoding="utf-8")[:400]
    version = re.search(r"plotly\.js \(cartesian - minified\) v(\S+)", head)
    assert version and version.group(1) == get_plotlyjs_version()
    assert (PLOTLY_BUNDLE.parent / "plotly.js-LICENSE").read_text().startswith("MIT License")
    # The trace types the dashboard's figures build: all in the cartesian bundle.
    used = {go.Bar().type, go.Scatter().type, go.Heatmap().type}
    body = PLOTLY_BUNDLE.read_text(encoding="utf-8")
    for trace in used:
        assert f'name:"{trace}"' in body or f"name: '{trace}'" in body, trace
