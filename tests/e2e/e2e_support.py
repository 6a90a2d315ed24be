"""End-to-end helpers: the hpc-launch CLI as a user runs it, against the REAL testbed (testbed/up.sh)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from inproc import run_cli

REPO = Path(__file__).resolve().parents[2]
PROFILES = Path(__file__).parent / "profiles"
# The testbed's side pods (testbed/up.sh: the pods after pod3, Slurm partition `side` alone). A test
# marked `side` runs its jobs there (tb-slurm, these arguments) and names no pod: CI runs those tests
# in a lane of their own beside the pods' lane. They are the long waits (walltime deadlines, chains),
# which need no CPU but held the pods' one-at-a-time lane for minutes.
SIDE_QUEUE = ("--queue", "side")


def _testbed_env() -> dict:
    out = subprocess.run(["bash", "-c", f". {REPO}/testbed/env.sh && env -0"], capture_output=True, check=True)
    env = {}
    for item in out.stdout.split(b"\0"):
        if b"=" in item:
            k, v = item.decode().split("=", 1)
            env[k] = v
    return {k: v for k, v in env.items() if k.startswith(("HPC_TESTBED_", "SGE_"))}


class CLI:
    """Runs `hpc-launch` in a subprocess with the testbed's profiles and a chosen PATH."""

    def __init__(self, bin_path: str, env: dict, workdir: Path):
        self.bin = bin_path
        self.env = env
        self.workdir = workdir

    def __call__(self, *args, timeout=300, extra_env=None, check=False):
        env = dict(self.env, **(extra_env or {}))
        r = subprocess.run(
            [self.bin, *map(str, args)], cwd=self.workdir, env=env, capture_output=True, text=True, timeout=timeout
        )
        if check and r.returncode != 0:
            raise AssertionError(
                f"hpc-launch {' '.join(map(str, args))} -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            )
        return r

    def submit(self, *args, **kw) -> str:
        r = self("submit", *args, check=True, **kw)
        return r.stdout.strip().splitlines()[-1]

    def status_here(self, *args) -> subprocess.CompletedProcess:
        """`hpc-launch status ARGS` in this process, with the CLI's environment and directory: the
        same code and answer, without an interpreter's start-up (~0.15 CPU-s) for every poll of
        every wait; the suite is CPU-bound on two cores, and the waits poll once a second."""
        return run_cli(["status", *map(str, args)], env=self.env, cwd=self.workdir)

    def wait_state(self, job_id, states, timeout=180):
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            r = self.status_here(job_id)
            m = re.search(rf"^{re.escape(job_id)}\s+\S+\s+\S+\s+(\w+)", r.stdout, re.M)
            last = m.group(1) if m else r.stdout + r.stderr
            if last in states:
                return last
            time.sleep(1)
        raise AssertionError(f"job {job_id} never reached {states}; last: {last}")

    def wait_log(self, path: Path, needle: str, timeout=180):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if path.exists() and needle in path.read_text(errors="replace"):
                return path.read_text(errors="replace")
            time.sleep(0.5)
        raise AssertionError(
            f"{needle!r} never appeared in {path}: "
            f"{path.read_text(errors='replace')[-2000:] if path.exists() else 'no file'}"
        )


def make_cli(hpc_launch_bin: str, testbed: dict, workdir: Path, path_first: str | None = None) -> CLI:
    env = dict(os.environ)
    env.update(testbed)
    env["HPC_LAUNCH_CLUSTERS_DIR"] = str(PROFILES)
    env["HPC_LAUNCH_SSH_CONFIG"] = testbed["HPC_TESTBED_SSH_CONFIG"]
    env["HPC_LAUNCH_KNOWN_HOSTS"] = testbed["HPC_TESTBED_KNOWN_HOSTS"]
    if path_first:
        env["PATH"] = f"{path_first}:{env['PATH']}"
    return CLI(hpc_launch_bin, env, workdir)


def testbed_env() -> dict:
    return _testbed_env()


def wait_for(path: Path, pattern: str, timeout: float) -> re.Match:
    """The first match of `pattern` (re.M) in the job's log at `path`, waited for up to `timeout` s."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        m = re.search(pattern, text, re.M)
        if m:
            return m
        time.sleep(0.3)
    raise AssertionError(f"{pattern!r} not in {path} after {timeout} s:\n{text[-3000:]}")
