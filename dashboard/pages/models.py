"""Model page: its jobs, L2 bars per job (Fig. 6), ETT% over time, the checkpoint curve (Fig. 3)."""

from __future__ import annotations

from typing import Any

import dash
import pandas as pd
from dash import Input, Output, State, callback, dcc, html

from backend.metrics.core import MIN_BASE_JOBS
from backend.params import MODEL_WINDOW_DAYS
from dashboard import cache, data, figures, numbers
from dashboard.components import (
    NO_DATA_HINT,
    annotation_list,
    card,
    cards,
    deferred,
    empty_state,
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
    trend_note,
    window_scope,
)
from dashboard.filters import Filters
from dashboard.palette import COMPONENT_COLORS, COMPONENT_LABELS

PREFIX = "model"
# Beyond this many jobs the Fig. 6 bars get too thin to read: show the latest ones.
MAX_BARS = 30


def model_list(filters: Filters) -> Any:
    """No model chosen: every model with its ETT% in range, most GPU-hours lost first, searchable."""
    models = data.models_table(filters)
    if models.empty:
        return nothing_shown("model-empty", "model", has_data=data.has_data())
    rows = [
        {
            "model": md_link(str(r.model), filters.href("/model", model=r.model)),
            "team": r.owner or "",
            "jobs": int(r.jobs),
            "ett_pct": None if pd.isna(r.ett_pct) else float(r.ett_pct),
            # Null, with a reason, on too small a base (the backend's trend rule).
            "trend_pp": None if pd.isna(r.trend_pp) else float(r.trend_pp),
            "lost_gpu_h": float(r.lost_gpu_h or 0.0),
            "top_lost": COMPONENT_LABELS.get(r.top_lost_component, r.top_lost_component or ""),
            "tier": r.tier or "",
        }
        for r in models.itertuples()
    ]
    return section(
        "Models",
        table(
            "model-list-table",
            rows,
            [
                link_col("model", "model"),
                {"id": "team", "name": "team"},
                num_col("jobs", "jobs", 0),
                num_col("ett_pct", "ETT% (GPU-weighted)"),
                num_col("trend_pp", "trend vs previous range (points)", signed=True),
                num_col("lost_gpu_h", "GPU-h lost", 0),
                {"id": "top_lost", "name": "loses most to"},
                {"id": "tier", "name": "tier"},
            ],
            page_size=25,
            filterable=True,
        ),
        note=f"{len(rows)} models, most GPU-hours lost in the range first. "
        "Trend: ETT% in the range minus ETT% over the same length just before; blank when "
        f"that range holds fewer than {MIN_BASE_JOBS} jobs or too few GPU-hours to compare. "
        "Type in a column's search cell to filter (e.g. part of a model's name).",
    )


def jobs_table(jobs: list[dict[str, Any]], filters: Filters) -> Any:
    """The model's jobs: ETT%, TTS, NoF, recovery, GPU-hours lost; sortable."""
    submitted = data.to_datetime([j["submitted_at"] for j in jobs]).dt.strftime("%Y-%m-%d %H:%M")
    rows = [
        {
            "job": md_link(j["job_id"], filters.href("/job", job_id=j["job_id"], model=None)),
            "submitted": when,
            "status": "running" if j["provisional"] else (j["status"] or ""),
            "gpus": j["gpus"],
            "ett_pct": j["ett_pct"],
            "tts_min": j["tts_s"] / 60.0,
            "nof": j["nof"],
            "recovery_min": j["recovery_s"] / 60.0,
            "gpu_hours_lost": j["gpu_hours_lost"],
        }
        for j, when in zip(jobs, submitted, strict=True)
    ]
    return table(
        "model-jobs-table",
        rows,
        [
            link_col("job", "job"),
            {"id": "submitted", "name": "submitted (UTC)"},
            {"id": "status", "name": "status"},
            num_col("gpus", "GPUs", 0),
            num_col("ett_pct", "ETT%"),
            num_col("tts_min", "TTS (min)"),
            num_col("nof", "NoF", 0),
            num_col("recovery_min", "recovery (min)"),
            num_col("gpu_hours_lost", "GPU-h lost"),
        ],
        sort_by=[{"column_id": "submitted", "direction": "desc"}],
        page_size=15,
    )


