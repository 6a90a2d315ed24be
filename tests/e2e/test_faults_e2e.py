"""Faults against the real Slurm of the testbed (issue 8)."""

from __future__ import annotations

import json
import subprocess

import pytest

from e2e_support import make_cli

pytestmark = pytest.mark.scheduler

# A login node whose sbatch creates the job and then reports a timeout (seen in the wild: the
# controller answered after the client gave up). Before, hpc-launch retried: three jobs, none
# recorded, and the user was told the job was refused.
FLAKY_SBATCH = """#!/bin/bash
sbatch "$@" >/dev/null || exit $?
echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation" >&2
exit 1
"""


def test_sbatch_that_creates_the_job_then_times_out_gives_exactly_one_recorded_job(
    hpc_launch_bin, testbed, shared_workdir
):
    flaky = shared_workdir / "flaky-sbatch"
    flaky.write_text(FLAKY_SBATCH)
    flaky.chmod(0o755)
    profile = shared_workdir / "flaky.yaml"
    profile.write_text(f"name: tb-slurm-flaky\nextends: tb-slurm\ncommands: {{sbatch: {flaky}}}\n")
    (shared_workdir / "quick.py").write_text("print('ran once', flush=True)\n")
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    r = cli("submit", "--profile", profile, "--cluster", "tb-slurm-flaky", "--script", "quick.py", "--train-args", "")
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().splitlines()[-1]
    script = json.loads(cli("list", "--json", check=True).stdout)[0]
    assert script["job_id"] == job_id
    rel = script["script_path"].split(str(shared_workdir) + "/", 1)[1]
    mine = [
        line
        for line in subprocess.run(
            ["squeue", "--me", "-h", "-t", "all", "-o", "%i|%o"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        if line.endswith(rel)
    ]
    assert mine == [f"{job_id}|{rel}"], mine  # exactly one job, and it is the recorded one
    assert cli.wait_state(job_id, {"done"}, timeout=120) == "done"
