"""Figure builders: data frames in, plotly figures out. Pure, so they are tested without a browser.

Styles follow the paper: Fig. 1 (attempt timeline), Fig. 2 (init critical path with hidden
work), Fig. 3 (checkpoint interval vs wasted training time), Fig. 6 (stacked bars per job).
Every figure that links to another page carries the target in `customdata`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go

from backend.ett.catalogue import attempt_label, resolve_phase
from dashboard.palette import (
    BAD_COLOR,
    COMPONENT_COLORS,
    COMPONENT_LABELS,
    FAILURE_COLORS,
    L1_COLORS,
    LIVE_STATE_COLORS,
    OTHER_COLOR,
    WASTE_COLORS,
    component_color,
    owner_colors,
)

COMPONENT_ORDER: tuple[str, ...] = tuple(COMPONENT_COLORS)
LOST_COMPONENTS: tuple[str, ...] = tuple(c for c in COMPONENT_ORDER if c != "effective_training")
L1_PARTS: tuple[str, ...] = ("tts", "recovery", "checkpoint", "shutdown")
L1_LABELS: dict[str, str] = {
    "tts": "TTS",
    "recovery": "Recovery",
    "checkpoint": "Checkpoint",
    "shutdown": "Shutdown",
}
# Past this many series a legend stops being readable: the rest is folded into "other".
DEFAULT_TOP_N = 8

# A small template: plotly_white's look for what these charts use, at a twentieth of the
# cost of expanding the full template on every figure.
TEMPLATE = go.layout.Template(
    layout={
        "plot_bgcolor": "white",
        "paper_bgcolor": "white",
        "font": {"color": "#2a3f5f"},
        "xaxis": {"gridcolor": "#ebf0f8", "zerolinecolor": "#ebf0f8"},
        "yaxis": {"gridcolor": "#ebf0f8", "zerolinecolor": "#ebf0f8"},
        "hoverlabel": {"align": "left"},
    }
).to_plotly_json()

_BASE_LAYOUT = {
    "template": TEMPLATE,
    "margin": {"l": 60, "r": 20, "t": 90, "b": 50},
    "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.01, "x": 0, "traceorder": "normal"},
    "font": {"size": 12},
}


def _layout(fig: go.Figure, title: str, **kwargs: object) -> go.Figure:
    # One assignment of the whole layout: update_layout() merges key by key through plotly's
    # relayout machinery, several times the cost (most of a page's server time).
    layout: dict[str, object] = fig.layout.to_plotly_json()
    layout.update(_BASE_LAYOUT)
    layout["title"] = {"text": title, "x": 0, "y": 0.985, "yref": "container", "font": {"size": 14}}
    layout.update(kwargs)
    fig.layout = layout
    return fig


def empty_figure(message: str) -> go.Figure:
    """A blank figure that says, in words, why it is blank and what to do."""
    fig = go.Figure()
    fig.update_layout(
        template=TEMPLATE,
        xaxis={"visible": False},
        yaxis={"visible": False},
        margin={"l": 20, "r": 20, "t": 20, "b": 20},
        annotations=[
            {
                "text": message,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "showarrow": False,
                "font": {"size": 14, "color": "#666"},
            }
        ],
        height=220,
    )
    return fig


def fold_top_n(frame: pd.DataFrame, key: str, value: str, top_n: int) -> pd.DataFrame:
    """Keep the `top_n` keys by total `value`; every other key becomes 'other'."""
    if frame.empty:
        return frame
    totals = frame.groupby(key)[value].sum().sort_values(ascending=False)
    keep = set(totals.index[:top_n])
    out = frame.copy()
    out[key] = out[key].where(out[key].isin(keep), "other")
    group_cols = [c for c in out.columns if c not in (value,)]
    return out.groupby(group_cols, as_index=False, sort=False)[value].sum()


ANNOTATION_COLOR = "#555"


def with_annotations(fig: go.Figure, notes: pd.DataFrame) -> go.Figure:
    """Draw dated annotations on a time-axis chart, as Grafana does: a dotted line and a marker.

    notes columns: ts (datetime), title. Hovering the marker shows the title. A blank chart
    (no data) is left as it is.
    """
    if notes is None or notes.empty or not fig.data:
        return fig
    shapes = list(fig.layout.shapes or ())
    marks = list(fig.layout.annotations or ())
    for ts, title in zip(notes["ts"], notes["title"], strict=True):
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": ts,
                "x1": ts,
                "y0": 0,
                "y1": 1,
                "line": {"color": ANNOTATION_COLOR, "width": 1, "dash": "dot"},
                "layer": "below",
            }
        )
        marks.append(
            {
                "x": ts,
                "xref": "x",
                "y": 1.0,
                "yref": "paper",
                "yanchor": "bottom",
                "text": "◆",
                "hovertext": f"{pd.Timestamp(ts):%Y-%m-%d %H:%M} {title}",
                "showarrow": False,
                "font": {"color": ANNOTATION_COLOR, "size": 11},
            }
        )
    # Assigned, not update_layout(): a relayout of a large figure costs ~0.1 s here.
    fig.layout.shapes = shapes
    fig.layout.annotations = marks
    return fig


# ---------------------------------------------------------------- fleet


def _partial_mask(series: pd.DataFrame) -> list[bool]:
    """Which points are partial buckets (cut by the range, or still in progress)."""
    if "partial" not in series:
        return [False] * len(series)
    return [bool(p) if p is not None and p == p else False for p in series["partial"]]


def _partial_traces(fig: go.Figure, series: pd.DataFrame, partial: list[bool], color: str) -> None:
    """Draw partial buckets apart: a dotted line through every point, hollow markers on them."""
    if not any(partial):
        return
    fig.add_scatter(
        x=series["bucket"],
        y=series["ett_pct"],
        mode="lines",
        line={"color": color, "width": 1.5, "dash": "dot"},
        hoverinfo="skip",
        name="with partial buckets",
    )
    part = series[partial]
    fig.add_scatter(
        x=part["bucket"],
        y=part["ett_pct"],
        mode="markers",
        marker={"symbol": "circle-open", "size": 10, "color": color, "line": {"width": 2}},
        hovertemplate="%{x}<br>ETT% %{y:.1f}<br>partial bucket (cut by the range or still in "
        "progress)<extra></extra>",
        name="partial bucket",
    )


def fleet_trend(series: pd.DataFrame, *, bucket: str = "day") -> go.Figure:
    """Fleet ETT% (GPU-weighted) per bucket, with the wall GPU-hours behind each point in hover.

    Columns: bucket (date), ett_pct, wall_gpu_h, optional partial (bool): partial buckets are
    drawn hollow on a dotted line.
    """
    if series.empty:
        return empty_figure("No jobs in this range yet: widen the date range or send events.")
    partial = _partial_mask(series)
    color = COMPONENT_COLORS["effective_training"]
    whole = [None if p else v for v, p in zip(series["ett_pct"], partial, strict=True)]
    fig = go.Figure(
        go.Scatter(
            x=series["bucket"],
            y=whole,
            mode="lines+markers" if len(series) < 60 else "lines",
            line={"color": color, "width": 2},
            customdata=series[["wall_gpu_h"]].to_numpy(),
            hovertemplate="%{x}<br>ETT% %{y:.1f}<br>%{customdata[0]:,.0f} GPU-h<extra></extra>",
            name="Fleet ETT%",
        )
    )
    _partial_traces(fig, series, partial, color)
    low = float(series["ett_pct"].min())
    return _layout(
        fig,
        f"Fleet ETT% per {bucket} (GPU-weighted)",
        yaxis={"title": "ETT %", "range": [max(0.0, min(low - 5, 80.0)), 100]},
        xaxis={"title": None},
        showlegend=False,
        height=320,
    )


def lost_stacked(
    frame: pd.DataFrame,
    *,
    by: str,
    title: str,
    colors: dict[str, str] | None = None,
    order: Sequence[str] | None = None,
    top_n: int = DEFAULT_TOP_N,
) -> go.Figure:
    """Lost GPU-hours per bucket stacked by `by` (component or owner), top N plus 'other'.

    Columns: bucket, <by>, gpu_h.
    """
    if frame.empty or float(frame["gpu_h"].sum()) <= 0:
        return empty_figure("No lost GPU-hours in this range.")
    data = fold_top_n(frame, by, "gpu_h", top_n)
    keys = list(data.groupby(by)["gpu_h"].sum().sort_values(ascending=False).index)
    if order is not None:
        keys = [k for k in order if k in keys] + [k for k in keys if k not in order]
    if "other" in keys:
        keys = [k for k in keys if k != "other"] + ["other"]
    palette = colors or owner_colors([str(k) for k in keys])
    fig = go.Figure()
    for key in keys:
        part = data[data[by] == key]
        fig.add_bar(
            x=part["bucket"],
            y=part["gpu_h"],
            name=COMPONENT_LABELS.get(str(key), str(key)),
            marker_color=palette.get(str(key), OTHER_COLOR),
            customdata=[[str(key)]] * len(part),  # a click opens this bucket's jobs of it
            hovertemplate="%{x}<br>%{y:,.0f} GPU-h<extra>%{fullData.name}</extra>",
        )
    return _layout(fig, title, barmode="stack", yaxis={"title": "GPU-hours lost"}, height=340)


def lost_by_owner(frame: pd.DataFrame, *, title: str, top_n: int = 12) -> go.Figure:
    """Lost GPU-hours per owning team (largest on top), each bar stacked by component.

    Columns: owner, component, gpu_h. Teams past the top N are folded into 'other'.
    """
    if frame.empty or float(frame["gpu_h"].sum()) <= 0:
        return empty_figure("No lost GPU-hours in this range.")
    totals = frame.groupby("owner")["gpu_h"].sum().sort_values(ascending=False)
    data = fold_top_n(frame[["owner", "component", "gpu_h"]], "owner", "gpu_h", top_n)
    order = list(totals.index[:top_n]) + (["other"] if "other" in set(data["owner"]) else [])
    fig = go.Figure()
    for comp in LOST_COMPONENTS:
        part = data[data["component"] == comp]
        if part.empty:
            continue
        fig.add_bar(
            x=part["gpu_h"],
            y=part["owner"],
            orientation="h",
            name=COMPONENT_LABELS[comp],
            marker_color=COMPONENT_COLORS[comp],
            hovertemplate="%{y}: %{x:,.0f} GPU-h<extra>%{fullData.name}</extra>",
        )
    return _layout(
        fig,
        title,
        barmode="stack",
        xaxis={"title": "GPU-hours lost"},
        yaxis={"categoryorder": "array", "categoryarray": order[::-1], "automargin": True},
        height=120 + 30 * len(order),
    )


def nof_per_job(frame: pd.DataFrame, *, bucket: str = "day") -> go.Figure:
    """Failures per job by kind, per bucket (stacked).

    Columns: bucket, kind, failures, jobs (jobs in the bucket, repeated on each row).
    """
    if frame.empty or float(frame["failures"].sum()) <= 0:
        return empty_figure("No failures in this range.")
    fig = go.Figure()
    for kind, color in FAILURE_COLORS.items():
        part = frame[frame["kind"] == kind]
        if part.empty or float(part["failures"].sum()) <= 0:
            continue
        per_job = part["failures"] / part["jobs"].where(part["jobs"] > 0)
        fig.add_bar(
            x=part["bucket"],
            y=per_job.fillna(0.0),
            name=kind,
            marker_color=color,
            hovertemplate="%{x}<br>%{y:.2f} per job<extra>%{fullData.name}</extra>",
        )
    return _layout(
        fig,
        f"NoF per job by kind, per {bucket}",
        barmode="stack",
        yaxis={"title": "failures / job"},
    )


def regressions(frame: pd.DataFrame, *, top_n: int = 10) -> go.Figure:
    """The models whose ETT% fell most between two ranges, as horizontal bars of the change.

    Columns: model, before_pct, after_pct. Each bar's customdata is its model (for the link).
    """
    if frame.empty:
        return empty_figure(
            "No model ran in both ranges, with enough jobs before to compare: widen the range."
        )
    data = frame.assign(delta=frame["after_pct"] - frame["before_pct"])
    data = data[data["delta"] < 0].nsmallest(top_n, "delta").sort_values("delta", ascending=False)
    if data.empty:
        return empty_figure("No model regressed in this range.")
    fig = go.Figure(
        go.Bar(
            x=data["delta"],
            y=data["model"],
            orientation="h",
            marker_color=BAD_COLOR,
            customdata=data[["model", "before_pct", "after_pct"]].to_numpy(),
            hovertemplate=(
                "%{customdata[0]}<br>%{customdata[1]:.1f}% → %{customdata[2]:.1f}%"
                "<br>%{x:+.1f} pts<extra>click to open the model</extra>"
            ),
        )
    )
    return _layout(
        fig,
        "ETT% change from the range before (points)",
        xaxis={"title": "change in ETT% (points)"},
        yaxis={"automargin": True},
        showlegend=False,
        height=80 + 30 * len(data),
    )


def top_models(frame: pd.DataFrame, *, top_n: int = 10) -> go.Figure:
    """The models that lost the most GPU-hours, largest on top, bars coloured by their ETT%.

    Columns: model, lost_gpu_h, ett_pct. Each bar's customdata is its model (for the link).
    """
    data = frame.dropna(subset=["lost_gpu_h"])
    data = data[data["lost_gpu_h"] > 0].nlargest(top_n, "lost_gpu_h").iloc[::-1]
    if data.empty:
        return empty_figure("No model lost GPU-hours in this range.")
    fig = go.Figure(
        go.Bar(
            x=data["lost_gpu_h"],
            y=data["model"],
            orientation="h",
            marker={
                "color": data["ett_pct"].fillna(0.0),
                "colorscale": "RdYlGn",
                "cmin": 50,
                "cmax": 100,
                "colorbar": {"title": {"text": "ETT%"}, "thickness": 10},
            },
            customdata=data[["model", "ett_pct"]].to_numpy(),
            hovertemplate=(
                "%{customdata[0]}<br>%{x:,.0f} GPU-h lost<br>ETT% %{customdata[1]:.1f}"
                "<extra>click to open the model</extra>"
            ),
        )
    )
    return _layout(
        fig,
        f"Top {len(data)} models by GPU-hours lost",
        xaxis={"title": "GPU-hours lost"},
        yaxis={"automargin": True},
        showlegend=False,
        height=90 + 30 * len(data),
    )


# ---------------------------------------------------------------- model


def l2_bars(
    jobs: pd.DataFrame, *, title: str = "Level-2 components per job", unit: str = "h"
) -> go.Figure:
    """Paper Fig. 6 style: one stacked bar per job of its L2 components, ETT% written on top.

    Columns: job_id, label (x tick text), ett_pct, and one column per component (seconds).
    Each bar's customdata is its job_id (for the link to the job page).
    """
    if jobs.empty:
        return empty_figure("No jobs for this model in this range.")
    scale = 3600.0 if unit == "h" else 60.0
    fig = go.Figure()
    for comp in COMPONENT_ORDER:
        if comp not in jobs or float(jobs[comp].sum()) <= 0:
            continue
        fig.add_bar(
            x=jobs["label"],
            y=jobs[comp] / scale,
            name=COMPONENT_LABELS[comp],
            marker_color=COMPONENT_COLORS[comp],
            customdata=jobs[["job_id"]].to_numpy(),
            hovertemplate=f"%{{customdata[0]}}<br>%{{y:.2f}} {unit}<extra>%{{fullData.name}}</extra>",
        )
    totals = sum(jobs[c] for c in COMPONENT_ORDER if c in jobs) / scale
    # Past ~20 bars the ETT% labels overlap; the hover still tells each bar's numbers.
    fig.add_scatter(
        x=jobs["label"],
        y=totals,
        mode="text" if len(jobs) <= 20 else "markers",
        text=[f"{v:.1f}%" for v in jobs["ett_pct"]],
        textposition="top center",
        marker={"symbol": "line-ew", "size": 8, "color": "#333", "line": {"width": 1}},
        name="ETT%",
        showlegend=False,
        customdata=jobs[["job_id", "ett_pct"]].to_numpy(),
        hovertemplate="%{customdata[0]}<br>ETT% %{customdata[1]:.1f}<extra></extra>",
    )
    return _layout(
        fig,
        title,
        barmode="stack",
        yaxis={"title": f"wall time ({unit})", "range": [0, float(totals.max()) * 1.15]},
        xaxis={"type": "category", "tickangle": -45 if len(jobs) > 8 else 0},
        height=380,
    )


def model_ett_over_time(jobs: pd.DataFrame, *, series: pd.DataFrame | None = None) -> go.Figure:
    """ETT% of each job of a model against its submission time, over the GPU-weighted daily line.

    jobs columns: job_id, submitted_at (datetime), ett_pct, provisional (bool).
    series columns (optional): bucket (datetime), ett_pct, partial (drawn hollow, dotted).
    """
    if jobs.empty:
        return empty_figure("No jobs for this model in this range.")
    fig = go.Figure()
    if series is not None and not series.empty:
        partial = _partial_mask(series)
        fig.add_scatter(
            x=series["bucket"],
            y=[None if p else v for v, p in zip(series["ett_pct"], partial, strict=True)],
            mode="lines",
            name="ETT% per day (GPU-weighted)",
            line={"color": "#999", "width": 1.5, "shape": "hv"},
            hovertemplate="%{x|%Y-%m-%d}: %{y:.1f}%<extra></extra>",
        )
        _partial_traces(fig, series, partial, "#999")
    data = jobs.sort_values("submitted_at")
    fig.add_scatter(
        x=data["submitted_at"],
        y=data["ett_pct"],
        mode="markers",
        name="job",
        marker={
            "symbol": ["circle-open" if p else "circle" for p in data["provisional"]],
            "size": 9,
            "color": COMPONENT_COLORS["effective_training"],
        },
        customdata=data[["job_id"]].to_numpy(),
        hovertemplate="%{customdata[0]}<br>%{x}<br>ETT% %{y:.1f}<extra>click to open</extra>",
    )
    return _layout(
        fig,
        "ETT% over time (dots: jobs, open: still running)",
        yaxis={"title": "ETT %", "range": [0, 100]},
        showlegend=False,
        height=340,
    )


def level1_over_time(
    points: pd.DataFrame,
    *,
    title: str,
    nof_by_kind: pd.DataFrame | None = None,
    markers: bool = False,
) -> go.Figure:
    """The Level-1 view over time: TTS, TTR and NoF (the paper's Level-1 analysis).

    points columns: x (datetime), tts_min, ttr_min (None where no failure), nof, and job_id
    when `markers` (one point per job, clickable). nof_by_kind (optional) columns: x, kind,
    nof: NoF per job stacked by failure kind instead of the single NoF line.
    """
    if points.empty:
        return empty_figure("No jobs in this range.")
    # Three stacked panels sharing the time axis, laid out by hand (make_subplots costs ~0.1 s).
    fig = go.Figure()
    data = points.sort_values("x")
    mode = "markers" if markers else "lines+markers"
    custom = data[["job_id"]].to_numpy() if markers and "job_id" in data else None
    hover_id = "%{customdata[0]}<br>" if custom is not None else ""
    for axis, col, name, color in (
        ("y", "tts_min", "TTS", L1_COLORS["tts"]),
        ("y2", "ttr_min", "TTR", L1_COLORS["recovery"]),
    ):
        fig.add_scatter(
            x=data["x"],
            y=data[col],
            yaxis=axis,
            mode=mode,
            name=name,
            marker={"color": color, "size": 6},
            line={"color": color, "width": 1.5},
            customdata=custom,
            connectgaps=True,
            hovertemplate=hover_id + "%{x}<br>" + name + " %{y:,.1f} min<extra></extra>",
        )
    stacked = nof_by_kind is not None and not nof_by_kind.empty
    if stacked:
        for kind, color in FAILURE_COLORS.items():
            part = nof_by_kind[nof_by_kind["kind"] == kind]
            if part.empty:
                continue
            fig.add_bar(
                x=part["x"],
                y=part["nof"],
                yaxis="y3",
                name=kind,
                marker_color=color,
                hovertemplate="%{x}<br>%{y:.2f} per job<extra>%{fullData.name}</extra>",
            )
    else:
        fig.add_scatter(
            x=data["x"],
            y=data["nof"],
            yaxis="y3",
            mode=mode,
            name="NoF",
            marker={"color": FAILURE_COLORS["unknown"], "size": 6},
            line={"color": FAILURE_COLORS["unknown"], "width": 1.5},
            customdata=custom,
            hovertemplate=hover_id + "%{x}<br>NoF %{y:,.2f}<extra></extra>",
        )
    return _layout(
        fig,
        title,
        barmode="stack",
        height=480,
        showlegend=stacked,
        margin={"l": 60, "r": 20, "t": 110, "b": 40},
        yaxis={"domain": [0.70, 1.0], "title": "TTS (min)"},
        yaxis2={"domain": [0.36, 0.64], "title": "TTR / failure (min)"},
        yaxis3={"domain": [0.0, 0.30], "title": "NoF / job"},
        xaxis={"anchor": "y3"},
    )


def checkpoint_curve(
    curve: pd.DataFrame,
    *,
    current_s: float | None,
    optimal_s: float | None,
    title: str = "Checkpoint interval vs wasted training time (Fig. 3)",
) -> go.Figure:
    """Paper Fig. 3: WTT% against the save interval, the current and the optimal interval marked.

    Columns: tau_s, wtt_pct, and optionally utt_pct and blocking_pct (the two terms of Eq. 2),
    all in % of training time.
    """
    if curve.empty:
        return empty_figure(
            "No checkpoint advice yet: it needs jobs with checkpoints and failures in the range."
        )
    x = curve["tau_s"] / 60.0
    fig = go.Figure()
    if "utt_pct" in curve and "blocking_pct" in curve:
        fig.add_scatter(
            x=x,
            y=curve["utt_pct"],
            name="unsaved training (UTT)",
            line={"dash": "dot", "color": WASTE_COLORS["replay"]},
        )
        fig.add_scatter(
            x=x,
            y=curve["blocking_pct"],
            name="save blocking (NoS × CSBT)",
            line={"dash": "dot", "color": WASTE_COLORS["checkpoint_blocking"]},
        )
    fig.add_scatter(
        x=x,
        y=curve["wtt_pct"],
        name="wasted training WTT(τ)",
        line={"color": COMPONENT_COLORS["wasted_training"], "width": 3},
        hovertemplate="τ = %{x:.0f} min<br>WTT %{y:.2f}%<extra></extra>",
    )
    marks = sorted(
        (
            (value, label, dash, color)
            for value, label, dash, color in (
                (current_s, "current", "dash", "#333"),
                (optimal_s, "optimal τ*", "solid", COMPONENT_COLORS["effective_training"]),
            )
            if value
        ),
        key=lambda m: m[0],
    )
    for i, (value, label, dash, color) in enumerate(marks):
        # The left mark writes its label to its left, the right one to its right: no overlap.
        fig.add_vline(
            x=value / 60.0,
            line={"dash": dash, "color": color},
            annotation_text=f"{label} {value / 60.0:.0f} min",
            annotation_position="top left" if i == 0 and len(marks) > 1 else "top right",
        )
    # Tiny intervals blow the save term up; keep the basin around the marks in view.
    marks = [v / 60.0 for v in (current_s, optimal_s) if v]
    right = 3.0 * max(marks) if marks else float(x.max())
    visible = curve["wtt_pct"][x <= right]
    top = min(float(visible.max()), 4.0 * float(visible.min())) if not visible.empty else 100.0
    return _layout(
        fig,
        title,
        xaxis={"title": "checkpoint interval τ (minutes)", "range": [0, right]},
        yaxis={"title": "% of training time wasted", "range": [0, top * 1.1]},
        height=340,
    )


# ---------------------------------------------------------------- job


def attempt_name(attempt: object, labels: Mapping[int, str | None] | None = None) -> str:
    """How the page names an attempt: "attempt 1001 (requeue 1, in-place restart 1)".

    `labels` are the answer's per-attempt words (they know in-place restarts); without one the
    words come from the number alone (catalogue.attempt_label). None is the job's own row.
    """
    if attempt is None or (isinstance(attempt, float) and pd.isna(attempt)):
        return "job"
    number = int(attempt)  # type: ignore[call-overload]
    words = (labels or {}).get(number) or attempt_label(number)
    return f"attempt {number} ({words})" if words else f"attempt {number}"


# The pseudo-component of an open job's time after its last event: not yet attributed for good.
LIVE_TAIL = "live_tail"
IN_PROGRESS = "in_progress"
IN_PROGRESS_COLOR = "#bdbdbd"


def attempt_timeline(
    intervals: pd.DataFrame,
    failures: pd.DataFrame,
    *,
    submitted_at: float,
    ended_at: float,
    provisional: bool = False,
    labels: Mapping[int, str | None] | None = None,
) -> go.Figure:
    """Paper Fig. 1: attempts as rows, each piece of wall time coloured by component.

    intervals columns: start, end (epoch s), attempt (int or None), component, phase.
    failures columns: ts, kind, attempt, inferred. Time is shown in minutes since submission;
    replay, checkpoint blocking and stalls keep their own shade; a live job shows a 'now' line.
    `labels`: each attempt's words ("requeue 1"), shown beside its number.
    """
    if intervals.empty:
        return empty_figure("No attributed time yet: the job has sent no events.")
    data = intervals.copy()
    data["row"] = [attempt_name(a, labels) for a in data["attempt"]]
    data["kind"] = [
        phase if comp == "wasted_training" and phase in WASTE_COLORS else comp
        for comp, phase in zip(data["component"], data["phase"], strict=True)
    ]
    if provisional:
        # A running job's live tail (marked by the engine, or the unattributed time up to
        # now) is not yet known: drawn hatched as "in progress", not as unattributed.
        marked = (
            data["provisional"].fillna(False).astype(bool)
            if "provisional" in data
            else pd.Series(False, index=data.index)
        )
        tail = (data["component"] == "unattributed") & (data["end"] >= ended_at - 1.0)
        data.loc[marked | tail | (data["component"] == LIVE_TAIL), "kind"] = IN_PROGRESS
    data["x0"] = (data["start"] - submitted_at) / 60.0
    data["dur"] = (data["end"] - data["start"]) / 60.0
    # The job's row first, then the attempts by number.
    order = {
        name: -1 if name == "job" else int(a)
        for name, a in zip(data["row"], data["attempt"], strict=True)
    }
    rows = sorted(order, key=order.__getitem__)
    fig = go.Figure()
    kinds = [c for c in COMPONENT_ORDER if c != "wasted_training"] + list(WASTE_COLORS)
    for kind in [*kinds, IN_PROGRESS]:
        part = data[data["kind"] == kind]
        if part.empty:
            continue
        name = (
            "in progress (provisional)"
            if kind == IN_PROGRESS
            else COMPONENT_LABELS.get(kind, f"wasted: {kind.replace('_', ' ')}")
        )
        fig.add_bar(
            base=part["x0"],
            x=part["dur"],
            y=part["row"],
            orientation="h",
            name=name,
            marker={
                "color": IN_PROGRESS_COLOR if kind == IN_PROGRESS else component_color(kind),
                "line": {"width": 0},
                "pattern": {"shape": "/" if kind in ("replay", IN_PROGRESS) else ""},
            },
            customdata=part[["phase", "x0", "dur"]].fillna("").to_numpy(),
            hovertemplate=(
                "%{customdata[0]}<br>%{customdata[1]:.1f} → +%{customdata[2]:.1f} min"
                f"<extra>{name}</extra>"
            ),
        )
    # One trace per failure kind, so the legend shows each kind's × in its own colour.
    kinds = [] if failures.empty else sorted(set(failures["kind"]) - set(FAILURE_COLORS))
    for kind in [] if failures.empty else list(FAILURE_COLORS) + kinds:
        part = failures[failures["kind"] == kind]
        if part.empty:
            continue
        fig.add_scatter(
            x=(part["ts"] - submitted_at) / 60.0,
            y=[attempt_name(a, labels) for a in part["attempt"]],
            mode="markers",
            name=f"× {kind} failure",
            marker={
                "symbol": "x",
                "size": 14,
                "color": FAILURE_COLORS.get(kind, OTHER_COLOR),
                "line": {"width": 2, "color": "#000"},
            },
            customdata=part[["kind", "inferred"]].to_numpy(),
            hovertemplate="failure: %{customdata[0]} (inferred: %{customdata[1]})<br>%{x:.1f} min<extra></extra>",
        )
    total_min = (ended_at - submitted_at) / 60.0
    if provisional:
        fig.add_vline(
            x=total_min,
            line={"dash": "dash", "color": "#333"},
            annotation_text="now (running)",
            annotation_position="top left",
        )
    return _layout(
        fig,
        f"Attempt timeline: {total_min:.1f} min end to end",
        barmode="overlay",
        bargap=0.35,
        xaxis={"title": "minutes since submission", "range": [0, total_min * 1.01 or 1]},
        yaxis={
            "categoryorder": "array",
            "categoryarray": rows[::-1],
            "title": None,
            # An attempt's words go on a second line under its number.
            "tickmode": "array",
            "tickvals": rows,
            "ticktext": [r.replace(" (", "<br>(", 1) for r in rows],
            "automargin": True,
        },
        height=140 + 45 * len(rows),
    )


LEGEND_GREY = "#777"


def _legend_swatches(fig: go.Figure) -> None:
    """Neutral legend entries for solid (critical path) and hatched (hidden) bars.

    The bars take their phase's component colour, so their own legend swatch would show
    whichever colour came first; these say what solid and hatched mean.
    """
    for name, style in (
        ("solid: on the critical path", {"color": LEGEND_GREY}),
        (
            "hatched: hidden behind other work",
            {"color": LEGEND_GREY, "opacity": 0.35, "pattern": {"shape": "x"}},
        ),
    ):
        fig.add_bar(x=[None], y=[None], orientation="h", name=name, marker=style, hoverinfo="skip")


def init_critical_path(spans: pd.DataFrame, *, title: str) -> go.Figure:
    """Paper Fig. 2: one attempt's init phases as a Gantt, critical-path parts solid, hidden parts hatched.

    Columns: phase, start_s, end_s (seconds since the attempt started), hidden (bool: overlapped
    by other work, so off the critical path).
    """
    if spans.empty:
        return empty_figure("No init phases recorded for this attempt.")
    order = list(dict.fromkeys(spans.sort_values("start_s")["phase"]))
    fig = go.Figure()
    for hidden in (False, True):
        part = spans[spans["hidden"] == hidden]
        if part.empty:
            continue
        colors = [component_color(resolve_phase(p).component) for p in part["phase"]]
        fig.add_bar(
            base=part["start_s"] / 60.0,
            x=(part["end_s"] - part["start_s"]) / 60.0,
            y=part["phase"],
            orientation="h",
            name="hidden (overlapped)" if hidden else "on the critical path",
            showlegend=False,
            marker={
                "color": colors,
                "opacity": 0.35 if hidden else 1.0,
                "pattern": {"shape": "x" if hidden else ""},
                "line": {"width": 1 if hidden else 0, "color": "#555"},
            },
            hovertemplate="%{y}<br>%{base:.1f} → +%{x:.1f} min<extra>%{fullData.name}</extra>",
        )
    _legend_swatches(fig)
    return _layout(
        fig,
        title,
        barmode="overlay",
        xaxis={"title": "minutes since the attempt started"},
        yaxis={"categoryorder": "array", "categoryarray": order[::-1], "automargin": True},
        height=120 + 28 * len(order),
    )


def phase_hidden_work(
    phases: pd.DataFrame, *, title: str = "Phases: exposed vs hidden time (Eq. 4 fast-batch effect)"
) -> go.Figure:
    """Per phase, the exposed seconds (critical path) and the hidden ones (total - exposed).

    Columns: phase, total_s, exposed_s.
    """
    if phases.empty:
        return empty_figure("No phases recorded.")
    data = phases.assign(hidden_s=(phases["total_s"] - phases["exposed_s"]).clip(lower=0.0))
    data = data.sort_values("total_s")
    colors = [component_color(resolve_phase(p).component) for p in data["phase"]]
    fig = go.Figure()
    fig.add_bar(
        x=data["exposed_s"] / 60.0,
        y=data["phase"],
        orientation="h",
        name="exposed (on the critical path)",
        showlegend=False,
        marker={"color": colors},
        hovertemplate="%{y}: %{x:.1f} min exposed<extra></extra>",
    )
    fig.add_bar(
        x=data["hidden_s"] / 60.0,
        y=data["phase"],
        orientation="h",
        name="hidden behind other work",
        showlegend=False,
        marker={"color": colors, "opacity": 0.35, "pattern": {"shape": "x"}},
        hovertemplate="%{y}: %{x:.1f} min hidden<extra></extra>",
    )
    _legend_swatches(fig)
    return _layout(
        fig,
        title,
        barmode="stack",
        xaxis={"title": "minutes"},
        yaxis={"automargin": True},
        height=120 + 26 * len(data),
    )


# ---------------------------------------------------------------- compare


def lost_parts_bars(
    pairs: pd.DataFrame, *, title: str = "Lost time, baseline vs optimized"
) -> go.Figure:
    """Paper Fig. 6: per pair, baseline and optimized bars of the four L1 lost parts, ETT% on top.

    Columns: pair (group name), variant ('baseline' | 'optimized'), job_id, ett_pct, and
    tts_s, recovery_s, checkpoint_s, shutdown_s (seconds).
    """
    if pairs.empty:
        return empty_figure("Pick a baseline and an optimized job, or a label that pairs them.")
    x = [pairs["pair"].tolist(), pairs["variant"].tolist()]
    fig = go.Figure()
    for part in L1_PARTS:
        fig.add_bar(
            x=x,
            y=pairs[f"{part}_s"] / 60.0,
            name=L1_LABELS[part],
            marker_color=L1_COLORS[part],
            customdata=pairs[["job_id"]].to_numpy(),
            hovertemplate="%{customdata[0]}<br>%{y:.1f} min<extra>%{fullData.name}</extra>",
        )
    totals = sum(pairs[f"{p}_s"] for p in L1_PARTS) / 60.0
    fig.add_scatter(
        x=x,
        y=totals,
        mode="text",
        text=[f"{v:.1f}%" for v in pairs["ett_pct"]],
        textposition="top center",
        showlegend=False,
        hoverinfo="skip",
    )
    return _layout(
        fig,
        title,
        barmode="stack",
        yaxis={"title": "minutes lost", "range": [0, float(totals.max()) * 1.18 or 1]},
        height=400,
    )


def attribution_bars(attribution: dict[str, float], cascade_tts_share: float | None) -> go.Figure:
    """Direct attribution of the saving to TTS, recovery, checkpoint and shutdown, plus the cascade bound."""
    parts = [p for p in L1_PARTS if p in attribution]
    if not parts:
        return empty_figure("No saving to attribute.")
    fig = go.Figure(
        go.Bar(
            x=[attribution[p] * 100.0 for p in parts],
            y=[L1_LABELS[p] for p in parts],
            orientation="h",
            marker_color=[L1_COLORS[p] for p in parts],
            name="direct attribution",
            hovertemplate="%{y}: %{x:.1f}% of the saving<extra></extra>",
        )
    )
    if cascade_tts_share is not None:
        fig.add_scatter(
            x=[cascade_tts_share * 100.0],
            y=[L1_LABELS["tts"]],
            mode="markers",
            marker={"symbol": "diamond", "size": 14, "color": "#000"},
            name="TTS cascade bound (Eq. 3)",
            hovertemplate="cascade bound: %{x:.1f}%<extra></extra>",
        )
    return _layout(
        fig,
        "Share of the saving (direct attribution; diamond: TTS cascade bound)",
        xaxis={"title": "% of total saving"},
        yaxis={"categoryorder": "array", "categoryarray": [L1_LABELS[p] for p in parts][::-1]},
        height=260,
    )


# ---------------------------------------------------------------- SLOs

MET_COLOR = "#a6d96a"
BREACH_COLOR = BAD_COLOR
SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float | None]) -> str:
    """A text sparkline (▁ to █) of the values, blank where a value is missing."""
    known = [v for v in values if v is not None]
    if not known:
        return ""
    lo, hi = min(known), max(known)
    span = hi - lo or 1.0
    return "".join(
        " " if v is None else SPARKS[min(len(SPARKS) - 1, int((v - lo) / span * len(SPARKS)))]
        for v in values
    )


def slo_compliance(history: list[dict[str, object]], *, fmt: object) -> go.Figure:
    """SLO compliance over the range: one row per SLO, one cell per day (week), red = breached.

    history: [{"spec": SloSpec, "points": [(epoch end, value, breached)]}]; fmt(spec, value)
    writes a value with its unit for the hover.
    """
    rows = [h for h in history if h["points"]]
    if not rows:
        return empty_figure("No SLOs to evaluate.")
    x = pd.to_datetime([p[0] for p in rows[0]["points"]], unit="s")  # type: ignore[index]
    z, text = [], []
    for h in rows:
        spec = h["spec"]
        z.append([None if v is None else (1 if b else 0) for _t, v, b in h["points"]])  # type: ignore[attr-defined]
        text.append([fmt(spec, v) for _t, v, _b in h["points"]])  # type: ignore[attr-defined, operator]
    names = [h["spec"].name for h in rows]  # type: ignore[attr-defined]
    fig = go.Figure(
        go.Heatmap(
            x=x,
            y=names,
            z=z,
            text=text,
            zmin=0,
            zmax=1,
            colorscale=[[0, MET_COLOR], [0.5, MET_COLOR], [0.5, BREACH_COLOR], [1, BREACH_COLOR]],
            showscale=False,
            xgap=1,
            ygap=1,
            hovertemplate="%{y}<br>%{x|%Y-%m-%d}: %{text}<extra></extra>",
        )
    )
    return _layout(
        fig,
        "SLO compliance: each SLO evaluated at the end of each day (green met, red breached)",
        yaxis={"automargin": True, "autorange": "reversed"},
        height=140 + 22 * len(rows),
        margin={"l": 60, "r": 20, "t": 60, "b": 40},
    )


def live_gpus(gpus_by_state: dict[str, int]) -> go.Figure:
    """GPUs of the open jobs by live state right now: one horizontal bar per state."""
    states = [k for k in LIVE_STATE_COLORS if k in gpus_by_state]
    states += [k for k in gpus_by_state if k not in states]
    values = [gpus_by_state[k] for k in states]
    fig = go.Figure(
        go.Bar(
            x=values,
            y=[k.replace("_", " ") for k in states],
            orientation="h",
            marker_color=[LIVE_STATE_COLORS.get(k, OTHER_COLOR) for k in states],
            text=[f"{v:,}" for v in values],
            textposition="outside",
            textangle=0,
            cliponaxis=False,
            hovertemplate="%{y}: %{x:,} GPUs<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="GPUs", rangemode="tozero")
    fig = _layout(fig, "GPUs by live state, now", height=320, showlegend=False)
    fig.layout.margin = {"l": 110, "r": 40, "t": 50, "b": 50}
    return fig


def node_failure_rates(rows: Sequence[Mapping[str, object]], *, top_n: int = 30) -> go.Figure:
    """Unplanned failures per node-day of the hosts that fail most, lemon nodes in red.

    Rows: the /fleet/nodes answer's `nodes`; each bar's customdata is its host.
    """
    rated = [r for r in rows if r.get("failures_per_node_day")]
    if not rated:
        return empty_figure("No host had an unplanned failure in this range.")
    top = sorted(rated, key=lambda r: -float(r["failures_per_node_day"]))[:top_n]  # type: ignore[arg-type]
    fig = go.Figure(
        go.Bar(
            x=[r["host"] for r in top],
            y=[r["failures_per_node_day"] for r in top],
            marker_color=[BAD_COLOR if r.get("lemon") else OTHER_COLOR for r in top],
            customdata=[[r["host"], r["unplanned_failures"], r["exposure_node_days"]] for r in top],
            hovertemplate="%{x}<br>%{y:.3f} failures / node-day<br>%{customdata[1]} failures in "
            "%{customdata[2]:.1f} node-days<extra></extra>",
        )
    )
    return _layout(
        fig,
        f"Unplanned failures per node-day, top {len(top)} hosts (lemon nodes in red)",
        yaxis={"title": "failures / node-day"},
    )


def mttf_by_size(buckets: Sequence[Mapping[str, object]]) -> go.Figure:
    """MTTF (effective training hours per unplanned failure) per GPU-count bucket, log scale."""
    shown = [b for b in buckets if b.get("mttf_h")]
    if not shown:
        return empty_figure("No unplanned failure in this range: MTTF is unbounded.")
    fig = go.Figure(
        go.Bar(
            x=[f"{b['gpus']} GPUs" for b in shown],
            y=[b["mttf_h"] for b in shown],
            marker_color=OTHER_COLOR,
            customdata=[[b["unplanned_failures"], b["effective_h"], b["jobs"]] for b in shown],
            hovertemplate="%{x}<br>MTTF %{y:.1f} h<br>%{customdata[0]} unplanned failures in "
            "%{customdata[1]:.0f} effective hours (%{customdata[2]} jobs)<extra></extra>",
        )
    )
    return _layout(
        fig,
        "MTTF by job size: effective training hours per unplanned failure",
        yaxis={"title": "hours", "type": "log"},
    )


def lost_range_by_component(frame: pd.DataFrame, *, title: str) -> go.Figure:
    """Lost GPU-hours per component summed over the whole range (largest on top).

    Columns: bucket, component, gpu_h (the daily stacks of `lost_stacked`, summed here).
    """
    if frame.empty or float(frame["gpu_h"].sum()) <= 0:
        return empty_figure("No lost GPU-hours in this range.")
    totals = frame.groupby("component")["gpu_h"].sum()
    totals = totals[totals > 0].sort_values(ascending=True)
    share = 100.0 * totals / float(totals.sum())
    fig = go.Figure(
        go.Bar(
            x=list(totals.values),
            y=[COMPONENT_LABELS.get(c, c) for c in totals.index],
            orientation="h",
            marker_color=[COMPONENT_COLORS.get(c, "#888888") for c in totals.index],
            customdata=[[c, s] for c, s in zip(totals.index, share, strict=True)],
            hovertemplate="%{y}: %{x:,.0f} GPU-h (%{customdata[1]:.1f}% of lost)<extra></extra>",
            showlegend=False,
        )
    )
    return _layout(
        fig,
        title,
        xaxis={"title": "GPU-hours lost"},
        yaxis={"automargin": True},
        height=120 + 30 * len(totals),
    )
