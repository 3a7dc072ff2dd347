"""The figure builders, tested directly: data frames in, plotly figures out."""

from __future__ import annotations

import pandas as pd
import pytest

from backend.ett.catalogue import COMPONENTS, FAILURE_KINDS, WASTE_KINDS
from dashboard import figures
from dashboard.palette import (
    COMPONENT_COLORS,
    FAILURE_COLORS,
    WASTE_COLORS,
    component_color,
    owner_colors,
)

T0 = 1_780_000_000.0


def _annotation_texts(fig) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def test_palette_gives_every_component_one_distinct_colour() -> None:
    assert set(COMPONENT_COLORS) == set(COMPONENTS)
    assert set(WASTE_COLORS) == set(WASTE_KINDS)
    assert set(FAILURE_COLORS) == set(FAILURE_KINDS)
    assert len(set(COMPONENT_COLORS.values())) == len(COMPONENT_COLORS)
    assert component_color("replay") == WASTE_COLORS["replay"]
    assert component_color("pt2_compile") == COMPONENT_COLORS["pt2_compile"]


def _is_red(color: str) -> bool:
    import colorsys

    r, g, b = (int(color[i : i + 2], 16) / 255 for i in (1, 3, 5))
    hue, light, sat = colorsys.rgb_to_hls(r, g, b)
    return sat > 0.4 and 0.15 < light < 0.85 and (hue < 15 / 360 or hue > 345 / 360)


def test_a_component_or_kind_the_catalogue_gains_gets_a_colour_and_a_label() -> None:
    """The palette follows the catalogue: a new name takes a spare hue, never red or taken."""
    from dashboard import palette

    grown = palette._every(("data_loading", *COMPONENTS), palette._COMPONENT_COLORS)
    assert list(grown)[1:] == list(COMPONENTS) and grown["pt2_compile"] == "#ff7f0e"
    assert grown["data_loading"] in palette.SPARE_COLORS
    assert len(set(grown.values())) == len(grown)
    kinds = palette._every((*FAILURE_KINDS, "a", "b"), palette._FAILURE_COLORS)
    assert len(set(kinds.values())) == len(kinds)
    every = [*COMPONENT_COLORS.values(), *FAILURE_COLORS.values(), *palette.SPARE_COLORS]
    assert not [c for c in every if _is_red(c)] and _is_red(palette.BAD_COLOR)
    assert palette.COMPONENT_LABELS["hardware_setup"] == "Hardware setup"
    assert list(palette.COMPONENT_LABELS) == list(COMPONENTS)


def test_owner_colours_are_stable_whatever_the_order() -> None:
    a = owner_colors(["data", "checkpoint", "compiler", "other"])
    b = owner_colors(["compiler", "data", "checkpoint"])
    assert a["data"] == b["data"] and a["checkpoint"] == b["checkpoint"]
    assert len({a["data"], a["checkpoint"], a["compiler"]}) == 3
    assert a["other"] != a["data"]


def _timeline_frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    # Attempt 0: 10 min scheduling, 20 min init, 30 min training, failure at 60 min;
    # attempt 1: 5 min scheduling, 15 min replay, 40 min training, 2 min checkpoint blocking.
    rows = [
        (0, 600, 0, "scheduling", None),
        (600, 1800, 0, "trainer_init", "trainer_init.process_group"),
        (1800, 3600, 0, "effective_training", None),
        (3600, 3900, 1, "scheduling", None),
        (3900, 4800, 1, "wasted_training", "replay"),
        (4800, 7200, 1, "effective_training", None),
        (7200, 7320, 1, "wasted_training", "checkpoint_blocking"),
    ]
    iv = pd.DataFrame(rows, columns=["start", "end", "attempt", "component", "phase"])
    iv["start"] += T0
    iv["end"] += T0
    fails = pd.DataFrame([{"ts": T0 + 3600, "kind": "app_error", "attempt": 0, "inferred": False}])
    return iv, fails


