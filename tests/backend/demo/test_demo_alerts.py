"""The demo replays its past through the real alert evaluator: its episodes match the breached
points of the compliance history, one is acknowledged and one silenced (the real services)."""

from __future__ import annotations

import time

from sqlalchemy import select

from backend.alerts.history import SloHistoryPoint
from backend.alerts.indicators import measure
from backend.alerts.models import Acknowledgement, AlertEpisode, AlertState, Notification, Silence
from backend.alerts.store import list_slos
from backend.demo import fleet, loader


def _load(database, settings) -> fleet.FleetSpec:
    now = time.time()
    spec = fleet.FleetSpec(seed=7, models=4, days=60.0, now=now)
    report = loader.load_in_process(
        database, settings, fleet.fleet_events(spec), now=now, progress=False
    )
    assert report.accepted > 0 and not report.rejected
    assert loader.backfill_slo_history(database, settings, spec.start, now) > 0
    return spec


def _episodes(database) -> list[tuple]:
    with database.session() as s:
        return [
            (e.fingerprint, e.episode, e.fired_at, e.resolved_at, e.peak, e.silenced_by)
            for e in s.scalars(select(AlertEpisode).order_by(AlertEpisode.id))
        ]


def test_replayed_episodes_match_the_breached_history(database, settings, client):
    demo = _load(database, settings)
    with database.session() as s:
        specs = {x.name: x for x in list_slos(db_session=s)}
        episodes = list(s.scalars(select(AlertEpisode).order_by(AlertEpisode.fired_at)))
        points: dict[str, list[tuple[float, bool]]] = {}
        for name, ts, breached in s.execute(
            select(SloHistoryPoint.slo, SloHistoryPoint.ts, SloHistoryPoint.breached).order_by(
                SloHistoryPoint.ts
            )
        ):
            points.setdefault(name, []).append((ts, bool(breached)))
        instances: dict[str, int] = {}
        for state in s.scalars(select(AlertState)):
            instances[state.slo_name] = instances.get(state.slo_name, 0) + 1
        acks = list(s.scalars(select(Acknowledgement)))
        silences = list(s.scalars(select(Silence)))
        firing_notices = {
            (n.fingerprint, n.episode)
            for n in s.scalars(select(Notification).where(Notification.kind == "firing"))
        }
    assert any(e.resolved_at is not None for e in episodes)
    for e in episodes:
        spec = specs[e.slo_name]
        breached = {ts for ts, b in points[e.slo_name] if b}
        # An episode begins at a breached point and fires `for` later, as the evaluator would.
        assert e.breach_started_at in breached, e.slo_name
        assert e.fired_at == e.breach_started_at + spec.for_s
        if e.resolved_at is not None:
            # ...and resolves at a point back inside the objective.
            assert e.resolved_at not in breached
            assert e.resolved_at > e.fired_at
        assert e.peak is not None
        assert (e.peak <= e.objective) if spec.is_floor else (e.peak >= e.objective)
    # An SLO with one instance (no model or host split): each breached point is inside an
    # episode, unless the evaluator's look `for` later found it back inside (then none fires).
    uncovered = 0
    for name, series in points.items():
        if instances.get(name) != 1:
            continue
        spans = [(e.breach_started_at, e.resolved_at) for e in episodes if e.slo_name == name]
        for ts, b in series:
            if b and not any(lo <= ts and (hi is None or ts < hi) for lo, hi in spans):
                uncovered += 1
                spec = specs[name]
                with database.session() as s:
                    (later,) = measure(s, spec, ts + spec.for_s)
                assert not spec.breached(later.value), (name, ts)
    assert uncovered < sum(b for series in points.values() for _ts, b in series)
    # One acknowledged episode and one silenced one, by the demo's on-call.
    assert [a.acknowledged_by for a in acks] == [loader.DEMO_ONCALL]
    (ack,) = acks
    acked = [e for e in episodes if (e.fingerprint, e.episode) == (ack.fingerprint, ack.episode)]
    assert len(acked) == 1 and acked[0].fired_at < ack.created_at
    # The on-call silences an alert as it goes pending; one that went back inside before firing
    # shows in no episode, and the on-call then silences the next one.
    assert silences and all(s.created_by == loader.DEMO_ONCALL for s in silences)
    silenced = [e for e in episodes if e.silenced_by is not None]
    assert silenced
    (silence,) = [s for s in silences if s.id == silenced[0].silenced_by]
    assert {e.silenced_by for e in silenced} == {silence.id}
    assert silence.id == max(s.id for s in silences)
    assert silence.starts_at == silenced[0].breach_started_at
    assert acked[0].fingerprint != silenced[0].fingerprint
    # The silence held the firing notice back; the other episodes queued theirs.
    assert (silenced[0].fingerprint, silenced[0].episode) not in firing_notices or (
        silence.ends_at <= (silenced[0].resolved_at or time.time())
    )
    assert (acked[0].fingerprint, acked[0].episode) in firing_notices

    # REST: resolved alerts exist, and the episodes list says who acknowledged.
    resolved = client.get("/api/v1/alerts", params={"state": "resolved"})
    assert resolved.status_code == 200 and resolved.json()["items"]
    assert all(a["state"] == "resolved" for a in resolved.json()["items"])
    answer = client.get(
        "/api/v1/alerts/episodes", params={"start": episodes[0].fired_at - 1}
    ).json()
    assert answer["total"] == len(episodes) == len(answer["items"])
    by_key = {(i["fingerprint"], i["episode"]): i for i in answer["items"]}
    assert by_key[(ack.fingerprint, ack.episode)]["acknowledged_by"] == [loader.DEMO_ONCALL]
    assert by_key[(silenced[0].fingerprint, silenced[0].episode)]["silenced"] is True
    # The demo configures no channel: the notices were offered and had nowhere to go.
    assert by_key[(ack.fingerprint, ack.episode)]["notified"] == "none: no channel configured"

    # Run again (a resumed demo load): no state steps back in time, nothing is done twice.
    before = _episodes(database)
    loader.backfill_slo_history(database, settings, demo.start, demo.now)
    assert _episodes(database) == before
    with database.session() as s:
        assert len(list(s.scalars(select(Acknowledgement)))) == 1
        assert len(list(s.scalars(select(Silence)))) == len(silences)
