"""Hostile names (any ingest token picks a model name) sent through every real channel.

Slack gets mrkdwn with &, <, > as entities and mentions neutralised; mail gets single-line,
encoded headers and an escaped HTML part; webhooks and Alertmanager get the exact value as JSON.
"""

from __future__ import annotations

import email.policy
import re
import time
from email import message_from_bytes

from backend.alerts.content import Evaluation, build_message
from backend.alerts.delivery import AlertMessage, Channel, RetryPolicy, deliver_channel
from backend.alerts.slos import SloSpec

FAST = RetryPolicy(
    max_attempts=3, base_delay_s=0.05, max_delay_s=0.1, send_timeout_s=5, deadline_s=15
)

HOSTILE_MODEL = (
    "ranker\nSubject: pwned\r\nBcc: victim@evil.example <!channel> <http://evil.example|click> "
    "@here & <b>bold</b><script>alert(1)</script> café \u202egnp.exe"
)
HOSTILE_JOB = "job <@U012AB3CD> @everyone <!here|here>"


def _hostile_message(status: str = "firing", owner: str = "scheduler") -> AlertMessage:
    slo = SloSpec.model_validate(
        {
            "name": "ett_floor",
            "owner": owner,
            "component": "effective_training",
            "indicator": "ett_floor",
            "objective": 80.0,
            "window": "1d",
        }
    )
    ev = Evaluation(
        value=42.0,
        jobs=3,
        model=HOSTILE_MODEL,
        models=[{"model": HOSTILE_MODEL, "value": 42.0}],
        job_drivers=[{"job_id": HOSTILE_JOB, "model": HOSTILE_MODEL, "value": 40.0}],
    )
    now = time.time()
    return build_message(
        slo,
        ev,
        status=status,  # type: ignore[arg-type]
        since=now - 600,
        ended_at=now if status == "resolved" else None,
        public_url="http://127.0.0.1:8050",
    )


def _raw_message() -> AlertMessage:
    """A notice whose text was never made safe: each channel must defend itself."""
    return AlertMessage(
        fingerprint="f" * 32,
        status="firing",
        labels={"alertname": "x", "owner": "scheduler"},
        annotations={"summary": "x"},
        starts_at=time.time() - 60,
        ends_at=None,
        generator_url="http://127.0.0.1:8050/model?model=a|b>c <d",
        title=HOSTILE_MODEL,
        text="line one\n" + HOSTILE_MODEL,
    )


def test_slack_shows_hostile_names_literally_and_pings_nobody(http_receiver) -> None:
    channel = Channel("slack", f"{http_receiver.url}/slack")
    for message in (_hostile_message(), _raw_message()):
        assert deliver_channel(channel, [message], policy=FAST).ok
    for req in http_receiver.wait_for("/slack", 2):
        text = req.body["text"]
        # The one piece of markup is our own link; nothing else opens a link or a mention.
        assert text.count("<") == 1 and text.count(">") == 1, text
        link = re.search(r"<([^>]*)>", text).group(1)
        assert link.startswith("http://127.0.0.1:8050/model?model=") and link.endswith(
            "|Open dashboard"
        )
        url = link.split("|")[0]
        assert link.count("|") == 1 and " " not in url and "\n" not in url
        assert "<!channel>" not in text and "<http://evil.example|click>" not in text
        assert "&lt;!channel&gt;" in text and "&lt;http://evil.example|click&gt;" in text
        assert "&amp; &lt;b&gt;bold&lt;/b&gt;&lt;script&gt;" in text
        assert not re.search(r"(?<![\w.])@(here|channel|everyone)", text), text
        assert "@\u2060here" in text
        title = text.split("\n", 1)[0]
        assert title.startswith("*[FIRING] ") and title.endswith("*") and "pwned" in title
    first = http_receiver.on("/slack")[0].body["text"]
    assert "&lt;@\u2060U012AB3CD&gt; @\u2060everyone &lt;!here|here&gt;" in first
    assert "\u202e" not in first and "\\u202e" in first  # no bidi override reaches the reader


