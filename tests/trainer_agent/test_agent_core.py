"""Core agent against a scriptable fake ingest API: wire format, windows, retries, spool."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.trainer_agent.conftest import FakeClock
from tests.trainer_agent.fake_ingest import FakeIngest
from trainer_agent import Agent, detect_attempt, detect_in_place, detect_job_owner, detect_rank
from trainer_agent.sender import Sender
from trainer_agent.spool import Spool, job_spool_dir
from trainer_agent.transport import Response

REPO = Path(__file__).resolve().parents[2]


def make_agent(server: FakeIngest, tmp_path: Path, **kwargs: Any) -> Agent:
    kwargs.setdefault("install_handlers", False)
    kwargs.setdefault("heartbeat_s", 0)
    kwargs.setdefault("rank", 0)
    return Agent(
        kwargs.pop("job_id", "job-core"),
        kwargs.pop("attempt", 0),
        server.url,
        "secret",
        spool_dir=tmp_path / "spool",
        **kwargs,
    )


def test_lifecycle_events_are_valid_wire_events(fake_ingest: FakeIngest, tmp_path: Path) -> None:
    agent = make_agent(fake_ingest, tmp_path, gpus=8, host="node-1")
    with agent.phase("trainer_init.process_group"):
        pass

    @agent.phase("trainer_init.train_module")
    def build() -> int:
        return 7

    assert build() == 7
    assert build() == 7
    for i in range(5):
        agent.step(cursor=(i + 1) * 32)
    with agent.checkpoint(cursor=160):
        pass
    agent.failure("induced", "x" * 10_000)
    assert agent.close(timeout=5)
    types = sorted(e["type"] for e in fake_ingest.events.values())
    # Three spans of the trainer, plus interpreter start-up up to the agent (process_start).
    assert types.count("phase") == 4 and types.count("phase_started") == 3
    spans = fake_ingest.of_type("phase_started")
    assert all(
        any(p.get("span_id") == s["span_id"] for p in fake_ingest.of_type("phase")) for s in spans
    )
    assert len({s["span_id"] for s in spans}) == 3  # one id per span, on both of its events
    assert types.count("attempt_started") == 1 and types.count("attempt_ended") == 1
    started = fake_ingest.of_type("attempt_started")[0]
    assert started["gpus"] == 8 and started["host"] == "node-1" and started["attempt"] == 0
    assert fake_ingest.of_type("attempt_ended")[0]["reason"] == "failure"
    failure = fake_ingest.of_type("failure")[0]
    assert failure["kind"] == "induced" and len(failure["message"].encode()) <= 4096
    ckpt = fake_ingest.of_type("checkpoint")[0]
    assert ckpt["cursor"] == 160 and ckpt["ok"] is True
    assert ckpt["start"] <= ckpt["blocking_end"] <= ckpt["committed"]
    progress = fake_ingest.of_type("progress")
    assert sum(p["steps"] for p in progress) == 4  # the first step() opens the window
    assert progress[0]["cursor_start"] == 32 and progress[-1]["cursor_end"] == 160
    assert agent.stats()["rejected"] == 0 and agent.stats()["dropped"] == 0
    assert all(n == 1 for n in fake_ingest.deliveries.values())


def test_progress_windows_are_contiguous_and_cut_by_checkpoints(
    fake_ingest: FakeIngest, tmp_path: Path, clock: FakeClock
) -> None:
    agent = make_agent(fake_ingest, tmp_path, clock=clock, progress_window_s=10.0)
    t0 = clock.now
    for i in range(1, 26):  # one step a second: windows close every 10 s
        clock.advance(1.0)
        agent.step(cursor=i)
    clock.advance(0.5)
    span = agent.checkpoint_begin()
    clock.advance(2.0)
    span.blocking_done()
    for i in range(26, 31):
        clock.advance(1.0)
        agent.step(cursor=i)
    clock.advance(3.0)
    span.committed(bytes=1234)
    agent.close(timeout=5)
    windows = fake_ingest.of_type("progress")
    spans = [(w["start"] - t0, w["end"] - t0, w["cursor_start"], w["cursor_end"]) for w in windows]
    assert spans == [
        (1.0, 11.0, 1, 11),
        (11.0, 21.0, 11, 21),
        (21.0, 25.5, 21, 25),  # cut at the checkpoint's start
        (27.5, 32.5, 25, 30),  # resumes when training does; ends at the last step at close
    ]
    assert [w["steps"] for w in windows] == [10, 10, 4, 5]
    ckpt = fake_ingest.of_type("checkpoint")[0]
    assert (ckpt["start"] - t0, ckpt["blocking_end"] - t0, ckpt["committed"] - t0) == (
        25.5,
        27.5,
        35.5,
    )
    assert ckpt["cursor"] == 25 and ckpt["bytes"] == 1234


def test_phase_inside_the_loop_cuts_the_window_but_other_threads_do_not(
    fake_ingest: FakeIngest, tmp_path: Path, clock: FakeClock
) -> None:
    agent = make_agent(fake_ingest, tmp_path, clock=clock, progress_window_s=100.0)
    t0 = clock.now
    for i in range(1, 4):
        clock.advance(1.0)
        agent.step(cursor=i)
    other = threading.Thread(
        target=lambda: agent.phase("custom.bg").__enter__().__exit__(None, None, None)
    )
    other.start()
    other.join()
    with agent.phase("pt2_compile"):
        clock.advance(5.0)
    clock.advance(1.0)
    agent.step(cursor=4)
    agent.close(timeout=5)
    windows = [
        (w["start"] - t0, w["end"] - t0, w["steps"]) for w in fake_ingest.of_type("progress")
    ]
    assert windows == [(1.0, 3.0, 2), (8.0, 9.0, 1)]


def test_retries_5xx_then_delivers_each_event_once(fake_ingest: FakeIngest, tmp_path: Path) -> None:
    fake_ingest.script = [(500, {}), (503, {}), (502, {})]
    agent = make_agent(fake_ingest, tmp_path)
    agent.sender.backoff_base_s = 0.05
    for i in range(20):
        agent.step(cursor=i + 1)
        agent.heartbeat()
    assert agent.flush(timeout=10)
    agent.close(timeout=5)
    # The batch and both its halves refused, nothing taken: an outage, retried as a whole.
    assert agent.stats()["retries"] >= 1 and not fake_ingest.script
    assert agent.stats()["dead_lettered"] == 0
    assert len(fake_ingest.of_type("heartbeat")) == 20
    assert all(n == 1 for n in fake_ingest.deliveries.values())
    assert not list((tmp_path / "spool").rglob("*.json*"))


def test_429_waits_for_retry_after(fake_ingest: FakeIngest, tmp_path: Path) -> None:
    fake_ingest.script = [(429, {"Retry-After": "1"})]
    agent = make_agent(fake_ingest, tmp_path)
    agent.heartbeat()
    assert agent.flush(timeout=10)
    first, second = fake_ingest.requests[0][0], fake_ingest.requests[1][0]
    assert second - first >= 0.95
    agent.close(timeout=5)
    assert len(fake_ingest.of_type("heartbeat")) == 1


def test_rejected_events_are_dropped_not_retried(fake_ingest: FakeIngest, tmp_path: Path) -> None:
    agent = make_agent(fake_ingest, tmp_path)
    agent.record_phase("not_a_phase", 1_780_000_000.0, 1_780_000_001.0)  # refused by the schema
    agent.record_phase("shutdown", 1_780_000_000.0, 1_780_000_001.0)
    assert agent.flush(timeout=5)
    # attempt_started, process_start and the two phases, each sent once: the refused one is
    # never retried.
    assert sum(n for _, n in fake_ingest.requests) == 4
    agent.close(timeout=5)
    assert agent.stats()["rejected"] == 1
    assert [e["phase"] for e in fake_ingest.of_type("phase")] == [
        "shutdown",
        "trainer_init.process_start",
    ]


class ScriptedTransport:
    """Answers batches from a script of statuses and records what each request carried."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.batches: list[list[str]] = []

    def send(self, body: bytes, timeout: float) -> Response:
        ids = [e["event_id"] for e in json.loads(body)["events"]]
        self.batches.append(ids)
        status = self.statuses.pop(0) if self.statuses else 200
        return Response(status, {"accepted": len(ids)} if status == 200 else {"detail": "no"})


