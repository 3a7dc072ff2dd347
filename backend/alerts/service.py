"""Alerts service: SLOs and channels, evaluation into states, the notice outbox, silences, acks.

Exactly-once notices rest on three database guards, so they hold across restarts and replicas:
an evaluator lease (a conditional UPDATE on one row), optimistic versions on alert states
(UPDATE ... WHERE version = :seen), and a unique (fingerprint, episode, kind) per notice.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import case, delete, func, or_, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from backend.alerts import history as alerts_history
from backend.alerts import indicators
from backend.alerts.content import Evaluation, alert_labels, build_message, fingerprint
from backend.alerts.delivery import (
    AlertMessage,
    Channel,
    DeliveryAttempt,
    RetryPolicy,
    deliver_all,
)
from backend.alerts.models import (
    Acknowledgement,
    AlertChannel,
    AlertState,
    Delivery,
    EvaluatorLease,
    Notification,
    Silence,
    Slo,
)
from backend.alerts.slos import ChannelSpec, SloFile, SloSpec, format_duration, load_slo_file
from backend.config import Settings
from backend.db import Database, insert_for
from backend.exporter.health import count_delivery
from backend.text import clean_tree, text_problem
from backend.timefmt import rfc3339

log = logging.getLogger(__name__)

LEASE_NAME = "alert-evaluator"
# The delivery log keeps this much history (Alertmanager refreshes add rows every pass).
DELIVERY_LOG_RETENTION_S = 30 * 86400.0
# A claimed notice whose sender vanished is taken over after this long.
STALE_CLAIM_S = 600.0
# A notice whose channels all gave up within a pass is offered again by later passes.
MAX_REDELIVERIES = 8
REDELIVERY_BASE_S = 30.0
REDELIVERY_MAX_DELAY_S = 3600.0


def default_holder() -> str:
    """An id for this evaluator process: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


# ---- SLOs and channels ----------------------------------------------------------------------------


def slo_file_for(settings: Settings) -> SloFile:
    """The SLO file in force: settings.slos_file, else the shipped defaults."""
    return load_slo_file(settings.slos_file)


def sync_from_file(*, db_session: Session, slo_file: SloFile, now: float | None = None) -> None:
    """Make the file's SLOs and channels the database's file-sourced rows (API rows stay)."""
    now = time.time() if now is None else now
    names = {s.name for s in slo_file.slos}
    existing = {s.name: s for s in db_session.scalars(select(Slo))}
    for spec in slo_file.slos:
        row = existing.get(spec.name)
        if row is not None and row.source == "api":
            continue  # an admin's edit through the API wins over the file
        _write_slo(db_session, row, spec, source="file", now=now)
    for name, row in existing.items():
        if row.source == "file" and name not in names:
            db_session.delete(row)
    wanted = {(owner, c.name): c for owner, specs in slo_file.channels.items() for c in specs}
    current = {(c.owner, c.name): c for c in db_session.scalars(select(AlertChannel))}
    for (owner, name), spec in wanted.items():
        row = current.get((owner, name))
        if row is not None and row.source == "api":
            continue
        _write_channel(db_session, row, owner, spec, source="file", now=now)
    for key, row in current.items():
        if row.source == "file" and key not in wanted:
            db_session.delete(row)
    db_session.flush()


def _write_slo(
    db_session: Session, row: Slo | None, spec: SloSpec, *, source: str, now: float
) -> Slo:
    if row is None:
        row = Slo(name=spec.name, created_at=now)
        db_session.add(row)
    row.owner, row.component, row.indicator = spec.owner, spec.component, spec.indicator
    row.objective, row.enabled, row.source = spec.objective, spec.enabled, source
    row.spec, row.updated_at = spec.to_doc(), now
    return row


def _write_channel(
    db_session: Session,
    row: AlertChannel | None,
    owner: str,
    spec: ChannelSpec,
    *,
    source: str,
    now: float,
) -> AlertChannel:
    if row is None:
        row = AlertChannel(owner=owner, name=spec.name, created_at=now)
        db_session.add(row)
    row.kind, row.target, row.options = spec.kind, spec.target, dict(spec.options)
    row.enabled, row.source = spec.enabled, source
    return row


