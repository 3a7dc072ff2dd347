"""Delivery against real local servers: retries, Retry-After, 4xx, SMTP and Alertmanager."""

from __future__ import annotations

import email.policy
import time
from datetime import UTC, datetime, timedelta
from email import message_from_bytes
from email.utils import format_datetime

from backend.alerts.content import Evaluation, build_message
from backend.alerts.delivery import (
    AlertMessage,
    Channel,
    DeliveryAttempt,
    RetryPolicy,
    deliver_all,
    deliver_channel,
    parse_retry_after,
)
from backend.alerts.slos import SloSpec

FAST = RetryPolicy(
    max_attempts=5, base_delay_s=0.05, max_delay_s=0.2, send_timeout_s=2, deadline_s=10
)


def _slo(**kw: object) -> SloSpec:
    base: dict[str, object] = {
        "name": "scheduling_share",
        "owner": "scheduler",
        "component": "scheduling",
        "indicator": "gpu_time_share",
        "objective": 8.0,
        "window": "7d",
    }
    base.update(kw)
    return SloSpec.model_validate(base)


def _message(
    status: str = "firing", owner: str = "scheduler", model: str | None = None
) -> AlertMessage:
    ev = Evaluation(
        value=14.25,
        jobs=12,
        model=model,
        models=[{"model": "model-a", "value": 21.0}],
        job_drivers=[{"job_id": "job-7", "model": "model-a", "value": 40.0}],
    )
    now = time.time()
    return build_message(
        _slo(owner=owner),
        ev,
        status=status,  # type: ignore[arg-type]
        since=now - 600,
        ended_at=now if status == "resolved" else None,
        public_url="http://127.0.0.1:8050",
    )


def test_parse_retry_after_seconds_and_http_date() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    now = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=7), usegmt=True)
    assert abs(parse_retry_after(later, now=now.timestamp()) - 7.0) < 1e-6  # type: ignore[operator]
    earlier = format_datetime(now - timedelta(seconds=7), usegmt=True)
    assert parse_retry_after(earlier, now=now.timestamp()) == 0.0


def test_webhook_retries_500_then_honours_retry_after_then_delivers(http_receiver) -> None:
    http_receiver.script("/hook", (500, {}), (429, {"Retry-After": "1"}), (200, {}))
    attempts: list[DeliveryAttempt] = []
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        time.sleep(s)

    channel = Channel("webhook", f"{http_receiver.url}/hook", owner="scheduler", name="hook")
    started = time.monotonic()
    result = deliver_channel(
        channel,
        [_message()],
        policy=FAST,
        on_attempt=attempts.append,
        sleep=sleep,
        external_url="x",
    )
    assert result.ok
    assert [a.outcome for a in attempts] == ["retry", "retry", "delivered"]
    assert [a.status_code for a in attempts] == [500, 429, 200]
    assert attempts[1].retry_after_s == 1.0
    # The 429's Retry-After (1 s) was honoured, not the short backoff.
    assert sleeps[1] == 1.0 and sleeps[0] <= FAST.max_delay_s
    assert time.monotonic() - started >= 1.0
    reqs = http_receiver.on("/hook")
    assert len(reqs) == 3
    body = reqs[-1].body
    assert body["version"] == "4" and body["status"] == "firing"
    assert body["receiver"] == "scheduler/hook"
    alert = body["alerts"][0]
    assert (
        alert["labels"]["owner"] == "scheduler"
        and alert["labels"]["alertname"] == "scheduling_share"
    )
    assert alert["endsAt"] == "0001-01-01T00:00:00Z"
    assert alert["startsAt"].endswith("Z")
    assert "14.2%" in alert["annotations"]["summary"]
    assert (
        alert["generatorURL"].split("&start=")[0]
        == "http://127.0.0.1:8050/owners?owner=scheduler&component=scheduling"
    )
    assert body["commonLabels"]["owner"] == "scheduler"


def test_other_4xx_is_not_retried(http_receiver) -> None:
    http_receiver.script("/bad", (404, {}), (200, {}))
    attempts: list[DeliveryAttempt] = []
    result = deliver_channel(
        Channel("slack", f"{http_receiver.url}/bad"),
        [_message()],
        policy=FAST,
        on_attempt=attempts.append,
    )
    assert not result.ok
    assert [(a.outcome, a.status_code) for a in attempts] == [("rejected", 404)]
    assert len(http_receiver.on("/bad")) == 1


