"""Bounds set by hand: the `bounds:` list of the SLO file (docs/ALERTS.md, "Learned bounds").

The SLO file's format (backend/alerts/slos.py) embeds this model; the live state reads the list
itself (only that key), so the live package needs nothing of the alerts package.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from backend.live.bounds import Override
from backend.text import clean_tree
from backend.timefmt import parse_duration


class BoundOverride(BaseModel):
    """A bound set by hand for a phase (or `loop`), optionally one variant and one model (glob)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    phase: str = Field(min_length=1, max_length=128)
    bound_s: float = Field(alias="bound", gt=0)
    variant: Literal["cold", "warm"] | None = None
    model: str | None = Field(default=None, max_length=256)

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        return clean_tree(data, "bound")

    @field_validator("bound_s", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float:
        return parse_duration(v)

    def to_override(self) -> Override:
        """The lookup's form (backend.live.bounds)."""
        return Override(
            phase=self.phase, bound_s=self.bound_s, variant=self.variant, model=self.model
        )


@lru_cache(maxsize=4)
def _read(path: str, _mtime_ns: int) -> tuple[Override, ...]:
    doc = yaml.safe_load(Path(path).read_text()) or {}
    rows = doc.get("bounds") if isinstance(doc, dict) else None
    try:
        return tuple(BoundOverride.model_validate(r).to_override() for r in rows or [])
    except ValidationError as err:
        raise ValueError(f"{path}: bounds: {err}") from err


def overrides_in(path: Path | None) -> tuple[Override, ...]:
    """The overrides of an SLO file (none without one: the shipped file sets none), read again
    when the file changes."""
    if path is None:
        return ()
    try:
        mtime = Path(path).stat().st_mtime_ns
    except OSError:
        return ()
    return _read(str(path), mtime)
