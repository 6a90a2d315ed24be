"""The pre-flight gate on the real testbed (issue 16): a right world passes in seconds with its
all-reduce measured; a rank claimed twice across two pods is refused at once with both named; a
pod whose fabric interface goes down after the allocation is named, remembered, and the next job
trains on the others."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from e2e_support import make_cli
from hpc_launch.records import JobStore

pytestmark = pytest.mark.scheduler

PODS = ("pod1", "pod2", "pod3")
GATE_OK = re.compile(
    r"\[hpc-launch\] preflight ok: (\d+) ranks on (\d+) hosts: .*all-reduce 4 MiB in ([\d.]+) ms "
    r"\(([\d.]+) GB/s bus, slowest (pod\d)\); gate ([\d.]+) s"
)


def _log(workdir: Path, name: str, job: str) -> str:
    return (workdir / f"{name}.o{job}").read_text()


def test_a_right_world_passes_the_gate_in_seconds_and_a_rank_claimed_twice_is_refused(
    hpc_launch_bin, testbed, shared_workdir
):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    ok = cli("submit", "--cluster", "tb-slurm", "--nodes", "3", "--name", "gated", "--follow", timeout=600)
    assert ok.returncode == 0, ok.stderr[-3000:]
    text = _log(shared_workdir, "gated", ok.stdout.split()[0])
    gate = GATE_OK.search(text)
    assert gate, text[-3000:]
    assert (gate.group(1), gate.group(2)) == ("3", "3") and float(gate.group(6)) < 10  # the bound for 3 pods

    # A RANK left in the user's environment reaches every rank through srun: all claim rank 0.
    bad = cli(
        "submit", "--cluster", "tb-slurm", "--nodes", "2", "--name", "twice", "--env", "RANK=0", "--follow", timeout=600
    )
    job = bad.stdout.split()[0]
    text = _log(shared_workdir, "twice", job)
    assert bad.returncode != 0, text[-3000:]
    assert re.search(
        r"\[hpc-launch\] preflight failed: pod\d: a rank started twice: rank 0 on pod\d and again on pod\d", text
    ), text[-3000:]
    assert "[hpc-train] step=" not in text  # nothing trained
    doctor = cli("doctor", job, "--cluster", "tb-slurm")
    assert "pre-flight gate" in doctor.stdout and "rank started twice" in doctor.stdout, doctor.stdout


@pytest.fixture
def fabric():
    """A second network for the pods, as a site's fast fabric beside its management network:
    hsn0 in each pod on a bridge of its own (10.201.0.0/24)."""

    def sh(*cmd: str, check: bool = True) -> None:
        subprocess.run(cmd, check=check, capture_output=True)

    sh("ip", "link", "add", "br-hsn", "type", "bridge")
    sh("ip", "link", "set", "br-hsn", "up")
    for i, pod in enumerate(PODS, 1):
        sh("ip", "link", "add", f"hsnh{i}", "type", "veth", "peer", "name", "hsn0", "netns", pod)
        sh("ip", "link", "set", f"hsnh{i}", "master", "br-hsn", "up")
        sh("ip", "netns", "exec", pod, "ip", "addr", "add", f"10.201.0.{10 + i}/24", "dev", "hsn0")
        sh("ip", "netns", "exec", pod, "ip", "link", "set", "hsn0", "up")
    try:
        yield
    finally:
        for i in range(1, len(PODS) + 1):
            sh("ip", "link", "del", f"hsnh{i}", check=False)
        sh("ip", "link", "del", "br-hsn", check=False)


@pytest.mark.faults
def test_a_pod_whose_fabric_goes_down_after_the_allocation_is_named_and_the_next_job_trains_without_it(
    hpc_launch_bin, testbed, shared_workdir, tmp_path, fabric
):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    # the testbed profile on the fabric, with a pause before the job uses its nodes
    profile = tmp_path / "tb-slurm-hsn.yaml"
    profile.write_text("name: tb-slurm\nnet_if: hsn0\nmodules: {init: 'sleep 8', load: []}\n")
    job = cli.submit(
        "--cluster", "tb-slurm", "--nodes", "3", "--name", "fabric", "--profile", profile, "--walltime", "5m"
    )
    cli.wait_state(job, {"running"}, timeout=120)
    subprocess.run(["ip", "netns", "exec", "pod3", "ip", "link", "set", "hsn0", "down"], check=True)
    ended = cli.wait_state(job, {"failed", "done", "cancelled", "timeout"}, timeout=240)
    text = _log(shared_workdir, "fabric", job)
    assert ended == "failed", text[-3000:]
    assert "[hpc-launch] preflight failed: pod3: interface hsn0 is down" in text, text[-3000:]
    assert "[hpc-train] step=" not in text
    assert "pod3" in {b.host for b in JobStore().bad_hosts("tb-slurm")}

    again = cli(
        "submit",
        "--cluster",
        "tb-slurm",
        "--nodes",
        "2",
        "--name",
        "onfabric",
        "--profile",
        profile,
        "--follow",
        timeout=600,
    )
    text = _log(shared_workdir, "onfabric", again.stdout.split()[0])
    assert again.returncode == 0, text[-3000:]
    assert "hosts     kept off pod3" in again.stderr
    gate = GATE_OK.search(text)
    assert gate and gate.group(5) in ("pod1", "pod2"), text[-3000:]
    # gloo's connections (GLOO_SOCKET_IFNAME=hsn0) carried the gate's all-reduce over the fabric
    assert "GLOO_SOCKET_IFNAME" not in again.stderr and "Gloo connectFullMesh failed" not in text
