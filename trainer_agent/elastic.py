"""torchrun with attempts every worker agrees on: `python -m trainer_agent.elastic [torchrun args]`.

TORCHELASTIC_RESTART_COUNT is the local elastic agent's count of *failure* restarts. It is not
raised when the agent restarts the worker group for a membership change (a node joins or leaves:
"membership changes do not count as retries"), and a node that joins late starts from its own
count (pytorch/pytorch#108158). Events of one group would then land in different attempts, or a
new group would reuse the attempt of the previous one.

This launcher runs torch.distributed.run unchanged, but hooks the elastic agent's restart
boundary (`SimpleElasticAgent._rendezvous`, called before every start and restart of the worker
group) and sets, for the workers it is about to start, ETT_ATTEMPT = the allocation's base +
the group's restart within the allocation (docs/AGENT.md "Attempt numbers"):

- the base is the first attempt number of the allocation the launcher runs in: ETT_ATTEMPT_BASE
  (the SLURM TaskProlog exports SLURM_RESTART_COUNT x 1000), else SLURM_RESTART_COUNT x 1000,
  else an ETT_ATTEMPT the launcher itself was started with, else 0 (ETT_ATTEMPT_OFFSET, if
  set, replaces it);
- the restart is the rendezvous round under the dynamic rendezvous (c10d, etcd-v2: torchrun's
  default), which every node of the group reads from the shared rendezvous state, counted from
  the first round this launcher saw when it runs inside an allocation (a rendezvous store that
  outlives one allocation keeps counting); under another rendezvous, the launcher's own count
  of group starts.

Every group after the first of an allocation is an in-place restart: ETT_ATTEMPT_IN_PLACE=1,
and the workers' attempt_started says `in_place`, so the wait is not booked as queue time.
ETT_ELASTIC_ROUND and ETT_ELASTIC_RUN_ID say where the number came from. The agent also watches
the worker group, through its monitor, and reports a worker that died without a word (SIGKILL,
OOM) as a `failure` of that attempt when ETT_JOB_ID and ETT_ENDPOINT are set.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from typing import Any

from trainer_agent import causes
from trainer_agent.agent import allocation_base
from trainer_agent.events import ALLOCATION_STRIDE

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


def attempt_offset(environ: dict[str, str] | None = None) -> tuple[int, bool]:
    """The allocation's first attempt number, and whether a scheduler's allocation gave it."""
    env = os.environ if environ is None else environ
    explicit = env.get("ETT_ATTEMPT_OFFSET", "").strip()
    if explicit.isascii() and explicit.isdigit():
        return int(explicit), True
    if any(env.get(k, "").strip() for k in ("ETT_ATTEMPT_BASE", "SLURM_RESTART_COUNT")):
        return allocation_base(env), True
    outer = (_OUTER_ATTEMPT if environ is None else env.get("ETT_ATTEMPT", "")).strip()
    if outer.isascii() and outer.isdigit():
        return int(outer), True
    return 0, False


def restart_in_allocation(
    round_: int | None, first_round: int | None, local: int, *, allocated: bool
) -> int:
    """The group's restart number within its allocation (0 for the allocation's first group)."""
    if round_ is None:
        restart = local
    elif allocated and first_round is not None:
        restart = round_ - first_round
    else:
        restart = round_
    return max(0, min(restart, ALLOCATION_STRIDE - 1))


class _AttemptTracker:
    """State kept in the elastic agent process across group (re)starts."""

    def __init__(self) -> None:
        self.starts = 0
        self.first_round: int | None = None
        self.attempt = 0
        self.reported: set[tuple[int, int]] = set()
        self.reporter: Any = None

    def group_starting(self, agent: Any, worker_group: Any) -> None:
        handler = worker_group.spec.rdzv_handler
        round_ = rendezvous_round(handler)
        if self.first_round is None:
            self.first_round = round_
        local = self.starts
        self.starts += 1
        base, allocated = attempt_offset()
        restart = restart_in_allocation(round_, self.first_round, local, allocated=allocated)
        if restart == ALLOCATION_STRIDE - 1 and local > 0:
            log.warning(
                "trainer_agent.elastic: %d group restarts in one allocation; later ones share "
                "attempt %d",
                restart,
                base + restart,
            )
        self.attempt = base + restart
        os.environ["ETT_ATTEMPT"] = str(self.attempt)
        os.environ["ETT_ATTEMPT_IN_PLACE"] = "1" if restart > 0 else "0"
        os.environ["ETT_ELASTIC_ROUND"] = str(round_ if round_ is not None else local)
        with contextlib.suppress(Exception):
            os.environ["ETT_ELASTIC_RUN_ID"] = str(handler.get_run_id())
        log.info(
            "trainer_agent.elastic: worker group start %d (rendezvous round %s) at %.3f: "
            "attempt %d%s",
            local,
            round_,
            time.time(),
            self.attempt,
            " (in place)" if restart > 0 else "",
        )

    def monitored(self, result: Any) -> None:
        """The group failed: report its root cause (the workers torchrun did not stop itself)."""
        if result is None or not result.is_failed():
            return
        failures = sorted(
            (getattr(result, "failures", None) or {}).items(),
            key=lambda kv: (getattr(kv[1], "timestamp", 0) or 0, int(kv[0])),
        )
        # A worker killed by SIGTERM while another failed was stopped by torchrun itself.
        roots = [(r, f) for r, f in failures if _exit_code(f) != -signal.SIGTERM] or failures
        for rank, failure in roots:
            key = (self.attempt, int(rank))
            if key in self.reported:
                continue
            self.reported.add(key)
            code = _exit_code(failure)
            kind, what = _describe(code)
            cause = causes.from_exit(code, str(getattr(failure, "message", "") or ""))
            self._report(
                kind, f"torchrun: worker rank {int(rank)} {what}", timeout=5.0, cause=cause
            )

    def signalled(self, sigval: Any) -> None:
        """The launcher itself got a death signal (a scheduler's requeue, preemption or
        cancel): the current attempt was stopped from outside, a preemption."""
        name = getattr(sigval, "name", str(sigval))
        if self.starts == 0:  # stopped before its first group: the allocation's first attempt
            self.attempt = attempt_offset()[0]
        self._report(
            "preemption",
            f"torchrun received {name}: the job was stopped from outside (requeue, "
            "preemption or cancel)",
            timeout=1.0,
            cause="sigterm",
        )

    def _report(self, kind: str, message: str, timeout: float, cause: str | None = None) -> None:
        if not (os.environ.get("ETT_JOB_ID") and os.environ.get("ETT_ENDPOINT")):
            return
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
        self.reporter.failure(kind, message, cause=cause)
        self.reporter.flush(timeout=timeout)


def _exit_code(failure: Any) -> int:
    return int(getattr(failure, "exitcode", 1) or 1)


def _describe(code: int) -> tuple[str, str]:
    """(failure kind, words) for a worker's exit code (negative: the signal that killed it)."""
    if code >= 0:
        return "app_error", f"exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    kind = "preemption" if -code == signal.SIGTERM else "infra"
    return kind, f"killed by {name} (SIGKILL: e.g. the OOM killer)" if name == "SIGKILL" else name


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
    _hook_death_signals()
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


def _hook_death_signals() -> None:
    """Report a death signal the launcher gets (torchrun's handler raises SignalException)."""
    from torch.distributed.elastic.multiprocessing import api as mp_api

    original = mp_api._terminate_process_handler

    def _handler(signum: int, frame: Any) -> None:
        try:
            _tracker.signalled(signal.Signals(signum))
        except Exception:  # noqa: BLE001 - never keep torchrun from shutting down
            log.exception("trainer_agent.elastic: cannot report the death signal")
        original(signum, frame)

    mp_api._terminate_process_handler = _handler  # type: ignore[assignment]


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
