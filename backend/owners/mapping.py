"""The owner mapping document, its validation, and owner/system resolution (no database)."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from backend.ett.catalogue import (
    CATALOGUE,
    COMPONENTS,
    CUSTOM_PREFIX,
    PHASE_COMPONENTS,
    WASTE_KINDS,
    resolve_phase,
)

DEFAULT_FILE = Path(__file__).with_name("default_owners.yaml")
UNOWNED = "unowned"
WASTED = "wasted_training"


class ComponentOwner(BaseModel):
    """The system and team behind one Level-2 component."""

    model_config = ConfigDict(extra="forbid")

    system: str | None = Field(default=None, max_length=128)
    owner: str | None = Field(default=None, max_length=128)


class PhaseOwner(BaseModel):
    """A phase's component (fixed for catalogue phases, free for `custom.*`), system and team."""

    model_config = ConfigDict(extra="forbid")

    component: str | None = None
    system: str | None = Field(default=None, max_length=128)
    owner: str | None = Field(default=None, max_length=128)


class OwnerMapping(BaseModel):
    """The whole mapping: one entry per component, plus per-phase overrides."""

    model_config = ConfigDict(extra="forbid")

    components: dict[str, ComponentOwner] = Field(default_factory=dict)
    phases: dict[str, PhaseOwner] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> OwnerMapping:
        unknown = sorted(set(self.components) - set(COMPONENTS))
        if unknown:
            raise ValueError(f"unknown component(s) {unknown}; components are {list(COMPONENTS)}")
        for name in COMPONENTS:
            self.components.setdefault(name, ComponentOwner())
        for name, entry in self.phases.items():
            entry.component = _phase_component(name, entry.component)
        return self


def _phase_component(name: str, given: str | None) -> str:
    """The component a phase lands in; catalogue phases keep theirs, custom ones need one."""
    if not name or len(name) > 128:
        raise ValueError(f"phase name {name!r}: 1 to 128 characters")
    if name in WASTE_KINDS:
        fixed: str | None = WASTED
    elif name.startswith(CUSTOM_PREFIX):
        if given is None or given not in PHASE_COMPONENTS:
            raise ValueError(
                f"phase {name!r}: a custom phase needs a component, one of {sorted(PHASE_COMPONENTS)}"
            )
        return given
    else:
        res = resolve_phase(name)
        if not res.known:
            raise ValueError(
                f"unknown phase {name!r}: use a catalogue phase, a waste kind {list(WASTE_KINDS)} "
                f"or a custom phase named '{CUSTOM_PREFIX}<name>'"
            )
        fixed = res.component
    if given is not None and given != fixed:
        raise ValueError(f"phase {name!r} lands in {fixed!r} by the catalogue, not {given!r}")
    assert fixed is not None
    return fixed


def parse_document(data: Any) -> OwnerMapping:
    """Validate a mapping document (raises pydantic.ValidationError on a bad one)."""
    return OwnerMapping.model_validate(data or {})


def load_file(path: Path) -> OwnerMapping:
    """Read a YAML (.yaml/.yml) or TOML (.toml) mapping file."""
    return _load_cached(str(path), path.stat().st_mtime_ns)


@lru_cache(maxsize=8)
def _load_cached(path: str, _mtime_ns: int) -> OwnerMapping:
    text = Path(path).read_text(encoding="utf-8")
    data = tomllib.loads(text) if path.endswith(".toml") else yaml.safe_load(text)
    return parse_document(data)


def _ancestry(phase: str) -> list[str]:
    parts = phase.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]


class Resolver:
    """Owner and system of an attributed interval (component, phase), from one mapping."""

    def __init__(self, mapping: OwnerMapping) -> None:
        self.mapping = mapping
        self._cache: dict[tuple[str, str | None], tuple[str | None, str | None]] = {}

    def _lookup(self, component: str, phase: str | None) -> tuple[str | None, str | None]:
        key = (component, phase)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        comp = self.mapping.components.get(component, ComponentOwner())
        owner, system = comp.owner, comp.system
        found_owner = found_system = False
        for name in _ancestry(phase) if phase else []:
            entry = self.mapping.phases.get(name)
            if entry is None:
                continue
            if not found_owner and entry.owner is not None:
                owner, found_owner = entry.owner, True
            if not found_system and entry.system is not None:
                system, found_system = entry.system, True
        self._cache[key] = (owner, system)
        return owner, system

    def owner(self, component: str, phase: str | None) -> str:
        """The owning team ('unowned' when the mapping names none)."""
        return self._lookup(component, phase)[0] or UNOWNED

    def system(self, component: str, phase: str | None) -> str:
        """The infrastructure system ('unowned' when the mapping names none)."""
        return self._lookup(component, phase)[1] or UNOWNED

    def custom_phase_components(self) -> dict[str, str]:
        """`custom.*` phase -> component, in the form the ETT engine's `custom_phases` takes."""
        return {
            name: e.component
            for name, e in self.mapping.phases.items()
            if name.startswith(CUSTOM_PREFIX) and e.component
        }

    def rows(self) -> list[dict[str, Any]]:
        """The mapping flattened: one row per component, catalogue phase, waste kind, custom phase."""
        out: list[dict[str, Any]] = []
        for comp in COMPONENTS:
            out.append(self._row(comp, None))
        names = [e.phase for e in CATALOGUE] + list(WASTE_KINDS)
        names += sorted(n for n in self.mapping.phases if n not in names)
        for name in names:
            entry = self.mapping.phases.get(name)
            if name in WASTE_KINDS:
                comp = WASTED
            elif entry is not None and entry.component:
                comp = entry.component
            else:
                comp = resolve_phase(name).component
            out.append(self._row(comp, name))
        return out

    def _row(self, component: str, phase: str | None) -> dict[str, Any]:
        owner, system = self._lookup(component, phase)
        return {"phase": phase, "component": component, "system": system, "owner": owner}


def as_document(mapping: OwnerMapping) -> dict[str, Any]:
    """The mapping as plain JSON (what GET answers and PUT accepts)."""
    return mapping.model_dump(mode="json")
