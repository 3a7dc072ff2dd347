"""Fleet analytics on Postgres: day rollups vs scanning the per-job results, same answers, one run.

Generates a fleet (default 100,000 jobs of 500 models over 180 days, ~15 attributed intervals a
job) straight into jobs / job_results / job_intervals with COPY, derives the fleet tables the way
`backend.fleet.rollups.refresh_job_rollups` does (per-job day split, then one GROUP BY for the
rollup: the benchmark's shortcut for speed), then times, median of N runs each:

1. the 180-day fleet series (`fleet_ett`, bucket=day),
2. lost GPU-hours by owner over 180 days (`lost_gpu_hours(by="owner")`),
3. a model page (`model_page`, 180 days),

each against the same answer computed by scanning job_intervals x job_results (split at UTC
midnights in SQL), and checks that the two answers agree. It also times the incremental path:
`refresh_job_rollups` over 2,000 changed jobs, and checks the rollup still equals a rebuild.

The 1 M-job year (about 15 minutes here, 8 of them generating; --keep reuses the fleet):

    python benchmarks/bench_fleet.py --jobs 1000000 --models 500 --days 365 --runs 7 \
        --scan-runs 1 --keep ett_bench_1m
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import text, update

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.db import Database  # noqa: E402
from backend.ett.catalogue import COMPONENTS, FAILURE_KINDS  # noqa: E402
from backend.ett.models import JobResult  # noqa: E402
from backend.fleet import rollups  # noqa: E402
from backend.fleet.days import DAY_S, bucket_start, split_by_day  # noqa: E402
from backend.metrics import fleet  # noqa: E402
from backend.owners import service as owners_service  # noqa: E402
from backend.results import read as results_read  # noqa: E402
from backend.workloads import service as workloads_service  # noqa: E402
from benchmarks._pg import kept_postgres, scratch_postgres  # noqa: E402

END = 1_790_000_000.0 - (1_790_000_000.0 % DAY_S)  # a UTC midnight in 2026-09
TEAMS = [f"team-{i:02d}" for i in range(20)]
EFFECTIVE = "effective_training"


# ---- generation -----------------------------------------------------------------------------


def job_timeline(rng: np.random.Generator, t0: float) -> tuple[list[tuple], list[dict], dict]:
    """One job's attributed intervals (start, end, attempt, component, phase), failures, L1."""
    ivs: list[tuple] = []
    failures: list[dict] = []
    t = t0
    l1 = {"tts_s": 0.0, "recovery_s": 0.0, "in_loop_waste_s": 0.0, "final_shutdown_s": 0.0}
    n_fail = int(rng.random() < 0.45) + int(rng.random() < 0.15)
    cursor = 0.0
    fail_ts: float | None = None
    for attempt in range(n_fail + 1):
        start_of_overhead = t
        for comp, phase, mean in (
            ("scheduling", "scheduling", 900.0),
            ("hardware_setup", "hardware_setup", 240.0),
            ("trainer_init", "trainer_init.process_group", 200.0),
            ("trainer_init", "trainer_init.first_batch", 240.0),
            ("trainer_init", "checkpoint_restore", 120.0 if attempt else 0.0),
            ("pt2_compile", "pt2_compile", 600.0 if attempt == 0 else 180.0),
        ):
            if mean <= 0:
                continue
            d = float(rng.exponential(mean)) + 10.0
            ivs.append((t, t + d, attempt, comp, phase))
            t += d
        if attempt:
            replay = float(rng.uniform(300, 1800))
            ivs.append((t, t + replay, attempt, "wasted_training", "replay"))
            t += replay
        if attempt == 0:
            l1["tts_s"] = t - t0
        else:
            assert fail_ts is not None
            l1["recovery_s"] += t - fail_ts
        del start_of_overhead
        train = float(rng.uniform(2, 8)) * 3600.0
        seg_end = t + train
        while t < seg_end:
            step = min(7200.0, seg_end - t)
            ivs.append((t, t + step, attempt, EFFECTIVE, None))
            cursor += step
            t += step
            if t < seg_end:
                blk = float(rng.uniform(15, 45))
                ivs.append((t, t + blk, attempt, "wasted_training", "checkpoint_blocking"))
                l1["in_loop_waste_s"] += blk
                t += blk
        if attempt < n_fail:
            kind = str(rng.choice(FAILURE_KINDS, p=[0.45, 0.3, 0.15, 0.05, 0.05]))
            failures.append({"ts": t, "kind": kind, "attempt": attempt, "inferred": False})
            fail_ts = t
    shut = float(rng.exponential(900.0)) + 30.0
    ivs.append((t, t + shut, n_fail, "shutdown", "shutdown"))
    l1["final_shutdown_s"] = shut
    return ivs, failures, l1


