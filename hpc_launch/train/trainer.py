"""The training run, phase by phase: validate everything cheap first (run_plan.py), then DeepSpeed
up and the resume (engine_start.py), the step loop, the end with its checkpoint, the evaluation."""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, Optional

from hpc_launch import protocol, start_gc
from hpc_launch.one_line import say

from . import checkpoint, dist, engine_start
from .engine_start import TrainState
from .metrics import StepMeter, step_line  # standard library only; imported once, not each logged step
from .monitor import close_open
from .run_plan import RunPlan, finished_checkpoint, plan, process_start
from .stop import RESUMABLE_EXIT, StopRequest


def _say_where_ranks_run(info) -> None:
    """One line per node: where the ranks run (pods, schedulers alike)."""
    if info.local_rank == 0:
        import socket

        say(
            f"[hpc-train] node {socket.gethostname()}: rank {info.rank} of {info.world_size}, pid {os.getpid()}",
            sys.stdout,
        )


def _rank0_printer(is_main: bool) -> Callable[[str], None]:
    def said_by_rank0(msg: str) -> None:
        if is_main:
            say(msg, sys.stdout)

    return said_by_rank0


def run(args) -> int:
    """Train as `args` ask on this rank: 0 when done, RESUMABLE_EXIT when stopped for time."""
    started_at = process_start()
    info = dist.discover()
    dist.default_threads(info)
    dist.export_env(info)
    _say_where_ranks_run(info)
    say = _rank0_printer(info.rank == 0)
    decided = plan(args, info, say)  # everything a user can get wrong, before the process group starts
    done = finished_checkpoint(args)
    if done:  # a later link of a chain whose training has finished: nothing to start
        say(f"training already complete at step {done[1]} (checkpoint {done[0]}): nothing to do")
        return 0
    batches = _train_batches(args, decided)  # its workers forked now, before any thread (data.TrainBatches)
    try:
        state = engine_start.start(args, decided, started_at)
        state.batches = batches
        return _run_started(state)
    finally:
        batches.close()


def _run_started(state: TrainState) -> int:
    """From the started engine to the end: resume, train, checkpoint, evaluate."""
    say = state.plan.say
    state.step = engine_start.resume(state)
    state.monitors = engine_start.open_monitors(state)
    state.stop = StopRequest(os.environ.get("HPC_LAUNCH_STOP"), os.environ.get("HPC_LAUNCH_DEADLINE"))
    say(_training_line(state))
    stopped = _train(state)
    state.batches.close()  # the loader's workers end with the training
    if stopped is not None:
        return stopped
    _finish(state)
    _evaluate(state)
    import deepspeed.comm as dcomm

    dcomm.barrier()
    dcomm.destroy_process_group()
    return 0


def _training_line(state: TrainState) -> str:
    import torch

    args, p = state.args, state.plan
    return (
        f"training {args.model} on {args.data}: world={p.info.world_size} ({p.info.source}) "
        f"zero={state.meta['zero_stage']} offload={args.offload} precision={p.precision} micro={p.batch.micro} "
        f"accum={p.batch.accum} global={p.batch.global_} steps={args.total_steps} steps/epoch={p.steps_per_epoch} "
        f"threads/rank={torch.get_num_threads()}"
    )


def _train_batches(args, decided: RunPlan):
    """This rank's micro-batches for the run (data.TrainBatches), positioned per epoch."""
    from .data import TrainBatches

    info, micro = decided.info, decided.batch.micro
    return TrainBatches(decided.data.train, micro, info.rank, info.world_size, args.seed, args.num_workers)


def _train(state: TrainState) -> Optional[int]:
    """The step loop from the resumed step: None once every step is done, else the exit code of a
    stop for time. What a step touches is a local here, read from the state once."""
    import torch
    import torch.nn.functional as F

    from . import watchdog

    args, kind, accum = state.args, state.plan.kind, state.plan.batch.accum
    engine, device, dtype, to_layout = state.engine, state.device, state.dtype, state.to_layout
    max_norm, wd, sync, steps_per_epoch = state.max_norm, state.wd, state.sync, state.plan.steps_per_epoch
    meter = StepMeter(state.plan.batch.global_)
    step = state.step
    first = step + 1  # this process's first step: the start is over (start_gc)
    last_saved = step
    state.started = time.perf_counter()
    while step < args.total_steps:
        epoch, in_epoch = divmod(step, steps_per_epoch)
        batches = state.batches.epoch(epoch, in_epoch * accum)
        for _ in range(in_epoch, steps_per_epoch):
            if step >= args.total_steps:
                break
            loss_sum = torch.zeros((), device=device)
            work = 0.0  # this rank's own part of the step (data + forward): no collective waits in it
            for _ in range(accum):
                t = time.perf_counter()
                if kind:
                    loss = kind.loss(engine, next(batches), device, dtype)
                else:
                    images, labels = next(batches)
                    # copied as loaded (pinned, asynchronous), then cast and laid out on the device: a cast
                    # in .to(device, dtype) runs on the host first and makes the copy synchronous
                    logits = engine(images.to(device, non_blocking=True).to(dtype, **to_layout))
                    loss = F.cross_entropy(logits.float(), labels.to(device, non_blocking=True))
                if wd is not None:
                    sync()
                    work += time.perf_counter() - t
                engine.backward(loss)
                if max_norm and engine.is_gradient_accumulation_boundary():  # gradients all-reduced by now
                    torch.nn.utils.clip_grad_norm_(engine.module.parameters(), max_norm)
                engine.step()
                loss_sum += loss.detach()
            step += 1
            meter.step()
            if step == first:
                start_gc.restore()
            if wd is not None:
                wd.progress(step, work)
            stop_asked = False
            if step % args.log_every == 0 or step == args.total_steps:
                stop_asked = _log_step(state, step, epoch, loss_sum, meter)
            if step == 1:
                _say_start_up(state)
            if args.checkpoint_dir and args.checkpoint_every and step % args.checkpoint_every == 0:
                with watchdog.busy(wd):
                    checkpoint.save(engine, args.checkpoint_dir, step, state.meta)
                last_saved = step
            if stop_asked and step < args.total_steps:
                return _stop_for_time(state, step, last_saved)
    state.step, state.last_saved = step, last_saved
    return None


