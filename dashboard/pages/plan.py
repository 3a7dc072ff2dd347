"""Plan page: the fleet's top opportunities by GPU-hours a day freed, and a per-model what-if panel.

Every number comes from backend.planner (the same service the /api/v1/plan routes call); the
sliders recompute with the pure model from the fitted inputs the page holds, so they answer at
once. Each prediction shows the inputs it rests on and the fit's warnings.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import dash
import plotly.graph_objects as go
from dash import Input, Output, State, callback, dcc, html

from backend.params import MODEL_WINDOW_DAYS
from backend.planner.model import Change, predict, what_if
from backend.planner.service import inputs_from_dict
from dashboard import data, numbers
from dashboard.components import (
    NO_DATA_HINT,
    card,
    cards,
    empty_state,
    filter_bar,
    graph,
    link_col,
    md_link,
    num_col,
    register_filter_callback,
    section,
    table,
    window_scope,
)
from dashboard.figures import TEMPLATE
from dashboard.filters import Filters
from dashboard.palette import COMPONENT_COLORS, COMPONENT_LABELS

PREFIX = "plan"
SLIDER_LEVERS = (
    ("pt2_compile", "PT2 compile"),
    ("scheduling", "Scheduling (queue)"),
    ("trainer_init", "Trainer init"),
    ("shutdown", "Shutdown / publish"),
)


def _how(half_life_days: float | None) -> str:
    """How the fit weighs the window's jobs, in words."""
    if half_life_days is None:
        return "each cost at its current level, a recent regression excluded"
    return f"recency-weighted, half-life {half_life_days:g} days"


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


def _day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def _warnings(element_id: str, warnings: list[str]) -> html.Div:
    if not warnings:
        return html.Div(id=element_id, className="ett-plan-ok")
    return html.Div(
        [html.Strong("Fit warning: "), "; ".join(warnings)],
        id=element_id,
        className="ett-warning",
        style={
            "background": "#fff4e5",
            "border": "1px solid #f0b429",
            "padding": "6px 10px",
            "margin": "6px 0",
        },
    )


def opportunities_figure(opps: list[dict[str, Any]], top_n: int = 10) -> go.Figure:
    """Horizontal bars: the top opportunities by GPU-hours a day freed, labelled with owners."""
    rows = list(reversed(opps[:top_n]))
    fig = go.Figure(
        go.Bar(
            x=[o["gpu_h_per_day_freed"] for o in rows],
            y=[f"{o['title']} ({o['owner']})" for o in rows],
            orientation="h",
            marker_color="#2ca02c",
            hovertemplate="%{y}<br>%{x:,.1f} GPU-h/day<extra></extra>",
        )
    )
    # Assigned whole: update_layout() costs ~0.1 s per figure (see figures._layout).
    fig.layout = dict(
        template=TEMPLATE,
        title="Top opportunities: GPU-hours a day freed",
        height=max(260, 40 * len(rows) + 120),
        margin={"l": 380, "r": 20, "t": 60, "b": 40},
        xaxis={"title": "GPU-hours a day freed"},
    )
    return fig


def lost_by_component_figure(before: dict[str, float], after: dict[str, float]) -> go.Figure:
    """Predicted lost GPU-hours a day by component, as measured-fit and after the what-if."""
    comps = [c for c in before if before[c] > 0 or after.get(c, 0.0) > 0]
    fig = go.Figure()
    for name, values in (("fitted", before), ("after what-if", after)):
        fig.add_bar(
            name=name,
            x=[COMPONENT_LABELS.get(c, c) for c in comps],
            y=[values.get(c, 0.0) for c in comps],
            marker_color=[COMPONENT_COLORS.get(c, "#999") for c in comps],
            marker_opacity=1.0 if name == "fitted" else 0.45,
            hovertemplate="%{x}: %{y:,.1f} GPU-h/day<extra>" + name + "</extra>",
        )
    fig.layout = dict(
        template=TEMPLATE,
        barmode="group",
        title="Expected lost GPU-hours a day by component",
        height=320,
        margin={"l": 60, "r": 20, "t": 60, "b": 60},
        yaxis={"title": "GPU-hours a day"},
        showlegend=True,
    )
    return fig


