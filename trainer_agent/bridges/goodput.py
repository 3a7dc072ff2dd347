"""Google's ml-goodput-measurement to ETT%: pass `GoodputLogger` as GoodputRecorder's cloud_logger.

    from ml_goodput_measurement import goodput
    from trainer_agent.bridges.goodput import GoodputLogger

    agent = trainer_agent.init(model="llama", gpus=256)
    logger = GoodputLogger(agent, job_name="run-7")
    recorder = goodput.GoodputRecorder("run-7", "goodput", logging_enabled=True, cloud_logger=logger)
    # ... the recorder calls stay as they are ...

Each entry the recorder writes becomes agent events (docs/OTLP.md, "Google goodput"): steps are
summed into progress windows here, in the logger (a step costs a few dict lookups), phases and
custom badput events become catalogue phases. The logger also keeps the entries in memory and
answers `read_cloud_logging_entries`, so a GoodputCalculator given the same logger computes
Google's goodput for the job beside ours. Standard library only: nothing of Google's library is
imported here.
"""

from __future__ import annotations

import datetime
import logging
import threading
from typing import Any

log = logging.getLogger("trainer_agent")

_PHASES = {
    "tpu_init": "trainer_init.device_init",
    "training_prep": "trainer_init.pre_training_setup",
    "data_loading": "trainer_init.first_batch",
}


class GoodputLogger:
    """A cloud_logger for GoodputRecorder/GoodputCalculator that feeds an Agent.

    `agent` is a trainer_agent.Agent (or None to keep entries only); `window_s` is the progress
    window (the agent's, 30 s, by default); `keep_entries` keeps the entries for the read side.
    """

    def __init__(
        self,
        agent: Any,
        job_name: str,
        *,
        window_s: float | None = None,
        keep_entries: bool = True,
    ) -> None:
        self.agent = agent
        self.job_name = job_name
        self.job_start_time: datetime.datetime | None = None
        self.window_s = float(
            window_s if window_s is not None else getattr(agent, "progress_window_s", 30.0)
        )
        self.keep_entries = keep_entries
        self._entries: list[tuple[float, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._starts: dict[str, float] = {}
        self._win: tuple[float, float] | None = None  # (start time, cursor)
        self._last: tuple[float, float] | None = None
        self._steps = 0
        self._win_steps = 0
        self._stepped = False

    def attach(self, agent: Any) -> None:
        """A new attempt in this process: send the open window, then feed `agent` (entries stay)."""
        self.flush()
        self.agent = agent
        self._last = None
        self._stepped = False

    # ---- the write side (GoodputRecorder) ------------------------------------------------------

    def write_cloud_logging_entry(self, entry: Any) -> None:
        """Take one recorder entry: a step, a phase boundary, the job's start or end."""
        if not entry or entry.get("job_name") != self.job_name:
            return
        try:
            step_at = entry.get("step_start_time")
            if step_at is not None:
                self._step(float(step_at), float(entry["step_count"]))
            else:
                self._other(entry)
            if self.keep_entries:
                with self._lock:
                    self._entries.append((_entry_time(entry), dict(entry)))
        except Exception:  # noqa: BLE001 - the recorder's caller must never see our errors
            log.exception("trainer_agent: goodput entry %r not taken", entry)

    def _step(self, t: float, step: float) -> None:
        # Step k starts when step k-1 ended: its start is the end of a step, cursor = k.
        self._steps += 1
        if self._win is None:
            self._win, self._win_steps = (t, step), self._steps
        elif t - self._win[0] >= self.window_s:
            self._emit_window(t, step)
            self._win, self._win_steps = (t, step), self._steps
        self._last = (t, step)
        self._stepped = True

    def _emit_window(self, end: float, cursor: float) -> None:
        if self._win is None or self.agent is None:
            return
        start, c0 = self._win
        steps = self._steps - self._win_steps
        if end > start and steps > 0:
            self.agent._emit_progress(start, end, c0, max(cursor, 0.0), steps)

    def _close_window(self, at: float | None = None) -> None:
        if self._win is not None and self._last is not None:
            end = self._last[0] if at is None else max(at, self._last[0])
            self._emit_window(end, self._last[1])
        self._win = None

    def _other(self, entry: dict[str, Any]) -> None:
        agent = self.agent
        for key, value in entry.items():
            if key == "job_start_time":
                when = datetime.datetime.fromtimestamp(float(value), tz=datetime.timezone.utc)
                if self.job_start_time is None:
                    self.job_start_time = when
            elif key == "job_end_time":
                self._close_window(float(value))
                if agent is not None:
                    agent.close(status="succeeded")
            elif key == "custom_badput_event_start_time":
                self._close_window(float(value))
                self._starts["custom:" + str(entry.get("custom_badput_event_type"))] = float(value)
            elif key == "custom_badput_event_end_time":
                kind = str(entry.get("custom_badput_event_type", "unknown"))
                start = self._starts.pop("custom:" + kind, None)
                if start is not None and agent is not None:
                    agent.record_phase(f"custom.goodput.{_slug(kind)}", start, float(value))
                if self._last is not None:
                    self._win, self._win_steps = (float(value), self._last[1]), self._steps
            elif key.endswith("_start_time"):
                self._starts[key[: -len("_start_time")]] = float(value)
            elif key.endswith("_end_time"):
                name = key[: -len("_end_time")]
                start = self._starts.pop(name, None)
                phase = _PHASES.get(name)
                # Data loading inside the loop is part of its steps; only the first load counts.
                if phase is None or start is None or agent is None:
                    continue
                if name == "data_loading" and self._stepped:
                    continue
                agent.record_phase(phase, start, float(value))

    def flush(self) -> None:
        """Send the open window and wait (bounded) for the agent to deliver."""
        self._close_window(None)
        self._win = None
        if self.agent is not None:
            self.agent.flush(timeout=5.0)

    # ---- the read side (GoodputCalculator) -------------------------------------------------------

    def read_cloud_logging_entries(
        self,
        start_time: datetime.datetime | None = None,
        end_time: datetime.datetime | None = None,
        last_entry_info: tuple[Any, Any] | None = None,
    ) -> tuple[list[dict[str, Any]], tuple[Any, Any]]:
        """Entries in time order after `last_entry_info` (or in [start, end]), as Cloud Logging."""
        with self._lock:
            indexed = list(enumerate(self._entries))
        lo = start_time.timestamp() if start_time is not None else float("-inf")
        hi = end_time.timestamp() if end_time is not None else float("inf")
        after = int(last_entry_info[1]) if last_entry_info and last_entry_info[1] else -1
        picked = [(i, t, e) for i, (t, e) in indexed if i > after and lo <= t <= hi]
        picked.sort(key=lambda x: (x[1], x[0]))
        if not picked:
            return [], (None, None)
        last_i, last_t, _ = picked[-1]
        last = (datetime.datetime.fromtimestamp(last_t, tz=datetime.timezone.utc), str(last_i))
        payloads = [e for _, _, e in picked]
        for e in payloads:
            if self.job_start_time is None and "job_start_time" in e:
                self.job_start_time = datetime.datetime.fromtimestamp(
                    e["job_start_time"], tz=datetime.timezone.utc
                )
        return payloads, last


def _entry_time(entry: dict[str, Any]) -> float:
    for key, value in entry.items():
        if key.endswith("_time") and isinstance(value, (int, float)):
            return float(value)
    return 0.0


def _slug(text: str) -> str:
    out = "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")
    return out or "unknown"