def _line(*values: Any) -> str:
    """One row in COPY text format (None as \\N); our values hold no tabs or newlines."""
    return "\t".join("\\N" if v is None else str(v) for v in values) + "\n"


COPY_COLUMNS = {
    "jobs": "job_id, model, gpus, labels, config, submitted_at, ended_at, status, dirty,"
    " last_event_at, created_at, updated_at",
    "job_results": "job_id, computed_at, model, gpus, status, provisional, submitted_at,"
    " ended_at, e2e_s, effective_s, ett_pct, gpu_hours_lost, nof, tts_s, recovery_s, result",
    "job_intervals": 'job_id, attempt, start, "end", component, phase',
    "fleet_job_days": "job_id, day, component, phase, model, wall_s, gpu_s",
    "fleet_failures": "job_id, idx, model, ts, day, kind, inferred, attempt",
    "fleet_jobs": "job_id, model, day, gpus, attempts, attempts_excl_preemption, nof",
}
CHUNK_JOBS = 10_000


def generate(db: Database, n_jobs: int, n_models: int, days: int, seed: int) -> dict[str, Any]:
    """COPY the fleet into jobs, job_results, job_intervals, fleet_* tables; return a summary.

    Rows are built in memory a chunk of jobs at a time and each COPY is sent whole, so no COPY
    stays open while Python works (an open COPY holds up other sessions' DROP DATABASE).
    """
    rng = np.random.default_rng(seed)
    models = [f"model-{i:03d}" for i in range(n_models)]
    model_gpus = {m: int(rng.choice([8, 16, 32, 64, 128, 256, 512])) for m in models}
    model_owner = {m: TEAMS[i % len(TEAMS)] for i, m in enumerate(models)}
    # Zipf-like popularity so some model pages are busy.
    weights = 1.0 / np.arange(1, n_models + 1) ** 0.6
    picks = rng.choice(n_models, size=n_jobs, p=weights / weights.sum())
    starts = rng.uniform(END - days * DAY_S, END - DAY_S, size=n_jobs)
    now = time.time()
    counts: dict[str, int] = defaultdict(int)
    raw = db.engine.raw_connection()
    try:
        cur = raw.cursor()
        with cur.copy("COPY models (name, owner, tier, labels, created_at) FROM STDIN") as cp:
            cp.write("".join(_line(m, model_owner[m], "t1", "{}", now) for m in models))
        raw.commit()
        for lo in range(0, n_jobs, CHUNK_JOBS):
            lines: dict[str, list[str]] = {t: [] for t in COPY_COLUMNS}
            for i in range(lo, min(n_jobs, lo + CHUNK_JOBS)):
                _job_rows(rng, i, models[picks[i]], float(starts[i]), model_gpus, now, lines)
            for table, cols in COPY_COLUMNS.items():
                with cur.copy(f"COPY {table} ({cols}) FROM STDIN") as cp:
                    cp.write("".join(lines[table]))
                counts[table] += len(lines[table])
            raw.commit()
        cur.execute(
            "INSERT INTO fleet_day_rollups (day, model, component, phase, wall_s, gpu_s) "
            "SELECT day, model, component, phase, sum(wall_s), sum(gpu_s) FROM fleet_job_days "
            "GROUP BY day, model, component, phase"
        )
        counts["fleet_day_rollups"] = cur.rowcount
        cur.execute(
            "INSERT INTO fleet_day_totals (day, component, phase, wall_s, gpu_s) "
            "SELECT day, component, phase, sum(wall_s), sum(gpu_s) FROM fleet_day_rollups "
            "GROUP BY day, component, phase"
        )
        counts["fleet_day_totals"] = cur.rowcount
        raw.commit()
        cur.execute("ANALYZE")
        raw.commit()
    finally:
        raw.close()
    busiest = models[int(np.bincount(picks).argmax())]
    return {"jobs": n_jobs, "models": n_models, "busiest_model": busiest, **counts}


