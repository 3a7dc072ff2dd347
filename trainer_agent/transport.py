"""HTTP transport to the ingest API, standard library only."""

from __future__ import annotations

import email.utils
import http.client
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Protocol

EVENTS_PATH = "/api/v1/events"
USER_AGENT = "ett-trainer-agent/1"


@dataclass(frozen=True)
class Response:
    """What the ingest API answered to one batch."""

    status: int
    body: dict[str, Any] | None
    retry_after_s: float | None = None


class Transport(Protocol):
    """Sends one JSON body; raises OSError (or http.client.HTTPException) on network errors."""

    def send(self, body: bytes, timeout: float) -> Response:
        """POST one batch body and return the answer."""
        ...


def events_url(endpoint: str) -> str:
    """The events URL for a base endpoint (`http://host:port`) or a full events URL."""
    url = endpoint.rstrip("/")
    return url if url.endswith(EVENTS_PATH) else url + EVENTS_PATH


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class HttpTransport:
    """POSTs batches with urllib; a fresh connection per batch, so a fork or a hang leaves no state."""

    def __init__(self, endpoint: str, token: str | None) -> None:
        self.url = events_url(endpoint)
        self.headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    def send(self, body: bytes, timeout: float) -> Response:
        """POST one batch body and return the answer."""
        request = urllib.request.Request(self.url, data=body, headers=self.headers, method="POST")
        # No proxies: the ingest API is reached directly, as configured.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=timeout) as answer:
                return Response(answer.status, _json_body(answer.read()))
        except urllib.error.HTTPError as err:
            try:
                raw = err.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            retry_after = parse_retry_after(err.headers.get("Retry-After") if err.headers else None)
            return Response(err.code, _json_body(raw), retry_after)
        except urllib.error.URLError as err:
            reason = err.reason
            raise reason if isinstance(reason, OSError) else OSError(str(reason)) from err


def _json_body(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
