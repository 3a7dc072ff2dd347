"""Fit a model's planner inputs from its measured jobs (the ETT engine's results); pure.

`observe_job` reads one job's stored result and attributed intervals into the quantities the
model needs: the cold start by component (the TTS window), each recovery by part (its TTR window,
the teardown carved out of the re-queue), the replay, the checkpoint saves, the in-loop waste and
the final shutdown. `fit_inputs` averages them over jobs, the most recent weighing most.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backend.ett.catalogue import FAILURE_KINDS
from backend.metrics import core as metrics
from backend.planner.model import COLD_PARTS, HOUR_S, RECOVERY_PARTS, ModelInputs
from backend.timefmt import DAY_S

# (start, end, attempt, component, phase), as JobInterval rows hold them.
IntervalRow = tuple[float, float, int | None, str, str | None]
# A fit that rests on fewer jobs or failures than these carries a warning.
MIN_JOBS = 5
MIN_FAILURES = 5
MIN_SAVES = 3
DEFAULT_HALF_LIFE_DAYS = 14.0


@dataclass(frozen=True)
class FailureObservation:
    """One failure and the recovery that followed it."""

    kind: str
    ttr_s: float
    # teardown, scheduling (re-queue), hardware_setup, trainer_init, checkpoint_restore,
    # pt2_compile, replay, unattributed.
    parts_s: dict[str, float]
    censored: bool


@dataclass(frozen=True)
class JobObservation:
    """What one measured job says about its model."""

    job_id: str
    model: str | None
    # The GPUs its effective training ran on, on average (per-attempt GPUs).
    gpus: float
    submitted_at: float
    e2e_s: float
    effective_s: float
    cold_start_s: dict[str, float]
    failures: tuple[FailureObservation, ...]
    saves: int
    blocking_s: float
    stalled_s: float
    other_in_loop_s: dict[str, float]
    final_shutdown_s: float
    interval_s: float | None
    # GPU-seconds, each second at its attempt's GPUs (metrics.job_gpu_s).
    effective_gpu_s: float = 0.0
    e2e_gpu_s: float = 0.0

    @property
    def ett_pct(self) -> float:
        """Measured ETT% of the job."""
        return self.effective_s / self.e2e_s * 100.0 if self.e2e_s > 0 else 0.0


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _part(component: str, phase: str | None) -> str:
    if phase == "checkpoint_restore":
        return "checkpoint_restore"
    if component == "wasted_training":
        return phase or "replay"
    return component if component in COLD_PARTS else "unattributed"


def observe_job(
    result: Mapping[str, Any],
    intervals: Iterable[IntervalRow],
    config: Mapping[str, Any] | None = None,
    *,
    last_effective: float | None = None,
) -> JobObservation:
    """One job's planner quantities from its engine result (`JobETT.to_dict()`) and intervals.

    The effective intervals may be left out of `intervals` when `last_effective` (the end of
    the job's last effective instant) is given instead.
    """
    l1 = result.get("l1") or {}
    start = float(result["submitted_at"])
    tts_end = start + float(l1.get("tts_s", 0.0))
    windows: list[tuple[float, float]] = []
    ended_at: dict[int, float] = {
        int(a["attempt"]): float(a["ended_at"])
        for a in result.get("attempts") or []
        if a.get("ended_at") is not None and a.get("attempt") is not None
    }
    failures_in = l1.get("failures") or []
    for f in failures_in:
        ts = float(f["ts"])
        windows.append((ts, ts + float(f.get("ttr_s", 0.0))))
    cold: dict[str, float] = defaultdict(float)
    parts: list[dict[str, float]] = [defaultdict(float) for _ in windows]
    blocking = stalled = 0.0
    saves = 0
    other: dict[str, float] = defaultdict(float)
    rows = sorted(intervals, key=lambda r: r[0])
    # Level 1's final shutdown starts at the last effective instant: the anchor save, publish
    # and shutdown after it are not in-loop waste.
    if last_effective is None:
        last_effective = max(
            (e for _s, e, _a, c, _p in rows if c == "effective_training"), default=start
        )
    all_blocking = 0.0
    for s, e, _attempt, comp, phase in rows:
        if comp == "effective_training":
            continue
        if comp == "wasted_training" and phase == "checkpoint_blocking":
            saves += 1
            all_blocking += e - s
        hit = _overlap(s, e, start, tts_end)
        if hit > 0:
            cold[_part(comp, phase)] += hit
        in_loop = _overlap(s, e, tts_end, last_effective)
        for i, (w0, w1) in enumerate(windows):
            hit = _overlap(s, e, w0, w1)
            if hit > 0:
                parts[i][_part(comp, phase)] += hit
                in_loop -= _overlap(s, e, max(w0, tts_end), min(w1, last_effective))
        if in_loop <= 1e-9:
            continue
        if comp == "wasted_training" and phase == "checkpoint_blocking":
            blocking += in_loop
        elif comp == "wasted_training" and phase == "stalled":
            stalled += in_loop
        else:
            other[comp] += in_loop
    failures = []
    for f, p in zip(failures_in, parts, strict=True):
        attempt = f.get("attempt")
        ts = float(f["ts"])
        end = ended_at.get(int(attempt)) if attempt is not None else None
        if end is not None and end > ts and p.get("scheduling", 0.0) > 0:
            teardown = min(end - ts, p["scheduling"])
            p["teardown"] = teardown
            p["scheduling"] -= teardown
        kind = f.get("kind") or "unknown"
        failures.append(
            FailureObservation(
                kind=kind if kind in FAILURE_KINDS else "unknown",
                ttr_s=float(f.get("ttr_s", 0.0)),
                parts_s=dict(p),
                censored=bool(f.get("censored")),
            )
        )
    # Level 1's in-loop waste is what the cut above split; anything it missed stays visible.
    in_loop_l1 = float(l1.get("in_loop_waste_s", 0.0))
    known = blocking + stalled + sum(other.values())
    if in_loop_l1 > known + 1e-6:
        other["unattributed"] += in_loop_l1 - known
    interval = (config or {}).get("checkpoint_interval_s")
    effective_gpu_s, e2e_gpu_s = metrics.job_gpu_s(result)
    effective_s = float(result.get("effective_s", 0.0))
    return JobObservation(
        job_id=str(result["job_id"]),
        model=result.get("model"),
        gpus=metrics.mean_gpus(effective_gpu_s, effective_s, result.get("gpus")),
        submitted_at=start,
        e2e_s=float(result.get("e2e_s", 0.0)),
        effective_s=float(result.get("effective_s", 0.0)),
        cold_start_s=dict(cold),
        failures=tuple(failures),
        saves=saves,
        blocking_s=all_blocking,
        stalled_s=stalled + sum(p.get("stalled", 0.0) for p in parts),
        other_in_loop_s=dict(other),
        final_shutdown_s=float(l1.get("final_shutdown_s", 0.0)),
        interval_s=float(interval) if isinstance(interval, int | float) and interval > 0 else None,
        effective_gpu_s=effective_gpu_s,
        e2e_gpu_s=e2e_gpu_s,
    )


@dataclass(frozen=True)
class Fit:
    """A model's fitted inputs with what they rest on and their measured counterparts."""

    inputs: ModelInputs | None
    jobs: int
    failures: int
    failures_by_kind: dict[str, int]
    saves: int
    effective_jobs: float
    half_life_days: float | None
    measured_ett_pct: float | None
    measured_replay_per_failure_s: float | None
    measured_interval_s: float | None
    interval_source: str | None
    warnings: list[str] = field(default_factory=list)
    estimator: str = "level"


def _median_gap_interval(jobs: Sequence[JobObservation]) -> float | None:
    # Without a configured interval: effective training per save (saves sit at data positions).
    per = [j.effective_s / j.saves for j in jobs if j.saves > 0 and j.effective_s > 0]
    return statistics.median(per) if per else None


def weights(
    jobs: Sequence[JobObservation], end: float, half_life_days: float | None
) -> list[float]:
    """Recency weights: 2^(-age / half-life) by submission age at `end`; all 1 without one.

    Scaled so that the newest job weighs 1 (every use is a ratio of weighted sums, so the scale
    does not change a fit): a short half-life cannot underflow every weight to 0.
    """
    if half_life_days is None or half_life_days <= 0 or not jobs:
        return [1.0] * len(jobs)
    ages = [max(0.0, end - j.submitted_at) for j in jobs]
    youngest = min(ages)
    return [0.5 ** ((age - youngest) / (half_life_days * DAY_S)) for age in ages]


def fit_inputs(
    jobs: Sequence[JobObservation],
    *,
    end: float,
    window_days: float,
    half_life_days: float | None = DEFAULT_HALF_LIFE_DAYS,
    replay: str = "utt",
    estimator: str = "level",
) -> Fit:
    """Fit ModelInputs from a model's jobs submitted in a window of `window_days` ending at `end`.

    Per-job quantities are recency-weighted means; the failure rate is weighted failures over
    weighted GPU-hours of effective training; per-failure quantities average the failures
    that recovered; a censored failure (the job gave up at it: its TTR runs to the job's end, no
    restart) is a give-up instead, with its own share of failures and its own cost per give-up.
    Jobs a day = jobs / window days.
    `replay`: "utt" predicts the replay as UTT = tau / 2; "measured" keeps the measured replay
    per failure (for failures placed on purpose, as in a paired benchmark).
    """
    if replay not in ("utt", "measured"):
        raise ValueError(f"replay must be 'utt' or 'measured', got {replay!r}")
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(ESTIMATORS)}, got {estimator!r}")
    done = [j for j in jobs if j.e2e_s > 0 and j.effective_s > 0]
    warnings: list[str] = []
    by_kind = dict.fromkeys(FAILURE_KINDS, 0)
    for j in done:
        for f in j.failures:
            by_kind[f.kind] = by_kind.get(f.kind, 0) + 1
    n_fail = sum(by_kind.values())
    n_saves = sum(j.saves for j in done)
    if not done:
        return Fit(
            inputs=None,
            jobs=0,
            failures=0,
            failures_by_kind=by_kind,
            saves=0,
            effective_jobs=0.0,
            half_life_days=half_life_days if estimator == "recency" else None,
            measured_ett_pct=None,
            measured_replay_per_failure_s=None,
            measured_interval_s=None,
            interval_source=None,
            warnings=["no finished job of this model in the window: nothing to fit"],
            estimator=estimator,
        )
    w = weights(done, end, half_life_days if estimator == "recency" else None)
    total_w = sum(w)
    eff_n = total_w**2 / sum(x * x for x in w)
    excluded: list[tuple[str, Level]] = []

    def est(name: str, points: Sequence[tuple[float, float, float, float]]) -> float:
        # points: (time, num, den, recency weight); the fitted value is a ratio num / den.
        if estimator == "level":
            lv = level([(t, n, d) for t, n, d, _x in points], end=end, window_days=window_days)
            if lv.excluded_rise is not None:
                excluded.append((name, lv))
            return lv.value
        den = sum(x * d for _t, _n, d, x in points)
        return sum(x * n for _t, n, _d, x in points) / den if den > 0 else 0.0

    def per_job(name: str, fn: Any) -> float:
        return est(name, [(j.submitted_at, fn(j), 1.0, x) for x, j in zip(w, done, strict=True)])

    def mean(values: Iterable[float]) -> float:
        return sum(x * y for x, y in zip(w, values, strict=True)) / total_w

    gpus = round(mean([j.gpus for j in done]))
    effective = mean([j.effective_s for j in done])
    rates = {
        kind: est(
            f"{kind} failure rate",
            [
                (
                    j.submitted_at,
                    float(sum(1 for f in j.failures if f.kind == kind)),
                    metrics.gpu_h(j.effective_gpu_s),
                    x,
                )
                for x, j in zip(w, done, strict=True)
            ],
        )
        for kind in by_kind
    }
    cold = {
        p: per_job(f"cold-start {p}", lambda j, p=p: j.cold_start_s.get(p, 0.0)) for p in COLD_PARTS
    }
    unattributed_cold = per_job(
        "cold-start unattributed", lambda j: j.cold_start_s.get("unattributed", 0.0)
    )
    if unattributed_cold > 0:
        cold["unattributed"] = unattributed_cold
    recovered = [
        (x, j.submitted_at, f)
        for x, j in zip(w, done, strict=True)
        for f in j.failures
        if not f.censored
    ]
    recovery: dict[str, float] = {}
    replay_per_failure = None
    if recovered:
        for p in (*RECOVERY_PARTS, "unattributed"):
            recovery[p] = est(
                f"recovery {p}", [(t, f.parts_s.get(p, 0.0), 1.0, x) for x, t, f in recovered]
            )
        replay_per_failure = est(
            "replay", [(t, f.parts_s.get("replay", 0.0), 1.0, x) for x, t, f in recovered]
        )
    else:
        # No recovery seen: assume a restart repeats the cold start (Section II-A's bound).
        recovery = {p: cold.get(p, 0.0) for p in COLD_PARTS}
        if n_fail:
            warnings.append("no recovered failure: recovery cost assumed equal to the cold start")
    # Give-ups: the share of failures the job ended at, and what such a censored TTR holds.
    all_failures = [
        (x, j.submitted_at, f) for x, j in zip(w, done, strict=True) for f in j.failures
    ]
    give_up_share = (
        est("give-up share", [(t, float(f.censored), 1.0, x) for x, t, f in all_failures])
        if all_failures
        else 0.0
    )
    censored = [(x, t, f) for x, t, f in all_failures if f.censored]
    give_up: dict[str, float] = {}
    for p in sorted({p for _x, _t, f in censored for p in f.parts_s}):
        give_up[p] = est(
            f"give-up {p}", [(t, f.parts_s.get(p, 0.0), 1.0, x) for x, t, f in censored]
        )
    csbt = est(
        "CSBT",
        [(j.submitted_at, j.blocking_s, float(j.saves), x) for x, j in zip(w, done, strict=True)],
    )
    configured = [j.interval_s for j in done if j.interval_s]
    if configured:
        interval, source = statistics.median(configured), "config"
    else:
        interval, source = _median_gap_interval(done), "measured"
    if interval is None:
        interval, source = max(effective, 1.0), None
        warnings.append("no checkpoint measured: interval taken as the whole job (one save)")
    stall_rate = est(
        "stalls",
        [
            (j.submitted_at, j.stalled_s, j.effective_s / HOUR_S, x)
            for x, j in zip(w, done, strict=True)
        ],
    )
    other_keys = {k for j in done for k in j.other_in_loop_s}
    other = {
        k: est(
            f"in-loop {k}",
            [
                (j.submitted_at, j.other_in_loop_s.get(k, 0.0), j.effective_s / HOUR_S, x)
                for x, j in zip(w, done, strict=True)
            ],
        )
        for k in sorted(other_keys)
    }
    final_shutdown = per_job("final shutdown", lambda j: j.final_shutdown_s)
    for name, lv in excluded:
        warnings.append(
            f"recent regression excluded: {name} rose {lv.excluded_rise:.2f}x over the last "
            f"{lv.excluded_days:.0f} days; the prediction assumes it recovers to the level before"
        )
    warnings.extend(drift_warnings(done, end=end, window_days=window_days))
    if len(done) < MIN_JOBS:
        warnings.append(f"the fit rests on {len(done)} job(s) (fewer than {MIN_JOBS})")
    if n_fail < MIN_FAILURES:
        warnings.append(
            f"the failure rate rests on {n_fail} failure(s) (fewer than {MIN_FAILURES})"
        )
    if n_saves < MIN_SAVES:
        warnings.append(f"CSBT rests on {n_saves} checkpoint save(s) (fewer than {MIN_SAVES})")
    inputs = ModelInputs(
        gpus=max(1, gpus),
        effective_s=effective,
        failure_rate_per_gpu_h=rates,
        cold_start_s=cold,
        recovery_s={k: v for k, v in recovery.items() if k != "replay"},
        csbt_s=csbt,
        interval_s=interval,
        final_shutdown_s=final_shutdown,
        stall_s_per_h=stall_rate,
        other_in_loop_s_per_h=other,
        jobs_per_day=len(done) / window_days if window_days > 0 else 0.0,
        replay_per_failure_s=replay_per_failure if replay == "measured" else None,
        give_up_share=min(1.0, give_up_share),
        give_up_s=give_up,
    )
    return Fit(
        inputs=inputs,
        jobs=len(done),
        failures=n_fail,
        failures_by_kind=by_kind,
        saves=n_saves,
        effective_jobs=eff_n,
        half_life_days=half_life_days if estimator == "recency" else None,
        measured_ett_pct=measured_ett_pct(done),
        measured_replay_per_failure_s=replay_per_failure,
        measured_interval_s=interval if source == "measured" else _median_gap_interval(done),
        interval_source=source,
        warnings=warnings,
        estimator=estimator,
    )


