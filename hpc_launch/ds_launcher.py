"""The `local` launch line's per-node launcher: what `deepspeed --num_gpus N` runs on the node.

Where DeepSpeed's accelerator certainly sets CUDA_VISIBLE_DEVICES (CUDA, ROCm, CPU), node_launch.py
does what DeepSpeed's `launch.py` does without importing torch (~1.3 s and 1.5 CPU-s a job). Elsewhere
DeepSpeed's own (`deepspeed.launcher.launch`) runs, ended the moment it returns.

It returns only when every rank exited 0 (a failing rank makes it exit through sys.exit with the
rank's code, untouched here). Its loop looks at its ranks once a second and sleeps a second more
after the last one ended: here each of those sleeps ends as soon as a rank has exited (or none is
left), so the job ends within a tenth of a second of its last rank, not one or two seconds later.
The interpreter's teardown with torch loaded costs another ~0.5 s on every job: skipped, after
flushing what it wrote (docs/launch-cost.md, "The end")."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from hpc_launch import node_launch

CHILD_CHECK_S = 0.05  # how often a sleep of the launcher's loop looks for a rank that exited


class _UntilARankExits:
    """Stands in for the `time` module in DeepSpeed's launcher: its `sleep(s)` returns after `s`, or
    sooner, once a child (a rank) has exited or no child is left. The exited child is not collected
    (WNOWAIT): the launcher's own `poll()` reads its code."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            time.sleep(min(CHILD_CHECK_S, max(0.0, deadline - time.monotonic())))
            if time.monotonic() >= deadline or _a_child_exited_or_none_left():
                return


def _a_child_exited_or_none_left() -> bool:
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def main() -> None:
    args = node_launch.parse(sys.argv[1:])
    if node_launch.runs_here(args, os.environ):
        node_launch.main(args, os.environ)
    from deepspeed.launcher import launch  # reads sys.argv, as under `python -m`

    launch.time = _UntilARankExits()  # type: ignore[assignment]
    launch.main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
