"""Scheduler hooks from a shell (SLURM prolog/epilog, a Kubernetes controller, ...).

    python -m trainer_agent submitted --job-id J --model M --gpus 8 [--label owner=ranking]
    python -m trainer_agent ended --job-id J --status succeeded
    python -m trainer_agent resend --job-id J      # send what waits in the job's spool

Endpoint and token come from --endpoint/--token or ETT_ENDPOINT/ETT_TOKEN. The exit status is 0
when the event was delivered, 1 when it waits in the spool (the next attempt or hook sends it).
"""

from __future__ import annotations

import argparse
import sys

from trainer_agent.agent import Agent
from trainer_agent.events import JOB_STATUSES


def main(argv: list[str] | None = None) -> int:
    """Send one job_submitted or job_ended event; 0 when delivered."""
    parser = argparse.ArgumentParser(
        prog="python -m trainer_agent", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--endpoint")
    parser.add_argument("--token")
    parser.add_argument("--spool-dir")
    parser.add_argument("--timeout", type=float, default=10.0)
    sub = parser.add_subparsers(dest="command", required=True)
    submitted = sub.add_parser("submitted", help="the scheduler accepted the job")
    submitted.add_argument("--job-id", required=True)
    submitted.add_argument("--model", required=True)
    submitted.add_argument("--gpus", type=int, required=True)
    submitted.add_argument("--label", action="append", default=[], help="key=value, repeatable")
    submitted.add_argument("--checkpoint-interval-s", type=float)
    ended = sub.add_parser("ended", help="the job's last allocation was released")
    ended.add_argument("--job-id", required=True)
    ended.add_argument("--status", required=True, choices=JOB_STATUSES)
    resend = sub.add_parser(
        "resend", help="send the batches waiting in the job's spool (e.g. after an outage)"
    )
    resend.add_argument("--job-id", required=True)
    args = parser.parse_args(argv)

    agent = Agent(
        args.job_id,
        endpoint=args.endpoint,
        token=args.token,
        spool_dir=args.spool_dir,
        report_attempt=False,
        report_progress=False,
        heartbeat_s=0,
        install_handlers=False,
        job_owner="scheduler",
    )
    if not agent.enabled:
        print("trainer_agent: set --endpoint or ETT_ENDPOINT", file=sys.stderr)
        return 2
    if args.command == "submitted":
        labels = dict(item.split("=", 1) for item in args.label if "=" in item)
        config = (
            {"checkpoint_interval_s": args.checkpoint_interval_s}
            if args.checkpoint_interval_s
            else None
        )
        agent.job_submitted(args.model, args.gpus, labels=labels or None, config=config)
    elif args.command == "ended":
        agent.job_ended(args.status)
    delivered = agent.flush(timeout=args.timeout)
    agent.close(timeout=2.0)
    return 0 if delivered else 1


if __name__ == "__main__":
    raise SystemExit(main())