def fleet_view(filters: Filters) -> list[Any]:
    """No model chosen: the ranking and every model's predicted against measured ETT%."""
    plan = data.plan_fleet(filters)
    if not plan["models"]:
        return [empty_state("plan-empty", "No finished jobs in this range yet", NO_DATA_HINT)]
    opps = plan["opportunities"]
    rows = [
        {
            "rank": o["rank"],
            "opportunity": o["title"],
            "owner": o["owner"],
            "freed": o["gpu_h_per_day_freed"],
            "models": ", ".join(
                md_link(m["model"], filters.href("/plan", model=m["model"]))
                for m in o["models"][:3]
            )
            + (f" (+{len(o['models']) - 3} more)" if len(o["models"]) > 3 else ""),
        }
        for o in opps
    ]
    model_rows = [
        {
            "model": md_link(m["model"], filters.href("/plan", model=m["model"])),
            "owner": m["owner"] or "",
            "jobs": m["jobs"],
            "failures": m["failures"],
            "predicted": m["predicted_ett_pct"],
            "measured": m["measured_ett_pct"],
            "lost": m["lost_gpu_h_per_day"],
            "warnings": "; ".join(m["warnings"]),
        }
        for m in plan["models"]
    ]
    warned = sum(1 for m in plan["models"] if m["warnings"])
    jobs = sum(int(m["jobs"] or 0) for m in plan["models"])
    fitted = f"fit: {filters.window_label()} · {numbers.count(jobs)} finished jobs"
    return [
        cards(
            [
                card(
                    "plan-fleet-ett",
                    "Predicted fleet ETT%",
                    f"{plan['predicted_ett_pct'] or 0.0:.1f}%",
                    scope=fitted,
                ),
                card(
                    "plan-fleet-lost",
                    "Expected GPU-hours lost a day",
                    f"{plan['lost_gpu_h_per_day']:,.0f}",
                    scope=fitted,
                ),
                card(
                    "plan-top-freed",
                    "Top opportunity frees",
                    f"{opps[0]['gpu_h_per_day_freed']:,.1f} GPU-h/day" if opps else "-",
                    note=opps[0]["title"] if opps else None,
                    scope=fitted,
                ),
                card("plan-models", "Models fitted", f"{len(plan['models'])}", scope=fitted),
            ]
        ),
        section(
            "Where to start: the fleet's opportunities",
            graph("plan-opportunities-graph", opportunities_figure(opps)),
            table(
                "plan-opportunities-table",
                rows,
                [
                    num_col("rank", "#", 0),
                    {"id": "opportunity", "name": "opportunity"},
                    {"id": "owner", "name": "owning team"},
                    num_col("freed", "GPU-h/day freed"),
                    link_col("models", "from models (largest first)"),
                ],
                page_size=20,
            ),
            note="Each what-if applied to every model it helps, summed. A start-up saving counts "
            "(1 + NoF) times, since every recovery repeats the start-up (Eq. 3). Alternatives "
            "for the same lever overlap: do not add their rows.",
        ),
        section(
            "Models: predicted against measured ETT%",
            table(
                "plan-models-table",
                model_rows,
                [
                    link_col("model", "model"),
                    {"id": "owner", "name": "owner"},
                    num_col("jobs", "jobs", 0),
                    num_col("failures", "failures", 0),
                    num_col("predicted", "predicted ETT%"),
                    num_col("measured", "measured ETT%"),
                    num_col("lost", "lost GPU-h/day"),
                    {"id": "warnings", "name": "fit warnings"},
                ],
                page_size=25,
                filterable=True,
            ),
            note=f"Fitted on jobs submitted in the range ({_how(plan['half_life_days'])}). "
            f"{warned} model(s) carry a warning.",
        ),
    ]


def _inputs_table(inputs: dict[str, Any], fit: dict[str, Any]) -> Any:
    rows = [
        ("jobs in the fit", f"{fit['jobs']} ({fit['effective_jobs']:.1f} effective)"),
        ("failures in the fit", f"{fit['failures']}"),
        ("GPUs", f"{inputs['gpus']}"),
        ("effective training per job", _fmt_s(inputs["effective_s"])),
        ("failures per job (expected)", f"{inputs['failures_per_job']:.2f}"),
        ("failure rate per training hour", f"{inputs['failure_rate_per_training_h']:.3f}"),
        ("cold start C per job", _fmt_s(inputs["cold_start_total_s"])),
        *[(f"  cold start: {k}", _fmt_s(v)) for k, v in inputs["cold_start_s"].items()],
        ("recovery per failure (no replay)", _fmt_s(inputs["recovery_total_s"])),
        *[(f"  recovery: {k}", _fmt_s(v)) for k, v in inputs["recovery_s"].items() if v > 0],
        ("CSBT per save", _fmt_s(inputs["csbt_s"])),
        ("checkpoint interval", f"{_fmt_s(inputs['interval_s'])} ({inputs['interval_source']})"),
        ("tau* of the fit (failures that restart)", _fmt_s(inputs["optimal_interval_s"])),
        (
            "replay per failure: predicted (UTT) / measured",
            f"{_fmt_s(inputs['replay_per_failure_predicted_s'])} / "
            f"{_fmt_s(inputs['replay_per_failure_measured_s'])}",
        ),
        ("stalls per training hour", _fmt_s(inputs["stall_s_per_h"])),
        ("final shutdown per job", _fmt_s(inputs["final_shutdown_s"])),
        ("jobs a day", f"{inputs['jobs_per_day']:.2f}"),
    ]
    return table(
        "plan-inputs-table",
        [{"input": k, "value": v} for k, v in rows],
        [{"id": "input", "name": "input (fitted)"}, {"id": "value", "name": "value"}],
        page_size=40,
    )


