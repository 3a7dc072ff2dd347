"""Delivery of alert notices to an owner's channels: webhooks, Slack, email, Alertmanager.

Each channel runs on its own worker with its own deadline, so a slow or broken channel never
holds up the others. HTTP channels retry 5xx and 429 (honouring Retry-After) with exponential
backoff and full jitter; any other 4xx is final. Every attempt is reported to a callback that the
service turns into a row of the delivery log.
"""

from __future__ import annotations

import email.policy
import html
import logging
import random
import re
import smtplib
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from datetime import UTC
from email.message import EmailMessage
from email.utils import (
    formataddr,
    formatdate,
    getaddresses,
    make_msgid,
    parseaddr,
    parsedate_to_datetime,
)
from typing import Any, Literal, Protocol, get_args
from urllib.parse import quote

import httpx

from backend.health import ALERT_DELIVERIES
from backend.timefmt import rfc3339

log = logging.getLogger(__name__)

Outcome = Literal["delivered", "retry", "rejected", "gave_up", "error"]


@dataclass(frozen=True)
class Channel:
    """Where one owner wants notices: a URL (HTTP kinds) or comma-separated addresses (email)."""

    kind: ChannelKind  # a key of SENDERS
    target: str
    owner: str = ""
    name: str = ""
    # email: smtp_host, smtp_port, sender, username, password, starttls; http: headers.
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """A short name for logs: owner/name or the kind."""
        return f"{self.owner}/{self.name or self.kind}" if self.owner else (self.name or self.kind)


@dataclass(frozen=True)
class AlertMessage:
    """One alert notice, already rendered: labels and annotations as Alertmanager knows them."""

    fingerprint: str
    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: float
    ends_at: float | None
    generator_url: str
    title: str
    text: str


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try one channel: attempts, backoff, the per-send timeout and a total deadline."""

    max_attempts: int = 5
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    send_timeout_s: float = 10.0
    deadline_s: float = 60.0


@dataclass
class DeliveryAttempt:
    """One try at one channel, as written to the delivery log."""

    channel: Channel
    attempt: int
    started_at: float
    duration_s: float
    outcome: Outcome
    status_code: int | None = None
    error: str | None = None
    retry_after_s: float | None = None


@dataclass
class DeliveryResult:
    """The final word on one channel: delivered or not, with every attempt."""

    channel: Channel
    ok: bool
    attempts: list[DeliveryAttempt] = field(default_factory=list)


class _Transient(Exception):
    """A failure worth retrying; retry_after_s is the server's own hint, if it gave one."""

    def __init__(
        self, message: str, status_code: int | None = None, retry_after_s: float | None = None
    ):
        super().__init__(message)
        self.status_code = status_code
        self.retry_after_s = retry_after_s


class _Permanent(Exception):
    """A failure that another try will not fix (a 4xx other than 429, a bad address)."""

    def __init__(self, message: str, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date); None if absent or bad."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def backoff_delay(attempt: int, policy: RetryPolicy, rng: random.Random | None = None) -> float:
    """Full-jitter exponential backoff before retry number `attempt` (1 = first retry)."""
    cap = min(policy.max_delay_s, policy.base_delay_s * (2 ** (attempt - 1)))
    return (rng or random).uniform(cap / 2, cap)


# ---- payloads ----------------------------------------------------------------------------------


