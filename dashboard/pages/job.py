"""Job page: the attempt timeline (Fig. 1), L1 and L2 numbers, init critical path (Fig. 2), warnings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dash
import pandas as pd
from dash import Input, Output, State, callback, dcc, html

from dashboard import data, figures
from dashboard.components import (
    NO_DATA_HINT,
    card,
    cards,
    empty_state,
    filter_bar,
    graph,
    link_col,
    md_link,
    nothing_shown,
    num_col,
    register_filter_callback,
    section,
    table,
)
from dashboard.filters import Filters
from dashboard.palette import COMPONENT_LABELS

PREFIX = "job"
LIVE_REFRESH_MS = 15_000
# Past a few attempts the init paths repeat each other; the first ones tell the story.
MAX_PATHS = 3
# The job list sends at most this many rows to the browser.
MAX_LISTED = 1_000


def fmt_minutes(seconds: float | None) -> str:
    """Seconds as minutes with one decimal."""
    return "—" if seconds is None else f"{seconds / 60.0:.1f} min"


def fmt_pct(value: float | None) -> str:
    """A percentage with one decimal."""
    return "—" if value is None else f"{value:.1f}%"


def intervals_frame(result: dict[str, Any]) -> pd.DataFrame:
    """The job's attributed intervals with epoch-second times."""
    rows = result.get("intervals") or []
    frame = pd.DataFrame(rows, columns=["start", "end", "attempt", "component", "phase"])
    if frame.empty:
        return frame
    frame["start"] = [data.epoch(v) for v in frame["start"]]
    frame["end"] = [data.epoch(v) for v in frame["end"]]
    frame["attempt"] = frame["attempt"].astype(object).where(frame["attempt"].notna(), None)
    return frame


def failures_frame(result: dict[str, Any]) -> pd.DataFrame:
    """The job's failures (time, kind, attempt, inferred)."""
    rows = (result.get("l1") or {}).get("failures") or []
    frame = pd.DataFrame(rows, columns=["ts", "kind", "attempt", "inferred", "ttr_s"])
    if not frame.empty:
        frame["ts"] = [data.epoch(v) for v in frame["ts"]]
    return frame


def timeline_figure(result: dict[str, Any]) -> Any:
    """Fig. 1 for one job result."""
    return figures.attempt_timeline(
        intervals_frame(result),
        failures_frame(result),
        submitted_at=data.epoch(result["submitted_at"]) or 0.0,
        ended_at=data.epoch(result["ended_at"]) or 0.0,
        provisional=bool(result.get("provisional")),
    )


def headline(result: dict[str, Any]) -> html.Div:
    """ETT%, E2E, GPU-hours lost, NoF, TTS and recovery."""
    l1 = result.get("l1") or {}
    return cards(
        [
            card(
                "job-ett",
                "ETT%",
                fmt_pct(result.get("ett_pct")),
                "provisional: still running" if result.get("provisional") else None,
            ),
            card("job-e2e", "End to end", fmt_minutes(result.get("e2e_s"))),
            card("job-lost", "GPU-hours lost", f"{result.get('gpu_hours_lost', 0.0):,.1f}"),
            card("job-nof", "Failures (NoF)", str(l1.get("nof", 0))),
            card("job-tts", "Time to start (TTS)", fmt_minutes(l1.get("tts_s"))),
            card("job-recovery", "Recovery (ΣTTR)", fmt_minutes(l1.get("recovery_s"))),
        ]
    )


def l1_table(result: dict[str, Any]) -> Any:
    """Level 1: TTS, each TTR, in-loop waste, final shutdown, effective."""
    l1 = result.get("l1") or {}
    rows: list[dict[str, Any]] = [
        {
            "part": "TTS",
            "minutes": l1.get("tts_s", 0.0) / 60.0,
            "note": "interrupted by a failure" if l1.get("tts_interrupted") else "",
        }
    ]
    for i, f in enumerate(l1.get("failures") or []):
        flags = [k for k in ("inferred", "interrupted", "censored") if f.get(k)]
        rows.append(
            {
                "part": f"TTR {i + 1} ({f.get('kind')}, attempt {f.get('attempt')})",
                "minutes": (f.get("ttr_s") or 0.0) / 60.0,
                "note": ", ".join(flags),
            }
        )
    rows += [
        {"part": "in-loop waste", "minutes": l1.get("in_loop_waste_s", 0.0) / 60.0, "note": ""},
        {
            "part": "final shutdown",
            "minutes": l1.get("final_shutdown_s", 0.0) / 60.0,
            "note": "",
        },
        {
            "part": "effective training",
            "minutes": result.get("effective_s", 0.0) / 60.0,
            "note": "",
        },
        {"part": "end to end", "minutes": result.get("e2e_s", 0.0) / 60.0, "note": ""},
    ]
    return table(
        "job-l1-table",
        rows,
        [
            {"id": "part", "name": "Level 1"},
            num_col("minutes", "minutes"),
            {"id": "note", "name": ""},
        ],
        page_size=50,
    )


