"""Plain `ett serve` survives slow clients: 2,000 unfinished requests (a partial head each, no
token) do not delay a whole request by more than 1 s, and unfinished heads and bodies are
answered 408 once their timeout passes. The server runs with 1,024 open files (ulimit -n), so
without the connection cap the slow clients use up its file descriptors."""

from __future__ import annotations

import os
import resource
import socket
import time
from pathlib import Path

import httpx
import pytest

from backend import migrate
from tests.cluster import ApiReplica, ett

SLOW = 2_000
SERVER_FILES = 1_024
HEADER_TIMEOUT_S = 6.0
BODY_TIMEOUT_S = 2.0


def _limit_files() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (SERVER_FILES, hard))


class LimitedReplica(ApiReplica):
    """`ett serve --role api` with SERVER_FILES open files at most."""

    def start(self) -> None:
        """Start it under the lower open-file limit."""
        import subprocess

        from tests.cluster import BIN

        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(BIN / "ett"), *self.args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_limit_files,
            )


def _slow(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    return s


def _timed_get(client: httpx.Client, url: str) -> float:
    start = time.monotonic()
    r = client.get(url)
    took = time.monotonic() - start
    assert r.status_code == 200, r.text
    return took


def test_slow_clients_do_not_delay_a_whole_request(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < SLOW + 200:
        pytest.skip(f"needs {SLOW + 200} open files (ulimit -Hn is {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, SLOW + 200), hard))
    url = f"sqlite:///{tmp_path / 'slow.db'}"
    migrate.upgrade(url)
    env = {
        **os.environ,
        "ETT_HOME": str(tmp_path),
        "ETT_DATABASE_URL": url,
        "ETT_LOG_LEVEL": "warning",
        "ETT_HTTP_MAX_CONNECTIONS": "500",
        "ETT_HTTP_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        "ETT_HTTP_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
    }
    ett(env, "db", "upgrade")
    token = ett(env, "token", "create", "--name", "slow", "--scope", "ingest").split()[-1]
    server = LimitedReplica("slow", env, tmp_path)
    sockets: list[socket.socket] = []
    server.start()
    try:
        server.wait_ready()
        api = server.url + "/api/v1/jobs"
        with httpx.Client(timeout=10) as client:
            baseline = min(_timed_get(client, api) for _ in range(5))
        opened = time.monotonic()
        for _ in range(SLOW):
            sockets.append(_slow(server.port))
        # A fresh connection each time, as a new client's request would come.
        worst = 0.0
        for _ in range(5):
            with httpx.Client(timeout=10) as client:
                worst = max(worst, _timed_get(client, api))
        assert time.monotonic() - opened < HEADER_TIMEOUT_S  # the slow ones were still open
        assert worst - baseline < 1.0, (worst, baseline)
        print(
            f"whole request: {baseline * 1000:.1f} ms alone, {worst * 1000:.1f} ms worst "
            f"beside {SLOW} slow clients"
        )

        # A head that never completes is answered 408 once the header timeout has passed.
        late = _slow(server.port)
        time.sleep(0.1)
        started = time.monotonic()
        late.settimeout(HEADER_TIMEOUT_S + 5)
        assert late.recv(64).startswith(b"HTTP/1.1 408")
        assert time.monotonic() - started < HEADER_TIMEOUT_S + 2
        late.close()
        # So is a body that stops halfway, once the body timeout has passed.
        partial = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        partial.sendall(
            b"POST /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {token}\r\n".encode()
            + b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"events": ['
        )
        partial.settimeout(BODY_TIMEOUT_S + 5)
        assert partial.recv(64).startswith(b"HTTP/1.1 408")
        partial.close()
        assert server.alive(), server.log_tail()
    finally:
        for s in sockets:
            s.close()
        server.stop()