def test_whole_batch_400_is_split_to_isolate_the_bad_event(tmp_path: Path) -> None:
    transport = ScriptedTransport([400, 400, 200, 400, 200])
    sender = Sender(transport, Spool(tmp_path))
    events = [{"event_id": str(i), "type": "heartbeat"} for i in range(4)]
    sender._send(events, None)
    # [0..3] refused -> [0,1] refused -> [0] ok, [1] refused alone (dropped) -> [2,3] ok.
    assert transport.batches == [["0", "1", "2", "3"], ["0", "1"], ["0"], ["1"], ["2", "3"]]
    assert sender.stats.rejected == 1 and sender.stats.sent == 3


def test_server_down_spools_then_next_attempt_delivers(tmp_path: Path) -> None:
    down = FakeIngest()
    url = down.url
    down.close()  # nothing listens there now
    agent = Agent(
        "job-down", 0, url, "secret", spool_dir=tmp_path / "spool", install_handlers=False
    )
    agent.sender.backoff_base_s = 0.05
    with agent.phase("trainer_init"):
        pass
    for i in range(10):
        agent.step(cursor=i + 1)
    agent.failure("app_error", "boom")
    started = time.monotonic()
    agent.close(timeout=2)
    assert time.monotonic() - started < 3
    spool = Spool(job_spool_dir(tmp_path / "spool", "job-down"))
    assert spool.pending_files(), "events must be on disk while the API is down"
    expected = agent.stats()["submitted"]

    server = FakeIngest()
    try:
        agent2 = Agent(
            "job-down",
            1,
            server.url,
            "secret",
            spool_dir=tmp_path / "spool",
            install_handlers=False,
            report_attempt=False,  # only drains the spool
        )
        assert agent2.flush(timeout=10)
        agent2.close(timeout=5)
        attempts = [e["attempt"] for e in server.events.values()]
        # Every event of attempt 0, and its job_ended (the trainer owns the job; no restart).
        assert attempts.count(0) + attempts.count(None) == expected
        assert [e["status"] for e in server.events.values() if e["type"] == "job_ended"] == [
            "failed"
        ]
        assert {e["type"] for e in server.events.values() if e.get("attempt") == 0} >= {
            "attempt_started",
            "phase",
            "progress",
            "failure",
            "attempt_ended",
        }
        assert all(n == 1 for n in server.deliveries.values())
        assert not spool.pending_files()
    finally:
        server.close()


