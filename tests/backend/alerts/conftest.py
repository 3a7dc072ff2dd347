"""Real parts on 127.0.0.1 for the alert tests: an HTTP receiver, an SMTP server, Alertmanager."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

ALERTMANAGER_BIN = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def unused_port() -> int:
    """A port on 127.0.0.1 with no listener (connections are refused)."""
    return free_port()


@dataclass
class ReceivedRequest:
    """One request the receiver saw."""

    path: str
    headers: dict[str, str]
    body: Any
    at: float


@dataclass
class HttpReceiver:
    """A local HTTP server that records requests and answers from a per-path script."""

    url: str
    requests: list[ReceivedRequest] = field(default_factory=list)
    # path -> list of (status, headers) answered in order; once used up, 200.
    scripts: dict[str, list[tuple[int, dict[str, str]]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    arrived: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.arrived = threading.Condition(self.lock)

    def script(self, path: str, *answers: tuple[int, dict[str, str]]) -> None:
        """Answer the next requests to path with these statuses and headers, then 200."""
        with self.lock:
            self.scripts[path] = list(answers)

    def on(self, path: str) -> list[ReceivedRequest]:
        """Requests received on one path so far."""
        with self.lock:
            return [r for r in self.requests if r.path == path]

    def wait_for(self, path: str, count: int = 1, timeout: float = 10.0) -> list[ReceivedRequest]:
        """Block until path has seen count requests (or fail the test)."""
        deadline = time.monotonic() + timeout
        with self.arrived:
            while True:
                got = [r for r in self.requests if r.path == path]
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"{path}: {len(got)} of {count} requests within {timeout}s"
                    )
                self.arrived.wait(left)

    def _answer(self, path: str) -> tuple[int, dict[str, str]]:
        queue = self.scripts.get(path)
        return queue.pop(0) if queue else (200, {})


def _handler(receiver: HttpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (stdlib name)
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
            with receiver.arrived:
                receiver.requests.append(
                    ReceivedRequest(self.path, dict(self.headers.items()), body, time.time())
                )
                status, headers = receiver._answer(self.path)
                receiver.arrived.notify_all()
            payload = b"{}" if status < 300 else json.dumps({"error": status}).encode()
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def http_receiver() -> Iterator[HttpReceiver]:
    """A scripted HTTP receiver on 127.0.0.1 (stdlib http.server in a thread)."""
    with serve_receiver() as receiver:
        yield receiver


@contextmanager
def serve_receiver() -> Iterator[HttpReceiver]:
    """The HTTP receiver of `http_receiver`, for a module's fixture or a benchmark."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), None)  # type: ignore[arg-type]
    receiver = HttpReceiver(url=f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = _handler(receiver)
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.02},  # shutdown() waits for one poll
        name="test-http-receiver",
        daemon=True,
    )
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@dataclass
class SmtpSink:
    """An aiosmtpd server on 127.0.0.1 that keeps every envelope."""

    host: str
    port: int
    messages: list[Any] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_for(self, count: int = 1, timeout: float = 10.0) -> list[Any]:
        """Block until count mails arrived (or fail the test)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.messages) >= count:
                    return list(self.messages)
            time.sleep(0.02)
        raise AssertionError(f"{len(self.messages)} of {count} mails within {timeout}s")


@pytest.fixture
def smtp_server() -> Iterator[SmtpSink]:
    """A real SMTP server (aiosmtpd) on a free port of 127.0.0.1."""
    from aiosmtpd.controller import Controller

    port = free_port()
    sink = SmtpSink("127.0.0.1", port)

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
            with sink.lock:
                sink.messages.append(envelope)
            return "250 Message accepted for delivery"

    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield sink
    finally:
        controller.stop()


@dataclass
class Alertmanager:
    """A running prometheus-alertmanager and where its routes deliver."""

    url: str
    receiver: HttpReceiver
    owners: tuple[str, ...]

    def route_path(self, owner: str) -> str:
        """The receiver path that Alertmanager's route for owner posts to."""
        return f"/am/{owner}" if owner in self.owners else "/am/default"

    def alerts(self) -> list[dict[str, Any]]:
        """Alertmanager's own view of its alerts (GET /api/v2/alerts)."""
        return httpx.get(f"{self.url}/api/v2/alerts", timeout=5).json()


def alertmanager_config(receiver_url: str, owners: tuple[str, ...]) -> dict[str, Any]:
    """A config that routes by the owner label, one webhook receiver per owner."""

    def hook(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "webhook_configs": [{"url": f"{receiver_url}/am/{name}", "send_resolved": True}],
        }

    return {
        "route": {
            "receiver": "default",
            "group_by": ["alertname", "owner", "model"],
            "group_wait": "100ms",
            "group_interval": "1s",
            "repeat_interval": "1h",
            "routes": [{"matchers": [f'owner="{o}"'], "receiver": o} for o in owners],
        },
        "receivers": [hook("default"), *(hook(o) for o in owners)],
    }


@pytest.fixture
def alertmanager(tmp_path: Path, http_receiver: HttpReceiver) -> Iterator[Alertmanager]:
    """A real Alertmanager on 127.0.0.1, clustering off, routing by owner to http_receiver."""
    if ALERTMANAGER_BIN is None:
        pytest.fail("prometheus-alertmanager is not installed (make deps installs it via apt)")
    owners = ("scheduler", "checkpoint", "compiler")
    cfg = tmp_path / "alertmanager.yml"
    cfg.write_text(yaml.safe_dump(alertmanager_config(http_receiver.url, owners)))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    logfile = (tmp_path / "alertmanager.log").open("wb")
    proc = subprocess.Popen(
        [
            ALERTMANAGER_BIN,
            f"--config.file={cfg}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=logfile,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                raise AssertionError(
                    f"alertmanager exited with {proc.returncode}: {(tmp_path / 'alertmanager.log').read_text()}"
                )
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("alertmanager did not become ready within 20s")
            time.sleep(0.1)
        yield Alertmanager(url=url, receiver=http_receiver, owners=owners)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        logfile.close()
