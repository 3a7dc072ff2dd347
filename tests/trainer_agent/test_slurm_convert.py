"""The SLURM integration's pure parts: conventions, outcomes, event ids, hook scripts."""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path

import pytest

from tests.trainer_agent.fake_ingest import FakeIngest
from tests.trainer_agent.live_server import free_port
from trainer_agent.slurm import __main__ as cli
from trainer_agent.slurm import convert, hooks, install


def test_comment_tokens_any_separator_case_insensitive_prefix() -> None:
    tokens = convert.parse_comment("ETT-model=llama3 ett-gpus=8,ett-owner=ranking;note=x ett-bad=")
    assert tokens == {"model": "llama3", "gpus": "8", "owner": "ranking"}
    assert convert.parse_comment(None) == {}


def test_meta_from_slurm_the_site_policy_and_the_comment() -> None:
    job = {
        "job_id": 42,
        "name": "train",
        "cluster": "c1",
        "partition": "gpu",
        "account": "ml-rank",
        "comment": "ett-model=llama3 ett-gpus=16 ett-owner=ranking ett-variant=baseline",
        "tres_per_job": "gres:gpu:8",
    }
    meta = convert.job_meta(job, convert.TrustPolicy.parse("account:ml-rank=ranking"))
    assert (meta.model, meta.gpus) == ("llama3", 8)  # SLURM's 8, not the comment's 16
    assert meta.warnings == [
        "ett-gpus=16 ignored: SLURM gave the job 8 GPUs (its allocated or requested gres/gpu)"
    ]
    assert meta.labels == {
        "scheduler": "slurm",
        "cluster": "c1",
        "partition": "gpu",
        "account": "ml-rank",
        "slurm_job_id": "42",
        "owner": "ranking",
        "variant": "baseline",
    }


def test_a_comment_cannot_claim_gpus_or_another_teams_owner() -> None:
    """Any cluster user writes the comment: `ett-gpus=10000000` and another team's owner."""
    hostile = {
        "job_id": 7,
        "name": "x",
        "partition": "debug",
        "account": "students",
        "node_count": 2,
        "comment": "ett-model=ads-ranker ett-gpus=10000000 ett-owner=ads ett-tier=tier-0 "
        "ett-cluster=prod ett-BAD*KEY=1 " + " ".join(f"ett-k{i}=v" for i in range(20)),
        "tres_alloc_str": "cpu=2,node=2,billing=2,gres/gpu=4",
    }
    policy = convert.TrustPolicy.parse("partition:gpu=infra", "ranking")
    meta = convert.job_meta(hostile, policy)
    assert meta.gpus == 4  # SLURM's allocation
    assert "owner" not in meta.labels and meta.labels["partition"] == "debug"
    assert "tier" not in meta.labels
    assert sum(1 for k in meta.labels if k.startswith("k")) == convert.MAX_COMMENT_LABELS
    text = " | ".join(meta.warnings)
    assert "ett-gpus=10000000 ignored: SLURM gave the job 4 GPUs" in text
    assert "ett-owner='ads' ignored: not an owner the site allows" in text
    assert "ett-tier= ignored" in text and "ett-cluster= ignored" in text
    assert "ett-bad*key= ignored" in text
    # Without any gres/gpu from SLURM a comment's count is taken only within the per-node bound.
    bare = {k: v for k, v in hostile.items() if k != "tres_alloc_str"}
    assert convert.job_meta(bare, policy).gpus == 1
    sane = dict(bare, comment="ett-model=m ett-gpus=16")
    assert convert.job_meta(sane, policy).gpus == 16  # 2 nodes x 8
    # The site's mapping wins over a comment; an allow-listed owner is taken when none maps.
    mapped = dict(hostile, partition="gpu")
    assert convert.job_meta(mapped, policy).labels["owner"] == "infra"
    allowed = dict(hostile, comment="ett-model=m ett-team=ranking")
    assert convert.job_meta(allowed, policy).labels["owner"] == "ranking"
    anyone = convert.TrustPolicy.parse("", "*")
    assert convert.job_meta(hostile, anyone).labels["owner"] == "ads"
    with pytest.raises(ValueError, match="account:<name>=<team>"):
        convert.TrustPolicy.parse("user:bob=ads")


