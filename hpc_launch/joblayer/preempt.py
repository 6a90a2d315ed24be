"""A `--script` rank's stop before the walltime and on the scheduler's SIGTERM (standard library only).

- At the job's deadline ($HPC_LAUNCH_DEADLINE: the walltime less --stop-before) the rank gets
  SIGUSR1, as the scheduler's own warning would send it (Slurm --signal): a script's own handler
  (Lightning's requeue, a user's save) runs, and `stop_requested()` turns true.
- The scheduler's SIGTERM (scancel, qdel, preemption), while the grace time before its SIGKILL
  runs: a script that asks `stop_requested()` gets the request (and the stop file, for ranks
  the signal did not reach) and saves before it exits; a script that never asks ends at once,
  as it would without the layer (holding the grace time for nothing helps no one).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Optional

from .stop import StopRequest


def _say(line: str) -> None:
    os.write(2, f"[hpc-launch] {line}\n".encode())  # from a signal handler: no buffered stream


def _touch(path: Optional[str]) -> None:
    if path:
        try:
            with open(path, "a", encoding="utf-8"):
                pass
        except OSError:
            pass  # its directory is gone: the signalled ranks still stop


def on_sigterm(request: StopRequest, rank: int, listening: Any) -> None:
    """SIGTERM becomes the stop request where the script listens for one (`listening()`)."""

    rank_pid = os.getpid()

    def handler(signum: int, frame: Any) -> None:
        # a process forked from the rank (a DataLoader worker) inherits the handler: it ends as before
        if os.getpid() != rank_pid or not listening():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        request.asked = True
        _touch(request.path)
        _say(f"rank {rank}: SIGTERM from the scheduler: stop_requested() is now true (save and exit within its grace)")

    signal.signal(signal.SIGTERM, handler)


def signal_at_deadline(deadline: Optional[float], signum: int = signal.SIGUSR1) -> Optional[threading.Timer]:
    """Send `signum` to this process at `deadline` (wall time); None when the job set none."""
    if not deadline:
        return None
    timer = threading.Timer(max(0.0, deadline - time.time()), os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()
    return timer