def webhook_payload(
    messages: Sequence[AlertMessage], *, receiver: str, external_url: str
) -> dict[str, Any]:
    """The body Alertmanager's webhook receiver sends (version 4), for our own notices."""
    common_labels = _common(m.labels for m in messages)
    group_labels = {k: v for k, v in common_labels.items() if k in ("owner", "alertname")}
    status = "firing" if any(m.status == "firing" for m in messages) else "resolved"
    return {
        "version": "4",
        "groupKey": "{}:"
        + "{"
        + ",".join(f'{k}="{v}"' for k, v in sorted(group_labels.items()))
        + "}",
        "truncatedAlerts": 0,
        "status": status,
        "receiver": receiver,
        "groupLabels": group_labels,
        "commonLabels": common_labels,
        "commonAnnotations": _common(m.annotations for m in messages),
        "externalURL": external_url,
        "alerts": [
            {
                "status": m.status,
                "labels": m.labels,
                "annotations": m.annotations,
                "startsAt": rfc3339(m.starts_at),
                # Alertmanager's zero time means "not ended".
                "endsAt": rfc3339(m.ends_at) if m.ends_at is not None else "0001-01-01T00:00:00Z",
                "generatorURL": m.generator_url,
                "fingerprint": m.fingerprint[:16],
            }
            for m in messages
        ],
    }


# Slack mrkdwn: these three are its markup (links, mentions, entities) and must be entities.
_SLACK_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# An @ that starts a word (@here, @channel, @everyone, @someone) would ping when a workspace
# links names; a word joiner after it keeps the text readable and pings nobody.
_MENTION = re.compile(r"(?<![\w.])@(?=\w)")
# What a link may hold and still be one link: no markup, no whitespace, nothing outside ASCII.
_URL_SAFE = ":/?#[]@!$&'()*+,;=%-._~"


def slack_escape(text: str) -> str:
    """Text as Slack shows it literally: &, <, > as entities and mentions neutralised."""
    text = "".join(_SLACK_ENTITIES.get(ch, ch) for ch in text)
    return _MENTION.sub("@\u2060", text)


def _slack_link(url: str, label: str) -> str:
    return f"<{quote(url, safe=_URL_SAFE)}|{slack_escape(label)}>"


def slack_payload(messages: Sequence[AlertMessage]) -> dict[str, Any]:
    """A Slack incoming-webhook body: one `text` with every notice, escaped as mrkdwn."""
    parts = []
    for m in messages:
        title = slack_escape(_one_line(m.title))
        parts.append(
            f"*[{m.status.upper()}] {title}*\n{slack_escape(m.text)}\n"
            + _slack_link(m.generator_url, "Open dashboard")
        )
    return {"text": "\n\n".join(parts)}


def alertmanager_payload(
    messages: Sequence[AlertMessage], now: float | None = None
) -> list[dict[str, Any]]:
    """The body of Alertmanager's POST /api/v2/alerts (postableAlerts)."""
    out = []
    for m in messages:
        item: dict[str, Any] = {
            "labels": m.labels,
            "annotations": m.annotations,
            "startsAt": rfc3339(m.starts_at),
            "generatorURL": m.generator_url,
        }
        if m.status == "resolved":
            # An end in the past is how Alertmanager learns an alert resolved.
            item["endsAt"] = rfc3339(m.ends_at if m.ends_at is not None else (now or time.time()))
        elif m.ends_at is not None:
            item["endsAt"] = rfc3339(m.ends_at)
        out.append(item)
    return out


def _one_line(text: str, limit: int = 900) -> str:
    """Any run of whitespace or control characters as one space, at most limit characters."""
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _plain(text: str) -> str:
    """Body text without control characters other than newlines and tabs."""
    return "".join(ch if ch.isprintable() or ch in "\n\t" else " " for ch in text)


def _address(value: str) -> str:
    """One mailbox for a header, checked by the email package; raises _Permanent if bad."""
    name, addr = parseaddr(value)
    if (
        not value.isprintable()
        or not addr
        or "@" not in addr
        or any(not ch.isprintable() or ch == " " for ch in addr)
    ):
        raise _Permanent(f"not a mail address: {_one_line(value, 80)!r}")
    return formataddr((_one_line(name, 120), addr)) if name else addr