@pytest.mark.parametrize(
    ("job", "gpus"),
    [
        ({"tres_alloc_str": "cpu=8,mem=1G,node=2,billing=8,gres/gpu=16"}, 16),
        ({"tres_alloc_str": "cpu=1,gres/gpu=4,gres/gpu:a100=4"}, 4),
        ({"tres_per_job": "gres:gpu:a100:2"}, 2),
        ({"tres_per_job": "gres/gpu=3"}, 3),
        ({"tres_per_node": "gres:gpu:8", "node_count": 4}, 32),
        ({"tres_per_task": "gres:gpu:1", "tasks": 6}, 6),
        ({"tres_per_job": "gres:gpu:a:2,gres:gpu:b:3"}, 5),
        ({"tres_per_node": "gres:nic:1", "tres_alloc_str": "cpu=1,node=1"}, None),
    ],
)
def test_gpus_from_tres(job: dict[str, object], gpus: int | None) -> None:
    assert convert.gpus_from_tres(job) == gpus


def test_meta_fallbacks_warn() -> None:
    meta = convert.job_meta({"name": "wrap", "comment": "ett-gpus=zero"})
    assert meta.model == "wrap" and meta.gpus == 1
    assert len(meta.warnings) == 3  # model from the name, bad ett-gpus, no GPUs at all
    assert "ett-model=<name>" in meta.warnings[0]


@pytest.mark.parametrize(
    ("state", "requeued", "outcome"),
    [
        ("COMPLETED", False, (None, "completed", "succeeded")),
        ("CANCELLED", False, (None, "cancelled", "cancelled")),
        ("FAILED", False, ("app_error", "failure", "failed")),
        ("TIMEOUT", False, ("app_error", "failure", "timeout")),
        ("NODE_FAIL", False, ("infra", "failure", "node_failure")),
        ("OUT_OF_MEMORY", False, ("app_error", "failure", "out_of_memory")),
        ("PREEMPTED", False, ("preemption", "preempted", "preempted")),
        ("NODE_FAIL", True, ("infra", "failure", "node_failure")),
        ("PENDING", True, ("preemption", "preempted", "failed")),
        ("PREEMPTED", True, ("preemption", "preempted", "preempted")),
        ("COMPLETED", True, ("preemption", "preempted", "failed")),
        ("SOMETHING_NEW", False, ("unknown", "failure", "failed")),
    ],
)
def test_end_outcome(state: str, requeued: bool, outcome: tuple[str | None, str, str]) -> None:
    assert convert.end_outcome(state, requeued) == outcome


def test_end_events_ids_fixed_and_job_end_only_when_final() -> None:
    requeue = convert.end_events("slurm-c-7", 0, "PENDING", 100.0, requeued=True)
    assert [e["event_id"] for e in requeue] == ["slurm-c-7:a0-failure", "slurm-c-7:a0-ended"]
    assert requeue == convert.end_events("slurm-c-7", 0, "PENDING", 100.0, requeued=True)
    final = convert.end_events("slurm-c-7", 1, "FAILED", 200.0, requeued=False, exit_code="3:0")
    assert [e["type"] for e in final] == ["failure", "attempt_ended", "job_ended"]
    assert final[0]["kind"] == "app_error" and "exit code 3:0" in final[0]["message"]
    assert final[2] == {
        "event_id": "slurm-c-7:job-ended",
        "job_id": "slurm-c-7",
        "type": "job_ended",
        "ts": 200.0,
        "status": "failed",
    }


def test_event_ids_of_long_job_ids_stay_unique_and_short() -> None:
    a, b = "x" * 100 + "1", "x" * 100 + "2"
    ids = {convert.event_id(a, "a12-failure"), convert.event_id(b, "a12-failure")}
    assert len(ids) == 2 and all(len(i) <= 64 for i in ids)