def list_slos(*, db_session: Session, owner: str | None = None) -> list[SloSpec]:
    """Every SLO (optionally one owner's), as validated specs."""
    stmt = select(Slo).order_by(Slo.owner, Slo.name)
    if owner:
        stmt = stmt.where(Slo.owner == owner)
    return [SloSpec.model_validate(row.spec) for row in db_session.scalars(stmt)]


def get_slo(*, db_session: Session, name: str) -> SloSpec | None:
    """One SLO by name, or None."""
    row = db_session.get(Slo, name)
    return SloSpec.model_validate(row.spec) if row else None


def put_slo(*, db_session: Session, spec: SloSpec, now: float | None = None) -> SloSpec:
    """Create or replace an SLO through the admin API (it then overrides the file's)."""
    _write_slo(
        db_session, db_session.get(Slo, spec.name), spec, source="api", now=now or time.time()
    )
    db_session.flush()
    return spec


def delete_slo(*, db_session: Session, name: str) -> bool:
    """Remove an SLO; its firing alerts resolve on the next evaluation."""
    row = db_session.get(Slo, name)
    if row is None:
        return False
    db_session.delete(row)
    db_session.flush()
    return True


def put_channel(
    *, db_session: Session, owner: str, spec: ChannelSpec, now: float | None = None
) -> AlertChannel:
    """Create or replace one of an owner's channels through the admin API."""
    row = db_session.scalar(
        select(AlertChannel).where(AlertChannel.owner == owner, AlertChannel.name == spec.name)
    )
    row = _write_channel(db_session, row, owner, spec, source="api", now=now or time.time())
    db_session.flush()
    return row


def channels_for(*, db_session: Session, owner: str) -> list[Channel]:
    """The enabled channels of one owner."""
    rows = db_session.scalars(
        select(AlertChannel)
        .where(AlertChannel.owner == owner, AlertChannel.enabled.is_(True))
        .order_by(AlertChannel.name)
    )
    return [
        Channel(
            kind=r.kind, target=r.target, owner=r.owner, name=r.name, options=dict(r.options or {})
        )  # type: ignore[arg-type]
        for r in rows
    ]


def list_channels(*, db_session: Session, owner: str | None = None) -> list[AlertChannel]:
    """Channel rows (optionally of one owner)."""
    stmt = select(AlertChannel).order_by(AlertChannel.owner, AlertChannel.name)
    if owner:
        stmt = stmt.where(AlertChannel.owner == owner)
    return list(db_session.scalars(stmt))


# ---- lease ------------------------------------------------------------------------------------


def acquire_lease(
    *,
    db_session: Session,
    holder: str,
    ttl_s: float,
    now: float | None = None,
    name: str = LEASE_NAME,
) -> bool:
    """Take or renew the evaluator lease; True when this holder has it until now + ttl_s."""
    now = time.time() if now is None else now
    ins = insert_for(db_session, EvaluatorLease).values(
        name=name, holder=None, expires_at=0.0, acquired_at=None
    )
    db_session.execute(ins.on_conflict_do_nothing(index_elements=["name"]))
    db_session.commit()
    # One conditional UPDATE: the database serialises racing writers on the row.
    result = db_session.execute(
        update(EvaluatorLease)
        .where(
            EvaluatorLease.name == name,
            or_(
                EvaluatorLease.holder == holder,
                EvaluatorLease.holder.is_(None),
                EvaluatorLease.expires_at < now,
            ),
        )
        .values(holder=holder, expires_at=now + ttl_s, acquired_at=now)
    )
    db_session.commit()
    return result.rowcount == 1


def release_lease(*, db_session: Session, holder: str, name: str = LEASE_NAME) -> None:
    """Give the lease up (only if this holder has it)."""
    db_session.execute(
        update(EvaluatorLease)
        .where(EvaluatorLease.name == name, EvaluatorLease.holder == holder)
        .values(holder=None, expires_at=0.0)
    )
    db_session.commit()


# ---- silences and acks ------------------------------------------------------------------------


SILENCE_COMMENT_MAX = 4096
SILENCE_MATCHER_MAX = {"owner": 128, "component": 64, "model": 256}


