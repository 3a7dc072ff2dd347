"""The background sender: a named daemon thread that batches events, retries, and spools.

Callers only ever `put` into a `queue.SimpleQueue` (reentrant, never blocks, safe from signal
handlers); the thread does every bit of I/O. While the ingest API is down, slow or refusing with
5xx/429, batches go to the on-disk spool and are re-sent oldest first once it answers again.
A batch the API keeps refusing with 5xx while it takes other events is split until the refused
events are isolated; those go to the job's dead-letter file with the answer, the rest goes on.
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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainer_agent.spool import Spool
from trainer_agent.transport import Response, Transport

log = logging.getLogger("trainer_agent")

THREAD_NAME = "ett-agent-sender"
DEAD_LETTER_NAME = "dead-letter.jsonl"
STRIKES_NAME = "strikes.state"  # not *.json: that is a batch file
# Give up on a whole batch only after isolating the single event the API refuses.
_SPLIT_STATUSES = frozenset({400, 413, 415, 422})
_AUTH_STATUSES = frozenset({401, 403})
# A gateway or an API that says it is unavailable: the whole service, never one event's fault.
_OUTAGE_STATUSES = frozenset({502, 503, 504})


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
    dead_lettered: int = 0
    # Delivered, but waiting on the server for the job's job_submitted (a model-scoped token).
    held: int = 0
    # Batches the API answered 401 or 403: it is up, but refuses this token.
    auth_refused: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters as a plain dict."""
        return dict(self.__dict__)


