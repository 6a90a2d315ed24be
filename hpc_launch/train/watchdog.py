"""The entrypoint's watchdog is the job layer's (hpc_launch/joblayer/watchdog.py, its one home):
the trainer reports each step to it, a `--script` rank's optimizer hook does the same."""

from hpc_launch.joblayer.watchdog import (
    WARMUP_STEPS,
    Limits,
    Progress,
    StragglerJudge,
    Watchdog,
    busy,
    hang_bound,
    stalled,
    start,
    stragglers,
)

__all__ = [
    "WARMUP_STEPS",
    "Limits",
    "Progress",
    "StragglerJudge",
    "Watchdog",
    "busy",
    "hang_bound",
    "stalled",
    "start",
    "stragglers",
]
