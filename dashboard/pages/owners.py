"""Owners page: each team's components, the GPU-hours they hold, SLOs, alerts and silences."""

from __future__ import annotations

import time
from typing import Any

import dash
from dash import Input, Output, State, callback, ctx, dcc, html

from backend.alerts import read
from backend.ett.catalogue import COMPONENTS
from dashboard import actions, data, figures
from dashboard.components import (
    deferred,
    filter_bar,
    graph,
    link_col,
    md_link,
    nothing_shown,
    num_col,
    register_bucket_clicks,
    register_deferred,
    register_filter_callback,
    section,
    table,
)
from dashboard.filters import Filters
from dashboard.palette import COMPONENT_COLORS, COMPONENT_LABELS

PREFIX = "owners"


def _when(ts: float | None) -> str:
    # Clamped like the REST answers, so an absurd stored silence cannot break the page.
    shown = read.shown_time(ts)
    return "" if shown is None else shown[:16].replace("T", " ")


def layout(**query: Any) -> html.Div:
    """The owners page (one owner's view with `?owner=`)."""
    filters = Filters.from_query(query, component_owner=True)
    bar = filter_bar(
        PREFIX,
        filters,
        path="/owners",
        models=data.model_names(),
        teams=data.team_names(),
        owners=data.owner_names(),
        show_owner=True,
        show_label=False,
        quick=True,
    )
    held = data.owner_components(filters.with_(owner=None))
    held_shown = held[held["owner"] == filters.owner] if filters.owner else held
    # An alert's link names its component: narrow the tables to it.
    component = filters.extra.get("component")
    if component:
        held_shown = held_shown[held_shown["component"] == component]
    title = "Owners" if not filters.owner else f"Owner {filters.owner}"
    body: list[Any] = [html.H1(title + (f" · {component}" if component else "")), bar]
    if filters.owner and not held_shown.empty:
        trend = data.owner_trend(filters, set(held_shown["component"]))
        body.append(
            section(
                f"Lost GPU-hours in {filters.owner}'s components",
                graph(
                    "owners-trend-graph",
                    figures.lost_stacked(
                        trend,
                        by="component",
                        title=f"Lost GPU-hours per {filters.bucket} in the components "
                        f"{filters.owner} owns",
                        colors=COMPONENT_COLORS,
                        order=figures.LOST_COMPONENTS,
                    ),
                ),
            )
        )
    if held.empty:
        body.append(nothing_shown("owners-empty", "lost GPU-hour", has_data=data.has_data()))
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
    body.append(deferred(PREFIX, filters.query(), min_height=800))
    return html.Div(body)


# ---------------------------------------------------------------- what drives each component

DRIVERS_TOP = 5


def _drivers_below(filters: Filters, component: str | None) -> list[Any]:
    """The drivers section for one owner (none for the all-owners view or an empty range)."""
    if not filters.owner:
        return []
    held = data.owner_components(filters.with_(owner=None))
    held = held[(held["owner"] == filters.owner) & (held["gpu_h"] > 0)]
    if component:
        held = held[held["component"] == component]
    return [_drivers_section(filters, held)] if not held.empty else []


def _drivers_section(filters: Filters, held: Any) -> Any:
    """Per component the owner holds (most GPU-hours lost first): the models and the jobs that
    lost most in its parts the owner owns over the range, each linked to its page."""
    owner = filters.owner
    order = held.groupby("component")["gpu_h"].sum().sort_values(ascending=False)
    blocks = [_component_drivers(filters, str(c), owner) for c in order.index]
    return section(
        f"What drives {owner}'s components",
        *blocks,
        note=f"The {DRIVERS_TOP} models and jobs that lost most GPU-hours in the range in each "
        f"component {owner} owns (only the parts it owns), as GET /api/v1/fleet/lost?by=model "
        "and by=job give them.",
    )


