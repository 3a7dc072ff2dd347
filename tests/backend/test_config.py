"""Settings: an enumerated setting takes only its values, and a bad one stops `ett` at start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError

from backend import runtime
from backend.config import LogLevel, RecomputeMode, ServeRole, Settings

ETT = str(Path(sys.executable).with_name("ett"))

ENUMERATED = {
    "recompute_mode": ("inlnie", RecomputeMode),
    "serve_role": ("worekr", ServeRole),
    "log_level": ("loud", LogLevel),
}


@pytest.mark.parametrize("name", sorted(ENUMERATED))
def test_a_bad_value_is_refused_naming_the_allowed_ones(name: str, tmp_path: Path) -> None:
    bad, allowed = ENUMERATED[name]
    with pytest.raises(ValidationError) as err:
        Settings(home=tmp_path, **{name: bad})
    text = str(err.value)
    assert name in text and all(f"'{value}'" in text for value in get_args(allowed))
    for value in get_args(allowed):  # every allowed value, in any case
        assert getattr(Settings(home=tmp_path, **{name: f" {value.upper()} "}), name) == value


def test_the_process_roles_are_the_serve_role_values() -> None:
    assert runtime.ROLES == get_args(ServeRole) == ("all", "api", "worker")


def test_ett_stops_at_start_on_a_misspelt_setting(tmp_path: Path) -> None:
    """ETT_RECOMPUTE_MODE=inlnie once meant background, silently; now no command runs."""
    env = {**os.environ, "ETT_HOME": str(tmp_path), "ETT_DATABASE_URL": ""}
    env["ETT_RECOMPUTE_MODE"] = "inlnie"
    out = subprocess.run(
        [ETT, "db", "upgrade"], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2, out
    assert "ETT_RECOMPUTE_MODE='inlnie'" in out.stderr
    assert "'inline' or 'background'" in out.stderr and "Traceback" not in out.stderr
    env["ETT_RECOMPUTE_MODE"] = "Inline"
    ok = subprocess.run(
        [ETT, "db", "upgrade"], env=env, capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0, ok.stderr