def _job_rows(
    rng: np.random.Generator,
    i: int,
    model: str,
    t0: float,
    model_gpus: dict[str, int],
    now: float,
    lines: dict[str, list[str]],
) -> None:
    """Append one job's rows (COPY text lines) to every table's list."""
    job_id = f"job-{i:07d}"
    gpus = model_gpus[model]
    ivs, fails, l1 = job_timeline(rng, t0)
    sub, end = ivs[0][0], ivs[-1][1]
    comps = dict.fromkeys(COMPONENTS, 0.0)
    wasted = {"replay": 0.0, "checkpoint_blocking": 0.0, "stalled": 0.0}
    for s, e, _a, c, p in ivs:
        comps[c] += e - s
        if c == "wasted_training":
            wasted[p] += e - s
    e2e, eff = end - sub, comps[EFFECTIVE]
    variant = "baseline" if i % 2 else "optimized"
    lines["jobs"].append(
        _line(
            job_id,
            model,
            gpus,
            json.dumps({"variant": variant}),
            "{}",
            sub,
            end,
            "succeeded",
            "f",
            end,
            now,
            now,
        )
    )
    result = {
        "components": comps,
        "wasted": wasted,
        "e2e_s": e2e,
        "effective_s": eff,
        "l1": {**l1, "nof": len(fails), "failures": fails},
        "attempts": [{"attempt": a} for a in range(len(fails) + 1)],
    }
    lines["job_results"].append(
        _line(
            job_id,
            now,
            model,
            gpus,
            "succeeded",
            "f",
            sub,
            end,
            e2e,
            eff,
            eff / e2e * 100,
            (e2e - eff) * gpus / 3600,
            len(fails),
            l1["tts_s"],
            l1["recovery_s"],
            json.dumps(result),
        )
    )
    for s, e, a, c, p in ivs:
        lines["job_intervals"].append(_line(job_id, a, s, e, c, p))
    for (day, c, p), wall in split_by_day((s, e, c, p) for s, e, _a, c, p in ivs).items():
        lines["fleet_job_days"].append(_line(job_id, day, c, p or "", model, wall, wall * gpus))
    for k, f in enumerate(fails):
        lines["fleet_failures"].append(
            _line(
                job_id, k, model, f["ts"], f["ts"] - f["ts"] % DAY_S, f["kind"], "f", f["attempt"]
            )
        )
    attempts, excl, nof = rollups.job_facts(result["l1"], result["attempts"])
    lines["fleet_jobs"].append(_line(job_id, model, sub - sub % DAY_S, gpus, attempts, excl, nof))


# ---- the same answers by scanning per-job results --------------------------------------------

SCAN_SQL = """
SELECT {select},
       sum((least(i."end", d.day + 86400) - greatest(i.start, d.day)) * r.gpus) AS gpu_s
FROM job_intervals i
JOIN job_results r ON r.job_id = i.job_id
CROSS JOIN LATERAL (
    SELECT g.n * 86400.0 AS day
    FROM generate_series(floor(i.start / 86400)::bigint, floor(i."end" / 86400)::bigint) AS g(n)
) AS d
WHERE i."end" > :lo AND i.start < :hi AND d.day >= :lo AND d.day < :hi
  AND least(i."end", d.day + 86400) > greatest(i.start, d.day) {model_clause}
GROUP BY {group}
"""
GROUPS = {
    "day_component": ("d.day, i.component", "d.day, i.component"),
    "component_phase": ("i.component, coalesce(i.phase, '')", "i.component, i.phase"),
}


