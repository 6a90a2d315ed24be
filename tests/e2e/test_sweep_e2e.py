"""A ZeRO sweep on the real Slurm testbed (issue 10): stages 0-3 and ZeRO-3 with optimizer offload
as ONE job array, tracked to its end, then the report; every figure in the table, the CSV and the
charts is checked against the jobs' own log lines. Kept cheap: a tiny model, a few steps, one
node and one rank per point."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from e2e_support import SIDE_QUEUE, make_cli

pytestmark = [pytest.mark.scheduler, pytest.mark.sweep, pytest.mark.side]

STEPS = 6
TRAIN = (
    f"--model smallcnn --data synthetic --steps {STEPS} --micro-batch 8 --log-every 2 --no-eval --synthetic-samples 256"
)
GRID = "zero: [0, 1, 2, 3]\noffload: none\npoints:\n  - {zero: 3, offload: optimizer}\n"
STEP = re.compile(r"^\[hpc-train\] (step=.*)$", re.M)


def _from_log(text: str) -> dict:
    """What the log's own lines say, read here with plain regexes (not the code under test)."""
    lines = [dict(kv.split("=") for kv in m.group(1).split()) for m in STEP.finditer(text)]
    finished = re.findall(r"^training finished: steps=(\d+) wall_s=([\d.]+)", text, re.M)
    started = re.search(
        r"^training \S+ on \S+: world=(\d+) .*zero=(\d) offload=(\S+) precision=(\S+) micro=(\d+)", text, re.M
    )
    return {
        "configuration": (
            f"zero={started.group(2)} offload={started.group(3)} precision={started.group(4)} "
            f"micro_batch={started.group(5)}"
        ),
        "ranks": int(started.group(1)),
        "samples_per_sec": float(lines[-1]["avg_samples_per_sec"]),
        "peak_mem_gb_per_gpu": max(float(line["mem_peak_gb"]) for line in lines),
        "final_loss": float(lines[-1]["loss"]),
        "steps": int(lines[-1]["step"]),
        "step_time_s": float(finished[-1][1]) / int(finished[-1][0]),
        "series": [(float(line["step"]), float(line["loss"]), float(line["samples_per_sec"])) for line in lines],
    }


def test_a_zero_sweep_on_slurm_is_one_array_and_its_report_matches_the_logs(
    hpc_launch_bin, testbed, shared_workdir: Path
):
    from PIL import Image

    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    (shared_workdir / "grid.yaml").write_text(GRID)
    r = cli(
        "sweep",
        "--cluster",
        "tb-slurm",
        *SIDE_QUEUE,
        "--grid",
        "grid.yaml",
        "--walltime",
        "5m",
        "--name",
        "zs",
        "--out",
        "rep",
        "--train-args",
        TRAIN,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    sweep_id = r.stdout.strip().splitlines()[0]
    jobs = json.loads(cli("status", sweep_id, "--json", check=True).stdout)
    assert len(jobs) == 5 and {j["state"] for j in jobs} == {"done"}
    arrays = {j["job_id"].split("_")[0] for j in jobs}
    assert len(arrays) == 1, jobs  # one sbatch --array, task i = point i
    array = arrays.pop()
    assert [j["job_id"] for j in jobs] == [f"{array}_{i}" for i in range(5)]

    logs = {j["job_id"]: _from_log(Path(j["log_path"]).read_text()) for j in jobs}
    assert [v["configuration"] for v in logs.values()] == [
        "zero=0 offload=none precision=fp32 micro_batch=8",
        "zero=1 offload=none precision=fp32 micro_batch=8",
        "zero=2 offload=none precision=fp32 micro_batch=8",
        "zero=3 offload=none precision=fp32 micro_batch=8",
        "zero=3 offload=optimizer precision=fp32 micro_batch=8",
    ]
    rep = shared_workdir / "rep"
    rows = list(csv.DictReader((rep / "report.csv").open()))
    assert [row["job_id"] for row in rows] == list(logs)
    md = (rep / "report.md").read_text()
    for row in rows:
        want = logs[row["job_id"]]
        assert row["configuration"] == want["configuration"] and row["state"] == "done" and row["cause"] == ""
        assert (
            int(row["nodes"]) == 1
            and int(row["ranks"]) == want["ranks"] == 1
            and int(row["steps"]) == want["steps"] == STEPS
        )
        for key in ("samples_per_sec", "peak_mem_gb_per_gpu", "final_loss", "step_time_s"):
            assert float(row[key]) == pytest.approx(want[key], rel=1e-9), (row["job_id"], key)
        line = (
            f"| {want['configuration']} | 1 | 1 | {want['samples_per_sec']:.1f} | {want['peak_mem_gb_per_gpu']:.3f} | "
            f"{want['step_time_s']:.3f} | {want['final_loss']:.4f} | {STEPS} | done |  | {row['job_id']} |"
        )
        assert line in md, line
    for png, key in (("throughput.png", "samples_per_sec"), ("memory.png", "peak_mem_gb_per_gpu")):
        plotted = json.loads(Image.open(rep / png).text["Description"])["values"]
        assert plotted == pytest.approx({job: want[key] for job, want in logs.items()}), png

    # `report` on the finished array makes the same table; for one job, its steps
    again = cli("report", array, "--out", "again", timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (shared_workdir / "again" / "report.csv").read_text() == (rep / "report.csv").read_text()
    one = cli("report", jobs[4]["job_id"], "--out", "one", timeout=120)
    assert one.returncode == 0, one.stderr[-2000:]
    series = json.loads(Image.open(shared_workdir / "one" / "steps.png").text["Description"])
    want = logs[jobs[4]["job_id"]]["series"]
    assert series["loss"] == [[s, loss] for s, loss, _ in want]
    assert series["samples_per_sec"] == [[s, sps] for s, _, sps in want]
