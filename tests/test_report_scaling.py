"""The report's scaling table (issue 19): jobs of one configuration at several node counts, their
logs written as the job script and the entrypoint write them, reported by the real CLI; every
expected number is computed here from the figures put into the logs."""

from __future__ import annotations

import csv
import json
import statistics
import time
from pathlib import Path

import pytest
from inproc import run_cli

pytestmark = pytest.mark.sweep

OOM = (Path(__file__).parent / "golden" / "doctor" / "cuda-out-of-memory.log").read_text()
CONF = "zero=2 offload=none precision=fp32 micro_batch=8"
MICRO, RANKS_PER_NODE = 8, 4


def job_log(job_id: str, nodes: int, avg_sps: float, *, failed: bool = False) -> str:
    """The prologue's first line, the entrypoint's training line and its step lines (hpc_launch/train/trainer.py)."""
    world = nodes * RANKS_PER_NODE
    text = (
        f"[hpc-launch] job {job_id} on pod1 at 2026-11-23T09:33:08+0000, {nodes} node(s) x {RANKS_PER_NODE} "
        "rank(s), script sc.sh\n"
        f"training smallcnn on synthetic: world={world} (slurm) zero=2 offload=none precision=fp32 micro={MICRO} "
        f"accum=1 global={MICRO * world} steps=4 steps/epoch=256 threads/rank=1\n"
    )
    if failed:
        return text + OOM
    return text + (
        f"[hpc-train] step=2 epoch=0 loss=2.5000 lr=0.001 samples_per_sec={avg_sps * 0.9:.4f} "
        f"avg_samples_per_sec={avg_sps * 0.9:.4f} mem_alloc_gb=0.3000 mem_peak_gb=0.4000 world_size={world}\n"
        f"[hpc-train] step=4 epoch=0 loss=2.2500 lr=0.001 samples_per_sec={avg_sps:.4f} "
        f"avg_samples_per_sec={avg_sps:.4f} mem_alloc_gb=0.3000 mem_peak_gb=0.3500 world_size={world}\n"
        "training finished: steps=4 wall_s=0.8 ended_at=1795426513\n"
    )


def record(store, tmp_path, job_id: str, nodes: int, sps: float, *, failed: bool = False) -> None:
    from hpc_launch.records import JobRecord

    log = tmp_path / f"sc.o{job_id}"
    log.write_text(job_log(job_id, nodes, sps, failed=failed))
    store.add(
        JobRecord(
            job_id=job_id,
            cluster="local",
            dialect="none",
            host="localhost",
            name="sc",
            workdir=str(tmp_path),
            script_path=str(tmp_path / "sc.sh"),
            log_path=str(log),
            exit_path=str(log) + ".exitcode",
            submit_time=time.time(),
            state="failed" if failed else "done",
            exit_code=1 if failed else 0,
            extra={"sweep": "sc-1", "point": {"zero": 2, "nodes": nodes}},
        )
    )


# the measured samples/s per node count: two jobs at 1 node (a median of two), one at 2 and 4,
# two at 8 (the second failed: out of memory)
MEASURED = {1: [100.0, 104.0], 2: [196.0], 4: [360.0], 8: [480.0]}


@pytest.fixture
def jobs(tmp_path):
    from hpc_launch.records import JobStore

    store = JobStore()
    n = 200
    for nodes, speeds in MEASURED.items():
        for sps in speeds:
            n += 1
            record(store, tmp_path, str(n), nodes, sps)
    record(store, tmp_path, "299", 8, 0.0, failed=True)
    return tmp_path


def run_report(hpc_launch_bin, cwd, *args):
    return run_cli(["report", "sc-1", "--out", str(cwd / "rep"), *args], cwd=cwd)  # in-process (tests/inproc.py)


