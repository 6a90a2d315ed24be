"""Find this process's rank/world from whichever launcher started it (standard library only).

One table, CONVENTIONS, says which variables each launcher sets (read from the launchers' own
documentation and source, named in each entry); the first whose marker variable is present wins.
We map these ourselves instead of relying on DeepSpeed's MPI discovery, which needs mpi4py.
Where a launcher sets no world size (PMIx and PALS under a plain mpiexec), the job script's
$HPC_LAUNCH_WORLD_SIZE gives it; a process that cannot learn the world size never guesses 1
when the job asked for more.

The one home of these names: the shipped entrypoint (hpc_launch/train/dist.py) and the job layer
(hpc_launch/joblayer/__main__.py, every rank of a `--script` job) both read them here.
"""

from __future__ import annotations

import os
from typing import Dict, Mapping, MutableMapping, NamedTuple, Optional, Tuple

from hpc_launch.protocol import ENV_WORLD_SIZE

# NamedTuples, not dataclasses: every rank imports this, and `dataclasses` costs ~5 ms of its start
DEFAULT_MASTER_PORT = "29500"  # torch.distributed's own default (torchrun, env://)


class RankError(Exception):
    """The launcher's variables say something impossible, or nothing where the job asked for ranks."""

    def __init__(self, message: str, hint: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


class RankInfo(NamedTuple):
    """Who this rank is, as its launcher said: what the start-up check (hpc_launch/train/preflight.py) and
    the watchdog read."""

    rank: int
    world_size: int
    local_rank: int
    local_size: Optional[int]  # ranks on this node, when the launcher says
    source: str


class Convention(NamedTuple):
    """The variables one launcher sets in each rank (any of the names, first wins)."""

    name: str
    marker: str  # present only under this launcher
    rank: Tuple[str, ...]
    world: Tuple[str, ...]  # empty: the launcher sets none (the job script's count is used)
    local_rank: Tuple[str, ...]
    local_size: Tuple[str, ...]
    source: str
    requires: Tuple[str, ...] = ()  # also needed for the marker to count
    node_rank: Tuple[str, ...] = ()  # the launcher's own node index, where it sets one


CONVENTIONS: Tuple[Convention, ...] = (
    Convention(
        "torch",
        "RANK",
        ("RANK",),
        ("WORLD_SIZE",),
        ("LOCAL_RANK",),
        ("LOCAL_WORLD_SIZE", "LOCAL_SIZE"),
        "torchrun (torch/distributed/elastic/agent/server/api.py: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, "
        "GROUP_RANK); DeepSpeed's launcher (deepspeed/launcher/launch.py: RANK, "
        "LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE, CROSS_RANK); our job scripts",
        node_rank=("NODE_RANK", "GROUP_RANK", "CROSS_RANK"),
    ),
    Convention(
        "openmpi",
        "OMPI_COMM_WORLD_RANK",
        ("OMPI_COMM_WORLD_RANK",),
        ("OMPI_COMM_WORLD_SIZE",),
        ("OMPI_COMM_WORLD_LOCAL_RANK",),
        ("OMPI_COMM_WORLD_LOCAL_SIZE",),
        "Open MPI, 'Environment variables set for MPI applications' (docs.open-mpi.org, tuning-apps/environment-var); "
        "its OMPI_COMM_WORLD_NODE_RANK is a rank within the node, not the node's index (seen on the testbed)",
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
        node_rank=("PALS_NODEID",),
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
        node_rank=("PALS_NODEID",),
    ),
    Convention(
        "pals",
        "PALS_RANKID",
        ("PALS_RANKID",),
        (),
        ("PALS_LOCAL_RANKID",),
        ("PALS_LOCAL_SIZE",),
        "HPE Cray PALS (PALS_RANKID, PALS_LOCAL_RANKID, PALS_LOCAL_SIZE, PALS_NODEID; no world size)",
        node_rank=("PALS_NODEID",),
    ),
    Convention(
        "slurm",
        "SLURM_PROCID",
        ("SLURM_PROCID",),
        ("SLURM_NTASKS",),
        ("SLURM_LOCALID",),
        (),
        "Slurm srun (sbatch/srun man pages: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, "
        "SLURM_STEP_TASKS_PER_NODE); inside a step only: the batch script itself is not a rank",
        requires=("SLURM_STEP_ID",),
        node_rank=("SLURM_NODEID",),
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
        raise RankError(f"the launcher ({source}) set {name}={value!r}, which is not a number") from None


def convention_of(env: Mapping[str, str]) -> Optional[Convention]:
    for conv in CONVENTIONS:
        if env.get(conv.marker) not in (None, "") and all(env.get(k) not in (None, "") for k in conv.requires):
            return conv
    return None


def discover(env: Mapping[str, str] = os.environ) -> RankInfo:
    """Rank, world size and local rank from the launcher's environment variables.

    Refuses (RankError) a world size that differs from the job's $HPC_LAUNCH_WORLD_SIZE, and a
    process that found no rank variables in a job that asked for more than one rank."""
    asked = _int(env.get(ENV_WORLD_SIZE) or None, ENV_WORLD_SIZE, "the job script")
    conv = convention_of(env)
    if conv is None:
        if asked and asked > 1:
            raise RankError(
                f"this process found no launcher's rank variables (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, "
                f"PALS_RANKID, SLURM_PROCID) but the job asked for {asked} ranks",
                hint="the launcher started plain copies: check the profile's launch.launcher",
            )
        return RankInfo(0, 1, 0, 1, "single")
    rank = _int(_first(env, conv.rank), conv.rank[0], conv.name)
    world = _int(_first(env, conv.world), conv.world[0] if conv.world else "", conv.name)
    if world is None:
        if asked is None:
            raise RankError(
                f"the launcher ({conv.name}) sets no world size and the job script passed none ({ENV_WORLD_SIZE})",
                hint=f"export {ENV_WORLD_SIZE}=RANKS before the launcher",
            )
        world = asked
    elif asked is not None and world != asked:
        raise RankError(
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
        raise RankError(f"the launcher ({conv.name}) gave rank {rank} in a world of {world}")
    return RankInfo(rank, world, local_rank or 0, local_size, conv.name)


def node_rank(info: RankInfo, env: Mapping[str, str] = os.environ) -> int:
    """This node's index among the job's nodes: the launcher's own where it sets one, else the
    rank's block (ranks are placed node by node: --npernode, --ppn, srun's block distribution)."""
    conv = convention_of(env)
    named = _first(env, conv.node_rank) if conv else None
    if named is not None and named.isdigit():
        return int(named)
    return info.rank // info.local_size if info.local_size else 0


def torch_env(info: RankInfo, env: Mapping[str, str] = os.environ) -> Dict[str, str]:
    """The variables torch.distributed's env:// and DeepSpeed's init_distributed() read, for this rank.

    MASTER_ADDR/MASTER_PORT are the job script's (every launch template exports them); a job whose
    ranks are all on this node may go without. A multi-node job without MASTER_ADDR gets none here:
    torch then names the missing variable itself (a script may bring its own rendezvous)."""
    out = {
        "RANK": str(info.rank),
        "WORLD_SIZE": str(info.world_size),
        "LOCAL_RANK": str(info.local_rank),
        "NODE_RANK": str(node_rank(info, env)),
    }
    if info.local_size is not None:
        out["LOCAL_WORLD_SIZE"] = str(info.local_size)
        out["LOCAL_SIZE"] = str(info.local_size)  # DeepSpeed's launcher's name for it
    if not env.get("MASTER_ADDR") and (info.world_size == 1 or info.local_size == info.world_size):
        out["MASTER_ADDR"] = "127.0.0.1"
    if not env.get("MASTER_PORT"):
        out["MASTER_PORT"] = DEFAULT_MASTER_PORT
    return out


def default_threads(info: RankInfo, env: MutableMapping[str, str] = os.environ) -> None:
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
