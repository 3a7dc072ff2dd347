"""Job page: the attempt timeline (Fig. 1), L1 and L2 numbers, init critical path (Fig. 2), warnings."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import dash
import pandas as pd
from dash import Input, Output, State, callback, ctx, dcc, html

from backend.ett.catalogue import LOST_COMPONENTS
from dashboard import data, figures, numbers
from dashboard.components import (
    NO_DATA_HINT,
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
    register_deferred,
    register_filter_callback,
    section,
    table,
)
from dashboard.filters import Filters
from dashboard.palette import COMPONENT_LABELS

PREFIX = "job"
LIVE_REFRESH_MS = 15_000


fmt_minutes = numbers.minutes
fmt_pct = numbers.pct


def intervals_frame(result: dict[str, Any]) -> pd.DataFrame:
    """The job's attributed intervals with epoch-second times."""
    rows = result.get("intervals") or []
    columns = ["start", "end", "attempt", "component", "phase"]
    if any("provisional" in r for r in rows):
        columns.append("provisional")  # the engine's mark on a running job's live tail
    frame = pd.DataFrame(rows, columns=columns)
    if frame.empty:
        return frame
    frame["start"] = [data.epoch(v) for v in frame["start"]]
    frame["end"] = [data.epoch(v) for v in frame["end"]]
    frame["attempt"] = frame["attempt"].astype(object).where(frame["attempt"].notna(), None)
    return frame


def live_tail_split(result: dict[str, Any]) -> tuple[float, float, dict[str, float]]:
    """An open job's live tail: (start epoch, seconds, seconds by component), else (0, 0, {}).

    After the last event, 'now' keeps moving: the engine books that time by its rules, but the
    page shows it apart as provisional, not as unattributed time or final shutdown.
    """
    start = data.epoch(result.get("live_tail_start")) if result.get("provisional") else None
    if start is None:
        return 0.0, 0.0, {}
    by_comp: dict[str, float] = {}
    for iv in result.get("intervals") or []:
        s, e = data.epoch(iv["start"]) or 0.0, data.epoch(iv["end"]) or 0.0
        if e > start:
            by_comp[iv["component"]] = by_comp.get(iv["component"], 0.0) + e - max(s, start)
    return start, sum(by_comp.values()), by_comp


def mark_live_tail(frame: pd.DataFrame, tail_start: float | None) -> pd.DataFrame:
    """Intervals split at the live tail's start; the part after it labelled as the live tail."""
    if tail_start is None or frame.empty:
        return frame
    rows = []
    for rec in frame.to_dict("records"):
        if rec["end"] <= tail_start:
            rows.append(rec)
            continue
        if rec["start"] < tail_start:
            rows.append({**rec, "end": tail_start})
        rows.append({**rec, "start": max(rec["start"], tail_start), "component": figures.LIVE_TAIL})
    out = pd.DataFrame(rows, columns=frame.columns)
    out["attempt"] = out["attempt"].astype(object).where(out["attempt"].notna(), None)
    return out


def failures_frame(result: dict[str, Any]) -> pd.DataFrame:
    """The job's failures (time, kind, attempt, inferred)."""
    rows = (result.get("l1") or {}).get("failures") or []
    frame = pd.DataFrame(rows, columns=["ts", "kind", "attempt", "inferred", "ttr_s"])
    if not frame.empty:
        frame["ts"] = [data.epoch(v) for v in frame["ts"]]
    return frame


def timeline_figure(result: dict[str, Any]) -> Any:
    """Fig. 1 for one job result."""
    tail_start, tail_s, _ = live_tail_split(result)
    return figures.attempt_timeline(
        mark_live_tail(intervals_frame(result), tail_start if tail_s > 0 else None),
        failures_frame(result),
        submitted_at=data.epoch(result["submitted_at"]) or 0.0,
        ended_at=data.epoch(result["ended_at"]) or 0.0,
        provisional=bool(result.get("provisional")),
        labels=attempt_labels(result),
    )


def gpus_text(result: dict[str, Any]) -> str:
    """The job's GPUs, and the counts its attempts ran on when one ran on other than that."""
    gpus = result.get("gpus")
    ran = sorted({a.get("gpus") or gpus for a in result.get("attempts") or []} - {None})
    if not ran or ran == [gpus]:
        return f"{gpus} GPUs"
    return f"{gpus} GPUs requested, attempts on {', '.join(map(str, ran))}"