def l2_table(result: dict[str, Any]) -> Any:
    """Level 2: each component (wasted split by kind), minutes and share of E2E."""
    e2e = result.get("e2e_s") or 0.0
    comps = result.get("components") or {}
    wasted = result.get("wasted") or {}
    rows = []
    for comp, seconds in comps.items():
        rows.append(
            {
                "component": COMPONENT_LABELS.get(comp, comp),
                "minutes": seconds / 60.0,
                "share": seconds / e2e * 100.0 if e2e else 0.0,
            }
        )
        if comp == "wasted_training":
            for kind, ws in wasted.items():
                rows.append(
                    {
                        "component": f"   └ {kind.replace('_', ' ')}",
                        "minutes": ws / 60.0,
                        "share": ws / e2e * 100.0 if e2e else 0.0,
                    }
                )
    return table(
        "job-l2-table",
        rows,
        [
            {"id": "component", "name": "Level 2"},
            num_col("minutes", "minutes"),
            num_col("share", "% of E2E"),
        ],
        page_size=50,
    )


@dataclass
class AttemptPath:
    """One attempt's init critical path (Fig. 2), its hidden work and the fast-batch what-if."""

    attempt: int
    path: pd.DataFrame
    phases: pd.DataFrame
    init_s: float
    saving_s: float


def attempt_paths(advice: dict[str, Any] | None) -> list[AttemptPath]:
    """The advice service's answer as frames for figures.init_critical_path and phase_hidden_work."""
    out: list[AttemptPath] = []
    for att in (advice or {}).get("attempts") or []:
        steps = att.get("path") or []
        if not steps:
            continue
        t0 = float(att.get("start") or steps[0]["start"])
        path = pd.DataFrame(
            {
                "phase": [st.get("phase") or st.get("component") for st in steps],
                "start_s": [st["start"] - t0 for st in steps],
                "end_s": [st["end"] - t0 for st in steps],
                "hidden": False,
            }
        )
        phases = pd.DataFrame(att.get("phases") or [], columns=["phase", "total_s", "exposed_s"])
        out.append(
            AttemptPath(
                attempt=int(att["attempt"]),
                path=path,
                phases=phases,
                init_s=float(att.get("init_s") or 0.0),
                saving_s=float((att.get("fast_batch") or {}).get("saving_s") or 0.0),
            )
        )
    return out


def critical_path_block(advice: dict[str, Any] | None) -> list[Any]:
    """Per attempt (the first few): the Gantt of the path and the exposed-vs-hidden bars."""
    paths = attempt_paths(advice)
    if not paths:
        return [html.P("No init phases recorded for this job.", id="job-no-critical-path")]
    blocks: list[Any] = []
    for ap in paths[:MAX_PATHS]:
        what_if = (
            f" Running the first batch beside PT2 compile would save {ap.saving_s / 60.0:.1f} min (Eq. 4)."
            if ap.saving_s > 0
            else ""
        )
        blocks.append(
            html.Div(
                [
                    html.H3(
                        f"Attempt {ap.attempt}: {ap.init_s / 60.0:.1f} min to the first training step.{what_if}"
                    ),
                    html.Div(
                        [
                            graph(
                                f"job-critical-path-{ap.attempt}",
                                figures.init_critical_path(ap.path, title="Critical path"),
                            ),
                            graph(
                                f"job-hidden-work-{ap.attempt}",
                                figures.phase_hidden_work(
                                    ap.phases, title="Exposed vs hidden time per phase"
                                ),
                            ),
                        ],
                        className="ett-two-col",
                    ),
                ]
            )
        )
    if len(paths) > MAX_PATHS:
        blocks.append(html.P(f"{len(paths) - MAX_PATHS} more attempts not shown."))
    return blocks


def warnings_block(result: dict[str, Any]) -> html.Div:
    """The data-quality warnings: which rule repaired what, naming the event ids."""
    warnings = result.get("warnings") or []
    if not warnings:
        return html.Div(
            "No data-quality warnings: every event was used as sent.", id="job-warnings"
        )
    items = []
    for w in warnings:
        ids = w.get("event_ids") or []
        shown = ", ".join(ids[:10]) + (f" … (+{len(ids) - 10})" if len(ids) > 10 else "")
        items.append(
            html.Li(
                [html.B(w.get("code", "warning")), f": {w.get('message', '')} ", html.Code(shown)]
            )
        )
    return html.Div(html.Ul(items), id="job-warnings", className="ett-warnings")


