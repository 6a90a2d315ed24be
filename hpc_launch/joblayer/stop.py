"""Stopping before the walltime: the job script (or the user) asks, every rank agrees, the
trainer writes a complete checkpoint and exits with RESUMABLE_EXIT ("stopped for time, resume me").

The job script exports $HPC_LAUNCH_DEADLINE, its start plus the walltime less a margin (a timer
of its own: PBS Professional sends nothing before its kill, and a signal would reach launchers
that die of it). Creating the file named by $HPC_LAUNCH_STOP (a --script rank also finds it as
$HPC_LAUNCH_STOP_FILE), or SIGUSR1 to a rank (a --script job's --stop-signal), asks the same at
any time. The ranks agree with one tiny MAX all-reduce every --log-every steps, so all
of them stop after the same step.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Mapping, Optional

from hpc_launch.protocol import ENV_STOP_SIGNAL, EXIT_RESUMABLE

RESUMABLE_EXIT = EXIT_RESUMABLE  # EX_TEMPFAIL (sysexits.h): "a temporary failure; the user is invited to retry"


STOP_FILE = "HPC_LAUNCH_STOP_FILE"  # the name a user's script reads; the job script's own is HPC_LAUNCH_STOP


def stop_signal(env: Mapping[str, str] = os.environ) -> int:
    """The signal that asks a rank to stop: --stop-signal's ($HPC_LAUNCH_STOP_SIGNAL), else SIGUSR1."""
    found = getattr(signal, env.get(ENV_STOP_SIGNAL) or "SIGUSR1", None)
    return int(found) if isinstance(found, signal.Signals) else int(signal.SIGUSR1)


class StopRequest:
    def __init__(self, path: Optional[str], deadline: Optional[str] = None, signum: int = signal.SIGUSR1):
        self.path = path
        self.deadline = float(deadline) if deadline else None
        self.asked = False
        self.signum = signum
        try:
            signal.signal(signum, self._on_signal)
        except ValueError:  # not the main thread (tests)
            pass

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> "StopRequest":
        """The request as the job script set it up: its stop file, its deadline and its signal."""
        path = env.get(STOP_FILE) or env.get("HPC_LAUNCH_STOP") or None
        return cls(path, env.get("HPC_LAUNCH_DEADLINE") or None, stop_signal(env))

    def _on_signal(self, signum: int, frame: object) -> None:
        self.asked = True

    def local(self) -> bool:
        if self.deadline is not None and time.time() >= self.deadline:
            return True
        return self.asked or bool(self.path and os.path.exists(self.path))

    def agreed(self, dcomm: Any, device: Any) -> bool:
        """True on every rank once any rank was asked to stop."""
        import torch

        flag = torch.tensor(1.0 if self.local() else 0.0, device=device)
        dcomm.all_reduce(flag, op=dcomm.ReduceOp.MAX)
        return bool(flag.item())