def attempt_labels(result: dict[str, Any]) -> dict[int, str | None]:
    """Each attempt's words from the answer ("requeue 1, in-place restart 1"), by number."""
    return {
        int(a["attempt"]): a.get("label")
        for a in result.get("attempts") or []
        if isinstance(a.get("attempt"), int)
    }


def headline(result: dict[str, Any]) -> html.Div:
    """ETT%, E2E, GPU-hours lost, NoF, TTS and recovery."""
    l1 = result.get("l1") or {}
    return cards(
        [
            card(
                "job-ett",
                "ETT%",
                fmt_pct(result.get("ett_pct")),
                "provisional: still running"
                if result.get("provisional")
                else (
                    "abandoned: silent past the timeout, ended at its last event"
                    if result.get("abandoned")
                    else None
                ),
            ),
            card("job-e2e", "End to end", fmt_minutes(result.get("e2e_s"))),
            card(
                "job-lost", "GPU-hours lost", numbers.gpu_hours(result.get("gpu_hours_lost", 0.0))
            ),
            card("job-nof", "Failures (NoF)", numbers.count(l1.get("nof", 0))),
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
    labels = attempt_labels(result)
    for i, f in enumerate(l1.get("failures") or []):
        flags = [k for k in ("inferred", "interrupted", "censored") if f.get(k)]
        rows.append(
            {
                "part": f"TTR {i + 1}: {f.get('kind')}, "
                f"{figures.attempt_name(f.get('attempt'), labels)}",
                "minutes": (f.get("ttr_s") or 0.0) / 60.0,
                "note": ", ".join(flags),
            }
        )
    _, tail_s, _ = live_tail_split(result)
    final_s = l1.get("final_shutdown_s", 0.0)
    failures = l1.get("failures") or []
    if tail_s > 0 and failures and failures[-1].get("censored"):
        rows[-1]["note"] = ", ".join(x for x in (rows[-1]["note"], "provisional: still open") if x)
        tail_s = 0.0  # the tail is part of a recovery that has not ended yet
    # Revision 2.1: an open job's time after its last effective instant (its live tail
    # among it) is in-loop waste, never final shutdown; the tail is shown apart.
    waste_s = l1.get("in_loop_waste_s", 0.0)
    tail_in_waste = min(tail_s, waste_s)
    rows += [
        {"part": "in-loop waste", "minutes": (waste_s - tail_in_waste) / 60.0, "note": ""},
        {
            "part": "final shutdown",
            "minutes": final_s / 60.0,
            "note": "job still running: in progress, not final"
            if result.get("provisional")
            else "",
        },
    ]
    if tail_in_waste > 0:
        rows.append(
            {
                "part": "live tail (provisional)",
                "minutes": tail_in_waste / 60.0,
                "note": "since the last event; the job is still running",
            }
        )
    rows += [
        {
            "part": "effective training",
            "minutes": result.get("effective_s", 0.0) / 60.0,
            "note": "",
        },
        {"part": "end to end", "minutes": result.get("e2e_s", 0.0) / 60.0, "note": ""},
    ]
    e2e_min = (result.get("e2e_s") or 0.0) / 60.0
    for row in rows:
        row["pct"] = 100.0 * row["minutes"] / e2e_min if e2e_min > 0 else None
    return table(
        "job-l1-table",
        rows,
        [
            {"id": "part", "name": "Level 1"},
            num_col("minutes", "minutes"),
            num_col("pct", "% of E2E"),
            {"id": "note", "name": "note"},
        ],
        page_size=50,
    )


def _who(f: dict[str, Any]) -> str:
    rank = f.get("rank")
    return f"rank {rank}" if rank is not None else "scheduler or agent"


def failures_table(result: dict[str, Any]) -> Any:
    """Each failure (interruption): its initiating cause, domain and plan, and its cascade (the
    attempt's other failures, with how long after the first each came)."""
    labels = attempt_labels(result)
    rows: list[dict[str, Any]] = []
    for i, f in enumerate((result.get("l1") or {}).get("failures") or []):
        start = data.epoch(f.get("ts")) or 0.0
        cascade = [
            f"{_who(c)}: {c.get('cause')} (+{(data.epoch(c.get('ts')) or start) - start:.0f} s)"
            for c in f.get("cascade") or []
        ]
        rows.append(
            {
                "failure": f"{i + 1}: {figures.attempt_name(f.get('attempt'), labels)}",
                "cause": f.get("cause") or "unknown",
                "domain": f.get("domain") or "unknown",
                "planned": "planned" if f.get("planned") else "unplanned",
                "reported by": _who(f),
                "cascade": "; ".join(cascade) or "—",
                "message": (f.get("message") or "")[:200],
            }
        )
    if not rows:
        return html.P("No failures.", id="job-failures-none")
    columns = ("failure", "cause", "domain", "planned", "reported by", "cascade", "message")
    return table("job-failures-table", rows, [{"id": c, "name": c} for c in columns], page_size=50)


def l2_table(result: dict[str, Any]) -> Any:
    """Level 2: each component (wasted split by kind), minutes and share of E2E."""
    e2e = result.get("e2e_s") or 0.0
    comps = result.get("components") or {}
    wasted = result.get("wasted") or {}
    _, tail_s, tail_by_comp = live_tail_split(result)
    rows = []
    for comp, seconds in comps.items():
        if comp != "wasted_training":
            seconds -= tail_by_comp.get(comp, 0.0)
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
    if tail_s > 0:
        rows.append(
            {
                "component": "Live tail (provisional)",
                "minutes": tail_s / 60.0,
                "share": tail_s / e2e * 100.0 if e2e else 0.0,
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


def _attempt_block(ap: AttemptPath) -> html.Div:
    """One attempt's init critical path and its exposed-vs-hidden bars, with the what-if."""
    what_if = (
        f" Running the first batch beside PT2 compile would save {ap.saving_s / 60.0:.1f} min (Eq. 4)."
        if ap.saving_s > 0
        else ""
    )
    return html.Div(
        [
            html.H3(
                f"{figures.attempt_name(ap.attempt).capitalize()}: {ap.init_s / 60.0:.1f} min to "
                f"the first training step.{what_if}"
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


def critical_path_block(advice: dict[str, Any] | None, attempt: int | None = None) -> list[Any]:
    """One attempt's init path (the first, or `attempt`), with a picker for the others."""
    paths = attempt_paths(advice)
    if not paths:
        return [html.P("No init phases recorded for this job.", id="job-no-critical-path")]
    shown = next((ap for ap in paths if ap.attempt == attempt), paths[0])
    blocks: list[Any] = []
    if len(paths) > 1:
        job_id = (advice or {}).get("job_id", "")
        blocks.append(
            html.Div(
                [
                    html.Label(
                        [
                            f"{len(paths)} attempts recorded init phases; show attempt ",
                            dcc.RadioItems(
                                id="job-attempt-pick",
                                options=[
                                    {
                                        "label": figures.attempt_name(ap.attempt).removeprefix(
                                            "attempt "
                                        ),
                                        "value": ap.attempt,
                                    }
                                    for ap in paths
                                ],
                                value=shown.attempt,
                                inline=True,
                            ),
                        ]
                    ),
                    dcc.Store(id="job-attempt-job", data=job_id),
                ],
                className="ett-attempt-pick",
            )
        )
    blocks.append(html.Div(_attempt_block(shown), id="job-attempt-block"))
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


VIEWS = {
    "recent": ("Recent, newest first", "-submitted_at"),
    "lost": ("Most GPU-hours lost", "-gpu_hours_lost"),
    "component": ("Most GPU-hours in the component", "-component_gpu_h"),
}
PAGE_SIZE = 50
# The Jobs list's own query arguments, kept when the filter bar changes (the page is not).
LIST_KEYS = ("q", "status", "view", "component")
# The most jobs "compare timelines" draws on one axis.
MAX_TIMELINES = 8


def _list_component(extra: dict[str, Any]) -> str | None:
    """The lost component the Jobs list shows (and may sort by), from `?component=`."""
    value = extra.get("component")
    return value if value in LOST_COMPONENTS else None


def _page_number(value: Any) -> int:
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1


def search_bar(filters: Filters, statuses: list[str]) -> html.Div:
    """The search box (job id or model prefix), the status filter and the view toggle."""
    extra = filters.extra
    return html.Div(
        [
            dcc.Location(id="job-search-nav", refresh="callback-nav"),
            dcc.Store(id="job-search-filters", data=filters.query(page=None)),
            html.Label(
                [
                    "Search all jobs",
                    dcc.Input(
                        id="job-search",
                        type="search",
                        value=extra.get("q", ""),
                        placeholder="job id or model, from its start",
                        debounce=True,
                    ),
                ],
                className="ett-filter-wide",
            ),
            html.Label(
                [
                    "Status",
                    dcc.Dropdown(
                        id="job-status",
                        options=statuses,
                        value=extra.get("status"),
                        placeholder="any status",
                        clearable=True,
                    ),
                ]
            ),
            html.Label(
                [
                    "Component",
                    dcc.Dropdown(
                        id="job-component",
                        options=[
                            {"label": COMPONENT_LABELS.get(c, c), "value": c}
                            for c in LOST_COMPONENTS
                        ],
                        value=_list_component(extra),
                        placeholder="GPU-hours in a component",
                        clearable=True,
                    ),
                ]
            ),
            html.Label(
                [
                    "Show",
                    dcc.RadioItems(
                        id="job-view",
                        options=[
                            {"label": label, "value": key} for key, (label, _s) in VIEWS.items()
                        ],
                        value=extra.get("view") if extra.get("view") in VIEWS else "recent",
                        inline=True,
                    ),
                ]
            ),
        ],
        className="ett-filters ett-search",
        id="job-search-bar",
    )


def _component_col(component: str | None) -> list[dict[str, Any]]:
    """The column of the chosen component's GPU-hours (none without a component)."""
    if component is None:
        return []
    return [num_col("component_gpu_h", f"GPU-h in {COMPONENT_LABELS.get(component, component)}")]


def _view_words(view: str, component: str | None) -> str:
    """How the list is sorted, in words."""
    if view == "component" and component is not None:
        return f"most GPU-hours in {COMPONENT_LABELS.get(component, component)} first"
    return VIEWS[view][0].lower()


def job_list(filters: Filters) -> Any:
    """No job chosen: every job matching the search and filters, one server-side page at a time."""
    extra = filters.extra
    search = (extra.get("q") or "").strip() or None
    status = extra.get("status") or None
    view = extra.get("view") if extra.get("view") in VIEWS else "recent"
    component = _list_component(extra)
    if view == "component" and component is None:
        view = "lost"
    page = _page_number(extra.get("page"))
    found = data.search_jobs(
        filters,
        search=search,
        status=status,
        sort=VIEWS[view][1],
        limit=PAGE_SIZE,
        offset=(page - 1) * PAGE_SIZE,
        component=component,
    )
    bar = search_bar(filters, data.job_statuses())
    if component:
        bar = html.Div([bar, component_chip(filters, component)])
    if not found.rows:
        if search or status or component:
            what = " and ".join(
                p
                for p in (
                    search and f"search {search!r}",
                    status and f"status {status}",
                    component and f"component {COMPONENT_LABELS.get(component, component)}",
                )
                if p
            )
            empty = empty_state(
                "job-empty",
                "No job matches " + what,
                "The search looks at every job's id and model from their first letters, over "
                "all dates. Check the spelling, or clear the model, team or label filter.",
            )
        else:
            empty = nothing_shown("job-empty", "job", has_data=data.has_data())
        return html.Div([bar, empty])
    base = filters.with_(model=None, extra={})
    rows = [
        {
            "job_id": r["job_id"],
            "job": md_link(r["job_id"], base.href("/job", job_id=r["job_id"])),
            "model": r["model"] or "",
            "team": r["owner"] or "",
            "status": "● live" if r["provisional"] else (r["status"] or ""),
            "submitted": when,
            "ett_pct": r["ett_pct"],
            "gpu_hours_lost": r["gpu_hours_lost"],
            "component_gpu_h": r.get("component_gpu_h"),
            "nof": r["nof"],
        }
        for r, when in zip(
            found.rows,
            data.to_datetime([r["submitted_at"] for r in found.rows]).dt.strftime("%Y-%m-%d %H:%M"),
            strict=True,
        )
    ]
    first, last = found.offset + 1, found.offset + len(rows)
    pages: list[Any] = []
    if page > 1:
        pages.append(
            dcc.Link("← previous", href=filters.href("/job", page=page - 1), id="job-page-prev")
        )
    if last < found.total:
        pages.append(
            dcc.Link("next →", href=filters.href("/job", page=page + 1), id="job-page-next")
        )
    scope = "all dates" if search else "jobs running in the range"
    return html.Div(
        [
            bar,
            section(
                "Jobs",
                table(
                    "job-list-table",
                    rows,
                    [
                        link_col("job", "job"),
                        {"id": "model", "name": "model"},
                        {"id": "team", "name": "team"},
                        {"id": "status", "name": "status"},
                        {"id": "submitted", "name": "submitted (UTC)"},
                        num_col("ett_pct", "ETT%"),
                        num_col("gpu_hours_lost", "GPU-h lost"),
                        *_component_col(component),
                        num_col("nof", "NoF", 0),
                    ],
                    page_size=PAGE_SIZE,
                    row_selectable="multi",
                    selected_rows=[],
                ),
                timelines_picker(filters),
                html.Div(
                    [
                        html.Span(f"{first:,}–{last:,} of {found.total:,}", id="job-page-range"),
                        *pages,
                    ],
                    className="ett-pager",
                ),
                note=f"{found.total:,} jobs match ({scope}), {_view_words(view, component)}; "
                "● live marks a job still running. Pick one to see its timeline, or tick up to "
                f"{MAX_TIMELINES} to compare their timelines.",
            ),
        ]
    )


def component_chip(filters: Filters, component: str) -> html.Div:
    """The component filter a chart's bar opened the list with, and the link that clears it."""
    name = COMPONENT_LABELS.get(component, component)
    days = (
        filters.start.isoformat()
        if filters.start == filters.end
        else f"{filters.start.isoformat()} to {filters.end.isoformat()}"
    )
    return html.Div(
        [
            html.Span(f"Jobs with time in {name} on {days} (UTC)", id="job-component-filter"),
            dcc.Link("show all jobs", href=filters.href("/job", component=None, page=None)),
        ],
        className="ett-filter-notice",
    )


def timelines_picker(filters: Filters) -> html.Div:
    """The button that opens the ticked jobs' timelines on one time axis (the compare page)."""
    return html.Div(
        [
            dcc.Location(id="job-timelines-nav", refresh="callback-nav"),
            dcc.Store(id="job-timelines-filters", data=filters.query(page=None)),
            html.Button(
                "Compare timelines",
                id="job-compare-timelines",
                n_clicks=0,
                disabled=True,
                className="ett-button",
            ),
            html.Span(
                f"tick 2 to {MAX_TIMELINES} jobs", id="job-timelines-note", className="ett-note"
            ),
        ],
        className="ett-timelines-pick",
    )


def picked_jobs(rows: list[dict[str, Any]] | None, selected: list[int] | None) -> list[str]:
    """The ticked rows' job ids, in the order they were ticked."""
    rows = rows or []
    return [rows[i]["job_id"] for i in selected or [] if 0 <= i < len(rows)]


def quarantine_block(job_id: str, error: str) -> html.Div:
    """Why this job's numbers cannot be computed, and when it is tried again."""
    held = data.job_quarantine(job_id)
    when = ""
    if held:
        retry = datetime.fromtimestamp(held["retry_at"], UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        when = f" It failed {held['failures']} times; the next try is at {retry}."
    return html.Div(
        [
            html.Strong("This job cannot be computed: it is quarantined. "),
            html.Code(error),
            html.Span(
                when + " It is retried by itself, with backoff; other jobs are not held back."
            ),
        ],
        id="job-quarantine",
        className="ett-warnings",
    )


def job_body(job_id: str, filters: Filters) -> list[Any]:
    """Everything about one job."""
    try:
        result = data.job_result(job_id)
    except data.JobUncomputable as err:
        return [
            html.H1(["Job ", html.Span(job_id, id="job-id")]),
            quarantine_block(job_id, str(err)),
        ]
    if result is None:
        return [
            html.H1(["Job ", html.Span(job_id, id="job-id")]),
            empty_state(
                "job-empty",
                f"No job {job_id!r}",
                "It has sent no events yet, or its id is misspelt. " + NO_DATA_HINT,
            ),
            dcc.Link(
                f"Search the jobs for {job_id!r}",
                href=filters.href("/job", q=job_id),
                id="job-search-link",
            ),
        ]
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
                    f" · {gpus_text(result)} · status {result.get('status') or 'running'}",
                    f" · {len(result.get('attempts') or [])} attempts",
                ]
            ),
        ]
    )
    held = data.job_quarantine(job_id)
    body: list[Any] = [
        head,
        *([quarantine_block(job_id, held["error"])] if held else []),
        headline(result),
        section(
            "Attempt timeline (Fig. 1)",
            graph("job-timeline-graph", timeline_figure(result)),
            note="Attempts as rows, each second coloured by the component it was attributed to; "
            "× marks a failure, hatched ochre is replayed training.",
        ),
        html.Div(
            [section("Level 1", l1_table(result)), section("Level 2", l2_table(result))],
            className="ett-two-col",
        ),
        section(
            "Failures and their causes",
            failures_table(result),
            note="The initiating failure of each interruption (docs/ACCOUNTING.md, Failure "
            "causes) and its cascade: the same attempt's other failures, from other ranks or "
            "the scheduler.",
        ),
        deferred(PREFIX, {"job_id": job_id}, min_height=400),
    ]
    if result.get("provisional"):
        body += [
            dcc.Interval(id="job-live-interval", interval=LIVE_REFRESH_MS),
            dcc.Store(id="job-live-id", data=job_id),
        ]
    return body


def below(query: dict[str, Any]) -> list[Any]:
    """The job page under the first screen: the init critical path and the data warnings."""
    job_id = query.get("job_id") or ""
    try:
        result = data.job_result(job_id)
    except data.JobUncomputable:
        return []
    if result is None:
        return []
    return [
        section(
            "Init critical path (Fig. 2)",
            *critical_path_block(data.critical_path(job_id)),
            note="Solid: the work on the path to the first training step. Hatched: work that ran "
            "but was hidden behind other work (the fast-batch effect, Eq. 4).",
        ),
        section("Data-quality warnings", warnings_block(result)),
    ]


def layout(**query: Any) -> html.Div:
    """The job page for `?job_id=...`, or the list of jobs to pick from."""
    filters = Filters.from_query(query)
    job_id = filters.extra.get("job_id")
    bar = filter_bar(
        PREFIX,
        filters.with_(extra={k: v for k, v in filters.extra.items() if k in LIST_KEYS}),
        path="/job",
        models=data.model_names(),
        teams=data.team_names(),
    )
    if not job_id:
        return html.Div([html.H1("Jobs"), bar, job_list(filters)])
    return html.Div(job_body(job_id, filters))


dash.register_page(__name__, path="/job", name="Jobs", title="ETT% · job", order=2, layout=layout)
register_filter_callback(PREFIX)
register_deferred(PREFIX, below)


@callback(
    Output("job-search-nav", "href"),
    Input("job-search", "value"),
    Input("job-status", "value"),
    Input("job-view", "value"),
    Input("job-component", "value"),
    State("job-search-filters", "data"),
    prevent_initial_call=True,
)
def _search(
    search: str | None,
    status: str | None,
    view: str | None,
    component: str | None,
    query: dict[str, str],
) -> str:
    """A new search, status, view or component reloads the list from its first page; picking a
    component sorts by it."""
    filters = Filters.from_query(query)
    if ctx.triggered_id == "job-component":
        view = "component" if component else ("lost" if view == "component" else view)
    return filters.href(
        "/job",
        q=(search or "").strip() or None,
        status=status or None,
        view=view or None,
        component=component or None,
    )


@callback(
    Output("job-compare-timelines", "disabled"),
    Output("job-timelines-note", "children"),
    Input("job-list-table", "selected_rows"),
    prevent_initial_call=True,
)
def _ticked(selected: list[int] | None) -> tuple[bool, str]:
    """The button opens 2 to MAX_TIMELINES ticked jobs."""
    n = len(selected or [])
    if n > MAX_TIMELINES:
        return True, f"{n} ticked: untick {n - MAX_TIMELINES} (at most {MAX_TIMELINES})"
    return n < 2, f"{n} ticked (2 to {MAX_TIMELINES})"


@callback(
    Output("job-timelines-nav", "href"),
    Input("job-compare-timelines", "n_clicks"),
    State("job-list-table", "data"),
    State("job-list-table", "selected_rows"),
    State("job-timelines-filters", "data"),
    prevent_initial_call=True,
)
def _compare_timelines(
    n: int, rows: list[dict[str, Any]], selected: list[int], query: dict[str, str]
) -> str:
    """The ticked jobs' timelines, aligned at submission, on the compare page."""
    jobs = picked_jobs(rows, selected)
    if not n or not 2 <= len(jobs) <= MAX_TIMELINES:
        raise dash.exceptions.PreventUpdate
    filters = Filters.from_query(query).with_(extra={})
    return filters.href("/compare", timelines=",".join(jobs), model=None)


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


@callback(
    Output("job-attempt-block", "children"),
    Input("job-attempt-pick", "value"),
    State("job-attempt-job", "data"),
    prevent_initial_call=True,
)
def _pick_attempt(attempt: int | None, job_id: str) -> Any:
    """Another attempt's init critical path."""
    paths = attempt_paths(data.critical_path(job_id))
    chosen = next((ap for ap in paths if ap.attempt == attempt), None)
    if chosen is None:
        raise dash.exceptions.PreventUpdate
    return _attempt_block(chosen)