def test_attempt_timeline_draws_attempts_as_rows_in_minutes() -> None:
    iv, fails = _timeline_frames()
    fig = figures.attempt_timeline(iv, fails, submitted_at=T0, ended_at=T0 + 7320)
    bars = {t.name: t for t in fig.data if t.type == "bar"}
    assert set(bars) == {
        "Scheduling",
        "Trainer init",
        "Effective training",
        "wasted: replay",
        "wasted: checkpoint blocking",
    }
    eff = bars["Effective training"]
    assert list(eff.y) == ["attempt 0", "attempt 1"]
    assert list(eff.base) == pytest.approx([30.0, 80.0])
    assert list(eff.x) == pytest.approx([30.0, 40.0])
    assert eff.marker.color == COMPONENT_COLORS["effective_training"]
    replay = bars["wasted: replay"]
    assert replay.marker.pattern.shape == "/"
    assert replay.marker.color == WASTE_COLORS["replay"]
    failure = next(t for t in fig.data if t.name.endswith("failure"))
    # The legend names the kind, in the kind's colour (a red × for app_error).
    assert failure.marker.color == FAILURE_COLORS[failure.name.split()[1]]
    assert list(failure.x) == pytest.approx([60.0])
    assert list(failure.y) == ["attempt 0"]
    assert list(fig.layout.yaxis.categoryarray) == ["attempt 1", "attempt 0"]
    assert "122.0 min" in fig.layout.title.text
    assert not fig.layout.shapes  # a finished job has no "now" line


def test_attempt_rows_name_each_number_and_keep_its_order() -> None:
    """Rows go by attempt number, with the answer's words beside it; a number without words
    from the answer is read alone (1000 is the first requeue, not a thousandth attempt)."""
    rows = [
        (0, 60, None, "scheduling", None),
        (60, 120, 0, "effective_training", None),
        (120, 180, 1, "effective_training", None),
        (180, 240, 999, "effective_training", None),
        (240, 300, 1000, "effective_training", None),
    ]
    iv = pd.DataFrame(rows, columns=["start", "end", "attempt", "component", "phase"])
    iv["attempt"] = iv["attempt"].astype(object).where(iv["attempt"].notna(), None)
    iv[["start", "end"]] += T0
    fig = figures.attempt_timeline(
        iv,
        pd.DataFrame(),
        submitted_at=T0,
        ended_at=T0 + 300,
        labels={1: "in-place restart 1"},
    )
    assert list(fig.layout.yaxis.categoryarray)[::-1] == [
        "job",
        "attempt 0",
        "attempt 1 (in-place restart 1)",
        "attempt 999",
        "attempt 1000 (requeue 1)",
    ]


def test_attempt_timeline_marks_now_on_a_live_job_and_says_when_empty() -> None:
    iv, _ = _timeline_frames()
    fig = figures.attempt_timeline(
        iv, pd.DataFrame(), submitted_at=T0, ended_at=T0 + 7320, provisional=True
    )
    assert len(fig.layout.shapes) == 1 and fig.layout.shapes[0].x0 == pytest.approx(122.0)
    empty = figures.attempt_timeline(iv.iloc[0:0], pd.DataFrame(), submitted_at=T0, ended_at=T0)
    assert not empty.data and "no events" in _annotation_texts(empty)[0]


def test_l2_bars_stack_components_in_hours_with_ett_on_top() -> None:
    jobs = pd.DataFrame(
        [
            {"job_id": "j1", "label": "a", "ett_pct": 60.0, **dict.fromkeys(COMPONENTS, 0.0)},
            {"job_id": "j2", "label": "b", "ett_pct": 90.0, **dict.fromkeys(COMPONENTS, 0.0)},
        ]
    )
    jobs.loc[0, ["effective_training", "pt2_compile", "scheduling"]] = [3600 * 6, 3600 * 3, 3600]
    jobs.loc[1, ["effective_training", "pt2_compile"]] = [3600 * 9, 3600]
    fig = figures.l2_bars(jobs)
    bars = {t.name: t for t in fig.data if t.type == "bar"}
    assert set(bars) == {"Effective training", "PT2 compile", "Scheduling"}
    assert list(bars["PT2 compile"].y) == pytest.approx([3.0, 1.0])
    assert bars["PT2 compile"].marker.color == COMPONENT_COLORS["pt2_compile"]
    assert [row[0] for row in bars["Scheduling"].customdata] == ["j1", "j2"]
    labels = next(t for t in fig.data if t.type == "scatter")
    assert list(labels.text) == ["60.0%", "90.0%"]
    assert list(labels.y) == pytest.approx([10.0, 10.0])
    assert fig.layout.barmode == "stack"


