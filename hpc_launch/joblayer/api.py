"""The in-job API for a user's own training (standard library only; nothing here imports torch).

    from hpc_launch.joblayer import heartbeat, stop_requested, checkpoint_dir, resume_from

- heartbeat(step): tells the watchdog this rank made progress; only a loop that steps no torch
  optimizer needs it (every torch optimizer's step reports by itself).
- stop_requested(): True once the job asked this rank to stop (the deadline before the
  walltime, the stop file $HPC_LAUNCH_STOP_FILE, or the stop signal, SIGUSR1 unless
  --stop-signal): save a checkpoint and exit.
- stop_agreed(): the same, agreed by every rank (one tiny all-reduce): ranks that see the stop
  file or the deadline one step apart still stop after the same step (call it on every rank at
  the same point of the loop).
- checkpoint_dir(): where this job's checkpoints go (the chain's shared directory), or None.
- resume_from(): the checkpoint to resume from (DeepSpeed's directory with its `latest` tag, or
  the newest entry there), or None on a first start.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

from . import steps
from .stop import StopRequest

_REQUEST: Optional[StopRequest] = None
_ASKED = [False]  # the script asked stop_requested() at least once: it listens for a stop


def heartbeat(step: Optional[int] = None) -> None:
    steps.on_step(step)


def stop_request() -> StopRequest:
    """The rank's one stop request (its SIGUSR1 handler is installed on the first call)."""
    global _REQUEST
    if _REQUEST is None:
        _REQUEST = StopRequest.from_env()
    return _REQUEST


def stop_requested() -> bool:
    _ASKED[0] = True
    return stop_request().local()


def stop_agreed() -> bool:
    """stop_requested(), True on every rank once any rank was asked (a collective: every rank
    calls it at the same step). Without a process group it is this rank's own answer."""
    local = stop_requested()
    import torch.distributed as tdist  # the caller's process group is up: torch is imported already

    if not (tdist.is_available() and tdist.is_initialized()) or tdist.get_world_size() < 2:
        return local
    import torch

    on_gpu = tdist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    return stop_request().agreed(tdist, device)


def listening() -> bool:
    """Whether the script ever asked stop_requested() (then SIGTERM gives it the time to save)."""
    return _ASKED[0]


REQUEUED = ("SLURM_RESTART_COUNT", "PBS_RUN_COUNT")  # a requeued job's count of earlier runs (PBS counts from 1)


def resumed_job(env: Mapping[str, str] = os.environ) -> bool:
    """Whether this job continues an earlier one (a chain link, or a scheduler's requeue)."""
    if env.get("HPC_LAUNCH_CHECKPOINT_DIR"):
        return True
    slurm, pbs = env.get("SLURM_RESTART_COUNT", ""), env.get("PBS_RUN_COUNT", "")
    return (slurm.isdigit() and int(slurm) > 0) or (pbs.isdigit() and int(pbs) > 1)


def checkpoint_dir() -> Optional[str]:
    return os.environ.get("HPC_LAUNCH_CHECKPOINT_DIR") or None


def resume_from() -> Optional[str]:
    where = checkpoint_dir()
    if where is None or not os.path.isdir(where):
        return None
    if os.path.exists(os.path.join(where, "latest")):
        return where  # DeepSpeed's engine.load_checkpoint(dir) reads the tag from `latest`
    entries = [os.path.join(where, name) for name in os.listdir(where) if not name.startswith(".")]
    return max(entries, key=os.path.getmtime) if entries else None
