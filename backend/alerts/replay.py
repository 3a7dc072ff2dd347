"""Replay: the real evaluator stepped over a stretch of the past, its clock at each instant.

At each instant every enabled SLO but the live ones is measured once, as the evaluator would
measure it then; that one measure is stored as the SLO's compliance point
(backend.alerts.history) and steps its alert instances (backend.alerts.evaluation.advance), so
the heatmap and the alert episodes come from the same numbers. An instance that went pending
is measured again `for` later, when the evaluator would next see it still breached, so a breach
of one instant fires as it would have live. Notices are queued as the live evaluator queues
them; sending them is the caller's (dispatch_pending). The live indicators have no past: a live
state is of "now".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.alerts import history, indicators, store
from backend.alerts.content import Evaluation
from backend.alerts.evaluation import EvaluationReport, advance, is_live_state
from backend.alerts.lease import acquire_lease, release_lease
from backend.alerts.models import AlertState
from backend.alerts.slos import SloSpec
from backend.config import Settings

REPLAY_HOLDER = "replay"
# What a pass hands the caller's hook: the session, the evaluator's clock, what the pass did.
PassHook = Callable[[Session, float, EvaluationReport], None]


@dataclass
class ReplayReport:
    """What a replay did: passes stepped, history points stored, state transitions."""

    passes: int = 0
    points: int = 0
    transitions: list[tuple[float, str, str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class _Measures:
    """Each SLO measured at most once at one instant, shared by the history point and the step."""

    def __init__(self, db_session: Session, at: float, reuse: dict[str, list[Evaluation]]):
        self.db_session, self.at, self.cache = db_session, at, {}
        self.values: dict[str, list[Evaluation]] = dict(reuse)

    def __call__(self, slo: SloSpec) -> list[Evaluation]:
        if slo.name not in self.values:
            self.values[slo.name] = indicators.measure(self.db_session, slo, self.at, self.cache)
        return self.values[slo.name]


def _pending_for(db_session: Session, specs: Sequence[SloSpec]) -> dict[str, float]:
    """The SLOs with a pending instance, each with its `for` duration."""
    by_name = {s.name: s for s in specs}
    out: dict[str, float] = {}
    for state in db_session.scalars(select(AlertState).where(AlertState.state == "pending")):
        spec = by_name.get(state.slo_name)
        if spec is not None and not is_live_state(state):
            out[spec.name] = spec.for_s
    return out


def _last_pass(db_session: Session) -> float:
    """The clock of the evaluator's last pass over the SLOs but the live ones (0 if none)."""
    return max(
        (
            state.last_evaluated_at
            for state in db_session.scalars(select(AlertState))
            if not is_live_state(state)
        ),
        default=0.0,
    )


def _pass(
    db_session: Session,
    settings: Settings,
    specs: Sequence[SloSpec],
    measures: _Measures,
    out: ReplayReport,
    on_pass: PassHook | None,
) -> None:
    report = EvaluationReport(evaluated=True, holder=REPLAY_HOLDER)
    advance(db_session, settings, specs, measures, measures.at, report, live=False)
    out.passes += 1
    out.errors.extend(report.errors)
    out.transitions.extend((measures.at, fp, old, new) for fp, old, new in report.transitions)
    if on_pass is not None:
        on_pass(db_session, measures.at, report)
        db_session.commit()


def replay(
    *,
    db_session: Session,
    settings: Settings,
    instants: Iterable[float],
    on_pass: PassHook | None = None,
    on_instant: Callable[[float], None] | None = None,
) -> ReplayReport:
    """Step the evaluator over `instants` (oldest first), storing each SLO's compliance point.

    The SLOs are those in the database (the caller syncs the SLO file first).

    Refuses (RuntimeError) while another evaluator holds the lease: a replay moves the same
    alert states. Instants at or before the evaluator's last pass only store their history
    points, so a replay run again (a resumed demo load) never steps a state back in time.
    `on_pass` runs after every pass (the demo acknowledges and silences there); `on_instant`
    after every instant (a progress bar).
    """
    if not acquire_lease(
        db_session=db_session, holder=REPLAY_HOLDER, ttl_s=3600.0, now=time.time()
    ):
        raise RuntimeError("another evaluator holds the alert lease: stop it before a replay")
    db_session.commit()
    out = ReplayReport()
    try:
        specs = [s for s in store.list_slos(db_session=db_session) if s.enabled and not s.is_live]
        done = _last_pass(db_session)
        for at in instants:
            measures = _Measures(db_session, at, {})
            if at <= done:
                # A resumed replay: the states are already past this instant; history only.
                for spec in specs:
                    history.store_point(
                        db_session=db_session, spec=spec, at=at, evaluations=measures(spec)
                    )
                    out.points += 1
                db_session.commit()
                if on_instant is not None:
                    on_instant(at)
                continue
            _pass(db_session, settings, specs, measures, out, on_pass)
            for spec in specs:
                if spec.name in measures.values:
                    history.store_point(
                        db_session=db_session,
                        spec=spec,
                        at=at,
                        evaluations=measures.values[spec.name],
                    )
                    out.points += 1
            db_session.commit()
            pending = _pending_for(db_session, specs)
            later = at + max(pending.values(), default=0.0)
            # The evaluator's next look that would fire them: `for` later, those re-measured
            # (never in the future: the live evaluator takes them from now on).
            if pending and later <= time.time():
                reuse = {k: v for k, v in measures.values.items() if k not in pending}
                _pass(
                    db_session, settings, specs, _Measures(db_session, later, reuse), out, on_pass
                )
            if on_instant is not None:
                on_instant(at)
    finally:
        db_session.rollback()
        release_lease(db_session=db_session, holder=REPLAY_HOLDER)
        db_session.commit()
    return out