def _log_step(state: TrainState, step: int, epoch: int, loss_sum, meter) -> bool:
    """The step line and the monitors' events; whether any rank asked to stop. One all-reduce and
    one host sync for the loss and the stop request (asked every --log-every steps, so the log's
    steps line up with it): [loss sum, ranks asked]."""
    import deepspeed.comm as dcomm
    import torch

    engine, info, accum = state.engine, state.plan.info, state.plan.batch.accum
    shared = torch.stack([loss_sum.float() / accum, torch.tensor(float(state.stop.local()), device=state.device)])
    dcomm.all_reduce(shared)
    loss_total, asked = shared.tolist()
    loss_value, stop_asked = loss_total / info.world_size, asked > 0
    state.plan.say(step_line(step, epoch, loss_value, engine.get_lr()[0], meter, info.world_size, state.rate))
    events = [
        ("Train/Samples/train_loss", loss_value, engine.global_samples),
        ("Train/Samples/samples_per_sec", meter.average, engine.global_samples),
    ]
    if info.rank == 0 and engine.monitor.enabled:  # DeepSpeed's CSV monitor logs lr itself, not the loss
        engine.monitor.write_events(events)
    if state.monitors is not None:
        state.monitors.write([*events, ("Train/Samples/lr", engine.get_lr()[0], engine.global_samples)])
    return stop_asked


def _say_start_up(state: TrainState) -> None:
    """Epoch seconds of each start-up phase on rank 0 (bench/bench_launch.py)."""
    t = state.times
    state.plan.say(
        f"[hpc-train] start-up: process={t.process:.3f} imported={t.imported:.3f} "
        f"process_group={t.process_group:.3f} deepspeed={t.deepspeed:.3f} first_step={time.time():.3f}"
    )


def _stop_for_time(state: TrainState, step: int, last_saved: int) -> int:
    """The walltime is near: a complete checkpoint now, and an exit code that says "resume me"."""
    import deepspeed.comm as dcomm

    args, say = state.args, state.plan.say
    if state.wd is not None:
        state.wd.stop()
    if not args.checkpoint_dir:
        say(f"[hpc-train] stopping for time at step {step} with no --checkpoint-dir: nothing to resume from")
    else:
        if last_saved != step:
            checkpoint.save(state.engine, args.checkpoint_dir, step, state.meta)
        say(
            f"[hpc-train] stopped for time at step {step} of {args.total_steps}: checkpoint saved, resumable "
            f"(exit {RESUMABLE_EXIT})"
        )
    # Rank 0's monitors close before the ranks part: a non-zero exit of any rank makes the launcher end
    # every rank's process tree, W&B's service with rank 0's, and the run it was still writing out
    close_open()
    dcomm.barrier()
    return RESUMABLE_EXIT


def _finish(state: TrainState) -> None:
    """The watchdog stopped, the last checkpoint saved, and the line that says training finished."""
    args = state.args
    if state.wd is not None:
        state.wd.stop()
    if args.checkpoint_dir and state.last_saved != state.step:
        checkpoint.save(state.engine, args.checkpoint_dir, state.step, state.meta)
    wall = time.perf_counter() - state.started
    # ended_at lets `hpc-launch logs --summary` split the job's time into start-up and training
    state.plan.say(f"{protocol.TRAINING_FINISHED}steps={state.step} wall_s={wall:.1f} ended_at={time.time():.3f}")


def _evaluate(state: TrainState) -> None:
    """On the held-out split unless --no-eval: a language model's perplexity or a built-in
    classifier's accuracy (a user's factory model has no evaluation of ours)."""
    if state.plan.data.val is None or state.args.no_eval:
        return
    if state.plan.lm:
        _perplexity(state)
    elif state.plan.kind is None:
        _accuracy(state)


def _perplexity(state: TrainState) -> None:
    import deepspeed.comm as dcomm

    from . import lm as lm_kind

    p = state.plan
    evaluated = time.perf_counter()
    state.engine.eval()
    result = lm_kind.perplexity(
        state.engine,
        p.lm,
        p.data.val,
        p.info.rank,
        p.info.world_size,
        p.batch.micro,
        state.device,
        state.args.eval_limit,
        dcomm.all_reduce,
    )
    p.say(
        lm_kind.perplexity_line(result, split="val", step=state.step, time_s=f"{time.perf_counter() - evaluated:.1f}")
    )


def _accuracy(state: TrainState) -> None:
    import deepspeed.comm as dcomm

    from .evaluate import accuracy, eval_line

    p, engine, device = state.plan, state.engine, state.device
    evaluated = time.perf_counter()
    engine.eval()
    result = accuracy(
        lambda x: engine(x.to(device, non_blocking=True).to(state.dtype, **state.to_layout)),
        p.data.val,
        p.info.rank,
        p.info.world_size,
        batch_size=max(p.batch.micro, 64),
        limit=state.args.eval_limit,
        all_reduce=dcomm.all_reduce,
    )
    engine.train()
    # time_s: the summary accounts for it between training and the job's end (hpc_launch/display.py)
    p.say(eval_line(result, split="val", step=state.step, time_s=f"{time.perf_counter() - evaluated:.1f}"))
