"""Plain `ett serve` against slow and idle clients: header, body and keep-alive timeouts and a
connection cap (docs/SCALING.md, "Serving without a proxy").

uvicorn bounds only the keep-alive wait. Its HTTP protocol (httptools) is extended here: a
request head must arrive within the header timeout and its body within the body timeout, else
the connection is answered 408 and closed. Past the connection cap a new connection closes the
oldest one that is still waiting for a request head (or idling between requests), so unfinished
requests can never crowd out a client that sends whole ones; when every connection is busy with
a request, the new one is answered 503.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("ett.serve")

_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
_FULL = (
    b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nconnection: close\r\n"
    b"content-length: 0\r\n\r\n"
)
# File descriptors kept for everything but client connections (database pool, files, logs).
FD_RESERVE = 256


@dataclass(frozen=True)
class Limits:
    """What one client connection may take (the ETT_HTTP_* settings)."""

    header_timeout_s: float
    body_timeout_s: float
    keep_alive_timeout_s: float
    max_connections: int


def fit_file_limit(max_connections: int) -> int:
    """Raise the soft open-file limit so the cap fits; the cap that does fit (warned if lower)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_connections + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < want:
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= want:
        return max_connections
    fitted = max(16, soft - FD_RESERVE)
    log.warning(
        "ETT_HTTP_MAX_CONNECTIONS=%d does not fit the open-file limit %d (ulimit -n): "
        "capping client connections at %d",
        max_connections,
        soft,
        fitted,
    )
    return fitted


def guarded_protocol(limits: Limits) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with these limits, for uvicorn.run(http=...)."""
    # Connections waiting for a request head or idling between requests, oldest first: the
    # ones a new connection may displace past the cap. One dict per server (per call).
    waiting: dict[GuardedProtocol, None] = {}

    class GuardedProtocol(HttpToolsProtocol):
        """HttpToolsProtocol with header and body deadlines and a connection cap."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections and not self._shed_one():
                transport.write(_FULL)
                transport.close()
                return
            self._wait_for_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_deadline()
            waiting.pop(self, None)
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._deadline is None:  # the next request of a kept-alive connection
                self._wait_for_head()

        def on_headers_complete(self) -> None:
            waiting.pop(self, None)
            self._stop_deadline()
            super().on_headers_complete()
            if self.cycle is not None and self.cycle.more_body and limits.body_timeout_s > 0:
                self._deadline = self.loop.call_later(limits.body_timeout_s, self._timed_out)

        def on_message_complete(self) -> None:
            self._stop_deadline()
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                waiting[self] = None  # idle until its next request: displaceable

        def _wait_for_head(self) -> None:
            waiting.pop(self, None)
            waiting[self] = None
            self._stop_deadline()
            if limits.header_timeout_s > 0:
                self._deadline = self.loop.call_later(limits.header_timeout_s, self._timed_out)

        def _stop_deadline(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _timed_out(self) -> None:
            self._deadline = None
            waiting.pop(self, None)
            if self.transport.is_closing():
                return
            if self.cycle is None or not self.cycle.response_started:
                self.transport.write(_TIMEOUT)
            self.transport.close()

        def _shed_one(self) -> bool:
            """Close the oldest connection waiting for a head (not this one); False if none."""
            for victim in waiting:
                if victim is not self:
                    waiting.pop(victim)
                    victim._stop_deadline()
                    if not victim.transport.is_closing():
                        victim.transport.close()
                    return True
            return False

    return GuardedProtocol
