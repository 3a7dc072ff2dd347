"""Several jobs on one time axis: each job a row, its seconds coloured by component, aligned at
its submission or at its first training step (the compare page's "timelines")."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from dashboard import data
from dashboard.figures import COMPONENT_ORDER, empty_figure
from dashboard.palette import BAD_COLOR, COMPONENT_LABELS, component_color

ALIGNS = {"submit": "submission", "step": "first training step"}
FIRST_STEP = "effective_training"


def first_step(result: dict[str, Any]) -> float | None:
    """When the job's first effective training began (epoch s), or None if it never trained."""
    starts = [
        data.epoch(iv["start"])
        for iv in result.get("intervals") or []
        if iv.get("component") == FIRST_STEP
    ]
    found = [s for s in starts if s is not None]
    return min(found) if found else None


def origin(result: dict[str, Any], align: str) -> tuple[float, bool]:
    """The instant the job's row starts from, and whether it is the one asked for (a job that
    never trained is aligned at its submission)."""
    submitted = data.epoch(result.get("submitted_at")) or 0.0
    if align != "step":
        return submitted, True
    step = first_step(result)
    return (step, True) if step is not None else (submitted, False)


def frame(results: list[dict[str, Any]], align: str) -> pd.DataFrame:
    """Every interval of every job in hours from its job's origin: job, component, start_h, end_h."""
    rows = []
    for result in results:
        t0, _ = origin(result, align)
        for iv in result.get("intervals") or []:
            start, end = data.epoch(iv["start"]), data.epoch(iv["end"])
            if start is None or end is None or end <= start:
                continue
            rows.append(
                {
                    "job": result["job_id"],
                    "component": iv.get("component") or "unattributed",
                    "start_h": (start - t0) / 3600.0,
                    "end_h": (end - t0) / 3600.0,
                }
            )
    return pd.DataFrame(rows, columns=["job", "component", "start_h", "end_h"])


def failures(results: list[dict[str, Any]], align: str) -> pd.DataFrame:
    """Every failure of every job in hours from its job's origin: job, kind, at_h."""
    rows = []
    for result in results:
        t0, _ = origin(result, align)
        for f in (result.get("l1") or {}).get("failures") or []:
            ts = data.epoch(f.get("ts"))
            if ts is not None:
                rows.append(
                    {"job": result["job_id"], "kind": f.get("kind"), "at_h": (ts - t0) / 3600}
                )
    return pd.DataFrame(rows, columns=["job", "kind", "at_h"])


def figure(results: list[dict[str, Any]], align: str) -> go.Figure:
    """The jobs as rows on one axis of hours since each one's origin, coloured by component."""
    spans = frame(results, align)
    if spans.empty:
        return empty_figure("None of these jobs has attributed time yet.")
    order = [r["job_id"] for r in results]
    fig = go.Figure()
    known = [c for c in COMPONENT_ORDER if c in set(spans["component"])]
    for comp in known + sorted(set(spans["component"]) - set(known)):
        part = spans[spans["component"] == comp]
        fig.add_bar(
            y=part["job"],
            x=part["end_h"] - part["start_h"],
            base=part["start_h"],
            orientation="h",
            name=COMPONENT_LABELS.get(comp, comp),
            marker={"color": component_color(comp), "line": {"width": 0}},
            customdata=[[j] for j in part["job"]],
            hovertemplate="%{customdata[0]}<br>%{base:.2f} h to %{x:.2f} h long"
            f"<extra>{COMPONENT_LABELS.get(comp, comp)}</extra>",
        )
    marks = failures(results, align)
    if not marks.empty:
        fig.add_scatter(
            y=marks["job"],
            x=marks["at_h"],
            mode="markers",
            marker={"symbol": "x", "size": 10, "color": BAD_COLOR},
            name="failure",
            customdata=[[j, k] for j, k in zip(marks["job"], marks["kind"], strict=True)],
            hovertemplate="%{customdata[0]}: %{customdata[1]} at %{x:.2f} h<extra></extra>",
        )
    fig.update_layout(
        barmode="overlay",
        height=140 + 46 * len(order),
        margin={"l": 10, "r": 10, "t": 40, "b": 40},
        title={"text": f"Hours since each job's {ALIGNS.get(align, ALIGNS['submit'])}"},
        xaxis={"title": f"hours since {ALIGNS.get(align, ALIGNS['submit'])}", "zeroline": True},
        yaxis={"categoryorder": "array", "categoryarray": order[::-1], "automargin": True},
        legend={"orientation": "h", "y": -0.25},
        plot_bgcolor="#fff",
        bargap=0.35,
    )
    return fig
