"""Compare page: a pair or a set of pairs side by side (Fig. 6), with attribution and cascade numbers."""

from __future__ import annotations

from typing import Any

import dash
import pandas as pd
from dash import Input, Output, State, callback, dcc, html

from dashboard import data, figures, timelines
from dashboard.components import (
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
)
from dashboard.filters import Filters
from dashboard.palette import COMPONENT_LABELS

PREFIX = "compare"
DEFAULT_PAIR_LABEL = "variant"
HOW_TO = (
    "Open /compare?baseline=JOB&optimized=JOB for one pair, or /compare?pair_label=variant to pair, "
    "per model, the latest job labelled variant=baseline with the latest labelled "
    "variant=optimized (labels are sent in job_submitted)."
)


def pairs_frame(pairs: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> pd.DataFrame:
    """(pair name, baseline summary, optimized summary) -> rows for figures.lost_parts_bars."""
    rows = []
    for name, base, opt in pairs:
        for variant, summary in (("baseline", base), ("optimized", opt)):
            rows.append(
                {
                    "pair": name,
                    "variant": variant,
                    "job_id": summary["job_id"],
                    "ett_pct": summary.get("ett_pct") or 0.0,
                    **{f"{p}_s": float(summary.get(f"{p}_s") or 0.0) for p in figures.L1_PARTS},
                }
            )
    return pd.DataFrame(rows)


def table_rows(pairs: pd.DataFrame, filters: Filters) -> list[dict[str, Any]]:
    """The pairs table: each job links to its page, each pair to its own comparison."""
    base = filters.with_(extra={})
    jobs = dict(
        zip(zip(pairs["pair"], pairs["variant"], strict=True), pairs["job_id"], strict=True)
    )
    rows = []
    for r in pairs.to_dict("records"):
        pair_href = base.href(
            "/compare",
            baseline=jobs.get((r["pair"], "baseline")),
            optimized=jobs.get((r["pair"], "optimized")),
        )
        rows.append(
            {
                **r,
                "pair": md_link(str(r["pair"]), pair_href),
                "job": md_link(r["job_id"], base.href("/job", job_id=r["job_id"], model=None)),
                **{f"{p}_min": r[f"{p}_s"] / 60.0 for p in figures.L1_PARTS},
            }
        )
    return rows


TERMS = {
    "compare-multiplier": "Restart multiplier: how much recovery time one second of TTS saved "
    "also saves per failure, (ΔRecovery / NoF) / ΔTTS. Every restart repeats the startup.",
    "compare-cascade": "TTS cascade bound (Eq. 3): the share of the saving that the faster start "
    "explains, counting that each failure's recovery repeats it (ΔTTS × (1 + NoF)).",
    "compare-residual": "Recovery residual: the recovery time saved beyond what the faster start "
    "explains: faster restore, shorter requeue, less replay.",
}


def picker(filters: Filters, baseline: str | None, optimized: str | None) -> html.Div:
    """A search box per side (any job, by id or model prefix), suggesting labelled pairs."""
    sides = []
    for side, current in (("baseline", baseline), ("optimized", optimized)):
        suggested = data.labelled_jobs(filters, DEFAULT_PAIR_LABEL, side)
        options = list(dict.fromkeys([*([current] if current else []), *suggested]))
        sides.append(
            html.Label(
                [
                    f"{side.capitalize()} job",
                    dcc.Dropdown(
                        id=f"compare-pick-{side}",
                        options=options,
                        value=current,
                        placeholder=f"type a job id or model ({DEFAULT_PAIR_LABEL}={side} "
                        "suggested)",
                        searchable=True,
                        clearable=True,
                    ),
                ],
                className="ett-filter-wide",
            )
        )
    return html.Div(
        [
            dcc.Location(id="compare-pick-nav", refresh="callback-nav"),
            dcc.Store(id="compare-pick-filters", data=filters.query()),
            *sides,
            html.Button("Compare", id="compare-pick-go", n_clicks=0, className="ett-button"),
        ],
        className="ett-filters",
        id="compare-picker",
    )


def l2_deltas(pair_summaries: list[tuple[dict[str, Any], dict[str, Any]]]) -> Any:
    """Level-2 minutes per component, baseline vs optimized, and the change."""
    before: dict[str, float] = {}
    after: dict[str, float] = {}
    for base, opt in pair_summaries:
        for into, summary in ((before, base), (after, opt)):
            for comp, seconds in (summary.get("components") or {}).items():
                into[comp] = into.get(comp, 0.0) + float(seconds or 0.0)
    rows = [
        {
            "component": COMPONENT_LABELS.get(c, c),
            "baseline_min": before.get(c, 0.0) / 60.0,
            "optimized_min": after.get(c, 0.0) / 60.0,
            "delta_min": (after.get(c, 0.0) - before.get(c, 0.0)) / 60.0,
        }
        for c in COMPONENT_LABELS
        if before.get(c) or after.get(c)
    ]
    return table(
        "compare-l2-table",
        rows,
        [
            {"id": "component", "name": "component"},
            num_col("baseline_min", "baseline (min)"),
            num_col("optimized_min", "optimized (min)"),
            num_col("delta_min", "change (min)"),
        ],
        page_size=20,
    )


def _minutes(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds / 60.0:,.1f}"


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value * 100.0:.1f}%"