def test_full_spool_drops_and_counts_without_raising(tmp_path: Path) -> None:
    down = FakeIngest()
    url = down.url
    down.close()
    agent = Agent(
        "job-full",
        0,
        url,
        "secret",
        spool_dir=tmp_path / "spool",
        spool_max_bytes=4096,
        install_handlers=False,
    )
    for _ in range(200):
        agent.failure("infra", "y" * 200)
    agent.close(timeout=2)
    stats = agent.stats()
    assert stats["dropped"] > 0 and stats["spooled"] > 0
    assert stats["dropped"] + stats["spooled"] == stats["submitted"]
    spool = Spool(job_spool_dir(tmp_path / "spool", "job-full"))
    assert spool.pending_bytes() <= 4096


def test_close_is_bounded_while_the_api_hangs(fake_ingest: FakeIngest, tmp_path: Path) -> None:
    agent = make_agent(fake_ingest, tmp_path, job_id="job-hang", request_timeout_s=30)
    assert agent.flush(timeout=5)
    fake_ingest.hang()
    agent.heartbeat()
    time.sleep(0.2)  # the sender is now stuck in a request
    agent.failure("unknown", "hang")
    started = time.monotonic()
    agent.close(timeout=1.0)
    assert time.monotonic() - started < 1.5
    spool = Spool(job_spool_dir(tmp_path / "spool", "job-hang"))
    assert spool.pending_files()
    fake_ingest.unhang()
    agent2 = make_agent(fake_ingest, tmp_path, job_id="job-hang", attempt=1)
    assert agent2.flush(timeout=10)
    agent2.close(timeout=5)
    types = [e["type"] for e in fake_ingest.events.values() if e.get("attempt") == 0]
    assert sorted(types) == ["attempt_ended", "attempt_started", "failure", "heartbeat", "phase"]


