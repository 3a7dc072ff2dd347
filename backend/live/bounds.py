"""Learned bounds: how long a phase, or a gap between cursor advances, may last before it is a hang.

Pure arithmetic, no database (the learning service is backend.live.learn). One statistic for
every key (docs/ALERTS.md, "Learned bounds"):

    bound = max(floor_s, factor x p-th percentile of the samples)

with the percentile linear between closest ranks (numpy's default), over the most recent
`max_samples` samples of a (model, phase, variant). A key needs `min_samples` samples of the
model before its own bound is used; until then the fleet's bound for the key (the same
statistic over every model's samples); for each, the key itself, then its nearest ancestor
(`pt2_compile` for `pt2_compile.autotune`), and for a warm compile the cold one; then a shipped
default. An override in the SLO file beats them all.

Keys: a phase of the catalogue (or a custom phase) by its span's full duration, start to end
(an open span's age is its full extent, hidden parts included); `pt2_compile` and its
sub-stages apart for a cold cache (the job's first attempt, before any checkpoint restore) and a
warm one (a recovery: a later attempt, or after a `checkpoint_restore`); `hardware_setup`, from
an attempt's start to its first span; and `loop`, the longest time between two consecutive
cursor advances of an attempt, closed by a later advance (a hang that was killed adds none).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LOOP = "loop"
HARDWARE_SETUP = "hardware_setup"
# Time between two spans with nothing open, before the loop: instrumentation gaps, judged against
# a fixed default (never learned) so that uninstrumented set-up code does not page.
UNATTRIBUTED = "unattributed"
COLD, WARM = "cold", "warm"
COMPILE_FAMILY = "pt2_compile"

# Where a bound came from, in the order the lookup tries them.
SOURCES = ("override", "model", "fleet", "default")


@dataclass(frozen=True, slots=True)
class BoundRules:
    """The statistic and how much history it needs (ETT_BOUNDS_* settings)."""

    percentile: float = 95.0
    factor: float = 3.0
    floor_s: float = 60.0
    min_samples: int = 10
    max_samples: int = 200


# Shipped defaults (seconds) for a key no history speaks for yet: generous, so that a new model
# is never paged for a slow but healthy start. The loop's is the former fixed 30-minute
# `no_progress_while_alive` objective.
DEFAULTS_S: dict[tuple[str, str], float] = {
    (LOOP, ""): 1800.0,
    (HARDWARE_SETUP, ""): 1800.0,
    (UNATTRIBUTED, ""): 1800.0,
    ("trainer_init", ""): 3600.0,
    ("checkpoint_restore", ""): 3600.0,
    (COMPILE_FAMILY, COLD): 7200.0,
    (COMPILE_FAMILY, WARM): 3600.0,
    ("shutdown", ""): 1800.0,
    ("publish", ""): 3600.0,
}
# Sub-stages of trainer_init (process group, first batch, ...) and anything else unknown.
SUB_STAGE_DEFAULT_S = 1800.0
OTHER_DEFAULT_S = 3600.0


@dataclass(frozen=True, slots=True)
class Sample:
    """One observed duration of a key in a finished job."""

    phase: str
    variant: str
    value_s: float
    at: float
    attempt: int


@dataclass(frozen=True, slots=True)
class Bound:
    """The bound in force for one key, with where it came from and its samples' summary."""

    phase: str
    variant: str
    bound_s: float
    source: str
    samples: int = 0
    quantile_s: float | None = None
    scope: str = ""  # the model it was learned from, "" for the fleet, the pattern of an override
    # The key whose samples it was learned from: the phase itself, an ancestor, or for a warm
    # compile the cold one.
    from_phase: str = ""
    from_variant: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON shape."""
        return {
            "phase": self.phase,
            "variant": self.variant,
            "bound_s": self.bound_s,
            "source": self.source,
            "samples": self.samples,
            "quantile_s": self.quantile_s,
            "scope": self.scope,
            "from_phase": self.from_phase or self.phase,
            "from_variant": self.from_variant if self.from_phase else self.variant,
        }


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile, linear between closest ranks (numpy's default): rank (n - 1) q / 100."""
    xs = sorted(values)
    if not xs:
        raise ValueError("percentile of no values")
    k = (len(xs) - 1) * q / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def learn(values: Sequence[float], rules: BoundRules) -> tuple[float, float] | None:
    """(bound, percentile) of the most recent samples (the last `max_samples` of `values`, in
    time order), or None when there are fewer than `min_samples`."""
    recent = list(values)[-rules.max_samples :] if rules.max_samples > 0 else list(values)
    if len(recent) < max(1, rules.min_samples):
        return None
    q = percentile(recent, rules.percentile)
    return max(rules.floor_s, rules.factor * q), q


def compile_variant(
    phase: str, attempt: int, start: float, first_attempt: int, restored_at: float | None
) -> str:
    """'cold' or 'warm' for a pt2_compile span ('' for any other phase).

    A recovery's compile reads a warm cache: a later attempt than the job's first, or a compile
    after a checkpoint restore of the same attempt.
    """
    if phase != COMPILE_FAMILY and not phase.startswith(COMPILE_FAMILY + "."):
        return ""
    if attempt != first_attempt or (restored_at is not None and restored_at <= start):
        return WARM
    return COLD