def check_silence(
    *,
    owner: str | None,
    component: str | None,
    model: str | None,
    starts_at: float,
    ends_at: float,
    comment: str | None,
    created_by: str | None,
    now: float,
    max_duration_s: float,
) -> dict[str, Any]:
    """The one set of silence rules (REST and dashboard): the row's fields, or ValueError."""
    matchers: dict[str, str | None] = {}
    for key, value in (("owner", owner), ("component", component), ("model", model)):
        value = (value or "").strip() or None
        if value is not None:
            if len(value) > SILENCE_MATCHER_MAX[key]:
                raise ValueError(f"{key} is longer than {SILENCE_MATCHER_MAX[key]} characters")
            clean_tree(value, key)
        matchers[key] = value
    if not any(matchers.values()):
        raise ValueError("a silence needs at least one matcher (owner, component or model)")
    comment = (comment or "").strip()
    if not comment:
        raise ValueError(
            "a silence needs a comment that says why (whoever reads it later needs it)"
        )
    if len(comment) > SILENCE_COMMENT_MAX:
        raise ValueError(f"the comment is longer than {SILENCE_COMMENT_MAX} characters")
    clean_tree(comment, "comment")
    if not created_by:
        raise ValueError("a silence needs an actor: the name of the admin token that creates it")
    if not (math.isfinite(starts_at) and math.isfinite(ends_at)):
        raise ValueError("a silence's start and end must be finite times")
    if ends_at <= starts_at:
        raise ValueError("a silence must end after it starts")
    if ends_at <= now:
        raise ValueError("that silence would already have ended; give an end in the future")
    limit = format_duration(max_duration_s)
    if ends_at - starts_at > max_duration_s:
        raise ValueError(
            f"a silence may last at most {limit} (ETT_SILENCE_MAX_DURATION_S); this one lasts "
            f"{format_duration(round(ends_at - starts_at))}. Make it shorter and renew it if needed"
        )
    if starts_at - now > max_duration_s:
        raise ValueError(f"a silence may start at most {limit} from now")
    return {
        **matchers,
        "starts_at": float(starts_at),
        "ends_at": float(ends_at),
        "comment": comment,
        "created_by": created_by,
    }


def create_silence(
    *,
    db_session: Session,
    owner: str | None,
    component: str | None,
    model: str | None,
    starts_at: float,
    ends_at: float,
    comment: str | None,
    created_by: str,
    max_duration_s: float,
    now: float | None = None,
) -> Silence:
    """Mute notices of alerts matching every given matcher, from starts_at to ends_at.

    The rules are check_silence's; created_by is the name of the token that asks.
    """
    now = time.time() if now is None else now
    fields = check_silence(
        owner=owner,
        component=component,
        model=model,
        starts_at=starts_at,
        ends_at=ends_at,
        comment=comment,
        created_by=created_by,
        now=now,
        max_duration_s=max_duration_s,
    )
    row = Silence(**fields, created_at=now)
    db_session.add(row)
    db_session.flush()
    return row


def list_silences(
    *, db_session: Session, active_at: float | None = None, owner: str | None = None
) -> list[Silence]:
    """Silences, newest first; only those in force at active_at when given."""
    stmt = select(Silence).order_by(Silence.created_at.desc(), Silence.id.desc())
    if active_at is not None:
        stmt = stmt.where(Silence.starts_at <= active_at, Silence.ends_at > active_at)
    if owner:
        stmt = stmt.where(or_(Silence.owner == owner, Silence.owner.is_(None)))
    return list(db_session.scalars(stmt))


def expire_silence(*, db_session: Session, silence_id: int, now: float | None = None) -> bool:
    """End a silence now; False if there is no such silence."""
    row = db_session.get(Silence, silence_id)
    if row is None:
        return False
    now = time.time() if now is None else now
    row.ends_at = min(row.ends_at, now)
    row.starts_at = min(row.starts_at, row.ends_at)
    db_session.flush()
    return True


def silence_matches(silence: Silence, labels: dict[str, str]) -> bool:
    """Whether every matcher the silence sets equals the alert's label."""
    for key in ("owner", "component", "model"):
        want = getattr(silence, key)
        if want is not None and labels.get(key) != want:
            return False
    return True


def silenced_by(silences: Sequence[Silence], labels: dict[str, str]) -> Silence | None:
    """The first silence that mutes an alert with these labels, or None."""
    return next((s for s in silences if silence_matches(s, labels)), None)