def advice_block(model: str, filters: Filters, advice: dict[str, Any] | None = None) -> list[Any]:
    """Fig. 3 and the numbers behind it, from the advice service."""
    advice = advice if advice is not None else data.checkpoint_advice(model, filters) or {}
    curve = pd.DataFrame(advice.get("curve") or [])
    if not curve.empty:
        curve = curve.rename(columns={"interval_s": "tau_s"})
    figure = figures.checkpoint_curve(
        curve,
        current_s=advice.get("current_interval_s"),
        optimal_s=advice.get("optimal_interval_s"),
    )
    utt = advice.get("utt") or {}
    facts = [
        ("CSBT, median blocking per save", advice.get("csbt_s"), "s"),
        ("failures per training hour", advice.get("failure_rate_per_h"), ""),
        ("current interval", _minutes(advice.get("current_interval_s")), "min"),
        ("optimal interval τ*", _minutes(advice.get("optimal_interval_s")), "min"),
        ("training saved at τ*", advice.get("minutes_per_day_saved"), "min a day"),
        ("predicted UTT (NoF × τ / 2)", _minutes(utt.get("predicted_s")), "min"),
        ("measured replay", _minutes(utt.get("measured_s")), "min"),
    ]
    items = [
        html.Li(f"{label}: {value:,.2f} {unit}".rstrip())
        for label, value, unit in facts
        if isinstance(value, int | float)
    ]
    items += [html.Li(note, className="ett-note") for note in advice.get("notes") or []]
    scope = html.P(
        f"Measured over {filters.window_label()} · {numbers.count(advice.get('jobs'))} jobs",
        id="model-advice-scope",
        className="ett-card-scope",
    )
    return [graph("model-checkpoint-graph", figure), scope, html.Ul(items, id="model-advice-facts")]


def bar_labels(submitted_at: pd.Series) -> list[str]:
    """Short, unique x labels for the Fig. 6 bars: the submission time (job ids are in hover)."""
    labels: list[str] = []
    for ts in data.to_datetime(submitted_at):
        label = f"{ts:%m-%d %H:%M}"
        while label in labels:
            label += "'"
        labels.append(label)
    return labels


def _minutes(seconds: Any) -> float | None:
    return seconds / 60.0 if isinstance(seconds, int | float) else None


def model_page(model: str, filters: Filters) -> dict[str, Any] | None:
    """The model's read, once per page load: the layout and the part below share it."""
    key = (model, *cache.filters_key(filters))
    return cache.memo("model_page", key, lambda: data.model_page(model, filters))


