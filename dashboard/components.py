"""Building blocks shared by the pages: filter bar, headline cards, empty states, tables."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import dash
import pandas as pd
import plotly.graph_objects as go
from dash import MATCH, Input, Output, State, callback, clientside_callback, dash_table, dcc, html
from dash.exceptions import PreventUpdate

from backend.ett.catalogue import COMPONENTS
from backend.fleet.days import DAY_S, bucket_end, bucket_start
from backend.text import link_problem
from dashboard import csv_export, numbers
from dashboard.filters import QUICK_RANGES, REFRESH_S, Filters, auto_bucket, quick_range

GRAPH_CONFIG = {"displaylogo": False, "displayModeBar": "hover"}
FONT = '-apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif'


def graph(graph_id: str, figure: go.Figure) -> html.Div:
    """A chart with the dashboard's defaults and its CSV download."""
    return downloadable(
        graph_id, dcc.Graph(id=graph_id, figure=figure, config=GRAPH_CONFIG, className="ett-graph")
    )


def downloadable(target: str, element: Any) -> html.Div:
    """`element` (a chart or table whose id is `target`) with a button that downloads it as CSV.

    The browser sends what it shows (the chart's figure, the table's rows as sorted and
    filtered) and the server writes the CSV (dashboard.csv_export).
    """
    return html.Div(
        [
            element,
            html.Button(
                "⬇ CSV",
                id={"type": "ett-csv", "target": target},
                n_clicks=0,
                className="ett-csv-button",
                title="Download this as CSV",
            ),
            dcc.Store(id={"type": "ett-csv-shown", "target": target}),
            dcc.Download(id={"type": "ett-csv-file", "target": target}),
        ],
        className="ett-downloadable",
    )


# What the browser shows under the id the button names: a chart's figure or a table's rows
# (after its sort and filter), through Dash's component API; typed arrays as plain lists.
clientside_callback(
    """
    function(n, id) {
        const no = window.dash_clientside.no_update;
        const api = window.dash_component_api;
        if (!n || !api || !api.getLayout) { return no; }
        const node = api.getLayout(id.target);
        const props = (node && node.props) || {};
        const plain = (v) => (ArrayBuffer.isView(v) ? Array.from(v) :
            Array.isArray(v) ? v.map(plain) : v);
        if (props.figure) {
            const keep = ["name", "type", "x", "y", "z", "base", "customdata", "orientation"];
            const data = (props.figure.data || []).map((t) => {
                const out = {};
                keep.forEach((k) => { if (t[k] !== undefined) { out[k] = plain(t[k]); } });
                return out;
            });
            return {target: id.target, n: n, figure: {data: data}};
        }
        const rows = props.derived_virtual_data || props.data || [];
        return {target: id.target, n: n, rows: rows, columns: props.columns || []};
    }
    """,
    Output({"type": "ett-csv-shown", "target": MATCH}, "data"),
    Input({"type": "ett-csv", "target": MATCH}, "n_clicks"),
    State({"type": "ett-csv", "target": MATCH}, "id"),
    prevent_initial_call=True,
)


@callback(
    Output({"type": "ett-csv-file", "target": MATCH}, "data"),
    Input({"type": "ett-csv-shown", "target": MATCH}, "data"),
    prevent_initial_call=True,
)
def _send_csv(shown: dict[str, Any] | None) -> dict[str, Any]:
    """The CSV of what the browser showed."""
    if not shown or not isinstance(shown.get("target"), str):
        raise PreventUpdate
    if isinstance(shown.get("figure"), dict):
        text = csv_export.figure_csv(shown["figure"])
    else:
        text = csv_export.table_csv(list(shown.get("rows") or []), list(shown.get("columns") or []))
    return dcc.send_string(text, csv_export.filename(shown["target"]), type="text/csv")


def deferred(prefix: str, query: dict[str, Any], min_height: int = 600) -> html.Div:
    """The part of a page below the fold, drawn after the part above it.

    The page's layout sends the first screen alone; a second callback (`register_deferred`)
    fills this block right after, so its charts are computed while the browser draws the
    first ones.
    """
    return html.Div(
        [
            dcc.Store(id=f"{prefix}-deferred-query", data=query),
            html.Div(
                html.P("Loading the charts below…", className="ett-note"),
                id=f"{prefix}-deferred",
                style={"minHeight": f"{min_height}px"},
            ),
        ]
    )


