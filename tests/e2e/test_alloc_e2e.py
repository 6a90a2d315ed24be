"""`hpc-launch alloc` and `run` on the real testbed, typed into a terminal as a person would (tmux
send-keys / capture-pane): two runs inside one allocation put ranks on its nodes with no second
queue wait (the scheduler shows one job), and leaving the shell ends the allocation."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from e2e_support import PROFILES

pytestmark = [pytest.mark.scheduler]

RUN_ARGS = "--model smallcnn --data synthetic --steps 2 --micro-batch 8 --log-every 1 --no-eval"


class Pane:
    """A terminal in a tmux server of its own (its own socket: the server starts with this
    test's environment, its isolated job store included). One socket per pane: the previous
    test's server may still be exiting after its kill-server (CI saw new-session fail on a
    socket named by the pid alone, when both of the test's cases ran in one lane)."""

    def __init__(self, workdir: Path):
        self.socket = f"hpc-alloc-e2e-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.workdir = workdir
        self.tmux(["new-session", "-d", "-s", "t", "-x", "200", "-y", "50", "-c", str(workdir)])

    def tmux(self, args):
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True)

    def send(self, line: str) -> None:
        self.tmux(["send-keys", "-t", "t", line, "Enter"])

    def text(self) -> str:
        return self.tmux(["capture-pane", "-p", "-J", "-t", "t", "-S", "-2000"]).stdout

    def wait(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.text())
            if m:
                return m
            time.sleep(0.5)
        raise AssertionError(f"no {pattern!r} in the terminal after {timeout:g} s:\n{self.text()[-4000:]}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def _scheduler_jobs(dialect: str, name: str) -> list:
    """The ids the scheduler lists for jobs named `name` (queued or running)."""
    if dialect == "slurm":
        out = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True).stdout
        return out.split()
    out = subprocess.run(["qstat"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines()[2:] if len(line.split()) > 2 and line.split()[2] == name]


@pytest.mark.parametrize(
    "cluster, nodes, dialect",
    [
        ("tb-slurm", 2, "slurm"),
        # the testbed's Grid Engine has one exec host (this machine): no pod, but run in the pods' lane,
        # which has room for its minute (the lane of the tests beside the pods and the unit tests ended last)
        ("tb-sge", 1, "gridengine"),
    ],
)
def test_two_runs_inside_one_allocation_and_the_allocation_ends_with_its_shell(
    testbed, shared_workdir, cluster, nodes, dialect
):
    name = f"ae{os.getpid() % 100000}"
    pane = Pane(shared_workdir)
    try:
        env = {
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "HPC_LAUNCH_STATE_DIR": os.environ["HPC_LAUNCH_STATE_DIR"],
            "HPC_LAUNCH_CONFIG_DIR": os.environ["HPC_LAUNCH_CONFIG_DIR"],
            "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", "/work/main/.cache/torch_extensions"),
            "PYTHONUNBUFFERED": "1",
        }
        pane.send("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()))
        profile = PROFILES / f"{cluster}.yaml"
        pane.send(
            f"hpc-launch alloc --profile {profile} -c {cluster} -n {nodes} -t 00:04:00 -N {name}; echo ALLOC-END-$?"
        )
        alloc_id = pane.wait(rf"allocation (\d+) on {cluster} recorded", 90).group(1)
        # the allocation's shell at its prompt (alloc's "recorded" line may come before or after it)
        pane.wait(r"(?ms)exit ends the allocation\n.*^\S*[#$](?: |$)", 30)
        for i in (1, 2):
            pane.send(f"hpc-launch run --train-args '{RUN_ARGS}'; echo RUN{i}-END-$?")
            assert pane.wait(rf"RUN{i}-END-(\d+)", 240).group(1) == "0", pane.text()[-4000:]
            assert _scheduler_jobs(dialect, name) == [alloc_id]  # no second job, no queue wait
        for i in (1, 2):
            log = (shared_workdir / f"{name}-run{i}.o{alloc_id}").read_text()
            assert "world=2" in log and "training finished: steps=2" in log
            if dialect == "slurm":  # a rank on each node of the allocation
                assert "node pod1: rank" in log and "node pod2: rank" in log, log
        listed = subprocess.run(["hpc-launch", "list"], capture_output=True, text=True, env={**os.environ, **env})
        assert f"{name}-run1" in listed.stdout and f"{name}-run2" in listed.stdout
        pane.send("exit")
        assert pane.wait(r"ALLOC-END-(\d+)", 60).group(1) == "0"
        deadline = time.monotonic() + 30
        while _scheduler_jobs(dialect, name) and time.monotonic() < deadline:
            time.sleep(1)
        assert _scheduler_jobs(dialect, name) == []  # leaving the shell gave the allocation back
        status = subprocess.run(
            ["hpc-launch", "status", alloc_id, "-c", cluster], capture_output=True, text=True, env={**os.environ, **env}
        )
        assert re.search(rf"^{alloc_id}\s+{cluster}\s+{name}\s+done", status.stdout, re.M), status.stdout
    finally:
        pane.close()
