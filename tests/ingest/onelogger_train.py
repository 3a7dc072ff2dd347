"""One attempt of a small PyTorch training loop on CPU, instrumented twice.

NVIDIA OneLogger (nv-one-logger-training-telemetry, its OTel exporter nv-one-logger-otel and the
OpenTelemetry SDK's OTLP/HTTP exporter) reports job `--job` to POST /v1/traces; this project's
agent reports the same loop as job `--twin` to POST /api/v1/events. The agent starts where
OneLogger's application span starts (no process-start span), so both see the same attempt.

    python onelogger_train.py --endpoint URL --token T --job J --twin J2 --attempt 0 \
        --workdir DIR --iterations 120 --checkpoint-at 60 [--crash-after 89]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
from nv_one_logger.api.config import OneLoggerConfig
from nv_one_logger.otel.exporter.otel_exporter import OTelExporter
from nv_one_logger.training_telemetry.api.checkpoint import CheckPointStrategy
from nv_one_logger.training_telemetry.api.config import TrainingTelemetryConfig
from nv_one_logger.training_telemetry.api.context import (
    application,
    checkpoint_load,
    checkpoint_save,
    model_init,
    optimizer_init,
    training_iteration,
    training_loop,
)
from nv_one_logger.training_telemetry.api.training_telemetry_provider import (
    TrainingTelemetryProvider,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

import trainer_agent.agent
from trainer_agent import Agent

EVERY = 10


def main() -> None:
    """Train, save a checkpoint, optionally crash; resume from the checkpoint when one exists."""
    p = argparse.ArgumentParser()
    for name in ("--endpoint", "--token", "--job", "--twin", "--workdir"):
        p.add_argument(name, required=True)
    p.add_argument("--attempt", type=int, required=True)
    p.add_argument("--iterations", type=int, default=120)
    p.add_argument("--checkpoint-at", type=int, default=60)
    p.add_argument("--crash-after", type=int, default=-1)
    args = p.parse_args()
    work = Path(args.workdir)
    ckpt = work / "model.pt"
    # The job's identity for the receiver, as a launcher would export it (docs/OTLP.md).
    os.environ["OTEL_RESOURCE_ATTRIBUTES"] = (
        f"ett.job.id={args.job},ett.attempt={args.attempt},ett.job.owner=scheduler,ett.gpus=1"
    )
    exporter = OTLPSpanExporter(
        endpoint=f"{args.endpoint}/v1/traces", headers={"Authorization": f"Bearer {args.token}"}
    )
    TrainingTelemetryProvider.instance().with_base_config(
        OneLoggerConfig(application_name="mlp", world_size_or_fn=1, session_tag_or_fn=args.job)
    ).with_exporter(OTelExporter(exporter)).configure_provider()
    telemetry = TrainingTelemetryConfig(
        perf_tag_or_fn="mlp",
        log_every_n_train_iterations=EVERY,
        global_batch_size_or_fn=32,
        save_checkpoint_strategy=CheckPointStrategy.SYNC,
    )
    trainer_agent.agent.process_start_time = lambda: None  # the twin starts with application()
    run(args, work, ckpt, telemetry)


@application()
def run(
    args: argparse.Namespace, work: Path, ckpt: Path, telemetry: TrainingTelemetryConfig
) -> None:
    agent = Agent(args.twin, args.attempt, args.endpoint, args.token, spool_dir=work / "spool",
                  rank=0, heartbeat_s=0, job_owner="scheduler", gpus=1)  # fmt: skip
    TrainingTelemetryProvider.instance().set_training_telemetry_config(telemetry)
    torch.manual_seed(0)
    with model_init(), agent.phase("trainer_init.train_module"):
        model = torch.nn.Sequential(
            torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
        )
    with optimizer_init(), agent.phase("trainer_init.optimizer"):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    if ckpt.exists():
        with checkpoint_load(), agent.phase("checkpoint_restore"):
            state = torch.load(ckpt)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start = state["iteration"]
    x, y = torch.randn(4096, 16), torch.randn(4096, 1)
    with training_loop(train_iterations_start=start):
        for it in range(start, args.iterations):
            with training_iteration():
                batch = slice((it * 32) % 4096, (it * 32) % 4096 + 32)
                loss = torch.nn.functional.mse_loss(model(x[batch]), y[batch])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                time.sleep(0.02)  # a step of about 20 ms, so the job spans seconds
            agent.step(it + 1)
            if it + 1 == args.checkpoint_at:
                with checkpoint_save(global_step=it + 1), agent.checkpoint(it + 1):
                    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                "iteration": it + 1}, ckpt)  # fmt: skip
                    time.sleep(0.3)
            if it == args.crash_after:
                raise RuntimeError(f"induced crash after iteration {it}")
    agent.close()


if __name__ == "__main__":
    main()