def register_deferred(prefix: str, render: Callable[[dict[str, Any]], Any]) -> None:
    """The callback that fills `prefix`'s deferred block with `render(query)`."""

    @callback(
        Output(f"{prefix}-deferred", "children"),
        Output(f"{prefix}-deferred", "style"),
        Input(f"{prefix}-deferred-query", "data"),
    )
    def _fill(query: dict[str, Any] | None) -> tuple[Any, dict[str, str]]:
        return render(query or {}), {}


def card(
    card_id: str,
    label: str,
    value: str,
    note: str | None = None,
    note_class: str = "",
    *,
    scope: str | None = None,
) -> html.Div:
    """A headline figure: a big number with its label (the number's element id is `card_id`);
    `scope` names what it is measured over ("last 30 d · 42 jobs", id `<card_id>-scope`)."""
    children: list[Any] = [
        html.Div(label, className="ett-card-label"),
        html.Div(value, id=card_id, className="ett-card-value"),
    ]
    if scope:
        children.append(html.Div(scope, id=f"{card_id}-scope", className="ett-card-scope"))
    if note:
        children.append(
            html.Div(note, id=f"{card_id}-note", className=f"ett-card-note {note_class}".strip())
        )
    return html.Div(children, className="ett-card")


def window_scope(filters: Filters, jobs: int | None) -> str:
    """What a headline number is measured over: "last 30 d · 42 jobs"."""
    return f"{filters.window_label()} · {numbers.count(jobs)} jobs"


def trend_note(
    trend_pp: float | None,
    base_pct: float | None,
    reason: str | None = None,
    base_jobs: int | None = None,
) -> tuple[str | None, str]:
    """A trend in points with the base it compares against, and its class (coloured by sign).

    The backend gives no trend on too small a base (`core.trend_reason`): the note then says
    why, when a reason is given, and nothing otherwise.
    """
    if trend_pp is None or base_pct is None:
        return (f"no trend: {reason}" if reason else None), ""
    sign = "ett-up" if trend_pp > 0.05 else "ett-down" if trend_pp < -0.05 else ""
    jobs = "" if base_jobs is None else f" ({base_jobs:,} jobs)"
    return f"{numbers.points(trend_pp)} vs {numbers.pct(base_pct)} in the range before{jobs}", sign


def cards(items: Sequence[html.Div]) -> html.Div:
    """A row of headline cards."""
    return html.Div(list(items), className="ett-cards")


def empty_state(element_id: str, title: str, what_to_do: str) -> html.Div:
    """Say there is nothing to show and what to do about it."""
    return html.Div(
        [html.H3(title), html.P(what_to_do)],
        id=element_id,
        className="ett-empty",
    )


NO_DATA_HINT = (
    "Send events from a trainer (trainer_agent) or scheduler hooks to POST /api/v1/events, "
    "or load the demo fleet with `ett demo`. Then reload this page."
)


NO_MATCH_HINT = (
    "Data exists, but not for these filters: widen the date range or clear the model, team "
    "or label filter."
)


def nothing_shown(element_id: str, what: str, *, has_data: bool, hint: str = NO_DATA_HINT) -> Any:
    """The truthful empty state: "no X matches these filters" when data exists, else "no data yet"."""
    if has_data:
        return empty_state(element_id, f"No {what} matches these filters", NO_MATCH_HINT)
    return empty_state(element_id, f"No {what} yet", hint)


def annotation_list(element_id: str, notes: Any, *, most: int = 8) -> html.Details | None:
    """The annotations drawn on a chart (◆), listed under it, newest first (None when none)."""
    if notes is None or notes.empty:
        return None
    rows = notes.sort_values("ts", ascending=False).head(most)
    items = [
        html.Li(
            [
                html.Span(f"{ts:%Y-%m-%d} ", className="ett-note-date"),
                html.A(title, href=link)
                if isinstance(link, str) and link and link_problem(link) is None
                else title,
                html.Span(f" · {model}", className="ett-note") if isinstance(model, str) else "",
            ]
        )
        for ts, title, link, model in zip(
            rows["ts"], rows["title"], rows["link"], rows["model"], strict=True
        )
    ]
    more = f" (latest {most} of {len(notes)})" if len(notes) > most else ""
    return html.Details(
        [html.Summary(f"◆ {len(notes)} annotations{more}"), html.Ul(items)],
        id=element_id,
        className="ett-annotations",
        open=True,
    )


def section(title: str, *children: Any, note: str | None = None) -> html.Section:
    """A titled block of a page."""
    head: list[Any] = [html.H2(title)]
    if note:
        head.append(html.P(note, className="ett-note"))
    return html.Section(head + list(children), className="ett-section")


