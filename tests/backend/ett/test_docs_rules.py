"""docs/ACCOUNTING.md and docs/PROTOCOL.md stand on their own and follow the code."""

from __future__ import annotations

import re
from pathlib import Path

from backend.ett.catalogue import CATALOGUE
from backend.ett.timeline import WARNING_RULES
from ingest.schema import EVENT_TYPES

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_accounting_lists_every_warning_with_its_rule_text() -> None:
    text = (DOCS / "ACCOUNTING.md").read_text()
    for code, message in WARNING_RULES.items():
        assert f"| `{code}` | {message} |" in text, code


def test_protocol_documents_every_event_type_and_catalogue_phase() -> None:
    text = (DOCS / "PROTOCOL.md").read_text()
    for etype in EVENT_TYPES:
        assert f"### `{etype}`" in text, etype
    for entry in CATALOGUE:
        leaf = entry.phase.split(".")[-1]
        assert re.search(rf"`(\w+\.)?\.?{re.escape(leaf)}`", text), entry.phase


def test_rules_docs_name_files_that_exist_and_never_point_outside_the_repo() -> None:
    root = DOCS.parent
    for name in ("ACCOUNTING.md", "PROTOCOL.md"):
        text = (DOCS / name).read_text()
        assert "../shared" not in text and "SPEC.md" not in text
        for path in re.findall(r"`((?:backend|ingest|tests)/[\w/]+\.py)`", text):
            assert (root / path).is_file(), path
    readme = (root / "README.md").read_text()
    assert "docs/ACCOUNTING.md" in readme and "docs/PROTOCOL.md" in readme
    assert "../shared" not in readme