def email_message(
    messages: Sequence[AlertMessage], *, sender: str, recipients: Sequence[str]
) -> EmailMessage:
    """A mail with every notice: plain text plus an escaped HTML part, subject from the first.

    Headers are single lines and RFC 2047-encoded by the email package (policy SMTP); nothing
    in an alert can add a header or a line break to one.
    """
    msg = EmailMessage(policy=email.policy.SMTP)
    first = messages[0]
    extra = f" (+{len(messages) - 1} more)" if len(messages) > 1 else ""
    msg["Subject"] = _one_line(f"[{first.status.upper()}] {first.title}{extra}")
    msg["From"] = _address(sender)
    msg["To"] = ", ".join(_address(r) for r in recipients)
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    msg["Message-ID"] = make_msgid(domain="ett.local")
    body = "\n\n".join(
        f"[{m.status.upper()}] {_one_line(m.title)}\n\n{_plain(m.text)}\n\n"
        f"Dashboard: {quote(m.generator_url, safe=_URL_SAFE)}"
        for m in messages
    )
    msg.set_content(body)
    msg.add_alternative(_email_html(messages), subtype="html")
    return msg


def _email_html(messages: Sequence[AlertMessage]) -> str:
    """The HTML part: every piece of alert text escaped, the one link an escaped href."""
    blocks = []
    for m in messages:
        lines = "<br>\n".join(html.escape(line) for line in _plain(m.text).split("\n"))
        href = html.escape(quote(m.generator_url, safe=_URL_SAFE), quote=True)
        blocks.append(
            f"<h2>[{m.status.upper()}] {html.escape(_one_line(m.title))}</h2>\n<p>{lines}</p>\n"
            f'<p><a href="{href}">Open dashboard</a></p>'
        )
    return "<!doctype html><html><body>\n" + "\n<hr>\n".join(blocks) + "\n</body></html>\n"


def _common(dicts: Iterable[dict[str, str]]) -> dict[str, str]:
    items = list(dicts)
    if not items:
        return {}
    common = dict(items[0])
    for d in items[1:]:
        common = {k: v for k, v in common.items() if d.get(k) == v}
    return common


# ---- one send --------------------------------------------------------------------------------


def _post_json(
    client: httpx.Client, url: str, body: Any, headers: dict[str, str], timeout: float
) -> int:
    try:
        resp = client.post(url, json=body, headers=headers, timeout=timeout)
    except httpx.TimeoutException as exc:
        raise _Transient(f"timeout after {timeout:g}s: {exc.__class__.__name__}") from exc
    except httpx.TransportError as exc:
        raise _Transient(f"transport error: {exc}") from exc
    code = resp.status_code
    if 200 <= code < 300:
        return code
    snippet = resp.text[:200]
    if code == 429 or code >= 500:
        raise _Transient(
            f"HTTP {code}: {snippet}", code, parse_retry_after(resp.headers.get("Retry-After"))
        )
    raise _Permanent(f"HTTP {code}: {snippet}", code)


def _headers(channel: Channel) -> dict[str, str]:
    return {str(k): str(v) for k, v in channel.options.get("headers", {}).items()}


def send_webhook(
    channel: Channel,
    messages: Sequence[AlertMessage],
    *,
    client: httpx.Client,
    timeout: float,
    external_url: str,
) -> int:
    """POST Alertmanager's webhook body (version 4) to the target URL."""
    body = webhook_payload(messages, receiver=channel.label, external_url=external_url)
    return _post_json(client, channel.target, body, _headers(channel), timeout)


def send_slack(
    channel: Channel,
    messages: Sequence[AlertMessage],
    *,
    client: httpx.Client,
    timeout: float,
    external_url: str,
) -> int:
    """POST a Slack incoming-webhook body to the target URL."""
    return _post_json(client, channel.target, slack_payload(messages), _headers(channel), timeout)


def send_alertmanager(
    channel: Channel,
    messages: Sequence[AlertMessage],
    *,
    client: httpx.Client,
    timeout: float,
    external_url: str,
) -> int:
    """POST the notices to Alertmanager's /api/v2/alerts under the target URL."""
    url = channel.target.rstrip("/") + "/api/v2/alerts"
    return _post_json(client, url, alertmanager_payload(messages), _headers(channel), timeout)