def filter_bar(
    prefix: str,
    filters: Filters,
    *,
    path: str,
    models: Sequence[str] = (),
    teams: Sequence[str] = (),
    owners: Sequence[str] = (),
    show_bucket: bool = False,
    show_model: bool = True,
    show_team: bool = True,
    show_owner: bool = False,
    show_label: bool = True,
    quick: bool = False,
) -> html.Div:
    """Date range, model, team, label (and bucket; owner on the owners page) controls; with
    `quick`, the quick ranges (24 h, 7 d, 30 d, 90 d) and the auto-refresh.

    A change rewrites the URL. Hidden controls still carry their value, so a filter a page
    does not use survives the visit and is not applied where it means nothing.
    """
    controls: list[Any] = [
        dcc.Location(id=f"{prefix}-filter-nav", refresh="callback-nav"),
        dcc.Store(id=f"{prefix}-filter-extra", data={"path": path, **filters.extra}),
        html.Label(
            [
                "Dates (UTC)",
                dcc.DatePickerRange(
                    id=f"{prefix}-filter-dates",
                    start_date=filters.start.isoformat(),
                    end_date=filters.end.isoformat(),
                    display_format="YYYY-MM-DD",
                    minimum_nights=0,
                ),
            ]
        ),
    ]
    model_options = list(models)
    if filters.model and filters.model not in model_options:
        model_options.insert(0, filters.model)
    controls.append(
        html.Label(
            [
                "Model",
                dcc.Dropdown(
                    id=f"{prefix}-filter-model",
                    options=model_options,
                    value=filters.model,
                    placeholder=f"all {len(model_options)} models (type to search)",
                    searchable=True,
                    clearable=True,
                ),
            ],
            className="ett-filter-wide",
            style={} if show_model else {"display": "none"},
        )
    )
    controls.append(
        _choice(
            prefix, "team", "Team (owns the model)", filters.team, teams, "all teams", show_team
        )
    )
    controls.append(
        _choice(
            prefix,
            "owner",
            "Owner (owns the component)",
            filters.owner,
            owners,
            "all owners",
            show_owner,
        )
    )
    controls.append(
        html.Label(
            [
                "Label",
                dcc.Input(
                    id=f"{prefix}-filter-label",
                    type="text",
                    value=filters.label_text or "",
                    placeholder="key=value",
                    debounce=True,
                ),
            ],
            style={} if show_label else {"display": "none"},
        )
    )
    controls.append(
        html.Label(
            [
                "Bucket",
                dcc.RadioItems(
                    id=f"{prefix}-filter-bucket",
                    options=["day", "week", "month"],
                    value=filters.bucket,
                    inline=True,
                ),
            ],
            style={} if show_bucket else {"display": "none"},
        )
    )
    controls.append(_quick_controls(prefix, filters, quick))
    if filters.notice:
        controls.append(
            html.Div(filters.notice, id=f"{prefix}-filter-notice", className="ett-filter-notice")
        )
    return html.Div(controls, className="ett-filters", id=f"{prefix}-filters")


def _quick_controls(prefix: str, filters: Filters, shown: bool) -> html.Div:
    """The quick-range buttons and the auto-refresh choice (its timer reloads the page)."""
    buttons = [
        html.Button(
            label,
            id=f"{prefix}-quick-{key}",
            n_clicks=0,
            className="ett-quick ett-quick-on" if filters.quick == key else "ett-quick",
            title=f"the last {days} UTC days, up to today"
            if key != "24h"
            else "the last 24 hours: yesterday and today (UTC days)",
        )
        for key, (label, days) in QUICK_RANGES.items()
    ]
    refresh = filters.extra.get("refresh") if filters.refresh_s else "off"
    return html.Div(
        [
            html.Span("Last", className="ett-quick-label"),
            *buttons,
            html.Label(
                [
                    "Auto-refresh",
                    dcc.Dropdown(
                        id=f"{prefix}-refresh",
                        options=[
                            {"label": k if k != "off" else "off", "value": k} for k in REFRESH_S
                        ],
                        value=refresh,
                        clearable=False,
                        searchable=False,
                    ),
                ],
                className="ett-refresh",
            ),
            dcc.Interval(
                id=f"{prefix}-refresh-timer",
                interval=max(filters.refresh_s, 1) * 1000,
                disabled=not filters.refresh_s,
            ),
        ],
        className="ett-quick-bar",
        id=f"{prefix}-quick",
        style={} if shown else {"display": "none"},
    )