DRIFT_RATIO = 1.5
DRIFT_MIN_JOBS = 3
# The part of the window compared with the rest for drift.
DRIFT_RECENT_SHARE = 0.25


def drift_warnings(jobs: Sequence[JobObservation], *, end: float, window_days: float) -> list[str]:
    """Warn when the window's last quarter differs from the rest by a factor of 1.5 or more in
    cold start, failures per GPU-hour or final shutdown: a rollout or a regression inside the
    window, which the recency-weighted fit follows (and so assumes persists)."""
    cut = end - window_days * DRIFT_RECENT_SHARE * DAY_S
    recent = [j for j in jobs if j.submitted_at >= cut]
    earlier = [j for j in jobs if j.submitted_at < cut]
    if len(recent) < DRIFT_MIN_JOBS or len(earlier) < DRIFT_MIN_JOBS:
        return []

    def cold(js: Sequence[JobObservation]) -> float:
        return statistics.fmean(sum(j.cold_start_s.values()) for j in js)

    def fails(js: Sequence[JobObservation]) -> float:
        gpu_h = metrics.gpu_h(sum(j.effective_gpu_s for j in js))
        return sum(len(j.failures) for j in js) / gpu_h if gpu_h > 0 else 0.0

    def shutdown(js: Sequence[JobObservation]) -> float:
        return statistics.fmean(j.final_shutdown_s for j in js)

    days = window_days * DRIFT_RECENT_SHARE
    out = []
    counted = min(sum(len(j.failures) for j in js) for js in (recent, earlier))
    checks = [("cold start", cold), ("final shutdown", shutdown)]
    if counted >= MIN_FAILURES:
        checks.append(("failure rate", fails))
    for name, fn in checks:
        a, b = fn(recent), fn(earlier)
        if a <= 0 or b <= 0:
            continue
        ratio = a / b
        if ratio >= DRIFT_RATIO or ratio <= 1.0 / DRIFT_RATIO:
            out.append(
                f"{name} over the last {days:.0f} days is {ratio:.2f}x the earlier jobs': the fit "
                "follows the recent jobs, so the prediction assumes this change lasts"
            )
    return out