def send_email(
    channel: Channel,
    messages: Sequence[AlertMessage],
    *,
    client: httpx.Client,
    timeout: float,
    external_url: str,
) -> int:
    """One mail over SMTP to the target's comma-separated addresses (options: smtp_host, ...)."""
    opts = channel.options
    recipients = [formataddr(pair) for pair in getaddresses([channel.target]) if pair[1]]
    if not recipients:
        raise _Permanent("no recipient address")
    msg = email_message(
        messages, sender=opts.get("sender", "ett-alerts@localhost"), recipients=recipients
    )
    try:
        with smtplib.SMTP(
            opts.get("smtp_host", "127.0.0.1"), int(opts.get("smtp_port", 25)), timeout=timeout
        ) as smtp:
            if opts.get("starttls"):
                smtp.starttls()
            if opts.get("username"):
                smtp.login(opts["username"], opts.get("password", ""))
            refused = smtp.send_message(msg)
    except smtplib.SMTPResponseException as exc:
        # SMTP's own split: 4xx replies are transient, 5xx are final.
        if 400 <= exc.smtp_code < 500:
            raise _Transient(f"SMTP {exc.smtp_code}: {exc.smtp_error!r}", exc.smtp_code) from exc
        raise _Permanent(f"SMTP {exc.smtp_code}: {exc.smtp_error!r}", exc.smtp_code) from exc
    except smtplib.SMTPRecipientsRefused as exc:
        raise _Permanent(f"recipients refused: {exc.recipients}") from exc
    except (smtplib.SMTPException, OSError) as exc:
        raise _Transient(f"SMTP error: {exc.__class__.__name__}: {exc}") from exc
    if refused:
        raise _Permanent(f"recipients refused: {sorted(refused)}")
    return 250


class Sender(Protocol):
    """Sends the notices to one channel once: returns the status code; raises _Transient
    (retried) or _Permanent (final)."""

    def __call__(
        self,
        channel: Channel,
        messages: Sequence[AlertMessage],
        *,
        client: httpx.Client,
        timeout: float,
        external_url: str,
    ) -> int: ...


# The channel kinds, each with its sender: the one list of them. ChannelSpec.kind (the SLO file
# and the API), the delivery counter's labels and docs/ALERTS.md's table follow it (a test
# checks the docs). A new kind is one sender here and its row in docs/ALERTS.md.
SENDERS: dict[str, Sender] = {
    "webhook": send_webhook,
    "slack": send_slack,
    "email": send_email,
    "alertmanager": send_alertmanager,
}
CHANNEL_KINDS: tuple[str, ...] = tuple(SENDERS)
ChannelKind = Literal[CHANNEL_KINDS]  # the same values, for pydantic (built at run time)

# Every (kind, outcome) of `ett_alert_deliveries` starts at 0, so a first delivery is an
# increase Prometheus sees (the counter lives in backend.health; its label values live here).
for _kind in CHANNEL_KINDS:
    for _outcome in get_args(Outcome):
        ALERT_DELIVERIES.labels(_kind, _outcome)


def send_once(
    channel: Channel,
    messages: Sequence[AlertMessage],
    *,
    client: httpx.Client,
    timeout: float,
    external_url: str,
) -> int:
    """One send by the channel kind's sender: the status code, or _Transient or _Permanent."""
    sender = SENDERS.get(channel.kind)
    if sender is None:
        raise _Permanent(f"unknown channel kind {channel.kind!r}")
    return sender(channel, messages, client=client, timeout=timeout, external_url=external_url)


# ---- retries and fan-out -----------------------------------------------------------------------