def scan(s: Any, lo: float, hi: float, group: str, model: str | None = None) -> list[tuple]:
    """Sum GPU-seconds from job_intervals x job_results, split at UTC midnights in SQL."""
    select_cols, group_cols = GROUPS[group]
    sql = SCAN_SQL.format(
        select=select_cols,
        group=group_cols,
        model_clause="AND r.model = :model" if model else "",
    )
    params: dict[str, Any] = {"lo": lo, "hi": hi}
    if model:
        params["model"] = model
    return [tuple(r) for r in s.execute(text(sql), params)]


def scan_series(s: Any, lo: float, hi: float, model: str | None = None) -> dict[float, dict]:
    """Per-day components (GPU-seconds) by scanning."""
    per: dict[float, dict[str, float]] = defaultdict(lambda: dict.fromkeys(COMPONENTS, 0.0))
    for day, comp, gpu in scan(s, lo, hi, "day_component", model):
        per[float(day)][comp] += gpu
    return per


def scan_lost_by_owner(
    s: Any, settings: Any, lo: float, hi: float, model: str | None = None
) -> dict[str, float]:
    """Lost GPU-hours by owner by scanning."""
    res = owners_service.resolver(db_session=s, settings=settings)
    out: dict[str, float] = defaultdict(float)
    for comp, phase, gpu in scan(s, lo, hi, "component_phase", model):
        if comp != EFFECTIVE:
            out[res.owner(comp, phase or None)] += gpu / 3600.0
    return dict(out)


def scan_model_page(s: Any, model: str, lo: float, hi: float) -> dict[str, Any]:
    """The model page's numbers by scanning (the jobs list is the same query either way)."""
    series = scan_series(s, lo, hi, model)
    before = scan_series(s, lo - (hi - lo), lo, model)
    total = dict.fromkeys(COMPONENTS, 0.0)
    for comps in series.values():
        for c, v in comps.items():
            total[c] += v
    prev = sum(sum(c.values()) for c in before.values())
    prev_eff = sum(c[EFFECTIVE] for c in before.values())
    wall = sum(total.values())
    return {
        "ett_pct": total[EFFECTIVE] / wall * 100 if wall else None,
        "previous_ett_pct": prev_eff / prev * 100 if prev else None,
        "series": series,
        "lost_by_owner": scan_lost_by_owner(s, None, lo, hi, model),
    }


# ---- the database ---------------------------------------------------------------------------


@contextmanager
def _database(args: argparse.Namespace) -> Iterator[Database]:
    """The benchmark's database: a scratch one dropped afterwards, or the kept one of --keep."""
    ctx = kept_postgres(args.keep) if args.keep else scratch_postgres(args.db_prefix)
    with ctx as url:
        db = Database(url)
        try:
            yield db
        finally:
            db.dispose()


def _fleet(db: Database, args: argparse.Namespace) -> dict[str, Any]:
    """Generate the fleet, or reuse the kept database's if it was made with the same arguments."""
    wanted = {k: getattr(args, k) for k in ("jobs", "models", "days", "seed")}
    with db.engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS bench_fleet_meta (summary text)"))
        kept = conn.execute(text("SELECT summary FROM bench_fleet_meta")).scalar()
        has_jobs = conn.execute(text("SELECT EXISTS (SELECT 1 FROM jobs)")).scalar()
    if kept is not None:
        summary = json.loads(kept)
        if summary.get("args") != wanted:
            sys.exit(f"--keep {args.keep}: made with {summary.get('args')}, not {wanted}; drop it")
        print(f"reusing {args.keep}: {json.dumps(summary)}", flush=True)
        return summary
    if has_jobs:
        sys.exit("the database holds jobs the benchmark did not generate; use another name")
    t = time.perf_counter()
    summary = {"args": wanted, **generate(db, args.jobs, args.models, args.days, args.seed)}
    print(f"generated in {time.perf_counter() - t:.1f} s: {json.dumps(summary)}", flush=True)
    if args.keep:
        with db.engine.begin() as conn:
            conn.execute(
                text("INSERT INTO bench_fleet_meta VALUES (:s)"), {"s": json.dumps(summary)}
            )
    return summary


