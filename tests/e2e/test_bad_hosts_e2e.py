"""Bad hosts named and avoided, with real faults on the real testbed (issue 16): a pod's network
interface taken down under a running Slurm job, a pod whose sshd is killed under a PBS job with a
spare node, and Grid Engine's own host exclusion."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from e2e_support import REPO, make_cli
from hpc_launch.records import JobStore

pytestmark = [pytest.mark.scheduler, pytest.mark.faults]


def _pod(pod: str, *cmd: str) -> None:
    subprocess.run(["ip", "netns", "exec", pod, *cmd], check=True)


def _restore_testbed() -> None:
    """testbed/up.sh starts whatever is missing (an sshd, a slurmd) and leaves the rest running."""
    subprocess.run(["bash", str(REPO / "testbed" / "up.sh")], capture_output=True, check=False, timeout=300)


def _wait_nodes_idle(pods, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t", "-n", ",".join(pods)], capture_output=True, text=True)
        states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
        # `idle*`: resumed but its slurmd does not answer yet
        if all(states.get(p, "").startswith(("idle", "mix", "alloc")) and "*" not in states[p] for p in pods):
            return
        subprocess.run(["scontrol", "update", f"NodeName={','.join(pods)}", "State=RESUME"], capture_output=True)
        time.sleep(2)
    raise AssertionError(f"pods {pods} did not come back: {r.stdout}")


def _held_start_profile(tmp: Path, base: str, flag: Path) -> Path:
    """The testbed profile whose job waits for `flag` before its hostfile step: the test breaks a
    node after the allocation, before the job uses it, then lets it go on (a fixed pause was 8 s)."""
    path = tmp / f"{base}-held.yaml"
    wait = f"for i in $(seq 300); do [ -e {flag} ] && break; sleep 0.2; done"
    path.write_text(f"name: {base}\nmodules: {{init: {json.dumps(wait)}, load: []}}\n")
    return path


def test_a_node_that_fails_under_a_slurm_job_is_named_and_the_next_job_avoids_it(
    hpc_launch_bin, testbed, shared_workdir, tmp_path
):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    flag = shared_workdir / "go-failing"
    flag.unlink(missing_ok=True)
    profile = _held_start_profile(tmp_path, "tb-slurm", flag)
    job = cli.submit(
        "--cluster", "tb-slurm", "--nodes", "3", "--name", "failing", "--profile", profile, "--walltime", "5m"
    )
    cli.wait_state(job, {"running"}, timeout=120)
    try:
        _pod("pod3", "ip", "link", "set", "eth0", "down")  # after the allocation: slurmd and sshd there are cut off
        flag.touch()
        ended = cli.wait_state(job, {"failed", "done", "cancelled", "timeout"}, timeout=240)
    finally:
        _pod("pod3", "ip", "link", "set", "eth0", "up")
        flag.unlink(missing_ok=True)
    assert ended == "failed"
    bad = {b.host: b.reason for b in JobStore().bad_hosts("tb-slurm")}
    hosts = cli("hosts", "--cluster", "tb-slurm", check=True).stdout
    _wait_nodes_idle(["pod1", "pod2", "pod3"])
    # the next job is kept off pod3 by the scheduler (--exclude), and trains to the end on the others
    r = cli("submit", "--cluster", "tb-slurm", "--nodes", "2", "--name", "avoids", "--follow", timeout=600)
    text = (shared_workdir / f"avoids.o{r.stdout.splitlines()[0].strip()}").read_text()
    assert "pod3" in bad, (bad, (shared_workdir / f"failing.o{job}").read_text()[-3000:])
    assert "pod3" in hosts and "avoiding 1 host(s)" in r.stderr and "pod3" in r.stderr, r.stderr[-2000:]
    assert r.returncode == 0, r.stderr[-3000:]
    hostfile = re.search(r"\[hpc-launch\] hostfile \S+:\n((?:\S+ slots=\d+\n)+)", text).group(1)
    assert "pod3" not in hostfile and len(hostfile.splitlines()) == 2
    assert "hosts     kept off pod3" in r.stderr  # the summary says so


def test_pbs_spares_train_on_the_pods_that_answer_when_one_pods_sshd_is_gone(hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed["HPC_TESTBED_PBS_BIN"])
    pid_file = Path(testbed["HPC_TESTBED_DIR"]) / "run" / "pod3.sshd.pid"  # testbed/lib.sh: TB_RUN
    subprocess.run(["kill", pid_file.read_text().strip()], check=True)  # pod3 stays in Slurm, but nobody can ssh there
    try:
        r = cli(
            "submit",
            "--cluster",
            "tb-pbs",
            "--nodes",
            "2",
            "--spares",
            "1",
            "--name",
            "spares",
            "--follow",
            timeout=600,
        )
    finally:
        _restore_testbed()
    assert r.returncode == 0, r.stderr[-3000:]
    job = r.stdout.splitlines()[0].strip()
    text = (shared_workdir / f"spares.o{job.split('.')[0]}").read_text()
    assert "[hpc-launch] bad host: pod3: spares check" in text
    assert re.search(r"\[hpc-launch\] spares: training on pod\d pod\d \(1 spare", text)
    assert "pod3 slots=" not in text.split("[hpc-launch] spares:")[1]
    assert [b.host for b in JobStore().bad_hosts("tb-pbs")] == ["pod3"]
    assert "hosts     training on pod" in r.stderr and "found bad: pod3 (spares check" in r.stderr  # the summary


def test_pbs_spares_replace_a_pod_whose_interface_is_down_though_it_keeps_its_address(
    hpc_launch_bin, testbed, shared_workdir, tmp_path
):
    """pod2's eth0 is taken down after the allocation, before the spares check: it keeps its
    address. The job trains on pod1 and pod3, names pod2, and the link is back up before Slurm's
    SlurmdTimeout (20 s on the testbed) would take pod2 and the job down with it."""
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed["HPC_TESTBED_PBS_BIN"])
    flag = shared_workdir / "go-spares-link"
    profile = tmp_path / "tb-pbs-held.yaml"  # the job waits for the flag before its hostfile step
    wait = f"for i in $(seq 300); do [ -e {flag} ] && break; sleep 0.2; done"
    profile.write_text(f"name: tb-pbs\nmodules: {{init: {json.dumps(wait)}, load: []}}\n")
    job = cli.submit("--cluster", "tb-pbs", "--nodes", "2", "--spares", "1", "--name", "linkdown", "--profile", profile)
    log = shared_workdir / f"linkdown.o{job.split('.')[0]}"
    cli.wait_state(job, {"running"}, timeout=120)
    try:
        _pod("pod2", "ip", "link", "set", "eth0", "down")
        held = subprocess.run(
            ["ip", "netns", "exec", "pod2", "ip", "-4", "-o", "addr", "show", "dev", "eth0"],
            capture_output=True,
            text=True,
        ).stdout
        assert " inet " in held  # the address stays with the link down
        flag.touch()
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and "[hpc-launch] spares: " not in (log.read_text() if log.exists() else ""):
            time.sleep(0.3)
    finally:
        _pod("pod2", "ip", "link", "set", "eth0", "up")
        flag.unlink(missing_ok=True)
    ended = cli.wait_state(job, {"failed", "done", "cancelled", "timeout"}, timeout=300)
    text = log.read_text()
    assert ended == "done", text[-3000:]
    assert "[hpc-launch] bad host: pod2: spares check" in text
    assert "[hpc-launch] spares: training on pod1 pod3 (1 spare" in text
    assert "pod2" in {b.host for b in JobStore().bad_hosts("tb-pbs")}
    _wait_nodes_idle(["pod1", "pod2", "pod3"])


@pytest.mark.beside
def test_grid_engine_keeps_a_job_off_an_excluded_host(hpc_launch_bin, testbed, shared_workdir):
    """The testbed's Grid Engine has one exec host, this machine: excluded, the job can go nowhere.
    `submit`'s check (`qsub -w v`) says so in seconds with the scheduler's reason; submitted without
    the check, it waits, and the scheduler shows the hard host request it was given."""
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    here = socket.gethostname()
    r = cli("submit", "--cluster", "tb-sge", "--exclude", here, "--name", "kept-off")
    [line] = r.stderr.strip().splitlines()
    assert r.returncode == 3 and r.stdout == "", r.stderr
    assert line.startswith("hpc-launch: error: qsub -w v refused the job, so nothing was submitted:"), line
    assert re.search(rf"hostname=!\({re.escape(here)}\)", line), line
    job = cli.submit("--cluster", "tb-sge", "--exclude", here, "--name", "kept-off", "--no-check")
    try:
        time.sleep(8)  # several scheduling intervals
        assert cli.wait_state(job, {"queued", "running", "done", "failed"}, timeout=30) == "queued"
        qstat = str(Path(testbed["HPC_TESTBED_SGE_BIN"]) / "qstat")
        detail = subprocess.run([qstat, "-j", job], capture_output=True, text=True, env=cli.env).stdout
        assert re.search(rf"hard resource_list:.*(?:hostname|h)=!\({re.escape(here)}\)", detail), detail
    finally:
        cli("cancel", job)


def _squeue(job: str, fmt: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job, "-o", fmt], capture_output=True, text=True).stdout.strip()


def _sacct_state(job: str) -> str:
    r = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"], capture_output=True, text=True)
    return (r.stdout.split() or [""])[-1]


def test_a_chain_link_that_finds_a_bad_node_keeps_the_next_link_off_it_with_no_launcher_running(
    hpc_launch_bin, testbed, shared_workdir
):
    """The first link's rank on pod2 is stopped (SIGSTOP): the watchdog names pod2 and ends the link,
    and the link itself, as it ends, keeps the next link off pod2. No hpc-launch command runs until
    the next link has ended (this test reads Slurm directly): a chain left alone still avoids the
    node. Without it Slurm hands the next link the same two pods (the lowest names)."""
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    _wait_nodes_idle(["pod1", "pod2", "pod3"])  # an earlier fault's pod is back
    r = cli(
        "submit",
        "--cluster",
        "tb-slurm",
        "--nodes",
        "2",
        "--name",
        "alone",
        "--walltime",
        "5m",
        "--chain",
        "2",
        "--env",
        "HPC_LAUNCH_HANG_S=10",
        "--env",
        "HPC_LAUNCH_HANG_FACTOR=2",
        "--train-args",
        "--model smallcnn --data synthetic --steps 100 --micro-batch 8 --log-every 10 --checkpoint-every 20 --no-eval",
        check=True,
    )
    first = r.stdout.split()[0]
    waiting = subprocess.run(["squeue", "-h", "-t", "PD", "-o", "%i %E"], capture_output=True, text=True).stdout
    second = next(line.split()[0] for line in waiting.splitlines() if f"afterany:{first}(" in line)
    log1, log2 = (shared_workdir / f"alone.o{job}" for job in (first, second))
    text = cli.wait_log(log1, "step=30 ", timeout=240)
    assert _squeue(first, "%N") == "pod[1-2]", _squeue(first, "%N")
    pid = int(re.search(r"^\[hpc-train\] node pod2: rank \d+ of \d+, pid (\d+)", text, re.M).group(1))
    subprocess.run(["kill", "-STOP", str(pid)], check=True)
    try:
        deadline = time.monotonic() + 400
        while (
            _sacct_state(second) not in ("COMPLETED", "FAILED", "TIMEOUT", "CANCELLED") and time.monotonic() < deadline
        ):
            time.sleep(2)
    finally:
        subprocess.run(["kill", "-CONT", str(pid)], capture_output=True)
        subprocess.run(["kill", "-KILL", str(pid)], capture_output=True)
    first_text, second_text = log1.read_text(), log2.read_text()
    assert "[hpc-launch] hang: rank 1 on pod2" in first_text, first_text[-3000:]
    assert f"[hpc-launch] next link kept off pod2: job {second}" in first_text, first_text[-3000:]
    assert _sacct_state(second) == "COMPLETED", second_text[-3000:]
    hostfile = re.search(r"\[hpc-launch\] hostfile \S+:\n((?:\S+ slots=\d+\n)+)", second_text).group(1)
    assert sorted(line.split()[0] for line in hostfile.splitlines()) == ["pod1", "pod3"]
    assert re.search(r"resumed from .*global_step(20|40|60|80) at step \d+", second_text), second_text[-3000:]
    assert "step=100 " in second_text
    # the launcher, back, tells the story: the first link hung on pod2, the second kept off it
    links = {j["job_id"]: j for j in json.loads(cli("status", "--json", first, second, check=True).stdout)}
    assert links[first]["state"] == "failed" and links[first]["exit_code"] == 124, links[first]
    assert links[second]["state"] == "done", links[second]
    assert "pod2" in {b.host for b in JobStore().bad_hosts("tb-slurm")}
    shown = cli("logs", second, "--summary", check=True)
    summary = shown.stdout + shown.stderr
    assert "kept off pod2" in summary, summary
    _wait_nodes_idle(["pod1", "pod2", "pod3"])


def test_a_node_that_dies_mid_run_is_named_and_the_requeued_job_finishes_on_the_others(
    hpc_launch_bin, testbed, shared_workdir
):
    """Every process of pod2 (its slurmd, its rank) killed mid-training: Slurm declares the node
    down, requeues the job (NODE_FAIL, JobRequeue=1) and runs it again on pod1 and pod3; the second
    run names pod2 from Slurm's own records, resumes from the checkpoint and ends done, and the log
    keeps both runs (sbatch --open-mode=append)."""
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    _wait_nodes_idle(["pod1", "pod2", "pod3"])
    job = cli.submit(
        "--cluster",
        "tb-slurm",
        "--nodes",
        "2",
        "--name",
        "nodedies",
        "--walltime",
        "5m",
        "--train-args",
        "--model smallcnn --data synthetic --steps 240 --micro-batch 8 --log-every 10 "
        "--checkpoint-every 20 --checkpoint-dir nodedies-ckpt --no-eval",
    )
    log = shared_workdir / f"nodedies.o{job}"
    cli.wait_log(log, "step=40 ", timeout=240)
    assert _squeue(job, "%N") == "pod[1-2]"
    pause = (Path(testbed["HPC_TESTBED_DIR"]) / "run" / "pod2.pause.pid").read_text().strip()
    pids = subprocess.run(["ip", "netns", "pids", "pod2"], capture_output=True, text=True, check=True).stdout.split()
    try:
        subprocess.run(["kill", "-KILL", *[p for p in pids if p != pause]], check=True)
        r = cli("logs", "-f", job, timeout=600)
    finally:
        _restore_testbed()
        _wait_nodes_idle(["pod1", "pod2", "pod3"])
    text = log.read_text()
    assert r.returncode == 0, r.stderr[-3000:]
    assert text.count("[hpc-launch] job ") == 2, text[-3000:]  # both runs, in one log
    assert f"[hpc-launch] run 2 of job {job}: Slurm requeued it" in text
    assert re.search(
        r"^\[hpc-launch\] bad host: pod2: node failure under the run before \(on pod\[1-2\]; Slurm holds it down",
        text,
        re.M,
    ), text[-3000:]
    second = text.split(f"run 2 of job {job}")[1]
    hostfile = re.search(r"\[hpc-launch\] hostfile \S+:\n((?:\S+ slots=\d+\n)+)", second).group(1)
    assert sorted(line.split()[0] for line in hostfile.splitlines()) == ["pod1", "pod3"]
    assert re.search(r"resumed from .*global_step\d+ at step \d+", second) and "step=240 " in second
    assert cli.wait_state(job, {"done", "failed"}, timeout=60) == "done"
    assert "pod2" in {b.host for b in JobStore().bad_hosts("tb-slurm")}
    assert "found bad: pod2 (node failure" in r.stderr, r.stderr[-2000:]  # the summary