def test_fleet_trend_plots_the_series_and_explains_an_empty_range() -> None:
    series = pd.DataFrame(
        {"bucket": ["2026-05-01", "2026-05-02"], "ett_pct": [80.0, 91.5], "wall_gpu_h": [10, 20]}
    )
    fig = figures.fleet_trend(series)
    assert list(fig.data[0].y) == [80.0, 91.5]
    assert fig.layout.yaxis.range[1] == 100
    empty = figures.fleet_trend(series.iloc[0:0])
    assert "No jobs in this range" in _annotation_texts(empty)[0]


def test_fold_top_n_keeps_totals_and_names_the_rest_other() -> None:
    frame = pd.DataFrame(
        {
            "bucket": ["d1"] * 4 + ["d2"] * 4,
            "owner": ["a", "b", "c", "d"] * 2,
            "gpu_h": [10, 5, 1, 2, 10, 5, 1, 2],
        }
    )
    folded = figures.fold_top_n(frame, "owner", "gpu_h", 2)
    assert set(folded["owner"]) == {"a", "b", "other"}
    assert folded["gpu_h"].sum() == pytest.approx(frame["gpu_h"].sum())
    assert folded[(folded.bucket == "d1") & (folded.owner == "other")]["gpu_h"].item() == 3


def test_lost_stacked_uses_the_component_colours_and_folds_many_keys() -> None:
    rows = [{"bucket": "d1", "component": c, "gpu_h": 1.0 + i} for i, c in enumerate(COMPONENTS)]
    fig = figures.lost_stacked(
        pd.DataFrame(rows), by="component", title="t", colors=COMPONENT_COLORS, top_n=3
    )
    names = [t.name for t in fig.data]
    assert len(names) == 4 and names[-1] == "other"
    assert fig.data[0].marker.color in COMPONENT_COLORS.values()
    many = pd.DataFrame([{"bucket": "d", "owner": f"team{i}", "gpu_h": i + 1} for i in range(40)])
    assert len(figures.lost_stacked(many, by="owner", title="t").data) == figures.DEFAULT_TOP_N + 1


def test_lost_by_owner_stacks_each_team_by_component() -> None:
    frame = pd.DataFrame(
        [
            {"owner": "checkpoint", "component": "wasted_training", "gpu_h": 30.0},
            {"owner": "checkpoint", "component": "trainer_init", "gpu_h": 5.0},
            {"owner": "compiler", "component": "pt2_compile", "gpu_h": 20.0},
            {"owner": "tiny", "component": "shutdown", "gpu_h": 1.0},
        ]
    )
    fig = figures.lost_by_owner(frame, title="t", top_n=2)
    assert sum(sum(t.x) for t in fig.data) == pytest.approx(56.0)
    assert list(fig.layout.yaxis.categoryarray) == ["other", "compiler", "checkpoint"]
    wasted = next(t for t in fig.data if t.name == "Wasted training")
    assert wasted.marker.color == COMPONENT_COLORS["wasted_training"]


def test_nof_per_job_divides_failures_by_jobs_per_bucket() -> None:
    frame = pd.DataFrame(
        [
            {"bucket": "d1", "kind": "preemption", "failures": 3, "jobs": 4},
            {"bucket": "d2", "kind": "preemption", "failures": 1, "jobs": 2},
            {"bucket": "d1", "kind": "app_error", "failures": 2, "jobs": 4},
        ]
    )
    fig = figures.nof_per_job(frame)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["preemption"].y) == pytest.approx([0.75, 0.5])
    assert list(by_name["app_error"].y) == pytest.approx([0.5])
    assert by_name["app_error"].marker.color == FAILURE_COLORS["app_error"]


def test_regressions_show_only_falls_worst_first_with_the_model_to_open() -> None:
    frame = pd.DataFrame(
        {
            "model": ["up", "small", "big"],
            "before_pct": [80.0, 90.0, 90.0],
            "after_pct": [85.0, 88.0, 70.0],
        }
    )
    fig = figures.regressions(frame)
    bar = fig.data[0]
    assert list(bar.y) == ["small", "big"]  # plotly draws the last category on top
    assert list(bar.x) == pytest.approx([-2.0, -20.0])
    assert [row[0] for row in bar.customdata] == ["small", "big"]
    none = figures.regressions(frame.iloc[:1])
    assert "No model regressed" in _annotation_texts(none)[0]