def test_gives_up_after_max_attempts_and_when_retry_after_exceeds_deadline(http_receiver) -> None:
    http_receiver.script("/down", *[(503, {})] * 10)
    policy = RetryPolicy(
        max_attempts=3, base_delay_s=0.01, max_delay_s=0.02, send_timeout_s=2, deadline_s=10
    )
    result = deliver_channel(
        Channel("webhook", f"{http_receiver.url}/down"), [_message()], policy=policy
    )
    assert [a.outcome for a in result.attempts] == ["retry", "retry", "gave_up"]
    assert len(http_receiver.on("/down")) == 3

    http_receiver.script("/later", (429, {"Retry-After": "3600"}))
    result = deliver_channel(
        Channel("webhook", f"{http_receiver.url}/later"), [_message()], policy=FAST
    )
    assert [a.outcome for a in result.attempts] == ["gave_up"]
    assert "deadline" in (result.attempts[0].error or "")


def test_slack_text(http_receiver) -> None:
    result = deliver_channel(
        Channel("slack", f"{http_receiver.url}/slack"), [_message()], policy=FAST
    )
    assert result.ok
    body = http_receiver.on("/slack")[0].body
    assert set(body) == {"text"}
    text = body["text"]
    assert text.startswith("*[FIRING] scheduler: scheduling share of wall GPU-time")
    assert "objective &lt;= 8.0%" in text  # mrkdwn: Slack shows &lt; as <
    assert "model-a" in text and "job-7" in text and "Breached since" in text
    assert "<http://127.0.0.1:8050/owners?owner=scheduler&component=scheduling&start=" in text


def test_email_over_smtp(smtp_server) -> None:
    channel = Channel(
        "email",
        "sched-oncall@example.test, lead@example.test",
        owner="scheduler",
        options={
            "smtp_host": smtp_server.host,
            "smtp_port": smtp_server.port,
            "sender": "ett@example.test",
        },
    )
    result = deliver_channel(channel, [_message("resolved")], policy=FAST)
    assert result.ok, result.attempts
    env = smtp_server.wait_for(1)[0]
    assert sorted(env.rcpt_tos) == ["lead@example.test", "sched-oncall@example.test"]
    mail = message_from_bytes(env.content, policy=email.policy.default)
    assert mail["Subject"].startswith("[RESOLVED] scheduler: scheduling share of wall GPU-time")
    body = mail.get_body(preferencelist=("plain",)).get_content()
    assert "Breached from" in body and "Dashboard: http://127.0.0.1:8050/owners?" in body


def test_email_to_a_closed_port_gives_up(unused_port: int) -> None:
    policy = RetryPolicy(
        max_attempts=2, base_delay_s=0.01, max_delay_s=0.02, send_timeout_s=1, deadline_s=5
    )
    channel = Channel(
        "email", "x@example.test", options={"smtp_host": "127.0.0.1", "smtp_port": unused_port}
    )
    result = deliver_channel(channel, [_message()], policy=policy)
    assert not result.ok
    assert [a.outcome for a in result.attempts] == ["retry", "gave_up"]


def test_one_failing_channel_never_blocks_the_others(http_receiver, smtp_server) -> None:
    # /slow answers 503 with a long Retry-After; the others must finish long before it gives up.
    http_receiver.script("/slow", (503, {"Retry-After": "2"}), (503, {"Retry-After": "2"}))
    http_receiver.script("/gone", (410, {}))
    channels = [
        Channel("webhook", f"{http_receiver.url}/slow", owner="o", name="slow"),
        Channel("webhook", f"{http_receiver.url}/gone", owner="o", name="gone"),
        Channel("slack", f"{http_receiver.url}/fine", owner="o", name="fine"),
        Channel(
            "email",
            "o@example.test",
            owner="o",
            name="mail",
            options={"smtp_host": smtp_server.host, "smtp_port": smtp_server.port},
        ),
    ]
    logged: list[DeliveryAttempt] = []
    started = time.monotonic()
    done_at: dict[str, float] = {}

    def on_attempt(a: DeliveryAttempt) -> None:
        logged.append(a)
        if a.outcome != "retry":
            done_at[a.channel.name] = time.monotonic() - started

    results = deliver_all([_message()], channels, policy=FAST, on_attempt=on_attempt)
    by_name = {r.channel.name: r for r in results}
    assert by_name["fine"].ok and by_name["mail"].ok and by_name["slow"].ok
    assert not by_name["gone"].ok
    # Serially they would wait behind slow's 2 x 2 s; in parallel they end before its first retry
    # (2 s leaves room for a loaded CI machine, which took 1.6 s for an SMTP round trip).
    assert done_at["fine"] < 2.0 and done_at["mail"] < 2.0 and done_at["gone"] < 2.0
    assert done_at["slow"] >= 4.0
    assert len([a for a in logged if a.channel.name == "slow"]) == 3


