"""Lemon nodes: hosts whose unplanned failures are an outlier given their exposure (pure).

The test (docs/RELIABILITY.md "Lemon nodes"): for each host h with exposure E_h node-days and
k_h unplanned failures it was part of, the rest of the fleet's rate is
lambda = (K - k_h) / (E - E_h), and p_h = P(X >= k_h) for X ~ Poisson(lambda x E_h), the chance a
healthy host with that exposure fails that often. Only hosts with E_h >= MIN_EXPOSURE_DAYS and
k_h >= MIN_FAILURES are tested; p is adjusted over the n hosts tested by Benjamini-Hochberg
(q_h = min over the hosts j at or after h in ascending p of p_j x n / rank_j: the false
discovery rate among the hosts called lemons). A host is a lemon when q_h <= ALPHA; its score
is -log10(q_h).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from backend.ett import catalogue

MIN_EXPOSURE_DAYS = 2.0
MIN_FAILURES = 3
ALPHA = 0.05
# -log10(ALPHA): the lemon-node SLO's objective is this score.
SCORE_THRESHOLD = -math.log10(ALPHA)
MAX_SCORE = 30.0


def is_planned(kind: str | None, cause: str | None = None) -> bool:
    """Whether a failure was planned (preemption, maintenance, a person's cancel): the
    catalogue's rule, by cause where it is known, else by kind."""
    return kind is not None and catalogue.is_planned(kind, cause)


def poisson_sf(k: int, mu: float) -> float:
    """P(X >= k) for X ~ Poisson(mu)."""
    if k <= 0:
        return 1.0
    if mu <= 0:
        return 0.0
    if k <= mu:  # the head is the short sum
        term = math.exp(-mu)
        head = term
        for i in range(1, k):
            term *= mu / i
            head += term
        return max(0.0, 1.0 - head)
    term = math.exp(-mu + k * math.log(mu) - math.lgamma(k + 1))
    total = 0.0
    i = k
    while term > 1e-300 and (total == 0.0 or term > total * 1e-17):
        total += term
        i += 1
        term *= mu / i
    return min(1.0, total)


@dataclass(slots=True)
class LemonVerdict:
    """One host's test: expected failures, the tail probability, adjusted, and the verdict."""

    host: str
    exposure_days: float
    failures: int
    expected: float | None
    p_value: float | None
    q_value: float | None
    score: float | None
    lemon: bool


def lemon_test(
    hosts: Sequence[tuple[str, float, int]],
    *,
    min_exposure_days: float = MIN_EXPOSURE_DAYS,
    min_failures: int = MIN_FAILURES,
    alpha: float = ALPHA,
) -> list[LemonVerdict]:
    """The verdict for each (host, exposure node-days, unplanned failures), in the given order."""
    total_e = sum(e for _, e, _ in hosts)
    total_k = sum(k for _, _, k in hosts)
    tested = [h for h in hosts if h[1] >= min_exposure_days and h[2] >= min_failures]
    n = max(1, len(tested))
    rates: dict[str, tuple[float, float]] = {}
    for host, e, k in tested:
        rest_e, rest_k = total_e - e, total_k - k
        mu = (rest_k / rest_e if rest_e > 0 else 0.0) * e
        rates[host] = (mu, poisson_sf(k, mu))
    q_of: dict[str, float] = {}
    running = 1.0
    for rank, host in sorted(
        ((i + 1, h) for i, h in enumerate(sorted(rates, key=lambda h: (rates[h][1], h)))),
        reverse=True,
    ):
        running = min(running, rates[host][1] * n / rank)
        q_of[host] = running
    out = []
    for host, e, k in hosts:
        if host not in rates:
            out.append(LemonVerdict(host, e, k, None, None, None, None, False))
            continue
        mu, p = rates[host]
        q = q_of[host]
        score = MAX_SCORE if q <= 0 else min(MAX_SCORE, -math.log10(q))
        out.append(LemonVerdict(host, e, k, mu, p, q, score, q <= alpha))
    return out