def _component_drivers(filters: Filters, component: str, owner: str | None) -> Any:
    """One component's top models and top jobs, side by side, and a link to all its jobs."""
    label = COMPONENT_LABELS.get(component, component)
    models = data.lost_drivers(
        filters, by="model", component=component, component_owner=owner, top=DRIVERS_TOP
    )
    jobs = data.lost_drivers(
        filters, by="job", component=component, component_owner=owner, top=DRIVERS_TOP
    )
    base = filters.with_(owner=None, extra={})
    model_rows = [
        {
            "model": md_link(str(r["model"]), base.href("/model", model=r["model"])),
            "gpu_h": r["gpu_h"],
            "share": 100.0 * (r["share"] or 0.0),
        }
        for r in models
        if r["model"]
    ]
    job_rows = [
        {
            "job": md_link(r["job_id"], base.href("/job", job_id=r["job_id"], model=None)),
            "model": r["model"] or "",
            "gpu_h": r["gpu_h"],
        }
        for r in jobs
    ]
    all_jobs = base.with_(model=None).href("/job", view="component", component=component)
    return html.Div(
        [
            html.H4(label),
            html.Div(
                [
                    table(
                        f"owners-drivers-models-{component}",
                        model_rows,
                        [
                            link_col("model", "top models"),
                            num_col("gpu_h", f"GPU-h lost in {label}", 1),
                            num_col("share", "% of it", 1),
                        ],
                        page_size=DRIVERS_TOP,
                    ),
                    table(
                        f"owners-drivers-jobs-{component}",
                        job_rows,
                        [
                            link_col("job", "top jobs"),
                            {"id": "model", "name": "model"},
                            num_col("gpu_h", f"GPU-h lost in {label}", 1),
                        ],
                        page_size=DRIVERS_TOP,
                    ),
                ],
                className="ett-two-col",
            ),
            dcc.Link(
                f"Every job by GPU-hours in {label} →",
                href=all_jobs,
                id=f"owners-drivers-all-{component}",
            ),
        ],
        id=f"owners-drivers-{component}",
        className="ett-drivers",
    )


def below(query: dict[str, Any]) -> list[Any]:
    """The owners page under the first screen: alerts, SLOs and their history, silences."""
    filters = Filters.from_query(query, component_owner=True)
    component = filters.extra.get("component")
    alerts = data.alerts_view(filters.owner, time.time(), component)
    body: list[Any] = _drivers_below(filters, component)
    body.append(html.Div(_alerts_section(alerts["alerts"]), id="owners-alerts-box"))
    history = data.slo_history(filters, filters.owner)
    body.append(
        section(
            f"SLOs ({len(alerts['slos'])})",
            table(
                "owners-slos-table",
                [_slo_row(h) for h in history],
                [
                    {"id": "name", "name": "SLO"},
                    {"id": "owner", "name": "owner"},
                    {"id": "component", "name": "component / phase"},
                    {"id": "objective", "name": "objective"},
                    {"id": "current", "name": "now"},
                    {"id": "status", "name": "status"},
                    {"id": "history", "name": "history (range)"},
                    {"id": "breached", "name": "breached"},
                    {"id": "severity", "name": "severity"},
                ],
                page_size=25,
            )
            if alerts["slos"]
            else html.P(
                "No SLOs defined: add them in ETT_SLOS_FILE or PUT /api/v1/slos/{name}.",
                id="owners-no-slos",
            ),
        )
    )
    if history:
        body.append(
            section(
                "SLO compliance history",
                graph(
                    "owners-slo-history-graph",
                    figures.slo_compliance(history, fmt=data.slo_unit),
                ),
                note="Each SLO evaluated as the alert evaluator does, at the end of each day "
                "(week, for long ranges) of the range. Hover a cell for its value.",
            )
        )
    body.append(_episodes_section(data.alert_episodes(filters, filters.owner, component)))
    body.append(html.Div(_silences_section(alerts["silences"]), id="owners-silences-box"))
    body.append(_actions_panel(filters.owner, component, alerts))
    body.append(dcc.Store(id="owners-scope", data={"owner": filters.owner, "component": component}))
    return body


def _slo_row(h: dict[str, Any]) -> dict[str, Any]:
    """One SLO's table row: objective and value with units, status, sparkline, breach days."""
    spec, points = h["spec"], h["points"]
    bad = [t for t, _v, b in points if b]
    status = "—" if h["current"] is None else "breached" if spec.breached(h["current"]) else "met"
    return {
        "name": spec.name,
        "owner": spec.owner,
        "component": spec.phase or COMPONENT_LABELS.get(spec.component, spec.component),
        "objective": ("≥ " if spec.is_floor else "≤ ") + data.slo_unit(spec, spec.objective),
        "current": data.slo_unit(spec, h["current"]),
        "status": status,
        "history": figures.sparkline([v for _t, v, _b in points]),
        "breached": f"{len(bad)} of {len(points)} · last {_when(bad[-1])[:10]}" if bad else "never",
        "severity": spec.severity,
    }