def test_top_models_keeps_the_n_largest_losers() -> None:
    frame = pd.DataFrame(
        {
            "model": [f"m{i}" for i in range(30)],
            "lost_gpu_h": [float(i) for i in range(30)],
            "ett_pct": [80.0] * 30,
        }
    )
    bar = figures.top_models(frame, top_n=5).data[0]
    assert list(bar.y) == ["m25", "m26", "m27", "m28", "m29"]
    assert bar.customdata[-1][0] == "m29"


def test_checkpoint_curve_marks_current_and_optimal_intervals() -> None:
    taus = [60.0 * m for m in (5, 10, 20, 30, 60, 120)]
    curve = pd.DataFrame(
        {
            "tau_s": taus,
            "wtt_pct": [5.0, 3.0, 2.0, 2.2, 3.0, 5.0],
            "utt_pct": [0.5, 1, 2, 3, 6, 12],
            "blocking_pct": [4.5, 2, 0.5, 0.3, 0.1, 0.05],
        }
    )
    fig = figures.checkpoint_curve(curve, current_s=1800.0, optimal_s=1200.0)
    assert sorted(round(s.x0, 6) for s in fig.layout.shapes) == [20.0, 30.0]
    texts = _annotation_texts(fig)
    assert any("current 30 min" in t for t in texts) and any("τ* 20 min" in t for t in texts)
    wtt = next(t for t in fig.data if "WTT" in t.name)
    assert list(wtt.x) == pytest.approx([5, 10, 20, 30, 60, 120])
    assert fig.layout.xaxis.range[1] == pytest.approx(90.0)
    assert (
        "No checkpoint advice"
        in _annotation_texts(
            figures.checkpoint_curve(curve.iloc[0:0], current_s=None, optimal_s=None)
        )[0]
    )


def test_init_critical_path_separates_path_and_hidden_work() -> None:
    spans = pd.DataFrame(
        [
            {"phase": "hardware_setup", "start_s": 0.0, "end_s": 120.0, "hidden": False},
            {"phase": "pt2_compile", "start_s": 120.0, "end_s": 1320.0, "hidden": False},
            {"phase": "trainer_init.first_batch", "start_s": 120.0, "end_s": 720.0, "hidden": True},
        ]
    )
    fig = figures.init_critical_path(spans, title="attempt 0")
    on_path, hidden, *swatches = fig.data
    assert [s.name for s in swatches] == [
        "solid: on the critical path",
        "hatched: hidden behind other work",
    ]
    assert not on_path.showlegend and not hidden.showlegend
    assert list(on_path.y) == ["hardware_setup", "pt2_compile"]
    assert list(on_path.x) == pytest.approx([2.0, 20.0])
    assert list(hidden.base) == pytest.approx([2.0]) and hidden.marker.pattern.shape == "x"
    assert hidden.marker.color[0] == COMPONENT_COLORS["trainer_init"]


def test_phase_hidden_work_is_total_minus_exposed() -> None:
    phases = pd.DataFrame(
        {
            "phase": ["pt2_compile", "trainer_init.first_batch"],
            "total_s": [1200.0, 600.0],
            "exposed_s": [1200.0, 0.0],
        }
    )
    fig = figures.phase_hidden_work(phases)
    exposed, hidden, *_swatches = fig.data
    assert dict(zip(hidden.y, hidden.x, strict=True)) == pytest.approx(
        {"pt2_compile": 0.0, "trainer_init.first_batch": 10.0}
    )
    assert dict(zip(exposed.y, exposed.x, strict=True))["pt2_compile"] == pytest.approx(20.0)


