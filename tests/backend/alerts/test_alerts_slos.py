"""SLO specs: parsing, validation, breach and recovery with hysteresis, the shipped file."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from backend.alerts.content import Evaluation, build_message, fingerprint
from backend.alerts.slos import SloSpec, load_slo_file
from backend.ett.catalogue import COMPONENTS
from backend.timefmt import format_duration, parse_duration


def _spec(**kw: object) -> SloSpec:
    doc: dict[str, object] = {
        "name": "s",
        "owner": "o",
        "component": "scheduling",
        "indicator": "gpu_time_share",
        "objective": 10.0,
    }
    doc.update(kw)
    return SloSpec.model_validate(doc)


def test_durations() -> None:
    assert parse_duration("90s") == 90 and parse_duration("30m") == 1800
    assert parse_duration("6h") == 21600 and parse_duration("7d") == 604800
    assert parse_duration(12) == 12.0 and parse_duration("1.5h") == 5400
    for bad in ("soon", "-5m", "5 parsecs"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    assert format_duration(604800) == "7d" and format_duration(86400) == "1d"
    assert format_duration(5400) == "90m" and format_duration(45) == "45s"


def test_spec_validation() -> None:
    s = _spec(window="1d", **{"for": "10m"})
    assert s.window_s == 86400 and s.for_s == 600
    with pytest.raises(ValidationError, match="percentile"):
        _spec(indicator="duration_percentile")
    with pytest.raises(ValidationError, match="percentile only"):
        _spec(percentile=90)
    with pytest.raises(ValidationError, match="failure_kind"):
        _spec(indicator="failures_per_job", failure_kind="meteor")
    assert _spec(indicator="failures_per_job").failure_kind == "any"
    with pytest.raises(ValidationError, match="percentage"):
        _spec(objective=140)
    with pytest.raises(ValidationError):
        _spec(name="has space")
    with pytest.raises(ValidationError):
        _spec(colour="red")
    assert _spec(indicator="ett_floor", objective=80).per_model is True


def test_breach_and_hysteresis() -> None:
    ceiling = _spec(objective=10.0, hysteresis=0.2)
    assert ceiling.breached(10.01) and not ceiling.breached(10.0)
    # Back under the objective is not enough: it must reach 8.0 (20% below) to resolve.
    assert not ceiling.recovered(9.0) and ceiling.recovered(8.0)
    floor = _spec(indicator="ett_floor", objective=80.0, hysteresis=0.05)
    assert floor.breached(79.9) and not floor.breached(80.0)
    assert not floor.recovered(82.0) and floor.recovered(84.0)
    assert _spec(indicator="ett_floor", objective=98.0, hysteresis=0.05).recovered(100.0)


def test_fingerprint_is_stable_and_scoped() -> None:
    assert fingerprint("a", "o", None) == fingerprint("a", "o", None)
    assert (
        len({fingerprint("a", "o", None), fingerprint("a", "o", "m"), fingerprint("b", "o", None)})
        == 3
    )


def test_message_words() -> None:
    spec = _spec(
        indicator="duration_percentile",
        percentile=90,
        objective=300,
        component="trainer_init",
        phase="trainer_init.first_batch",
    )
    ev = Evaluation(
        value=610.0,
        jobs=3,
        model="m1",
        job_drivers=[{"job_id": "j1", "model": "m1", "value": 900.0}],
    )
    msg = build_message(spec, ev, status="firing", since=0.0, ended_at=None, public_url="http://x/")
    assert (
        msg.title
        == "o: trainer_init.first_batch p90 per-attempt duration for model m1 is 10.2 min, objective <= 5.0 min"
    )
    assert "Jobs driving it: j1 (15.0 min)." in msg.text
    assert (
        msg.generator_url == "http://x/model?model=m1&start=1969-12-25"
    )  # one 7d window before the breach
    assert msg.labels == {
        "alertname": "s",
        "owner": "o",
        "component": "trainer_init",
        "indicator": "duration_percentile",
        "severity": "warning",
        "phase": "trainer_init.first_batch",
        "model": "m1",
    }


def test_shipped_slos_cover_the_paper_components() -> None:
    shipped = load_slo_file()
    assert shipped.channels == {}
    assert all(s.component in COMPONENTS for s in shipped.slos if not s.is_live)
    assert all(s.component == "any" for s in shipped.slos if s.is_live)
    # a smoke job never pages: every fleet and model indicator carries a volume guard
    assert all(s.min_jobs >= 3 and s.min_gpu_hours >= 10 for s in shipped.slos if not s.is_live)
    owners = {s.owner for s in shipped.slos}
    assert {
        "scheduler",
        "cluster",
        "trainer",
        "data",
        "checkpoint",
        "compiler",
        "publishing",
    } <= owners
    indicators = {s.indicator for s in shipped.slos}
    assert indicators == {
        "gpu_time_share",
        "duration_percentile",
        "failures_per_job",
        "ett_floor",
        "live_hung",
        "live_crash_loop",
        "live_restart_storm",
        "live_silent",
        "lemon_nodes",
    }
