"""A bounded on-disk spool of event batches, shared safely by the processes of one job.

Each batch is one file `<time_ns>-<host>-<pid>-<seq>.json` written atomically (temp file, then
rename). A sender claims a file by renaming it to `<name>.<host>.<pid>.sending`, so two processes
never send the same file at once; a claim left by a dead process is put back on the next start.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("trainer_agent")

SUFFIX = ".json"
CLAIM_SUFFIX = ".sending"
TMP_SUFFIX = ".tmp"
# A claim or temp file older than this is abandoned, whoever made it (e.g. on another host).
STALE_AFTER_S = 600.0


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)[:64] or "_"


def default_spool_root() -> Path:
    """`$ETT_SPOOL_DIR`, else `$XDG_CACHE_HOME/ett-agent/spool`, else `~/.cache/ett-agent/spool`."""
    env = os.environ.get("ETT_SPOOL_DIR")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "ett-agent" / "spool"


def job_spool_dir(root: Path, job_id: str) -> Path:
    """The directory of one job inside a spool root (the next attempt finds it by job id)."""
    return Path(root) / (_safe(job_id) + "-" + format(abs(hash_job(job_id)), "x")[:12])


def hash_job(job_id: str) -> int:
    """A stable hash of the job id, so distinct ids that sanitize alike get distinct folders."""
    value = 1469598103934665603
    for byte in job_id.encode("utf-8"):
        value = ((value ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return value


@dataclass
class Claim:
    """Spool files taken for one send, with their events in order."""

    paths: list[Path] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


class Spool:
    """Bounded directory of pending batches; oldest first; every method is safe to call and never raises."""

    def __init__(
        self, directory: str | os.PathLike[str], max_bytes: int = 64 * 1024 * 1024
    ) -> None:
        self.directory = Path(directory)
        self.max_bytes = int(max_bytes)
        self.host = _safe(socket.gethostname())
        self._seq = 0
        self._lock = threading.Lock()

    def _ensure_dir(self) -> bool:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            return True
        except OSError as err:
            log.error("trainer_agent: cannot create spool directory %s: %s", self.directory, err)
            return False

    def _entries(self) -> list[os.DirEntry[str]]:
        try:
            return list(os.scandir(self.directory))
        except OSError:
            return []

    def pending_bytes(self) -> int:
        """Bytes held by pending and claimed batch files."""
        total = 0
        for entry in self._entries():
            if entry.name.endswith((SUFFIX, CLAIM_SUFFIX)):
                with contextlib.suppress(OSError):
                    total += entry.stat().st_size
        return total

    def pending_files(self) -> list[Path]:
        """Unclaimed batch files, oldest first."""
        names = sorted(e.name for e in self._entries() if e.name.endswith(SUFFIX))
        return [self.directory / n for n in names]

    def write(self, events: list[dict[str, Any]], name: str | None = None) -> bool:
        """Store one batch; False when the spool is full or the disk refuses (nothing written).

        `name` places the file in the oldest-first order (by default: now, at the end).
        """
        if not events:
            return True
        try:
            data = json.dumps({"events": events}, separators=(",", ":")).encode("utf-8")
        except (TypeError, ValueError) as err:
            log.error(
                "trainer_agent: cannot serialize %d events for the spool: %s", len(events), err
            )
            return False
        if not self._ensure_dir():
            return False
        if self.pending_bytes() + len(data) > self.max_bytes:
            return False
        with self._lock:
            self._seq += 1
            seq = self._seq
        if name is None:
            name = f"{time.time_ns():020d}-{self.host}-{os.getpid()}-{seq:06d}{SUFFIX}"
        final = self.directory / name
        tmp = self.directory / (name + TMP_SUFFIX)
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            return True
        except OSError as err:
            log.error("trainer_agent: cannot write spool file %s: %s", final, err)
            with contextlib.suppress(OSError):
                tmp.unlink()
            return False

    def claim(self, max_events: int, max_bytes: int) -> Claim:
        """Take the oldest pending files, up to the limits (at least one file when any is pending)."""
        claim = Claim()
        size = 0
        for path in self.pending_files():
            claimed = path.with_name(f"{path.name}.{self.host}.{os.getpid()}{CLAIM_SUFFIX}")
            try:
                file_size = path.stat().st_size
            except OSError:
                continue
            if claim.paths and (len(claim.events) >= max_events or size + file_size > max_bytes):
                break
            try:
                os.rename(path, claimed)
            except OSError:
                continue  # another process claimed it first
            events = self._read(claimed)
            if events is None:
                continue
            if claim.paths and len(claim.events) + len(events) > max_events:
                self.release([claimed])
                break
            claim.paths.append(claimed)
            claim.events.extend(events)
            size += file_size
        return claim

    def _read(self, path: Path) -> list[dict[str, Any]] | None:
        try:
            with open(path, "rb") as fh:
                body = json.loads(fh.read())
            events = body["events"]
            if not isinstance(events, list):
                raise ValueError("events is not a list")
            return [e for e in events if isinstance(e, dict)]
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.error("trainer_agent: dropping unreadable spool file %s: %s", path, err)
            self.delete([path])
            return None

    def delete(self, paths: Iterable[Path]) -> None:
        """Forget claimed files (their events were delivered or rejected)."""
        for path in paths:
            with contextlib.suppress(OSError):
                path.unlink()

    def replace(self, paths: list[Path], events: list[dict[str, Any]]) -> bool:
        """Put back only `events` of claimed files (the rest was delivered), in their place."""
        if not paths:
            return False
        original = paths[0].name.split(SUFFIX + ".", 1)[0][: -len(SUFFIX)]
        with self._lock:
            self._seq += 1
            seq = self._seq
        # Sorts right after the first claimed file, so the leftovers keep their turn.
        name = f"{original}-r{os.getpid()}x{seq:06d}{SUFFIX}"
        if events and not self.write(events, name=name):
            return False
        self.delete(paths)
        return True

    def release(self, paths: Iterable[Path]) -> None:
        """Give claimed files back to the spool (their send failed)."""
        for path in paths:
            original = path.name.split(SUFFIX + ".", 1)[0] + SUFFIX
            with contextlib.suppress(OSError):
                os.rename(path, path.with_name(original))

    def recover(self) -> int:
        """Put back claims of dead local processes and stale claims; remove stale temp files."""
        recovered = 0
        now = time.time()
        for entry in self._entries():
            name = entry.name
            try:
                age = now - entry.stat().st_mtime
            except OSError:
                continue
            if name.endswith(TMP_SUFFIX):
                if age > STALE_AFTER_S:
                    self.delete([Path(entry.path)])
                continue
            if not name.endswith(CLAIM_SUFFIX):
                continue
            parts = name[: -len(CLAIM_SUFFIX)].rsplit(".", 2)
            if len(parts) != 3:
                continue
            _, host, pid = parts
            if (
                host == self.host and pid.isdigit() and not _alive(int(pid))
            ) or age > STALE_AFTER_S:
                self.release([Path(entry.path)])
                recovered += 1
        return recovered


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
