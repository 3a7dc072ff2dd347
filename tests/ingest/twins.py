"""Compare two jobs' answers: ETT%, every Level 2 component and Level 1, to 1 s."""

from __future__ import annotations

import time
from typing import Any

from tests.trainer_agent.live_server import LiveServer

TOLERANCE_S = 1.0


def settled(live: LiveServer, job_id: str, *, want_status: str | None = None) -> dict[str, Any]:
    """The job's ETT answer once recompute has caught up (bounded wait)."""
    deadline = time.monotonic() + 60
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            last = live.get(f"/api/v1/jobs/{job_id}/ett")
        except OSError:
            time.sleep(0.3)
            continue
        if not last.get("provisional") and (want_status is None or last["status"] == want_status):
            time.sleep(1.5)  # one more recompute round for events of the last export
            return live.get(f"/api/v1/jobs/{job_id}/ett")
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not settle: {last}")


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Where two answers differ by more than 1 s (or in a count or kind)."""
    out = []

    def near(name: str, x: float, y: float) -> None:
        if abs(x - y) > TOLERANCE_S:
            out.append(f"{name}: {x:.3f} vs {y:.3f}")

    near("e2e_s", a["e2e_s"], b["e2e_s"])
    near("effective_s", a["effective_s"], b["effective_s"])
    # ETT% to 1 s of effective time: the share 1 s moves it, at this E2E.
    if abs(a["ett_pct"] - b["ett_pct"]) > 100.0 * TOLERANCE_S / max(a["e2e_s"], 1.0) + 1e-9:
        out.append(f"ett_pct: {a['ett_pct']:.3f} vs {b['ett_pct']:.3f}")
    for comp in sorted(set(a["components"]) | set(b["components"])):
        near(f"components.{comp}", a["components"].get(comp, 0.0), b["components"].get(comp, 0.0))
    for kind in sorted(set(a["wasted"]) | set(b["wasted"])):
        near(f"wasted.{kind}", a["wasted"].get(kind, 0.0), b["wasted"].get(kind, 0.0))
    la, lb = a["l1"], b["l1"]
    for key in ("tts_s", "recovery_s", "in_loop_waste_s", "final_shutdown_s"):
        near(f"l1.{key}", la[key], lb[key])
    if la["nof_by_kind"] != lb["nof_by_kind"]:
        out.append(f"l1.nof_by_kind: {la['nof_by_kind']} vs {lb['nof_by_kind']}")
    for i, (x, y) in enumerate(zip(la["ttr_s"], lb["ttr_s"], strict=False)):
        near(f"l1.ttr_s[{i}]", x, y)
    return out