def measured_ett_pct(jobs: Sequence[JobObservation]) -> float | None:
    """GPU-weighted measured ETT% of a set of jobs (None when empty)."""
    return metrics.weighted_ett_pct((j.effective_gpu_s, j.e2e_gpu_s) for j in jobs)


def is_finite(value: float | None) -> bool:
    """True for a finite float (not None, NaN or infinite)."""
    return value is not None and math.isfinite(value)


# --- Level estimation: the current level of a quantity, robust to a recent excursion ---------

# A change in level must stand out of the noise by this many standard errors (a two-sided test
# at about the 0.3% level for one position; binary segmentation tests each position once).
SEGMENT_T = 3.0
# The fewest points (jobs or failures) a segment may hold: fewer make a single outlier a level.
SEGMENT_MIN = 3
ESTIMATORS = ("level", "recency", "mean")


@dataclass(frozen=True)
class Level:
    """A quantity's fitted level: num / den over the points it rests on."""

    value: float
    excluded_rise: float | None = None
    excluded_days: float = 0.0


def _split(xs: Sequence[float], a: int, b: int) -> int | None:
    # The position that best splits xs[a:b] into two levels, if significant (pooled t); one
    # pass with running sums of x and x^2.
    n = b - a
    if n < 2 * SEGMENT_MIN:
        return None
    seg = xs[a:b]
    total, total_sq = sum(seg), sum(x * x for x in seg)
    best, best_k = 0.0, None
    left = left_sq = 0.0
    for k in range(1, n):
        left += seg[k - 1]
        left_sq += seg[k - 1] ** 2
        if k < SEGMENT_MIN or n - k < SEGMENT_MIN:
            continue
        m1, m2 = left / k, (total - left) / (n - k)
        ss = max(0.0, left_sq - k * m1 * m1 + (total_sq - left_sq) - (n - k) * m2 * m2)
        s = math.sqrt(ss / (n - 2))
        if s <= 1e-12 * max(1.0, abs(m1), abs(m2)):
            t = math.inf if abs(m1 - m2) > 1e-12 else 0.0
        else:
            t = abs(m1 - m2) / (s * math.sqrt(1.0 / k + 1.0 / (n - k)))
        if t > best:
            best, best_k = t, a + k
    return best_k if best >= SEGMENT_T else None


