"""Helpers for the `train` tests: run DeepSpeed's real launcher (2 CPU ranks over gloo) as the
`local` cluster's job script starts it.

Imported as a plain module (`from ds_launch import ...`): tests/ is not a package.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hpc_launch.metrics_line import parse_line

REPO = Path(__file__).resolve().parents[2]
# The smallest run that still shows learning: ~20k-param CNN on scikit-learn's digits.
SMALL = ["--model", "smallcnn", "--data", "digits"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env() -> dict:
    env = dict(os.environ)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS"):
        env.pop(name, None)  # each test's launcher decides these
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    # a rank that stops advancing ends the run in 90 s with the watchdog's report (stacks
    # included), not at the helper's 300-s timeout with nothing said (a test of its own sets more)
    env.setdefault("HPC_LAUNCH_HANG_S", "90")
    # CI points TORCH_EXTENSIONS_DIR at a cache shared by the run; otherwise use one per checkout:
    # checkouts at other paths compile the same JIT ops with other flags into torch's default dir
    # and keep invalidating each other's builds (~40 s each).
    env.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".ci-cache" / "torch_extensions"))
    return env


@dataclass
class Run:
    rc: int
    out: str
    port: str = ""  # the run's MASTER_PORT, which DeepSpeed's shm segment names carry
    steps: list = field(default_factory=list)  # parsed [hpc-train] lines, in order
    evals: list = field(default_factory=list)  # "[hpc-eval] ..." lines as dicts

    @property
    def losses(self):
        return [s["loss"] for s in self.steps]


def parse_run(rc: int, out: str, cmd=()) -> Run:
    cmd = list(cmd)
    port = next((m.group(1) for a in cmd if (m := re.fullmatch(r"--master_port=(\d+)", a))), "")
    run = Run(rc, out, port)
    for line in out.splitlines():
        parsed = parse_line(line) if "[hpc-train]" in line else None
        if parsed:  # metric lines only (not "[hpc-train] starting DeepSpeed ...")
            run.steps.append(parsed)
        elif line.startswith("[hpc-eval]"):
            run.evals.append(dict(kv.split("=", 1) for kv in line.split()[1:]))
    return run


def launcher_cmd(target, nprocs=2):
    """The `local` cluster's launch line (templates: `python -u -m hpc_launch.ds_launcher ...`):
    DeepSpeed's single-node launcher with the world given, as its `deepspeed` runner would hand it
    over. The runner in front of it (the tests ran `deepspeed --num_gpus N` once) is one more
    interpreter importing torch and DeepSpeed, ~1.7 CPU-s for every run, that no job runs."""
    world = base64.b64encode(json.dumps({"localhost": list(range(nprocs))}).encode()).decode()
    head = [sys.executable, "-u", "-m", "hpc_launch.ds_launcher", f"--world_info={world}"]
    return [*head, "--master_addr=127.0.0.1", f"--master_port={free_port()}", *target]


def deepspeed_cmd(args, nprocs=2):
    return launcher_cmd(["--module", "hpc_launch.train", *args], nprocs)


def launch(args, cwd, nprocs=2, timeout=300, extra_env=None) -> Run:
    """`hpc_launch.train ARGS` on N ranks, as the `local` cluster runs it."""
    cmd = deepspeed_cmd(args, nprocs)
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env={**child_env(), **(extra_env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    return parse_run(proc.returncode, proc.stdout, cmd)


def launch_and_kill(args, cwd, kill_after_step: int, timeout=300) -> Run:
    """Start a run and SIGKILL the whole job (launcher and ranks) once it logs `kill_after_step`."""
    cmd = deepspeed_cmd(args)
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            parsed = parse_line(line) if "[hpc-train]" in line else None
            if parsed and parsed.get("step", 0) >= kill_after_step:
                os.killpg(proc.pid, signal.SIGKILL)
                break
        rc = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return parse_run(rc, "".join(lines), cmd)


def shm_segments(run: Run) -> list:
    """DeepSpeed CPU all-reduce workspaces still in /dev/shm for this run's port (should be none)."""
    assert run.port
    return sorted(p.name for p in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{run.port}_*"))


def run_python(args, cwd, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
    )
