"""Every chart and table downloads as CSV: what it draws, row by row (dashboard.csv_export)."""

from __future__ import annotations

import base64
import csv
import io

import numpy as np
import plotly.graph_objects as go
import pytest
from dash import dcc

from backend.config import Settings
from backend.db import Database
from dashboard import csv_export
from dashboard.components import _send_csv, graph, md_link, num_col, table
from dashboard.filters import Filters
from dashboard.pages import fleet
from dashboard.palette import COMPONENT_LABELS
from tests.dashboard.conftest import dashboard_request, find, seed_demo, whole


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_a_bar_chart_is_a_row_per_bar_with_its_series() -> None:
    fig = go.Figure(
        [
            go.Bar(name="PT2 compile", x=["2026-01-01", "2026-01-02"], y=[1.5, 2.25]),
            go.Bar(name="checkpoint", x=["2026-01-01"], y=[0.5], customdata=[["c-1", 3]]),
        ]
    )
    text = csv_export.figure_csv(fig.to_plotly_json())
    assert _rows(text) == [
        ["series", "x", "y", "key"],
        ["PT2 compile", "2026-01-01", "1.5", ""],
        ["PT2 compile", "2026-01-02", "2.25", ""],
        ["checkpoint", "2026-01-01", "0.5", "c-1; 3"],
    ]


def test_typed_arrays_decode_as_the_browser_sends_them() -> None:
    ys = np.array([1.0, 2.5, 4.0])
    spec = {"dtype": "f8", "bdata": base64.b64encode(ys.tobytes()).decode()}
    as_json = {"0": 7, "1": 8, "2": 9}  # a Float64Array through JSON.stringify
    text = csv_export.figure_csv({"data": [{"name": "a", "x": as_json, "y": spec}]})
    assert _rows(text)[1:] == [["a", "7", "1.0"], ["a", "8", "2.5"], ["a", "9", "4.0"]]


def test_a_heatmap_is_a_row_per_cell() -> None:
    fig = go.Figure(go.Heatmap(x=["w1", "w2"], y=["slo-a"], z=[[0.5, 1.5]], name="breach"))
    assert _rows(csv_export.figure_csv(fig.to_plotly_json())) == [
        ["series", "x", "y", "z"],
        ["breach", "w1", "slo-a", "0.5"],
        ["breach", "w2", "slo-a", "1.5"],
    ]


def test_a_table_keeps_its_headers_and_writes_a_link_as_its_text() -> None:
    columns = [
        {"id": "job", "name": "job", "presentation": "markdown"},
        num_col("lost", "GPU-h lost"),
        {"id": "note", "name": ["group", "note"]},
    ]
    rows = [
        {"job": md_link("a[1]", "/job?job_id=a[1]"), "lost": 12.345678, "note": 'say "hi", ok'},
        {"job": "plain", "lost": None, "note": None, "hidden": "not a column"},
    ]
    assert _rows(csv_export.table_csv(rows, columns)) == [
        ["job", "GPU-h lost", "group note"],
        ["a[1]", "12.345678", 'say "hi", ok'],
        ["plain", "", ""],
    ]


def test_the_download_callback_sends_a_named_csv() -> None:
    shown = {
        "target": "fleet-lost-component-graph",
        "figure": {"data": [{"name": "x", "x": [1], "y": [2]}]},
    }
    sent = _send_csv(shown)
    assert sent["filename"] == "fleet-lost-component.csv"
    assert sent["content"] == "series,x,y\nx,1,2\n"
    table_shown = {"target": "t-table", "rows": [{"a": 1}], "columns": [{"id": "a", "name": "A"}]}
    assert _send_csv(table_shown)["content"] == "A\n1\n"


def test_every_chart_and_table_comes_with_a_download() -> None:
    drawn = graph("g-graph", go.Figure())
    listed = table("t-table", [{"a": 1}], [{"id": "a", "name": "a"}], row_selectable="multi")
    for block, target in ((drawn, "g-graph"), (listed, "t-table")):
        ids = [getattr(c, "id", None) for c in block.children]
        assert {"type": "ett-csv", "target": target} in ids
        assert any(isinstance(c, dcc.Download) for c in block.children)
    assert find(listed, "t-table").row_selectable == "multi"


def test_a_fleet_chart_as_csv_holds_its_numbers(database: Database, settings: Settings) -> None:
    seed_demo(database, settings)
    with dashboard_request(settings, database):
        page = whole(fleet)
        lost = fleet.fleet_view(Filters.from_query({})).lost_by_component
    figure = find(page, "fleet-lost-component-graph").figure
    rows = _rows(csv_export.figure_csv(figure.to_plotly_json()))
    assert rows[0][:3] == ["series", "x", "y"]
    components = {*COMPONENT_LABELS.values(), "other"}
    bars = [r for r in rows[1:] if r[0] in components]
    assert {r[0] for r in bars} == {COMPONENT_LABELS.get(c, c) for c in set(lost["component"])}
    # Every bar of the stack is a line, and the lines add up to the range's lost GPU-hours.
    assert sum(float(r[2]) for r in bars) == pytest.approx(float(lost["gpu_h"].sum()), rel=1e-9)