def _alerts_section(rows: list[dict[str, Any]]) -> Any:
    firing = [a for a in rows if a["state"] == "firing"]
    return section(
        f"Alerts ({len(firing)} firing)",
        table(
            "owners-alerts-table",
            [{**a, "since": _when(a["since"])} for a in rows],
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
                {"id": "acked_by", "name": "acknowledged by"},
            ],
            page_size=15,
        )
        if rows
        else html.P("No alerts: every SLO is met, or none is defined yet.", id="owners-no-alerts"),
    )


def _episode_row(e: dict[str, Any]) -> dict[str, Any]:
    """One episode's row: when it fired and ended, its peak in the SLO's unit, who acknowledged."""
    spec = e["spec"]
    peak = data.slo_unit(spec, e["peak"]) if spec is not None else f"{e['peak']:,.3f}"
    return {
        "slo": e["slo"],
        "scope": e["model"] or e["host"] or "fleet",
        "fired": (e["fired_at"] or "")[:16].replace("T", " "),
        "resolved": (e["resolved_at"] or "still firing")[:16].replace("T", " "),
        "peak": peak if e["peak"] is not None else "—",
        "acked_by": ", ".join(e["acknowledged_by"]) or "—",
        "silenced": "yes" if e["silenced"] else "",
        "notified": e["notified"],
    }


def _episodes_section(episodes: list[dict[str, Any]]) -> Any:
    """The alert episodes of the range: start, end, peak, who acknowledged, channels notified."""
    resolved = sum(1 for e in episodes if e["resolved_at"])
    return section(
        f"Alert episodes in the range ({len(episodes)}, {resolved} resolved)",
        table(
            "owners-episodes-table",
            [_episode_row(e) for e in episodes],
            [
                {"id": "slo", "name": "SLO"},
                {"id": "scope", "name": "model / host"},
                {"id": "fired", "name": "fired (UTC)"},
                {"id": "resolved", "name": "resolved (UTC)"},
                {"id": "peak", "name": "peak"},
                {"id": "acked_by", "name": "acknowledged by"},
                {"id": "silenced", "name": "silenced"},
                {"id": "notified", "name": "channels notified"},
            ],
            page_size=15,
        )
        if episodes
        else html.P("No alert fired in the range.", id="owners-no-episodes"),
        note="Each time an alert fired, until it resolved; the peak is its worst value while "
        "firing. A silence in force when it fired held its notice back.",
    )


