"""A `--script` rank's steps, reported to the watchdog (hpc_launch/joblayer/watchdog.py) without
a change to the user's code.

Once the user's code imports torch, a global optimizer step post-hook
(torch.optim.optimizer.register_optimizer_step_post_hook: every torch optimizer, so plain loops,
DeepSpeed's engine, the HF Trainer and Lightning alike) reports each step; `heartbeat(step)`
does the same for a loop that steps no torch optimizer. The watchdog starts at the first step:
by then the user's process group is up, and with it the rendezvous store (rank 0's, at
MASTER_ADDR:MASTER_PORT) the watchdog publishes progress in. A rank that never steps says so
once, at its end: the watchdog had nothing to watch.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import time
from typing import Any, Mapping, Optional, Tuple

from .ranks import RankInfo, RankError, discover
from hpc_launch import start_gc
from hpc_launch.one_line import say_ours

WATCHDOG_OFF = "HPC_LAUNCH_WATCHDOG"  # "0": no watchdog


class _Steps:
    def __init__(self) -> None:
        self.info: Optional[RankInfo] = None
        self.env: Mapping[str, str] = os.environ
        self.count = 0
        self.sampled: Optional[Tuple[float, float, int]] = None  # (wall, wanted CPU s, step) at the last sample
        self.work_s = 0.0  # CPU time this rank wanted per step, over the last sample
        self.watchdog: Any = None  # a Watchdog once started
        self.tried = False  # the watchdog was started (or could not be) at the first step
        self.ran_through = False  # the script ended without an exception: its steps were all there were


_STEPS = _Steps()


def _say(line: str) -> None:
    say_ours(line)


def watched(info: RankInfo, env: Mapping[str, str] = os.environ) -> bool:
    """Whether this rank's steps are watched: more than one rank, and not switched off."""
    return info.world_size > 1 and env.get(WATCHDOG_OFF) != "0"


def configure(info: RankInfo, env: Mapping[str, str] = os.environ) -> None:
    """Called by the layer before the user's code runs: who this rank is, and its end-of-run line."""
    _STEPS.info, _STEPS.env = info, env
    if watched(info, env):
        atexit.register(_at_exit)


def _start_watchdog() -> None:
    _STEPS.tried = True
    info = _STEPS.info
    if info is None:  # heartbeat() from a process the layer did not start
        try:
            info = _STEPS.info = discover(_STEPS.env)
        except RankError:
            return
    if not watched(info, _STEPS.env):
        return
    from . import watchdog

    try:
        _STEPS.watchdog = watchdog.start(info, _STEPS.env)
        if _STEPS.watchdog is not None:
            _STEPS.watchdog.work_label = "its CPU time wanted (run + run queue)"
    except Exception as exc:  # noqa: BLE001 - a script with its own rendezvous (file://, tcp://elsewhere)
        where = f"{_STEPS.env.get('MASTER_ADDR', '?')}:{_STEPS.env.get('MASTER_PORT', '?')}"
        _say(f"note: no watchdog on rank {info.rank}: the rendezvous store at {where} did not answer ({exc})")


SAMPLE_EVERY_S = 1.0


def wanted_cpu_s(task_dir: str = "/proc/self/task") -> float:
    """The CPU time this process's threads ran or waited for a CPU while runnable (Linux schedstat).

    A rank's own work per step, as the straggler rule needs it, without seeing inside the user's
    step: every rank's step lasts as long as the slowest's (they meet in the gradient all-reduce),
    but a rank waiting for its peers sleeps, while a rank slowed by a neighbour that takes its CPU
    waits in the run queue, and that wait counts here. 0.0 where schedstat is missing."""
    total = 0
    try:
        tasks = os.listdir(task_dir)
    except OSError:
        return 0.0
    for tid in tasks:
        try:
            with open(f"{task_dir}/{tid}/schedstat", encoding="ascii") as fh:
                ran, waited = fh.read().split()[:2]
            total += int(ran) + int(waited)
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def _work_per_step(now: float) -> float:
    """This rank's wanted CPU time per step, sampled at most once a second (reading schedstat
    costs ~10 µs per thread); the last sample's figure in between."""
    last = _STEPS.sampled
    if last is not None and now - last[0] < SAMPLE_EVERY_S:
        return _STEPS.work_s
    busy = wanted_cpu_s()
    if last is not None and _STEPS.count > last[2] and busy > 0:
        _STEPS.work_s = (busy - last[1]) / (_STEPS.count - last[2])
    _STEPS.sampled = (now, busy, _STEPS.count)
    return _STEPS.work_s


def on_step(step: Optional[int] = None) -> None:
    """One step done (its number, or the next one)."""
    _STEPS.count = step if step is not None and step > _STEPS.count else _STEPS.count + 1
    if not _STEPS.tried:
        start_gc.restore()  # the rank's start is over
        _start_watchdog()
    if _STEPS.watchdog is not None:
        _STEPS.watchdog.progress(_STEPS.count, _work_per_step(time.monotonic()))


def _optimizer_stepped(optimizer: Any, args: Any, kwargs: Any) -> None:
    on_step()


def install_optimizer_hook(optim_module: Any) -> None:
    """After torch.optim.optimizer is imported: every optimizer's step reports here."""
    optim_module.register_optimizer_step_post_hook(_optimizer_stepped)


def paused() -> contextlib.AbstractContextManager:
    """The watchdog's pause, for work during which ranks do not step by design (a long checkpoint)."""
    from . import watchdog

    return watchdog.busy(_STEPS.watchdog)


def ran_through() -> None:
    """The script returned (or exited 0): a run with no step had none to watch."""
    _STEPS.ran_through = True


def _at_exit() -> None:
    if _STEPS.watchdog is not None:
        _STEPS.watchdog.stop()
    elif _STEPS.count == 0 and _STEPS.ran_through and _STEPS.info is not None and _STEPS.info.rank == 0:
        _say(
            "watchdog: no optimizer step and no heartbeat() in this run: it had no steps to watch "
            "(a loop that steps no torch optimizer can call hpc_launch.joblayer.heartbeat(step))"
        )
