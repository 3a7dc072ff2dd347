"""Play the scheduler for the DLRM example: job_submitted, torchrun with restarts, job_ended.

    python -m trainer_agent.examples.launch --endpoint http://127.0.0.1:8000 --token T \\
        --job-id dlrm-1 --workdir /tmp/dlrm-1 [--crash-at 90 --sigterm-at 150]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from trainer_agent import Agent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options of the launcher; unknown ones go to the trainer."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", default=os.environ.get("ETT_ENDPOINT"))
    p.add_argument("--token", default=os.environ.get("ETT_TOKEN"))
    p.add_argument("--job-id", required=True)
    p.add_argument("--model", default="dlrm-tiny")
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--max-restarts", type=int, default=2)
    p.add_argument("--label", action="append", default=[], help="key=value, repeatable")
    args, trainer_args = p.parse_known_args(argv)
    args.trainer_args = [a for a in trainer_args if a != "--"]
    return args


def main(argv: list[str] | None = None) -> int:
    """Submit, run torchrun, end the job; returns torchrun's exit code."""
    args = parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    scheduler = Agent(
        args.job_id,
        endpoint=args.endpoint,
        token=args.token,
        spool_dir=args.workdir / "spool",
        report_attempt=False,
        report_progress=False,
        heartbeat_s=0,
        install_handlers=False,
    )
    labels = dict(item.split("=", 1) for item in args.label)
    labels.setdefault("platform", "torchrec")
    scheduler.job_submitted(args.model, gpus=args.nproc, labels=labels)
    scheduler.flush(timeout=10)
    env = dict(
        os.environ,
        ETT_ENDPOINT=args.endpoint or "",
        ETT_TOKEN=args.token or "",
        ETT_JOB_ID=args.job_id,
        ETT_SPOOL_DIR=str(args.workdir / "spool"),
        ETT_JOB_OWNER="scheduler",  # this launcher reports job_submitted and job_ended
        PYTHONUNBUFFERED="1",
    )
    command = [
        sys.executable,
        "-m",
        "trainer_agent.elastic",  # torchrun, with attempts numbered at each group restart
        "--standalone",
        "--nproc-per-node",
        str(args.nproc),
        "--max-restarts",
        str(args.max_restarts),
        "-m",
        "trainer_agent.examples.dlrm_train",
        "--ckpt-dir",
        str(args.workdir / "checkpoints"),
        *args.trainer_args,
    ]
    with open(args.workdir / "torchrun.log", "wb") as log_file:
        rc = subprocess.run(command, env=env, stdout=log_file, stderr=subprocess.STDOUT).returncode
    time.sleep(0.01)  # job_ended strictly after the last worker's events
    scheduler.job_ended("succeeded" if rc == 0 else "failed")
    delivered = scheduler.flush(timeout=10)
    scheduler.close(timeout=10)
    print(f"job {args.job_id}: torchrun exit {rc}, scheduler events delivered: {delivered}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
