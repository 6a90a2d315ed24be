"""What `--dry-run` prints is byte for byte the script that is submitted (the time stamp aside),
whatever the form of the work dir: relative, `~`-based, or the remote default over SSH.

Real submissions: the `local` cluster starts the job on this machine, and over SSH through a
real sshd on 127.0.0.1 (tests/sshd.py).
"""

from __future__ import annotations

import re
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest

from envutil import scheduler_env_cleared
from inproc import run_cli

STAMP = re.compile(r"\d{8}-\d{6}-\d{3}")


def _env(tmp: Path, **extra):
    env = scheduler_env_cleared()
    env.update(HPC_LAUNCH_STATE_DIR=str(tmp / "state"), HPC_LAUNCH_CONFIG_DIR=str(tmp / "config"), **extra)
    return env


def _run(bin_path, args, cwd, env):
    """hpc-launch's answer, in this process (tests/inproc.py): the job it submits runs as its own."""
    return run_cli(args, env=env, cwd=cwd)


def _same_but_stamp(dry: str, submitted: str):
    assert STAMP.sub("STAMP", dry) == STAMP.sub("STAMP", submitted)


def _wait_for(path: Path, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return path.exists()


@pytest.mark.parametrize("workdir_form", ["relative", "tilde"])
def test_dry_run_is_the_submitted_script_here(hpc_launch_bin, tmp_path, workdir_form):
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    (home / "hello.py").write_text("print('hello from the job')\n")
    env = _env(tmp_path, HOME=str(home))
    workdir = "runs/a" if workdir_form == "relative" else "~/runs/a"
    # one rank: what is compared is the script, and a second rank only starts torch once more
    args = ["submit", "--cluster", "local", "-g", "1", "--script", "~/hello.py", "--workdir", workdir]
    dry = _run(hpc_launch_bin, [*args, "--dry-run"], home, env)
    assert dry.returncode == 0, dry.stderr
    real = _run(hpc_launch_bin, args, home, env)
    assert real.returncode == 0, real.stderr
    scripts = list((home / "runs" / "a" / ".hpc-launch").glob("*.sh"))
    assert len(scripts) == 1
    _same_but_stamp(dry.stdout, scripts[0].read_text())
    job_id = real.stdout.strip()
    log = home / "runs" / "a" / f"train.o{job_id}"
    assert _wait_for(Path(str(log) + ".exitcode"))
    assert "hello from the job" in log.read_text()  # `~/hello.py` was the user's file, not a literal "~"


def test_dry_run_is_the_submitted_script_over_ssh(hpc_launch_bin, tmp_path, server):
    remote = f".hpc-launch-test-{uuid.uuid4().hex[:8]}"  # relative: under the remote user's home
    env = _env(tmp_path, HPC_LAUNCH_SSH_CONFIG=str(server.ssh_config))
    (tmp_path / "mine.py").write_text("print('my own script ran')\n")  # on "the laptop" only
    args = [
        "submit",
        "--cluster",
        "local",
        "-g",
        "1",
        "--login",
        server.alias,
        "--workdir",
        remote,
        "--script",
        str(tmp_path / "mine.py"),
        "--venv",
        sys.prefix,
    ]
    dry = _run(hpc_launch_bin, [*args, "--dry-run"], tmp_path, env)
    assert dry.returncode == 0, dry.stderr
    assert f'WORKDIR="$HOME"/{remote}' in dry.stdout
    real = _run(hpc_launch_bin, args, tmp_path, env)
    try:
        assert real.returncode == 0, real.stderr
        scripts = list((Path.home() / remote / ".hpc-launch").glob("*.sh"))
        assert len(scripts) == 1
        _same_but_stamp(dry.stdout, scripts[0].read_text())
        # the script went with the job, and the job ran it
        sent = list((Path.home() / remote / ".hpc-launch" / "capsules").glob("*/code/mine.py"))
        assert len(sent) == 1 and sent[0].read_text() == "print('my own script ran')\n"
        job_id = real.stdout.strip()
        log = Path.home() / remote / f"train.o{job_id}"
        assert _wait_for(Path(str(log) + ".exitcode"), timeout=60)
        assert "my own script ran" in log.read_text()
    finally:
        shutil.rmtree(Path.home() / remote, ignore_errors=True)


def test_preparing_a_job_never_changes_the_spec_it_was_given(tmp_path):
    """Data flows one way: the pipeline works on copies (before, prepare() filled in the work dir
    and resolve() the node count on the caller's spec)."""
    from msgspec import to_builtins

    from hpc_launch.spec import JobSpec
    from hpc_launch.prepare import prepare

    spec = JobSpec(cluster="local", script="x.py", train_args=[])
    before = to_builtins(spec)  # a deep copy
    prepared = prepare(spec, cwd=str(tmp_path))
    assert to_builtins(spec) == before
    assert prepared.job.nodes == 1 and prepared.job.workdir == str(tmp_path)