def expected(plan_samples=None, plan_steps=None):
    """Each node count's figures, computed from MEASURED as the report defines them."""
    base_n = min(MEASURED)
    base = statistics.median(MEASURED[base_n])
    out = {}
    for n, speeds in sorted(MEASURED.items()):
        sps = statistics.median(speeds)
        gb = MICRO * RANKS_PER_NODE * n
        planned = plan_samples if plan_samples is not None else (plan_steps * gb if plan_steps is not None else None)
        wall_h = planned / sps / 3600 if planned is not None else None
        out[n] = {
            "jobs": len(speeds),
            "sps": sps,
            "speedup": sps / base,
            "ideal": n / base_n,
            "eff": (sps / base) / (n / base_n),
            "gb": gb,
            "planned": planned,
            "wall_h": wall_h,
            "node_hours": wall_h * n if wall_h is not None else None,
        }
    return out


def proposed(exp, floor):
    return max(n for n, e in exp.items() if e["eff"] >= floor)


def test_scaling_table_csv_chart_and_proposal_for_a_planned_training(jobs, hpc_launch_bin):
    plan = 1_200_000 * 90
    r = run_report(hpc_launch_bin, jobs, "--plan-samples", str(plan))
    assert r.returncode == 0, r.stderr
    assert "no scaling table" not in r.stderr
    exp = expected(plan_samples=plan)
    pick = proposed(exp, 0.7)
    assert pick == 4  # the inputs are chosen so that 8 nodes falls below the 70% floor
    rows = list(csv.DictReader((jobs / "rep" / "scaling.csv").open()))
    assert [int(row["nodes"]) for row in rows] == sorted(MEASURED)
    for row in rows:
        e = exp[int(row["nodes"])]
        assert row["configuration"] == CONF
        assert int(row["jobs"]) == e["jobs"] and int(row["global_batch"]) == e["gb"]
        assert float(row["samples_per_sec"]) == e["sps"]
        assert float(row["speedup"]) == e["speedup"] and float(row["ideal_speedup"]) == e["ideal"]
        assert float(row["efficiency"]) == e["eff"]
        assert int(row["planned_samples"]) == plan
        assert float(row["wall_h"]) == e["wall_h"] and float(row["node_hours"]) == e["node_hours"]
        assert row["proposed"] == str(int(row["nodes"]) == pick)
    md = (jobs / "rep" / "report.md").read_text()
    scaling = md[md.index("## Scaling") :]
    for n, e in exp.items():
        mark = " **(proposed)**" if n == pick else ""
        assert (
            f"| {n}{mark} | {e['jobs']} | {e['sps']:.1f} | {e['speedup']:.2f} | {e['ideal']:.2f} | {e['eff']:.0%} | "
            f"{e['gb']} | {plan} | {e['wall_h']:.2f} | {e['node_hours']:.1f} |" in scaling
        )
    cheap = min((n for n in exp if exp[n]["eff"] >= 0.7), key=lambda n: exp[n]["node_hours"])
    premium = exp[pick]["node_hours"] / exp[cheap]["node_hours"] - 1
    assert (
        f"propose {pick} node(s): the most nodes measured at >= 70% parallel efficiency "
        f"({exp[pick]['eff']:.0%}, {exp[pick]['speedup']:.2f}x the samples/s of 1 node(s)); "
        f"{exp[pick]['wall_h']:.2f} h wall, {exp[pick]['node_hours']:.1f} node-hours "
        f"({premium:+.0%} over the cheapest, {cheap} node(s): {exp[cheap]['node_hours']:.1f} node-hours); "
        f"8 node(s) fall to {exp[8]['eff']:.0%}." in scaling
    )
    # the failed job is left out of the medians, with doctor's cause
    excluded = next(line for line in scaling.splitlines() if line.startswith("- excluded: job 299"))
    assert "8 node(s), failed" in excluded and "out of memory" in excluded.lower()
    assert "![scaling](scaling.png)" in md
    from PIL import Image

    png = Image.open(jobs / "rep" / "scaling.png")
    assert png.format == "PNG" and png.size[0] > 100
    plotted = json.loads(png.text["Description"])[CONF]
    assert plotted["speedup"] == [[n, exp[n]["speedup"]] for n in sorted(exp)]
    assert plotted["ideal"] == [[n, exp[n]["ideal"]] for n in sorted(exp)]
    assert plotted["proposed"] == pick  # the starred point


