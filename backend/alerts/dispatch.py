"""Delivery of queued notices: claim each one (a conditional UPDATE), send per owner, log attempts.

A notice whose channels all failed is offered again by later passes (doubling delay, capped); a
claim whose sender vanished is taken over after STALE_CLAIM_S.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session

from backend.alerts.delivery import AlertMessage, Channel, DeliveryAttempt, RetryPolicy, deliver_all
from backend.alerts.evaluation import EvaluationReport
from backend.alerts.models import Delivery, Notification
from backend.alerts.store import channels_for
from backend.config import Settings
from backend.db import Database
from backend.health import count_delivery

log = logging.getLogger(__name__)

# The delivery log keeps this much history (Alertmanager refreshes add rows every pass).
DELIVERY_LOG_RETENTION_S = 30 * 86400.0
# A claimed notice whose sender vanished is taken over after this long.
STALE_CLAIM_S = 600.0
# A notice whose channels all gave up within a pass is offered again by later passes.
MAX_REDELIVERIES = 8
REDELIVERY_BASE_S = 30.0
REDELIVERY_MAX_DELAY_S = 3600.0


def record_attempt(db: Database, notices: Sequence[tuple[int | None, str | None]]) -> Any:
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


def _message_from(doc: dict[str, Any]) -> AlertMessage:
    return AlertMessage(**doc)


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
            on_attempt=record_attempt(db, [(n.id, n.fingerprint) for n in group]),
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


def purge_deliveries(*, db_session: Session, older_than: float) -> int:
    """Drop delivery-log rows older than a time; returns how many."""
    res = db_session.execute(delete(Delivery).where(Delivery.at < older_than))
    return int(res.rowcount or 0)
