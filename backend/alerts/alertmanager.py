"""Keep notified firing alerts alive in Alertmanager, which resolves an alert it stops hearing about."""

from __future__ import annotations

import dataclasses
import time

from sqlalchemy import select

from backend.alerts.content import build_message
from backend.alerts.delivery import RetryPolicy, deliver_all
from backend.alerts.dispatch import record_attempt
from backend.alerts.evaluation import evaluation_of
from backend.alerts.models import AlertState
from backend.alerts.store import channels_for, list_slos
from backend.config import Settings
from backend.db import Database


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
                    evaluation_of(st),
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
            on_attempt=record_attempt(db, [(None, m.fingerprint) for m in msgs]),
            external_url=settings.public_url,
        )
