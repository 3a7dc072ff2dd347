"""A real `ett serve` in a subprocess, on a temp SQLite database, for end-to-end agent tests."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """The schema, an ingest token, then `ett serve`; stop() and start() keep the database."""

    def __init__(
        self, home: Path, *, database_url: str | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.home = home
        self.db_path = home / "ett.db"  # the default database (stored_events reads it)
        self.env = {
            **os.environ,
            "ETT_HOME": str(home),
            "ETT_DATABASE_URL": database_url or f"sqlite:///{self.db_path}",
            "ETT_RECOMPUTE_INTERVAL_S": "0.5",
            "ETT_ALERTS_ENABLED": "false",
            **(env or {}),
        }
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = open(home / "serve.log", "ab")  # noqa: SIM115 - closed in close()
        self.token = self._prepare()

    def _prepare(self) -> str:
        """What `ett db upgrade` and `ett token create --name agent` do, run in this process:
        the same functions, without starting two more interpreters (about 3 s a server). Returns
        the token. The server package is imported here, not above: the agent's wheel test runs
        this module's neighbours where only the agent is installed."""
        from backend import migrate
        from backend.auth import service
        from backend.db import Database
        from backend.events import retention

        url = self.env["ETT_DATABASE_URL"]
        migrate.upgrade(url)
        db = Database(url)
        try:
            with db.engine.begin() as conn:
                retention.ensure_partitions(conn)
            with db.session() as s:
                _, secret = service.create(db_session=s, name="agent", scope="ingest")
        finally:
            db.dispose()
        return secret

    def start(self, timeout_s: float = 60.0) -> None:
        """Start serving on the same port and database; wait (bounded) for /healthz."""
        self.proc = subprocess.Popen(
            [str(BIN / "ett"), "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ett serve exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"ett serve did not answer /healthz within {timeout_s:.0f} s")

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        """Stop and release the log file."""
        self.stop()
        self.log.close()

    def get(self, path: str) -> Any:
        """GET a JSON document from the REST API."""
        with urllib.request.urlopen(self.url + path, timeout=30) as answer:
            return json.loads(answer.read())

    def ended_ett(self, job_id: str, status: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """The job's stored ETT answer once the worker has recomputed it ended with `status`
        (the read path serves what is stored; the worker catches up within a few rounds)."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = self.get(f"/api/v1/jobs/{job_id}/ett")
                if last.get("status") == status and not last.get("provisional"):
                    return last
            except urllib.error.HTTPError as err:
                last = f"HTTP {err.code}"
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} did not end as {status!r} within {timeout_s} s: {last}")

    def stored_events(self, job_id: str) -> list[dict[str, Any]]:
        """The raw events stored for one job (normalized payloads)."""
        with sqlite3.connect(self.db_path) as conn:
            rows = conn.execute(
                "SELECT payload FROM raw_events WHERE job_id = ?", (job_id,)
            ).fetchall()
        return [json.loads(r[0]) if isinstance(r[0], str) else r[0] for r in rows]

    def rejected_count(self) -> int:
        """Rows of rejected_events."""
        with sqlite3.connect(self.db_path) as conn:
            return int(conn.execute("SELECT count(*) FROM rejected_events").fetchone()[0])
