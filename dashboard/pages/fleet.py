"""Fleet page: ETT% trend, lost GPU-hours by component and owner, NoF by kind, regressions."""

from __future__ import annotations

from typing import Any

import dash
from dash import Input, Output, State, callback, dcc, html

from backend.metrics.core import MIN_BASE_JOBS
from dashboard import cache, data, figures, numbers
from dashboard.components import (
    annotation_list,
    bucket_jobs_href,
    card,
    cards,
    deferred,
    empty_state,
    filter_bar,
    graph,
    nothing_shown,
    register_deferred,
    register_filter_callback,
    section,
)
from dashboard.filters import Filters
from dashboard.palette import COMPONENT_COLORS

PREFIX = "fleet"


def fleet_view(filters: Filters) -> data.FleetView:
    """The fleet read, once per page load: the layout and the part below share it."""
    return cache.memo("fleet_view", cache.filters_key(filters), lambda: data.fleet_view(filters))


def annotations(filters: Filters) -> Any:
    """The range's annotations, read once per page load."""
    return cache.memo("annotations", cache.filters_key(filters), lambda: data.annotations(filters))


def layout(**query: Any) -> html.Div:
    """The fleet page for the filters in the URL."""
    filters = Filters.from_query(query)
    bar = filter_bar(
        PREFIX,
        filters,
        path="/",
        models=data.model_names(),
        teams=data.team_names(),
        show_bucket=True,
        quick=True,
    )
    view = fleet_view(filters)
    head = [
        html.H1(f"Fleet · model {filters.model}" if filters.model else "Fleet"),
        bar,
        dcc.Location(id="fleet-click-nav", refresh="callback-nav"),
        dcc.Store(id="fleet-filters", data=filters.query()),
    ]
    if view.error:
        return html.Div(
            [*head, empty_state("fleet-empty", "Nothing matches these filters", view.error)]
        )
    h = view.headline
    scope = f"{filters.model} ETT%" if filters.model else "Fleet ETT%"
    notes = annotations(filters)
    if not h["wall_gpu_h"]:
        return html.Div([*head, nothing_shown("fleet-empty", "job", has_data=data.has_data())])
    return html.Div(
        [
            *head,
            cards(
                [
                    card("fleet-ett", f"{scope} (GPU-weighted)", numbers.pct(h["ett_pct"])),
                    card("fleet-lost", "GPU-hours lost", numbers.gpu_hours(h["gpu_hours_lost"])),
                    card("fleet-jobs", "Jobs", numbers.count(h["jobs"])),
                    card("fleet-failures", "Failures", numbers.count(h["failures"])),
                ]
            ),
            section(
                "ETT% trend",
                graph(
                    "fleet-trend-graph",
                    figures.with_annotations(
                        figures.fleet_trend(view.series, bucket=filters.bucket), notes
                    ),
                ),
                annotation_list("fleet-annotations", notes),
                note="Click a point to list the jobs that ran then.",
            ),
            section(
                "Lost GPU-hours by component",
                graph(
                    "fleet-lost-component-graph",
                    figures.with_annotations(
                        figures.lost_stacked(
                            view.lost_by_component,
                            by="component",
                            title=f"Lost GPU-hours per {filters.bucket}, by component",
                            colors=COMPONENT_COLORS,
                            order=figures.LOST_COMPONENTS,
                        ),
                        notes,
                    ),
                ),
                note="Click a bar to list the jobs with time in that component then.",
            ),
            html.Div(
                [
                    _range_by_component(view),
                    section(
                        "Lost GPU-hours by owner",
                        graph(
                            "fleet-lost-owner-graph",
                            figures.lost_by_owner(
                                view.owner_components,
                                title="Lost GPU-hours in the range, by owning team",
                            ),
                        ),
                        note="Click a bar to open the team's page with its SLOs and alerts.",
                    ),
                ],
                className="ett-two-col",
            ),
            deferred(PREFIX, filters.query()),
        ]
    )


def _range_by_component(view: data.FleetView) -> Any:
    """The range's lost GPU-hours per component: the daily stacks above, summed."""
    return section(
        "Lost GPU-hours in the range, by component",
        graph(
            "fleet-lost-range-component-graph",
            figures.lost_range_by_component(
                view.lost_by_component, title="Lost GPU-hours over the whole range, by component"
            ),
        ),
        note="Which component lost the most in the range: the sum of the stacks above.",
    )