def acknowledge(
    *,
    db_session: Session,
    fingerprint: str,
    acknowledged_by: str,
    comment: str = "",
    now: float | None = None,
) -> Acknowledgement | None:
    """Record that someone took the alert's current episode in hand; None if no such alert.

    acknowledged_by is the name of the token that asks; a bad comment raises ValueError.
    """
    comment = (comment or "").strip()
    if len(comment) > SILENCE_COMMENT_MAX:
        raise ValueError(f"the comment is longer than {SILENCE_COMMENT_MAX} characters")
    clean_tree(comment, "comment")
    if not acknowledged_by:
        raise ValueError("an acknowledgement needs an actor: the name of the admin token")
    if text_problem(fingerprint) or len(fingerprint) > 64:
        return None
    state = db_session.get(AlertState, fingerprint)
    if state is None:
        return None
    ack = Acknowledgement(
        fingerprint=fingerprint,
        episode=state.episode,
        acknowledged_by=acknowledged_by,
        comment=comment,
        created_at=time.time() if now is None else now,
    )
    db_session.add(ack)
    db_session.flush()
    return ack


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


def _message_from(doc: dict[str, Any]) -> AlertMessage:
    return AlertMessage(**doc)


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
    if slo is not None:
        # Kept so a resolved notice can still be written after the SLO is deleted.
        doc["spec"] = slo.to_doc()
    return doc


