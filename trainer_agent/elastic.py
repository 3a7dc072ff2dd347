"""torchrun with attempts every worker agrees on: `python -m trainer_agent.elastic [torchrun args]`.

TORCHELASTIC_RESTART_COUNT is the local elastic agent's count of *failure* restarts. It is not
raised when the agent restarts the worker group for a membership change (a node joins or leaves:
"membership changes do not count as retries"), and a node that joins late starts from its own
count (pytorch/pytorch#108158). Events of one group would then land in different attempts, or a
new group would reuse the attempt of the previous one.

This launcher runs torch.distributed.run unchanged, but hooks the elastic agent's restart
boundary (`SimpleElasticAgent._rendezvous`, called before every start and restart of the worker
group) and sets ETT_ATTEMPT for the workers it is about to start:

- under the dynamic rendezvous (c10d, etcd-v2: torchrun's default) the attempt is the
  rendezvous round, which every node of the group reads from the shared rendezvous state;
- under another rendezvous, the agent's own count of group starts.

ETT_ELASTIC_ROUND and ETT_ELASTIC_RUN_ID say where it came from. When a scheduler also restarts the
whole torchrun (SLURM requeue), ETT_ATTEMPT_OFFSET (or SLURM_RESTART_COUNT x (max_restarts + 1))
is added so attempts keep growing across both. The agent also watches the worker group, through
its monitor, and reports a worker that died without a word (SIGKILL, OOM) as a `failure` of that
attempt when ETT_JOB_ID and ETT_ENDPOINT are set.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from typing import Any

log = logging.getLogger("trainer_agent")

_installed = False
# An attempt number the launcher itself was started with (e.g. by a scheduler integration).
_OUTER_ATTEMPT = os.environ.get("ETT_ATTEMPT", "")


def rendezvous_round(handler: Any) -> int | None:
    """The current round of a dynamic rendezvous handler (shared by all nodes), else None."""
    holder = getattr(handler, "_state_holder", None)
    state = getattr(holder, "state", None)
    value = getattr(state, "round", None)
    return value if isinstance(value, int) else None


def attempt_offset(max_restarts: int, environ: dict[str, str] | None = None) -> int:
    """What to add to the elastic round when a scheduler restarts the whole launcher."""
    env = os.environ if environ is None else environ
    explicit = env.get("ETT_ATTEMPT_OFFSET", "").strip()
    if explicit.isdigit():
        return int(explicit)
    outer = (_OUTER_ATTEMPT or env.get("SLURM_RESTART_COUNT", "")).strip()
    return int(outer) * (max_restarts + 1) if outer.isdigit() else 0


class _AttemptTracker:
    """State kept in the elastic agent process across group (re)starts."""

    def __init__(self) -> None:
        self.starts = 0
        self.attempt = 0
        self.reported: set[tuple[int, int]] = set()
        self.reporter: Any = None

    def group_starting(self, agent: Any, worker_group: Any) -> None:
        spec = worker_group.spec
        handler = spec.rdzv_handler
        round_ = rendezvous_round(handler)
        local = self.starts
        self.starts += 1
        base = round_ if round_ is not None else local
        self.attempt = attempt_offset(int(spec.max_restarts)) + base
        os.environ["ETT_ATTEMPT"] = str(self.attempt)
        os.environ["ETT_ELASTIC_ROUND"] = str(base)
        with contextlib.suppress(Exception):
            os.environ["ETT_ELASTIC_RUN_ID"] = str(handler.get_run_id())
        log.info(
            "trainer_agent.elastic: worker group start %d (rendezvous round %s): attempt %d",
            local,
            round_,
            self.attempt,
        )

    def monitored(self, result: Any) -> None:
        if result is None or not result.is_failed():
            return
        for rank, failure in (getattr(result, "failures", None) or {}).items():
            key = (self.attempt, int(rank))
            if key in self.reported:
                continue
            self.reported.add(key)
            self._report(int(rank), failure)

    def _report(self, rank: int, failure: Any) -> None:
        if not (os.environ.get("ETT_JOB_ID") and os.environ.get("ETT_ENDPOINT")):
            return
        code = int(getattr(failure, "exitcode", 1) or 1)
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            kind = "preemption" if -code == signal.SIGTERM else "infra"
            what = f"killed by {name} (SIGKILL: e.g. the OOM killer)" if name == "SIGKILL" else name
        else:
            kind, what = "app_error", f"exit code {code}"
        from trainer_agent.agent import Agent

        if self.reporter is None or self.reporter.attempt != self.attempt:
            if self.reporter is not None:
                self.reporter.close(timeout=2.0)
            self.reporter = Agent(
                attempt=self.attempt,
                rank=-1,
                report_attempt=False,
                report_progress=False,
                heartbeat_s=0,
                install_handlers=False,
                job_owner="scheduler",
            )
        self.reporter.failure(kind, f"torchrun: worker rank {rank} {what}")
        self.reporter.flush(timeout=5.0)


_tracker = _AttemptTracker()


def install() -> bool:
    """Hook the elastic agent's restart boundary and monitor (once); False without torch."""
    global _installed
    if _installed:
        return True
    try:
        from torch.distributed.elastic.agent.server.api import SimpleElasticAgent
    except ImportError:
        return False
    original_rendezvous = SimpleElasticAgent._rendezvous

    def _rendezvous(self: Any, worker_group: Any) -> None:
        original_rendezvous(self, worker_group)
        try:
            _tracker.group_starting(self, worker_group)
        except Exception:  # noqa: BLE001 - never break the launcher
            log.exception("trainer_agent.elastic: cannot number the attempt")

    SimpleElasticAgent._rendezvous = _rendezvous  # type: ignore[method-assign]
    for cls in _agent_classes():
        original_monitor = cls._monitor_workers

        def _monitor(self: Any, worker_group: Any, _orig: Any = original_monitor) -> Any:
            result = _orig(self, worker_group)
            try:
                _tracker.monitored(result)
            except Exception:  # noqa: BLE001
                log.exception("trainer_agent.elastic: cannot report a worker failure")
            return result

        cls._monitor_workers = _monitor  # type: ignore[method-assign]
    _installed = True
    return True


def _agent_classes() -> list[Any]:
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

    return [LocalElasticAgent]


def main(argv: list[str] | None = None) -> None:
    """Run torchrun (same arguments) with ETT attempt numbering."""
    if not install():
        print("trainer_agent.elastic: torch is not installed", file=sys.stderr)
        raise SystemExit(2)
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "WARNING"))
    from torch.distributed.run import main as torchrun_main

    torchrun_main(argv)


if __name__ == "__main__":
    main()
