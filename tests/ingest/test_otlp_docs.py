"""docs/OTLP.md's OpenTelemetry SDK example, run verbatim against a live `ett serve`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ingest.twins import settled
from tests.trainer_agent.live_server import LiveServer

pytestmark = pytest.mark.slow
DOC = Path(__file__).resolve().parents[2] / "docs" / "OTLP.md"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """`ett serve` on SQLite (the receiver's database paths are covered by the other tests)."""
    server = LiveServer(tmp_path_factory.mktemp("otlp-doc"))
    server.start()
    yield server
    server.close()


def test_the_sdk_example_runs_verbatim(live: LiveServer, tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1, "one python block: the SDK example"
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
    env = {**os.environ, "ETT_ENDPOINT": live.url, "ETT_TOKEN": live.token}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    job = settled(live, "otel-example", want_status="succeeded")
    assert job["phases"]["trainer_init.process_group"]["total_s"] == pytest.approx(0.2, abs=0.1)
    assert job["wasted"]["checkpoint_blocking"] == pytest.approx(0.1, abs=0.08)
    assert job["components"]["effective_training"] > 0.3
    assert live.get("/api/v1/events/rejected?job_id=otel-example") == []