def _evaluation_of(state: AlertState) -> Evaluation:
    d = state.details or {}
    return Evaluation(
        value=state.value,
        jobs=int(d.get("jobs", 0)),
        model=state.model,
        models=list(d.get("models", [])),
        job_drivers=list(d.get("job_drivers", [])),
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
    if slo is not None:
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
    live_ev = ev or _evaluation_of(state)
    since = new["breach_started_at"] or state.fired_at or now
    if new["state"] == "firing":
        if new["episode"] != state.episode:
            new["notified_firing"] = False
        # Queued once per episode; a silence that lapses while firing lets it through then.
        if not new["notified_firing"] and slo is not None and silenced_by(silences, labels) is None:
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
        db_session.commit()
    except OperationalError as exc:
        # SQLite answers a lost write race with "database is locked": the other writer won.
        db_session.rollback()
        report.errors.append(f"{state.fingerprint}: {exc.__class__.__name__}; skipped")
        return
    if new["state"] != old:
        report.transitions.append((state.fingerprint, old, str(new["state"])))
    db_session.expire(state)


def _spec_of_state(db_session: Session, state: AlertState) -> SloSpec | None:
    """The SLO an alert came from: the live one, else the copy kept in its details."""
    spec = get_slo(db_session=db_session, name=state.slo_name)
    if spec is not None:
        return spec
    doc = (state.details or {}).get("spec")
    return SloSpec.model_validate(doc) if doc else None


def _ensure_state(db_session: Session, slo: SloSpec, ev: Evaluation, now: float) -> AlertState:
    fp = fingerprint(slo.name, slo.owner, ev.model)
    state = db_session.get(AlertState, fp)
    if state is not None:
        return state
    stmt = (
        insert_for(db_session, AlertState)
        .values(
            fingerprint=fp,
            slo_name=slo.name,
            owner=slo.owner,
            component=slo.component,
            model=ev.model or slo.model,
            severity=slo.severity,
            labels=alert_labels(slo, ev.model),
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


def evaluate_slos(
    *, db_session: Session, settings: Settings, now: float, report: EvaluationReport
) -> None:
    """Measure every enabled SLO and advance its alert instances (the caller holds the lease)."""
    specs = {s.name: s for s in list_slos(db_session=db_session) if s.enabled}
    silences = list_silences(db_session=db_session, active_at=now)
    seen: set[str] = set()
    report.slos = len(specs)
    cache: dict[Any, Any] = {}
    for slo in specs.values():
        try:
            evaluations = [
                e for e in indicators.measure(db_session, slo, now, cache) if e.value is not None
            ]
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
    alerts_history.record_day_ends(db_session=db_session, specs=list(specs.values()), now=now)
    # Instances that no longer measure anything (SLO gone, disabled, model without data) resolve.
    stale = db_session.scalars(
        select(AlertState).where(AlertState.state.in_(("pending", "firing")))
    ).all()
    for state in stale:
        if state.fingerprint in seen:
            continue
        _step(
            db_session,
            specs.get(state.slo_name),
            state,
            None,
            now,
            silences,
            settings.public_url,
            report,
        )


def _record_attempt(db: Database, notices: Sequence[tuple[int | None, str | None]]) -> Any:
    """A delivery-log writer: one row per attempt and per notice the attempt carried."""

    def record(a: DeliveryAttempt) -> None:
        count_delivery(channel_kind=a.channel.kind, outcome=a.outcome)
        with db.session() as s:
            for notification_id, fp in notices:
                s.add(
                    Delivery(
                        notification_id=notification_id,
                        fingerprint=fp,
                        owner=a.channel.owner,
                        channel=a.channel.name or a.channel.kind,
                        kind=a.channel.kind,
                        attempt=a.attempt,
                        at=a.started_at,
                        duration_s=a.duration_s,
                        outcome=a.outcome,
                        status_code=a.status_code,
                        error=(a.error or None) and a.error[:4000],
                    )
                )
            s.commit()

    return record


def _claimable(now: float) -> Any:
    return or_(
        Notification.status == "pending",
        (Notification.status == "retry") & (Notification.retry_at <= now),
        (Notification.status == "sending") & (Notification.claimed_at < now - STALE_CLAIM_S),
    )


def _channel_name(channel: Channel) -> str:
    return channel.name or channel.kind


def _redelivery_delay(redeliveries: int) -> float:
    """Seconds before a later pass offers the notice again: doubling, capped at an hour."""
    return min(REDELIVERY_MAX_DELAY_S, REDELIVERY_BASE_S * 2**redeliveries)


def _outcome(
    notes: list[Notification], channels: list[Channel], results: list[Any]
) -> dict[str, Any]:
    """The notices' next state from this round's results and the channels that had them before."""
    delivered = set(notes[0].delivered_channels or [])
    delivered |= {_channel_name(r.channel) for r in results if r.ok}
    # A channel that rejected the notice (4xx) will not take it later either.
    owed = sorted(
        _channel_name(r.channel)
        for r in results
        if not r.ok and not (r.attempts and r.attempts[-1].outcome == "rejected")
    )
    redeliveries = notes[0].redeliveries
    state: dict[str, Any] = {"delivered_channels": sorted(delivered) or None}
    if owed and redeliveries < MAX_REDELIVERIES:
        return {
            **state,
            "status": "retry",
            "pending_channels": owed,
            "retry_at": time.time() + _redelivery_delay(redeliveries),
            "redeliveries": redeliveries + 1,
        }
    if not channels:
        status = "undeliverable"
    elif {_channel_name(c) for c in channels} <= delivered:
        status = "sent"
    else:
        status = "partial" if delivered else "failed"
    return {**state, "status": status, "pending_channels": owed or None, "retry_at": None}


def _claim(db: Database, holder: str) -> dict[str, list[Notification]]:
    """Claim every sendable notice (a conditional UPDATE each), grouped by owner."""
    now = time.time()
    with db.session() as s:
        ids = s.scalars(
            select(Notification.id).where(_claimable(now)).order_by(Notification.id)
        ).all()
        by_owner: dict[str, list[Notification]] = {}
        for nid in ids:
            claimed = s.execute(
                update(Notification)
                .where(Notification.id == nid, _claimable(now))
                .values(status="sending", claimed_by=holder, claimed_at=now)
            )
            s.commit()
            if claimed.rowcount != 1:
                continue  # another sender has it
            note = s.get(Notification, nid)
            if note is not None:
                by_owner.setdefault(note.owner, []).append(note)
        return by_owner


def _send_owner(
    db: Database,
    settings: Settings,
    owner: str,
    notes: list[Notification],
    policy: RetryPolicy | None,
) -> tuple[int, int]:
    """One batch per owner and channel (like an Alertmanager group); returns (sent, not sent)."""
    with db.session() as s:
        channels = channels_for(db_session=s, owner=owner)
    # Notices re-offered by a later pass go only to the channels that still owe them.
    groups: dict[tuple[Any, ...], list[Notification]] = {}
    for n in notes:
        key = (
            tuple(n.pending_channels or ()),
            tuple(n.delivered_channels or ()),
            n.redeliveries,
        )
        groups.setdefault(key, []).append(n)
    sent = not_sent = 0
    for (owed, _, _), group in groups.items():
        chans = [c for c in channels if _channel_name(c) in owed] if owed else channels
        results = deliver_all(
            [_message_from(n.message) for n in group],
            chans,
            policy=policy,
            on_attempt=_record_attempt(db, [(n.id, n.fingerprint) for n in group]),
            external_url=settings.public_url,
        )
        nxt = _outcome(group, channels, results)
        if nxt["status"] == "undeliverable":
            log.warning("%d alert notices for owner %s: no channel to send to", len(group), owner)
        elif nxt["status"] == "retry":
            log.warning(
                "alert notices for owner %s: %s will be tried again in a later pass",
                owner,
                ", ".join(nxt["pending_channels"]),
            )
        with db.session() as s:
            s.execute(
                update(Notification)
                .where(Notification.id.in_([n.id for n in group]))
                .values(**nxt, finished_at=time.time())
            )
            s.commit()
        if nxt["status"] == "sent":
            sent += len(group)
        else:
            not_sent += len(group)
    return sent, not_sent


def dispatch_pending(
    *,
    db: Database,
    settings: Settings,
    holder: str,
    policy: RetryPolicy | None = None,
    report: EvaluationReport | None = None,
) -> EvaluationReport:
    """Send every queued notice this holder can claim; owners in parallel, each its own batch."""
    report = report or EvaluationReport(evaluated=False, holder=holder)
    by_owner = _claim(db, holder)
    if not by_owner:
        return report
    with ThreadPoolExecutor(
        max_workers=min(8, len(by_owner)), thread_name_prefix="ett-alert-owner"
    ) as pool:
        futures = [
            pool.submit(_send_owner, db, settings, owner, notes, policy)
            for owner, notes in by_owner.items()
        ]
        for fut in futures:
            try:
                sent, failed = fut.result()
            except Exception as exc:  # logged and counted; the claim goes stale and is retried
                log.exception("alert dispatch failed")
                report.errors.append(f"dispatch: {exc}")
                continue
            report.delivered += sent
            report.failed += failed
    return report


def refresh_alertmanager(
    *, db: Database, settings: Settings, now: float, policy: RetryPolicy | None = None
) -> None:
    """Re-push notified firing alerts to Alertmanager channels so they do not time out there."""
    with db.session() as s:
        firing = s.scalars(
            select(AlertState).where(
                AlertState.state == "firing", AlertState.notified_firing.is_(True)
            )
        ).all()
        by_owner: dict[str, list[AlertState]] = {}
        for st in firing:
            by_owner.setdefault(st.owner, []).append(st)
        plans = []
        specs = {spec.name: spec for spec in list_slos(db_session=s)}
        # Alertmanager resolves an alert it has not heard of for a while; keep it alive
        # (wall-clock time: Alertmanager knows no other).
        ttl = max(180.0, 3 * settings.alert_eval_interval_s)
        for owner, states in by_owner.items():
            chans = [c for c in channels_for(db_session=s, owner=owner) if c.kind == "alertmanager"]
            if not chans:
                continue
            msgs = []
            for st in states:
                spec = specs.get(st.slo_name)
                if spec is None:
                    continue
                msg = build_message(
                    spec,
                    _evaluation_of(st),
                    status="firing",
                    since=st.breach_started_at or st.fired_at or now,
                    ended_at=None,
                    public_url=settings.public_url,
                )
                msgs.append(dataclasses.replace(msg, ends_at=time.time() + ttl))
            if msgs:
                plans.append((chans, msgs))
    for chans, msgs in plans:
        deliver_all(
            msgs,
            chans,
            policy=policy,
            on_attempt=_record_attempt(db, [(None, m.fingerprint) for m in msgs]),
            external_url=settings.public_url,
        )


def evaluate_once(
    *,
    db: Database,
    settings: Settings,
    holder: str | None = None,
    now: float | None = None,
    policy: RetryPolicy | None = None,
    lease_ttl_s: float | None = None,
    sync_file: bool = True,
    release: bool = False,
) -> EvaluationReport:
    """One pass: take the lease, sync the SLO file, evaluate, then send the queued notices."""
    holder = holder or default_holder()
    now = time.time() if now is None else now
    ttl = lease_ttl_s if lease_ttl_s is not None else max(30.0, 3 * settings.alert_eval_interval_s)
    report = EvaluationReport(evaluated=False, holder=holder)
    with db.session() as s:
        if not acquire_lease(db_session=s, holder=holder, ttl_s=ttl, now=time.time()):
            return report
        if sync_file:
            sync_from_file(db_session=s, slo_file=slo_file_for(settings), now=now)
            s.commit()
        evaluate_slos(db_session=s, settings=settings, now=now, report=report)
        purge_deliveries(db_session=s, older_than=time.time() - DELIVERY_LOG_RETENTION_S)
        s.commit()
    report.evaluated = True
    try:
        dispatch_pending(db=db, settings=settings, holder=holder, policy=policy, report=report)
        refresh_alertmanager(db=db, settings=settings, now=now, policy=policy)
    finally:
        if release:
            with db.session() as s:
                release_lease(db_session=s, holder=holder)
    return report


# ---- reads ------------------------------------------------------------------------------------


def list_alerts(
    *,
    db_session: Session,
    owner: str | None = None,
    state: str | None = None,
    component: str | None = None,
    model: str | None = None,
    slo: str | None = None,
    limit: int = 500,
) -> list[AlertState]:
    """Alert instances, firing first, then by most recent change."""
    stmt = select(AlertState)
    if owner:
        stmt = stmt.where(AlertState.owner == owner)
    if state:
        stmt = stmt.where(AlertState.state == state)
    if component:
        stmt = stmt.where(AlertState.component == component)
    if model:
        stmt = stmt.where(AlertState.model == model)
    if slo:
        stmt = stmt.where(AlertState.slo_name == slo)
    # Ordered in SQL: the limit must keep the firing alerts, not any `limit` rows.
    rank = case(
        {"firing": 0, "pending": 1, "resolved": 2, "inactive": 3},
        value=AlertState.state,
        else_=9,
    )
    recent = func.coalesce(AlertState.fired_at, AlertState.last_evaluated_at, 0.0)
    return list(
        db_session.scalars(stmt.order_by(rank, recent.desc(), AlertState.fingerprint).limit(limit))
    )


def acks_for(
    *, db_session: Session, fingerprints: Sequence[str]
) -> dict[str, list[Acknowledgement]]:
    """Acknowledgements per alert, newest first."""
    if not fingerprints:
        return {}
    out: dict[str, list[Acknowledgement]] = {}
    for ack in db_session.scalars(
        select(Acknowledgement)
        .where(Acknowledgement.fingerprint.in_(list(fingerprints)))
        .order_by(Acknowledgement.created_at.desc())
    ):
        out.setdefault(ack.fingerprint, []).append(ack)
    return out


def list_deliveries(
    *, db_session: Session, owner: str | None = None, limit: int = 200
) -> list[Delivery]:
    """The delivery log, newest first."""
    stmt = select(Delivery).order_by(Delivery.at.desc(), Delivery.id.desc()).limit(limit)
    if owner:
        stmt = stmt.where(Delivery.owner == owner)
    return list(db_session.scalars(stmt))


def purge_deliveries(*, db_session: Session, older_than: float) -> int:
    """Drop delivery-log rows older than a time; returns how many."""
    res = db_session.execute(delete(Delivery).where(Delivery.at < older_than))
    return int(res.rowcount or 0)


# ---- read documents (the REST answers and the owners page) ----------------------------------------


def alert_doc(state: AlertState, acks: list[Any], silenced: bool) -> dict[str, Any]:
    """One alert instance as the API and the owners page show it (RFC 3339 times)."""
    details = state.details or {}
    return {
        "fingerprint": state.fingerprint,
        "slo": state.slo_name,
        "owner": state.owner,
        "component": state.component,
        "model": state.model,
        "severity": state.severity,
        "state": state.state,
        "value": state.value,
        "objective": state.objective,
        "labels": state.labels,
        "breach_started_at": rfc3339(state.breach_started_at),
        "fired_at": rfc3339(state.fired_at),
        "resolved_at": rfc3339(state.resolved_at),
        "last_evaluated_at": rfc3339(state.last_evaluated_at),
        "episode": state.episode,
        "notified": state.notified_firing,
        "silenced": silenced,
        "jobs": details.get("jobs", 0),
        "models": details.get("models", []),
        "job_drivers": details.get("job_drivers", []),
        "acknowledged": bool(acks and acks[0].episode == state.episode),
        "acknowledgements": [
            {
                "by": a.acknowledged_by,
                "comment": a.comment,
                "episode": a.episode,
                "at": rfc3339(a.created_at),
            }
            for a in acks
        ],
    }


# The range datetime can show; a stored time outside it (an absurd silence) is shown clamped.
_MIN_SHOWN = datetime(1, 1, 2, tzinfo=UTC).timestamp()
_MAX_SHOWN = datetime(9999, 12, 31, tzinfo=UTC).timestamp()


def shown_time(ts: float | None) -> str | None:
    """RFC 3339 for any stored time: out-of-range times are clamped, NaN reads as None."""
    if ts is None or math.isnan(ts):
        return None
    return rfc3339(min(max(ts, _MIN_SHOWN), _MAX_SHOWN))


def silence_doc(s: Silence, now: float) -> dict[str, Any]:
    """One silence as the API and the owners page show it (safe for any stored row)."""
    return {
        "id": s.id,
        "matchers": {k: getattr(s, k) for k in ("owner", "component", "model") if getattr(s, k)},
        "starts_at": shown_time(s.starts_at),
        "ends_at": shown_time(s.ends_at),
        "active": bool(s.starts_at <= now < s.ends_at),
        "comment": s.comment,
        "created_by": s.created_by,
        "created_at": shown_time(s.created_at),
    }


def alert_docs(
    *, db_session: Session, states: list[AlertState], now: float
) -> list[dict[str, Any]]:
    """Alert documents with their acknowledgements and whether a silence mutes them now."""
    acks = acks_for(db_session=db_session, fingerprints=[s.fingerprint for s in states])
    silences = list_silences(db_session=db_session, active_at=now)
    return [
        alert_doc(
            s,
            acks.get(s.fingerprint, []),
            silenced_by(silences, dict(s.labels or {})) is not None,
        )
        for s in states
    ]


def slo_doc(spec: SloSpec) -> dict[str, Any]:
    """One SLO as the API shows it: the spec plus its window in words."""
    return {**spec.to_doc(), "window": format_duration(spec.window_s)}


def owner_status(*, db_session: Session, owner: str, now: float, public_url: str) -> dict[str, Any]:
    """An owner's SLOs with state, alerts, active silences, channels and recent deliveries."""
    slos = list_slos(db_session=db_session, owner=owner)
    states = list_alerts(db_session=db_session, owner=owner)
    alerts = alert_docs(db_session=db_session, states=states, now=now)
    by_slo: dict[str, list[dict[str, Any]]] = {}
    for a in alerts:
        by_slo.setdefault(a["slo"], []).append(a)
    slo_rows = []
    for spec in slos:
        instances = by_slo.get(spec.name, [])
        worst = next((i["state"] for i in instances if i["state"] == "firing"), None) or next(
            (i["state"] for i in instances if i["state"] == "pending"), "ok"
        )
        slo_rows.append(
            {
                **slo_doc(spec),
                "status": worst if spec.enabled else "disabled",
                "instances": [
                    {k: i[k] for k in ("fingerprint", "model", "state", "value", "fired_at")}
                    for i in instances
                ],
            }
        )
    firing = [a for a in alerts if a["state"] in ("firing", "pending")]
    channels = list_channels(db_session=db_session, owner=owner)
    deliveries = list_deliveries(db_session=db_session, owner=owner, limit=50)
    return {
        "owner": owner,
        "status": "firing"
        if any(a["state"] == "firing" for a in firing)
        else ("pending" if firing else "ok"),
        "evaluated_at": rfc3339(max((s.last_evaluated_at for s in states), default=None)),
        "slos": slo_rows,
        "alerts": firing,
        "silences": [
            silence_doc(s, now)
            for s in list_silences(db_session=db_session, active_at=now, owner=owner)
        ],
        "channels": [{"name": c.name, "kind": c.kind, "enabled": c.enabled} for c in channels],
        "deliveries": [
            {
                "at": rfc3339(d.at),
                "channel": d.channel,
                "kind": d.kind,
                "attempt": d.attempt,
                "outcome": d.outcome,
                "status_code": d.status_code,
                "error": d.error,
                "fingerprint": d.fingerprint,
            }
            for d in deliveries
        ],
        "dashboard": f"{public_url.rstrip('/')}/owners?{urlencode({'owner': owner})}",
    }
