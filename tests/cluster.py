"""Real `ett serve --role api` and `ett worker` processes on one database (failover, load)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tests.trainer_agent.live_server import free_port

BIN = Path(sys.executable).parent


def ett(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    """Run one `ett` command to completion; its stdout (raises with stderr on failure)."""
    out = subprocess.run(
        [str(BIN / "ett"), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    if out.returncode != 0:
        raise RuntimeError(f"ett {' '.join(args)} failed: {out.stderr[-2000:]}")
    return out.stdout


class EttProcess:
    """One `ett` process (an API replica or a worker) with its log file."""

    def __init__(self, name: str, args: Sequence[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.args = list(args)
        self.env = env
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it (returns at once)."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(BIN / "ett"), *self.args], env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    @property
    def pid(self) -> int:
        """The process id."""
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would."""
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (SIGKILL after `timeout`); the exit code, None if it was not running."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the process's log."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


class ApiReplica(EttProcess):
    """`ett serve --role api` on a free port of 127.0.0.1."""

    def __init__(self, name: str, env: dict[str, str], log_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = ["serve", "--role", "api", "--host", "127.0.0.1", "--port", str(self.port)]
        super().__init__(name, args, env, log_dir)

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        """Block until /healthz answers 200 (bounded)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not answer /healthz in {timeout_s:.0f} s")


class Cluster:
    """N API replicas and M workers against one database URL."""

    def __init__(
        self,
        database_url: str,
        home: Path,
        *,
        apis: int = 2,
        workers: int = 2,
        env: dict[str, str] | None = None,
    ) -> None:
        self.env = {
            **os.environ,
            "ETT_HOME": str(home),
            "ETT_DATABASE_URL": database_url,
            "ETT_RECOMPUTE_MODE": "background",
            "ETT_RECOMPUTE_INTERVAL_S": "0.2",
            **(env or {}),
        }
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self.apis = [ApiReplica(f"api{i}", self.env, home) for i in range(apis)]
        self.workers = [
            EttProcess(f"worker{i}", ["worker"], self.env, home) for i in range(workers)
        ]

    def token(self, name: str = "cluster") -> str:
        """A fresh ingest token."""
        out = ett(self.env, "token", "create", "--name", name, "--scope", "ingest")
        return out.strip().splitlines()[-1].strip()

    def start(self) -> None:
        """Start every process; wait for the replicas' /healthz."""
        for p in [*self.apis, *self.workers]:
            p.start()
        for api in self.apis:
            api.wait_ready()

    def stop(self) -> dict[str, int | None]:
        """SIGTERM every process; their exit codes by name."""
        return {p.name: p.stop() for p in [*self.apis, *self.workers]}