def _choice(
    prefix: str,
    key: str,
    label: str,
    value: str | None,
    names: Sequence[str],
    placeholder: str,
    shown: bool,
) -> html.Label:
    options = list(names)
    if value and value not in options:
        options.insert(0, value)
    return html.Label(
        [
            label,
            dcc.Dropdown(
                id=f"{prefix}-filter-{key}",
                options=options,
                value=value,
                placeholder=placeholder,
                clearable=True,
            ),
        ],
        style={} if shown else {"display": "none"},
    )


def register_filter_callback(prefix: str) -> None:
    """The callbacks that turn a change of `prefix`'s filter bar into a new URL, a quick range
    into its dates, and the auto-refresh timer into a reload."""

    @callback(
        Output(f"{prefix}-filter-dates", "start_date"),
        Output(f"{prefix}-filter-dates", "end_date"),
        Output(f"{prefix}-filter-bucket", "value"),
        Output(f"{prefix}-filter-extra", "data"),
        *[Input(f"{prefix}-quick-{key}", "n_clicks") for key in QUICK_RANGES],
        State(f"{prefix}-filter-extra", "data"),
        prevent_initial_call=True,
    )
    def _quick(*args: Any) -> tuple[str, str, str, dict[str, str]]:
        key = str(dash.ctx.triggered_id or "").removeprefix(f"{prefix}-quick-")
        days = quick_range(key, datetime.now(UTC).date())
        if days is None or not any(args[:-1]):
            raise PreventUpdate
        start, end = days
        return (
            start.isoformat(),
            end.isoformat(),
            auto_bucket(start, end),
            {
                **(args[-1] or {}),
                "range": key,
            },
        )

    clientside_callback(
        """
        function(n) {
            if (n) { window.location.reload(); }
            return window.dash_clientside.no_update;
        }
        """,
        Output(f"{prefix}-refresh-timer", "max_intervals"),
        Input(f"{prefix}-refresh-timer", "n_intervals"),
        prevent_initial_call=True,
    )

    @callback(
        Output(f"{prefix}-filter-nav", "href"),
        Input(f"{prefix}-filter-dates", "start_date"),
        Input(f"{prefix}-filter-dates", "end_date"),
        Input(f"{prefix}-filter-model", "value"),
        Input(f"{prefix}-filter-team", "value"),
        Input(f"{prefix}-filter-owner", "value"),
        Input(f"{prefix}-filter-label", "value"),
        Input(f"{prefix}-filter-bucket", "value"),
        Input(f"{prefix}-refresh", "value"),
        State(f"{prefix}-filter-extra", "data"),
        prevent_initial_call=True,
    )
    def _navigate(
        start: str | None,
        end: str | None,
        model: str | None,
        team: str | None,
        owner: str | None,
        label: str | None,
        bucket: str | None,
        refresh: str | None,
        extra: dict[str, str] | None,
    ) -> str:
        extra = dict(extra or {})
        path = extra.pop("path", "/")
        extra.pop("refresh", None)
        if refresh in REFRESH_S and REFRESH_S[refresh]:
            extra["refresh"] = refresh
        # A quick range stays in the URL (relative to today) while the dates are still its own.
        days = quick_range(extra.get("range"), datetime.now(UTC).date())
        if days is None or ((start or "")[:10], (end or "")[:10]) != tuple(
            d.isoformat() for d in days
        ):
            extra.pop("range", None)
        query = {
            "start": (start or "")[:10],
            "end": (end or "")[:10],
            "model": model or "",
            "team": team or "",
            "owner": owner or "",
            "label": (label or "").strip(),
            **extra,
        }
        # Name the bucket only when it is not the one the range gets by default.
        if bucket and bucket != Filters.from_query(query).default_bucket:
            query["bucket"] = bucket
        return f"{path}?{urlencode({k: v for k, v in query.items() if v})}"


def bucket_jobs_href(
    filters: Filters, x: Any, component: str | None = None, path: str = "/job"
) -> str | None:
    """The Jobs list for the chart bucket drawn at `x` (its days), of one component if named."""
    try:
        ts = pd.Timestamp(x).tz_localize(None).timestamp() if x is not None else None
    except (TypeError, ValueError):
        return None
    if ts is None:
        return None
    lo = bucket_start(ts, filters.bucket)
    hi = bucket_end(lo, filters.bucket) - DAY_S
    known = component in COMPONENTS and component != "effective_training"
    return filters.href(
        path,
        start=datetime.fromtimestamp(lo, UTC).date().isoformat(),
        end=datetime.fromtimestamp(hi, UTC).date().isoformat(),
        range=None,
        bucket=None,
        refresh=None,
        component=component if known else None,
        view="lost",
    )


