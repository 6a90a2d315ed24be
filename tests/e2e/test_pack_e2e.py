"""`sweep --pack` on the real Slurm testbed (issue 32): a sweep of two points as ONE sbatch job whose
report has the same rows (configuration, nodes, ranks, steps, loss, state), in the same order, as
the same sweep run as a job array of 2 tasks. Tiny trainings: smallcnn on digits, 4 steps, one rank
per point. (It was 3 x 2, then 2 x 2: each point is a DeepSpeed start-up in the packed job and one
more in the array, ~3.5 CPU-s each; the order over a product of two axes is the pack's own code,
whatever the scheduler, and tests/test_pack_train.py compares it on a 2 x 2 grid.)"""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest

from e2e_support import SIDE_QUEUE, make_cli

pytestmark = [pytest.mark.scheduler, pytest.mark.sweep, pytest.mark.side]

TRAIN = "--model smallcnn --data digits --steps 4 --log-every 2 --no-eval"
SAME = ("configuration", "nodes", "ranks", "steps", "final_loss", "state", "exit_code")


def test_a_packed_sweep_on_slurm_is_one_job_with_the_rows_of_the_array(hpc_launch_bin, testbed, shared_workdir: Path):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    common = (
        "sweep",
        "--cluster",
        "tb-slurm",
        *SIDE_QUEUE,
        "--zero",
        "1,2",
        "--train-args",
        TRAIN,
    )
    packed = cli(*common, "--pack", "--walltime", "10m", "--name", "pk", "--out", "packed", timeout=900)
    assert packed.returncode == 0, packed.stderr[-4000:]
    array = cli(*common, "--walltime", "5m", "--name", "ar", "--out", "array", timeout=900)
    assert array.returncode == 0, array.stderr[-4000:]

    pk_jobs = json.loads(cli("status", packed.stdout.split()[0], "--json", check=True).stdout)
    assert len(pk_jobs) == 1 and pk_jobs[0]["state"] == "done"
    job = pk_jobs[0]["job_id"]
    # the scheduler's own account: one job (and its steps), no array
    acct = subprocess.run(["sacct", "-n", "-X", "-j", job, "-o", "JobID"], capture_output=True, text=True, check=True)
    assert acct.stdout.split() == [job]

    def rows(folder: str) -> list:
        with open(shared_workdir / folder / "report.csv") as fh:
            return list(csv.DictReader(fh))

    pk, ar = rows("packed"), rows("array")
    assert len(pk) == len(ar) == 2 and pk[0].keys() == ar[0].keys()
    assert [{k: r[k] for k in SAME} for r in pk] == [{k: r[k] for k in SAME} for r in ar]
    assert [r["job_id"] for r in pk] == [f"{job}.p{i}" for i in range(1, 3)]
    assert all(Path(r["log"]).parent == shared_workdir for r in pk)  # beside the job's log, where the array's go
