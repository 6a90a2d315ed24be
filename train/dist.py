"""Find this process's rank/world from whichever launcher started it, then start torch.distributed.

One table, CONVENTIONS, says which variables each launcher sets (read from the launchers' own
documentation and source, named in each entry); the first whose marker variable is present wins.
We map these ourselves instead of relying on DeepSpeed's MPI discovery, which needs mpi4py.
Where a launcher sets no world size (PMIx and PALS under a plain mpiexec), the job script's
$HPC_LAUNCH_WORLD_SIZE gives it; a process that cannot learn the world size never guesses 1
when the job asked for more (train/preflight.py then refuses a world that differs from the plan).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Mapping, Optional, Tuple

from hpc_launch import protocol

from . import ds_startup
from .errors import PreflightError
from .rank_info import RankInfo

__all__ = ["PreflightError", "RankInfo", "discover", "export_env", "init_distributed"]


@dataclass(frozen=True)
class Convention:
    """The variables one launcher sets in each rank (any of the names, first wins)."""

    name: str
    marker: str  # present only under this launcher
    rank: Tuple[str, ...]
    world: Tuple[str, ...]  # empty: the launcher sets none (the job script's count is used)
    local_rank: Tuple[str, ...]
    local_size: Tuple[str, ...]
    source: str
    requires: Tuple[str, ...] = ()  # also needed for the marker to count


CONVENTIONS: Tuple[Convention, ...] = (
    Convention(
        "torch",
        "RANK",
        ("RANK",),
        ("WORLD_SIZE",),
        ("LOCAL_RANK",),
        ("LOCAL_WORLD_SIZE", "LOCAL_SIZE"),
        "torchrun (torch/distributed/elastic/agent/server/api.py: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE); "
        "DeepSpeed's launcher (deepspeed/launcher/launch.py: RANK, "
        "LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE); our job scripts",
    ),
    Convention(
        "openmpi",
        "OMPI_COMM_WORLD_RANK",
        ("OMPI_COMM_WORLD_RANK",),
        ("OMPI_COMM_WORLD_SIZE",),
        ("OMPI_COMM_WORLD_LOCAL_RANK",),
        ("OMPI_COMM_WORLD_LOCAL_SIZE",),
        "Open MPI, 'Environment variables set for MPI applications' (docs.open-mpi.org, tuning-apps/environment-var)",
    ),
    Convention(
        "pmi",
        "PMI_RANK",
        ("PMI_RANK",),
        ("PMI_SIZE",),
        ("PMI_LOCAL_RANK", "PALS_LOCAL_RANKID", "MPI_LOCALRANKID"),
        ("PMI_LOCAL_SIZE", "PALS_LOCAL_SIZE", "MPI_LOCALNRANKS"),
        "MPICH Hydra (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS); Cray PALS with PMI "
        "(PMI_LOCAL_RANK/PMI_LOCAL_SIZE, ALCF's Polaris examples)",
    ),
    Convention(
        "pmix",
        "PMIX_RANK",
        ("PMIX_RANK",),
        ("PMI_SIZE",),
        ("PALS_LOCAL_RANKID", "PMIX_LOCAL_RANK"),
        ("PALS_LOCAL_SIZE", "PMIX_LOCAL_SIZE"),
        "PMIx under PALS mpiexec (Aurora: ALCF's examples read PMIX_RANK and PALS_LOCAL_RANKID; no world size is set, "
        "users' Aurora scripts say `PALS_SIZE is never set by mpiexec on Aurora`)",
    ),
    Convention(
        "pals",
        "PALS_RANKID",
        ("PALS_RANKID",),
        (),
        ("PALS_LOCAL_RANKID",),
        ("PALS_LOCAL_SIZE",),
        "HPE Cray PALS (PALS_RANKID, PALS_LOCAL_RANKID, PALS_LOCAL_SIZE; no world size)",
    ),
    Convention(
        "slurm",
        "SLURM_PROCID",
        ("SLURM_PROCID",),
        ("SLURM_NTASKS",),
        ("SLURM_LOCALID",),
        (),
        "Slurm srun (sbatch/srun man pages: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE); "
        "inside a step only: the batch script itself is not a rank",
        requires=("SLURM_STEP_ID",),
    ),
)


def _first(env: Mapping[str, str], names: Tuple[str, ...]) -> Optional[str]:
    for name in names:
        if env.get(name) not in (None, ""):
            return env[name]
    return None


def _int(value: Optional[str], name: str, source: str) -> Optional[int]:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise PreflightError(f"the launcher ({source}) set {name}={value!r}, which is not a number") from None


def convention_of(env: Mapping[str, str]) -> Optional[Convention]:
    for conv in CONVENTIONS:
        if env.get(conv.marker) not in (None, "") and all(env.get(k) not in (None, "") for k in conv.requires):
            return conv
    return None


def discover(env: Mapping[str, str] = os.environ) -> RankInfo:
    """Rank, world size and local rank from the launcher's environment variables.

    Refuses (PreflightError) a world size that differs from the job's $HPC_LAUNCH_WORLD_SIZE, and
    a process that found no rank variables in a job that asked for more than one rank."""
    asked = _int(env.get(protocol.ENV_WORLD_SIZE) or None, protocol.ENV_WORLD_SIZE, "the job script")
    conv = convention_of(env)
    if conv is None:
        if asked and asked > 1:
            raise PreflightError(
                f"this process found no launcher's rank variables (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, "
                f"PALS_RANKID, SLURM_PROCID) but the job asked for {asked} ranks",
                hint="the launcher started plain copies: check the profile's launch.launcher",
            )
        return RankInfo(0, 1, 0, 1, "single")
    rank = _int(_first(env, conv.rank), conv.rank[0], conv.name)
    world = _int(_first(env, conv.world), conv.world[0] if conv.world else "", conv.name)
    if world is None:
        if asked is None:
            raise PreflightError(
                f"the launcher ({conv.name}) sets no world size and the job script passed none "
                f"({protocol.ENV_WORLD_SIZE})",
                hint=f"export {protocol.ENV_WORLD_SIZE}=RANKS before the launcher",
            )
        world = asked
    elif asked is not None and world != asked:
        raise PreflightError(
            f"the launcher ({conv.name}) started a world of {world} rank(s) but the job asked for {asked}",
            hint="check the launcher's -n/--ppn and the profile's gpus_per_node",
        )
    local_rank = _int(_first(env, conv.local_rank), "local rank", conv.name)
    local_size = _int(_first(env, conv.local_size), "local size", conv.name)
    if conv.name == "slurm" and local_size is None:
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE", "").split("(")[0].split(",")[0]
        local_size = int(per_node) if per_node.isdigit() else None
    assert rank is not None
    if not 0 <= rank < world:
        raise PreflightError(f"the launcher ({conv.name}) gave rank {rank} in a world of {world}")
    return RankInfo(rank, world, local_rank or 0, local_size, conv.name)


def export_env(info: RankInfo, env=os.environ) -> None:
    """Write the torch.distributed variables DeepSpeed reads (never clobbering what the job set)."""
    env["RANK"] = str(info.rank)
    env["WORLD_SIZE"] = str(info.world_size)
    env["LOCAL_RANK"] = str(info.local_rank)
    if "MASTER_ADDR" not in env:
        all_local = info.world_size == 1 or info.local_size == info.world_size
        if not all_local:
            from .errors import TrainError

            raise TrainError(
                f"MASTER_ADDR is not set for a {info.world_size}-rank job started by {info.source}",
                hint="the job script must export MASTER_ADDR/MASTER_PORT (the first node's address)",
            )
        env["MASTER_ADDR"] = "127.0.0.1"
    env.setdefault("MASTER_PORT", "29500")
    # GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME are left exactly as the job script set them.


def default_threads(info: RankInfo, env=os.environ) -> None:
    """Threads per rank from the CPUs this rank may really use, when OMP_NUM_THREADS is unset (as
    torchrun does): on 2 cores, 2 ranks with the default thread count were ~10x slower. A rank the
    launcher bound to part of the node uses its binding; an unbound one shares the node with the
    other ranks there (never the node's total per rank: 17 threads in a 4-CPU binding on Aurora)."""
    if env.get("OMP_NUM_THREADS"):
        return
    cpus = len(os.sched_getaffinity(0))
    bound = cpus < (os.cpu_count() or cpus)
    per_node = 1 if bound else (info.local_size or min(info.world_size, cpus))
    env["OMP_NUM_THREADS"] = str(max(1, cpus // max(1, per_node)))


def init_distributed(info: RankInfo) -> None:
    """Prove the world is what was asked (train/preflight.py, unless $HPC_LAUNCH_PREFLIGHT=0),
    then start the process group with the accelerator's backend (gloo on CPU, nccl on GPU)."""
    import deepspeed
    import torch
    import torch.distributed as tdist
    from deepspeed.accelerator import get_accelerator

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    clear_stale_build_locks()
    acc = get_accelerator()
    on_cpu = acc.device_name() == "cpu"
    if on_cpu:
        ds_startup.skip_shm_comm_op()
    if not on_cpu:
        acc.set_device(info.local_rank)
    backend = acc.communication_backend_name()
    checked = os.environ.get(protocol.ENV_PREFLIGHT) != "0"
    if checked:
        from . import preflight

        store, seconds = preflight.gate(info, backend=backend)
        if store is not None:  # the process group starts on the store the gate already proved
            tdist.init_process_group(backend, store=store, rank=info.rank, world_size=info.world_size)
    deepspeed.init_distributed(
        dist_backend=backend,
        auto_mpi_discovery=False,
        verbose=False,
        distributed_port=int(os.environ["MASTER_PORT"]),
        rank=info.rank,
        world_size=info.world_size,
    )
    if checked:
        preflight.probe(info, device=acc.current_device_name(), seconds=seconds)


STALE_LOCK_S = 600.0  # an op builds in 1-3 minutes; a lock this old was left by a build that was killed


def clear_stale_build_locks(env: Mapping[str, str] = os.environ, now: Optional[float] = None) -> List[str]:
    """Remove JIT-build locks that a killed build left behind, so DeepSpeed's op load does not wait forever.

    torch.utils.cpp_extension's FileBaton waits, with no timeout and no owner check, while a `lock`
    file exists in the op's build dir: a build killed once (a cancelled job, a machine restart)
    hung every later job of the environment at "starting DeepSpeed" (seen on the testbed)."""
    import time as _time

    root = env.get("TORCH_EXTENSIONS_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "torch_extensions")
    now = _time.time() if now is None else now
    removed = []
    for dirpath, _dirs, files in os.walk(root):
        if "lock" in files:
            lock = os.path.join(dirpath, "lock")
            try:
                age = now - os.stat(lock).st_mtime
                if age > STALE_LOCK_S:
                    os.unlink(lock)
                    removed.append(lock)
                    print(
                        "[hpc-train] removed a stale DeepSpeed op build lock "
                        f"{lock} ({age / 60:.0f} min old: its build was killed)",
                        flush=True,
                    )
            except OSError:
                pass  # another rank removed it first
    return removed
