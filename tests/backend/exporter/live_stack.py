"""A real Prometheus (Debian's package) scraping a live `ett serve`, both on loopback ports.

Each process gets its own temporary directory, config and port (never the Debian service);
`close()` stops both, waiting a bounded time before killing.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "deploy" / "prometheus" / "rules"
# A loaded CI machine can take over a second to answer a scrape: 2 s interval and timeout.
SCRAPE_INTERVAL_S = 2
EVAL_INTERVAL_S = 1


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def need(binary: str) -> str:
    """The path of a required binary, or a failure that says how to get it."""
    path = shutil.which(binary)
    if path is None:
        raise RuntimeError(
            f"{binary} is not installed: run `bash scripts/test_services.sh` (apt-get install "
            "prometheus) before the tests"
        )
    return path


def wait_for(what: str, probe: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    """Poll `probe` until it returns something truthy; fail after `timeout_s` with `what`."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (httpx.HTTPError, OSError) as err:
            last = err
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}; last: {last!r}")


class LiveStack:
    """`ett serve` on a database, Prometheus scraping it with a bearer token, their clients."""

    def __init__(
        self, *, workdir: Path, database_url: str, read_token: str, ingest_token: str
    ) -> None:
        self.workdir = workdir
        self.database_url = database_url
        self.read_token = read_token
        self.ingest_token = ingest_token
        self.ett_port = free_port()
        self.prom_port = free_port()
        self.ett_url = f"http://127.0.0.1:{self.ett_port}"
        self.prom_url = f"http://127.0.0.1:{self.prom_port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.http = httpx.Client(timeout=10.0)

    def env(self) -> dict[str, str]:
        """The environment of the `ett` processes."""
        return {
            **os.environ,
            "ETT_DATABASE_URL": self.database_url,
            "ETT_HOME": str(self.workdir),
            "ETT_RECOMPUTE_MODE": "inline",
            "ETT_ALERTS_ENABLED": "false",
            "ETT_READ_TOKEN_REQUIRED": "true",
            "ETT_LOG_LEVEL": "warning",
        }

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        self.procs.append(proc)

    def log_tail(self, name: str, n: int = 3000) -> str:
        """The end of a process' log, for failure messages."""
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def start(self) -> None:
        """Start `ett serve`, then Prometheus; return once both answer."""
        ett = Path(sys.executable).with_name("ett")
        self._spawn(
            "ett",
            [
                str(ett),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.ett_port),
                "--no-workers",
            ],
            env=self.env(),
        )
        wait_for(
            f"ett serve on {self.ett_url}\n{self.log_tail('ett')}",
            lambda: self.http.get(self.ett_url + "/healthz").status_code == 200,
        )
        config = {
            "global": {
                "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
                "evaluation_interval": f"{EVAL_INTERVAL_S}s",
            },
            "rule_files": self._rule_files(),
            "scrape_configs": [
                {
                    "job_name": "ett",
                    "metrics_path": "/metrics",
                    "authorization": {"type": "Bearer", "credentials": self.read_token},
                    "static_configs": [{"targets": [f"127.0.0.1:{self.ett_port}"]}],
                }
            ],
        }
        cfg = self.workdir / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(config), encoding="utf-8")
        self._spawn(
            "prometheus",
            [
                need("prometheus"),
                f"--config.file={cfg}",
                f"--storage.tsdb.path={self.workdir / 'prom-data'}",
                f"--web.listen-address=127.0.0.1:{self.prom_port}",
                "--log.level=warn",
            ],
        )
        wait_for(
            f"Prometheus ready on {self.prom_url}\n{self.log_tail('prometheus')}",
            lambda: self.http.get(self.prom_url + "/-/ready").status_code == 200,
        )

    def _rule_files(self) -> list[str]:
        """The shipped rule files, with every group evaluated every EVAL_INTERVAL_S."""
        out = []
        (self.workdir / "rules").mkdir(exist_ok=True)
        for path in sorted(RULES.glob("*.yml")):
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            for group in doc["groups"]:
                if "interval" in group:
                    group["interval"] = f"{EVAL_INTERVAL_S}s"
            copy = self.workdir / "rules" / path.name
            copy.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
            out.append(str(copy))
        return out

    def close(self) -> None:
        """Stop everything this stack started (SIGTERM, then SIGKILL after 10 s)."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.procs.clear()
        self.http.close()

    # ---- clients ------------------------------------------------------------------------------

    def post(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        """POST a batch to ingest; returns its answer."""
        r = self.http.post(
            self.ett_url + "/api/v1/events",
            json={"events": events},
            headers={"Authorization": f"Bearer {self.ingest_token}"},
        )
        r.raise_for_status()
        return r.json()

    def rest(self, path: str, **params: Any) -> Any:
        """GET a REST answer with the read token."""
        r = self.http.get(
            self.ett_url + path,
            params=params,
            headers={"Authorization": f"Bearer {self.read_token}"},
        )
        r.raise_for_status()
        return r.json()

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query through Prometheus' HTTP API; raises on a PromQL error."""
        r = self.http.get(self.prom_url + "/api/v1/query", params={"query": expr})
        doc = r.json()
        if doc.get("status") != "success":
            raise AssertionError(f"PromQL {expr!r} failed: {doc.get('error')}")
        return doc["data"]["result"]

    def scalar(self, expr: str) -> float | None:
        """The single value of a query answering one series (None when it answers none)."""
        result = self.query(expr)
        if not result:
            return None
        assert len(result) == 1, f"{expr} answered {len(result)} series"
        return float(result[0]["value"][1])

    def by(self, expr: str, label: str) -> dict[str, float]:
        """A query's values keyed by one label."""
        return {s["metric"].get(label, ""): float(s["value"][1]) for s in self.query(expr)}
