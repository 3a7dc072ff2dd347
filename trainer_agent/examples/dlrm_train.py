"""A small TorchRec DLRM trained on CPU under torchrun, instrumented with trainer_agent.

Each worker: process group (gloo), DistributedModelParallel, torch.compile on the over-arch,
a deterministic synthetic click stream whose cursor counts samples, DCP async checkpoints every
N steps, and a restore of the newest complete checkpoint on (re)start, which replays the samples
seen after it. Failures can be injected: an exception in one attempt, a SIGTERM in another.

Run by `trainer_agent.examples.launch` (which plays the scheduler), or directly:
    ETT_ENDPOINT=... ETT_TOKEN=... ETT_JOB_ID=... torchrun --standalone --nproc-per-node 1 \\
        --max-restarts 2 -m trainer_agent.examples.dlrm_train --ckpt-dir /tmp/ck
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torchrec  # noqa: F401 - imported before install() so its hooks are patched
from torch.distributed.checkpoint.staging import BlockingAsyncStager
from torchrec.datasets.utils import Batch
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.models.dlrm import DLRM, DLRMTrain
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
from torchrec.optim.keyed import KeyedOptimizerWrapper
from torchrec.optim.optimizers import in_backward_optimizer_filter
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

import trainer_agent
from trainer_agent import torch_hooks

DENSE_FEATURES = 13


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options of the example trainer."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--tables", type=int, default=4)
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--ckpt-every", type=int, default=40)
    p.add_argument("--ckpt-dir", type=Path, required=True)
    p.add_argument("--crash-at", type=int, default=-1, help="raise at this step in attempt 0")
    p.add_argument("--sigterm-at", type=int, default=-1, help="SIGTERM at this step in attempt 1")
    p.add_argument("--compile-backend", default=os.environ.get("ETT_EXAMPLE_BACKEND", "inductor"))
    p.add_argument("--window-s", type=float, default=2.0)
    p.add_argument("--no-agent", action="store_true", help="train without instrumentation")
    return p.parse_args(argv)


def synthetic_stream(
    start_step: int, args: argparse.Namespace, keys: list[str]
) -> Iterator[tuple[int, Batch]]:
    """Batches by position: batch i is the same in every attempt, so a restore replays exactly."""
    step = start_step
    while step < args.steps:
        gen = torch.Generator().manual_seed(1_000_003 * step + 17)
        b = args.batch_size
        dense = torch.randn(b, DENSE_FEATURES, generator=gen)
        lengths = torch.randint(1, 4, (len(keys) * b,), generator=gen, dtype=torch.int32)
        values = torch.randint(0, args.rows, (int(lengths.sum()),), generator=gen)
        sparse = KeyedJaggedTensor.from_lengths_sync(keys=keys, values=values, lengths=lengths)
        labels = (dense[:, 0] + 0.1 * torch.randn(b, generator=gen) > 0).float()
        yield step, Batch(dense_features=dense, sparse_features=sparse, labels=labels)
        step += 1


def build_model(args: argparse.Namespace) -> tuple[DLRMTrain, list[str]]:
    """A tiny DLRM with `tables` embedding tables; the over-arch goes through torch.compile."""
    keys = [f"f{i}" for i in range(args.tables)]
    tables = [
        EmbeddingBagConfig(
            name=f"t{i}", embedding_dim=args.dim, num_embeddings=args.rows, feature_names=[keys[i]]
        )
        for i in range(args.tables)
    ]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device("cpu"))
    dlrm = DLRM(
        embedding_bag_collection=ebc,
        dense_in_features=DENSE_FEATURES,
        dense_arch_layer_sizes=[32, args.dim],
        over_arch_layer_sizes=[32, 1],
    )
    # Compile the forward only, so the state_dict keys stay those of the eager module.
    dlrm.over_arch.forward = torch.compile(dlrm.over_arch.forward, backend=args.compile_backend)
    apply_optimizer_in_backward(torch.optim.SGD, ebc.parameters(), {"lr": 0.05})
    return DLRMTrain(dlrm), keys


def latest_checkpoint(ckpt_dir: Path) -> tuple[int, Path] | None:
    """The newest complete DCP checkpoint (its .metadata is written last)."""
    found = []
    for path in ckpt_dir.glob("step_*"):
        if (path / ".metadata").exists():
            found.append((int(path.name.split("_")[1]), path))
    return max(found) if found else None


def main(argv: list[str] | None = None) -> int:
    """Train; returns the process exit code."""
    args = parse_args(argv)
    agent = trainer_agent.init(progress_window_s=args.window_s) if not args.no_agent else None
    if agent is not None:
        torch_hooks.install(agent, torchrec=True)
    phase = agent.phase if agent is not None else _null_phase
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    with phase("trainer_init.device_init"):
        torch.manual_seed(0)
        torch.set_num_threads(1)
    dist.init_process_group("gloo")
    with phase("trainer_init.preprocessing"):
        model, keys = build_model(args)
    dmp = DistributedModelParallel(model, device=torch.device("cpu"))
    with phase("trainer_init.pre_training_setup"):
        dense_opt = KeyedOptimizerWrapper(
            dict(in_backward_optimizer_filter(dmp.named_parameters())),
            lambda params: torch.optim.Adagrad(params, lr=0.05),
        )
        args.ckpt_dir.mkdir(parents=True, exist_ok=True)

    start_step = 0
    found = latest_checkpoint(args.ckpt_dir)
    if found is not None:
        state: dict[str, Any] = {"model": dmp.state_dict(), "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=str(found[1]))  # hooked: checkpoint_restore
        dmp.load_state_dict(state["model"])
        start_step = int(state["step"])

    stream: Iterator[tuple[int, Batch]] = synthetic_stream(start_step, args, keys)
    if agent is not None:
        stream = torch_hooks.timed_first_batch(agent, stream)
    pending = None
    loss = torch.tensor(0.0)
    for step, batch in stream:
        loss, _ = dmp(batch)
        loss.backward()
        dense_opt.step()
        dense_opt.zero_grad()
        done = step + 1
        if agent is not None:
            agent.step(cursor=done * args.batch_size)
        if attempt == 0 and done == args.crash_at:
            raise RuntimeError(f"injected crash at step {done}")
        if attempt == 1 and done == args.sigterm_at:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # the handler ends the process
        if done % args.ckpt_every == 0:
            if pending is not None:
                pending.result()
            state = {"model": dmp.state_dict(), "step": torch.tensor(done)}
            pending = dcp.async_save(
                state,
                checkpoint_id=str(args.ckpt_dir / f"step_{done:06d}"),
                # The default stager cannot copy TorchRec's ShardedTensors; this one can.
                async_stager=BlockingAsyncStager(),
            )
    with phase("shutdown"):
        if pending is not None:
            pending.result()
        dist.destroy_process_group()
    print(
        f"attempt {attempt} finished at step {args.steps}, loss {float(loss.detach()):.4f}",
        flush=True,
    )
    if agent is not None:
        agent.close()
    return 0


class _null_phase:  # noqa: N801 - stands in for agent.phase when running without the agent
    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
