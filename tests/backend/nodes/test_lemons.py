"""Lemon nodes found by the documented test (backend/metrics/lemons.py) in generated fleets:
precision and recall >= 0.9 at the documented threshold (docs/RELIABILITY.md "Lemon nodes")."""

from __future__ import annotations

import pytest
from scipy.stats import poisson

from backend.metrics import lemons
from tests.backend.nodes.fleetgen import generate

SEEDS = range(10)


@pytest.mark.parametrize(("k", "mu"), [(1, 1.0), (3, 0.5), (10, 2.0), (5, 5.0), (50, 10.0)])
def test_poisson_tail_matches_scipy(k: int, mu: float) -> None:
    assert lemons.poisson_sf(k, mu) == pytest.approx(poisson.sf(k - 1, mu), rel=1e-9)


def test_precision_and_recall_on_generated_fleets() -> None:
    tp = fp = fn = 0
    for seed in SEEDS:
        fleet = generate(seed)
        found = {v.host for v in lemons.lemon_test(fleet.per_host()) if v.lemon}
        tp += len(found & fleet.lemons)
        fp += len(found - fleet.lemons)
        fn += len(fleet.lemons - found)
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    print(f"lemon nodes over {len(SEEDS)} fleets: precision {precision:.3f} recall {recall:.3f}")
    assert precision >= 0.9 and recall >= 0.9, (precision, recall, tp, fp, fn)


def test_a_healthy_fleet_has_no_lemons_and_little_exposure_is_not_tested() -> None:
    fleet = generate(99, lemons=0)
    assert not any(v.lemon for v in lemons.lemon_test(fleet.per_host()))
    (v,) = lemons.lemon_test([("new", 1.0, 5)])
    assert v.p_value is None and not v.lemon  # under MIN_EXPOSURE_DAYS: untested
