"""Live page: the fleet now. GPUs by live state, the jobs in a bad state, rolling ETT%.

Everything comes from GET /api/v1/live's service (stored results and learned bounds, no raw
event), and the page redraws itself every LIVE_REFRESH_MS.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import dash
from dash import Input, Output, callback, dcc, html

from dashboard import data, figures, numbers
from dashboard.components import (
    card,
    cards,
    empty_state,
    graph,
    link_col,
    md_link,
    num_col,
    section,
    table,
)

LIVE_REFRESH_MS = 10_000
WINDOWS = ("1h", "6h", "24h")


def _when(epoch: float | None) -> str:
    if epoch is None:
        return ""
    return data.to_datetime([epoch]).dt.strftime("%Y-%m-%d %H:%M:%S")[0]


def _bad_rows(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for j in jobs:
        rows.append(
            {
                "job": md_link(
                    j["job_id"] or "", "/job?" + urlencode({"job_id": j["job_id"] or ""})
                ),
                "model": j["model"] or "",
                "state": j["state"],
                "owner": j["owner"] or "",
                "team": j["team"] or "",
                "since": _when(j["since"]),
                "bound_min": None if j["bound_s"] is None else j["bound_s"] / 60.0,
                "overrun_min": None if j["overrun_s"] is None else j["overrun_s"] / 60.0,
                "gpus": j["gpus"],
                "burned": j["gpu_hours_burned"],
            }
        )
    return rows


def _rolling_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    def row(name: str, team: str, windows: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"model": name, "team": team}
        for w in WINDOWS:
            out[f"ett_{w}"] = windows[w]["ett_pct"]
        out["gpu_h_24h"] = windows["24h"]["wall_gpu_h"]
        return out

    rows = [row("(fleet)", "", doc["fleet"])]
    rows += [row(m["model"], m["team"] or "", m["windows"]) for m in doc["models"]]
    return rows


def content() -> list[Any]:
    """The page's body at this instant (the interval callback redraws it)."""
    doc = data.live_fleet()
    gpus = doc["gpus_by_state"]
    bad = [j for j in doc["jobs"] if j["bad"]]
    bad_gpus = sum(j["gpus"] for j in bad)
    fleet = doc["fleet"]
    headline = cards(
        [
            card("live-open-jobs", "Open jobs", numbers.count(doc["open_jobs"])),
            card("live-training-gpus", "GPUs training", numbers.count(gpus.get("training", 0))),
            card("live-bad-gpus", "GPUs in a bad state", numbers.count(bad_gpus)),
            card("live-ett-1h", "Fleet ETT%, last hour", numbers.pct(fleet["1h"]["ett_pct"])),
        ]
    )
    if bad:
        bad_table: Any = table(
            "live-bad-table",
            _bad_rows(bad),
            [
                link_col("job", "job"),
                {"id": "model", "name": "model"},
                {"id": "state", "name": "state"},
                {"id": "owner", "name": "paged team"},
                {"id": "team", "name": "model's team"},
                {"id": "since", "name": "since (UTC)"},
                num_col("bound_min", "bound (min)"),
                num_col("overrun_min", "overrun (min)"),
                num_col("gpus", "GPUs", 0),
                num_col("burned", "GPU-h burned", 2),
            ],
            page_size=20,
        )
    else:
        bad_table = html.P(
            "No open job is hung, crash looping, in a restart storm or silent.", id="live-no-bad"
        )
    return [
        headline,
        section(
            "Jobs in a bad state",
            bad_table,
            note="Most GPU-hours burned first; GPU-hours count from the job's last effective "
            "instant. Hung: a phase open longer than its model's learned bound, or a loop whose "
            "data cursor stopped for longer than its bound. Click a job to open its page.",
        ),
        html.Div(
            [
                section(
                    "GPUs by live state",
                    graph("live-gpus-graph", figures.live_gpus(gpus)),
                    note="The open jobs' GPUs right now.",
                ),
                section(
                    "Rolling ETT%",
                    table(
                        "live-rolling-table",
                        _rolling_rows(doc),
                        [
                            {"id": "model", "name": "model"},
                            {"id": "team", "name": "team"},
                            num_col("ett_1h", "ETT% 1 h"),
                            num_col("ett_6h", "ETT% 6 h"),
                            num_col("ett_24h", "ETT% 24 h"),
                            num_col("gpu_h_24h", "GPU-h 24 h", 0),
                        ],
                        page_size=10,
                    ),
                    note="GPU-weighted over the trailing windows, open jobs' provisional time "
                    "included; the fleet first, then the models with the most GPU-hours.",
                ),
            ],
            className="ett-two-col",
        ),
        html.P(
            f"As of {_when(doc['now'])} UTC; refreshes every {LIVE_REFRESH_MS // 1000} s.",
            id="live-as-of",
            className="ett-note",
        ),
    ]


def layout(**_query: Any) -> html.Div:
    """The Live page."""
    try:
        body = content()
    except Exception as err:  # noqa: BLE001 - a broken read says so instead of a blank page
        body = [empty_state("live-empty", "The live state could not be read", str(err)[:300])]
    return html.Div(
        [
            html.H1("Live: the fleet now"),
            html.Div(body, id="live-body"),
            dcc.Interval(id="live-interval", interval=LIVE_REFRESH_MS),
        ]
    )


dash.register_page(
    __name__, path="/live", name="Live", title="ETT% · live", order=-1, layout=layout
)


@callback(
    Output("live-body", "children"),
    Input("live-interval", "n_intervals"),
    prevent_initial_call=True,
)
def _refresh(_n: int | None) -> list[Any]:
    """Redraw the page's body from the live state now."""
    return content()