def numbers_block(answer: dict[str, Any]) -> list[Any]:
    """Deltas per Level-1 part, restart multiplier, cascade bound, attribution, warnings."""
    delta = answer.get("delta") or {}
    cascade = answer.get("cascade") or {}
    mult = answer.get("restart_multiplier")
    if isinstance(mult, dict):
        lo, hi = mult.get("min"), mult.get("max")
        mult_text = (
            "—" if lo is None else (f"{lo:.1f}" if abs(hi - lo) < 0.05 else f"{lo:.1f}–{hi:.1f}")
        )
    else:
        mult_text = "—" if mult is None else f"{mult:.1f}"
    saved = [card("compare-saved", "Lost time saved (min)", _minutes(delta.get("lost_s")))]
    saved += [
        card(
            f"compare-saved-{p}",
            f"{figures.L1_LABELS[p]} saved (min)",
            _minutes(delta.get(f"{p}_s")),
        )
        for p in figures.L1_PARTS
    ]
    nof = answer.get("nof") or {}
    extra = [
        card("compare-multiplier", "Restart multiplier", mult_text, "(ΔRecovery / NoF) / ΔTTS"),
        card(
            "compare-cascade",
            "TTS cascade bound (Eq. 3)",
            _share(cascade.get("tts_share")),
            f"{_minutes(cascade.get('tts_bound_s'))} min; direct: {_share((answer.get('attribution') or {}).get('tts'))}",
        ),
        card(
            "compare-residual",
            "Recovery residual",
            _share(cascade.get("recovery_residual_share")),
            f"{_minutes(cascade.get('recovery_residual_s'))} min",
        ),
        card(
            "compare-nof",
            "NoF baseline / optimized",
            f"{nof.get('baseline', '—')} / {nof.get('optimized', '—')}",
        ),
    ]
    blocks: list[Any] = [
        cards(saved),
        cards(extra),
        html.Ul(
            [html.Li(text) for text in TERMS.values()],
            id="compare-terms",
            className="ett-note",
        ),
        graph(
            "compare-attribution-graph",
            figures.attribution_bars(
                {k: v for k, v in (answer.get("attribution") or {}).items() if v is not None},
                cascade.get("tts_share"),
            ),
        ),
    ]
    warnings = answer.get("warnings") or []
    if warnings:
        blocks.append(
            html.Ul(
                [
                    html.Li(w.get("message", str(w)) if isinstance(w, dict) else str(w))
                    for w in warnings
                ],
                id="compare-warnings",
                className="ett-warnings",
            )
        )
    return blocks


MAX_TIMELINES = 8