def _ranks(xs: Sequence[float]) -> list[float]:
    # Ranks (ties averaged): the split test on ranks is not moved by a lone outlier.
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return out


def segments(xs: Sequence[float]) -> list[tuple[int, int]]:
    """Binary segmentation of a series into constant-level runs: (start, end) index pairs.

    Each split is the position with the largest pooled two-sample t statistic on the ranks of
    the values, kept when it reaches SEGMENT_T, both sides holding at least SEGMENT_MIN points.
    """
    xs = _ranks(xs)
    out: list[tuple[int, int]] = []
    stack = [(0, len(xs))]
    while stack:
        a, b = stack.pop()
        k = _split(xs, a, b)
        if k is None:
            out.append((a, b))
        else:
            stack.extend([(k, b), (a, k)])
    return sorted(out)


def level(points: Sequence[tuple[float, float, float]], *, end: float, window_days: float) -> Level:
    """The current level of a cost from (time, num, den) points sorted by time: sum(num) /
    sum(den) over the last constant-level segment of num / den. When every segment that begins
    inside the window's last quarter lies ABOVE the segment before them, they are taken as a
    transient excursion (an incident): the level before it is used and the rise reported."""
    pts = sorted((p for p in points if p[2] > 0), key=lambda p: p[0])
    if not pts:
        return Level(0.0)
    xs = [n / d for _t, n, d in pts]
    segs = segments(xs)

    def ratio(seg: tuple[int, int]) -> float:
        a, b = seg
        return sum(p[1] for p in pts[a:b]) / sum(p[2] for p in pts[a:b])

    last = ratio(segs[-1])
    # The recent excursion: the segments that begin inside the window's last quarter.
    recent_from = end - window_days * DRIFT_RECENT_SHARE * DAY_S
    first = next(
        i for i, (a, _b) in enumerate(segs) if i == len(segs) - 1 or pts[a][0] >= recent_from
    )
    if first >= 1 and pts[segs[first][0]][0] >= recent_from:
        before = ratio(segs[first - 1])
        a = segs[first][0]
        rise = sum(p[1] for p in pts[a:]) / sum(p[2] for p in pts[a:])
        # A material rise (the drift check's factor), every recent segment above the level.
        if all(ratio(seg) > before for seg in segs[first:]) and rise >= DRIFT_RATIO * before:
            return Level(
                before,
                excluded_rise=rise / before if before > 0 else math.inf,
                excluded_days=(end - pts[a][0]) / DAY_S,
            )
    return Level(last)
