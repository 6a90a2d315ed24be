"""The Hugging Face Trainer's stop and resume, with no code from the user (installed once the
user's code imports `transformers.trainer`; nothing of transformers is imported otherwise).

`Trainer.train` is wrapped, on the class, in a function that:
- adds a callback that, when the job asks to stop (stop_agreed(): the deadline before the
  walltime, the stop file, the stop signal, the scheduler's SIGTERM), has the Trainer save a
  checkpoint and end its training after the step it is in (TrainerControl.should_save and
  should_training_stop: the Trainer's own save, into its own output_dir);
- resumes from the newest checkpoint in the Trainer's output_dir (transformers'
  get_last_checkpoint) when the job is a resumed one (a --chain link: $HPC_LAUNCH_CHECKPOINT_DIR,
  or a scheduler's requeue) and the script itself passed no `resume_from_checkpoint`.
A script that passes its own `resume_from_checkpoint` (even False) keeps it.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Optional

from . import api
from hpc_launch.one_line import say_ours


def _say(line: str) -> None:
    say_ours(line)


def stop_callback(callback_base: type) -> Any:
    """A TrainerCallback (of transformers' own base class) that saves and stops on the job's request."""

    class StopForTheJob(callback_base):  # type: ignore[misc, valid-type]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if api.stop_agreed():
                if not getattr(self, "said", False):
                    self.said = True
                    if getattr(state, "is_world_process_zero", True):
                        _say(f"the job asked to stop: the Trainer saves at step {state.global_step} and stops")
                control.should_save = True
                control.should_training_stop = True
            return control

    return StopForTheJob()


def restore_indexed_cpu_locations() -> None:
    """Let torch.load restore to `cpu:N`. transformers 5.17 loads a resumed optimizer with
    map_location=args.device when the world has several ranks, and a CPU rank's device is `cpu:N`,
    which torch's own deserializers refuse (`don't know how to restore data location of
    torch.storage.UntypedStorage (tagged with cpu:0)`): a CPU storage stays on the CPU."""
    import torch.serialization as serialization

    if getattr(serialization, "hpc_launch_cpu_n", False):
        return

    def restore(storage: Any, location: str) -> Any:
        return storage if location.startswith("cpu:") else None

    taken = {entry[0] for entry in serialization._package_registry}  # equal priorities are compared as functions
    serialization.register_package(max(taken, default=0) + 1, lambda obj: None, restore)  # after torch's own
    serialization.hpc_launch_cpu_n = True  # type: ignore[attr-defined]


def wrap_train(train: Callable[..., Any], callback_base: type, last_checkpoint: Callable[[str], Optional[str]]) -> Any:
    @functools.wraps(train)
    def train_for_the_job(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "_hpc_launch_stop", None):
            self._hpc_launch_stop = stop_callback(callback_base)
            self.add_callback(self._hpc_launch_stop)
        given = bool(args) or "resume_from_checkpoint" in kwargs
        output_dir = getattr(getattr(self, "args", None), "output_dir", None)
        if not given and output_dir and api.resumed_job() and os.path.isdir(output_dir):
            found = last_checkpoint(output_dir)
            if found:
                _say(f"the Trainer resumes from {found} (the newest checkpoint in its output_dir)")
                kwargs["resume_from_checkpoint"] = found
        if args[0] if args else kwargs.get("resume_from_checkpoint"):  # a resume, ours or the script's
            restore_indexed_cpu_locations()
        return train(self, *args, **kwargs)

    train_for_the_job.hpc_launch_wrapped = True  # type: ignore[attr-defined]
    return train_for_the_job


def install(trainer_module: Any) -> None:
    """After `transformers.trainer` is imported: its Trainer (and every subclass) stops and resumes for the job."""
    from transformers.trainer_callback import TrainerCallback
    from transformers.trainer_utils import get_last_checkpoint

    trainer = trainer_module.Trainer
    if getattr(trainer.train, "hpc_launch_wrapped", False):
        return
    trainer.train = wrap_train(trainer.train, TrainerCallback, get_last_checkpoint)