def register_bucket_clicks(prefix: str, *graph_ids: str) -> None:
    """A click on a bar or point of these time charts (by bucket; a lost-by-component stack
    carries its component) opens the Jobs list of that bucket, and component, in the filters of
    `prefix`'s filter bar."""

    @callback(
        Output(f"{prefix}-filter-nav", "href", allow_duplicate=True),
        *[Input(g, "clickData") for g in graph_ids],
        State(f"{prefix}-filter-dates", "start_date"),
        State(f"{prefix}-filter-dates", "end_date"),
        State(f"{prefix}-filter-model", "value"),
        State(f"{prefix}-filter-team", "value"),
        State(f"{prefix}-filter-label", "value"),
        State(f"{prefix}-filter-bucket", "value"),
        prevent_initial_call=True,
    )
    def _open_bucket(*args: Any) -> str:
        start, end, model, team, label, bucket = args[len(graph_ids) :]
        trigger = dash.ctx.triggered[0] if dash.ctx.triggered else {}
        points = (trigger.get("value") or {}).get("points") or []
        if not points:
            raise PreventUpdate
        filters = Filters.from_query(
            {
                "start": (start or "")[:10],
                "end": (end or "")[:10],
                "model": model,
                "team": team,
                "label": label,
                "bucket": bucket,
            }
        )
        key = points[0].get("customdata")
        component = key[0] if isinstance(key, list) and key else None
        href = bucket_jobs_href(filters, points[0].get("x"), component)
        if href is None:
            raise PreventUpdate
        return href


def table(
    table_id: str,
    rows: list[dict[str, Any]],
    columns: list[dict[str, Any]],
    *,
    page_size: int = 20,
    sort_by: list[dict[str, str]] | None = None,
    filterable: bool = False,
    **options: Any,
) -> html.Div:
    """A sortable (and optionally searchable) table with its CSV download; markdown columns
    carry links. `options` go to the DataTable (row_selectable, ...)."""
    return downloadable(
        table_id,
        _data_table(
            table_id,
            rows,
            columns,
            page_size=page_size,
            sort_by=sort_by,
            filterable=filterable,
            **options,
        ),
    )


def _data_table(
    table_id: str,
    rows: list[dict[str, Any]],
    columns: list[dict[str, Any]],
    *,
    page_size: int,
    sort_by: list[dict[str, str]] | None,
    filterable: bool,
    **options: Any,
) -> dash_table.DataTable:
    return dash_table.DataTable(
        id=table_id,
        data=rows,
        columns=columns,
        sort_action="native",
        sort_by=sort_by or [],
        filter_action="native" if filterable else "none",
        filter_options={"case": "insensitive", "placeholder_text": "search…"},
        page_action="native",
        page_size=page_size,
        markdown_options={"link_target": "_self"},
        style_table={"overflowX": "auto"},
        # Headers and text wrap, so a table fits its box at common widths (900 px included)
        # instead of pushing its last columns out of view; a wider one still scrolls.
        style_cell={
            "fontSize": 13,
            "padding": "4px 8px",
            "fontFamily": FONT,
            "whiteSpace": "normal",
            "height": "auto",
            "maxWidth": 260,
        },
        css=[{"selector": ".dash-cell p", "rule": "margin: 0;"}],
        style_header={
            "fontWeight": "bold",
            "backgroundColor": "#f3f3f3",
            "whiteSpace": "normal",
            "height": "auto",
        },
        style_cell_conditional=[{"if": {"type": "text"}, "textAlign": "left"}],
        **options,
    )


def num_col(col_id: str, name: str, decimals: int = 1, *, signed: bool = False) -> dict[str, Any]:
    """A numeric table column: thousands separators, fixed decimals (a sign when `signed`)."""
    return {
        "id": col_id,
        "name": name,
        "type": "numeric",
        "format": {"specifier": f"{'+' if signed else ''},.{decimals}f"},
    }


def link_col(col_id: str, name: str) -> dict[str, Any]:
    """A table column whose cells are markdown links."""
    return {"id": col_id, "name": name, "presentation": "markdown", "type": "text"}


def md_link(text: str, href: str) -> str:
    """A markdown link for a table cell (square brackets in the text escaped)."""
    safe = text.replace("[", "\\[").replace("]", "\\]")
    return f"[{safe}]({href.replace(' ', '%20').replace(')', '%29')})"
