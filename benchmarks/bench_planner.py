"""Back-test of the ETT planner on the demo fleet (docs/PLANNER.md, "Validation").

Fit each model on the first four of the fleet's six months and predict the ETT% of its jobs in
the last two; report the mean and worst absolute error per model. Then the paired jobs: the
what-if built from each baseline's fit and its optimized twin's changes, against the twin.

    python benchmarks/bench_planner.py              # the `ett demo` fleet, via SQLite (~1 min)
    python benchmarks/bench_planner.py --in-memory  # the same jobs through the engine only
    python benchmarks/bench_planner.py --json out.json

`tests/backend/planner/test_backtest.py` runs a small version in `make test`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from backend.demo.backtest import (
    BacktestReport,
    demo_observations,
    demo_pairs,
    pair_backtest,
    split_backtest,
)
from backend.demo.fleet import REGRESSION, FleetSpec
from backend.planner.fit import (
    DAY_S,
    DEFAULT_HALF_LIFE_DAYS,
    ESTIMATORS,
    JobObservation,
    fit_inputs,
)
from backend.planner.model import predict

MAE_TARGET_PP = 2.0
PAIR_TARGET_PP = 3.0


def stored_observations(spec: FleetSpec) -> list[JobObservation]:
    """Load the fleet into a fresh SQLite database through ingest and the engine, read it back."""
    from backend import migrate
    from backend.config import Settings
    from backend.db import Database
    from backend.demo import loader
    from backend.demo.fleet import fleet_events
    from backend.planner.service import load_observations

    with tempfile.TemporaryDirectory(prefix="ett-bench-planner-") as home:
        url = f"sqlite:///{Path(home) / 'ett.db'}"
        migrate.upgrade(url)
        database = Database(url)
        settings = Settings(home=Path(home), database_url=url, recompute_mode="inline")
        loader.load_in_process(database, settings, fleet_events(spec), now=spec.now, progress=False)
        with database.session() as s:
            by_model = load_observations(db_session=s, start=spec.start - DAY_S, end=spec.now + 1)
        database.dispose()
    return [j for jobs in by_model.values() for j in jobs]


def _report(r: BacktestReport) -> dict[str, Any]:
    worst = r.worst
    return {
        "models": len(r.models),
        "mae_pp": r.mae_pp,
        "bias_pp": statistics.fmean(m.predicted_pct - m.measured_pct for m in r.models),
        "worst_model": worst.model if worst else None,
        "worst_abs_error_pp": worst.abs_error_pp if worst else None,
        "per_model": [
            {
                "model": m.model,
                "fit_jobs": m.fit_jobs,
                "test_jobs": m.test_jobs,
                "predicted_pct": m.predicted_pct,
                "measured_pct": m.measured_pct,
                "abs_error_pp": m.abs_error_pp,
            }
            for m in r.models
        ],
    }


def term_gaps(
    fleet: list[JobObservation],
    start: float,
    split: float,
    end: float,
    half_life: float,
    estimator: str = "level",
) -> dict[str, float]:
    """Mean over models of (predicted - test-window in-sample) minutes per job, by term."""
    by_model: dict[str, list[JobObservation]] = defaultdict(list)
    for j in fleet:
        if j.model:
            by_model[j.model].append(j)
    gaps: dict[str, list[float]] = defaultdict(list)
    for jobs in by_model.values():
        past = [j for j in jobs if j.submitted_at < split]
        future = [j for j in jobs if j.submitted_at >= split]
        if len(past) < 3 or len(future) < 3:
            continue
        a = fit_inputs(
            past,
            end=split,
            window_days=(split - start) / DAY_S,
            half_life_days=half_life,
            estimator=estimator,
        ).inputs
        b = fit_inputs(
            future, end=end, window_days=1.0, half_life_days=None, estimator="mean"
        ).inputs
        assert a is not None and b is not None
        pa, pb = predict(a), predict(b)
        for term in set(pa.lost_s) | set(pb.lost_s):
            gaps[term].append((pa.lost_s.get(term, 0.0) - pb.lost_s.get(term, 0.0)) / 60.0)
    means = {t: statistics.fmean(v) for t, v in gaps.items()}
    return dict(sorted(means.items(), key=lambda kv: -abs(kv[1])))


def main() -> None:
    """Run the back-test and print (and optionally write) its figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seed", type=int, default=7, help="demo fleet seed (default 7)")
    ap.add_argument("--models", type=int, default=30, help="fleet models (default 30, `ett demo`)")
    ap.add_argument("--days", type=float, default=182.0, help="days of history (default 182)")
    ap.add_argument(
        "--half-life", type=float, default=DEFAULT_HALF_LIFE_DAYS, help="fit half-life, days"
    )
    ap.add_argument(
        "--estimator",
        choices=ESTIMATORS,
        default="level",
        help="fit estimator (default level; recency uses --half-life)",
    )
    ap.add_argument(
        "--in-memory", action="store_true", help="skip the database: engine results in memory"
    )
    ap.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args()

    spec = FleetSpec(seed=args.seed, models=args.models, days=args.days, now=1_800_000_000.0)
    t0 = time.perf_counter()
    jobs = demo_observations(spec) if args.in_memory else stored_observations(spec)
    load_s = time.perf_counter() - t0
    fleet = [j for j in jobs if j.model and not j.model.startswith("model-")]
    span = spec.days * DAY_S
    split = spec.start + span * 4.0 / 6.0
    out: dict[str, Any] = {
        "fleet": {
            "seed": spec.seed,
            "models": spec.models,
            "days": spec.days,
            "jobs": len(jobs),
            "source": "in-memory engine" if args.in_memory else "SQLite via ingest + engine",
            "load_s": load_s,
        },
        "estimator": args.estimator,
        "half_life_days": args.half_life,
    }
    main_report = split_backtest(
        fleet,
        start=spec.start,
        split=split,
        end=spec.now,
        half_life_days=args.half_life,
        estimator=args.estimator,
    )
    out["four_of_six_months"] = _report(main_report)
    out["four_of_six_months"]["term_gaps_min_per_job"] = term_gaps(
        fleet, spec.start, split, spec.now, args.half_life, args.estimator
    )
    sensitivity = []
    for months in (4.0, 4.5, 5.0):
        for est, hl in (("level", None), ("recency", 7.0), ("recency", 14.0), ("recency", 30.0)):
            r = split_backtest(
                fleet,
                start=spec.start,
                split=spec.start + span * months / 6.0,
                end=spec.now,
                half_life_days=hl,
                estimator=est,
            )
            sensitivity.append(
                {"fit_months": months, "estimator": est, "half_life_days": hl, **_report(r)}
            )
            del sensitivity[-1]["per_model"]
    out["sensitivity"] = sensitivity
    out["regression_share"] = list(REGRESSION)
    pairs = demo_pairs(jobs)
    out["pairs"] = {
        mode: [
            {
                "model": p.pair,
                "baseline_pct": p.baseline_pct,
                "predicted_pct": p.predicted_pct,
                "optimized_pct": p.optimized_pct,
                "abs_error_pp": p.abs_error_pp,
            }
            for p in pair_backtest(pairs, replay=mode)
        ]
        for mode in ("measured", "utt")
    }

    m = out["four_of_six_months"]
    print(
        f"demo fleet: {spec.models} models + 6 pairs, {spec.days:g} days, {len(jobs)} jobs "
        f"({out['fleet']['source']}, {load_s:.1f} s)"
    )
    print(
        f"fit 4 of 6 months, predict the last 2 ({args.estimator} estimator): "
        f"{m['models']} models, MAE {m['mae_pp']:.2f} pp (target < {MAE_TARGET_PP}), bias "
        f"{m['bias_pp']:+.2f} pp, worst {m['worst_model']} {m['worst_abs_error_pp']:.2f} pp"
    )
    print("  largest term gaps (predicted - next two months, min per job):")
    for term, gap in list(m["term_gaps_min_per_job"].items())[:5]:
        print(f"    {term:28s} {gap:+7.2f}")
    print("sensitivity (fit months x estimator): MAE / worst")
    for s in sensitivity:
        how = "level" if s["half_life_days"] is None else f"recency {s['half_life_days']:g} d"
        print(
            f"  {s['fit_months']:.1f} months, {how:14s}: "
            f"{s['mae_pp']:.2f} / {s['worst_abs_error_pp']:.2f} pp (bias {s['bias_pp']:+.2f})"
        )
    for mode, rows in out["pairs"].items():
        print(f"pairs, replay {mode}: (target within {PAIR_TARGET_PP} pp)")
        for p in rows:
            print(
                f"  {p['model']}: baseline {p['baseline_pct']:.1f}%, predicted "
                f"{p['predicted_pct']:.2f}%, optimized {p['optimized_pct']:.2f}% "
                f"(error {p['abs_error_pp']:.2f} pp)"
            )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
