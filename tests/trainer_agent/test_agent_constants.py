"""The agent ships alone, so it keeps copies of the server's protocol facts: they agree.

One table of failure kinds (backend/ett/catalogue.py) that the agent, ingest's wire schema,
docs/PROTOCOL.md, the dashboard's colours and Level 1 all follow; one heartbeat timeout
(backend/liveness.py) that the settings, the engine and the agent's heartbeat agree on; one
table of job ends and one attempt numbering.
"""

from __future__ import annotations

import inspect
import logging
import re
from pathlib import Path
from typing import Any, get_args, get_type_hints

from backend.config import Settings
from backend.ett import catalogue, engine, timeline
from backend.ett.level1 import Level1
from backend.liveness import ABANDON_TIMEOUT_S, HEARTBEAT_TIMEOUT_S
from backend.results.views import JobStatus
from dashboard.palette import FAILURE_COLORS
from ingest.schema import Failure, JobEnded, validate_event
from tests.trainer_agent.test_agent_core import make_agent
from trainer_agent import events as agent_events

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_one_table_of_failure_kinds() -> None:
    kinds = catalogue.FAILURE_KINDS
    assert kinds == agent_events.FAILURE_KINDS
    assert get_args(get_type_hints(Failure)["kind"]) == kinds
    for kind in (*kinds, "oom"):  # ingest takes exactly these
        event = {"event_id": "e1", "job_id": "j", "type": "failure", "attempt": 0}
        try:
            validate_event({**event, "ts": "2026-11-30T12:00:00Z", "kind": kind})
        except ValueError as err:
            assert kind == "oom" and "kind" in str(err), err
        else:
            assert kind in kinds
    assert tuple(Level1(0.0, 0.0, False, False).nof_by_kind()) == kinds
    assert set(FAILURE_COLORS) == set(kinds)
    protocol = (DOCS / "PROTOCOL.md").read_text()
    row = next(line for line in protocol.splitlines() if line.startswith("| `kind` |"))
    assert re.findall(r"`([a-z_]+)`", row.split("|")[2]) == list(kinds)


def test_one_table_of_failure_causes() -> None:
    from trainer_agent import causes as agent_causes

    assert {c: row.kind for c, row in catalogue.CAUSES.items()} == agent_causes.CAUSE_KINDS
    assert get_args(get_type_hints(Failure)["cause"]) == catalogue.FAILURE_CAUSES
    for cause in ("gpu_oom", "no_such_cause"):
        event = {"event_id": "e1", "job_id": "j", "type": "failure", "attempt": 0}
        try:
            validate_event(
                {**event, "ts": "2026-11-30T12:00:00Z", "kind": "app_error", "cause": cause}
            )
        except ValueError as err:
            assert cause == "no_such_cause" and "cause" in str(err), err
        else:
            assert cause == "gpu_oom"


def _default(fn: Any, name: str) -> Any:
    return inspect.signature(fn).parameters[name].default


def test_one_heartbeat_timeout() -> None:
    assert agent_events.SERVER_HEARTBEAT_TIMEOUT_S == HEARTBEAT_TIMEOUT_S
    for name, value in (
        ("heartbeat_timeout_s", HEARTBEAT_TIMEOUT_S),
        ("abandon_timeout_s", ABANDON_TIMEOUT_S),
    ):
        assert Settings.model_fields[name].default == value
        assert _default(engine.compute_job, name) == value
        assert _default(timeline.build_timeline, name) == value
    # The agent beats well inside the timeout: a lost beat or two is no death.
    assert 3 * agent_events.HEARTBEAT_S <= HEARTBEAT_TIMEOUT_S


def test_the_agent_warns_of_a_heartbeat_slower_than_the_timeout(
    fake_ingest: Any, tmp_path: Path, caplog: Any
) -> None:
    caplog.set_level(logging.WARNING, logger="trainer_agent")
    slow = make_agent(fake_ingest, tmp_path, heartbeat_s=HEARTBEAT_TIMEOUT_S * 2)
    slow.close(timeout=5)
    assert any("heartbeat timeout" in r.getMessage() for r in caplog.records)
    caplog.clear()
    ok = make_agent(fake_ingest, tmp_path / "ok", heartbeat_s=agent_events.HEARTBEAT_S)
    ok.close(timeout=5)
    assert not any("heartbeat timeout" in r.getMessage() for r in caplog.records)


def test_one_table_of_job_ends_and_one_attempt_numbering() -> None:
    """job_ended's statuses are the catalogue's JOB_ENDS everywhere: the agent, ingest's wire
    schema, the job list's status filter, docs/PROTOCOL.md; the agent numbers attempts with
    the server's allocation stride (its words for an attempt depend on it)."""
    statuses = catalogue.JOB_STATUSES
    assert statuses == tuple(catalogue.JOB_ENDS) == agent_events.JOB_STATUSES
    assert get_args(get_type_hints(JobEnded)["status"]) == statuses
    assert set(statuses) <= set(get_args(JobStatus))
    protocol = (DOCS / "PROTOCOL.md").read_text()
    row = next(line for line in protocol.splitlines() if line.startswith("| `status` |"))
    assert re.findall(r"`([a-z_]+)`", row.split("|")[2]) == list(statuses)
    assert agent_events.ALLOCATION_STRIDE == catalogue.ALLOCATION_STRIDE
    assert catalogue.attempt_label(agent_events.ALLOCATION_STRIDE) == "requeue 1"


def test_one_bound_on_an_attempts_hosts() -> None:
    assert catalogue.MAX_HOSTS == agent_events.MAX_HOSTS
    base = {"event_id": "e", "job_id": "j", "type": "attempt_started", "attempt": 0, "ts": 1.0e9}
    names = [f"n{i}" for i in range(catalogue.MAX_HOSTS + 1)]
    assert validate_event({**base, "hosts": names[:-1]})["hosts"] == names[:-1]
    try:
        validate_event({**base, "hosts": names})
    except ValueError as err:
        assert "hosts" in str(err) and str(catalogue.MAX_HOSTS) in str(err), err
    else:
        raise AssertionError("a list over MAX_HOSTS was accepted")
