"""One colour per component, failure kind and Level-1 part, shared by every page and chart."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from backend.ett.catalogue import COMPONENTS, FAILURE_KINDS

# Hues for a component or failure kind the catalogue gains before it is given its own here:
# distinct from every chosen one, and never red.
SPARE_COLORS: tuple[str, ...] = ("#637939", "#8c6d31", "#5254a3", "#ce6dbd", "#6b6ecf", "#9c9ede")


def _every(names: Iterable[str], chosen: Mapping[str, str]) -> dict[str, str]:
    """A colour per name, in the catalogue's order: the chosen one, else the next spare."""
    spare = iter(c for c in SPARE_COLORS if c not in chosen.values())
    return {name: chosen.get(name) or next(spare) for name in names}


# Effective training is the only "good" time: green. Every lost component gets its own hue,
# stable across pages, so a reader learns the legend once. Red means one thing: bad (a
# regression, an SLO breach, a fall in ETT%); no component, failure kind or Level-1 part is red.
_COMPONENT_COLORS: dict[str, str] = {
    "scheduling": "#8c8c8c",
    "hardware_setup": "#9467bd",
    "trainer_init": "#1f77b4",
    "pt2_compile": "#ff7f0e",
    "effective_training": "#2ca02c",
    "wasted_training": "#a6761d",
    "shutdown": "#8c564b",
    "unattributed": "#e377c2",
}
COMPONENT_COLORS: dict[str, str] = _every(COMPONENTS, _COMPONENT_COLORS)

# Wasted training split by kind: shades of the wasted_training ochre.
WASTE_COLORS: dict[str, str] = {
    "replay": "#a6761d",
    "checkpoint_blocking": "#e6c27a",
    "stalled": "#5c410f",
}

_FAILURE_COLORS: dict[str, str] = {
    "preemption": "#17becf",
    "app_error": "#393b79",
    "infra": "#9467bd",
    "induced": "#bcbd22",
    "unknown": "#7f7f7f",
}
FAILURE_COLORS: dict[str, str] = _every(FAILURE_KINDS, _FAILURE_COLORS)

# The four Level-1 parts of lost time (paper Fig. 6 and the compare page).
L1_COLORS: dict[str, str] = {
    "tts": "#1f77b4",
    "recovery": "#7b4173",
    "checkpoint": "#e6c27a",
    "shutdown": "#8c564b",
}

# A component's label is its name in words ("hardware_setup": "Hardware setup") unless set here.
COMPONENT_LABELS: dict[str, str] = {
    c: {"pt2_compile": "PT2 compile"}.get(c) or c.replace("_", " ").capitalize() for c in COMPONENTS
}

# Owners are data (config), so their colours come from a fixed cycle keyed by sorted name.
OWNER_CYCLE: tuple[str, ...] = (
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#79706e",
    "#72b7b2",
    "#b279a2",
    "#ff9da6",
    "#9d755d",
    "#bab0ac",
    "#eeca3b",
)
OTHER_COLOR = "#c7c7c7"
# Bad news only: regressions, breached SLOs, falling trends (style.css .ett-down matches).
BAD_COLOR = "#d62728"
GOOD_COLOR = "#2ca02c"


def component_color(component: str) -> str:
    """The colour of a Level-2 component (or a waste kind); grey for anything unknown."""
    return COMPONENT_COLORS.get(component) or WASTE_COLORS.get(component) or OTHER_COLOR


def owner_colors(owners: list[str]) -> dict[str, str]:
    """A stable colour per owner name (sorted order into the cycle); 'other' is grey."""
    names = sorted({o for o in owners if o != "other"})
    colors = {name: OWNER_CYCLE[i % len(OWNER_CYCLE)] for i, name in enumerate(names)}
    colors["other"] = OTHER_COLOR
    return colors


# Live states (the Live page): green for training, the component hues for start-up and
# checkpointing, red for every bad state (the only thing red means).
LIVE_STATE_COLORS: dict[str, str] = {
    "training": "#2ca02c",
    "checkpointing": "#e6c27a",
    "starting": "#1f77b4",
    "queued": "#8c8c8c",
    "hung": "#d62728",
    "crash_looping": "#b22222",
    "restart_storm": "#e9573f",
    "silent": "#7f1d1d",
    "unknown": "#c7c7c7",
}
