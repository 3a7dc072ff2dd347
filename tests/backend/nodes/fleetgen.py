"""A generated fleet for the lemon-node test: healthy hosts with ordinary random failures and a
few injected lemons that fail `lemon_factor` times as often."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class Fleet:
    """Attempts as (hosts, start day, days, failed), and the injected lemons."""

    lemons: set[str]
    attempts: list[tuple[list[str], float, float, bool]] = field(default_factory=list)

    def per_host(self) -> list[tuple[str, float, int]]:
        """(host, exposure node-days, failures it was part of) per host."""
        exposure: dict[str, float] = defaultdict(float)
        failures: dict[str, int] = defaultdict(int)
        for hosts, _start, days, failed in self.attempts:
            for h in hosts:
                exposure[h] += days
                failures[h] += int(failed)
        return [(h, exposure[h], failures[h]) for h in sorted(exposure)]


def generate(
    seed: int,
    *,
    hosts: int = 200,
    lemons: int = 8,
    attempts: int = 9000,
    base_rate: float = 0.02,
    lemon_factor: float = 10.0,
    horizon_days: float = 90.0,
) -> Fleet:
    """Attempts on 1-4 random hosts for 0.2-2 days; each host adds its hazard (per node-day)."""
    rng = random.Random(seed)
    names = [f"node-{i:03d}" for i in range(hosts)]
    fleet = Fleet(lemons=set(rng.sample(names, lemons)))
    for _ in range(attempts):
        on = rng.sample(names, rng.choice((1, 1, 2, 2, 4)))
        days = rng.uniform(0.2, 2.0)
        hazard = sum(base_rate * (lemon_factor if h in fleet.lemons else 1.0) for h in on)
        failed = rng.random() < 1.0 - math.exp(-hazard * days)
        fleet.attempts.append((on, rng.uniform(0, horizon_days - days), days, failed))
    return fleet