class _Retry(Exception):
    """The API cannot take `pending` now (the events of the batch that are still undelivered)."""

    def __init__(
        self, delay: float, why: str, pending: list[dict[str, Any]], progress: bool = False
    ) -> None:
        super().__init__(why)
        self.delay = delay
        self.pending = pending
        self.progress = progress  # part of the batch was delivered: the API works


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
        dead_letter_after: int = 3,
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
        self.dead_letter_after = max(1, int(dead_letter_after))
        # Single-event probes, newest first, for the proof that the API takes events at all; in a
        # real outage a round costs this many extra (small) requests.
        self.probe_budget = 8
        self.dead_letter_path = self.spool.directory / DEAD_LETTER_NAME
        # Isolated 5xx per event id, kept beside the spool so the next process (another rank,
        # the next attempt, `resend`) goes on counting.
        self.strikes_path = self.spool.directory / STRIKES_NAME
        self._strikes: dict[str, int] = {}
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
            if self._queue.qsize() >= self.max_queue:
                # Memory bound reached: persist it for a later round.
                self._spool_or_drop([event])
                return
            self._stopped = False  # an event after close(): the next flush or close delivers it
            self._queue.put(event)
            self._ensure_thread()
        except Exception:  # noqa: BLE001 - never raise into the trainer
            log.exception("trainer_agent: submit failed")

    def all_reached_api(self) -> bool:
        """False once any event was dead-lettered or dropped (it never reached the API)."""
        return self.stats.dead_lettered == 0 and self.stats.dropped == 0

    def flush(self, timeout: float) -> bool:
        """Wait until everything submitted so far is delivered, at most `timeout` seconds.

        True only when every event this sender was given reached the API (stored, duplicate or
        rejected with a reason there): False while any waits in the spool or was dead-lettered.
        """
        try:
            if self._on_own_thread():
                return False  # the thread cannot wait for itself
            token = _Flush()
            self._queue.put(token)
            self._ensure_thread()
            return token.done.wait(max(0.0, timeout)) and self.all_reached_api()
        except Exception:  # noqa: BLE001
            log.exception("trainer_agent: flush failed")
            return False

    def _on_own_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def undelivered_summary(self) -> str:
        """Where undelivered events wait, in words (for the log)."""
        parts = []
        files = self.spool.pending_files()
        if files or self._spool_dirty:
            parts.append(
                f"{len(files)} batch file(s) wait in the spool {self.spool.directory} "
                "(sent by the next agent of this job, or: python -m trainer_agent resend "
                "--job-id <job> --spool-dir <root>)"
            )
        if self.stats.dead_lettered:
            parts.append(
                f"{self.stats.dead_lettered} event(s) the API kept refusing are in the "
                f"dead-letter file {self.dead_letter_path}"
            )
        if self.stats.dropped:
            parts.append(f"{self.stats.dropped} event(s) were dropped (spool full or unwritable)")
        return "; ".join(parts) or "nothing is pending"

    def close(self, timeout: float) -> bool:
        """Deliver or spool everything, then stop the thread; returns within `timeout` seconds.

        True only when everything reached the API (as flush()); may be called again after events
        were submitted following a close (they are then delivered the same way).
        """
        try:
            if self._on_own_thread():
                return False
            if self._stopped and self._queue.empty() and not self._spool_dirty:
                return self.all_reached_api()
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
            return finished and not self._spool_dirty and self.all_reached_api()
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
                    self._spool_or_drop(retry.pending)
                    self._schedule_retry(retry)
                finally:
                    self._inflight = []
        while self._spool_dirty:
            if self._in_backoff():
                if deadline is None:
                    return
                # Closing: use the time left for another try rather than giving up at once.
                pause = min(self._retry_at, deadline) - self.clock()
                if pause > 0:
                    time.sleep(pause)
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
                if len(retry.pending) == len(claim.events):
                    self.spool.release(claim.paths)
                elif not self.spool.replace(claim.paths, retry.pending):
                    self.spool.release(claim.paths)  # resend all rather than lose any
                self._schedule_retry(retry)
                if deadline is None:
                    return
                continue
            self.spool.delete(claim.paths)

    def _schedule_retry(self, retry: _Retry) -> None:
        if retry.progress:
            self._failures = 0  # the API took the rest: retry the refused events soon
        self._failures += 1
        self.stats.retries += 1
        if retry.delay > 0:
            delay = retry.delay
        else:
            cap = min(self.backoff_max_s, self.backoff_base_s * 2 ** min(self._failures - 1, 20))
            delay = random.uniform(cap / 2, cap)  # jitter: ranks of one job must not retry in step
        self._retry_at = self.clock() + delay
        log.warning("trainer_agent: ingest unavailable (%s); retrying in %.1f s", retry, delay)

    def _body(self, events: list[dict[str, Any]]) -> bytes:
        return json.dumps({"events": events}, separators=(",", ":")).encode("utf-8")

    def _post(self, body: bytes, events: list[dict[str, Any]], deadline: float | None) -> Response:
        timeout = self.request_timeout_s
        if deadline is not None:
            timeout = max(0.05, min(timeout, deadline - self.clock()))
        try:
            return self.transport.send(body, timeout)
        except (OSError, http.client.HTTPException, ValueError) as err:
            raise _Retry(0.0, f"{type(err).__name__}: {err}", events) from None

    def _send(self, events: list[dict[str, Any]], deadline: float | None) -> None:
        """Send events (split as needed); raise _Retry with the ones the API cannot take now."""
        body = self._body(events)
        if len(body) > self.max_batch_bytes and len(events) > 1:
            self._send_halves(events, deadline)
            return
        answer = self._post(body, events, deadline)
        if answer.status >= 500 and answer.status not in _OUTAGE_STATUSES:
            self._isolate(events, answer, deadline)
            return
        self._handle(answer, events, deadline)

    def _send_halves(self, events: list[dict[str, Any]], deadline: float | None) -> None:
        half = len(events) // 2
        try:
            self._send(events[:half], deadline)
        except _Retry as retry:
            raise _Retry(retry.delay, str(retry), retry.pending + events[half:]) from None
        self._send(events[half:], deadline)

    def _isolate(
        self, events: list[dict[str, Any]], answer: Response, deadline: float | None
    ) -> None:
        """The API answered 5xx to `events`: find the events it refuses alone, if it takes others.

        First the proof that the API takes anything: up to `probe_budget` events, newest first
        (refused ones wait at the front of the spool), are sent one at a time. None taken: the API
        itself is failing, and everything is retried later. Once one is taken, the rest is halved
        breadth first; a single event refused with 5xx gets a strike and, at `dead_letter_after`
        strikes, goes to the dead-letter file with the answer. Raises _Retry with the rest.
        """
        accepted_some = False
        singles: list[tuple[dict[str, Any], Response]] = []
        pending: list[dict[str, Any]] = []
        retry: _Retry | None = None
        rest = list(events)
        parts: deque[list[dict[str, Any]]] = deque()
        if len(rest) == 1:
            singles.append((rest.pop(), answer))
        probes = 0
        while rest and not accepted_some and probes < self.probe_budget:
            probes += 1
            event = rest.pop()
            outcome = self._try_part([event], deadline)
            if isinstance(outcome, _Retry):
                pending.append(event)
                retry = outcome
                break
            if outcome.status >= 500:
                singles.append((event, outcome))
            else:
                accepted_some = accepted_some or 200 <= outcome.status < 300
        if retry is None and accepted_some and rest:
            parts.append(rest)
        else:
            pending.extend(rest)
        while parts and retry is None:
            part = parts.popleft()
            outcome = self._try_part(part, deadline)
            if isinstance(outcome, _Retry):
                pending.extend(outcome.pending)
                retry = outcome
                break
            if outcome.status < 500:
                continue
            if len(part) == 1:
                singles.append((part[0], outcome))
                continue
            half = len(part) // 2
            parts.extend((part[:half], part[half:]))
        for part in parts:
            pending.extend(part)
        if singles:
            self._load_strikes()
        for event, reply in singles:
            # Evidence that this event, not the API, is the problem: the API took others in this
            # round, or it was already refused alone in an earlier round while others went in.
            known = self._strikes.get(str(event.get("event_id")), 0) > 0
            if (accepted_some or known) and self._strike(event):
                self._dead_letter(event, reply)
            else:
                pending.append(event)
        if singles:
            self._save_strikes()
        if pending:
            status = singles[-1][1].status if singles else answer.status
            why = str(retry) if retry is not None else f"HTTP {status}"
            delay = retry.delay if retry is not None else 0.0
            raise _Retry(delay, why, pending, progress=accepted_some)

    def _try_part(self, part: list[dict[str, Any]], deadline: float | None) -> Response | _Retry:
        """Post one part of an isolation: its answer (2xx/4xx handled, 5xx for the caller) or why
        it must wait (network error, 502-504, 429, deadline), with the part pending."""
        if deadline is not None and self.clock() >= deadline:
            return _Retry(0.0, "close() deadline", part)
        try:
            reply = self._post(self._body(part), part, deadline)
        except _Retry as err:
            return err
        if reply.status in _OUTAGE_STATUSES:
            return _Retry(reply.retry_after_s or 0.0, f"HTTP {reply.status}", part)
        if reply.status < 500:
            try:
                self._handle(reply, part, deadline)
            except _Retry as err:
                return err
        return reply

    def _load_strikes(self) -> None:
        try:
            with open(self.strikes_path, "rb") as fh:
                stored = json.loads(fh.read())
        except (OSError, ValueError):
            return
        if isinstance(stored, dict):
            for key, count in stored.items():
                if isinstance(count, int) and count > self._strikes.get(key, 0):
                    self._strikes[key] = count

    def _save_strikes(self) -> None:
        tmp = self.strikes_path.with_name(f"{STRIKES_NAME}.{os.getpid()}.tmp")
        try:
            if not self._strikes:
                self.strikes_path.unlink(missing_ok=True)
                return
            self.spool.directory.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(json.dumps(self._strikes).encode("utf-8"))
            os.replace(tmp, self.strikes_path)
        except OSError as err:
            log.warning("trainer_agent: cannot keep strikes in %s: %s", self.strikes_path, err)

    def _strike(self, event: dict[str, Any]) -> bool:
        """Count one isolated 5xx for this event; True once it has had enough to be given up."""
        key = str(event.get("event_id"))
        if len(self._strikes) > 10_000:
            self._strikes.clear()
        self._strikes[key] = self._strikes.get(key, 0) + 1
        if self._strikes[key] >= self.dead_letter_after:
            del self._strikes[key]
            return True
        return False

    def _dead_letter(self, event: dict[str, Any], answer: Response) -> None:
        """Keep an event the API keeps refusing, with the answer, in the job's dead-letter file."""
        record = {
            "dead_lettered_at": time.time(),
            "status": answer.status,
            "answer": answer.body,
            "event": event,
        }
        try:
            line = json.dumps(record, separators=(",", ":"), default=str).encode("utf-8") + b"\n"
            self.spool.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.dead_letter_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)  # one write per record: lines of several processes never mix
                os.fsync(fd)
            finally:
                os.close(fd)
        except (OSError, TypeError, ValueError) as err:
            self.stats.dropped += 1
            log.error(
                "trainer_agent: cannot write the dead-letter file %s (%s); event %s is lost",
                self.dead_letter_path,
                err,
                event.get("event_id"),
            )
            return
        self.stats.dead_lettered += 1
        log.error(
            "trainer_agent: the API refused event %s (type %s) with HTTP %s %d times while it took "
            "others; it is in the dead-letter file %s",
            event.get("event_id"),
            event.get("type"),
            answer.status,
            self.dead_letter_after,
            self.dead_letter_path,
        )

    def _handle(
        self, answer: Response, events: list[dict[str, Any]], deadline: float | None
    ) -> None:
        status = answer.status
        if 200 <= status < 300:
            body = answer.body or {}
            rejected = body.get("rejected") or []
            self.stats.sent += int(body.get("accepted", len(events) - len(rejected)) or 0)
            self.stats.duplicates += int(body.get("duplicates", 0) or 0)
            self.stats.held += int(body.get("held", 0) or 0)
            for item in rejected:
                self.stats.rejected += 1
                log.error(
                    "trainer_agent: ingest rejected event %s: %s",
                    item.get("event_id"),
                    item.get("error"),
                )
            return
        if status == 429 or status == 408 or status >= 500:
            raise _Retry(answer.retry_after_s or 0.0, f"HTTP {status}", events)
        if status in _AUTH_STATUSES:
            self.stats.auth_refused += 1
            detail = (answer.body or {}).get("detail")
            log.error("trainer_agent: ingest refused the token (HTTP %s): %s", status, detail)
            raise _Retry(
                max(answer.retry_after_s or 0.0, self.auth_backoff_s), f"HTTP {status}", events
            )
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
