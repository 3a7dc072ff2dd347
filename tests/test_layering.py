"""The import-linter contracts of pyproject.toml (docs/ARCHITECTURE.md) hold on the source tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    """lint-imports exits 0: every contract of pyproject.toml (docs/ARCHITECTURE.md) is kept."""
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_architecture_names_files_that_exist() -> None:
    """docs/ARCHITECTURE.md's "where each change goes" points at real files (renames follow)."""
    import re

    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    named = set(
        re.findall(
            r"`((?:backend|ingest|dashboard|tests|trainer_agent)/[\w/.]+\.(?:py|yaml))`", text
        )
    )
    assert len(named) > 30
    assert sorted(p for p in named if not (ROOT / p).is_file()) == []