def test_step_never_raises_and_disabled_agent_is_a_no_op(
    fake_ingest: FakeIngest, tmp_path: Path
) -> None:
    agent = Agent(job_id=None, endpoint=None)
    assert agent.enabled is False
    agent.step()
    with agent.phase("trainer_init"), agent.checkpoint():
        pass
    agent.failure("app_error", "x")
    assert agent.flush(0.1) and agent.close(0.1)
    live = make_agent(fake_ingest, tmp_path, progress_window_s=0.0)
    live.step(cursor=1)
    live.step(cursor=object())  # type: ignore[arg-type]
    live.step(cursor="12")  # type: ignore[arg-type]
    assert live.close(timeout=5)  # a bad cursor must not keep the attempt's end back
    assert [e["reason"] for e in fake_ingest.of_type("attempt_ended")] == ["completed"]


def test_attempt_and_rank_detection() -> None:
    assert detect_attempt({"TORCHELASTIC_RESTART_COUNT": "2"}) == 2
    # A requeue is a new allocation (x 1000); a torchrun group restart inside it adds one.
    assert detect_attempt({"SLURM_RESTART_COUNT": "3"}) == 3000
    assert detect_attempt({"SLURM_RESTART_COUNT": "1", "TORCHELASTIC_RESTART_COUNT": "2"}) == 1002
    assert detect_attempt({"ETT_ATTEMPT_BASE": "2000", "SLURM_RESTART_COUNT": "9"}) == 2000
    assert detect_attempt({}) == 0
    # trainer_agent.elastic exports ETT_ATTEMPT; it wins over the local restart count.
    assert detect_attempt({"ETT_ATTEMPT": "3", "TORCHELASTIC_RESTART_COUNT": "1"}) == 3
    assert not detect_in_place({}) and not detect_in_place({"SLURM_RESTART_COUNT": "1"})
    assert detect_in_place({"TORCHELASTIC_RESTART_COUNT": "1"})
    assert detect_in_place({"ETT_ATTEMPT": "3", "ETT_ATTEMPT_IN_PLACE": "1"})
    assert not detect_in_place({"ETT_ATTEMPT": "3", "TORCHELASTIC_RESTART_COUNT": "1"})
    assert detect_job_owner({}) == "trainer"
    assert detect_job_owner({"ETT_JOB_OWNER": "scheduler"}) == "scheduler"
    assert detect_job_owner({"ETT_JOB_OWNER": " Trainer "}) == "trainer"
    assert detect_job_owner({"ETT_JOB_OWNER": "slurm"}) == "trainer"  # unknown: warned, default
    assert detect_rank({"RANK": "5"}) == 5 and detect_rank({"SLURM_PROCID": "1"}) == 1


def test_environment_configuration(
    fake_ingest: FakeIngest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ETT_ENDPOINT", fake_ingest.url)
    monkeypatch.setenv("ETT_TOKEN", "secret")
    monkeypatch.setenv("ETT_JOB_ID", "job-env")
    monkeypatch.setenv("ETT_SPOOL_DIR", str(tmp_path))
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "4")
    monkeypatch.setenv("RANK", "0")
    agent = Agent(install_handlers=False, heartbeat_s=0)
    assert agent.flush(timeout=5)
    agent.close(timeout=5)
    started = fake_ingest.of_type("attempt_started")[0]
    assert started["job_id"] == "job-env" and started["attempt"] == 4
    assert os.path.isdir(tmp_path)