def test_email_headers_stay_single_line_and_html_is_escaped(smtp_server) -> None:
    channel = Channel(
        "email",
        "oncall@example.test",
        owner="scheduler",
        options={
            "smtp_host": smtp_server.host,
            "smtp_port": smtp_server.port,
            "sender": "ett@example.test",
        },
    )
    for message in (_hostile_message(), _raw_message()):
        result = deliver_channel(channel, [message], policy=FAST)
        assert result.ok, result.attempts
    envelopes = smtp_server.wait_for(2)
    for env in envelopes:
        assert env.rcpt_tos == ["oncall@example.test"]
        raw_headers = env.content.split(b"\r\n\r\n", 1)[0]
        assert b"\nBcc:" not in raw_headers and b"\nSubject: pwned" not in raw_headers
        assert b"=?utf-8?" in raw_headers  # the email package encoded the non-ASCII subject
        mail = message_from_bytes(env.content, policy=email.policy.default)
        assert mail.get_all("Subject") and len(mail.get_all("Subject")) == 1
        assert mail["Bcc"] is None and mail["To"] == "oncall@example.test"
        subject = str(mail["Subject"])
        assert "\n" not in subject and "\r" not in subject
        assert subject.startswith("[FIRING] ") and "café" in subject
        html_part = mail.get_body(preferencelist=("html",)).get_content()
        assert "<script>" not in html_part and "<b>" not in html_part
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html_part
        assert html_part.count("<a ") == 1
        plain = mail.get_body(preferencelist=("plain",)).get_content()
        assert "café" in plain
    first = message_from_bytes(envelopes[0].content, policy=email.policy.default)
    assert "ranker\\nSubject: pwned\\r\\nBcc:" in str(first["Subject"])


def test_a_hostile_sender_address_is_refused_not_sent(smtp_server) -> None:
    channel = Channel(
        "email",
        "oncall@example.test",
        options={
            "smtp_host": smtp_server.host,
            "smtp_port": smtp_server.port,
            "sender": "ett@example.test\nBcc: victim@evil.example",
        },
    )
    result = deliver_channel(channel, [_hostile_message()], policy=FAST)
    assert not result.ok and [a.outcome for a in result.attempts] == ["rejected"]
    assert "not a mail address" in (result.attempts[0].error or "")
    time.sleep(0.2)
    assert smtp_server.messages == []


def test_webhook_carries_the_exact_name_as_json_and_one_line_texts(http_receiver) -> None:
    channel = Channel("webhook", f"{http_receiver.url}/hook", owner="scheduler")
    assert deliver_channel(channel, [_hostile_message()], policy=FAST).ok
    body = http_receiver.wait_for("/hook")[0].body
    [alert] = body["alerts"]
    assert alert["labels"]["model"] == HOSTILE_MODEL  # JSON is its own escaping
    assert "\n" not in alert["annotations"]["summary"]
    assert (
        "\n" not in alert["annotations"]["models"]
        and "\u202e" not in alert["annotations"]["models"]
    )
    assert all("\r" not in line for line in alert["annotations"]["description"].split("\n"))
    assert len(alert["annotations"]["description"].split("\n")) == 5


def test_alertmanager_takes_the_hostile_name_and_routes_it(alertmanager) -> None:
    am = alertmanager
    channel = Channel("alertmanager", am.url, owner="checkpoint", name="am")
    result = deliver_channel(channel, [_hostile_message(owner="checkpoint")], policy=FAST)
    assert result.ok and result.attempts[0].status_code == 200, result.attempts
    got = am.receiver.wait_for("/am/checkpoint", 1, timeout=15)
    [alert] = got[0].body["alerts"]
    assert alert["labels"]["model"] == HOSTILE_MODEL
    assert "\n" not in alert["annotations"]["summary"]
    assert [a["labels"]["model"] for a in am.alerts()] == [HOSTILE_MODEL]