def test_ended_attempt_and_requeue_detection() -> None:
    attempts = {0: 100.0, 1: 200.0}
    assert hooks._ended_attempt(attempts, 100.0, None, "PENDING") == 0
    assert hooks._ended_attempt(attempts, None, None, "COMPLETED") == 1
    assert hooks._ended_attempt({}, None, {"restart_cnt": 2}, "PENDING") == 1
    assert hooks._ended_attempt({}, None, {"restart_cnt": 2}, "COMPLETED") == 2
    assert hooks._requeued("PENDING", None, 0)
    assert hooks._requeued("NODE_FAIL", {"job_state": "PENDING", "restart_cnt": 1}, 0)
    assert not hooks._requeued("NODE_FAIL", {"job_state": "NODE_FAIL", "restart_cnt": 0}, 0)
    assert not hooks._requeued("COMPLETED", {"job_state": "COMPLETING", "restart_cnt": 1}, 1)


def test_shell_task_prolog_exports_the_hooks_job_id(tmp_path: Path) -> None:
    settings = hooks.Settings(directory=tmp_path / "d", job_id_template="{cluster}/{job_id}")
    install.install(settings, tmp_path / "scripts", "python3", None)
    env = {"SLURM_CLUSTER_NAME": "big", "SLURM_JOB_ID": "77", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [str(tmp_path / "scripts" / install.TASK_PROLOG)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.splitlines() == hooks.task_prolog_lines(env, settings)
    assert out.stdout.splitlines() == [
        "export ETT_JOB_OWNER=scheduler",
        "export ETT_JOB_ID=big/77",
        "export ETT_ATTEMPT_BASE=0",
    ]
    # After two requeues the tasks run in allocation 2: attempts from 2000, as the hooks say.
    for count, base in (("2", "2000"), ("x", "0")):
        requeued = dict(env, SLURM_RESTART_COUNT=count)
        out = subprocess.run(
            [str(tmp_path / "scripts" / install.TASK_PROLOG)],
            env=requeued,
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.splitlines() == hooks.task_prolog_lines(requeued, settings)
        assert out.stdout.splitlines()[-1] == f"export ETT_ATTEMPT_BASE={base}"


def test_hook_scripts_exit_zero_even_when_python_is_broken(tmp_path: Path) -> None:
    settings = hooks.Settings(directory=tmp_path / "d")
    install.install(settings, tmp_path / "scripts", "/nonexistent/python", None)
    for name in (install.PROLOG, install.JOBCOMP):
        done = subprocess.run([str(tmp_path / "scripts" / name)], env={}, timeout=30)
        assert done.returncode == 0  # a non-zero PrologSlurmctld would requeue or hold the job


def test_cluster_fallback_is_the_same_in_shell_and_python(tmp_path: Path) -> None:
    settings = hooks.Settings(directory=tmp_path / "d", cluster="west")
    install.install(settings, tmp_path / "scripts", "python3", None)
    env = {"SLURM_JOB_ID": "9", "PATH": "/usr/bin:/bin"}  # SLURM did not say its cluster
    out = subprocess.run(
        [str(tmp_path / "scripts" / install.TASK_PROLOG)], env=env, capture_output=True, text=True
    )
    assert out.stdout.splitlines() == hooks.task_prolog_lines(env, settings)
    assert "export ETT_JOB_ID=slurm-west-9" in out.stdout.splitlines()


def test_outage_costs_one_timeout_then_hooks_only_spool(
    tmp_path: Path, fake_ingest: FakeIngest
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    settings = hooks.Settings(endpoint=dead, token="secret", directory=tmp_path, timeout_s=1.0)
    first = convert.end_events("slurm-c-1", 0, "COMPLETED", 1_764_000_010.0, requeued=False)
    assert not hooks.deliver(settings, "slurm-c-1", first)
    assert hooks.server_marked_down(settings)
    began = time.monotonic()
    second = convert.end_events("slurm-c-2", 0, "FAILED", 1_764_000_020.0, requeued=False)
    assert not hooks.deliver(settings, "slurm-c-2", second)
    assert time.monotonic() - began < 0.5  # no second timeout while marked down
    assert len(list((tmp_path / "spool").glob("*/*.json"))) == 2

    # The server is back (here: at another address); flush ignores the mark and clears it.
    settings.endpoint = fake_ingest.url
    assert hooks.flush_all(settings, time.monotonic() + 10)
    assert sorted(fake_ingest.events) == sorted(e["event_id"] for e in first + second)
    assert not list((tmp_path / "spool").glob("*/*.json"))
    assert not settings.down_marker.exists()


def _usage_examples() -> list[list[str]]:
    """The command lines of the hook's --help (its module docstring), up to their comments."""
    examples = []
    for line in (cli.__doc__ or "").splitlines():
        words = line.split()
        if words[:3] == ["python", "-m", "trainer_agent.slurm"]:
            args = []
            for word in words[3:]:
                if word.startswith("("):
                    break
                args.append(word)
            examples.append(args)
    return examples


def test_every_usage_example_of_the_help_parses() -> None:
    examples = _usage_examples()
    assert [args[0] for args in examples] == [
        "install",
        "prolog-slurmctld",
        "jobcomp",
        "task-prolog",
        "flush",
    ]
    install_args = examples[0]
    assert install_args[1:] == [
        "--scripts-dir",
        "/etc/slurm/ett",
        "--endpoint",
        "URL",
        "--token-file",
        "F",
    ]
    for args in examples:
        parsed = cli._parser().parse_args(args)  # "unrecognized arguments" exits 2
        assert parsed.command == args[0]
    parsed = cli._parser().parse_args(install_args)
    assert (parsed.endpoint, parsed.token_file, parsed.scripts_dir) == (
        "URL",
        "F",
        "/etc/slurm/ett",
    )
    # Before the command they still count; after it, only what is given there replaces them.
    parsed = cli._parser().parse_args(
        ["--endpoint", "A", "--timeout", "2", "jobcomp", "--endpoint", "B"]
    )
    assert (parsed.endpoint, parsed.timeout, parsed.verbose) == ("B", 2.0, False)


def test_the_install_example_run_as_written_writes_its_settings(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("secret\n")
    real = {
        "/etc/slurm/ett": str(tmp_path / "scripts"),
        "URL": "http://ett.example:8050",
        "F": str(token_file),
    }
    args = [real.get(word, word) for word in _usage_examples()[0]]
    assert cli.main([*args, "--dir", str(tmp_path / "state")]) == 0
    env_file = (tmp_path / "scripts" / install.ENV_FILE).read_text()
    assert "export ETT_ENDPOINT=http://ett.example:8050\n" in env_file
    assert f"export ETT_TOKEN_FILE={token_file.resolve()}\n" in env_file
    assert f"export ETT_SLURM_DIR={tmp_path / 'state'}\n" in env_file


def test_a_refused_token_is_reported_as_such_with_the_fix(
    tmp_path: Path, fake_ingest: FakeIngest, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    token_file = tmp_path / "token"
    token_file.write_text("not-the-token\n")
    settings = hooks.settings_from_env(
        {"ETT_ENDPOINT": fake_ingest.url, "ETT_TOKEN_FILE": str(token_file)}
    )
    settings.directory, settings.timeout_s = tmp_path, 1.0
    events = convert.end_events("slurm-c-5", 0, "COMPLETED", 1_764_000_010.0, requeued=False)
    assert not hooks.deliver(settings, "slurm-c-5", events)
    assert fake_ingest.requests and not fake_ingest.events  # it answered: 401
    said = " ".join(r.getMessage() for r in caplog.records if r.name == "trainer_agent.slurm")
    assert "not reached" not in said
    assert f"ETT server {fake_ingest.url} refused the token in {token_file}" in said
    assert "ett token create" in said and "trainer_agent.slurm flush" in said
    # The next hook spools only (no second timeout), and says why the server is marked.
    caplog.clear()
    assert hooks.server_marked_down(settings)
    more = convert.end_events("slurm-c-6", 0, "FAILED", 1_764_000_020.0, requeued=False)
    assert not hooks.deliver(settings, "slurm-c-6", more)
    said = " ".join(r.getMessage() for r in caplog.records if r.name == "trainer_agent.slurm")
    assert "it refused the token" in said

    # `flush` with the wrong token says so too; with the right one it sends everything.
    caplog.clear()
    flush = ["flush", "--endpoint", fake_ingest.url, "--dir", str(tmp_path), "--token-file"]
    assert cli.main([*flush, str(token_file), "--wait", "1"]) == 1
    said = " ".join(r.getMessage() for r in caplog.records if r.name == "trainer_agent.slurm")
    assert "refused the token" in said
    token_file.write_text("secret\n")
    assert cli.main([*flush, str(token_file), "--wait", "5"]) == 0
    assert sorted(fake_ingest.events) == sorted(e["event_id"] for e in events + more)