def test_lost_parts_bars_put_pairs_side_by_side_in_minutes() -> None:
    pairs = pd.DataFrame(
        [
            {"pair": "A", "variant": "baseline", "job_id": "b", "ett_pct": 60.0, "tts_s": 1800,
             "recovery_s": 3600, "checkpoint_s": 600, "shutdown_s": 1200},
            {"pair": "A", "variant": "optimized", "job_id": "o", "ett_pct": 85.0, "tts_s": 900,
             "recovery_s": 1200, "checkpoint_s": 120, "shutdown_s": 60},
        ]
    )  # fmt: skip
    fig = figures.lost_parts_bars(pairs)
    tts = next(t for t in fig.data if t.name == "TTS")
    assert list(tts.y) == pytest.approx([30.0, 15.0])
    assert [list(level) for level in tts.x] == [["A", "A"], ["baseline", "optimized"]]
    labels = next(t for t in fig.data if t.type == "scatter")
    assert list(labels.text) == ["60.0%", "85.0%"]
    assert list(labels.y) == pytest.approx([120.0, 38.0])


def test_attribution_bars_show_shares_and_the_cascade_bound() -> None:
    fig = figures.attribution_bars(
        {"tts": 0.08, "recovery": 0.58, "checkpoint": 0.11, "shutdown": 0.23}, 0.248
    )
    bars, bound = fig.data
    assert list(bars.x) == pytest.approx([8.0, 58.0, 11.0, 23.0])
    assert list(bound.x) == pytest.approx([24.8])


def test_level1_weights_tts_by_gpus_and_ttr_by_failures() -> None:
    from dashboard.data import _weighted_level1

    jobs = pd.DataFrame(
        {
            "gpus": [8, 2, None],
            "tts_s": [600.0, 60.0, 9999.0],
            "recovery_s": [1200.0, 0.0, 9999.0],
            "nof": [2, 0, 5],
        }
    )
    out = _weighted_level1(jobs, pd.Series(["d1", "d1", "d1"]))
    row = out.iloc[0]
    # The job of unknown size counts as 1 GPU (docs/METRICS.md), as everywhere else.
    assert row["tts_min"] == pytest.approx((8 * 600 + 2 * 60 + 9999) / 11 / 60)
    assert row["ttr_min"] == pytest.approx((8 * 1200 + 9999) / (8 * 2 + 5) / 60)
    assert row["nof"] == pytest.approx((8 * 2 + 5) / 11)
    fig = figures.level1_over_time(out, title="t")
    assert [t.name for t in fig.data] == ["TTS", "TTR", "NoF"]


def test_a_running_jobs_live_tail_is_drawn_in_progress_not_unattributed() -> None:
    t0 = 1_000_000.0
    intervals = pd.DataFrame(
        {
            "start": [t0, t0 + 600],
            "end": [t0 + 600, t0 + 900],
            "attempt": [0, 0],
            "component": ["effective_training", "unattributed"],
            "phase": [None, None],
        }
    )
    live = figures.attempt_timeline(
        intervals, pd.DataFrame(), submitted_at=t0, ended_at=t0 + 900, provisional=True
    )
    names = [t.name for t in live.data]
    assert "in progress (provisional)" in names and "Unattributed" not in names
    tail = next(t for t in live.data if t.name == "in progress (provisional)")
    assert tail.marker.pattern.shape == "/" and list(tail.x) == pytest.approx([5.0])
    done = figures.attempt_timeline(
        intervals, pd.DataFrame(), submitted_at=t0, ended_at=t0 + 900, provisional=False
    )
    assert "Unattributed" in [t.name for t in done.data]


def test_partial_buckets_are_drawn_hollow_on_a_dotted_line() -> None:
    series = pd.DataFrame(
        {
            "bucket": ["2026-05-01", "2026-05-02", "2026-05-03"],
            "ett_pct": [80.0, 91.5, 60.0],
            "wall_gpu_h": [10, 20, 3],
            "partial": [False, False, True],
        }
    )
    fig = figures.fleet_trend(series)
    solid, dotted, hollow = fig.data
    assert list(solid.y) == [80.0, 91.5, None]  # the solid line stops before the partial day
    assert dotted.line.dash == "dot" and list(dotted.y) == [80.0, 91.5, 60.0]
    assert list(hollow.y) == [60.0] and hollow.marker.symbol == "circle-open"
    jobs = pd.DataFrame(
        {
            "job_id": ["j"],
            "submitted_at": pd.to_datetime(["2026-05-02"]),
            "ett_pct": [90.0],
            "provisional": [False],
        }
    )
    model = figures.model_ett_over_time(jobs, series=series)
    assert [t.name for t in model.data] == [
        "ETT% per day (GPU-weighted)",
        "with partial buckets",
        "partial bucket",
        "job",
    ]
