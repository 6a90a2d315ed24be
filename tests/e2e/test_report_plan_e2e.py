"""The allocation plan from a REAL 1- and 2-node sweep on the Slurm testbed (issue 19): the report's
epochs, start-up, links and submit line are recomputed here from the jobs' own log lines (read with
plain regexes, not the code under test), and the submit line it prints is run by the real CLI."""

from __future__ import annotations

import csv
import json
import math
import re
import shlex
import statistics
from pathlib import Path

import pytest

from e2e_support import SIDE_QUEUE, make_cli

pytestmark = [pytest.mark.scheduler, pytest.mark.sweep, pytest.mark.side]

TRAIN = "--model smallcnn --data synthetic --steps 6 --micro-batch 8 --log-every 2 --no-eval --synthetic-samples 512"
EPOCHS = 300
LIMIT = 300  # tb-slurm's `short`: at most 5 minutes a job (the real partition's TimeLimit 5:00)


def _from_log(text: str) -> dict:
    # the prologue's t= (bash's EPOCHREALTIME) and the trainer's ended_at, both to the millisecond or finer
    started = float(re.search(r"^\[hpc-launch\] job \S+ on \S+ at \S+, .*?, t=([\d.]+),", text, re.M).group(1))
    wall, ended = re.search(r"^training finished: steps=\d+ wall_s=([\d.]+) ended_at=([\d.]+)", text, re.M).groups()
    line = re.search(r"^training \S+ on \S+: world=(\d+) .* global=(\d+) .* steps/epoch=(\d+)", text, re.M)
    sps = re.findall(r"avg_samples_per_sec=([\d.]+)", text)[-1]
    return {
        "nodes": int(re.search(r"(\d+) node\(s\) x", text).group(1)),
        "global": int(line.group(2)),
        "steps_per_epoch": int(line.group(3)),
        "sps": float(sps),
        "startup": max(0.0, float(ended) - float(wall) - started),
    }


def test_a_real_sweeps_plan_gives_the_chain_that_submit_accepts(hpc_launch_bin, testbed, shared_workdir: Path):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    r = cli(
        "sweep",
        "--cluster",
        "tb-slurm",
        "--zero",
        "2",
        "--nodes",
        "1,2",
        "--walltime",
        "5m",
        "--name",
        "pl",
        *SIDE_QUEUE,
        "--out",
        "rep",
        "--train-args",
        TRAIN,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    sweep_id = r.stdout.strip().splitlines()[0]
    jobs = json.loads(cli("status", sweep_id, "--json", check=True).stdout)
    assert {j["state"] for j in jobs} == {"done"}
    logs = [_from_log(Path(j["log_path"]).read_text()) for j in jobs]
    assert sorted(v["nodes"] for v in logs) == [1, 2]

    rep = cli("report", sweep_id, "--out", "plan", "--plan-epochs", EPOCHS, "--queue", "short", timeout=120)
    assert rep.returncode == 0, rep.stderr[-2000:]
    rows = {int(row["nodes"]): row for row in csv.DictReader((shared_workdir / "plan" / "scaling.csv").open())}
    for v in logs:
        row = rows[v["nodes"]]
        planned = EPOCHS * v["steps_per_epoch"] * v["global"]
        train_s = planned / statistics.median([w["sps"] for w in logs if w["nodes"] == v["nodes"]])
        stop = min(300, max(30, LIMIT // 10))
        links = math.ceil(train_s / (LIMIT - stop - v["startup"]))
        assert int(row["planned_samples"]) == planned
        assert float(row["startup_s"]) == pytest.approx(v["startup"], abs=1e-6)
        assert int(row["links"]) == links and row["refused"] == "", row
        assert row["charge"] == ""  # the testbed's profile names no charge unit
    md = (shared_workdir / "plan" / "report.md").read_text()
    run = re.search(r"^run: `(hpc-launch submit [^`]*) \.\.\.`", md, re.M)
    assert run, md
    argv = shlex.split(run.group(1))
    assert argv[2:8] == ["-c", "tb-slurm", "--nodes", argv[5], "--queue", "short"]
    ran = cli(*argv[1:], "--train-args", TRAIN, "--dry-run", timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    walltime = argv[argv.index("-t") + 1]
    assert f"#SBATCH --time={walltime}\n" in ran.stdout and f"#SBATCH --nodes={argv[5]}\n" in ran.stdout
