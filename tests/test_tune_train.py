"""`hpc-launch tune` with real DeepSpeed trainings on CPU (issue 32): one ZeRO stage, micro-batch
1-64, a peak-RSS cap the smallcnn crosses inside that range (its rank's peak RSS grows about 1 MB per
sample of micro-batch above some 340 MB here). One scheduler job; at most ceil(log2(63)) + 2 = 8
trials; the largest fitting micro-batch's neighbour above it went over the cap; every trial a row;
the winner's DeepSpeed config and submit line. Each trial is a DeepSpeed start-up: one stage here
(a second doubled the test's time); several stages bisected in one job are tests/test_tune.py's."""

from __future__ import annotations

import csv
import json
import math
import subprocess

import pytest

pytestmark = [pytest.mark.train, pytest.mark.sweep]

CAP_GB = 0.38


def test_tune_on_cpu_finds_the_largest_fitting_micro_batch_in_one_job(tmp_path, hpc_launch_bin):
    r = subprocess.run(
        [
            hpc_launch_bin,
            "tune",
            "-c",
            "local",
            "-g",
            "1",
            "--zero",
            "2",
            "--micro-batch",
            "1-64",
            "--mem-limit",
            str(CAP_GB),
            "-t",
            "0:40:00",
            "--train-args",
            "--model smallcnn --data synthetic --steps 2 --log-every 1 --no-eval",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=2400,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    tune_id = r.stdout.strip().splitlines()[0]
    jobs = json.loads(
        subprocess.run([hpc_launch_bin, "list", "--json"], cwd=tmp_path, capture_output=True, text=True).stdout
    )
    assert len(jobs) == 1  # every trial inside one job
    with open(tmp_path / tune_id / "report.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert all(r["configuration"].startswith("zero=2 ") for r in rows), rows
    assert 2 <= len(rows) <= math.ceil(math.log2(63)) + 2, rows
    micro = {int(r["configuration"].rsplit("=", 1)[1]): r for r in rows}
    fits = [m for m, r in micro.items() if r["state"] == "done"]
    over = [m for m, r in micro.items() if r["state"] == "oom"]
    assert fits and over, rows  # the cap falls inside the range
    for m in fits:
        assert float(micro[m]["peak_mem_gb_per_gpu"]) <= CAP_GB
    for m in over:  # an out-of-memory trial is a row with its measured peak, not a failure
        assert float(micro[m]["peak_mem_gb_per_gpu"]) > CAP_GB
    assert min(m for m in over if m > max(fits)) == max(fits) + 1  # bisected to neighbours
    cfg = json.loads((tmp_path / tune_id / "ds_config.json").read_text())
    line = next(x for x in r.stderr.splitlines() if "run the winner: " in x)
    assert f"--micro-batch {cfg['train_micro_batch_size_per_gpu']}" in line
    assert f"--zero {cfg['zero_optimization']['stage']}" in line