def _silences_section(rows: list[dict[str, Any]]) -> Any:
    return section(
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
                for x in rows
            ],
            [
                {"id": k, "name": k.replace("_", " ")}
                for k in (
                    "id",
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
        if rows
        else html.P("No silences.", id="owners-no-silences"),
    )


def _ack_options(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [
        {
            "label": f"{a['slo']} · {a['model'] or 'all models'} ({a['state']})",
            "value": a["fingerprint"],
        }
        for a in rows
        if a["state"] in ("firing", "pending")
    ]


def _expire_options(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "label": f"#{x['id']} {x['owner']} / {x['component']} / {x['model']}"
            f" until {_when(x['ends_at'])}",
            "value": x["id"],
        }
        for x in rows
        if x["active"]
    ]


def _actions_panel(owner: str | None, component: str | None, alerts: dict[str, Any]) -> Any:
    field = {"display": "flex", "flexDirection": "column", "gap": "2px", "minWidth": "160px"}
    row = {"display": "flex", "gap": "12px", "flexWrap": "wrap", "alignItems": "flex-end"}
    return section(
        "Silence or acknowledge",
        html.Div(
            [
                html.P(
                    "A silence mutes the notices of matching alerts until it expires; an "
                    "acknowledgement tells the others someone has the alert in hand. Both need an "
                    "admin token, as in the REST API.",
                    className="ett-hint",
                ),
                html.Div(
                    [
                        html.Label("Admin token"),
                        dcc.Input(
                            id="owners-token",
                            type="password",
                            placeholder="ett_...",
                            style={"width": "360px"},
                        ),
                    ],
                    style=field,
                ),
                html.H4("New silence"),
                html.Div(
                    [
                        html.Div(
                            [
                                html.Label("Owner"),
                                dcc.Dropdown(
                                    id="owners-silence-owner",
                                    options=data.owner_names(),
                                    value=owner,
                                    placeholder="any owner",
                                ),
                            ],
                            style=field,
                        ),
                        html.Div(
                            [
                                html.Label("Component"),
                                dcc.Dropdown(
                                    id="owners-silence-component",
                                    options=[
                                        {"label": COMPONENT_LABELS.get(c, c), "value": c}
                                        for c in COMPONENTS
                                    ],
                                    value=component,
                                    placeholder="any component",
                                ),
                            ],
                            style=field,
                        ),
                        html.Div(
                            [
                                html.Label("Model"),
                                dcc.Input(id="owners-silence-model", placeholder="any model"),
                            ],
                            style=field,
                        ),
                        html.Div(
                            [
                                html.Label("Hours"),
                                dcc.Input(
                                    id="owners-silence-hours",
                                    type="number",
                                    value=4,
                                    min=0.5,
                                    step=0.5,
                                ),
                            ],
                            style=field,
                        ),
                        html.Div(
                            [
                                html.Label("Comment"),
                                dcc.Input(
                                    id="owners-silence-comment",
                                    placeholder="why",
                                    style={"width": "280px"},
                                ),
                            ],
                            style=field,
                        ),
                        html.Button("Create silence", id="owners-silence-btn"),
                    ],
                    style=row,
                ),
                html.H4("Acknowledge an alert / expire a silence"),
                html.Div(
                    [
                        html.Div(
                            [
                                html.Label("Alert"),
                                dcc.Dropdown(
                                    id="owners-ack-alert",
                                    options=_ack_options(alerts["alerts"]),
                                    placeholder="firing or pending alert",
                                    style={"width": "360px"},
                                ),
                            ],
                            style=field,
                        ),
                        html.Div(
                            [
                                html.Label("Comment"),
                                dcc.Input(id="owners-ack-comment", placeholder="optional"),
                            ],
                            style=field,
                        ),
                        html.Button("Acknowledge", id="owners-ack-btn"),
                        html.Div(
                            [
                                html.Label("Silence"),
                                dcc.Dropdown(
                                    id="owners-expire-silence",
                                    options=_expire_options(alerts["silences"]),
                                    placeholder="active silence",
                                    style={"width": "320px"},
                                ),
                            ],
                            style=field,
                        ),
                        html.Button("Expire", id="owners-expire-btn"),
                    ],
                    style=row,
                ),
                html.P(id="owners-action-msg", role="status"),
            ]
        ),
    )


@callback(
    Output("owners-action-msg", "children"),
    Output("owners-action-msg", "className"),
    Output("owners-alerts-box", "children"),
    Output("owners-silences-box", "children"),
    Output("owners-ack-alert", "options"),
    Output("owners-expire-silence", "options"),
    Input("owners-silence-btn", "n_clicks"),
    Input("owners-ack-btn", "n_clicks"),
    Input("owners-expire-btn", "n_clicks"),
    State("owners-token", "value"),
    State("owners-silence-owner", "value"),
    State("owners-silence-component", "value"),
    State("owners-silence-model", "value"),
    State("owners-silence-hours", "value"),
    State("owners-silence-comment", "value"),
    State("owners-ack-alert", "value"),
    State("owners-ack-comment", "value"),
    State("owners-expire-silence", "value"),
    State("owners-scope", "data"),
    prevent_initial_call=True,
)
def _act(
    _silence: Any,
    _ack: Any,
    _expire: Any,
    token: str | None,
    owner: str | None,
    component: str | None,
    model: str | None,
    hours: float | None,
    comment: str | None,
    fingerprint: str | None,
    ack_comment: str | None,
    silence_id: int | None,
    scope: dict[str, Any] | None,
) -> tuple[Any, ...]:
    """Run the clicked action, then redraw the alerts and silences it changed."""
    try:
        if ctx.triggered_id == "owners-silence-btn":
            message = actions.create_silence(
                token=token,
                owner=owner,
                component=component,
                model=model,
                hours=hours,
                comment=comment,
            )
        elif ctx.triggered_id == "owners-ack-btn":
            message = actions.acknowledge(token=token, fingerprint=fingerprint, comment=ack_comment)
        else:
            message = actions.expire_silence(token=token, silence_id=silence_id)
        css = "ett-action-ok"
    except actions.ActionRefused as err:
        message, css = str(err), "ett-action-error"
    scope = scope or {}
    alerts = data.alerts_view(scope.get("owner"), time.time(), scope.get("component"))
    return (
        message,
        css,
        _alerts_section(alerts["alerts"]),
        _silences_section(alerts["silences"]),
        _ack_options(alerts["alerts"]),
        _expire_options(alerts["silences"]),
    )


dash.register_page(
    __name__, path="/owners", name="Owners", title="ETT% · owners", order=4, layout=layout
)
register_filter_callback(PREFIX)
register_bucket_clicks(PREFIX, "owners-trend-graph")
register_deferred(PREFIX, below)