def job_list(filters: Filters) -> html.Div:
    """No job chosen: the jobs in range that lost the most GPU-hours, searchable."""
    frame = data.jobs_frame(filters, sort="-gpu_hours_lost", limit=MAX_LISTED)
    if frame.empty:
        return nothing_shown("job-empty", "job", has_data=data.has_data())
    base = filters.with_(model=None)
    rows = [
        {
            "job": md_link(job_id, base.href("/job", job_id=job_id)),
            "model": model or "",
            "status": ("running" if provisional else status) or "",
            "ett_pct": ett,
            "gpu_hours_lost": lost,
            "nof": nof,
        }
        for job_id, model, provisional, status, ett, lost, nof in zip(
            frame["job_id"],
            frame["model"],
            frame["provisional"],
            frame["status"],
            frame["ett_pct"],
            frame["gpu_hours_lost"],
            frame["nof"],
            strict=True,
        )
    ]
    more = " (the first ones by GPU-hours lost: narrow the filters to see others)"
    return section(
        "Jobs",
        table(
            "job-list-table",
            rows,
            [
                link_col("job", "job"),
                {"id": "model", "name": "model"},
                {"id": "status", "name": "status"},
                num_col("ett_pct", "ETT%"),
                num_col("gpu_hours_lost", "GPU-h lost"),
                num_col("nof", "NoF", 0),
            ],
            sort_by=[{"column_id": "gpu_hours_lost", "direction": "desc"}],
            filterable=True,
        ),
        note=f"{len(frame)} jobs in the range{more if len(frame) >= MAX_LISTED else ''}, "
        "most GPU-hours lost first; type in a column's search cell to filter, pick one to see "
        "its timeline.",
    )


def job_body(job_id: str, filters: Filters) -> list[Any]:
    """Everything about one job."""
    result = data.job_result(job_id)
    if result is None:
        return [
            empty_state(
                "job-empty",
                f"No job {job_id!r}",
                "It has sent no events yet, or its id is misspelt. " + NO_DATA_HINT,
            )
        ]
    advice = data.critical_path(job_id)
    model = result.get("model")
    head = html.Div(
        [
            html.H1(["Job ", html.Span(job_id, id="job-id")]),
            html.P(
                [
                    "model ",
                    dcc.Link(model, href=filters.href("/model", model=model), id="job-model-link")
                    if model
                    else "—",
                    f" · {result.get('gpus')} GPUs · status {result.get('status') or 'running'}",
                    f" · {len(result.get('attempts') or [])} attempts",
                ]
            ),
        ]
    )
    body: list[Any] = [
        head,
        headline(result),
        section(
            "Attempt timeline (Fig. 1)",
            graph("job-timeline-graph", timeline_figure(result)),
            note="Attempts as rows, each second coloured by the component it was attributed to; "
            "× marks a failure, hatched red is replayed training.",
        ),
        html.Div(
            [section("Level 1", l1_table(result)), section("Level 2", l2_table(result))],
            className="ett-two-col",
        ),
        section(
            "Init critical path (Fig. 2)",
            *critical_path_block(advice),
            note="Solid: the work on the path to the first training step. Hatched: work that ran "
            "but was hidden behind other work (the fast-batch effect, Eq. 4).",
        ),
        section("Data-quality warnings", warnings_block(result)),
    ]
    if result.get("provisional"):
        body += [
            dcc.Interval(id="job-live-interval", interval=LIVE_REFRESH_MS),
            dcc.Store(id="job-live-id", data=job_id),
        ]
    return body


def layout(**query: Any) -> html.Div:
    """The job page for `?job_id=...`, or the list of jobs to pick from."""
    filters = Filters.from_query(query)
    job_id = filters.extra.get("job_id")
    bar = filter_bar(
        PREFIX,
        filters.with_(extra={}),
        path="/job",
        models=data.model_names(),
        teams=data.team_names(),
    )
    if not job_id:
        return html.Div([html.H1("Jobs"), bar, job_list(filters)])
    return html.Div(job_body(job_id, filters))


dash.register_page(__name__, path="/job", name="Jobs", title="ETT% · job", order=2, layout=layout)
register_filter_callback(PREFIX)


@callback(
    Output("job-timeline-graph", "figure"),
    Output("job-ett", "children"),
    Input("job-live-interval", "n_intervals"),
    State("job-live-id", "data"),
    prevent_initial_call=True,
)
def _grow_live_job(_n: int, job_id: str) -> tuple[Any, str]:
    """A running job's timeline grows while the page is open."""
    result = data.job_result(job_id)
    if result is None:
        raise dash.exceptions.PreventUpdate
    return timeline_figure(result), fmt_pct(result.get("ett_pct"))