def model_body(model: str, filters: Filters) -> list[Any]:
    """Everything about one model in the range."""
    page = model_page(model, filters)
    head: list[Any] = [
        html.H1(["Model ", html.Span(model, id="model-name")]),
        dcc.Location(id="model-click-nav", refresh="callback-nav"),
        dcc.Store(id="model-filters", data=filters.query()),
    ]
    if page is None:
        return [
            *head,
            empty_state("model-empty", f"No model {model!r}", "Check the name. " + NO_DATA_HINT),
        ]
    jobs = page["jobs"]
    if not jobs:
        return [
            *head,
            empty_state(
                "model-empty",
                "No jobs of this model in the range",
                "Widen the date range: the model's jobs were submitted at other dates.",
            ),
        ]
    shown = list(reversed(jobs[:MAX_BARS]))
    bars = data.job_summaries([j["job_id"] for j in shown])
    if not bars.empty:
        bars["label"] = bar_labels(bars["submitted_at"])
    series = pd.DataFrame(
        [p for p in page["series"] if p["ett_pct"] is not None],
        columns=["bucket", "ett_pct", "partial"],
    )
    series["bucket"] = (
        data.to_datetime(series["bucket"].astype(float)).dt.tz_convert(None)
        if not series.empty
        else series["bucket"]
    )
    points = pd.DataFrame(jobs)
    points["submitted_at"] = data.to_datetime(points["submitted_at"]).dt.tz_convert(None)
    failures = sum(page["nof_by_kind"].values())
    scope = window_scope(filters, page["job_count"])
    advice = data.checkpoint_advice(model, filters) or {}
    notes = data.annotations(filters, model=model)
    note = "Click a bar to open the job."
    if page["job_count"] > MAX_BARS:
        note += f" The latest {MAX_BARS} of {page['job_count']} jobs are shown."
    return [
        *head,
        html.P(
            [
                f"team {page.get('owner') or '—'}"
                + (f" · tier {page['tier']}" if page.get("tier") else "")
                + " · ",
                dcc.Link(
                    "Plan: what to fix first →",
                    href=filters.href("/plan", model=model),
                    id="model-plan-link",
                ),
            ]
        ),
        cards(
            [
                card(
                    "model-ett",
                    "ETT% (GPU-weighted)",
                    numbers.pct(page["ett_pct"]),
                    *trend_note(
                        page.get("trend_pp"),
                        page.get("previous_ett_pct"),
                        page.get("trend_reason"),
                        page.get("previous_jobs"),
                    ),
                    scope=scope,
                ),
                card(
                    "model-jobs",
                    "Jobs submitted",
                    numbers.count(page["job_count"]),
                    scope=filters.window_label(),
                ),
                card(
                    "model-lost",
                    "GPU-hours lost",
                    numbers.gpu_hours(page["lost_gpu_h"]),
                    scope=scope,
                ),
                card("model-nof", "Failures", numbers.count(failures), scope=scope),
                card(
                    "model-tau",
                    "Optimal checkpoint interval τ*",
                    numbers.minutes(advice.get("optimal_interval_s")),
                    scope=window_scope(filters, advice.get("jobs")),
                ),
            ]
        ),
        section(
            "Level-2 components per job (Fig. 6)",
            graph("model-l2-graph", figures.l2_bars(bars)),
            note=note,
        ),
        html.Div(
            [
                section(
                    "ETT% over time",
                    graph(
                        "model-trend-graph",
                        figures.with_annotations(
                            figures.model_ett_over_time(points, series=series), notes
                        ),
                    ),
                    annotation_list("model-annotations", notes),
                    note="Line: GPU-weighted ETT% per day. Dots: each job (click to open).",
                ),
                section("Checkpoint interval (Fig. 3)", *advice_block(model, filters, advice)),
            ],
            className="ett-two-col",
        ),
        deferred(PREFIX, filters.query()),
    ]


def below(query: dict[str, Any]) -> list[Any]:
    """The model page under the first screen: lost GPU-hours, Level 1 per job, the jobs."""
    filters = Filters.from_query(query)
    model = filters.model
    page = model_page(model, filters) if model else None
    if page is None or not page["jobs"]:
        return []
    jobs = page["jobs"]
    lost_trend, lost_owner = data.model_lost(page)
    notes = data.annotations(filters, model=model)
    lost_parts = {
        c: v
        for c, v in (page.get("components_gpu_h") or {}).items()
        if c != "effective_training" and v > 0
    }
    top = sorted(lost_parts.items(), key=lambda kv: -kv[1])[:3]
    top_text = (
        ", ".join(f"{COMPONENT_LABELS.get(c, c)} {v:,.0f} GPU-h" for c, v in top)
        if top
        else "nothing lost in the range"
    )
    return [
        html.Div(
            [
                section(
                    "Lost GPU-hours by component",
                    graph(
                        "model-lost-component-graph",
                        figures.with_annotations(
                            figures.lost_stacked(
                                lost_trend,
                                by="component",
                                title=f"Lost GPU-hours per {filters.bucket}, by component",
                                colors=COMPONENT_COLORS,
                                order=figures.LOST_COMPONENTS,
                            ),
                            notes,
                        ),
                    ),
                    note=f"What eats this model's ETT%: {top_text}.",
                ),
                section(
                    "Lost GPU-hours by owner",
                    graph(
                        "model-lost-owner-graph",
                        figures.lost_by_owner(
                            lost_owner, title="Lost GPU-hours in the range, by owning team"
                        ),
                    ),
                    note="The team that owns each component. Click a bar to open its page.",
                ),
            ],
            className="ett-two-col",
        ),
        section(
            "Level 1 per job: TTS, TTR, NoF",
            graph(
                "model-level1-graph",
                figures.with_annotations(
                    figures.level1_over_time(
                        data.model_level1(jobs),
                        title="Time to start, time to recover per failure, failures: each job",
                        markers=True,
                    ),
                    notes,
                ),
            ),
            note="Each dot is a job (click to open). TTS: submission to first training step; "
            "TTR: recovery time per failure.",
        ),
        section("Jobs", jobs_table(jobs, filters)),
        bounds_section(model),
    ]


