"""Zero 5xx under fuzzing (issue 12): schemathesis against a live server, on each database.

Every operation of the live OpenAPI document (routes added later included) is called with
generated inputs and an admin token; each answer must not be a 5xx and must match its declared
schema. Then schemathesis's stateful phase chains calls along the links it infers (a created
token revoked, a silence deleted, ...), bounded by scenarios and steps. Bounded: a few examples
per operation and a time budget for the whole run; a call's timeout is only a hang guard
(timing claims belong in benchmarks/).
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance

from backend.app import create_app
from tests.live_app import serve

EXAMPLES = int(os.environ.get("ETT_FUZZ_EXAMPLES", "12"))
BUDGET_S = float(os.environ.get("ETT_FUZZ_BUDGET_S", "75"))
STATEFUL_SCENARIOS = int(os.environ.get("ETT_FUZZ_STATEFUL_SCENARIOS", "15"))
STATEFUL_STEPS = int(os.environ.get("ETT_FUZZ_STATEFUL_STEPS", "6"))
# A hang guard only: generous, so a loaded machine does not fail a correct answer.
CALL_TIMEOUT_S = 60.0


@pytest.fixture
def live_url(settings: Any, database: Any) -> Any:
    app = create_app(settings, database=database, start_workers=False, with_dashboard=True)
    with serve(app) as url:
        yield url


def _run_operation(operation: Any, url: str, headers: dict[str, str], examples: int) -> list[str]:
    failures: list[str] = []

    @given(case=operation.as_strategy())
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    def run(case: Any) -> None:
        response = case.call(base_url=url, headers=headers, timeout=CALL_TIMEOUT_S)
        try:
            case.validate_response(
                response, checks=[not_a_server_error, response_schema_conformance]
            )
        except (Exception, BaseExceptionGroup) as err:  # noqa: BLE001 - reported below
            failures.append(
                f"{operation.label} {response.status_code} {case.query or ''} "
                f"{str(case.body)[:200] if case.body is not None else ''}: "
                f"{str(err).strip().splitlines()[0][:300]} | {response.text[:300]}"
            )

    run()
    return failures


def test_fuzz_every_operation_no_5xx(live_url: str, make_token: Any) -> None:
    headers = {"Authorization": f"Bearer {make_token('admin')}"}
    schema = schemathesis.openapi.from_url(live_url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    # Revoking a token can revoke the fuzzer's own admin token: that operation runs last, so
    # every other operation is fuzzed with a live token.
    operations.sort(key=lambda op: "/revoke" in op.label)
    assert len(operations) >= 25, "the OpenAPI document lost operations"
    deadline = time.monotonic() + BUDGET_S
    failures: list[str] = []
    covered = []
    for i, operation in enumerate(operations):
        left = deadline - time.monotonic()
        # Share what is left of the budget among the operations still to run (at least 2 each).
        share = max(
            2,
            min(
                EXAMPLES,
                int(EXAMPLES * left / BUDGET_S * len(operations) / max(1, len(operations) - i)),
            ),
        )
        failures += _run_operation(operation, live_url, headers, share)
        covered.append(operation.label)
    assert len(covered) == len(operations)
    assert not failures, "\n".join(failures[:30])


def test_fuzz_stateful_no_5xx(live_url: str, make_token: Any) -> None:
    headers = {"Authorization": f"Bearer {make_token('admin')}"}
    schema = schemathesis.openapi.from_url(live_url + "/openapi.json")
    # Revoking a token may revoke the fuzzer's own: the chains leave that operation out.
    schema = schema.exclude(path_regex="/revoke$")
    failures: list[str] = []

    class Machine(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": live_url, "headers": headers, "timeout": CALL_TIMEOUT_S}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            try:
                case.validate_response(
                    response, checks=[not_a_server_error, response_schema_conformance]
                )
            except (Exception, BaseExceptionGroup) as err:  # noqa: BLE001 - reported below
                failures.append(
                    f"{case.operation.label} {response.status_code}: "
                    f"{str(err).strip().splitlines()[0][:300]} | {response.text[:300]}"
                )

    Machine.run(
        settings=settings(
            max_examples=STATEFUL_SCENARIOS,
            stateful_step_count=STATEFUL_STEPS,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        )
    )
    assert not failures, "\n".join(failures[:30])
