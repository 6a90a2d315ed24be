"""No process of a job outlives it (issue 28), on the `local` cluster with real processes: a rank
starts a child in a process group of its own that ignores SIGTERM (cancel's signal to the job's
group never reaches it), then fails, or is cancelled. Before, the child ran on after the job had
ended `failed`/`cancelled`; the job script now ends what is left of its session as it exits."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest

from envutil import scheduler_env_cleared

pytestmark = pytest.mark.train  # DeepSpeed's launcher starts each job (torch imports: seconds on two cores)

SPAWN = """\
import subprocess, sys, time
subprocess.Popen(["bash", "-c", "trap '' TERM; exec -a {tag} sleep 600"], process_group=0)
print("spawned", flush=True)
{then}
"""


def _alive(tag: str) -> list:
    found = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if (d / "cmdline").read_bytes().split(b"\0")[0] == tag.encode():
                found.append(int(d.name))
        except OSError:
            continue
    return found


@pytest.fixture
def job(hpc_launch_bin, tmp_path):
    env = scheduler_env_cleared()
    env.update(HPC_LAUNCH_STATE_DIR=str(tmp_path / "state"), HPC_LAUNCH_CONFIG_DIR=str(tmp_path / "config"))
    tags: list = []

    def run(then: str, *extra: str):
        tag = f"hpcl-orphan-{uuid.uuid4().hex[:8]}"
        tags.append(tag)
        (tmp_path / "rank.py").write_text(SPAWN.format(tag=tag, then=then))
        argv = [hpc_launch_bin, "submit", "--cluster", "local", "--script", "rank.py", "--gpus-per-node", "1", *extra]
        r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
        return tag, r, env

    yield run, tmp_path
    for _ in range(3):  # what a failing test left never outlives the test either
        for pid in [p for tag in tags for p in _alive(tag)]:
            subprocess.run(["kill", "-KILL", str(pid)], check=False)
        time.sleep(0.5)


def test_a_failed_jobs_processes_do_not_outlive_it(job):
    run, work = job
    tag, r, _ = run("sys.exit(3)", "--follow")
    assert "failed with exit code 3" in r.stderr, r.stderr[-2000:]
    log = next(work.glob("train.o*[0-9]")).read_text()
    assert "spawned" in log and "ending the 1 process(es) of this job" in log, log[-2000:]
    assert _alive(tag) == []


def test_a_cancelled_jobs_processes_do_not_outlive_it(hpc_launch_bin, job):
    run, work = job
    tag, r, env = run("time.sleep(120)")
    job_id = r.stdout.strip().splitlines()[-1]
    log = work / f"train.o{job_id}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not _alive(tag):  # the child runs (its bash has exec'd the tagged sleep)
        time.sleep(0.3)
    assert _alive(tag), log.read_text()[-2000:] if log.exists() else "no log"
    c = subprocess.run(
        [hpc_launch_bin, "cancel", job_id], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    assert "cancelled" in c.stdout + c.stderr, c.stdout + c.stderr
    assert _alive(tag) == [], log.read_text()[-2000:]
