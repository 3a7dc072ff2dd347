"""The background sender: a named daemon thread that batches events, retries, and spools.

Callers only ever `put` into a `queue.SimpleQueue` (reentrant, never blocks, safe from signal
handlers); the thread does every bit of I/O. While the ingest API is down, slow or refusing with
5xx/429, batches go to the on-disk spool and are re-sent oldest first once it answers again.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import queue
import random
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainer_agent.spool import Spool
from trainer_agent.transport import Response, Transport

log = logging.getLogger("trainer_agent")

THREAD_NAME = "ett-agent-sender"
# Give up on a whole batch only after isolating the single event the API refuses.
_SPLIT_STATUSES = frozenset({400, 413, 415, 422})
_AUTH_STATUSES = frozenset({401, 403})


@dataclass
class _Flush:
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Stop:
    deadline: float
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class SenderStats:
    """Counters of what happened to events (read them, never write them)."""

    submitted: int = 0
    sent: int = 0
    duplicates: int = 0
    rejected: int = 0
    spooled: int = 0
    dropped: int = 0
    retries: int = 0
    errors: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain dict."""
        return dict(self.__dict__)


class _Retry(Exception):
    def __init__(self, delay: float, why: str) -> None:
        super().__init__(why)
        self.delay = delay


class Sender:
    """Delivers events to a Transport from one daemon thread; restarts itself in a forked child."""

    def __init__(
        self,
        transport: Transport,
        spool: Spool,
        *,
        request_timeout_s: float = 10.0,
        max_batch_events: int = 1000,
        max_batch_bytes: int = 1024 * 1024,
        max_queue: int = 100_000,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        auth_backoff_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        on_tick: Callable[[], None] | None = None,
        tick_interval_s: float = 0.0,
    ) -> None:
        self.transport = transport
        self.spool = spool
        self.request_timeout_s = request_timeout_s
        self.max_batch_events = max_batch_events
        self.max_batch_bytes = max_batch_bytes
        self.max_queue = max_queue
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.auth_backoff_s = auth_backoff_s
        self.clock = clock
        self.on_tick = on_tick
        self.tick_interval_s = tick_interval_s
        self.stats = SenderStats()
        self._owner_pid = os.getpid()  # heartbeats belong to this process, not to forked children
        self._reset_process_state()
        self._spool_dirty = False
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _after_fork(ref))

    def _reset_process_state(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._running = False
        self._start_lock = threading.Lock()
        self._pid = os.getpid()
        self._inflight: list[dict[str, Any]] = []
        self._failures = 0
        self._retry_at = 0.0
        self._waiters: list[_Flush] = []
        self._stopped = False
        self._next_tick = time.monotonic() + self.tick_interval_s

    # ---- caller side: never blocks, never raises -------------------------------------------

    def submit(self, event: dict[str, Any]) -> None:
        """Hand one event to the sender thread."""
        try:
            self.stats.submitted += 1
            if self._stopped or self._queue.qsize() >= self.max_queue:
                # No thread to take it or memory bound reached: persist it for a later sender.
                self._spool_or_drop([event])
                return
            self._queue.put(event)
            self._ensure_thread()
        except Exception:  # noqa: BLE001 - never raise into the trainer
            log.exception("trainer_agent: submit failed")

    def flush(self, timeout: float) -> bool:
        """Wait until everything submitted so far is delivered, at most `timeout` seconds."""
        try:
            if self._stopped:
                return False
            token = _Flush()
            self._queue.put(token)
            self._ensure_thread()
            return token.done.wait(max(0.0, timeout))
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: flush failed")
            return False

    def close(self, timeout: float) -> bool:
        """Deliver or spool everything, then stop the thread; returns within `timeout` seconds."""
        try:
            if self._stopped:
                return True
            deadline = self.clock() + max(0.0, timeout)
            token = _Stop(deadline)
            self._queue.put(token)
            self._ensure_thread()
            finished = token.done.wait(max(0.0, timeout))
            self._stopped = True
            if not finished:
                # The thread is stuck (e.g. the API hangs): secure what it holds and what is queued.
                leftovers = list(self._inflight)
                leftovers.extend(self._drain_queue())
                self._spool_or_drop(leftovers)
            return finished
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: close failed")
            return False

    def start(self) -> None:
        """Start the thread now (it also starts on the first event)."""
        try:
            self._ensure_thread()
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: cannot start the sender thread")

    def _ensure_thread(self) -> None:
        # Fast path without touching the thread object: is_alive() probes a lock the thread holds.
        if self._running and os.getpid() == self._pid:
            return
        if os.getpid() != self._pid:
            self._reset_process_state()
        with self._start_lock:
            if self._running:
                return
            self._running = True
            self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
            self._thread.start()

    def _drain_queue(self) -> list[dict[str, Any]]:
        events = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return events
            if isinstance(item, dict):
                events.append(item)
            elif isinstance(item, _Flush):
                self._waiters.append(item)
            elif isinstance(item, _Stop):
                item.done.set()

    def _spool_or_drop(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        if self.spool.write(events):
            self.stats.spooled += len(events)
            self._spool_dirty = True
            return
        # Full: keep what fits, oldest first; heartbeats only say "alive", so they go first.
        facts = [e for e in events if e.get("type") != "heartbeat"]
        kept = 0
        chunk = max(1, len(facts) // 16)
        for i in range(0, len(facts), chunk):
            if not self.spool.write(facts[i : i + chunk]):
                break
            kept += len(facts[i : i + chunk])
        if kept:
            self.stats.spooled += kept
            self._spool_dirty = True
        lost = len(events) - kept
        self.stats.dropped += lost
        log.error(
            "trainer_agent: spool %s full or unwritable; dropped %d events (total dropped: %d)",
            self.spool.directory,
            lost,
            self.stats.dropped,
        )

    # ---- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            self._running = False

    def _serve(self) -> None:
        try:
            # A previous attempt, or another rank, may have left batches behind.
            if self.spool.recover() or self.spool.pending_files():
                self._spool_dirty = True
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: spool recovery failed")
        while True:
            try:
                if self._loop_once():
                    return
            except Exception:  # noqa: BLE001 - the thread must outlive any bug
                self.stats.errors += 1
                log.exception("trainer_agent: sender error")
                time.sleep(0.1)

    def _loop_once(self) -> bool:
        """One round: wait for work, deliver it; True when the thread should exit."""
        wait = None  # nothing to do but wait for events
        if self._spool_dirty:
            wait = max(0.0, self._retry_at - self.clock())
        if self.on_tick is not None and self.tick_interval_s > 0 and os.getpid() == self._owner_pid:
            now = time.monotonic()
            if now >= self._next_tick:
                self._next_tick = now + self.tick_interval_s
                self.on_tick()
            until_tick = max(0.0, self._next_tick - now)
            wait = until_tick if wait is None else min(wait, until_tick)
        try:
            first = self._queue.get(timeout=wait) if wait is None or wait > 0 else None
        except queue.Empty:
            first = None
        items = [first] if first is not None else []
        while len(items) < self.max_batch_events:
            try:
                items.append(self._queue.get_nowait())
            except queue.Empty:
                break
        events = [i for i in items if isinstance(i, dict)]
        stop = next((i for i in items if isinstance(i, _Stop)), None)
        self._waiters.extend(i for i in items if isinstance(i, _Flush))
        if stop is not None:
            events.extend(self._drain_queue())
            self._deliver(events, deadline=stop.deadline)
            self._release_waiters()
            stop.done.set()
            return True
        self._deliver(events, deadline=None)
        self._release_waiters()
        return False

    def _release_waiters(self) -> None:
        if self._spool_dirty or self._inflight:
            return
        for waiter in self._waiters:
            waiter.done.set()
        self._waiters.clear()

    def _in_backoff(self) -> bool:
        return self._retry_at > self.clock()

    def _deliver(self, events: list[dict[str, Any]], deadline: float | None) -> None:
        if events:
            if self._spool_dirty or self._in_backoff():
                # Keep oldest-first order: new events queue up behind the spooled ones.
                self._spool_or_drop(events)
            else:
                self._inflight = events
                try:
                    self._send(events, deadline)
                    self._failures = 0
                except _Retry as retry:
                    self._spool_or_drop(events)
                    self._schedule_retry(retry)
                finally:
                    self._inflight = []
        while self._spool_dirty and not self._in_backoff():
            if deadline is not None and self.clock() >= deadline:
                return
            claim = self.spool.claim(self.max_batch_events, self.max_batch_bytes)
            if not claim.paths:
                self._spool_dirty = False
                return
            try:
                self._send(claim.events, deadline)
                self._failures = 0
            except _Retry as retry:
                self.spool.release(claim.paths)
                self._schedule_retry(retry)
                return
            self.spool.delete(claim.paths)

    def _schedule_retry(self, retry: _Retry) -> None:
        self._failures += 1
        self.stats.retries += 1
        if retry.delay > 0:
            delay = retry.delay
        else:
            cap = min(self.backoff_max_s, self.backoff_base_s * 2 ** min(self._failures - 1, 20))
            delay = random.uniform(cap / 2, cap)  # jitter: ranks of one job must not retry in step
        self._retry_at = self.clock() + delay
        log.warning("trainer_agent: ingest unavailable (%s); retrying in %.1f s", retry, delay)

    def _send(self, events: list[dict[str, Any]], deadline: float | None) -> None:
        """Send events (split as needed); raise _Retry when the API cannot take them now."""
        body = json.dumps({"events": events}, separators=(",", ":")).encode("utf-8")
        if len(body) > self.max_batch_bytes and len(events) > 1:
            self._send_halves(events, deadline)
            return
        timeout = self.request_timeout_s
        if deadline is not None:
            timeout = max(0.05, min(timeout, deadline - self.clock()))
        try:
            answer = self.transport.send(body, timeout)
        except (OSError, http.client.HTTPException, ValueError) as err:
            raise _Retry(0.0, f"{type(err).__name__}: {err}") from None
        self._handle(answer, events, deadline)

    def _send_halves(self, events: list[dict[str, Any]], deadline: float | None) -> None:
        half = len(events) // 2
        self._send(events[:half], deadline)
        self._send(events[half:], deadline)

    def _handle(
        self, answer: Response, events: list[dict[str, Any]], deadline: float | None
    ) -> None:
        status = answer.status
        if 200 <= status < 300:
            body = answer.body or {}
            rejected = body.get("rejected") or []
            self.stats.sent += int(body.get("accepted", len(events) - len(rejected)) or 0)
            self.stats.duplicates += int(body.get("duplicates", 0) or 0)
            for item in rejected:
                self.stats.rejected += 1
                log.error(
                    "trainer_agent: ingest rejected event %s: %s",
                    item.get("event_id"),
                    item.get("error"),
                )
            return
        if status == 429 or status == 408 or status >= 500:
            raise _Retry(answer.retry_after_s or 0.0, f"HTTP {status}")
        if status in _AUTH_STATUSES:
            detail = (answer.body or {}).get("detail")
            log.error("trainer_agent: ingest refused the token (HTTP %s): %s", status, detail)
            raise _Retry(max(answer.retry_after_s or 0.0, self.auth_backoff_s), f"HTTP {status}")
        if status in _SPLIT_STATUSES and len(events) > 1:
            self._send_halves(events, deadline)
            return
        detail = (answer.body or {}).get("detail")
        for event in events:
            self.stats.rejected += 1
            log.error(
                "trainer_agent: ingest refused event %s (HTTP %s): %s",
                event.get("event_id"),
                status,
                detail,
            )


def _after_fork(ref: weakref.ref[Sender]) -> None:
    sender = ref()
    if sender is not None:
        # The child starts clean: the parent's queued events stay the parent's to send.
        sender._reset_process_state()
        sender.spool._lock = threading.Lock()
