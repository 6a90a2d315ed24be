"""Conventions people expect of a command-line tool (issue 9): --version, -h, help with no
arguments, --json with documented keys, and shell completion that knows clusters and job ids."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from envutil import scheduler_env_cleared
from inproc import run_cli
from hpc_launch import __version__
from hpc_launch.cli.app import JOB_JSON_KEYS
from hpc_launch.records import JobRecord, JobStore

DOCS = (Path(__file__).parent.parent / "docs" / "commands.md").read_text()


@pytest.fixture
def env(tmp_path, hpc_launch_bin):
    e = scheduler_env_cleared()
    e.update(HPC_LAUNCH_STATE_DIR=str(tmp_path / "state"), HPC_LAUNCH_CONFIG_DIR=str(tmp_path / "config"))
    e["PATH"] = f"{Path(hpc_launch_bin).parent}:{e['PATH']}"
    JobStore(tmp_path / "state" / "jobs.sqlite").add(
        JobRecord(
            job_id="4242",
            cluster="local",
            dialect="none",
            host="localhost",
            name="train",
            workdir=str(tmp_path),
            script_path=str(tmp_path / ".hpc-launch/train-x.sh"),
            log_path=str(tmp_path / "train.o4242"),
            exit_path=str(tmp_path / "train.o4242.exitcode"),
            submit_time=1.0,
            state="done",
            exit_code=0,
        )
    )
    return e


def _run(env, *args):
    """`hpc-launch ARGS`'s answer, in this process (tests/inproc.py); the shells' completion runs the command."""
    return run_cli(args, env=env)


def test_version_and_short_help(env):
    assert _run(env, "--version").stdout == f"hpc-launch {__version__}\n"
    for args in (["-h"], ["submit", "-h"], ["clusters", "-h"]):
        r = _run(env, *args)
        assert r.returncode == 0 and "Usage: hpc-launch" in r.stdout, args


def test_no_arguments_prints_the_help(env):
    r = _run(env)
    assert "Usage: hpc-launch" in r.stdout and "submit" in r.stdout


def test_json_outputs_have_their_documented_keys(env):
    jobs = json.loads(_run(env, "list", "--json").stdout)
    assert jobs and set(jobs[0]) == set(JOB_JSON_KEYS)
    assert jobs[0]["job_id"] == "4242" and jobs[0]["state"] == "done" and jobs[0]["exit_code"] == 0
    assert json.loads(_run(env, "status", "--json", "4242").stdout)[0]["job_id"] == "4242"
    clusters = {c["name"]: c for c in json.loads(_run(env, "clusters", "--json").stdout)}
    assert clusters["abci"]["scheduler"] == "pbspro" and "rt_HF" in clusters["abci"]["queues"]
    assert set(clusters["local"]) == {
        "name",
        "scheduler",
        "gpus_per_node",
        "launcher",
        "status",
        "title",
        "queues",
        "login",
    }
    for key in JOB_JSON_KEYS + ("gpus_per_node", "launcher", "queues"):
        assert f"`{key}`" in DOCS, f"docs/commands.md does not document --json key {key}"


@pytest.mark.train
def test_plan_json(env):
    plan = json.loads(_run(env, "plan", "--model", "resnet50", "--cluster", "abci", "--json").stdout)
    assert plan["model"] == "resnet50" and plan["total_params"] > 25_000_000
    assert {"stage", "offload", "gpu_gib", "cpu_gib", "fits", "source"} == set(plan["rows"][0])
    assert plan["recommended"] in plan["rows"]


def _bash_complete(env, words):
    script = (
        "source <(hpc-launch completion bash)\n"
        "complete -p hpc-launch\n"
        f"COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}\n"
        "_hpc_launch_completion hpc-launch\n"
        "printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    r = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    first, *rest = r.stdout.splitlines()
    assert first == "complete -o default -F _hpc_launch_completion hpc-launch"
    return rest


def test_bash_completion_knows_commands_clusters_and_job_ids(env):
    assert "submit" in _bash_complete(env, ["hpc-launch", "su"])
    assert _bash_complete(env, ["hpc-launch", "submit", "--cluster", "ab"]) == ["abci", "abci2"]
    assert _bash_complete(env, ["hpc-launch", "logs", "42"]) == ["4242"]
    assert "--follow" in _bash_complete(env, ["hpc-launch", "logs", "--fo"])


@pytest.mark.parametrize(
    "shell, extra",
    [
        ("zsh", {"_HPC_LAUNCH_COMPLETE": "complete_zsh"}),
        ("fish", {"_HPC_LAUNCH_COMPLETE": "complete_fish", "_TYPER_COMPLETE_FISH_ACTION": "get-args"}),
    ],
)
def test_zsh_and_fish_scripts_and_their_callbacks(env, shell, extra):
    script = _run(env, "completion", shell).stdout
    assert "_HPC_LAUNCH_COMPLETE=complete_" + shell in script
    answer = subprocess.run(
        ["hpc-launch"],
        env={**env, **extra, "_TYPER_COMPLETE_ARGS": "hpc-launch cancel 42"},
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "4242" in answer
    answer = subprocess.run(
        ["hpc-launch"],
        env={**env, **extra, "_TYPER_COMPLETE_ARGS": "hpc-launch submit --cluster miy"},
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "miyabi" in answer


def test_completion_refuses_an_unknown_shell(env):
    r = _run(env, "completion", "tcsh")
    assert r.returncode == 2 and "use bash, zsh or fish" in r.stderr


def test_the_readme_says_how_to_get_hpc_launch_on_the_path():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert "source .venv/bin/activate" in readme or ".venv/bin/hpc-launch" in readme
    assert os.path.exists(Path(__file__).parent.parent / ".venv" / "bin" / "hpc-launch")
