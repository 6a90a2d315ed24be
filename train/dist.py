"""Find this process's rank/world from whichever launcher started it, then start torch.distributed.

Order (first match wins): RANK/WORLD_SIZE/LOCAL_RANK (deepspeed launcher, torchrun, our job
scripts) > Open MPI (OMPI_COMM_WORLD_*) > MPICH/PALS (PMI_*) > Slurm inside an srun step
(SLURM_STEP_ID set; the batch step itself is not a rank) > a single process.
We map these ourselves instead of relying on DeepSpeed's MPI discovery, which needs mpi4py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    local_size: Optional[int]  # ranks on this node, when the launcher says
    source: str


def _first(env: Mapping[str, str], *names: str) -> Optional[str]:
    for name in names:
        if env.get(name) not in (None, ""):
            return env[name]
    return None


def discover(env: Mapping[str, str] = os.environ) -> RankInfo:
    """Rank, world size and local rank from the launcher's environment variables."""

    def info(rank, world, local, local_size, source):
        size = int(local_size) if local_size is not None else None
        return RankInfo(int(rank), int(world), int(local or 0), size, source)

    if "RANK" in env and "WORLD_SIZE" in env:
        return info(env["RANK"], env["WORLD_SIZE"], env.get("LOCAL_RANK"),
                    _first(env, "LOCAL_WORLD_SIZE", "LOCAL_SIZE"), "env")
    if "OMPI_COMM_WORLD_RANK" in env:
        return info(env["OMPI_COMM_WORLD_RANK"], env["OMPI_COMM_WORLD_SIZE"],
                    env.get("OMPI_COMM_WORLD_LOCAL_RANK"), env.get("OMPI_COMM_WORLD_LOCAL_SIZE"), "openmpi")
    if "PMI_RANK" in env and "PMI_SIZE" in env:
        return info(env["PMI_RANK"], env["PMI_SIZE"], _first(env, "PALS_LOCAL_RANKID", "MPI_LOCALRANKID"),
                    _first(env, "PALS_LOCAL_SIZE", "MPI_LOCALNRANKS"), "pmi")
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE", "").split("(")[0].split(",")[0]
        return info(env["SLURM_PROCID"], env["SLURM_NTASKS"], env.get("SLURM_LOCALID"),
                    per_node if per_node.isdigit() else None, "slurm")
    return RankInfo(0, 1, 0, 1, "single")


def export_env(info: RankInfo, env=os.environ) -> None:
    """Write the torch.distributed variables DeepSpeed reads (never clobbering what the job set)."""
    env["RANK"] = str(info.rank)
    env["WORLD_SIZE"] = str(info.world_size)
    env["LOCAL_RANK"] = str(info.local_rank)
    if "MASTER_ADDR" not in env:
        all_local = info.world_size == 1 or info.local_size == info.world_size
        if not all_local:
            from .errors import TrainError

            raise TrainError(f"MASTER_ADDR is not set for a {info.world_size}-rank job started by {info.source}",
                             hint="the job script must export MASTER_ADDR/MASTER_PORT (the first node's address)")
        env["MASTER_ADDR"] = "127.0.0.1"
    env.setdefault("MASTER_PORT", "29500")
    # GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME are left exactly as the job script set them.


def default_threads(info: RankInfo, env=os.environ) -> None:
    """Split the node's cores between its ranks when OMP_NUM_THREADS is unset (as torchrun does):
    on 2 cores, 2 ranks with the default thread count were ~10x slower."""
    if env.get("OMP_NUM_THREADS"):
        return
    per_node = info.local_size or min(info.world_size, os.cpu_count() or 1)
    env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // max(1, per_node)))


def init_distributed(info: RankInfo) -> None:
    """Start the process group with the accelerator's backend (gloo on CPU, nccl on GPU)."""
    import deepspeed
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    deepspeed.init_distributed(auto_mpi_discovery=False, verbose=False,
                               distributed_port=int(os.environ["MASTER_PORT"]),
                               rank=info.rank, world_size=info.world_size)
    from deepspeed.accelerator import get_accelerator

    acc = get_accelerator()
    if acc.device_name() != "cpu":
        acc.set_device(info.local_rank)
    else:
        release_shm_workspace(info)


def shm_workspace_name(rank: int, env: Mapping[str, str] = os.environ) -> str:
    """The POSIX shm segment DeepSpeed's CPU all-reduce op (csrc/cpu/comm/shm.cpp) creates per rank."""
    return f"/deepspeed_allreduce_buffer_{os.getuid()}_{env.get('MASTER_ADDR', '')}_{env.get('MASTER_PORT', '')}_{rank}"


def release_shm_workspace(info: RankInfo) -> None:
    """Unlink this rank's ~66 MiB shm all-reduce workspace once every rank has mapped it.

    DeepSpeed creates one segment per rank when all ranks share a node and never unlinks it, so
    every CPU run used to leave world_size x 66 MiB in /dev/shm (RAM) for good: a test suite of
    ~100 runs filled a 24 GiB machine. The mappings stay valid after the unlink; the kernel frees
    the memory when the last rank exits, however it exits.
    """
    import _posixshmem  # the module multiprocessing.shared_memory is built on

    import torch.distributed as tdist

    # Every rank's DeepSpeed init returns only after it has opened all its peers' segments,
    # so once all ranks pass this barrier no one still needs a name.
    tdist.barrier()
    try:
        _posixshmem.shm_unlink(shm_workspace_name(info.rank))
    except FileNotFoundError:
        pass  # ranks span nodes (DeepSpeed uses no shm then) or the op is not built
