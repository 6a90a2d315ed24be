"""Sweeps and job arrays (issue 10), fast: each dialect's array ids against recorded outputs, the
rendered array script run by bash, grid expansion, up-front refusal (nothing submitted), the report
from log lines, and a local sweep cancelled as a group."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpc_launch import dialects
from hpc_launch.errors import SpecError
from hpc_launch.states import JobState
from inproc import run_cli
from pbs_fixtures import load as pbs_observed

pytestmark = pytest.mark.sweep

SCHED = Path(__file__).parent / "golden" / "sched"
REPO = Path(__file__).resolve().parent.parent


def sched(name: str) -> str:
    return (SCHED / name).read_text()


# ---- array ids, per dialect, from recorded outputs ----------------------------------------------


def test_slurm_array_ids_states_accounting_and_cancel():
    d = dialects.get("slurm")
    parent = d.parse_submit(sched("slurm_array_sbatch_parsable.txt"))  # sbatch --parsable --array=0-3
    assert d.array_flags(4) == ["--array=0-3"]
    tasks = d.array_task_ids(parent, 4)
    assert tasks == [f"{parent}_{i}" for i in range(4)]
    # pending tasks not yet split off are one squeue line, `13_[0-1,4]`: each task is in it
    held = d.parse_status(sched("slurm_array_squeue_held_throttled.txt"), ["13_0", "13_1", "13_2", "13_4"])
    assert sorted(held) == ["13_0", "13_1", "13_4"]
    assert all(i.state == JobState.QUEUED and "JobHeldUser" in i.comment for i in held.values())
    running = d.parse_status(sched("slurm_array_squeue_running.txt"), ["12_0", "12_1", "12_3"])
    assert {j: i.state for j, i in running.items()} == {
        "12_0": JobState.RUNNING,
        "12_1": JobState.RUNNING,
        "12_3": JobState.RUNNING,
    }
    ended = d.parse_status(sched("slurm_array_squeue_finished.txt"), ["12_0", "12_1", "12_3"])
    assert {j: i.state for j, i in ended.items()} == {
        "12_0": JobState.DONE,
        "12_1": JobState.FAILED,
        "12_3": JobState.FAILED,
    }
    acct = d.parse_accounting(sched("slurm_array_sacct_task.txt"), "12_2")  # the script exited with its index
    assert acct is not None and acct.state == JobState.FAILED and acct.exit_code == 2
    assert d.parse_cancel(0, "", sched("slurm_array_scancel_task.txt")).sent
    # a task's files are named by the array's id and its index, never by its own job id
    assert d.array_directives(["--job-name=s", "--output=s.o%j", "--error=e%j"]) == [
        "--job-name=s",
        "--output=s.o%A_%a",
        "--error=e%A_%a",
    ]
    assert d.job_num("12_3") == "12_3"


def test_pbs_pro_array_ids_from_a_real_server():
    d = dialects.get("pbspro")
    submitted = pbs_observed("007")  # qsub -q rt_HF -J 1-3 hello.sh
    assert "-J 1-3" in submitted.command and d.array_flags(3) == ["-J", "1-3"]
    parent = d.parse_submit(submitted.out)
    assert parent == "59[].pbshead"
    assert d.array_task_ids(parent, 3) == ["59[1].pbshead", "59[2].pbshead", "59[3].pbshead"]
    # PBS names a subjob's log NAME.oSEQ.INDEX (157: arrfail.o90.1 ...): our log name is the same
    listing = pbs_observed("157").out
    assert "arrfail.o90.2" in listing and d.job_num("90[2].pbshead") == "90.2"
    # a subjob by its id: running, finished, failed
    running = pbs_observed("040")
    sub = re.search(r"Job Id: (\S+)", running.out).group(1)
    assert d.parse_status(running.out, [sub])[sub].state == JobState.RUNNING
    for number, state in (("070", JobState.DONE), ("073", JobState.FAILED)):
        fx = pbs_observed(number)
        sub = re.search(r"Job Id: (\S+)", fx.out).group(1)
        assert re.fullmatch(r"\d+\[\d+\]\.\S+", sub)
        assert d.parse_status(fx.out, [sub])[sub].state == state, number
    cancel = pbs_observed("074")  # qdel '91[2].pbshead'
    assert d.parse_cancel(cancel.rc, cancel.out, cancel.err).sent
    with pytest.raises(Exception, match="not an array id"):
        d.array_task_ids("51", 3)  # a qsub that ignored -J (Torque-style wrappers print a bare id)


def test_grid_engine_array_ids_states_and_accounting():
    d = dialects.get("gridengine")
    parent = d.parse_submit(sched("sge_array_qsub.txt"))  # Your job-array 2.1-4:1 ("garr") has been submitted
    assert parent == "2" and d.array_flags(4) == ["-t", "1-4"]
    assert d.array_task_ids(parent, 4) == ["2.1", "2.2", "2.3", "2.4"]
    held = d.parse_status(sched("sge_array_qstat_xml_held.txt"), ["2.1", "2.4", "2.5"])
    assert sorted(held) == ["2.1", "2.4"] and all(i.state == JobState.QUEUED for i in held.values())
    running = d.parse_status(sched("sge_array_qstat_xml_running.txt"), ["1.1", "1.2", "1.3"])
    assert {i.state for i in running.values()} == {JobState.RUNNING} and len(running) == 3
    assert d.accounting_argv("1.2") == ["qacct", "-j", "1", "-t", "2"]
    acct = d.parse_accounting(sched("sge_array_qacct_task.txt"))
    assert acct.state == JobState.FAILED and acct.exit_code == 1  # task 2 exited SGE_TASK_ID - 1
    assert d.parse_cancel(0, sched("sge_array_qdel_task.txt"), "").sent
    assert d.job_num("2.3") == "2.3"  # Grid Engine's log of a task: NAME.o2.3


def test_dialects_without_arrays_say_so():
    assert not dialects.get("none").supports(dialects.Arrays) and not dialects.get("cobalt").supports(dialects.Arrays)
    assert {d.name for d in dialects.all_dialects() if d.supports(dialects.Arrays)} == {"slurm", "pbspro", "gridengine"}


# ---- the grid ---------------------------------------------------------------------------------


def test_grid_product_leaves_out_what_is_no_configuration():
    from hpc_launch import sweep as sw

    said = []
    points = sw.expand({"zero": [0, 1, 2, 3], "offload": ["none", "optimizer"]}, note=said.append)
    assert len(points) == 7 and {"zero": 0, "offload": "optimizer"} not in points
    assert said == ["left out zero=0 offload=optimizer: optimizer offload needs ZeRO 1, 2 or 3"]
    # the sweep: stages 0-3 and ZeRO-3 with offload, as a file
    points = sw.expand({"zero": [0, 1, 2, 3], "offload": ["none"]}, [{"zero": 3, "offload": "optimizer"}])
    assert [sw.label(p) for p in points] == [
        "zero=0 offload=none",
        "zero=1 offload=none",
        "zero=2 offload=none",
        "zero=3 offload=none",
        "zero=3 offload=optimizer",
    ]
    # a listed point that is no configuration is refused, not left out
    with pytest.raises(SpecError, match="point 1 .*needs ZeRO 3"):
        sw.expand({}, [{"zero": 2, "offload": "optimizer+params"}])
    # the entrypoint's flags are replaced, the other arguments kept
    args = sw.with_point(
        ["--model", "m", "--zero", "2", "--micro-batch=64", "--steps", "5"], {"zero": 3, "micro_batch": 8, "nodes": 2}
    )
    assert args == ["--model", "m", "--steps", "5", "--zero", "3", "--micro-batch", "8"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("zero: [0, 4]\n", "ZeRO stage 4 does not exist"),
        ("offload: [cpu]\n", "'cpu' is not one of none, optimizer, optimizer+params"),
        ("nodes: [0]\n", "must be at least 1"),
        ("zeros: [1]\n", "unknown key 'zeros'"),
        ("points: [{zero: 1, colour: red}]\n", "point 1: unknown key 'colour'"),
        ("- 1\n", "must be a YAML mapping"),
    ],
)
def test_bad_sweep_files_are_one_line_errors(tmp_path, hpc_launch_bin, text, message):
    grid = tmp_path / "grid.yaml"
    grid.write_text(text)
    r = run_cli(["sweep", "--grid", str(grid), "--dry-run"], cwd=tmp_path)
    assert r.returncode == 2 and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""


# ---- checked before anything exists -------------------------------------------------------------


def _nothing_submitted(workdir: Path) -> None:
    assert not (workdir / ".hpc-launch").exists()
    from hpc_launch.records import JobStore

    assert JobStore().list() == []


def test_impossible_batch_arithmetic_refuses_the_whole_sweep(tmp_path, hpc_launch_bin):
    r = run_cli(
        [
            "sweep",
            "--cluster",
            "local",
            "--zero",
            "1,2",
            "--micro-batch",
            "4,5",
            "--train-args",
            "--model smallcnn --global-batch 16",
        ],
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith(
        "hpc-launch: error: sweep point 2 (zero=1 micro_batch=5, 2 rank(s)): batch arithmetic does not fit"
    )
    assert "change --global-batch, --micro-batch or --grad-accum" in line
    _nothing_submitted(tmp_path)


def test_a_point_whose_model_states_do_not_fit_is_refused_by_plans_estimators(tmp_path, hpc_launch_bin):
    profile = tmp_path / "small.yaml"
    profile.write_text("name: smallgpu\nextends: slurm\nnode: {gpus: 4, cpus: 32, gpu_mem_gib: 0.5}\n")
    r = run_cli(
        [
            "sweep",
            "--cluster",
            "smallgpu",
            "--profile",
            str(profile),
            "--zero",
            "3,0",
            "--train-args",
            "--model resnet50 --micro-batch 8",
            "--login",
            "local",
            "--dry-run",
        ],
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    # resnet50 (25.6M params) under ZeRO-0: 20 bytes a parameter, 0.48 GiB, over 75% of 0.5 GiB; ZeRO-3 on 4 GPUs fits
    assert re.match(
        r"hpc-launch: error: sweep point 2 \(zero=0\): resnet50 under ZeRO-0 with offload none needs 0\.\d GiB per GPU",
        line,
    ), line
    assert re.search(r"\(use --zero [123] --offload none \(hpc-launch plan\)", line), line  # plan's recommendation
    assert r.stdout == ""
    _nothing_submitted(tmp_path)


# ---- the array script --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cluster, flags, var, first",
    [
        ("slurm", ["--array=0-2"], "SLURM_ARRAY_TASK_ID", 0),
        ("polaris", ["-J", "1-3"], "PBS_ARRAY_INDEX", 1),
        ("abci2", ["-t", "1-3"], "SGE_TASK_ID", 1),
    ],
)
def test_one_array_script_gives_each_task_its_point(tmp_path, cluster, flags, var, first):
    from hpc_launch import sweep as sw
    from hpc_launch.spec import JobSpec

    spec = JobSpec(
        cluster=cluster,
        group="g1",
        login="local",
        name="sw",
        train_args=["--model", "smallcnn", "--job-name", "it's a b"],
        # Polaris' default debug-scaling takes one job per user, and each array task counts (ALCF)
        queue="preemptable" if cluster == "polaris" else None,
    )
    plan = sw.plan(spec, sw.expand({"zero": [1, 2], "precision": ["fp32"]}, [{"zero": 3, "offload": "optimizer"}]))
    [sub] = plan.submissions
    assert sub.array and len(sub.points) == 3
    argv = sub.prepared.script.submit_argv
    assert argv[-1].endswith(".sh") and argv[-1 - len(flags) : -1] == flags
    text = sub.prepared.script.text
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    # the case block, run by bash: each index gets its point's arguments, quoted words intact
    start = text.index('case "${' + var)
    block = text[start : text.index("esac", start) + 4]
    for i, point in enumerate(sub.points):
        out = subprocess.run(
            ["bash", "-c", block + '\nprintf "%s\\n" "${HPC_LAUNCH_TRAIN_ARGS[@]}"'],
            env={var: str(first + i), "PATH": os.environ["PATH"]},
            capture_output=True,
            text=True,
        )
        assert out.stdout.splitlines() == point.train_args
        assert "it's a b" in out.stdout.splitlines()
    bad = subprocess.run(
        ["bash", "-c", block], env={var: "99", "PATH": os.environ["PATH"]}, capture_output=True, text=True
    )
    assert bad.returncode == 3 and "[hpc-launch] error: array task index" in bad.stderr


def test_local_sweep_is_one_job_per_point_and_different_nodes_are_separate_jobs(tmp_path):
    from hpc_launch import sweep as sw
    from hpc_launch.spec import JobSpec

    local = sw.plan(JobSpec(cluster="local", name="sw", workdir=str(tmp_path)), sw.expand({"zero": [0, 1]}))
    assert [s.array for s in local.submissions] == [False, False]
    assert "--zero 1" in " ".join(
        local.submissions[1].prepared.script.submit_argv + [local.submissions[1].prepared.script.text]
    )
    shapes = sw.plan(JobSpec(cluster="slurm", login="local", name="sw"), sw.expand({"zero": [1], "nodes": [1, 2]}))
    assert [s.array for s in shapes.submissions] == [False, False]
    assert shapes.notes and "different resources" in shapes.notes[0]


# ---- the report from log lines -------------------------------------------------------------------

LOG = (
    "[hpc-launch] job 7 on pod1 at 2026-11-23T09:33:08+0000, 2 node(s) x 1 rank(s), script sw-1.sh\n"
    "training smallcnn on synthetic: world=2 (slurm) zero=2 offload=none precision=fp32 micro=8 accum=1 global=16 "
    "steps=4 steps/epoch=256 threads/rank=1\n"
    "[hpc-train] step=2 epoch=0 loss=2.5000 lr=0.001 samples_per_sec=100.0000 avg_samples_per_sec=100.0000 "
    "mem_alloc_gb=0.3000 mem_peak_gb=0.4000 world_size=2\n"
    "[hpc-train] step=4 epoch=0 loss=2.2500 lr=0.001 samples_per_sec=120.0000 avg_samples_per_sec=110.5000 "
    "mem_alloc_gb=0.3000 mem_peak_gb=0.3500 world_size=2\n"
    "training finished: steps=4 wall_s=0.8 ended_at=1795426513\n"
)


def _record(store, tmp_path, job_id, text, state, code, **extra):
    from hpc_launch.records import JobRecord

    log = tmp_path / f"sw.o{job_id}"
    log.write_text(text)
    rec = JobRecord(
        job_id=job_id,
        cluster="local",
        dialect="none",
        host="localhost",
        name="sw",
        workdir=str(tmp_path),
        script_path=str(tmp_path / "sw-1.sh"),
        log_path=str(log),
        exit_path=str(log) + ".exitcode",
        submit_time=time.time(),
        state=state,
        exit_code=code,
        extra=extra,
    )
    store.add(rec)
    return rec


def test_report_figures_come_from_the_log_lines_and_failures_carry_doctors_cause(tmp_path, hpc_launch_bin):
    from hpc_launch.records import JobStore

    store = JobStore()
    _record(store, tmp_path, "101", LOG, "done", 0, sweep="s-1", point_index=0, point={"zero": 2})
    oom = (Path(__file__).parent / "golden" / "doctor" / "cuda-out-of-memory.log").read_text()
    _record(store, tmp_path, "102", oom, "failed", 1, sweep="s-1", point_index=1, point={"zero": 0})
    r = run_cli(["report", "s-1", "--out", str(tmp_path / "rep")], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader((tmp_path / "rep" / "report.csv").open()))
    assert [row["job_id"] for row in rows] == ["101", "102"]
    good, bad = rows
    assert good["configuration"] == "zero=2 offload=none precision=fp32 micro_batch=8"
    assert (good["nodes"], good["ranks"], good["steps"], good["state"]) == ("2", "2", "4", "done")
    assert float(good["samples_per_sec"]) == 110.5 and float(good["final_loss"]) == 2.25
    assert float(good["peak_mem_gb_per_gpu"]) == 0.4 and float(good["step_time_s"]) == pytest.approx(0.2)
    assert bad["state"] == "failed" and "out of memory" in bad["cause"].lower()
    md = (tmp_path / "rep" / "report.md").read_text()
    assert (
        "| zero=2 offload=none precision=fp32 micro_batch=8 | 2 | "
        "2 | 110.5 | 0.400 | 0.200 | 2.2500 | 4 | done |  | 101 |" in md
    )
    for png in ("throughput.png", "memory.png"):
        data = (tmp_path / "rep" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    values = json.loads(Image.open(tmp_path / "rep" / "throughput.png").text["Description"])["values"]
    assert values == {"101": 110.5, "102": None}
    # one job: its steps too
    r = run_cli(["report", "101", "--out", str(tmp_path / "one")], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    series = json.loads(Image.open(tmp_path / "one" / "steps.png").text["Description"])
    assert series == {"loss": [[2.0, 2.5], [4.0, 2.25]], "samples_per_sec": [[2.0, 100.0], [4.0, 120.0]]}


def test_without_matplotlib_the_report_says_how_to_get_the_charts(tmp_path):
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from hpc_launch import report as rp\n"
        "from hpc_launch.records import JobRecord\n"
        "rec = JobRecord('1', 'local', 'none', 'localhost', 'sw', "
        "'.', 'sw.sh', 'sw.o1', 'x', 0.0, state='done', exit_code=0)\n"
        f"print(rp.write([rp.row_for(rec, {LOG!r})], {str(tmp_path / 'rep')!r}, 't'))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path / "rep")) == ["report.csv", "report.md"]
    assert "pip install 'hpc-launch[report]'" in (tmp_path / "rep" / "report.md").read_text()


def test_the_launcher_path_never_imports_matplotlib():
    code = (
        "import sys\nfrom hpc_launch import cli, sweep, report, jobs\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'torch', 'deepspeed', 'numpy')))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "[]", r.stderr


# ---- a local sweep: one job per point, cancelled as a group -------------------------------------


# A user's launch template (templates/body/launch/deepspeed.sh.j2 overridden) whose two "ranks" are
# Python processes that wait to be cancelled: what the group's cancel must end, without two real
# trainings' torch and DeepSpeed imports (some 16 CPU-seconds) in the fast tier.
WAITING_RANKS = """
python -c 'import time; time.sleep(600)' &
python -c 'import time; time.sleep(600)' &
wait
"""


def test_a_local_sweep_is_tracked_and_cancelled_as_a_group(tmp_path, hpc_launch_bin):
    override = Path(os.environ["HPC_LAUNCH_CONFIG_DIR"]) / "templates" / "body" / "launch"
    override.mkdir(parents=True)
    (override / "deepspeed.sh.j2").write_text(WAITING_RANKS)
    r = run_cli(
        [
            "sweep",
            "--cluster",
            "local",
            "--zero",
            "0,1",
            "--no-wait",
            "--name",
            "grp",
            "--train-args",
            "--model smallcnn --data synthetic --steps 100000 --micro-batch 4 --no-eval",
        ],
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    sweep_id = r.stdout.strip().splitlines()[0]
    assert sweep_id.startswith("grp-")
    status = json.loads(run_cli(["status", sweep_id, "--json"], cwd=tmp_path).stdout)
    assert len(status) == 2 and {j["state"] for j in status} == {"running"}
    c = run_cli(["cancel", sweep_id], cwd=tmp_path)
    assert c.returncode == 0, c.stderr
    assert c.stderr.count(": cancelled") == 2, c.stderr
    status = json.loads(run_cli(["status", sweep_id, "--json"], cwd=tmp_path).stdout)
    assert {j["state"] for j in status} == {"cancelled"}
    # followed as a group: every job's end, exit 1 since not all ended done
    f = subprocess.run(  # its own process: the follow loop writes to the stderr it was imported with
        [hpc_launch_bin, "logs", "-f", sweep_id], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert f.returncode == 1 and f.stderr.count(" cancelled") == 2 and "2 of 2 ended" in f.stderr, f.stderr
    one = run_cli(["logs", sweep_id], cwd=tmp_path)
    assert one.returncode == 2 and "is a sweep or job array of 2 jobs" in one.stderr
    deadline = time.monotonic() + 20
    while (
        any(
            subprocess.run(["ps", "--sid", j["job_id"], "-o", "args="], capture_output=True, text=True).stdout.count(
                "python"
            )
            for j in status
        )
        and time.monotonic() < deadline
    ):
        time.sleep(0.5)
    for job in status:  # no training process of either job is left
        assert (
            "python"
            not in subprocess.run(["ps", "--sid", job["job_id"], "-o", "args="], capture_output=True, text=True).stdout
        )


@pytest.mark.train  # the points' checks before submitting import torch
def test_a_local_sweep_runs_its_points_one_after_another(tmp_path, hpc_launch_bin):
    """No scheduler places local points: run together they would share two cores and halve each
    other's samples/s in the report. Each point starts only after the one before it ended. The
    points run tests/test_tune.py's stand-in trainer (a user's launch template): the order of the
    jobs is the sweep's, whatever trains in them (two DeepSpeed start-ups cost 20 s here)."""
    from test_tune import FAKE_LAUNCH

    override = Path(os.environ["HPC_LAUNCH_CONFIG_DIR"]) / "templates" / "body" / "launch"
    override.mkdir(parents=True)
    (override / "deepspeed.sh.j2").write_text(FAKE_LAUNCH)
    r = run_cli(
        [
            "sweep",
            "--cluster",
            "local",
            "--zero",
            "0,1",
            "--name",
            "turn",
            "--env",
            "FAKE_SECONDS=1",  # each point lasts a second: run together, they would overlap
            "--train-args",
            "--model smallcnn --data synthetic --steps 2 --micro-batch 4 --log-every 1 --no-eval",
        ],
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "one after another" in r.stderr
    sweep_id = r.stdout.strip().splitlines()[0]
    jobs = sorted(
        json.loads(run_cli(["status", sweep_id, "--json"], cwd=tmp_path).stdout),
        key=lambda j: j["submit_time"],
    )
    assert [j["state"] for j in jobs] == ["done", "done"]
    assert jobs[1]["submit_time"] >= jobs[0]["end_time"], jobs
    assert (tmp_path / sweep_id / "report.csv").exists()


def test_a_qsub_that_makes_no_array_leaves_its_job_recorded_and_says_how_to_cancel_it(tmp_path, monkeypatch):
    """A qsub that takes `-J` but answers a plain id (Torque-style wrappers, line 80 above) has
    created one job: it is recorded, so `hpc-launch cancel` reaches it, and the error says so."""
    from hpc_launch import sweep as sw
    from hpc_launch.errors import SchedulerError
    from hpc_launch.records import JobStore
    from hpc_launch.spec import JobSpec

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "qsub").write_text("#!/bin/sh\necho 51.pbs1\n")
    (bin_dir / "qsub").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    spec = JobSpec(
        cluster="polaris",
        group="g1",
        login="local",
        name="sw",
        workdir=str(tmp_path / "w"),
        train_args=["--model", "smallcnn"],
        queue="preemptable",  # debug-scaling takes one job per user (ALCF), an array's tasks each count
    )
    plan = sw.plan(spec, sw.expand({"zero": [1, 2]}))
    assert plan.submissions[0].array
    with pytest.raises(SchedulerError) as caught:
        sw.submit(plan)
    assert "job 51.pbs1 was submitted but is not a job array" in caught.value.message
    assert "hpc-launch cancel 51.pbs1" in caught.value.hint
    [rec] = JobStore().list()
    assert rec.job_id == "51.pbs1" and rec.extra["sweep"] == plan.sweep_id and rec.state == "queued"
    assert Path(rec.script_path).exists()  # the job runs it: it stays
