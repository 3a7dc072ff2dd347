"""Paired comparison arithmetic (SPEC section 4, paper sections V-B and V-C); pure functions.

Deltas are savings: baseline minus optimized, so a positive number is time the optimization won.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PARTS = ("tts", "recovery", "checkpoint", "shutdown")


def lost_parts(result: Mapping[str, Any]) -> dict[str, float]:
    """The four Level-1 parts of a job's lost time, and their total, from its engine result."""
    l1 = result.get("l1") or {}
    return {
        "tts_s": float(l1.get("tts_s") or 0.0),
        "recovery_s": float(l1.get("recovery_s") or 0.0),
        "checkpoint_s": float(l1.get("in_loop_waste_s") or 0.0),
        "shutdown_s": float(l1.get("final_shutdown_s") or 0.0),
        "lost_s": float(result.get("e2e_s") or 0.0) - float(result.get("effective_s") or 0.0),
    }


def _share(part: float, total: float) -> float | None:
    return part / total if total > 0 else None


def cascade(delta_tts_s: float, delta_recovery_s: float, nof: int, delta_lost_s: float) -> dict:
    """Eq. 3: the TTS work's bound (1 + NoF) x dTTS and the recovery residual, with shares."""
    bound = (1 + nof) * delta_tts_s
    residual = delta_recovery_s - nof * delta_tts_s
    return {
        "tts_bound_s": bound,
        "tts_share": _share(bound, delta_lost_s),
        "recovery_residual_s": residual,
        "recovery_residual_share": _share(residual, delta_lost_s),
    }


def restart_multiplier(delta_tts_s: float, delta_recovery_s: float, nof: int) -> float | None:
    """(recovery delta / NoF) / TTS delta; None without failures or without a TTS change."""
    if nof <= 0 or delta_tts_s == 0:
        return None
    return (delta_recovery_s / nof) / delta_tts_s


def compare_parts(
    baseline: Mapping[str, float], optimized: Mapping[str, float], nof: int
) -> dict[str, Any]:
    """Delta, direct attribution, restart multiplier and cascade for one pair of lost_parts."""
    delta = {k: baseline[k] - optimized[k] for k in (*(p + "_s" for p in PARTS), "lost_s")}
    total = delta["lost_s"]
    return {
        "delta": delta,
        "attribution": {p: _share(delta[p + "_s"], total) for p in PARTS},
        "restart_multiplier": restart_multiplier(delta["tts_s"], delta["recovery_s"], nof),
        "cascade": cascade(delta["tts_s"], delta["recovery_s"], nof, total),
    }


def pair_warnings(baseline: Mapping[str, Any], optimized: Mapping[str, Any]) -> list[dict]:
    """Why a pair may not be a controlled comparison (NoF, model, GPUs, interval, open jobs)."""
    out: list[dict[str, str]] = []
    nb, no = baseline.get("nof", 0), optimized.get("nof", 0)
    if nb != no:
        out.append(
            {
                "code": "nof_mismatch",
                "message": f"NoF differs ({nb} vs {no}): the comparison is not controlled",
            }
        )
    if baseline.get("model") != optimized.get("model"):
        out.append(
            {
                "code": "different_models",
                "message": f"different models ({baseline.get('model')!r} vs "
                f"{optimized.get('model')!r})",
            }
        )
    if baseline.get("gpus") != optimized.get("gpus"):
        out.append(
            {
                "code": "gpus_mismatch",
                "message": f"GPU counts differ ({baseline.get('gpus')} vs {optimized.get('gpus')})",
            }
        )
    elif baseline.get("attempt_gpus") != optimized.get("attempt_gpus"):
        out.append(
            {
                "code": "capacity_mismatch",
                "message": "the jobs' attempts ran on different GPU counts "
                f"({_counts(baseline)} vs {_counts(optimized)}; partial capacity): compare "
                "their GPU-hours lost (lost_gpu_h), not only seconds",
            }
        )
    ib = baseline.get("checkpoint_interval_s")
    io = optimized.get("checkpoint_interval_s")
    if ib is not None and io is not None and ib != io:
        out.append(
            {
                "code": "checkpoint_interval_mismatch",
                "message": f"checkpoint intervals differ ({ib} s vs {io} s)",
            }
        )
    for role, job in (("baseline", baseline), ("optimized", optimized)):
        if job.get("provisional"):
            out.append(
                {
                    "code": "open_job",
                    "message": f"the {role} job {job.get('job_id')} is still open: "
                    "its numbers are provisional",
                }
            )
    return out


def _counts(job: Mapping[str, Any]) -> str:
    return ", ".join(str(g) for g in job.get("attempt_gpus") or []) or "?"


def compare_pair(baseline: Mapping[str, Any], optimized: Mapping[str, Any]) -> dict[str, Any]:
    """The full comparison of two job summaries (each: lost_parts plus nof, model, gpus, ...).

    NoF for the restart multiplier and the cascade is the number of failures both jobs took
    (the smaller count), since only restarts both paid can inherit a TTS saving.
    """
    nb, no = int(baseline.get("nof", 0)), int(optimized.get("nof", 0))
    out = compare_parts(baseline, optimized, min(nb, no))
    out["nof"] = {"baseline": nb, "optimized": no}
    eb, eo = baseline.get("ett_pct"), optimized.get("ett_pct")
    out["ett_pct"] = {
        "baseline": eb,
        "optimized": eo,
        "delta_pp": eo - eb if eb is not None and eo is not None else None,
    }
    lb, lo = float(baseline.get("lost_gpu_h") or 0.0), float(optimized.get("lost_gpu_h") or 0.0)
    out["lost_gpu_h"] = {"baseline": lb, "optimized": lo, "delta": lb - lo}
    out["warnings"] = pair_warnings(baseline, optimized)
    return out


def compare_set(pairs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A set of compare_pair answers summed: the pair fields in seconds, plus minutes."""
    keys = (*(p + "_s" for p in PARTS), "lost_s")
    delta = {k: sum(p["delta"][k] for p in pairs) for k in keys}
    total = delta["lost_s"]
    bound = sum(p["cascade"]["tts_bound_s"] for p in pairs)
    residual = sum(p["cascade"]["recovery_residual_s"] for p in pairs)
    multipliers = [p["restart_multiplier"] for p in pairs if p["restart_multiplier"] is not None]
    return {
        "pairs": len(pairs),
        "delta": delta,
        "delta_min": {k.removesuffix("_s") + "_min": v / 60.0 for k, v in delta.items()},
        "attribution": {p: _share(delta[p + "_s"], total) for p in PARTS},
        "restart_multiplier": {
            "min": min(multipliers) if multipliers else None,
            "max": max(multipliers) if multipliers else None,
        },
        "cascade": {
            "tts_bound_s": bound,
            "tts_bound_min": bound / 60.0,
            "tts_share": _share(bound, total),
            "recovery_residual_s": residual,
            "recovery_residual_min": residual / 60.0,
            "recovery_residual_share": _share(residual, total),
        },
        "nof": {
            "baseline": sum(p["nof"]["baseline"] for p in pairs),
            "optimized": sum(p["nof"]["optimized"] for p in pairs),
        },
        "lost_gpu_h": {
            k: sum((p.get("lost_gpu_h") or {}).get(k, 0.0) for p in pairs)
            for k in ("baseline", "optimized", "delta")
        },
    }
