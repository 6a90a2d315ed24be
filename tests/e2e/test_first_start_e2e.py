"""On the testbed's real Slurm: `submit` asks `sbatch --test-only` first, so a request Slurm refuses
queues nothing; and `where -c A,B --submit` (first to start, one copy) with two "clusters" that
are the testbed's Slurm pinned to different pods (profiles written here: tb-fs-a on pod1, tb-fs-b
on pod2), one kept busy by a blocking job, then both released in the same instant."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from e2e_support import PROFILES, make_cli

pytestmark = pytest.mark.scheduler

TRAIN = ["--train-args", "--model smallcnn --data synthetic --steps 4 --micro-batch 8 --log-every 1 --no-eval"]
TRAINED = re.compile(r"^\[hpc-train\] step=4 ", re.M)
DIRECTIVES = [
    "--job-name={name}",
    "--partition={queue}",
    "--nodes={nodes}",
    "--ntasks-per-node={procs_per_node}",
    "--time={walltime}",
    "--output={name}.o%j",
]


@pytest.fixture
def cli(hpc_launch_bin, testbed, shared_workdir, tmp_path):
    """The CLI with the testbed's profiles and three written here: one whose queues are out of
    date with the site, and the two pinned "clusters"."""
    extra = tmp_path / "profiles"
    extra.mkdir()
    (extra / "tb-slurm-stale.yaml").write_text(
        "name: tb-slurm-stale\nextends: tb-slurm\n"
        'queues: {short: {max_walltime: "01:00:00"}, gone: {max_nodes: 3}, debug: {max_nodes: 8}}\n'
    )
    # more slots per node than the testbed's Grid Engine has: plain qsub would queue it forever
    (extra / "tb-sge-stale.yaml").write_text("name: tb-sge-stale\nextends: tb-sge\nnode: {gpus: 8, cpus: 8}\n")
    for name, pod in (("tb-fs-a", "pod1"), ("tb-fs-b", "pod2")):
        lines = "".join(f'  - "{d}"\n' for d in [*DIRECTIVES, f"--nodelist={pod}"])
        (extra / f"{name}.yaml").write_text(f"name: {name}\nextends: tb-slurm\ndirectives:\n{lines}")
    c = make_cli(hpc_launch_bin, testbed, shared_workdir)
    c.env["HPC_LAUNCH_CLUSTERS_DIR"] = f"{PROFILES}{os.pathsep}{extra}"
    return c


def _squeue_names(name: str) -> list:
    out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def _blocker(nodes: str, count: int, name: str) -> str:
    """A job that holds `nodes` until cancelled (the "busy cluster")."""
    out = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "-J",
            name,
            "-N",
            str(count),
            "-w",
            nodes,
            "--exclusive",
            "-t",
            "10",
            "-o",
            "/dev/null",
        ]
        + ["--wrap", "sleep 600"],
        capture_output=True,
        text=True,
        check=True,
    )
    job = out.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout.strip()
        if state == "RUNNING":
            return job
        time.sleep(0.5)
    subprocess.run(["scancel", job])
    pytest.fail(f"the blocking job {job} on {nodes} never started (the testbed's pods are busy)")


# ---- submit checks first -------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, said",
    [
        (["-q", "gone"], "Invalid partition name specified"),
        (["-q", "short", "-t", "10m"], "Requested time limit is invalid (missing or exceeds some limit)"),
        (["-n", "5"], "Node count specification invalid"),
    ],
    ids=["no-such-partition", "over-the-partitions-time-limit", "too-many-nodes"],
)
def test_submit_refused_by_slurms_check_queues_nothing(cli, shared_workdir, args, said):
    name = f"chk{os.getpid()}{len(args)}"
    t0 = time.monotonic()
    r = cli("submit", "-c", "tb-slurm-stale", "-N", name, *args)
    took = time.monotonic() - t0
    assert r.returncode == 3 and r.stdout == "", (r.stdout, r.stderr)
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"hpc-launch: error: sbatch --test-only refused the job, so nothing was submitted: {said}")
    assert took < 30, took  # seconds, not a queue wait
    assert _squeue_names(name) == []
    assert [p for p in shared_workdir.rglob("*") if p.is_file()] == []  # nothing left where it would run
    assert cli("list").stdout.count(name) == 0


def test_a_job_that_passes_the_check_is_submitted_once(cli, shared_workdir):
    name = f"once{os.getpid()}"
    job = cli.submit("-c", "tb-slurm-stale", "-N", name, "-q", "short", "-t", "2m", *TRAIN)
    try:
        assert _squeue_names(name) in ([job], [])  # [] once it has already ended
        acct: list = []
        deadline = time.monotonic() + 20
        while not acct and time.monotonic() < deadline:  # slurmdbd records a submission within a second or so
            time.sleep(0.5)
            acct = subprocess.run(
                ["sacct", "-n", "-X", "--name", name, "-o", "JobID"], capture_output=True, text=True
            ).stdout.split()
        assert acct == [job], acct  # one job with this name, ever
    finally:
        cli("cancel", job)


@pytest.mark.beside
def test_grid_engine_check_refuses_a_job_no_queue_can_ever_take(cli, shared_workdir, testbed):
    name = f"gechk{os.getpid()}"
    sge = {"PATH": f"{testbed['HPC_TESTBED_SGE_BIN']}:{os.environ['PATH']}"}
    r = cli("submit", "-c", "tb-sge-stale", "-N", name, extra_env=sge)
    assert r.returncode == 3 and r.stdout == "", (r.stdout, r.stderr)
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("hpc-launch: error: qsub -w v refused the job, so nothing was submitted: Job ")
    assert 'cannot run in PE "smp"' in line
    qstat = subprocess.run(
        ["qstat", "-u", "*", "-xml"], capture_output=True, text=True, env={**os.environ, **sge}
    ).stdout
    assert name not in qstat
    assert [p for p in shared_workdir.rglob("*") if p.is_file()] == []


# ---- first to start, one copy ------------------------------------------------------------------


def _rows(status: str) -> dict:
    """`status GROUP`'s rows by cluster (a row's comment may name the other cluster)."""
    return {
        line.split()[1]: line
        for line in status.splitlines()
        if line.split()[1:2] and line.split()[1].startswith("tb-fs-")
    }


def _logs(workdir: Path, name: str) -> dict:
    return {p.name: p.read_text(errors="replace") for p in workdir.glob(f"{name}.o*") if p.name.count(".") == 1}


def test_the_free_cluster_trains_and_the_busy_one_is_cancelled_and_says_why(cli, shared_workdir):
    name = f"fs{os.getpid()}"
    block = _blocker("pod1", 1, f"{name}-block")  # tb-fs-a's only pod: busy
    try:
        r = cli("where", "-c", "tb-fs-a,tb-fs-b", "--submit", "-N", name, "-t", "5m", *TRAIN, timeout=300)
        assert r.returncode == 0, (r.stdout, r.stderr[-3000:])
        group = r.stdout.strip()
        assert "tb-fs-b job " in r.stderr and "started first and trains" in r.stderr
        rows = _rows(cli("status", group).stdout)
        a, (a_job, b_job) = rows["tb-fs-a"], (rows["tb-fs-a"].split()[0], rows["tb-fs-b"].split()[0])
        assert " cancelled " in a and f"cancelled (another cluster started first: tb-fs-b job {b_job})" in a, rows
        assert a_job not in _squeue_names(name)  # no longer queued
        assert not (shared_workdir / f"{name}.o{a_job}").exists()  # it never started
        assert cli.wait_state(b_job, {"done"}, timeout=240) == "done"
        logs = _logs(shared_workdir, name)
        assert [n for n, text in logs.items() if TRAINED.search(text)] == [f"{name}.o{b_job}"], logs.keys()
    finally:
        subprocess.run(["scancel", block])


def test_two_clusters_that_start_in_the_same_instant_train_once(cli, shared_workdir):
    name = f"race{os.getpid()}"
    block = _blocker("pod[1-2]", 2, f"{name}-block")  # both "clusters" busy until released together
    watcher = subprocess.Popen(
        [cli.bin, "where", "-c", "tb-fs-a,tb-fs-b", "--submit", "-N", name, "-t", "5m", *TRAIN],
        cwd=shared_workdir,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while len(_squeue_names(name)) < 2 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert len(_squeue_names(name)) == 2, "both jobs should be queued behind the blocker"
        subprocess.run(["scancel", block], check=True)  # one scheduling pass starts both
        out, err = watcher.communicate(timeout=300)
    finally:
        subprocess.run(["scancel", block])
        if watcher.poll() is None:
            watcher.kill()
    assert watcher.returncode == 0, err[-3000:]
    group = out.strip()
    rows = _rows(cli("status", group).stdout)
    jobs = {cluster: row.split()[0] for cluster, row in rows.items()}
    winner = re.search(r"(tb-fs-[ab]) job (\d+) started first and trains", err)
    assert winner, err
    loser = next(c for c in jobs if c != winner.group(1))
    assert cli.wait_state(winner.group(2), {"done"}, timeout=240) == "done"
    logs = _logs(shared_workdir, name)
    assert [n for n, text in logs.items() if TRAINED.search(text)] == [f"{name}.o{winner.group(2)}"], logs.keys()
    # both started: the loser's own log says why it did not train (the gate, not the cancel, stopped it)
    lost = logs.get(f"{name}.o{jobs[loser]}", "")
    assert f"another cluster started this training first ({winner.group(1)} job {winner.group(2)})" in lost, lost
    assert "cancelled (another cluster started first" in rows[loser], rows
