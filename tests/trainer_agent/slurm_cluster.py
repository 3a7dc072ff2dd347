"""A real one-node SLURM (munged, slurmctld, slurmd) under a temp folder, on its own ports."""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

DAEMONS = ("munged", "slurmctld", "slurmd")
INSTALL_HINT = (
    "install SLURM with `bash scripts/test_services.sh` "
    "(apt-get install slurmctld slurmd slurm-client munge)"
)


class SlurmError(RuntimeError):
    """SLURM could not be started or did not answer."""


def missing_binaries() -> list[str]:
    """The SLURM/munge programs this machine lacks."""
    needed = (*DAEMONS, "sbatch", "scontrol", "squeue", "sinfo")
    return [name for name in needed if shutil.which(name) is None and not _sbin(name)]


def _sbin(name: str) -> str | None:
    for folder in ("/usr/sbin", "/sbin", "/usr/local/sbin"):
        path = Path(folder) / name
        if path.exists():
            return str(path)
    return None


def _which(name: str) -> str:
    found = shutil.which(name) or _sbin(name)
    if not found:
        raise SlurmError(f"{name} not found: {INSTALL_HINT}")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _node_hardware() -> tuple[str, int]:
    """Node name and CPU count as slurmd itself sees them (`slurmd -C`)."""
    out = subprocess.run(
        [_which("slurmd"), "-C"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    name = re.search(r"NodeName=(\S+)", out)
    cpus = re.search(r"CPUs=(\d+)", out)
    return (name.group(1) if name else socket.gethostname().split(".")[0]), (
        int(cpus.group(1)) if cpus else os.cpu_count() or 1
    )


class SlurmCluster:
    """Writes slurm.conf and starts the three daemons; stop() ends them (by their pid files)."""

    GPUS = 4

    def __init__(self, root: Path, hooks_dir: Path) -> None:
        self.root = root
        self.hooks_dir = hooks_dir
        self.conf = root / "slurm.conf"
        self.run_dir = root / "run"
        self.log_dir = root / "log"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.env.pop("SLURM_JOB_ID", None)
        self.node, self.cpus = _node_hardware()
        self.cluster = "etttest"
        self._write_config()

    def _write_config(self) -> None:
        for sub in ("run", "log", "state", f"spool/slurmd-{self.node}", "dev", "jobs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        # Fake GPUs for --gpus: gres/gpu wants device files; /dev/null is a character device.
        for i in range(self.GPUS):
            dev = self.root / "dev" / f"gpu{i}"
            if not dev.exists():
                dev.symlink_to("/dev/null")
        r = self.root
        lines = [
            f"ClusterName={self.cluster}",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            f"SlurmUser={getpass.getuser()}",  # root in CI; slurmd must be root to run jobs
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={r}/run/munge.sock",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/slurmd-%n",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=1",
            "MpiDefault=none",
            "GresTypes=gpu",
            "ReturnToService=2",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
            "InactiveLimit=0",
            "MinJobAge=600",
            "KillWait=2",
            "Waittime=0",
            "MailProg=/bin/true",
            # The integration under test, as docs/SLURM.md tells a site to install it:
            f"PrologSlurmctld={self.hooks_dir}/prolog_slurmctld.sh",
            "JobCompType=jobcomp/script",
            f"JobCompLoc={self.hooks_dir}/jobcomp.sh",
            f"TaskProlog={self.hooks_dir}/task_prolog.sh",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=1000 "
            f"Gres=gpu:{self.GPUS} State=UNKNOWN",
            f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        (r / "gres.conf").write_text(f"NodeName={self.node} Name=gpu File={r}/dev/gpu[0-3]\n")

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> None:
        """Start munged, slurmctld and slurmd; wait until the node is idle."""
        r = self.root
        self._daemon(
            "munged",
            f"--key-file={r}/munge.key",
            f"--socket={r}/run/munge.sock",
            f"--pid-file={r}/run/munged.pid",
            f"--log-file={r}/log/munged.log",
            f"--seed-file={r}/run/munge.seed",
            "--force",
        )
        self._daemon("slurmctld", "-f", str(self.conf))
        self._daemon("slurmd", "-f", str(self.conf))
        self.wait_node_idle(timeout_s)

    def wait_node_idle(self, timeout_s: float = 30.0) -> None:
        """Poll sinfo until the node is idle."""
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            state = self._run("sinfo", "-h", "-n", self.node, "-o", "%T", check=False).strip()
            if state.startswith("idle"):
                return
            time.sleep(0.3)
        raise SlurmError(
            f"SLURM node {self.node} not idle after {timeout_s:.0f} s (state {state!r}); "
            f"logs in {self.log_dir}:\n{self.logs_tail()}"
        )

    def _daemon(self, name: str, *args: str) -> None:
        out = subprocess.run(
            [_which(name), *args], env=self.env, capture_output=True, text=True, timeout=60
        )
        if out.returncode != 0:
            raise SlurmError(
                f"{name} failed to start (exit {out.returncode}): {out.stderr.strip()[-1500:]}\n"
                f"{self.logs_tail()}"
            )

    def stop(self) -> None:
        """SIGTERM each daemon by its pid file, SIGKILL after 10 s."""
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self._pid(name)
            if pid is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.1)
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _pid(self, name: str) -> int | None:
        try:
            return int((self.run_dir / f"{name}.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def logs_tail(self, lines: int = 15) -> str:
        """The last lines of each daemon's log, for error messages."""
        parts = []
        for path in sorted(self.log_dir.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(parts)

    # ---- commands ------------------------------------------------------------------------

    def _run(self, *cmd: str, check: bool = True) -> str:
        out = subprocess.run(
            [_which(cmd[0]), *cmd[1:]], env=self.env, capture_output=True, text=True, timeout=30
        )
        if check and out.returncode != 0:
            raise SlurmError(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
        return out.stdout

    def sbatch(self, script: str, *options: str) -> str:
        """Submit a batch script; returns the SLURM job id."""
        path = self.root / "jobs" / f"job{time.monotonic_ns()}.sh"
        path.write_text("#!/bin/sh\n" + script + "\n")
        out = self._run(
            "sbatch", "--parsable", f"--output={self.root}/jobs/%j.out", *options, str(path)
        )
        return out.strip().split(";")[0]

    def scontrol(self, *args: str, check: bool = True) -> str:
        """Run scontrol with this cluster's configuration."""
        return self._run("scontrol", *args, check=check)

    def start_requeued_now(self, job_id: str) -> None:
        """Release a requeued job at once (SLURM holds it back two minutes, Reason=BeginTime).

        slurmd revokes the killed attempt's job credential with a time in whole seconds, and a
        credential created within that second counts as revoked too (slurmctld then logs
        "Killing non-startable batch JobId=N: Job credential revoked"): the relaunch waits for
        the next second.
        """
        time.sleep(1.2)
        self.scontrol("update", f"JobId={job_id}", "StartTime=now")

    def show_job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict of its fields (JobState, SubmitTime, Restarts, ...)."""
        text = self._run("scontrol", "show", "job", job_id)
        return dict(re.findall(r"(\w[\w:/]*)=(\S*)", text))

    def wait_job(
        self, job_id: str, states: tuple[str, ...], timeout_s: float = 30.0, restarts: int = 0
    ) -> dict[str, str]:
        """Poll `scontrol show job` until JobState is one of `states` (and Restarts >= restarts)."""
        deadline = time.monotonic() + timeout_s
        job: dict[str, str] = {}
        while time.monotonic() < deadline:
            job = self.show_job(job_id)
            if job.get("JobState") in states and int(job.get("Restarts", "0")) >= restarts:
                return job
            time.sleep(0.2)
        raise SlurmError(
            f"job {job_id} not in {states} after {timeout_s:.0f} s: {job}\n{self.logs_tail()}"
        )


def slurm_time(value: str) -> float:
    """Epoch seconds of a `scontrol show job` time (SLURM prints local time, whole seconds)."""
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").timestamp()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def parse_time(value: Any) -> float:
    """Epoch seconds of an RFC 3339 string or a number from the ETT read API."""
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