def test_push_to_real_alertmanager_routes_by_owner(alertmanager) -> None:
    am = alertmanager
    channel = Channel("alertmanager", am.url, owner="checkpoint", name="am")
    firing = _message("firing", owner="checkpoint", model="model-b")
    result = deliver_channel(channel, [firing], policy=FAST)
    assert result.ok and result.attempts[0].status_code == 200
    got = am.receiver.wait_for("/am/checkpoint", 1, timeout=15)
    body = got[0].body
    assert body["version"] == "4" and body["status"] == "firing"
    assert body["receiver"] == "checkpoint"
    alert = body["alerts"][0]
    assert alert["labels"]["owner"] == "checkpoint"
    assert alert["labels"]["model"] == "model-b"
    assert alert["generatorURL"].startswith("http://127.0.0.1:8050/model?model=model-b&start=")
    assert alert["annotations"]["dashboard"] == alert["generatorURL"]
    # Nothing reached another owner's route.
    assert am.receiver.on("/am/scheduler") == [] and am.receiver.on("/am/default") == []
    listed = am.alerts()
    assert [a["labels"]["alertname"] for a in listed] == ["scheduling_share"]

    resolved = _message("resolved", owner="checkpoint", model="model-b")
    assert deliver_channel(channel, [resolved], policy=FAST).ok
    got = am.receiver.wait_for("/am/checkpoint", 2, timeout=15)
    assert got[-1].body["status"] == "resolved"
    assert got[-1].body["alerts"][0]["status"] == "resolved"


def test_channel_kinds_are_the_senders_table() -> None:
    """SENDERS is the one list of kinds: the SLO file's ChannelSpec, the counter and the docs agree."""
    from pathlib import Path

    from backend.alerts.delivery import CHANNEL_KINDS, SENDERS
    from backend.alerts.slos import ChannelSpec
    from backend.health import ALERT_DELIVERIES

    assert tuple(SENDERS) == CHANNEL_KINDS and len(SENDERS) >= 4
    assert ChannelSpec.model_json_schema()["properties"]["kind"]["enum"] == list(SENDERS)
    counted = {s.labels["channel"] for m in ALERT_DELIVERIES.collect() for s in m.samples}
    assert counted >= set(SENDERS)
    alerts_md = (Path(__file__).resolve().parents[3] / "docs" / "ALERTS.md").read_text()
    delivery = alerts_md.split("## Delivery", 1)[1].split("\n## ", 1)[0]
    documented = {line.split("`")[1] for line in delivery.splitlines() if line.startswith("| `")}
    assert documented == set(SENDERS)


def test_a_new_kind_is_one_sender(monkeypatch) -> None:
    """A sender added to the table is what delivery calls for its kind, with retries as any other."""
    from backend.alerts import delivery

    calls: list[tuple[str, int]] = []

    def send_pager(channel, messages, *, client, timeout, external_url) -> int:
        calls.append((channel.target, len(messages)))
        if len(calls) == 1:
            raise delivery._Transient("HTTP 503: busy", 503)
        return 202

    monkeypatch.setitem(delivery.SENDERS, "pager", send_pager)
    channel = Channel(kind="pager", target="svc-key", owner="scheduler")  # type: ignore[arg-type]
    result = deliver_channel(channel, [_message()], policy=FAST, sleep=lambda _s: None)
    assert result.ok and [a.outcome for a in result.attempts] == ["retry", "delivered"]
    assert calls == [("svc-key", 1), ("svc-key", 1)] and result.attempts[-1].status_code == 202
