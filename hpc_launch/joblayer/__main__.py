"""`python -m hpc_launch.joblayer SCRIPT [ARGS...]` (or `-m MODULE [ARGS...]`): how every rank of a
`--script` job starts. Its place from the launcher, the watchdog and DeepSpeed's CPU start set up,
then the user's script runs in this interpreter as `python SCRIPT ARGS...` would run it: as
`__main__`, with sys.argv as given, its directory first on sys.path, its exit code the rank's.
"""

from __future__ import annotations

import os
import runpy
import sys
from types import ModuleType
from typing import List, Tuple

from hpc_launch import start_gc
from hpc_launch.one_line import say_ours
from hpc_launch.protocol import ENV_PREFLIGHT, EXIT_PREFLIGHT

from . import api, deepspeed_cpu, preempt, steps
from .after_import import after_import
from .stop import STOP_FILE
from .ranks import RankError, RankInfo, default_threads, discover, torch_env

USAGE = "usage: python -m hpc_launch.joblayer SCRIPT [ARGS...] | -m MODULE [ARGS...]"


def _target(argv: List[str]) -> Tuple[str, bool, List[str]]:
    """(script or module, is a module, its arguments).

    DeepSpeed's launcher puts `--local_rank=N` right after what it runs (here: before the
    script): the script gets it first, as it would started bare."""
    ds_args = []
    while argv and argv[0].startswith("--local_rank"):
        ds_args.append(argv.pop(0))
    if argv[:1] == ["-m"] and len(argv) > 1:
        return argv[1], True, [*ds_args, *argv[2:]]
    if not argv or argv[0].startswith("-"):
        say_ours(f"error: {USAGE}")
        raise SystemExit(2)
    return argv[0], False, [*ds_args, *argv[1:]]


def _hf_trainer(module: ModuleType) -> None:
    from . import hf_trainer  # only once the script imported the Trainer

    hf_trainer.install(module)


def _lightning(module: ModuleType) -> None:
    from . import lightning  # only once the script imported Lightning's Trainer

    lightning.install(module)


def set_up(info: RankInfo) -> None:
    """This rank's torch variables, thread count, and what runs once the user's code imports torch
    or DeepSpeed (nothing of theirs is imported here)."""
    os.environ.update(torch_env(info))
    default_threads(info, os.environ)
    steps.configure(info)
    if steps.watched(info):
        after_import("torch.optim.optimizer", steps.install_optimizer_hook)
    after_import("deepspeed.comm.torch", deepspeed_cpu.skip_shm_comm_op)
    after_import("deepspeed.ops.op_builder.builder", deepspeed_cpu.announce_jit_builds)
    if os.environ.get("HPC_LAUNCH_STOP"):  # in a job: the stop signal, the deadline and SIGTERM ask to stop
        os.environ.setdefault(STOP_FILE, os.environ["HPC_LAUNCH_STOP"])
        request = api.stop_request()
        preempt.signal_at_deadline(request.deadline, request.signum)
        preempt.on_sigterm(request, info.rank, api.listening)
        after_import("transformers.trainer", _hf_trainer)  # the HF Trainer saves, stops and resumes
        for name in ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer"):
            after_import(name, _lightning)  # so does Lightning's


def main(argv: List[str]) -> None:
    start_gc.relax()  # until the first step (steps.on_step puts it back)
    target, is_module, args = _target(argv)
    if not is_module and not os.path.isfile(target):
        say_ours(f"error: the script {target} is not a file here ({os.getcwd()})")
        raise SystemExit(2)
    try:
        info = discover()
    except RankError as err:
        hint = f" ({err.hint})" if err.hint else ""
        say_ours(f"error: {err.message}{hint}")
        raise SystemExit(EXIT_PREFLIGHT) from None
    set_up(info)
    if info.rank == 0 and info.world_size > 1:
        watch = "on" if steps.watched(info) else "off"
        say_ours(
            f"job layer: {info.world_size} rank(s) (launcher: {info.source}), rank 0 on "
            f"{os.uname().nodename}, MASTER_ADDR={os.environ.get('MASTER_ADDR', '')} "
            f"MASTER_PORT={os.environ.get('MASTER_PORT', '')}, watchdog {watch}"
        )
    if info.world_size > 1 and os.environ.get(ENV_PREFLIGHT) != "0":
        from . import gate  # before the user's code, as the entrypoint's before its first step

        gate.run(info)
    try:
        run(target, is_module, args)
    except SystemExit as end:
        if end.code in (None, 0):
            steps.ran_through()
        raise
    steps.ran_through()


def run(target: str, is_module: bool, args: List[str]) -> None:
    sys.argv = [target, *args]
    if is_module:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
        return
    path = os.path.abspath(target)
    sys.path[0] = os.path.dirname(path)  # as `python SCRIPT` has it (ours was the work dir)
    runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
