"""Evaluation: measure each SLO and advance its alert instances through the state machine.

inactive -> pending -> firing -> resolved. A write happens only if nobody else moved the instance
(UPDATE ... WHERE version = :seen); a notice is queued into the outbox at most once per
(fingerprint, episode, kind), by a unique key.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from backend.alerts import history as alerts_history
from backend.alerts import indicators
from backend.alerts.content import Evaluation, alert_labels, build_message, fingerprint
from backend.alerts.delivery import AlertMessage
from backend.alerts.models import AlertEpisode, AlertState, Notification, Silence
from backend.alerts.silences import list_silences, silenced_by
from backend.alerts.slos import LIVE_INDICATORS, SloSpec
from backend.alerts.store import get_slo, list_slos
from backend.config import Settings
from backend.db import insert_for

log = logging.getLogger(__name__)


# ---- evaluation -------------------------------------------------------------------------------


@dataclass
class EvaluationReport:
    """What one evaluation pass did."""

    evaluated: bool
    holder: str
    slos: int = 0
    instances: int = 0
    transitions: list[tuple[str, str, str]] = field(default_factory=list)
    queued: int = 0
    delivered: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


def _message_doc(m: AlertMessage) -> dict[str, Any]:
    return dataclasses.asdict(m)


def _queue(
    db_session: Session,
    fp: str,
    owner: str,
    episode: int,
    kind: str,
    message: AlertMessage,
    now: float,
) -> bool:
    """Write one notice to the outbox; False when this exact notice is already there."""
    stmt = (
        insert_for(db_session, Notification)
        .values(
            fingerprint=fp,
            episode=episode,
            kind=kind,
            owner=owner,
            message=_message_doc(message),
            status="pending",
            created_at=now,
        )
        .on_conflict_do_nothing(index_elements=["fingerprint", "episode", "kind"])
        # RETURNING, not rowcount: an ORM-session INSERT reports rowcount -1 on psycopg.
        .returning(Notification.id)
    )
    return db_session.execute(stmt).scalar_one_or_none() is not None


def _details(ev: Evaluation, slo: SloSpec | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"jobs": ev.jobs, "models": ev.models, "job_drivers": ev.job_drivers}
    if ev.key is not None:
        # A live instance: what the notices name (kept for its resolved notice).
        doc["instance"] = {
            "key": ev.key,
            "owner": ev.owner,
            "component": ev.component,
            "phase": ev.phase,
            "extra": ev.extra,
        }
    if slo is not None:
        # Kept so a resolved notice can still be written after the SLO is deleted.
        doc["spec"] = slo.to_doc()
    return doc


def evaluation_of(state: AlertState) -> Evaluation:
    """The last evaluation an alert state recorded (value, jobs, models, drivers)."""
    d = state.details or {}
    inst = d.get("instance") or {}
    return Evaluation(
        value=state.value,
        jobs=int(d.get("jobs", 0)),
        model=state.model,
        models=list(d.get("models", [])),
        job_drivers=list(d.get("job_drivers", [])),
        key=inst.get("key"),
        owner=inst.get("owner"),
        component=inst.get("component"),
        phase=inst.get("phase"),
        extra=dict(inst.get("extra") or {}),
    )


def _step(
    db_session: Session,
    slo: SloSpec | None,
    state: AlertState,
    ev: Evaluation | None,
    now: float,
    silences: Sequence[Silence],
    public_url: str,
    report: EvaluationReport,
) -> None:
    """Advance one alert instance by one evaluation, writing only if nobody else moved it."""
    seen_version = state.version
    old = state.state
    new = dict(
        state=old,
        value=ev.value if ev else None,
        last_evaluated_at=now,
        breach_started_at=state.breach_started_at,
        fired_at=state.fired_at,
        resolved_at=state.resolved_at,
        episode=state.episode,
        notified_firing=state.notified_firing,
        details=_details(ev, slo) if ev else state.details,
        objective=slo.objective if slo is not None else state.objective,
        version=seen_version + 1,
    )
    if slo is not None and (slo.is_live or slo.per_host):
        # A live instance keeps its job, owner and phase; the SLO's severity may change.
        new["labels"] = (
            alert_labels(slo, state.model, ev) if ev is not None else dict(state.labels or {})
        )
        new["labels"]["severity"] = slo.severity
        new["severity"] = slo.severity
    elif slo is not None:
        # An edited SLO (severity, phase) shows in the labels from its next pass on.
        new["labels"] = alert_labels(slo, state.model if slo.per_model else None)
        new["severity"] = slo.severity
    value = ev.value if ev else None
    breached = slo is not None and value is not None and slo.breached(value)
    recovered = slo is None or value is None or slo.recovered(value)
    notices: list[tuple[str, AlertMessage]] = []

    def fire() -> None:
        new["state"], new["fired_at"] = "firing", now
        new["episode"] = state.episode + 1
        new["resolved_at"] = None

    if old in ("inactive", "resolved"):
        if breached:
            new["state"], new["breach_started_at"] = "pending", now
            if slo is not None and slo.for_s <= 0:
                fire()
    elif old == "pending":
        if not breached:
            new["state"], new["breach_started_at"] = "inactive", None
        elif slo is not None and now - (state.breach_started_at or now) >= slo.for_s:
            fire()
    elif old == "firing" and recovered:
        new["state"], new["resolved_at"] = "resolved", now

    labels = dict(new.get("labels") or state.labels or {})
    live_ev = ev or evaluation_of(state)
    since = new["breach_started_at"] or state.fired_at or now
    muted = silenced_by(silences, labels) if new["state"] == "firing" else None
    if new["state"] == "firing":
        if new["episode"] != state.episode:
            new["notified_firing"] = False
        # Queued once per episode; a silence that lapses while firing lets it through then.
        if not new["notified_firing"] and slo is not None and muted is None:
            msg = build_message(
                slo, live_ev, status="firing", since=since, ended_at=None, public_url=public_url
            )
            notices.append(("firing", msg))
            new["notified_firing"] = True
    if new["state"] == "resolved" and old == "firing" and state.notified_firing:
        # A resolved notice always follows a firing one, silenced or not.
        spec = slo or _spec_of_state(db_session, state)
        if spec is not None:
            msg = build_message(
                spec, live_ev, status="resolved", since=since, ended_at=now, public_url=public_url
            )
            notices.append(("resolved", msg))

    try:
        result = db_session.execute(
            update(AlertState)
            .where(AlertState.fingerprint == state.fingerprint, AlertState.version == seen_version)
            .values(**new)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:
            db_session.rollback()
            report.errors.append(f"{state.fingerprint}: moved by another evaluator; skipped")
            return
        for kind, msg in notices:
            if _queue(db_session, state.fingerprint, state.owner, new["episode"], kind, msg, now):
                report.queued += 1
        _record_episode(db_session, state, slo, old, new, value, muted, now)
        db_session.commit()
    except OperationalError as exc:
        # SQLite answers a lost write race with "database is locked": the other writer won.
        db_session.rollback()
        report.errors.append(f"{state.fingerprint}: {exc.__class__.__name__}; skipped")
        return
    if new["state"] != old:
        report.transitions.append((state.fingerprint, old, str(new["state"])))
    db_session.expire(state)


def _record_episode(
    db_session: Session,
    state: AlertState,
    slo: SloSpec | None,
    old: str,
    new: dict[str, Any],
    value: float | None,
    muted: Silence | None,
    now: float,
) -> None:
    """Keep the episode's row in step with the state: opened when it fires, its peak while it
    fires, its end when it resolves (in the caller's transaction)."""
    if new["state"] == "firing" and old != "firing":
        db_session.execute(
            insert_for(db_session, AlertEpisode)
            .values(
                fingerprint=state.fingerprint,
                episode=new["episode"],
                slo_name=state.slo_name,
                owner=state.owner,
                component=state.component,
                model=state.model,
                breach_started_at=new["breach_started_at"],
                fired_at=now,
                peak=value,
                objective=new["objective"],
                silenced_by=muted.id if muted is not None else None,
            )
            .on_conflict_do_nothing(index_elements=["fingerprint", "episode"])
        )
        return
    if old != "firing":
        return
    row = db_session.scalars(
        select(AlertEpisode).where(
            AlertEpisode.fingerprint == state.fingerprint, AlertEpisode.episode == state.episode
        )
    ).one_or_none()
    if row is None:  # an episode that fired before episodes were kept
        return
    if value is not None and slo is not None:
        worse = min if slo.is_floor else max
        row.peak = value if row.peak is None else worse(row.peak, value)
    if new["state"] == "resolved":
        row.resolved_at = now
    db_session.flush()


def _spec_of_state(db_session: Session, state: AlertState) -> SloSpec | None:
    """The SLO an alert came from: the live one, else the copy kept in its details."""
    spec = get_slo(db_session=db_session, name=state.slo_name)
    if spec is not None:
        return spec
    doc = (state.details or {}).get("spec")
    return SloSpec.model_validate(doc) if doc else None


def _ensure_state(db_session: Session, slo: SloSpec, ev: Evaluation, now: float) -> AlertState:
    owner = ev.owner or slo.owner
    fp = fingerprint(slo.name, owner, ev.model, ev.key)
    state = db_session.get(AlertState, fp)
    if state is not None:
        return state
    stmt = (
        insert_for(db_session, AlertState)
        .values(
            fingerprint=fp,
            slo_name=slo.name,
            owner=owner,
            component=ev.component or slo.component,
            model=ev.model or slo.model,
            severity=slo.severity,
            labels=alert_labels(slo, ev.model, ev if ev.key is not None else None),
            state="inactive",
            value=ev.value,
            objective=slo.objective,
            last_evaluated_at=now,
            episode=0,
            notified_firing=False,
            version=0,
            details={},
        )
        .on_conflict_do_nothing(index_elements=["fingerprint"])
    )
    db_session.execute(stmt)
    db_session.commit()
    state = db_session.get(AlertState, fp, populate_existing=True)
    assert state is not None
    return state


def is_live_state(state: AlertState) -> bool:
    """Whether an alert instance belongs to a live indicator (the live pass owns it)."""
    return (state.labels or {}).get("indicator") in LIVE_INDICATORS


def advance(
    db_session: Session,
    settings: Settings,
    specs: Sequence[SloSpec],
    measured: Any,
    now: float,
    report: EvaluationReport,
    *,
    live: bool,
) -> None:
    """Measure each SLO (`measured(slo)` -> evaluations) and step its instances; instances of
    this pass's kind (live or not) that measured nothing resolve."""
    silences = list_silences(db_session=db_session, active_at=now)
    seen: set[str] = set()
    by_name = {s.name: s for s in specs}
    for slo in specs:
        try:
            evaluations = [e for e in measured(slo) if e.value is not None]
        except Exception as exc:  # one broken SLO must not stop the others
            db_session.rollback()
            log.exception("could not measure SLO %s", slo.name)
            report.errors.append(f"{slo.name}: {exc}")
            continue
        for ev in evaluations:
            state = _ensure_state(db_session, slo, ev, now)
            seen.add(state.fingerprint)
            _step(db_session, slo, state, ev, now, silences, settings.public_url, report)
            report.instances += 1
    # Instances that no longer measure anything (SLO gone, disabled, model without data, a job
    # that moved on or ended) resolve.
    stale = db_session.scalars(
        select(AlertState).where(AlertState.state.in_(("pending", "firing")))
    ).all()
    for state in stale:
        if state.fingerprint in seen or is_live_state(state) != live:
            continue
        _step(
            db_session,
            by_name.get(state.slo_name),
            state,
            None,
            now,
            silences,
            settings.public_url,
            report,
        )


def evaluate_slos(
    *, db_session: Session, settings: Settings, now: float, report: EvaluationReport
) -> None:
    """Measure every enabled SLO but the live ones and advance its alert instances (the caller
    holds the lease); the live indicators are the live pass's (backend/alerts/live.py)."""
    specs = [s for s in list_slos(db_session=db_session) if s.enabled and not s.is_live]
    report.slos = len(specs)
    cache: dict[Any, Any] = {}
    advance(
        db_session,
        settings,
        specs,
        lambda slo: indicators.measure(db_session, slo, now, cache),
        now,
        report,
        live=False,
    )
    alerts_history.record_day_ends(db_session=db_session, specs=specs, now=now)