def _slider(lever: str, label: str) -> html.Div:
    return html.Div(
        [
            html.Label(f"{label}: cut by %"),
            dcc.Slider(
                id=f"plan-cut-{lever}",
                min=0,
                max=100,
                step=5,
                value=0,
                marks={v: f"{v}%" for v in (0, 25, 50, 75, 100)},
            ),
        ],
        className="ett-plan-slider",
    )


def _model_cards(model: str, filters: Filters, plan: dict[str, Any]) -> Any:
    """The model's headline numbers, each naming its window and job count. The measured ETT%
    and tau* are the model page's (the same services over the same window); the others are
    the fit's, over the finished jobs it fitted."""
    pred = plan["prediction"]
    page = data.model_page(model, filters) or {}
    advice = data.checkpoint_advice(model, filters) or {}
    fitted = f"fit: {filters.window_label()} · {numbers.count(plan['fit']['jobs'])} finished jobs"
    return cards(
        [
            card("plan-predicted", "Predicted ETT%", f"{pred['ett_pct']:.1f}%", scope=fitted),
            card(
                "plan-measured-ett",
                "Measured ETT% (GPU-weighted)",
                numbers.pct(page.get("ett_pct")),
                scope=window_scope(filters, page.get("job_count")),
            ),
            card(
                "plan-tau",
                "Optimal checkpoint interval τ*",
                numbers.minutes(advice.get("optimal_interval_s")),
                scope=window_scope(filters, advice.get("jobs")),
            ),
            card(
                "plan-lost",
                "Expected GPU-h lost a day",
                f"{pred['lost_gpu_h_per_day']:,.1f}",
                scope=fitted,
            ),
            card("plan-nof", "Failures per job", f"{pred['failures_per_job']:.2f}", scope=fitted),
        ]
    )


def model_view(model: str, filters: Filters) -> list[Any]:
    """One model: its prediction with inputs and warnings, the what-ifs, and the sliders."""
    plan = data.plan_model(model, filters)
    if plan is None:
        return [empty_state("plan-empty", f"Unknown model {model!r}", "Pick a model above.")]
    fit = plan["fit"]
    if plan["inputs"] is None:
        return [
            _warnings("plan-fit-warnings", fit["warnings"]),
            empty_state(
                "plan-empty",
                "Nothing to fit",
                "No finished job of this model in the range: widen the dates.",
            ),
        ]
    pred, inputs = plan["prediction"], plan["inputs"]
    rows = [
        {
            "what_if": w["title"],
            "owner": w["owner"],
            "before": w["ett_pct_before"],
            "after": w["ett_pct_after"],
            "delta": w["ett_pct_delta"],
            "freed": w["gpu_h_per_day_freed"],
            "cascade_min": w["cascade_saving_s"] / 60.0,
        }
        for w in sorted(plan["what_ifs"], key=lambda w: -w["gpu_h_per_day_freed"])
    ]
    interval_min = round(inputs["interval_s"] / 60.0, 1)
    return [
        dcc.Store(id="plan-inputs", data=inputs),
        dcc.Store(id="plan-measured", data=pred["measured_ett_pct"]),
        html.P(
            [
                dcc.Link("Model page", href=filters.href("/model", model=model)),
                f" · owner {plan['owner'] or 'unknown'}",
            ]
        ),
        _warnings("plan-fit-warnings", fit["warnings"]),
        _model_cards(model, filters, plan),
        html.Div(
            [
                section(
                    "What-if",
                    *[_slider(lever, label) for lever, label in SLIDER_LEVERS],
                    html.Div(
                        [
                            html.Label("Failure rate: x"),
                            dcc.Slider(
                                id="plan-failure-factor",
                                min=0,
                                max=2,
                                step=0.05,
                                value=1,
                                marks={0: "0", 0.5: "0.5", 1: "1", 1.5: "1.5", 2: "2"},
                            ),
                        ]
                    ),
                    html.Div(
                        [
                            html.Label("Checkpoint interval (min) "),
                            dcc.Input(
                                id="plan-interval-min",
                                type="number",
                                min=0.5,
                                max=1440,
                                step=0.5,
                                value=interval_min,
                            ),
                            html.Label(" GPUs "),
                            dcc.Input(
                                id="plan-gpus",
                                type="number",
                                min=1,
                                max=100000,
                                step=1,
                                value=inputs["gpus"],
                            ),
                            dcc.Checklist(
                                id="plan-async",
                                options=[
                                    {
                                        "label": " async checkpointing (blocking -77%)",
                                        "value": "async",
                                    }
                                ],
                                value=[],
                            ),
                        ]
                    ),
                    html.Div(id="plan-whatif-result", className="ett-plan-result"),
                    note="Cuts act on the cold start and on every recovery that repeats it.",
                ),
                section(
                    "What the prediction rests on",
                    _inputs_table(inputs, fit),
                    note=f"Fitted on jobs submitted {_day(fit['start'])} to {_day(fit['end'])}, "
                    f"{_how(fit['half_life_days'])}.",
                ),
            ],
            className="ett-two-col",
        ),
        section(
            "Lost GPU-hours a day by component",
            graph(
                "plan-lost-graph",
                lost_by_component_figure(
                    pred["lost_gpu_h_per_day_by_component"],
                    pred["lost_gpu_h_per_day_by_component"],
                ),
            ),
        ),
        section(
            "Standard what-ifs",
            table(
                "plan-whatifs-table",
                rows,
                [
                    {"id": "what_if", "name": "what-if"},
                    {"id": "owner", "name": "owner"},
                    num_col("before", "ETT% now"),
                    num_col("after", "ETT% after"),
                    num_col("delta", "points"),
                    num_col("freed", "GPU-h/day freed"),
                    num_col("cascade_min", "start-up min/job saved, recoveries included"),
                ],
            ),
        ),
    ]


