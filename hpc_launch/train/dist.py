"""Find this process's rank/world from whichever launcher started it, then start torch.distributed.

The launchers' variables are read by the job layer (hpc_launch/joblayer/ranks.py, their one home,
shared with every rank of a `--script` job); here they become the entrypoint's PreflightError.
"""

from __future__ import annotations

import os
import sys
from typing import List, Mapping, Optional

from hpc_launch import protocol
from hpc_launch.one_line import say
from hpc_launch.joblayer import ranks
from hpc_launch.joblayer.ranks import CONVENTIONS, Convention, RankInfo, convention_of, default_threads

from . import ds_startup
from .errors import PreflightError

__all__ = [
    "CONVENTIONS",
    "Convention",
    "PreflightError",
    "RankInfo",
    "convention_of",
    "default_threads",
    "discover",
    "export_env",
    "init_distributed",
]


def discover(env: Mapping[str, str] = os.environ) -> RankInfo:
    """Rank, world size and local rank from the launcher's environment variables (ranks.discover);
    what it refuses is a PreflightError: nothing trains."""
    try:
        return ranks.discover(env)
    except ranks.RankError as err:
        raise PreflightError(err.message, hint=err.hint) from None


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


def init_distributed(info: RankInfo) -> None:
    """Prove the world is what was asked (hpc_launch/train/preflight.py, unless $HPC_LAUNCH_PREFLIGHT=0),
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
                    say(
                        "[hpc-train] removed a stale DeepSpeed op build lock "
                        f"{lock} ({age / 60:.0f} min old: its build was killed)",
                        sys.stdout,
                    )
            except OSError:
                pass  # another rank removed it first
    return removed