def below(query: dict[str, Any]) -> list[Any]:
    """The fleet page under the first screen: failures, regressions, Level 1, top models."""
    filters = Filters.from_query(query)
    view = fleet_view(filters)
    if view.error:
        return []
    top = data.models_table(filters.with_(model=None))
    if filters.model:
        top = top[top["model"] == filters.model]
    l1_points, l1_kinds = data.fleet_level1(filters, view.nof)
    notes = annotations(filters)
    return [
        html.Div(
            [
                section(
                    "Failures",
                    graph("fleet-nof-graph", figures.nof_per_job(view.nof, bucket=filters.bucket)),
                ),
                section(
                    "Regressions",
                    graph("fleet-regressions-graph", figures.regressions(view.regressions)),
                    note="Against the range of equal length just before, for models with at least "
                    f"{MIN_BASE_JOBS} jobs there. Click a bar to open the model.",
                ),
            ],
            className="ett-two-col",
        ),
        section(
            "Level 1: time to start, time to recover, failures",
            graph(
                "fleet-level1-graph",
                figures.with_annotations(
                    figures.level1_over_time(
                        l1_points,
                        title=f"GPU-weighted TTS and TTR per {filters.bucket}; NoF per job by kind",
                        nof_by_kind=l1_kinds,
                    ),
                    notes,
                ),
            ),
            note="The paper's Level-1 analysis: which term holds the loss. TTS per job and TTR "
            "per failure are weighted by the jobs' GPUs.",
        ),
        section(
            "MTTF by job size",
            graph("fleet-mttf-graph", figures.mttf_by_size(data.mttf_by_size(filters))),
            note="Effective training hours per unplanned failure (preemption is planned), by "
            "the jobs' GPU count, over the range's days, fleet-wide (Kokolis et al., HPCA 2025).",
        ),
        section(
            "Where the GPU-hours go, by model",
            graph(
                "fleet-top-models-graph",
                figures.top_models(top),
            ),
            note="Click a bar to open the model; the Models page lists and searches all of them.",
        ),
    ]


dash.register_page(__name__, path="/", name="Fleet", title="ETT% · fleet", order=0, layout=layout)
register_filter_callback(PREFIX)
register_deferred(PREFIX, below)


@callback(
    Output("fleet-click-nav", "href"),
    Input("fleet-regressions-graph", "clickData"),
    Input("fleet-top-models-graph", "clickData"),
    Input("fleet-lost-owner-graph", "clickData"),
    Input("fleet-lost-component-graph", "clickData"),
    Input("fleet-trend-graph", "clickData"),
    Input("fleet-nof-graph", "clickData"),
    State("fleet-filters", "data"),
    prevent_initial_call=True,
)
def _open_detail(
    _reg: Any, _top: Any, _owner: Any, _lost: Any, _trend: Any, _nof: Any, query: dict[str, str]
) -> str:
    """A regressed model's bar opens the model page; an owner's bar opens the owner page; a
    bucket's bar or point (lost by component, ETT% trend, failures) opens that bucket's jobs,
    of that component for a lost bar."""
    trigger = dash.ctx.triggered[0] if dash.ctx.triggered else None
    points = (trigger or {}).get("value", {}) or {}
    points = points.get("points") or []
    if not points:
        raise dash.exceptions.PreventUpdate
    filters = Filters.from_query(query)
    source = trigger["prop_id"].split(".")[0]
    if source in ("fleet-lost-component-graph", "fleet-trend-graph", "fleet-nof-graph"):
        key = points[0].get("customdata")
        component = key[0] if source == "fleet-lost-component-graph" and key else None
        href = bucket_jobs_href(filters, points[0].get("x"), component)
        if href is None:
            raise dash.exceptions.PreventUpdate
        return href
    if not trigger["prop_id"].startswith("fleet-lost-owner-graph"):
        return filters.href("/model", model=points[0]["customdata"][0])
    owner = points[0].get("y")
    if not owner or owner == "other":
        raise dash.exceptions.PreventUpdate
    return filters.href("/owners", owner=owner, model=None)