def timelines_block(filters: Filters, job_ids: list[str], align: str) -> list[Any]:
    """Up to MAX_TIMELINES jobs on one time axis, aligned at submission or at the first step."""
    align = align if align in timelines.ALIGNS else "submit"
    results, missing = [], []
    for job_id in list(dict.fromkeys(job_ids))[:MAX_TIMELINES]:
        try:
            result = data.job_result(job_id)
        except data.JobUncomputable:
            result = None
        if result is None:
            missing.append(job_id)
        else:
            results.append(result)
    if not results:
        return [empty_state("compare-empty", "None of these jobs is known", HOW_TO)]
    links = [
        dcc.Link(
            f"at {what}",
            href=filters.href("/compare", align=key),
            id=f"compare-align-{key}",
            className="ett-quick ett-quick-on" if key == align else "ett-quick",
        )
        for key, what in timelines.ALIGNS.items()
    ]
    rows = []
    for r in results:
        t0, exact = timelines.origin(r, align)
        step = timelines.first_step(r)
        submitted = data.epoch(r.get("submitted_at")) or 0.0
        rows.append(
            {
                "job": md_link(
                    r["job_id"], filters.with_(extra={}).href("/job", job_id=r["job_id"])
                ),
                "model": r.get("model") or "",
                "submitted": data.to_datetime([submitted]).dt.strftime("%Y-%m-%d %H:%M")[0],
                "first_step_min": None if step is None else (step - submitted) / 60.0,
                "e2e_h": (r.get("e2e_s") or 0.0) / 3600.0,
                "ett_pct": r.get("ett_pct"),
                "nof": (r.get("l1") or {}).get("nof", 0),
                "note": "" if exact else "never trained: aligned at submission",
            }
        )
    notes = [f"{len(results)} jobs"]
    if missing:
        notes.append(f"not found: {', '.join(missing)}")
    if len(job_ids) > MAX_TIMELINES:
        notes.append(f"the first {MAX_TIMELINES} of {len(job_ids)} shown")
    return [
        html.P(
            [f"Timelines of {'; '.join(notes)}, aligned ", *links],
            id="compare-title",
            className="ett-align-pick",
        ),
        section(
            "Timelines on one axis",
            graph("compare-timelines-graph", timelines.figure(results, align)),
            table(
                "compare-timelines-table",
                rows,
                [
                    link_col("job", "job"),
                    {"id": "model", "name": "model"},
                    {"id": "submitted", "name": "submitted (UTC)"},
                    num_col("first_step_min", "first step after (min)"),
                    num_col("e2e_h", "end to end (h)", 2),
                    num_col("ett_pct", "ETT%"),
                    num_col("nof", "NoF", 0),
                    {"id": "note", "name": "note"},
                ],
            ),
            note="Each job a row, each second coloured by its component; × marks a failure. "
            f"Tick 2 to {MAX_TIMELINES} jobs on the Jobs page and press Compare timelines.",
        ),
    ]


