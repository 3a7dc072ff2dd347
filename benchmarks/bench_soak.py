"""Soak: the real agent in several processes while the server dies, the database drops, poison flows.

    .venv/bin/python benchmarks/bench_soak.py                    # 60 s, 4 trainer processes
    .venv/bin/python benchmarks/bench_soak.py --duration 300 --procs 6 --json out.json

Parts, all real and on 127.0.0.1: a scratch Postgres database (ETT_BENCH_PG_URL, default the test
Postgres), `ett serve` on it through a TCP proxy this script can cut, and in front of the server an
HTTP proxy that answers 500 to any batch holding a poison event (as a database that refuses one row
fails the whole transaction). Trainer processes (pairs of ranks share a job and its spool) run a
loop with the real `trainer_agent.Agent`: steps, phases, heartbeats, a poison phase every few
seconds, and, on rank 1, a failure message with a NUL byte (refused by Postgres). Meanwhile, in
turn: the server is killed with SIGKILL and restarted, every database connection of the server
is terminated (pg_terminate_backend), and the database proxy is cut for a few seconds.

At the end every process closes its agent, `python -m trainer_agent resend` sends what is left in
the spools, and each event a process handed to its agent (recorded by a tap on Sender.submit) is
found: stored (raw_events), rejected by the API with a reason (rejected_events), dead-lettered by
the agent (dead-letter.jsonl, with the answer), still waiting in a spool, or lost. Target: 0 lost,
and only poison or NUL events dead-lettered.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.trainer_agent.live_server import LiveServer, free_port  # noqa: E402

BIN = Path(sys.executable).parent
POISON_PHASE = "custom.soak_poison"


# ---- the database proxy ------------------------------------------------------------------------


class TcpProxy:
    """Forwards 127.0.0.1:port to an upstream; cut() drops every connection and refuses for a while."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = free_port()
        self.refuse_until = 0.0
        self.lock = threading.Lock()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.running = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self.running:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if time.monotonic() < self.refuse_until:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.pairs.append((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def cut(self, seconds: float) -> int:
        """Drop every open connection and refuse new ones for `seconds`; returns how many dropped."""
        self.refuse_until = time.monotonic() + seconds
        with self.lock:
            pairs, self.pairs = self.pairs, []
        for pair in pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
        return len(pairs)

    def close(self) -> None:
        """Stop accepting and drop everything."""
        self.running = False
        self.listener.close()
        self.cut(0)


# ---- the poison proxy ----------------------------------------------------------------------------


def poison_proxy(upstream: str) -> ThreadingHTTPServer:
    """An HTTP proxy that answers 500 to batches with a poison event and forwards the rest."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, data: bytes, retry_after: str | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if retry_after:
                self.send_header("Retry-After", retry_after)
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                events = json.loads(raw).get("events", [])
            except ValueError:
                events = []
            if any(isinstance(e, dict) and e.get("phase") == POISON_PHASE for e in events):
                self._answer(500, b'{"detail": "poison event in the batch"}')
                return
            request = urllib.request.Request(
                upstream + self.path,
                data=raw,
                headers={
                    "Content-Type": "application/json",
                    "Authorization": self.headers.get("Authorization", ""),
                },
                method="POST",
            )
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            try:
                with opener.open(request, timeout=30) as answer:
                    self._answer(answer.status, answer.read())
            except urllib.error.HTTPError as err:
                self._answer(err.code, err.read(), err.headers.get("Retry-After"))
            except OSError:
                self._answer(502, b'{"detail": "the ETT server is down"}')

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# ---- the server ----------------------------------------------------------------------------------


# ---- one trainer process -------------------------------------------------------------------------


def worker(args: argparse.Namespace) -> int:
    """A training loop with the real agent; every event it hands over is written to --out."""
    from trainer_agent import sender as sender_module
    from trainer_agent.agent import Agent

    tap = open(args.out, "a", buffering=1)  # noqa: SIM115 - open for the process's life
    original_submit = sender_module.Sender.submit
    lock = threading.Lock()

    def submit(self: Any, event: dict[str, Any]) -> None:
        mark = (
            "poison"
            if event.get("phase") == POISON_PHASE
            else ("nul" if "\x00" in str(event.get("message", "")) else "")
        )
        with lock:
            tap.write(
                json.dumps({"event_id": event["event_id"], "type": event["type"], "mark": mark})
            )
            tap.write("\n")
        original_submit(self, event)

    sender_module.Sender.submit = submit  # type: ignore[method-assign]
    rng = random.Random(args.seed)
    agent = Agent(
        args.job,
        0,
        args.endpoint,
        args.token,
        spool_dir=args.spool,
        rank=args.rank,
        progress_window_s=0.5,
        heartbeat_s=1.0,
        exit_timeout_s=60.0,
        request_timeout_s=5.0,
        install_handlers=False,
        model="soak",
        gpus=2,
    )
    started = time.monotonic()
    end = started + args.duration
    calm = end - min(10.0, args.duration / 3)  # no poison at the very end: let it be isolated
    cursor = 0
    next_phase = next_poison = next_nul = started + 1.0
    while time.monotonic() < end:
        cursor += 1
        agent.step(cursor)
        now = time.monotonic()
        if now >= next_phase:
            t = time.time()
            agent.record_phase(f"custom.soak_{cursor % 7}", t - 0.01, t)
            next_phase = now + rng.uniform(0.1, 0.4)
        if now >= next_poison and now < calm:
            t = time.time()
            agent.record_phase(POISON_PHASE, t - 0.01, t)
            next_poison = now + rng.uniform(3.0, 6.0)
        if args.rank == 1 and now >= next_nul and now < calm:
            agent.failure("induced", "soak message with a NUL \x00 byte")
            next_nul = now + rng.uniform(4.0, 8.0)
        time.sleep(0.002)
    delivered = agent.close(status="succeeded")
    stats = agent.stats()
    tap.close()
    print(json.dumps({"job": args.job, "rank": args.rank, "delivered": delivered, **stats}))
    return 0


# ---- the run ------------------------------------------------------------------------------------


def chaos(
    server: LiveServer,
    db_proxy: TcpProxy,
    admin_url: str,
    db_name: str,
    stop: threading.Event,
    every_s: float,
    log: list[dict[str, Any]],
) -> None:
    """In turn: kill and restart the server, terminate its DB connections, cut the DB proxy."""
    from sqlalchemy import create_engine, text

    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    actions = ["kill_server", "terminate_db_connections", "cut_db"]
    i = 0
    while not stop.wait(every_s):
        action = actions[i % len(actions)]
        i += 1
        at = time.time()
        if action == "kill_server":
            server.kill()
            time.sleep(2.0)
            server.start(timeout_s=90)
            detail = "SIGKILL, down 2 s, restarted"
        elif action == "terminate_db_connections":
            with admin.connect() as conn:
                n = conn.execute(
                    text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = :db AND pid <> pg_backend_pid()"
                    ),
                    {"db": db_name},
                ).scalar()
            detail = f"pg_terminate_backend on {n} connections"
        else:
            n = db_proxy.cut(5.0)
            detail = f"DB proxy cut: {n} connections dropped, refused for 5 s"
        log.append({"t": round(at, 3), "action": action, "detail": detail})
    admin.dispose()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole soak; returns the figures."""
    import tempfile

    from benchmarks._pg import PG_ADMIN_URL, scratch_postgres

    work = Path(tempfile.mkdtemp(prefix="ett-soak-"))
    with scratch_postgres("ett_soak") as url:
        db_name = url.rsplit("/", 1)[1]
        host_port = url.split("@", 1)[1].split("/", 1)[0]
        host, port = host_port.rsplit(":", 1)
        db_proxy = TcpProxy((host, int(port)))
        proxied = url.replace(host_port, f"127.0.0.1:{db_proxy.port}")
        server = LiveServer(work, database_url=proxied, env={"ETT_RECOMPUTE_INTERVAL_S": "2"})
        server.start(timeout_s=90)
        front = poison_proxy(server.url)
        endpoint = f"http://127.0.0.1:{front.server_address[1]}"
        jobs = [f"soak-{i // 2}" for i in range(args.procs)]
        procs = []
        logs = []
        for i, job in enumerate(jobs):
            out = work / f"tap-{i}.jsonl"
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                "--job",
                job,
                "--rank",
                str(i % 2),
                "--duration",
                str(args.duration),
                "--out",
                str(out),
                "--endpoint",
                endpoint,
                "--token",
                server.token,
                "--spool",
                str(work / "spool"),
                "--seed",
                str(i),
            ]
            logs.append((work / f"w{i}.log").open("wb"))
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=logs[-1]))
        stop = threading.Event()
        chaos_log: list[dict[str, Any]] = []
        chaos_thread = threading.Thread(
            target=chaos,
            args=(server, db_proxy, PG_ADMIN_URL, db_name, stop, args.chaos_every, chaos_log),
        )
        chaos_thread.start()
        worker_stats = []
        for p in procs:
            out, _ = p.communicate(timeout=args.duration + 300)
            lines = out.decode().strip().splitlines()
            worker_stats.append(json.loads(lines[-1]) if lines else {"exit": p.returncode})
        stop.set()
        chaos_thread.join()
        if server.proc is None or server.proc.poll() is not None:
            server.start(timeout_s=90)
        resend_rc = []
        for job in sorted(set(jobs)):
            rc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "trainer_agent",
                    "--endpoint",
                    endpoint,
                    "--token",
                    server.token,
                    "--spool-dir",
                    str(work / "spool"),
                    "--timeout",
                    "30",
                    "resend",
                    "--job-id",
                    job,
                ],
                capture_output=True,
                timeout=120,
            ).returncode
            resend_rc.append(rc)
        figures = account(work, url, jobs)
        figures.update(
            procs=args.procs,
            duration_s=args.duration,
            chaos=Counter(c["action"] for c in chaos_log),
            chaos_log=chaos_log,
            workers=worker_stats,
            resend_exit_codes=resend_rc,
        )
        front.shutdown()
        server.close()
        db_proxy.close()
        for handle in logs:
            handle.close()
    return figures