def samples_of(result: Mapping[str, Any]) -> list[Sample]:
    """The samples one finished job's stored result gives: its spans, set-ups and loop gaps.

    Spans a failure cut (`unended_spans`: a hang that was killed) give none: they measure how
    long the job hung, not how long the phase takes.
    """
    live = result.get("live") or {}
    attempts = live.get("attempts") or []
    if not attempts:
        return []
    first = min(a["attempt"] for a in attempts)
    restored = {a["attempt"]: a.get("restore_started_at") for a in attempts}
    cut = {(a, p, s) for a, p, s in live.get("unended_spans") or []}
    out: list[Sample] = []
    for attempt, phase, start, end in result.get("spans") or []:
        if (attempt, phase, start) in cut or end < start:
            continue
        variant = compile_variant(phase, attempt, start, first, restored.get(attempt))
        out.append(Sample(phase, variant, end - start, end, attempt))
    for a in attempts:
        if a.get("first_span_at") is not None:
            setup = a["first_span_at"] - a["started_at"]
            if setup >= 0:
                out.append(Sample(HARDWARE_SETUP, "", setup, a["first_span_at"], a["attempt"]))
        gap = a.get("max_advance_gap_s")
        if gap is not None and a.get("last_advance_at") is not None:
            out.append(Sample(LOOP, "", gap, a["last_advance_at"], a["attempt"]))
    return out


def ancestors(phase: str) -> Iterator[str]:
    """Name-ancestors, nearest first: `a.b.c` -> `a.b`, `a`."""
    while "." in phase:
        phase = phase.rsplit(".", 1)[0]
        yield phase


def default_bound(phase: str, variant: str) -> float:
    """The shipped default of a key (its family's, for a sub-stage)."""
    if (phase, variant) in DEFAULTS_S:
        return DEFAULTS_S[(phase, variant)]
    for parent in ancestors(phase):
        if (parent, variant) in DEFAULTS_S:
            return (
                SUB_STAGE_DEFAULT_S if parent == "trainer_init" else DEFAULTS_S[(parent, variant)]
            )
    return OTHER_DEFAULT_S


@dataclass(frozen=True, slots=True)
class Override:
    """A bound set in the SLO file: a phase (or glob, or `loop`), optional variant and model."""

    phase: str
    bound_s: float
    variant: str | None = None
    model: str | None = None

    def matches(self, model: str | None, phase: str, variant: str) -> bool:
        """Whether this override covers the key for the model."""
        if self.model is not None and (model is None or not fnmatch.fnmatchcase(model, self.model)):
            return False
        if self.variant is not None and self.variant != variant:
            return False
        return fnmatch.fnmatchcase(phase, self.phase)

    def specificity(self) -> tuple[int, int, int]:
        """Exact model over a glob over any model; exact phase over a glob; a variant over none."""

        def score(pattern: str | None) -> int:
            if pattern is None:
                return 0
            return 1 if any(c in pattern for c in "*?[") else 2

        return (score(self.model), score(self.phase), 1 if self.variant is not None else 0)


@dataclass
class BoundSet:
    """Every bound one model's live state may need: learned rows, the fleet's, overrides, defaults.

    `learned` maps (scope, phase, variant) to (bound_s, samples, quantile_s), scope being the
    model's name or "" for the fleet (what the learning service stored).
    """

    model: str | None
    learned: Mapping[tuple[str, str, str], tuple[float, int, float | None]] = field(
        default_factory=dict
    )
    overrides: Sequence[Override] = ()
    _cache: dict[tuple[str, str], Bound] = field(default_factory=dict)

    def __call__(self, phase: str, variant: str = "") -> Bound:
        """The bound in force for (phase, variant) of this model."""
        key = (phase, variant)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._lookup(phase, variant)
        return found

    def _lookup(self, phase: str, variant: str) -> Bound:
        hits = [o for o in self.overrides if o.matches(self.model, phase, variant)]
        if hits:
            best = max(hits, key=Override.specificity)
            return Bound(phase, variant, best.bound_s, "override", scope=best.phase)
        if phase != UNATTRIBUTED:
            # A warm compile with no history of its own is judged by the cold one: a warm cache
            # never makes a compile slower.
            variants = (variant, COLD) if variant == WARM else (variant,)
            for scope, source in ((self.model or "", "model"), ("", "fleet")):
                if source == "model" and not self.model:
                    continue
                for name in (phase, *ancestors(phase)):
                    for v in variants:
                        row = self.learned.get((scope, name, v))
                        if row is not None:
                            bound_s, n, q = row
                            return Bound(phase, variant, bound_s, source, n, q, scope, name, v)
        return Bound(phase, variant, default_bound(phase, variant), "default")


def group_samples(
    rows: Iterable[tuple[str | None, str, str, float, float]],
) -> dict[tuple[str, str, str], list[float]]:
    """(model, phase, variant, value_s, at) rows -> values per (scope, phase, variant) in time
    order, each model's own and the fleet's (scope "")."""
    timed: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for model, phase, variant, value, at in rows:
        for scope in {model or "", ""}:
            timed.setdefault((scope, phase, variant), []).append((at, value))
    return {k: [v for _at, v in sorted(xs)] for k, xs in timed.items()}


def learn_all(
    rows: Iterable[tuple[str | None, str, str, float, float]], rules: BoundRules
) -> dict[tuple[str, str, str], tuple[float, int, float]]:
    """Every key with enough samples -> (bound, samples used, percentile)."""
    out: dict[tuple[str, str, str], tuple[float, int, float]] = {}
    for key, values in group_samples(rows).items():
        learned = learn(values, rules)
        if learned is not None:
            used = min(len(values), rules.max_samples) if rules.max_samples > 0 else len(values)
            out[key] = (learned[0], used, learned[1])
    return out
