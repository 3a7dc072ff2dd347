"""The evaluator keeps every episode: fired and resolved times, the peak while firing (highest
for a ceiling, lowest for a floor), the silence that held it; hand-worked value sequences."""

from __future__ import annotations

from sqlalchemy import select

from backend.alerts import acks, evaluation, read, silences, store
from backend.alerts.content import Evaluation
from backend.alerts.models import AlertEpisode
from backend.alerts.slos import SloSpec

T = 1_800_000_000.0
MIN = 60.0
DAY_S = 86400.0


def _run(database, settings, spec: SloSpec, values: list[float], step_s: float = 10 * MIN):
    """One pass per value, `step_s` apart from T; answers the episode rows."""
    with database.session() as s:
        store.put_slo(db_session=s, spec=spec)
        s.commit()
        for i, v in enumerate(values):
            report = evaluation.EvaluationReport(evaluated=True, holder="test")
            evaluation.advance(
                s,
                settings,
                [spec],
                lambda _slo, v=v: [Evaluation(value=v, jobs=5)],
                T + i * step_s,
                report,
                live=False,
            )
        return list(s.scalars(select(AlertEpisode).order_by(AlertEpisode.episode)))


def _spec(**kw) -> SloSpec:
    doc = {
        "name": "share",
        "owner": "compiler",
        "component": "pt2_compile",
        "indicator": "gpu_time_share",
        "objective": 5.0,
        "window": "1d",
        "for": "10m",
        **kw,
    }
    return SloSpec.model_validate(doc)


def test_ceiling_episodes_keep_start_end_and_peak(database, settings):
    # t=0 pending (6 > 5), t=10m fires (breach lasted `for`), peaks at 9, resolves at 4 (t=40m);
    # a second breach fires again at t=70m and is still firing at the end.
    values = [6.0, 7.0, 9.0, 8.0, 4.0, 3.0, 6.5, 7.5, 7.0]
    first, second = _run(database, settings, _spec(), values)
    assert (first.episode, first.breach_started_at, first.fired_at) == (1, T, T + 10 * MIN)
    assert first.resolved_at == T + 40 * MIN
    assert first.peak == 9.0
    assert (second.episode, second.breach_started_at) == (2, T + 60 * MIN)
    assert second.fired_at == T + 70 * MIN and second.resolved_at is None
    assert second.peak == 7.5
    with database.session() as s:
        docs = read.episode_docs(db_session=s, start=T, end=T + DAY_S)
        # A range that ends before the second one fired holds the first only.
        early = read.episode_docs(db_session=s, start=T, end=T + 65 * MIN)
        # ...and one that starts after the first resolved, the second only.
        late = read.episode_docs(db_session=s, start=T + 45 * MIN, end=T + DAY_S)
    assert [d["episode"] for d in docs] == [2, 1]
    assert [d["episode"] for d in early] == [1]
    assert [d["episode"] for d in late] == [2]
    assert docs[1]["resolved_at"] is not None and docs[0]["resolved_at"] is None
    # Queued, not yet sent (no dispatch ran).
    assert docs[1]["notice"] == "pending" and docs[1]["notified"] == "none yet (pending)"


def test_floor_peak_is_the_lowest_and_a_silence_and_an_ack_are_kept(database, settings):
    spec = _spec(
        name="floor",
        owner="fleet",
        component="effective_training",
        indicator="ett_floor",
        objective=80.0,
        hysteresis=0.0,
    )
    with database.session() as s:
        silence = silences.create_silence(
            db_session=s,
            owner="fleet",
            component=None,
            model=None,
            starts_at=T,
            ends_at=T + 2 * 3600,
            comment="maintenance",
            created_by="ops",
            max_duration_s=settings.silence_max_duration_s,
            now=T,
        )
        s.commit()
        silence_id = silence.id
    (episode,) = _run(database, settings, spec, [79.0, 75.0, 71.0, 78.0, 85.0])
    assert episode.peak == 71.0
    assert episode.silenced_by == silence_id
    assert episode.resolved_at == T + 40 * MIN
    with database.session() as s:
        acks.acknowledge(
            db_session=s, fingerprint=episode.fingerprint, acknowledged_by="oncall", now=T
        )
        s.commit()
        (doc,) = read.episode_docs(db_session=s, start=T, end=T + DAY_S)
    assert doc["silenced"] is True and doc["notified"] == "none: silenced"
    assert doc["acknowledged_by"] == ["oncall"]
