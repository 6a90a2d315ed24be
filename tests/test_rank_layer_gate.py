"""The pre-flight gate before a user's script (hpc_launch/joblayer/gate.py), on 2 real ranks of
one machine (marker `train`: torch and a gloo process group): the entrypoint's checks and wording,
nothing of the user's code run on failure, and the user's own env:// `init_process_group` sharing
the gate's store afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

pytestmark = pytest.mark.train

REPO = Path(__file__).resolve().parents[1]

# An unmodified env:// script: its rank 0 serves MASTER_PORT itself, where the gate's store already is.
SCRIPT = """\
import torch, torch.distributed as dist
print("user code ran", flush=True)
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print("rank", dist.get_rank(), "sum", t.item(), flush=True)
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_ranks(tmp_path: Path, text: str = SCRIPT, **env: str) -> List[Tuple[int, str]]:
    script = tmp_path / "mine.py"
    script.write_text(text)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI", "HPC_LAUNCH"))}
    base.update(WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                PYTHONPATH=str(REPO), OMP_NUM_THREADS="1",
                HPC_LAUNCH_VERDICT=str(tmp_path / "verdict"), **env)  # fmt: skip
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "hpc_launch.joblayer", str(script)],
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in (0, 1)
    ]
    return [(p.wait(timeout=180), p.stdout.read()) for p in procs if p.stdout is not None]


def test_a_right_world_passes_the_gate_and_the_users_env_init_shares_its_store(tmp_path):
    (code0, out0), (code1, out1) = _two_ranks(tmp_path, HPC_LAUNCH_RANKS_PER_NODE="2")
    assert (code0, code1) == (0, 0), (out0, out1)
    assert "[hpc-launch] preflight ok: 2 ranks on 1 host: ranks, threads, devices and interfaces as planned" in out0
    assert out0.index("preflight ok") < out0.index("user code ran")
    assert "rank 0 sum 3.0" in out0 and "rank 1 sum 3.0" in out1


def test_a_world_unlike_the_plan_stops_before_the_users_code_with_the_entrypoints_words(tmp_path):
    (code0, out0), (code1, out1) = _two_ranks(tmp_path, HPC_LAUNCH_RANKS_PER_NODE="3")
    assert (code0, code1) == (78, 78), (out0, out1)
    assert "[hpc-launch] preflight failed: " in out0
    assert "2 rank(s) (0, 1) on this host, the job planned 3 per node; fix: check the launcher's per-node count" in out0
    assert "error: the job is not what was asked on" in out0
    assert "user code ran" not in out0 + out1
    assert (tmp_path / "verdict").read_text().strip() == "78"


def test_with_the_gate_off_the_same_world_runs_the_users_code(tmp_path):
    (code0, out0), (code1, out1) = _two_ranks(tmp_path, HPC_LAUNCH_RANKS_PER_NODE="3", HPC_LAUNCH_PREFLIGHT="0")
    assert (code0, code1) == (0, 0), (out0, out1)
    assert "preflight" not in out0 and "rank 0 sum 3.0" in out0


# A script that starts the shipped entrypoint's process group itself (as CI's container test does):
# the world was proven once for this rank, and a second gate found rank 0 "started twice".
ENTRY_SCRIPT = """\
from hpc_launch.train import dist
info = dist.discover()
dist.default_threads(info)
dist.export_env(info)
dist.init_distributed(info)
import torch.distributed as d
print("entrypoint group", d.get_rank(), d.get_world_size(), flush=True)
"""


def test_a_script_that_starts_the_entrypoints_group_passes_one_gate_not_two(tmp_path):
    (code0, out0), (code1, out1) = _two_ranks(tmp_path, ENTRY_SCRIPT, HPC_LAUNCH_RANKS_PER_NODE="2")
    assert (code0, code1) == (0, 0), (out0, out1)
    assert out0.count("preflight ok") == 1 and "started twice" not in out0 + out1
    assert "entrypoint group 0 2" in out0 and "entrypoint group 1 2" in out1
