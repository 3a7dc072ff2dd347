"""A controllable stand-in for the ingest API: stdlib HTTP server on 127.0.0.1, ephemeral port.

It validates every event with the real wire schema (ingest.schema) and stores each event id once,
so tests can check that nothing was lost, duplicated, or malformed.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

try:
    from ingest.schema import EventError, validate_event
except ImportError:  # the agent's own tests in a bare venv with only ett-agent installed
    _PHASE_ROOTS = ("hardware_setup", "trainer_init", "checkpoint_restore", "pt2_compile",
                    "shutdown", "publish", "custom")  # fmt: skip

    class EventError(ValueError):  # type: ignore[no-redef]
        """An event the stand-in refuses."""

    def validate_event(raw: Any, **_: Any) -> dict[str, Any]:  # type: ignore[misc]
        """The common fields only; the server's full schema is checked where it is installed."""
        if not isinstance(raw, dict):
            raise EventError("event: expected a JSON object")
        for key in ("event_id", "job_id", "type"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise EventError(f"{key}: field required")
        phase = raw.get("phase")
        if phase is not None and str(phase).split(".", 1)[0] not in _PHASE_ROOTS:
            raise EventError(f"phase: unknown phase {phase!r}")
        event = dict(raw)
        if event["type"] in ("job_submitted", "job_ended"):
            event["attempt"] = None
        if event["type"] == "checkpoint":
            event.setdefault("ok", True)
        return event


class FakeIngest:
    """Scriptable ingest: queue answers with `script`, hang with `hang`, read `events`."""

    def __init__(self, upstream: str | None = None) -> None:
        self.upstream = upstream  # proxy mode: forward what the script does not answer
        self.lock = threading.Lock()
        self.events: dict[str, dict[str, Any]] = {}
        self.deliveries: Counter[str] = Counter()
        self.requests: list[tuple[float, int]] = []  # (monotonic time, events in body)
        self.script: list[tuple[int, dict[str, str]]] = []  # forced answers, consumed in order
        self.reject_ids: set[str] = set()
        # Answer 500 to any batch holding an event this predicate marks (a poison event, as a
        # database that refuses one row fails the whole transaction).
        self.poison: Callable[[dict[str, Any]], bool] | None = None
        self.release = threading.Event()
        self.release.set()
        self.hanging = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        # A short poll, since shutdown() waits for it: the default 0.5 s is 0.5 s of every test.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        """Base URL of the fake API."""
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def hang(self) -> None:
        """Make every request wait until unhang() (or the client gives up)."""
        self.release.clear()

    def unhang(self) -> None:
        """Let hanging requests proceed."""
        self.release.set()

    def of_type(self, etype: str) -> list[dict[str, Any]]:
        """Stored events of one type, ordered by their time."""
        with self.lock:
            found = [e for e in self.events.values() if e["type"] == etype]
        return sorted(found, key=lambda e: e.get("ts", e.get("start", 0.0)))

    def close(self) -> None:
        """Stop serving."""
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _forward(self, raw: bytes) -> None:
                import urllib.error
                import urllib.request

                request = urllib.request.Request(
                    fake.upstream.rstrip("/") + self.path,
                    data=raw,
                    headers={
                        "Content-Type": "application/json",
                        "Authorization": self.headers.get("Authorization", ""),
                    },
                    method="POST",
                )
                try:
                    with urllib.request.urlopen(request, timeout=30) as answer:
                        status, data = answer.status, answer.read()
                except urllib.error.HTTPError as err:
                    status, data = err.code, err.read()
                self._answer(status, json.loads(data or b"{}"), {})

            def do_POST(self) -> None:
                import time

                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                if not fake.release.is_set():
                    with fake.lock:
                        fake.hanging += 1
                    fake.release.wait(60)
                body = json.loads(raw)
                batch = body["events"]
                with fake.lock:
                    fake.requests.append((time.monotonic(), len(batch)))
                    forced = fake.script.pop(0) if fake.script else None
                if forced is not None:
                    self._answer(forced[0], {"detail": "scripted"}, forced[1])
                    return
                if fake.poison is not None and any(
                    isinstance(e, dict) and fake.poison(e) for e in batch
                ):
                    self._answer(500, {"detail": "Internal Server Error (poisoned batch)"}, {})
                    return
                if fake.upstream is not None:
                    self._forward(raw)
                    return
                if self.headers.get("Authorization") != "Bearer secret":
                    self._answer(401, {"detail": "bad token"}, {})
                    return
                accepted = duplicates = 0
                rejected = []
                for index, event in enumerate(batch):
                    try:
                        if event.get("event_id") in fake.reject_ids:
                            raise EventError("event_id: refused by the test")
                        normalized = validate_event(event)
                    except EventError as err:
                        rejected.append(
                            {"index": index, "event_id": event.get("event_id"), "error": str(err)}
                        )
                        continue
                    with fake.lock:
                        fake.deliveries[normalized["event_id"]] += 1
                        if normalized["event_id"] in fake.events:
                            duplicates += 1
                        else:
                            fake.events[normalized["event_id"]] = normalized
                            accepted += 1
                self._answer(
                    200,
                    {"accepted": accepted, "duplicates": duplicates, "rejected": rejected},
                    {},
                )

        return Handler
