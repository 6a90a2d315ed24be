"""No scheduler ends a `local` job at its walltime, so hpc-launch does (issue 28: `-t 00:02:00`
ran past six minutes): the stop request first (the trainer's deadline), SIGTERM to every process
of the job at the walltime, SIGKILL after the grace; the job ends `timeout` and says why.
Real local jobs with a walltime of seconds."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from envutil import scheduler_env_cleared
from inproc import run_cli
from test_faults import _processes_in, _wait_until


def _submit(hpc_launch_bin, work: Path, env: dict, script: str, walltime: str) -> str:
    r = run_cli(["submit", "-c", "local", "-g", "1", "--script", script, "-t", walltime], env=env, cwd=work)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _status(hpc_launch_bin, work: Path, env: dict, job: str) -> dict:
    out = run_cli(["status", "--json", job], env=env, cwd=work)
    return json.loads(out.stdout)[0]


def _env(tmp_path: Path, **extra: str) -> dict:
    env = scheduler_env_cleared()
    env.update(HPC_LAUNCH_STATE_DIR=str(tmp_path / "state"), HPC_LAUNCH_CONFIG_DIR=str(tmp_path / "config"), **extra)
    return env


def test_a_local_job_is_ended_at_its_walltime_and_says_so(hpc_launch_bin, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "long.py").write_text("import time\nprint('ran', flush=True)\ntime.sleep(120)\n")
    env = _env(tmp_path)
    began = time.monotonic()
    job = _submit(hpc_launch_bin, work, env, "long.py", "00:00:03")
    assert _wait_until(lambda: _status(hpc_launch_bin, work, env, job)["state"] not in ("queued", "running"), 60, 0.2)
    took = time.monotonic() - began
    got = _status(hpc_launch_bin, work, env, job)
    assert got["state"] == "timeout" and got["exit_code"] == 142, got
    assert "no scheduler" in got["comment"] and "walltime" in got["comment"], got
    assert 3 <= took < 30, took
    log = (work / f"train.o{job}").read_text()
    assert "[hpc-launch] walltime 00:00:03 reached" in log, log
    summary = run_cli(["logs", "--summary", job], env=env, cwd=work).stdout
    assert "walltime 00:00:03 reached" in summary, summary
    # no scheduler here: hpc-launch, not a scheduler, ended it
    assert "hpc-launch ended it at the walltime it was given" in summary and "scheduler killed" not in summary, summary
    assert _wait_until(lambda: not _processes_in(work), 10), _processes_in(work)


# Real time that cannot be shortened (a walltime long enough for the job to start and ignore the
# SIGTERM, then the grace): out of the fast tier, into CI's `beside` lane (scheduler + beside), which
# runs tests on the local cluster beside the pods' lane. It needs no testbed.
@pytest.mark.scheduler
@pytest.mark.beside
def test_a_job_that_ignores_the_stop_is_killed_after_the_grace(hpc_launch_bin, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "stubborn.py").write_text(
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ran', flush=True)\n"
        "while True:\n    time.sleep(1)\n"
    )
    env = _env(tmp_path, HPC_LAUNCH_KILL_GRACE_S="2")
    job = _submit(hpc_launch_bin, work, env, "stubborn.py", "00:00:08")  # time to start: it must ignore the SIGTERM
    assert _wait_until(lambda: _status(hpc_launch_bin, work, env, job)["state"] not in ("queued", "running"), 60, 0.2)
    got = _status(hpc_launch_bin, work, env, job)
    assert got["state"] == "timeout" and got["exit_code"] == 142, got
    assert "SIGKILL" in (work / f"train.o{job}").read_text()
    assert _wait_until(lambda: not _processes_in(work), 10), _processes_in(work)