BOUND_SOURCES = {
    "model": "learned from this model's jobs",
    "fleet": "the fleet's (too little history of its own)",
    "override": "set in the SLO file",
    "default": "shipped default",
}


def bounds_section(model: str) -> Any:
    """The learned bounds the live state judges this model's hangs by, with their samples."""
    rows = [
        {
            "phase": b["phase"] + (f" ({b['variant']})" if b["variant"] else ""),
            "bound_min": b["bound_s"] / 60.0,
            "source": BOUND_SOURCES.get(b["source"], b["source"]),
            "samples": b["samples"],
            "quantile_min": None if b["quantile_s"] is None else b["quantile_s"] / 60.0,
        }
        for b in data.model_bounds(model)
    ]
    return section(
        "Learned bounds (hang detection)",
        table(
            "model-bounds-table",
            rows,
            [
                {"id": "phase", "name": "phase"},
                num_col("bound_min", "bound (min)", 2),
                {"id": "source", "name": "from"},
                num_col("samples", "samples", 0),
                num_col("quantile_min", "p95 of samples (min)", 2),
            ],
            page_size=25,
        ),
        note="A phase open longer than its bound, or a loop whose cursor has not advanced for "
        "longer than the loop's, is hung and pages its owner. Bound = max(floor, factor × p95) "
        "of the model's finished jobs; GET /api/v1/live/bounds?model=... lists the samples.",
    )


def layout(**query: Any) -> html.Div:
    """The model page for `?model=...`, or the searchable list of models."""
    filters = Filters.from_query(query)
    if filters.model:
        # A model's numbers (ETT%, tau*) use the one model window, as the Plan page and REST do.
        filters = filters.with_window(MODEL_WINDOW_DAYS, query)
    bar = filter_bar(
        PREFIX,
        filters,
        path="/model",
        models=data.model_names(),
        teams=data.team_names(),
        show_label=False,
        quick=True,
    )
    if not filters.model:
        return html.Div([html.H1("Models"), bar, model_list(filters)])
    body = model_body(filters.model, filters)
    return html.Div([body[0], bar, *body[1:]])


dash.register_page(
    __name__, path="/model", name="Models", title="ETT% · model", order=1, layout=layout
)
register_filter_callback(PREFIX)
register_bucket_clicks(PREFIX, "model-lost-component-graph")
register_deferred(PREFIX, below)


@callback(
    Output("model-click-nav", "href"),
    Input("model-l2-graph", "clickData"),
    Input("model-trend-graph", "clickData"),
    Input("model-level1-graph", "clickData"),
    Input("model-lost-owner-graph", "clickData"),
    State("model-filters", "data"),
    prevent_initial_call=True,
)
def _open_job(
    bar_click: Any, trend_click: Any, l1_click: Any, owner_click: Any, query: dict[str, str]
) -> str:
    """A click on a job's bar or point opens the job page; an owner's bar, the owner page."""
    trigger = dash.ctx.triggered[0] if dash.ctx.triggered else None
    click = trigger["value"] if trigger else None
    if not click or not click.get("points"):
        raise dash.exceptions.PreventUpdate
    if trigger["prop_id"].startswith("model-lost-owner-graph"):
        owner = click["points"][0].get("y")
        if not owner or owner == "other":
            raise dash.exceptions.PreventUpdate
        return Filters.from_query(query).href("/owners", owner=owner, model=None)
    if "customdata" not in click["points"][0]:
        raise dash.exceptions.PreventUpdate
    job_id = click["points"][0]["customdata"][0]
    return Filters.from_query(query).href("/job", job_id=job_id, model=None)
