"""Owners page: each team's components, the GPU-hours they hold, SLOs, alerts and silences."""

from __future__ import annotations

import time
from typing import Any

import dash
from dash import html

from dashboard import data, figures
from dashboard.components import (
    NO_DATA_HINT,
    empty_state,
    filter_bar,
    graph,
    num_col,
    register_filter_callback,
    section,
    table,
)
from dashboard.filters import Filters
from dashboard.palette import COMPONENT_LABELS

PREFIX = "owners"


def _when(ts: float | None) -> str:
    return "" if ts is None else data.to_datetime([ts]).iloc[0].strftime("%Y-%m-%d %H:%M")


def layout(**query: Any) -> html.Div:
    """The owners page (one owner's view with `?owner=`)."""
    filters = Filters.from_query(query)
    bar = filter_bar(
        PREFIX, filters, path="/owners", models=data.model_names(), owners=data.owner_names()
    )
    view = data.fleet_view(filters.with_(owner=None))
    held = view.owner_components
    held_shown = held[held["owner"] == filters.owner] if filters.owner else held
    alerts = data.alerts_view(filters.owner, time.time())
    # An alert's link names its component: narrow the tables to it.
    component = filters.extra.get("component")
    if component:
        held_shown = held_shown[held_shown["component"] == component]
        alerts["alerts"] = [a for a in alerts["alerts"] if a["component"] == component]
    title = "Owners" if not filters.owner else f"Owner {filters.owner}"
    body: list[Any] = [html.H1(title + (f" · {component}" if component else "")), bar]
    if held.empty:
        body.append(
            empty_state("owners-empty", "No lost GPU-hours in this range yet", NO_DATA_HINT)
        )
    else:
        body.append(
            html.Div(
                [
                    section(
                        "GPU-hours lost, by owning team",
                        graph(
                            "owners-lost-graph",
                            figures.lost_by_owner(
                                held, title="GPU-hours lost in the range, by team and component"
                            ),
                        ),
                    ),
                    section(
                        "Components and their owners",
                        table(
                            "owners-components-table",
                            [
                                {
                                    "owner": r.owner,
                                    "component": COMPONENT_LABELS.get(r.component, r.component),
                                    "gpu_h": r.gpu_h,
                                }
                                for r in held_shown.sort_values(
                                    "gpu_h", ascending=False
                                ).itertuples()
                            ],
                            [
                                {"id": "owner", "name": "owner"},
                                {"id": "component", "name": "component"},
                                num_col("gpu_h", "GPU-h lost", 0),
                            ],
                            page_size=20,
                        ),
                    ),
                ],
                className="ett-two-col",
            )
        )
    firing = [a for a in alerts["alerts"] if a["state"] == "firing"]
    body.append(
        section(
            f"Alerts ({len(firing)} firing)",
            table(
                "owners-alerts-table",
                [{**a, "since": _when(a["since"])} for a in alerts["alerts"]],
                [
                    {"id": "state", "name": "state"},
                    {"id": "severity", "name": "severity"},
                    {"id": "slo", "name": "SLO"},
                    {"id": "owner", "name": "owner"},
                    {"id": "component", "name": "component"},
                    {"id": "model", "name": "model"},
                    num_col("value", "value", 3),
                    num_col("objective", "objective", 3),
                    {"id": "since", "name": "since (UTC)"},
                    {"id": "models", "name": "driven by"},
                ],
                page_size=15,
            )
            if alerts["alerts"]
            else html.P(
                "No alerts: every SLO is met, or none is defined yet.", id="owners-no-alerts"
            ),
        )
    )
    body.append(
        section(
            f"SLOs ({len(alerts['slos'])})",
            table(
                "owners-slos-table",
                [
                    {
                        "name": s["name"],
                        "owner": s["owner"],
                        "component": s.get("phase") or s["component"],
                        "indicator": s["indicator"],
                        "objective": s["objective"],
                        "severity": s.get("severity", ""),
                    }
                    for s in alerts["slos"]
                ],
                [
                    {"id": "name", "name": "SLO"},
                    {"id": "owner", "name": "owner"},
                    {"id": "component", "name": "component / phase"},
                    {"id": "indicator", "name": "indicator"},
                    num_col("objective", "objective", 3),
                    {"id": "severity", "name": "severity"},
                ],
                page_size=15,
            )
            if alerts["slos"]
            else html.P(
                "No SLOs defined: add them in ETT_SLOS_FILE or PUT /api/v1/slos/{name}.",
                id="owners-no-slos",
            ),
        )
    )
    body.append(
        section(
            "Silences",
            table(
                "owners-silences-table",
                [
                    {
                        **x,
                        "starts_at": _when(x["starts_at"]),
                        "ends_at": _when(x["ends_at"]),
                        "active": "yes" if x["active"] else "expired",
                    }
                    for x in alerts["silences"]
                ],
                [
                    {"id": k, "name": k.replace("_", " ")}
                    for k in (
                        "active",
                        "owner",
                        "component",
                        "model",
                        "starts_at",
                        "ends_at",
                        "comment",
                    )
                ],
                page_size=10,
            )
            if alerts["silences"]
            else html.P("No silences.", id="owners-no-silences"),
        )
    )
    return html.Div(body)


dash.register_page(
    __name__, path="/owners", name="Owners", title="ETT% · owners", order=4, layout=layout
)
register_filter_callback(PREFIX)
