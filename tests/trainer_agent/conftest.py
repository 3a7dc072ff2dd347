"""Fixtures for the trainer agent tests: a scriptable fake ingest API and a fake clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.trainer_agent.fake_ingest import FakeIngest
from tests.trainer_agent.live_server import LiveServer


@pytest.fixture
def fake_ingest() -> Iterator[FakeIngest]:
    """A running fake ingest API on 127.0.0.1 (token: 'secret')."""
    server = FakeIngest()
    yield server
    server.close()


class FakeClock:
    """A settable epoch clock."""

    def __init__(self, start: float = 1_780_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    """A fake epoch clock starting at a fixed instant in 2026."""
    return FakeClock()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A real `ett serve` on a temp SQLite database, with an ingest token (one per test module)."""
    server = LiveServer(tmp_path_factory.mktemp("ett-live"))
    server.start()
    yield server
    server.close()
