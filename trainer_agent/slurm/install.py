"""`install`: write the three hook scripts SLURM runs and say which slurm.conf lines to add."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import trainer_agent
from trainer_agent.events import ALLOCATION_STRIDE
from trainer_agent.slurm import convert
from trainer_agent.slurm.hooks import Settings

ENV_FILE = "ett-slurm.env"
PROLOG = "prolog_slurmctld.sh"
JOBCOMP = "jobcomp.sh"
TASK_PROLOG = "task_prolog.sh"


def _hook_script(env_file: Path, python: str, command: str, log_file: Path) -> str:
    # `|| true` and `exit 0`: whatever happens to ETT, SLURM sees a hook that succeeded.
    return (
        "#!/bin/sh\n"
        "# ETT% SLURM integration, written by `python -m trainer_agent.slurm install`.\n"
        f". {shlex.quote(str(env_file))}\n"
        f"{shlex.quote(python)} -m trainer_agent.slurm {command} "
        f">>{shlex.quote(str(log_file))} 2>&1 || true\n"
        "exit 0\n"
    )


def task_prolog_script(template: str, cluster: str = "") -> str:
    """A shell TaskProlog printing the same ETT job id as the hooks (no Python per task)."""
    fallback = re.sub(r"[^A-Za-z0-9_.-]", "_", cluster) or "slurm"
    shell_id = template.replace("{cluster}", "${SLURM_CLUSTER_NAME:-" + fallback + "}").replace(
        "{job_id}", "${SLURM_JOB_ID}"
    )
    return (
        "#!/bin/sh\n"
        "# ETT% SLURM integration: the job's tasks report under the scheduler's job id, and the\n"
        "# trainer agent leaves job_submitted/job_ended to the scheduler hooks.\n"
        "# Attempt numbers: allocation k (a requeue adds one) is attempt k x 1000, as the hooks\n"
        "# number it; trainer_agent.elastic adds torchrun's in-place restarts to it.\n"
        "echo 'export ETT_JOB_OWNER=scheduler'\n"
        f'echo "export ETT_JOB_ID={shell_id}"\n'
        'case "${SLURM_RESTART_COUNT:-0}" in *[!0-9]*) n=0 ;; *) n=${SLURM_RESTART_COUNT:-0} ;; esac\n'
        f'echo "export ETT_ATTEMPT_BASE=$((n * {ALLOCATION_STRIDE}))"\n'
        "exit 0\n"
    )


def install(settings: Settings, scripts_dir: Path, python: str, slurm_conf: str | None) -> str:
    """Write the env file and the hook scripts into scripts_dir; return the slurm.conf lines."""
    scripts_dir.mkdir(parents=True, exist_ok=True)
    settings.directory.mkdir(parents=True, exist_ok=True)
    package_root = Path(trainer_agent.__file__).resolve().parent.parent
    env = {
        "ETT_ENDPOINT": settings.endpoint,
        "ETT_SLURM_DIR": str(settings.directory),
        "ETT_SLURM_TIMEOUT_S": str(settings.timeout_s),
        "ETT_SLURM_JOB_ID_TEMPLATE": settings.job_id_template,
        "PYTHONPATH": str(package_root),
    }
    if settings.token_file:
        env["ETT_TOKEN_FILE"] = str(Path(settings.token_file).resolve())
    elif settings.token:
        env["ETT_TOKEN"] = settings.token
    if settings.cluster:
        env["ETT_SLURM_CLUSTER"] = settings.cluster
    if settings.owner_map:
        env["ETT_SLURM_OWNER_MAP"] = settings.owner_map
    if settings.allowed_owners:
        env["ETT_SLURM_ALLOWED_OWNERS"] = settings.allowed_owners
    env["ETT_SLURM_MAX_GPUS_PER_NODE"] = str(settings.max_gpus_per_node)
    squeue = shutil.which(settings.squeue)
    if squeue:  # slurmctld gives its hooks a minimal PATH
        env["ETT_SLURM_SQUEUE"] = squeue
    if slurm_conf:
        env["SLURM_CONF"] = slurm_conf
    env_file = scripts_dir / ENV_FILE
    env_file.write_text(
        "# Settings of the ETT% SLURM hooks (sourced by the scripts next to this file).\n"
        + "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()),
        encoding="utf-8",
    )
    env_file.chmod(0o600)  # may hold the token
    log_file = settings.directory / "hooks.out"
    scripts = {
        PROLOG: _hook_script(env_file, python, "prolog-slurmctld", log_file),
        JOBCOMP: _hook_script(env_file, python, "jobcomp", log_file),
        TASK_PROLOG: task_prolog_script(
            settings.job_id_template or convert.DEFAULT_JOB_ID_TEMPLATE, settings.cluster
        ),
    }
    for name, text in scripts.items():
        path = scripts_dir / name
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755)
    return (
        "# Add to slurm.conf (then `scontrol reconfigure`; JobCompType needs a slurmctld restart):\n"
        f"PrologSlurmctld={scripts_dir / PROLOG}\n"
        "JobCompType=jobcomp/script\n"
        f"JobCompLoc={scripts_dir / JOBCOMP}\n"
        f"TaskProlog={scripts_dir / TASK_PROLOG}\n"
        f"# {scripts_dir / TASK_PROLOG} must exist on every compute node.\n"
    )
