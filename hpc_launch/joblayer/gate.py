"""The pre-flight gate before a user's script (hpc_launch/train/preflight.py: the entrypoint's checks, wording
and exit code 78), run by the layer on every rank of a job with more than one rank, unless
$HPC_LAUNCH_PREFLIGHT is "0" (`submit --no-preflight`).

The gate's rendezvous store is served by rank 0 on MASTER_ADDR:MASTER_PORT, as the entrypoint's
is; it stays up (multi-tenant) so the user's own `init_process_group` (env://, rank 0's TCPStore
on the same port) shares it instead of finding the port taken, and the watchdog reads it later.
The all-reduce probe runs on a process group of its own, destroyed before the user's code starts:
their `init_process_group` finds none. torch is imported here only when the gate runs: a job
with one rank, or with the gate off, keeps the layer's start free of it.
"""

from __future__ import annotations

import os
from typing import Any, List, Mapping, Optional

from hpc_launch import protocol
from hpc_launch.one_line import say, say_ours

from .ranks import RankInfo

_KEEP: List[Any] = []  # rank 0's store: its server lives as long as the rank (the user's process group shares it)
_PROBE_PREFIX = "hpc-launch/preflight-probe"


def torch_device(local_rank: int) -> Optional[str]:
    """The GPU a rank drives by the usual rule (its local rank among the visible devices), as the
    physical id the gate compares across ranks; None on CPU. torch only, never DeepSpeed."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return None
    index = local_rank % torch.cuda.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get("HIP_VISIBLE_DEVICES") or ""
    ids = visible.split(",") if visible else []
    return ids[index] if index < len(ids) else str(index)


def run(info: RankInfo, env: Mapping[str, str] = os.environ) -> None:
    """The gate and the probe, or SystemExit(78) with the entrypoint's lines."""
    try:
        from hpc_launch.train import preflight
        from hpc_launch.train.errors import PreflightError
    except ImportError as exc:  # an installation without the entrypoint's package
        say_ours(f"note: no pre-flight gate ({exc})")
        return
    import torch
    import torch.distributed as tdist

    on_gpu = torch_device(info.local_rank) is not None
    backend = "nccl" if on_gpu else "gloo"
    device = f"cuda:{info.local_rank % torch.cuda.device_count()}" if on_gpu else "cpu"
    try:
        store, seconds = preflight.gate(info, backend=backend, env=env, device_of=torch_device)
        if store is None:
            return
        if info.rank == 0:
            _KEEP.append(store)
        _probe(preflight, tdist, store, info, backend, device, seconds)
        # proven for this rank: a script that starts the entrypoint (or another gate) in this process
        # would find rank 0 already registered in the shared store ("rank 0 was started twice")
        os.environ[protocol.ENV_PREFLIGHT] = "0"
    except PreflightError as err:
        if info.rank == 0 or err.every_rank:  # as the entrypoint: one line, once per job
            say(f"error: {err.one_line()}")
        protocol.report_verdict(err.exit_code)
        raise SystemExit(err.exit_code) from None


def _probe(preflight: Any, tdist: Any, store: Any, info: RankInfo, backend: str, device: str, seconds: float) -> None:
    """The all-reduce probe on a process group of its own, gone before the user's code runs."""
    probe_store = tdist.PrefixStore(_PROBE_PREFIX, store)
    tdist.init_process_group(backend, store=probe_store, rank=info.rank, world_size=info.world_size)
    try:
        preflight.probe(info, device=device, seconds=seconds)
    finally:
        # every rank past its collectives before any tears its connections down
        probe_store.add("done", 1)
        _wait_count(probe_store, "done", info.world_size)
        tdist.destroy_process_group()


def _wait_count(store: Any, key: str, count: int, limit_s: float = 60.0) -> None:
    import time

    end = time.monotonic() + limit_s
    while store.add(key, 0) < count and time.monotonic() < end:
        time.sleep(0.01)
