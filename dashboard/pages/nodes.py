"""Nodes page: per host over the range, its attempts, failures by cause, failures per
node-day, the GPU-hours lost in its failures' TTRs, and the lemon nodes (docs/RELIABILITY.md)."""

from __future__ import annotations

from typing import Any

import dash
from dash import html

from dashboard import data, figures, numbers
from dashboard.components import (
    card,
    cards,
    filter_bar,
    graph,
    nothing_shown,
    num_col,
    register_filter_callback,
    section,
    table,
)
from dashboard.filters import Filters

PREFIX = "nodes"


def _causes(counts: dict[str, int]) -> str:
    return ", ".join(f"{cause} {n}" for cause, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def layout(**query: Any) -> html.Div:
    """The Nodes page for the dates in the URL."""
    filters = Filters.from_query(query)
    bar = filter_bar(
        PREFIX, filters, path="/nodes", show_model=False, show_team=False, show_label=False
    )
    head = [html.H1("Nodes"), bar]
    view = data.nodes_view(filters)
    rows = view["nodes"]
    if not rows:
        return html.Div([*head, nothing_shown("nodes-empty", "host", has_data=data.has_data())])
    fleet, test = view["fleet"], view["test"]
    lemons = [r for r in rows if r["lemon"]]
    table_rows = [
        {
            "host": r["host"],
            "lemon": "lemon" if r["lemon"] else "",
            "attempts": r["attempts"],
            "exposure_node_days": r["exposure_node_days"],
            "unplanned_failures": r["unplanned_failures"],
            "failures_per_node_day": r["failures_per_node_day"] or 0.0,
            "expected_failures": r["expected_failures"],
            "lemon_score": r["lemon_score"],
            "ttr_lost_gpu_h": r["ttr_lost_gpu_h"],
            "causes": _causes(r["failures_by_cause"]),
        }
        for r in rows
    ]
    columns = [
        {"id": "host", "name": "Host"},
        {"id": "lemon", "name": "Lemon"},
        num_col("attempts", "Attempts", 0),
        num_col("exposure_node_days", "Node-days", 1),
        num_col("unplanned_failures", "Unplanned failures", 0),
        num_col("failures_per_node_day", "Failures / node-day", 3),
        num_col("expected_failures", "Expected at fleet rate", 2),
        num_col("lemon_score", "Lemon score", 1),
        num_col("ttr_lost_gpu_h", "GPU-h lost in TTRs", 1),
        {"id": "causes", "name": "Failures by cause"},
    ]
    rate = fleet["failures_per_node_day"]
    return html.Div(
        [
            *head,
            cards(
                [
                    card("nodes-hosts", "Hosts", numbers.count(fleet["hosts"])),
                    card("nodes-lemons", "Lemon nodes", numbers.count(fleet["lemons"])),
                    card(
                        "nodes-rate",
                        "Fleet unplanned failures / node-day",
                        "–" if rate is None else f"{rate:.3f}",
                    ),
                    card(
                        "nodes-ttr",
                        "GPU-hours lost in the TTRs of lemons' failures",
                        numbers.gpu_hours(sum(r["ttr_lost_gpu_h"] for r in lemons)),
                    ),
                ]
            ),
            section(
                "Lemon nodes",
                html.Ul(
                    [
                        html.Li(
                            f"{r['host']}: {r['unplanned_failures']} unplanned failures in "
                            f"{r['exposure_node_days']:.1f} node-days, "
                            f"{r['expected_failures']:.2f} expected at the fleet's rate "
                            f"(q = {r['q_value']:.2g})"
                        )
                        for r in lemons
                    ]
                    or [html.Li("No lemon node in this range.")],
                    id="nodes-lemon-list",
                ),
                note=f"A host is a lemon when its unplanned failures are an outlier for its "
                f"exposure: {test['method']}; tested from {test['min_exposure_node_days']:g} "
                f"node-days and {test['min_failures']} failures, lemon at q <= {test['alpha']:g}.",
            ),
            section(
                "Failures per node-day",
                graph("nodes-rate-graph", figures.node_failure_rates(rows)),
                note="A failure counts on every host of its attempt.",
            ),
            section(
                "Hosts",
                table("nodes-table", table_rows, columns, page_size=25, filterable=True),
            ),
        ]
    )


dash.register_page(
    __name__, path="/nodes", name="Nodes", title="ETT% · nodes", order=6, layout=layout
)
register_filter_callback(PREFIX)