def test_only_rank_zero_reports_progress_and_attempts(
    fake_ingest: FakeIngest, tmp_path: Path
) -> None:
    agent = make_agent(fake_ingest, tmp_path, rank=1)
    for i in range(3):
        agent.step(cursor=i)
    with agent.phase("trainer_init.device_init"):
        pass
    agent.close(timeout=5)
    assert sorted({e["type"] for e in fake_ingest.events.values()}) == ["phase", "phase_started"]


def test_scheduler_hook_cli(fake_ingest: FakeIngest, tmp_path: Path) -> None:
    from trainer_agent.__main__ import main

    common = ["--endpoint", fake_ingest.url, "--token", "secret", "--spool-dir", str(tmp_path)]
    assert (
        main(
            [*common, "submitted", "--job-id", "j-cli", "--model", "m", "--gpus", "8"]
            + ["--label", "owner=ranking", "--checkpoint-interval-s", "1800"]
        )
        == 0
    )
    assert main([*common, "ended", "--job-id", "j-cli", "--status", "succeeded"]) == 0
    (sub,) = fake_ingest.of_type("job_submitted")
    assert sub["gpus"] == 8 and sub["labels"] == {"owner": "ranking"}
    assert sub["config"] == {"checkpoint_interval_s": 1800.0} and sub["attempt"] is None
    assert fake_ingest.of_type("job_ended")[0]["status"] == "succeeded"
    assert len(fake_ingest.events) == 2  # no attempt events from a scheduler hook


def test_heartbeats_are_periodic(fake_ingest: FakeIngest, tmp_path: Path) -> None:
    agent = make_agent(fake_ingest, tmp_path, heartbeat_s=0.2)
    time.sleep(1.1)
    agent.close(timeout=5)
    beats = fake_ingest.of_type("heartbeat")
    assert 3 <= len(beats) <= 7
    gaps = [b["ts"] - a["ts"] for a, b in zip(beats, beats[1:], strict=False)]
    assert all(0.15 <= g <= 0.5 for g in gaps), gaps


def test_step_stays_fast_while_the_api_hangs(fake_ingest: FakeIngest, tmp_path: Path) -> None:
    agent = make_agent(fake_ingest, tmp_path, progress_window_s=0.001)
    assert agent.flush(timeout=5)
    fake_ingest.hang()
    agent.heartbeat()
    time.sleep(0.2)  # the sender is blocked inside a request now
    started = time.perf_counter()
    for i in range(20_000):
        agent.step(cursor=i + 1)
    elapsed = time.perf_counter() - started
    assert elapsed < 0.5, elapsed  # windows keep closing (every 1 ms) without waiting on I/O
    agent.close(timeout=1)
    fake_ingest.unhang()


