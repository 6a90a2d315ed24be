"""Bad hosts named and avoided, with real faults on the real testbed (issue 16): a pod's network
interface taken down under a running Slurm job, a pod whose sshd is killed under a PBS job with a
spare node, and Grid Engine's own host exclusion."""

from __future__ import annotations

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
        if all(states.get(p, "").startswith(("idle", "mix", "alloc")) for p in pods):
            return
        subprocess.run(["scontrol", "update", f"NodeName={','.join(pods)}", "State=RESUME"], capture_output=True)
        time.sleep(2)
    raise AssertionError(f"pods {pods} did not come back: {r.stdout}")


def _slow_start_profile(tmp: Path, base: str) -> Path:
    """The testbed profile with a pause before the hostfile step: time to break a node after the
    allocation, before the job uses it."""
    path = tmp / f"{base}-slow.yaml"
    path.write_text(f"name: {base}\nmodules: {{init: 'sleep 8', load: []}}\n")
    return path


def test_a_node_that_fails_under_a_slurm_job_is_named_and_the_next_job_avoids_it(hpc_launch_bin, testbed, shared_workdir, tmp_path):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    profile = _slow_start_profile(tmp_path, "tb-slurm")
    job = cli.submit("--cluster", "tb-slurm", "--nodes", "3", "--name", "failing", "--profile", profile, "--walltime", "5m")
    cli.wait_state(job, {"running"}, timeout=120)
    try:
        _pod("pod3", "ip", "link", "set", "eth0", "down")  # after the allocation: slurmd and sshd there are cut off
        ended = cli.wait_state(job, {"failed", "done", "cancelled", "timeout"}, timeout=240)
    finally:
        _pod("pod3", "ip", "link", "set", "eth0", "up")
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
        r = cli("submit", "--cluster", "tb-pbs", "--nodes", "2", "--spares", "1", "--name", "spares", "--follow", timeout=600)
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


def test_grid_engine_keeps_a_job_off_an_excluded_host(hpc_launch_bin, testbed, shared_workdir):
    """The testbed's Grid Engine has one exec host, this machine: excluded, the job can go nowhere
    and waits; the scheduler shows the hard host request it was given."""
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    here = socket.gethostname()
    job = cli.submit("--cluster", "tb-sge", "--exclude", here, "--name", "kept-off")
    try:
        time.sleep(8)  # several scheduling intervals
        assert cli.wait_state(job, {"queued", "running", "done", "failed"}, timeout=30) == "queued"
        qstat = str(Path(testbed["HPC_TESTBED_SGE_BIN"]) / "qstat")
        detail = subprocess.run([qstat, "-j", job], capture_output=True, text=True, env=cli.env).stdout
        assert re.search(rf"hard resource_list:.*(?:hostname|h)=!\({re.escape(here)}\)", detail), detail
    finally:
        cli("cancel", job)