def test_plan_steps_use_each_node_counts_global_batch_and_the_floor_moves_the_proposal(jobs, hpc_launch_bin):
    steps, floor = 5000, 0.95
    r = run_report(hpc_launch_bin, jobs, "--plan-steps", str(steps), "--min-efficiency", str(floor))
    assert r.returncode == 0, r.stderr
    exp = expected(plan_steps=steps)
    pick = proposed(exp, floor)
    assert pick == 2  # 4 nodes' efficiency is under 95%
    rows = {int(row["nodes"]): row for row in csv.DictReader((jobs / "rep" / "scaling.csv").open())}
    for n, e in exp.items():
        assert int(rows[n]["planned_samples"]) == steps * e["gb"]
        assert float(rows[n]["wall_h"]) == e["wall_h"] and float(rows[n]["node_hours"]) == e["node_hours"]
        assert rows[n]["proposed"] == str(n == pick)
    md = (jobs / "rep" / "report.md").read_text()
    assert f"propose {pick} node(s): the most nodes measured at >= {floor:.0%} parallel efficiency" in md


def test_without_a_plan_the_table_has_no_wall_time_and_says_how_to_get_it(jobs, hpc_launch_bin):
    r = run_report(hpc_launch_bin, jobs)
    assert r.returncode == 0, r.stderr
    exp = expected()
    rows = list(csv.DictReader((jobs / "rep" / "scaling.csv").open()))
    assert all(row["wall_h"] == "" and row["node_hours"] == "" and row["planned_samples"] == "" for row in rows)
    md = (jobs / "rep" / "report.md").read_text()
    assert f"| 1 | 2 | {exp[1]['sps']:.1f} | 1.00 | 1.00 | 100% | {exp[1]['gb']} | - | - | - |" in md
    assert "`--plan-samples N`, `--plan-steps N` or `--plan-epochs N` adds wall time and node-hours" in md


def test_a_single_node_count_gives_no_scaling_section_and_says_why_on_stderr(tmp_path, hpc_launch_bin):
    from hpc_launch.records import JobStore

    store = JobStore()
    record(store, tmp_path, "301", 2, 150.0)
    record(store, tmp_path, "302", 2, 154.0)
    record(store, tmp_path, "303", 4, 0.0, failed=True)  # the only other node count failed
    r = run_report(hpc_launch_bin, tmp_path, "--plan-samples", "1000")
    assert r.returncode == 0, r.stderr
    why = [line for line in r.stderr.splitlines() if "no scaling table" in line]
    assert why == [
        "hpc-launch: no scaling table: every measured job ran on 2 node(s) (report jobs of one configuration "
        "run at several node counts (hpc-launch sweep --nodes 1,2,4,8))"
    ]
    assert "## Scaling" not in (tmp_path / "rep" / "report.md").read_text()
    assert not (tmp_path / "rep" / "scaling.csv").exists() and not (tmp_path / "rep" / "scaling.png").exists()


@pytest.mark.parametrize(
    "args, fix",
    [
        (["--plan-samples", "10", "--plan-steps", "5"], "not both"),
        (["--min-efficiency", "0"], "(0, 1]"),
        (["--min-efficiency", "1.5"], "(0, 1]"),
        (["--plan-samples", "0"], "x>=1"),
    ],
)
def test_bad_plan_options_are_one_line_and_write_nothing(jobs, hpc_launch_bin, args, fix):
    r = run_report(hpc_launch_bin, jobs, *args)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and fix in r.stderr
    assert not (jobs / "rep").exists()