# ---- timing ---------------------------------------------------------------------------------


def median_ms(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    """Median wall time of `runs` calls after one warm-up, and the last answer."""
    answer = fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        answer = fn()
        times.append((time.perf_counter() - t) * 1000.0)
    return statistics.median(times), answer


def close(a: float | None, b: float | None, rel: float = 1e-6) -> bool:
    """Equal within a relative tolerance (None equals None)."""
    if a is None or b is None:
        return a is b
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


def main() -> None:
    """Generate, time, compare, print a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--models", type=int, default=500)
    ap.add_argument("--days", type=int, default=180)
    ap.add_argument("--runs", type=int, default=11, help="timed runs of each rollup query")
    ap.add_argument("--scan-runs", type=int, default=3, help="timed runs of each scan")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--db-prefix", default="ett_bench_fleet", help="scratch database name prefix")
    ap.add_argument(
        "--keep",
        metavar="DBNAME",
        help="generate into this database once and keep it; a later run with the same name and"
        " fleet arguments reuses it (for a 1 M-job fleet, whose generation takes ~8 minutes here)",
    )
    args = ap.parse_args()

    with _database(args) as db:
        summary = _fleet(db, args)
        lo, hi = END - args.days * DAY_S, END
        model = summary["busiest_model"]
        rows: list[tuple[str, float, float]] = []
        with db.session() as s:
            ms_r, series = median_ms(
                lambda: fleet.fleet_ett(db_session=s, start=lo, end=hi, bucket="day"), args.runs
            )
            ms_s, scanned = median_ms(lambda: scan_series(s, lo, hi), args.scan_runs)
            for p in series["series"]:
                comps = scanned.get(p["bucket"], dict.fromkeys(COMPONENTS, 0.0))
                for c in COMPONENTS:
                    assert close(p["components_gpu_h"][c], comps[c] / 3600.0), (p["bucket"], c)
            rows.append((f"fleet series, {args.days} days by day", ms_r, ms_s))

            if args.days >= 365:
                # A year by ISO week: the scan is day-grained; fold its days into weeks.
                ms_r, weekly = median_ms(
                    lambda: fleet.fleet_ett(db_session=s, start=lo, end=hi, bucket="week"),
                    args.runs,
                )
                ms_s, scanned = median_ms(lambda: scan_series(s, lo, hi), args.scan_runs)
                weeks: dict[float, float] = defaultdict(float)
                for day, comps in scanned.items():
                    weeks[bucket_start(day, "week")] += comps[EFFECTIVE]
                for p in weekly["series"]:
                    got = p["components_gpu_h"][EFFECTIVE]
                    assert close(got, weeks.get(p["bucket"], 0.0) / 3600.0), p["bucket"]
                rows.append((f"fleet series, {args.days} days by week", ms_r, ms_s))

            ms_r, lost = median_ms(
                lambda: fleet.lost_gpu_hours(
                    db_session=s, settings=None, start=lo, end=hi, by="owner"
                ),
                args.runs,
            )
            ms_s, lost_scan = median_ms(lambda: scan_lost_by_owner(s, None, lo, hi), args.scan_runs)
            assert {r["owner"] for r in lost} == set(lost_scan)
            for r in lost:
                assert close(r["gpu_h"], lost_scan[r["owner"]]), r
            rows.append((f"lost GPU-hours by owner, {args.days} days", ms_r, ms_s))

            ms_r, page = median_ms(
                lambda: workloads_service.model_page(db_session=s, model=model, start=lo, end=hi),
                args.runs,
            )
            ms_s, page_scan = median_ms(lambda: scan_model_page(s, model, lo, hi), args.scan_runs)
            assert close(page["ett_pct"], page_scan["ett_pct"])
            assert close(page["previous_ett_pct"], page_scan["previous_ett_pct"])
            for r in page["lost_by_owner"]:
                assert close(r["gpu_h"], page_scan["lost_by_owner"][r["owner"]])
            rows.append((f"model page ({model}, {page['job_count']} jobs)", ms_r, ms_s))

            # The jobs page: newest first over the range, one page of 50 and the total; and a
            # search by job id prefix. Checked against plain SQL; no rollup is involved.
            ms_list, (page_rows, total) = median_ms(
                lambda: results_read.list_jobs(db_session=s, start=lo, end=hi), args.runs
            )
            want_total, want_ids = s.execute(
                text(
                    "SELECT (SELECT count(*) FROM job_results WHERE ended_at >= :lo"
                    " AND submitted_at < :hi), (SELECT array_agg(job_id) FROM (SELECT job_id"
                    " FROM job_results WHERE ended_at >= :lo AND submitted_at < :hi"
                    " ORDER BY submitted_at DESC, job_id LIMIT 50) p)"
                ),
                {"lo": lo, "hi": hi},
            ).one()
            assert total == want_total and [r["job_id"] for r in page_rows] == list(want_ids)
            prefix = f"job-{args.jobs // 2:07d}"[:-2]
            ms_search, (found, n_found) = median_ms(
                lambda: results_read.list_jobs(db_session=s, search=prefix), args.runs
            )
            assert n_found >= 1 and all(r["job_id"].startswith(prefix) for r in found)

            # Incremental path: 2,000 jobs change (GPU count doubled), refresh, compare.
            ids = [f"job-{i:07d}" for i in range(0, min(args.jobs, 2000))]
            s.execute(
                update(JobResult).where(JobResult.job_id.in_(ids)).values(gpus=JobResult.gpus * 2)
            )
            t = time.perf_counter()
            rollups.refresh_job_rollups(db_session=s, job_ids=ids)
            s.flush()
            refresh_s = time.perf_counter() - t
            drift = s.execute(
                text(
                    "SELECT count(*) FROM fleet_day_rollups r FULL JOIN ("
                    " SELECT day, model, component, phase, sum(gpu_s) AS g FROM fleet_job_days"
                    " GROUP BY 1, 2, 3, 4) j USING (day, model, component, phase)"
                    " WHERE abs(coalesce(r.gpu_s, 0) - coalesce(j.g, 0)) > 1e-6 * greatest(1,"
                    " abs(coalesce(j.g, 0)))"
                )
            ).scalar_one()
            assert drift == 0, f"{drift} rollup rows differ from a rebuild"
            drift = s.execute(
                text(
                    "SELECT count(*) FROM fleet_day_totals t FULL JOIN ("
                    " SELECT day, component, phase, sum(gpu_s) AS g FROM fleet_job_days"
                    " GROUP BY 1, 2, 3) j USING (day, component, phase)"
                    " WHERE abs(coalesce(t.gpu_s, 0) - coalesce(j.g, 0)) > 1e-6 * greatest(1,"
                    " abs(coalesce(j.g, 0)))"
                )
            ).scalar_one()
            assert drift == 0, f"{drift} totals rows differ from a rebuild"
            s.rollback()  # a kept fleet stays as generated

    print()
    print(
        f"| query ({args.jobs:,} jobs, {args.models} models, Postgres) | rollups ms | "
        "scan ms | scan / rollups |"
    )
    print("|---|---|---|---|")
    for name, r, s_ in rows:
        print(f"| {name} | {r:.1f} | {s_:.1f} | {s_ / r:.0f}x |")
    print()
    print(
        f"jobs list, newest first over {args.days} days (page of 50 of {total:,}):"
        f" {ms_list:.1f} ms; search by job id prefix {prefix!r} ({n_found} jobs):"
        f" {ms_search:.1f} ms (medians of {args.runs})"
    )
    print(
        f"refresh_job_rollups: {len(ids):,} changed jobs in {refresh_s:.2f} s "
        f"({len(ids) / refresh_s:,.0f} jobs/s); rollups equal a rebuild afterwards"
    )


if __name__ == "__main__":
    main()