def account(work: Path, url: str, jobs: list[str]) -> dict[str, Any]:
    """Find every produced event: stored, rejected, dead-lettered, waiting in a spool, or lost."""
    from sqlalchemy import create_engine, text

    produced: dict[str, dict[str, Any]] = {}
    for tap in work.glob("tap-*.jsonl"):
        for line in tap.read_text().splitlines():
            rec = json.loads(line)
            produced[rec["event_id"]] = rec
    engine = create_engine(url)
    with engine.connect() as conn:
        stored = {
            r[0]
            for r in conn.execute(
                text("SELECT event_id FROM raw_events WHERE job_id = ANY(:jobs)"),
                {"jobs": sorted(set(jobs))},
            )
        }
        rejected = {
            r[0]
            for r in conn.execute(
                text("SELECT event_id FROM rejected_events WHERE job_id = ANY(:jobs)"),
                {"jobs": sorted(set(jobs))},
            )
        }
    engine.dispose()
    dead: dict[str, dict[str, Any]] = {}
    for path in (work / "spool").rglob("dead-letter.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            dead[rec["event"]["event_id"]] = rec
    waiting: set[str] = set()
    for path in (work / "spool").rglob("*.json*"):
        if path.name.endswith((".json", ".sending")):
            with contextlib.suppress(ValueError, KeyError):
                waiting.update(e["event_id"] for e in json.loads(path.read_text())["events"])
    ids = set(produced)
    found = stored | rejected | set(dead) | waiting
    lost = ids - found
    marks = Counter(produced[i]["mark"] or "plain" for i in ids)
    dead_marks = Counter(produced[i]["mark"] or "plain" for i in dead if i in produced)
    return {
        "produced": len(ids),
        "produced_by_mark": dict(marks),
        "stored": len(ids & stored),
        "rejected_by_api": len(ids & (rejected - stored)),
        "dead_lettered": len(ids & set(dead)),
        "dead_lettered_by_mark": dict(dead_marks),
        "dead_lettered_and_stored": len(set(dead) & stored),
        "waiting_in_spool": len(ids & (waiting - stored - set(dead))),
        "lost": len(lost),
        "lost_types": dict(Counter(produced[i]["type"] for i in lost)),
        "poison_stored": len({i for i in ids if produced[i]["mark"] == "poison"} & stored),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the soak (or, with --worker, one trainer process of it)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=60.0, help="seconds of training (default 60)")
    p.add_argument("--procs", type=int, default=4, help="trainer processes, two per job")
    p.add_argument("--chaos-every", type=float, default=8.0, help="seconds between disruptions")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for name in ("--job", "--out", "--endpoint", "--token", "--spool"):
        p.add_argument(name, help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    figures = run(args)
    text_out = json.dumps(figures, indent=2, default=str)
    print(text_out)
    if args.json:
        args.json.write_text(text_out)
    ok = figures["lost"] == 0 and set(figures["dead_lettered_by_mark"]) <= {"poison", "nul"}
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
