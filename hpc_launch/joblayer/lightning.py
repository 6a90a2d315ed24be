"""Lightning's stop and resume, with no code from the user (installed once the user's code imports
Lightning's Trainer module; nothing of Lightning is imported otherwise).

`Trainer.fit` is wrapped, on the class, in a function that:
- adds a callback that, when the job asks to stop (stop_agreed(): the deadline before the walltime,
  the stop file, the stop signal, the scheduler's SIGTERM), saves a checkpoint after the batch it is
  in (`Trainer.save_checkpoint`, on every rank: a collective under DDP) and ends the fit
  (`trainer.should_stop`);
- resumes from the newest of those checkpoints when the job is a resumed one (a --chain link, or a
  scheduler's requeue) and the script passed no `ckpt_path` of its own.
The checkpoints go to the chain's directory ($HPC_LAUNCH_CHECKPOINT_DIR), else to
`hpc-launch-checkpoints/` under the Trainer's `default_root_dir` (kept across a requeue).

The layer's own SIGUSR1 handler is in place before the script runs, so Lightning's SLURM auto-requeue
handler (which saves and calls `scontrol requeue` on SIGUSR1) stands aside: the stop and the resume are
the same on every scheduler, and a chain's next link is not doubled by a requeue.
"""

from __future__ import annotations

import functools
import glob
import importlib
import os
import sys
from typing import Any, Callable, Optional

from . import api

CHECKPOINTS = "hpc-launch-checkpoints"  # under default_root_dir when the job has no chain directory


def _say(line: str) -> None:
    print(f"[hpc-launch] {line}", file=sys.stderr, flush=True)


def checkpoints_of(trainer: Any) -> str:
    return api.checkpoint_dir() or os.path.join(str(trainer.default_root_dir), CHECKPOINTS)


def newest_checkpoint(where: str) -> Optional[str]:
    found = glob.glob(os.path.join(where, "*.ckpt"))
    return max(found, key=os.path.getmtime) if found else None


def stop_callback(callback_base: type) -> Any:
    """A Lightning Callback (of Lightning's own base class) that saves and stops on the job's request."""

    class StopForTheJob(callback_base):  # type: ignore[misc, valid-type]
        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if getattr(self, "saved", False) or not api.stop_agreed():  # every rank asks, every batch
                return
            self.saved = True
            path = os.path.join(checkpoints_of(trainer), f"step={trainer.global_step}.ckpt")
            trainer.save_checkpoint(path)  # every rank: the strategy has rank 0 write it
            if trainer.is_global_zero:
                _say(f"the job asked to stop: Lightning saved {path} at step {trainer.global_step} and stops")
            trainer.should_stop = True

    return StopForTheJob()


def wrap_fit(fit: Callable[..., Any], callback_base: type) -> Any:
    @functools.wraps(fit)
    def fit_for_the_job(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not any(type(cb).__name__ == "StopForTheJob" for cb in self.callbacks):
            self.callbacks.append(stop_callback(callback_base))
        given = len(args) >= 5 or kwargs.get("ckpt_path") is not None  # fit(model, train, val, datamodule, ckpt_path)
        if not given and api.resumed_job():
            found = newest_checkpoint(checkpoints_of(self))
            if found:
                if self.is_global_zero:
                    _say(f"Lightning resumes from {found} (the newest checkpoint the job saved)")
                kwargs["ckpt_path"] = found
        return fit(self, *args, **kwargs)

    fit_for_the_job.hpc_launch_wrapped = True  # type: ignore[attr-defined]
    return fit_for_the_job


def install(trainer_module: Any) -> None:
    """After Lightning's trainer module is imported: its Trainer stops and resumes for the job."""
    package = trainer_module.__name__.rsplit(".trainer.trainer", 1)[0]  # lightning.pytorch, or pytorch_lightning
    callback_base = importlib.import_module(f"{package}.callbacks").Callback  # imported already by the trainer
    trainer = trainer_module.Trainer
    if not getattr(trainer.fit, "hpc_launch_wrapped", False):
        trainer.fit = wrap_fit(trainer.fit, callback_base)