def layout(**query: Any) -> html.Div:
    """The plan page for the filters in the URL (a `model` opens its panel)."""
    # The planner fits recent jobs: without a start in the URL, the one model window (as REST).
    filters = Filters.from_query(query).with_window(MODEL_WINDOW_DAYS, query)
    bar = filter_bar(PREFIX, filters, path="/plan", models=data.model_names())
    title = f"Plan: {filters.model}" if filters.model else "Plan"
    body = model_view(filters.model, filters) if filters.model else fleet_view(filters)
    return html.Div([html.H1(title), bar, *body])


dash.register_page(__name__, path="/plan", name="Plan", title="ETT% · plan", order=5, layout=layout)
register_filter_callback(PREFIX)


@callback(
    Output("plan-whatif-result", "children"),
    Output("plan-lost-graph", "figure"),
    *[Input(f"plan-cut-{lever}", "value") for lever, _ in SLIDER_LEVERS],
    Input("plan-failure-factor", "value"),
    Input("plan-interval-min", "value"),
    Input("plan-gpus", "value"),
    Input("plan-async", "value"),
    State("plan-inputs", "data"),
    State("plan-measured", "data"),
)
def _what_if(*args: Any) -> tuple[Any, go.Figure]:
    """Recompute the prediction for the sliders' change with the pure model."""
    n = len(SLIDER_LEVERS)
    cuts = dict(zip([lever for lever, _ in SLIDER_LEVERS], args[:n], strict=True))
    factor, interval_min, gpus, async_on, stored, measured = args[n:]
    inputs = inputs_from_dict(stored)
    try:
        interval = float(interval_min) * 60.0 if interval_min else None
        gpu_count = int(gpus) if gpus else None
        if (interval is not None and interval <= 0) or (gpu_count is not None and gpu_count < 1):
            raise ValueError("interval must be > 0 and GPUs at least 1")
        change = Change(
            scale={k: 1.0 - (v or 0) / 100.0 for k, v in cuts.items() if v},
            failure_scale={"*": float(factor)} if factor is not None and factor != 1 else {},
            interval_s=interval,
            csbt_scale=0.23 if async_on else None,
            gpus=gpu_count if gpu_count != inputs.gpus else None,
        )
        r = what_if(inputs, change)
    except (TypeError, ValueError) as err:
        return html.Div(f"Cannot compute: {err}", className="ett-warning"), dash.no_update
    before = predict(inputs)
    text = [
        html.Div(
            [
                html.Span("Predicted ETT% "),
                html.Strong(f"{r.after.ett_pct:.1f}%", id="plan-whatif-ett"),
                html.Span(f" (now {before.ett_pct:.1f}%"),
                html.Span(f", measured {measured:.1f}%)" if measured is not None else ")"),
            ]
        ),
        html.Div(
            [
                html.Span("GPU-hours a day freed "),
                html.Strong(f"{r.gpu_h_per_day_freed:,.1f}", id="plan-whatif-freed"),
            ]
        ),
        html.Div(
            f"Start-up saved per job: {r.tts_saving_s / 60:.1f} min once (TTS), "
            f"{r.cascade_saving_s / 60:.1f} min with every recovery (x(1+NoF), Eq. 3)",
            className="ett-note",
        ),
    ]
    fig = lost_by_component_figure(
        before.lost_gpu_h_per_day_by_component(), r.after.lost_gpu_h_per_day_by_component()
    )
    return text, fig