def deliver_channel(
    channel: Channel,
    messages: Sequence[AlertMessage],
    *,
    policy: RetryPolicy,
    on_attempt: Callable[[DeliveryAttempt], None] | None = None,
    external_url: str = "",
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> DeliveryResult:
    """Send to one channel, retrying transient failures until delivered, rejected or out of time."""
    result = DeliveryResult(channel=channel, ok=False)
    deadline = clock() + policy.deadline_s
    with httpx.Client(follow_redirects=False) as client:
        for attempt in range(1, policy.max_attempts + 1):
            remaining = deadline - clock()
            timeout = max(0.1, min(policy.send_timeout_s, remaining))
            started_wall, started = time.time(), clock()
            record = DeliveryAttempt(channel, attempt, started_wall, 0.0, "error")
            wait_s: float | None = None
            try:
                record.status_code = send_once(
                    channel, messages, client=client, timeout=timeout, external_url=external_url
                )
                record.outcome = "delivered"
                result.ok = True
            except _Permanent as exc:
                record.outcome, record.status_code, record.error = (
                    "rejected",
                    exc.status_code,
                    str(exc),
                )
            except _Transient as exc:
                record.status_code, record.error = exc.status_code, str(exc)
                record.retry_after_s = exc.retry_after_s
                wait_s = (
                    exc.retry_after_s
                    if exc.retry_after_s is not None
                    else backoff_delay(attempt, policy, rng)
                )
                left = deadline - clock()
                if attempt >= policy.max_attempts or wait_s >= left:
                    record.outcome = "gave_up"
                    reason = "attempts exhausted" if attempt >= policy.max_attempts else "deadline"
                    record.error = f"{record.error} ({reason})"
                    wait_s = None
                else:
                    record.outcome = "retry"
            except Exception as exc:  # a bug in one channel must not take the others down
                record.outcome, record.error = "error", f"{exc.__class__.__name__}: {exc}"
            record.duration_s = clock() - started
            result.attempts.append(record)
            _report(on_attempt, record)
            if record.outcome != "retry" or wait_s is None:
                break
            sleep(wait_s)
    return result


def _report(on_attempt: Callable[[DeliveryAttempt], None] | None, record: DeliveryAttempt) -> None:
    level = logging.INFO if record.outcome == "delivered" else logging.WARNING
    log.log(
        level,
        "alert delivery %s attempt %d: %s %s",
        record.channel.label,
        record.attempt,
        record.outcome,
        record.error or record.status_code,
    )
    if on_attempt is None:
        return
    try:
        on_attempt(record)
    except Exception:
        log.exception("could not record a delivery attempt for %s", record.channel.label)


def deliver_all(
    messages: Sequence[AlertMessage],
    channels: Sequence[Channel],
    *,
    policy: RetryPolicy | None = None,
    on_attempt: Callable[[DeliveryAttempt], None] | None = None,
    external_url: str = "",
    sleep: Callable[[float], None] = time.sleep,
) -> list[DeliveryResult]:
    """Send the notices to every channel at once; each has its own retries and deadline."""
    policy = policy or RetryPolicy()
    if not messages or not channels:
        return []
    pool = ThreadPoolExecutor(
        max_workers=min(16, len(channels)), thread_name_prefix="ett-alert-send"
    )
    try:
        futures = [
            pool.submit(
                deliver_channel,
                ch,
                messages,
                policy=policy,
                on_attempt=on_attempt,
                external_url=external_url,
                sleep=sleep,
            )
            for ch in channels
        ]
        # A grace beyond the deadline covers the last send's own timeout.
        wait_futures(futures, timeout=policy.deadline_s + policy.send_timeout_s + 1.0)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    results = []
    for ch, fut in zip(channels, futures, strict=True):
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            results.append(fut.result())
        else:
            err = "still running past its deadline" if not fut.done() else repr(fut.exception())
            stuck = DeliveryAttempt(ch, 0, time.time(), 0.0, "gave_up", error=err)
            _report(on_attempt, stuck)
            results.append(DeliveryResult(channel=ch, ok=False, attempts=[stuck]))
    return results
