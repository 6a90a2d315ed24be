"""The job layer inside a real torch (marker `train`): a user's plain loop, unmodified, reports its
optimizer steps to the watchdog through torch's global step hook, in the rendezvous store the
watchdog reads (hpc_launch/joblayer/steps.py), and the layer imports no torch before the user does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.train

REPO = Path(__file__).resolve().parents[1]

# Rank 0 of 2 as env:// would have it: its store serves MASTER_PORT (init_process_group's, here by
# hand: no second rank), then a plain loop steps an optimizer; the store is read back at the end.
LOOP = """\
import gc, os, sys, time
import torch
print("gc young threshold at the start", gc.get_threshold()[0])
store = torch.distributed.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), 2, is_master=True,
                                   wait_for_workers=False)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range({steps}):
    opt.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    if step == 2:
        time.sleep(1.2)  # the watchdog publishes at most once a second
key = "hpc-launch/watchdog/0/0"
print("published", store.get(key).decode().split()[0] if store.check([key]) else "nothing")
print("gc young threshold after the steps", gc.get_threshold()[0])
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path: Path, steps: int, **env: str) -> subprocess.CompletedProcess:
    script = tmp_path / "loop.py"
    script.write_text(LOOP.format(steps=steps))
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI", "HPC_LAUNCH"))}
    full.update(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(_free_port()), PYTHONPATH=str(REPO), HPC_LAUNCH_HANG_S="600",
                HPC_LAUNCH_PREFLIGHT="0", **env)  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "hpc_launch.joblayer", str(script)],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_plain_loops_optimizer_steps_reach_the_watchdogs_store(tmp_path):
    r = _run(tmp_path, steps=5)
    assert r.returncode == 0, r.stderr
    assert "published 4" in r.stdout, (r.stdout, r.stderr)  # step 4 (after the pause), from the hook alone
    assert "no steps to watch" not in r.stderr
    # fewer collections while the rank starts (imports, model), Python's own from the first step on
    assert "gc young threshold at the start 50000" in r.stdout and "after the steps 700" in r.stdout, r.stdout


def test_with_the_watchdog_off_nothing_is_published(tmp_path):
    r = _run(tmp_path, steps=5, HPC_LAUNCH_WATCHDOG="0")
    assert r.returncode == 0 and "published nothing" in r.stdout, (r.stdout, r.stderr)


def test_a_users_deepspeed_on_cpu_is_set_to_build_no_shm_comm_and_to_name_any_jit_build(tmp_path):
    script = tmp_path / "ds_import.py"
    script.write_text(
        "import importlib, deepspeed\n"
        "from deepspeed.ops.op_builder.builder import OpBuilder\n"
        "ds_torch = importlib.import_module('deepspeed.comm.torch')\n"
        "print('shm skipped', getattr(ds_torch.build_shm_op, 'hpc_launch_skip', False), ds_torch.build_shm_op())\n"
        "print('jit named', getattr(OpBuilder.jit_load, 'hpc_launch_said', False))\n"
    )
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI", "HPC_LAUNCH"))}
    full["PYTHONPATH"] = str(REPO)
    r = subprocess.run(
        [sys.executable, "-m", "hpc_launch.joblayer", str(script)],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "shm skipped True None" in r.stdout and "jit named True" in r.stdout, (r.stdout, r.stderr)