def test_a_broken_configuration_disables_the_agent_instead_of_raising(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ETT_SPOOL_MAX_BYTES", "lots")
    agent = Agent(
        "j", "first", "http://127.0.0.1:9", "t", spool_dir=tmp_path, install_handlers=False
    )  # type: ignore[arg-type]
    assert agent.enabled is False and agent.attempt == 0
    agent.step(cursor=1)
    assert agent.close(timeout=0.1)


def test_process_start_time_is_close_to_the_interpreter_start() -> None:
    from trainer_agent.agent import process_start_time

    code = (
        "import time; t = time.time(); from trainer_agent.agent import process_start_time; "
        "print(process_start_time() - t)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert -3.0 < float(out.stdout) <= 0.02  # before the first statement, never after it
    assert process_start_time() is not None


def test_resend_cli_drains_a_jobs_spool(fake_ingest: FakeIngest, tmp_path: Path) -> None:
    from trainer_agent.__main__ import main

    down = FakeIngest()
    url = down.url
    down.close()
    agent = Agent(
        "j-resend", 0, url, "secret", spool_dir=tmp_path, install_handlers=False, heartbeat_s=0
    )
    agent.failure("infra", "nccl timeout")
    assert agent.close(timeout=1) is False
    assert Spool(job_spool_dir(tmp_path, "j-resend")).pending_files()
    common = ["--endpoint", fake_ingest.url, "--token", "secret", "--spool-dir", str(tmp_path)]
    assert main([*common, "resend", "--job-id", "j-resend"]) == 0
    assert [e["kind"] for e in fake_ingest.of_type("failure")] == ["infra"]
    assert not Spool(job_spool_dir(tmp_path, "j-resend")).pending_files()


class PoisonTransport:
    """500 for any batch that holds a poison id (as one bad row fails a transaction), else 200."""

    def __init__(self, poison: set[str], outage: bool = False) -> None:
        self.poison = poison
        self.outage = outage
        self.requests = 0
        self.accepted: list[str] = []

    def send(self, body: bytes, timeout: float) -> Response:
        self.requests += 1
        ids = [e["event_id"] for e in json.loads(body)["events"]]
        if self.outage or self.poison & set(ids):
            return Response(500, {"detail": "Internal Server Error"})
        self.accepted.extend(ids)
        return Response(200, {"accepted": len(ids), "duplicates": 0, "rejected": []})


def test_several_poison_events_in_one_batch_are_isolated_and_dead_lettered(
    tmp_path: Path,
) -> None:
    events = [{"event_id": f"e{i}", "type": "heartbeat"} for i in range(200)]
    poison = {"e3", "e77", "e120", "e121", "e199"}
    transport = PoisonTransport(poison)
    sender = Sender(transport, Spool(tmp_path), dead_letter_after=3)
    pending = events
    for _ in range(3):  # three rounds: each isolates the poison again, one strike each
        try:
            sender._send(pending, None)
            pending = []
        except Exception as retry:  # noqa: BLE001 - _Retry, private
            pending = retry.pending  # type: ignore[attr-defined]
            assert retry.progress  # type: ignore[attr-defined]
            # Mixed with fresh events, as the spool does it.
            pending = pending + [{"event_id": f"n{len(transport.accepted)}", "type": "heartbeat"}]
    assert not pending
    assert sorted(transport.accepted) == sorted(
        {e["event_id"] for e in events} - poison | {e for e in transport.accepted if e[0] == "n"}
    )
    lines = (tmp_path / "dead-letter.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["event"]["event_id"] for line in lines) == sorted(poison)
    assert sender.stats.dead_lettered == 5 and not sender.all_reached_api()


def test_an_outage_is_not_mistaken_for_poison(tmp_path: Path) -> None:
    transport = PoisonTransport(set(), outage=True)
    sender = Sender(transport, Spool(tmp_path))
    events = [{"event_id": f"e{i}", "type": "heartbeat"} for i in range(1000)]
    for _ in range(5):
        try:
            sender._send(events, None)
        except Exception as retry:  # noqa: BLE001
            assert len(retry.pending) == 1000 and not retry.progress  # type: ignore[attr-defined]
    assert sender.stats.dead_lettered == 0
    assert transport.requests <= 5 * (1 + sender.probe_budget)  # bounded probing per round


def test_strikes_outlive_the_process_so_a_lone_poison_event_is_dead_lettered(
    tmp_path: Path,
) -> None:
    poison = {"e1"}
    first = Sender(PoisonTransport(poison), Spool(tmp_path), dead_letter_after=3)
    try:
        first._send(
            [{"event_id": "e0", "type": "heartbeat"}, {"event_id": "e1", "type": "x"}], None
        )
    except Exception as retry:  # noqa: BLE001
        assert [e["event_id"] for e in retry.pending] == ["e1"]  # type: ignore[attr-defined]
    assert not Spool(tmp_path).pending_files()  # the strikes file is not a batch
    # A later process (resend, the next attempt) sends it alone: the strike it had counts.
    second = Sender(PoisonTransport(poison), Spool(tmp_path), dead_letter_after=3)
    for _ in range(2):
        with contextlib.suppress(Exception):
            second._send([{"event_id": "e1", "type": "x"}], None)
    assert second.stats.dead_lettered == 1
    # A lone event with no strike is never dead-lettered: the API may be down.
    third = Sender(PoisonTransport({"e9"}), Spool(tmp_path / "other"), dead_letter_after=3)
    for _ in range(5):
        with contextlib.suppress(Exception):
            third._send([{"event_id": "e9", "type": "x"}], None)
    assert third.stats.dead_lettered == 0
