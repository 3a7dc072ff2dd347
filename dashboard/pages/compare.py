"""Compare page: a pair or a set of pairs side by side (Fig. 6), with attribution and cascade numbers."""

from __future__ import annotations

from typing import Any

import dash
import pandas as pd
from dash import html

from dashboard import data, figures
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


def layout(**query: Any) -> html.Div:
    """The compare page for `?baseline=&optimized=`, else the pairs chosen by `?pair_label=`."""
    filters = Filters.from_query(query)
    baseline = filters.extra.get("baseline")
    optimized = filters.extra.get("optimized")
    bar = filter_bar(
        PREFIX, filters, path="/compare", models=data.model_names(), teams=data.team_names()
    )
    head: list[Any] = [html.H1("Compare"), bar]
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
