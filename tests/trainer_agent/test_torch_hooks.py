"""PyTorch hooks: compile spans (and after reset), DCP checkpoint and restore spans, first batch."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.trainer_agent.fake_ingest import FakeIngest
from trainer_agent import Agent

pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parents[2]


def wait_for_checkpoints(agent: Agent, server: FakeIngest, count: int) -> list[dict[str, Any]]:
    """Future callbacks may run just after result() returns: wait briefly for them."""
    import time

    deadline = time.monotonic() + 10
    agent.flush(timeout=5)
    while len(server.of_type("checkpoint")) < count and time.monotonic() < deadline:
        time.sleep(0.05)
        agent.flush(timeout=1)
    return server.of_type("checkpoint")


@pytest.fixture
def agent(fake_ingest: FakeIngest, tmp_path: Path) -> Iterator[Agent]:
    agent = Agent(
        "job-torch",
        0,
        fake_ingest.url,
        "secret",
        spool_dir=tmp_path / "spool",
        install_handlers=False,
        heartbeat_s=0,
        rank=0,
    )
    yield agent
    agent.close(timeout=5)


@pytest.fixture
def hooks(agent: Agent) -> Iterator[Any]:
    from trainer_agent import torch_hooks

    installed = torch_hooks.install(agent)
    yield installed
    installed.uninstall()


def test_importing_the_agent_does_not_import_torch() -> None:
    code = "import sys, trainer_agent, trainer_agent.torch_hooks; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert out.stdout.strip() == "False"


def test_compile_spans_survive_dynamo_reset(
    agent: Agent, hooks: Any, fake_ingest: FakeIngest
) -> None:
    import torch

    torch._dynamo.reset()

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2 + 1

    compiled = torch.compile(f, backend="eager")
    compiled(torch.ones(3))
    compiled(torch.ones(3))  # cached: no new compilation
    torch._dynamo.reset()  # clears every callback; ours must come back
    compiled2 = torch.compile(f, backend="eager", dynamic=False)
    compiled2(torch.ones(3))
    compiled2(torch.ones(5))  # a new shape: a recompile, with a reason
    assert agent.flush(timeout=5)
    phases = fake_ingest.of_type("phase")
    names = [p["phase"] for p in phases]
    assert names.count("pt2_compile") == 2, names
    assert names.count("pt2_compile.recompile") == 1, names
    assert all(p["end"] > p["start"] for p in phases)
    recompiled = [r for r in hooks.compile_records if r.get("recompile_reason")]
    assert "size mismatch" in recompiled[0]["recompile_reason"]


def test_dcp_save_async_save_and_load(
    agent: Agent, hooks: Any, fake_ingest: FakeIngest, tmp_path: Path
) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    state = {"w": torch.randn(64, 64)}
    for i in range(3):
        agent.step(cursor=i + 1)
    dcp.save(state, checkpoint_id=str(tmp_path / "ck1"), no_dist=True)
    future = dcp.async_save(state, checkpoint_id=str(tmp_path / "ck2"), no_dist=True)
    result = future.result() if hasattr(future, "result") else future.upload_completion.result()
    del result
    agent.step(cursor=4)
    restored = {"w": torch.zeros(64, 64)}
    dcp.load(restored, checkpoint_id=str(tmp_path / "ck1"), no_dist=True)
    assert torch.equal(restored["w"], state["w"])
    checkpoints = wait_for_checkpoints(agent, fake_ingest, 2)
    assert len(checkpoints) == 2
    for ck in checkpoints:
        assert ck["ok"] is True and ck["cursor"] == 3
        assert ck["start"] <= ck["blocking_end"] <= ck["committed"]
        assert ck["bytes"] > 64 * 64 * 4
    phases = [p["phase"] for p in fake_ingest.of_type("phase")]
    assert [p for p in phases if p != "trainer_init.process_start"] == ["checkpoint_restore"]


def test_failed_save_is_reported_and_reraised(
    agent: Agent, hooks: Any, fake_ingest: FakeIngest, tmp_path: Path
) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(dcp.CheckpointException):
        dcp.save({"w": torch.ones(2)}, checkpoint_id=str(blocker / "ck"), no_dist=True)
    assert agent.flush(timeout=5)
    assert [c["ok"] for c in fake_ingest.of_type("checkpoint")] == [False]


def test_uninstall_restores_originals(agent: Agent) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from trainer_agent import torch_hooks

    before = (dcp.save, dcp.async_save, dcp.load, dist.init_process_group)
    installed = torch_hooks.install(agent)
    assert dcp.save is not before[0]
    installed.uninstall()
    assert (dcp.save, dcp.async_save, dcp.load, dist.init_process_group) == before


def test_first_batch_and_process_group(
    agent: Agent, hooks: Any, fake_ingest: FakeIngest, tmp_path: Path
) -> None:
    import time

    import torch.distributed as dist

    from trainer_agent.torch_hooks import timed_first_batch

    def slow_loader() -> Iterator[int]:
        time.sleep(0.2)
        yield from range(5)

    assert list(timed_first_batch(agent, slow_loader())) == [0, 1, 2, 3, 4]
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    dist.destroy_process_group()
    assert agent.flush(timeout=5)
    spans = {p["phase"]: p["end"] - p["start"] for p in fake_ingest.of_type("phase")}
    assert spans["trainer_init.first_batch"] >= 0.2
    assert "trainer_init.process_group" in spans


def test_async_save_response_form_commits_on_upload(
    agent: Agent, hooks: Any, fake_ingest: FakeIngest, tmp_path: Path
) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

    stager = DefaultStager(
        StagingOptions(
            use_pinned_memory=False,
            use_shared_memory=False,
            use_async_staging=True,
            use_non_blocking_copy=False,
        )
    )
    agent.step(cursor=10)
    response = dcp.async_save(
        {"w": torch.ones(256, 256)},
        checkpoint_id=str(tmp_path / "ck"),
        no_dist=True,
        async_stager=stager,
    )
    assert isinstance(response, dcp.state_dict_saver.AsyncSaveResponse)
    response.upload_completion.result()
    stager.close()
    (ck,) = wait_for_checkpoints(agent, fake_ingest, 1)
    assert ck["ok"] is True and ck["cursor"] == 10 and ck["bytes"] > 256 * 256 * 4
    assert ck["start"] <= ck["blocking_end"] <= ck["committed"]
