"""ETT% SLURM integration: SLURM's view of each job (queue, attempts, requeues, end) as ETT events.

  python -m trainer_agent.slurm install --scripts-dir /etc/slurm/ett --endpoint URL --token-file F
      write the hook scripts and print the slurm.conf lines to add
  python -m trainer_agent.slurm prolog-slurmctld   (PrologSlurmctld: an attempt starts)
  python -m trainer_agent.slurm jobcomp            (JobCompType=jobcomp/script: it ended)
  python -m trainer_agent.slurm task-prolog        (TaskProlog: the tasks' ETT_JOB_ID/OWNER)
  python -m trainer_agent.slurm flush              (send what waits in the spool; for cron)

Jobs name their model in the comment: sbatch --comment="ett-model=llama3-70b ett-variant=a".
GPUs come from SLURM's allocation (--gpus/--gres=gpu:N); the owner label from the site's
--owner-map (by account or partition), or an ett-owner= the --allowed-owners list names.
Settings come from the options or from ETT_ENDPOINT, ETT_TOKEN / ETT_TOKEN_FILE, ETT_SLURM_DIR,
ETT_SLURM_TIMEOUT_S, ETT_SLURM_CLUSTER, ETT_SLURM_JOB_ID_TEMPLATE, ETT_SLURM_OWNER_MAP,
ETT_SLURM_ALLOWED_OWNERS, ETT_SLURM_MAX_GPUS_PER_NODE. See docs/SLURM.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from trainer_agent.slurm import convert, hooks, install

log = logging.getLogger("trainer_agent.slurm")


def _add_settings(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint", help="ETT server base URL (default: $ETT_ENDPOINT)")
    parser.add_argument(
        "--token-file", help="file holding an ingest token (default: $ETT_TOKEN_FILE)"
    )
    parser.add_argument(
        "--dir",
        help=f"spool and per-job state folder (default: $ETT_SLURM_DIR or {hooks.DEFAULT_DIR})",
    )
    parser.add_argument(
        "--timeout", type=float, help="seconds a hook may wait for the server (default: 3)"
    )
    parser.add_argument("--cluster", help="cluster name when SLURM does not say it")
    parser.add_argument(
        "--job-id-template",
        help="ETT job id of a SLURM job (default: slurm-{cluster}-{job_id}); "
        "the same everywhere, TaskProlog included",
    )
    parser.add_argument(
        "--owner-map",
        help="owner label of a job by its account or partition: "
        "'account:ml-rank=ranking,partition:ads=ads' (default: $ETT_SLURM_OWNER_MAP)",
    )
    parser.add_argument(
        "--allowed-owners",
        help="owners a job's comment may name with ett-owner= when the map says none: "
        "'ranking,ads' (or '*' for any; default: $ETT_SLURM_ALLOWED_OWNERS, none)",
    )
    parser.add_argument(
        "--max-gpus-per-node",
        type=int,
        help="most GPUs per node an ett-gpus= comment may claim for a job SLURM gave no "
        "gres/gpu (default: $ETT_SLURM_MAX_GPUS_PER_NODE or 8)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainer_agent.slurm",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_settings(parser)
    # The same options after the command too (`install --endpoint URL`, as the usage says); a
    # subcommand's copy sets only what is given there, so an option before the command stays.
    common = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    _add_settings(common)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser(
        "prolog-slurmctld",
        parents=[common],
        help="PrologSlurmctld hook: job_submitted, attempt_started",
    )
    sub.add_parser(
        "jobcomp", parents=[common], help="jobcomp/script hook: failure, attempt_ended, job_ended"
    )
    sub.add_parser(
        "task-prolog", parents=[common], help="TaskProlog: print export ETT_JOB_OWNER / ETT_JOB_ID"
    )
    flush = sub.add_parser(
        "flush", parents=[common], help="send every spooled event; exit 1 if some still wait"
    )
    flush.add_argument("--wait", type=float, default=30.0, help="seconds to try (default: 30)")
    inst = sub.add_parser(
        "install", parents=[common], help="write the hook scripts and print the slurm.conf lines"
    )
    inst.add_argument(
        "--scripts-dir", required=True, help="where the scripts go, e.g. /etc/slurm/ett"
    )
    inst.add_argument("--slurm-conf", help="SLURM_CONF the hooks use (default: SLURM's default)")
    inst.add_argument("--python", default=sys.executable, help="interpreter the hooks run")
    return parser


def _settings(args: argparse.Namespace) -> hooks.Settings:
    env = dict(os.environ)
    if args.token_file:
        env["ETT_TOKEN_FILE"] = args.token_file
    settings = hooks.settings_from_env(env)
    if args.endpoint:
        settings.endpoint = args.endpoint
    if args.dir:
        settings.directory = Path(args.dir)
    if args.timeout is not None:
        settings.timeout_s = args.timeout
    if args.cluster:
        settings.cluster = args.cluster
    if args.job_id_template:
        settings.job_id_template = args.job_id_template
    if args.owner_map is not None:
        settings.owner_map = args.owner_map
    if args.allowed_owners is not None:
        settings.allowed_owners = args.allowed_owners
    if args.max_gpus_per_node is not None:
        settings.max_gpus_per_node = max(1, args.max_gpus_per_node)
    return settings


def _setup_logging(settings: hooks.Settings, verbose: bool) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    try:
        settings.directory.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(settings.directory / "ett-slurm.log"))
    except OSError:
        pass
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(process)d %(levelname)s %(message)s",
        handlers=handlers,
    )


def main(argv: list[str] | None = None) -> int:
    """Run one command; the SLURM hooks always exit 0 so that ETT never fails a job."""
    args = _parser().parse_args(argv)
    settings = _settings(args)
    if args.command == "task-prolog":
        try:
            print("\n".join(hooks.task_prolog_lines(os.environ, settings)))
        except Exception as err:  # noqa: BLE001 - a TaskProlog must never fail a task
            print(f"print ett-slurm: task-prolog: {err}")
        return 0
    if args.command == "install":
        try:
            convert.TrustPolicy.parse(
                settings.owner_map, settings.allowed_owners, settings.max_gpus_per_node
            )
        except ValueError as err:
            print(f"ett-slurm install: --owner-map: {err}", file=sys.stderr)
            return 2
        print(install.install(settings, Path(args.scripts_dir), args.python, args.slurm_conf))
        return 0
    _setup_logging(settings, args.verbose)
    if args.command == "flush":
        if not settings.endpoint:
            log.error("ett-slurm: set --endpoint or ETT_ENDPOINT")
            return 2
        return 0 if hooks.flush_all(settings, time.monotonic() + args.wait) else 1
    hook = hooks.prolog_slurmctld if args.command == "prolog-slurmctld" else hooks.jobcomp
    try:
        events = hook(os.environ, settings)
        log.info(
            "ett-slurm: %s: %s",
            args.command,
            ", ".join(e["event_id"] for e in events) or "no events",
        )
    except ValueError as err:  # run outside SLURM, or SLURM gave no job
        log.error("ett-slurm: %s: %s", args.command, err)
    except Exception:  # noqa: BLE001 - a broken hook must not requeue or hold the job
        log.exception("ett-slurm: %s failed", args.command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
