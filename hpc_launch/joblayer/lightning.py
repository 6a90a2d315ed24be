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

It also adds a callback that prints the fit's numbers on rank 0 (Lightning itself prints only a
progress bar, which a job's log cannot summarise): every `log_every_n_steps` (the Trainer's own
setting) a `[hpc-launch] lightning step=... loss=... samples_per_sec=...` line, and at the fit's end
the totals the HF Trainer gives (mean samples/s and steps/s, the run time); the format is
hpc_launch/metrics_line.py's, so `logs --summary`, `report` and `sweep` read it.

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
import time
from typing import Any, Callable, Dict, Optional

from ..metrics_line import format_lightning_line
from . import api
from hpc_launch.one_line import say, say_ours

CHECKPOINTS = "hpc-launch-checkpoints"  # under default_root_dir when the job has no chain directory


def _say(line: str) -> None:
    say_ours(line)


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


def batch_size(batch: Any) -> Optional[int]:
    """The leading size of the batch's first tensor (a tensor, or one inside lists, tuples, dicts)."""
    for _ in range(8):  # nested no deeper than a batch is
        shape = getattr(batch, "shape", None)
        if shape is not None:
            return int(shape[0]) if len(shape) else None
        if isinstance(batch, dict):
            batch = next(iter(batch.values()), None)
        elif isinstance(batch, (list, tuple)):
            batch = batch[0] if batch else None
        else:
            return None
    return None


def _number(value: Any) -> Optional[float]:
    try:
        return float(value)  # a Python number or a one-element tensor (on a GPU: one sync per logged step)
    except (TypeError, ValueError, RuntimeError):
        return None


def _tokens_rate(logged: Dict[str, float]) -> Optional[float]:
    """Tokens/s where the script logs them (Lightning's ThroughputMonitor: `train/tokens_per_sec`)."""
    for name, value in logged.items():
        last = name.replace("|", "/").rsplit("/", 1)[-1]
        if last in ("tokens_per_sec", "tokens_per_second") and "device" not in name:
            return value
    return None


def numbers_callback(callback_base: type) -> Any:
    """A Lightning Callback that prints the fit's numbers on rank 0 (see the module's docstring)."""

    class NumbersForTheJob(callback_base):  # type: ignore[misc, valid-type]
        started: Optional[float] = None

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.started = self.window_t = time.perf_counter()
            self.first_step = self.printed = self.window_step = trainer.global_step
            self.samples = self.window_samples = 0
            self.sized = True  # every batch's size known so far
            self.tokens_sum = self.tokens_time = 0.0
            self.outputs: Any = None

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if self.started is None or not trainer.is_global_zero:
                return
            size = batch_size(batch) if self.sized else None
            if size is None:
                self.sized = False
            else:
                self.samples += size * trainer.world_size  # each rank's batch as rank 0's
            self.outputs = outputs
            step, every = trainer.global_step, max(1, int(getattr(trainer, "log_every_n_steps", 0) or 50))
            if step != self.printed and step % every == 0:  # a step an optimizer finished, as Lightning counts
                self.printed = step
                say(self.line(trainer), sys.stdout)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if self.started is not None and trainer.is_global_zero:
                say(self.line(trainer, end=True), sys.stdout)

        def line(self, trainer: Any, end: bool = False) -> str:
            now = time.perf_counter()
            elapsed, window = max(now - (self.started or now), 1e-9), max(now - self.window_t, 1e-9)
            step = trainer.global_step
            logged = {k: v for k, v in ((k, _number(v)) for k, v in trainer.callback_metrics.items()) if v is not None}
            # no epoch at the end: Lightning has already counted the next one
            fields: Dict[str, Any] = {"step": step, "epoch": None if end else trainer.current_epoch}
            loss = self.outputs.get("loss") if isinstance(self.outputs, dict) else self.outputs
            fields["loss"] = logged.get("loss", _number(loss))
            optimizers = getattr(trainer, "optimizers", None) or []
            if optimizers and optimizers[0].param_groups:
                fields["lr"] = _number(optimizers[0].param_groups[0].get("lr"))
            if self.sized and not end:
                fields["samples_per_sec"] = (self.samples - self.window_samples) / window
            if self.sized:
                fields["avg_samples_per_sec"] = self.samples / elapsed
            fields["steps_per_sec"] = (step - self.first_step) / elapsed
            tokens = _tokens_rate(logged)
            if tokens is not None:
                self.tokens_sum += tokens * window
                self.tokens_time += window
                fields["tokens_per_sec"] = None if end else tokens
            if self.tokens_time:
                fields["avg_tokens_per_sec"] = self.tokens_sum / self.tokens_time
            self.window_t, self.window_step, self.window_samples = now, step, self.samples
            return format_lightning_line(fields, logged, runtime_s=elapsed if end else None)

    return NumbersForTheJob()


def wrap_fit(fit: Callable[..., Any], callback_base: type) -> Any:
    @functools.wraps(fit)
    def fit_for_the_job(self: Any, *args: Any, **kwargs: Any) -> Any:
        have = {type(cb).__name__ for cb in self.callbacks}
        if "StopForTheJob" not in have:
            self.callbacks.append(stop_callback(callback_base))
        if "NumbersForTheJob" not in have:
            self.callbacks.append(numbers_callback(callback_base))
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