def layout(**query: Any) -> html.Div:
    """The compare page for `?baseline=&optimized=`, `?timelines=a,b,...` (jobs on one time
    axis), else the pairs chosen by `?pair_label=`."""
    filters = Filters.from_query(query)
    chosen = [j.strip() for j in (filters.extra.get("timelines") or "").split(",") if j.strip()]
    if chosen:
        return html.Div(
            [
                html.H1("Compare timelines"),
                *timelines_block(filters, chosen, filters.extra.get("align", "submit")),
            ]
        )
    baseline = filters.extra.get("baseline")
    optimized = filters.extra.get("optimized")
    bar = filter_bar(
        PREFIX, filters, path="/compare", models=data.model_names(), teams=data.team_names()
    )
    if baseline and optimized:
        # The range, model, team and label filters choose pairs; one named pair ignores them.
        bar = html.Div(bar, style={"display": "none"}, id="compare-filters-hidden")
    head: list[Any] = [html.H1("Compare"), picker(filters, baseline, optimized), bar]
    if baseline and optimized:
        answer = data.compare_pair(baseline, optimized)
        if answer is None:
            return html.Div(
                [
                    *head,
                    empty_state(
                        "compare-empty",
                        "One of the two jobs is unknown (or not computed yet)",
                        HOW_TO,
                    ),
                ]
            )
        pair_summaries = [(answer["baseline"], answer["optimized"])]
        pairs = pairs_frame(
            [(answer["baseline"].get("model") or "pair", answer["baseline"], answer["optimized"])]
        )
        title = f"{baseline} (baseline) vs {optimized} (optimized)"
    else:
        key = filters.extra.get("pair_label", DEFAULT_PAIR_LABEL)
        found = data.compare_by_label(filters, key)
        if not found or not found.get("pairs"):
            return html.Div(
                [
                    *head,
                    empty_state(
                        "compare-empty",
                        f"No pairs labelled {key}=baseline / {key}=optimized in this range",
                        HOW_TO,
                    ),
                ]
            )
        pair_summaries = [(p["baseline"], p["optimized"]) for p in found["pairs"]]
        pairs = pairs_frame(
            [(p["model"] or "?", p["baseline"], p["optimized"]) for p in found["pairs"]]
        )
        answer = {**found["total"], "warnings": found.get("warnings") or []}
        title = f"{len(found['pairs'])} pairs by label {key}=baseline / {key}=optimized, summed"
    return html.Div(
        [
            *head,
            html.P(title, id="compare-title"),
            section(
                "Lost time, baseline vs optimized (Fig. 6)",
                graph("compare-pairs-graph", figures.lost_parts_bars(pairs)),
                note="Each pair: the four Level-1 parts of lost time; ETT% on top of each bar.",
            ),
            section("Where the saving came from", *numbers_block(answer)),
            section(
                "Level 2: each component before and after",
                l2_deltas(pair_summaries),
                note="Minutes per component, baseline vs optimized (summed over the pairs).",
            ),
            section(
                "Pairs",
                table(
                    "compare-table",
                    table_rows(pairs, filters),
                    [
                        link_col("pair", "pair"),
                        {"id": "variant", "name": "variant"},
                        link_col("job", "job"),
                        num_col("ett_pct", "ETT%"),
                        *[
                            num_col(f"{p}_min", f"{figures.L1_LABELS[p]} (min)")
                            for p in figures.L1_PARTS
                        ],
                    ],
                    page_size=30,
                ),
            ),
        ]
    )


dash.register_page(
    __name__, path="/compare", name="Compare", title="ETT% · compare", order=3, layout=layout
)
register_filter_callback(PREFIX)


@callback(
    Output("compare-pick-baseline", "options"),
    Input("compare-pick-baseline", "search_value"),
    State("compare-pick-baseline", "options"),
    prevent_initial_call=True,
)
def _search_baseline(search: str | None, options: list[Any]) -> list[Any]:
    """Typing in the baseline box searches every job (id or model prefix)."""
    return _search(search, options)


@callback(
    Output("compare-pick-optimized", "options"),
    Input("compare-pick-optimized", "search_value"),
    State("compare-pick-optimized", "options"),
    prevent_initial_call=True,
)
def _search_optimized(search: str | None, options: list[Any]) -> list[Any]:
    """Typing in the optimized box searches every job (id or model prefix)."""
    return _search(search, options)


def _search(search: str | None, options: list[Any]) -> list[Any]:
    if not search or len(search) < 2:
        raise dash.exceptions.PreventUpdate
    found = data.job_ids_like(search)
    return list(dict.fromkeys([*found, *(options or [])]))


@callback(
    Output("compare-pick-nav", "href"),
    Input("compare-pick-go", "n_clicks"),
    State("compare-pick-baseline", "value"),
    State("compare-pick-optimized", "value"),
    State("compare-pick-filters", "data"),
    prevent_initial_call=True,
)
def _compare(_n: int, baseline: str | None, optimized: str | None, query: dict[str, str]) -> str:
    """The picked pair opens its comparison."""
    if not baseline or not optimized:
        raise dash.exceptions.PreventUpdate
    return Filters.from_query(query).href("/compare", baseline=baseline, optimized=optimized)
