"""The training run: validate everything cheap first, then DeepSpeed init, resume, loop, checkpoint, eval."""

from __future__ import annotations

import os
import time

from hpc_launch import protocol

from . import checkpoint, dist, ds_startup, monitor
from .stop import RESUMABLE_EXIT, StopRequest
from .ds_config import (
    batch_of,
    bf16_as_autocast,
    fused_adamw_available,
    build_config,
    load_user_config,
    merge_user_config,
    own_clipping,
    resolve_batch,
    validate,
)
from .errors import TrainError


def _device_type() -> str:
    from deepspeed.accelerator import get_accelerator

    return get_accelerator().device_name()


def _on_cpu() -> bool:
    return _device_type() == "cpu"


def check_precision(precision: str) -> None:
    from deepspeed.accelerator import get_accelerator

    acc = get_accelerator()
    if precision == "fp16" and not acc.is_fp16_supported():
        raise TrainError(
            f"--precision fp16 is not supported by DeepSpeed's {acc.device_name()} accelerator "
            "on this machine (no fp16 CPU kernels: needs AVX512-FP16/AMX)",
            hint="use --precision bf16 or fp32 here; fp16 works on GPUs",
        )
    if precision == "bf16" and not acc.is_bf16_supported():
        raise TrainError(
            f"--precision bf16 is not supported by the {acc.device_name()} accelerator",
            hint="use --precision fp16 or fp32",
        )


def resolve_config(args, world_size: int) -> dict:
    """The DeepSpeed config this run uses, validated by DeepSpeed for `world_size` ranks."""
    batch = resolve_batch(world_size, args.micro_batch, args.grad_accum, args.global_batch)
    cfg = build_config(
        batch=batch,
        zero=args.zero,
        offload=args.offload,
        precision=args.precision,
        lr=args.lr,
        total_steps=args.total_steps,
        on_cpu=_on_cpu(),
        monitor=args.monitor,
        monitor_dir=args.monitor_dir,
        job_name=args.job_name,
        fused_adamw=fused_adamw_available(_device_type()),
    )
    if args.ds_config:
        cfg = merge_user_config(cfg, load_user_config(args.ds_config), world_size)
    validate(cfg, world_size)
    return cfg


def _precision_of(cfg: dict):
    import torch

    if cfg.get("bf16", {}).get("enabled"):
        return torch.bfloat16, "bf16"
    if cfg.get("fp16", {}).get("enabled"):
        return torch.float16, "fp16"
    return torch.float32, "fp32"


def _finished_checkpoint(args):
    """(path, step) of a complete checkpoint that already holds every step, read from its marker
    before any process group starts (every rank reads the same files and leaves together)."""
    found = checkpoint.resolve_resume(args.resume, args.checkpoint_dir) if args.resume == "auto" else None
    if found is None:
        return None
    meta = checkpoint.read_marker(*found) or {}
    step = int(meta.get("step", -1))
    return (os.path.join(*found), step) if step >= args.total_steps else None


def _process_start() -> float:
    """When this process started (epoch seconds), from /proc; now where /proc is missing."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def run(args) -> int:
    started_at = _process_start()
    info = dist.discover()
    dist.default_threads(info)
    dist.export_env(info)
    is_main = info.rank == 0
    if info.local_rank == 0:  # one line per node: where the ranks run (pods, schedulers alike)
        import socket

        print(
            f"[hpc-train] node {socket.gethostname()}: rank {info.rank} of {info.world_size}, pid {os.getpid()}",
            flush=True,
        )

    def say(msg):
        if is_main:
            print(msg, flush=True)

    # Everything a user can get wrong is checked before the process group starts.
    from .data import build_data, micro_batches_per_epoch, train_loader
    from .models import build_model, check_model_name, memory_format
    from . import factory
    from . import lm as lm_kind

    # a model kind with its own batches, loss (and eval): the user's factories or a language model;
    # None: a built-in classifier
    kind = factory.prepare(args) or lm_kind.prepare(args)
    lm = kind if isinstance(kind, lm_kind.LanguageModel) else None
    if kind is None:
        check_model_name(args.model)
    monitor.check(args.monitor)
    data = (
        kind.data
        if kind
        else build_data(
            args.data,
            args.image_size,
            num_classes=args.num_classes,
            synthetic_samples=args.synthetic_samples,
            seed=args.seed,
        )
    )
    # Steps depend on the batch, the batch on the config: resolve with a provisional step count.
    args.total_steps = args.steps or 1
    cfg = resolve_config(args, info.world_size)
    batch = batch_of(cfg, info.world_size)
    steps_per_epoch = micro_batches_per_epoch(len(data.train), batch.micro, info.world_size) // batch.accum
    if steps_per_epoch == 0:
        raise TrainError(
            f"one optimizer step needs {batch.global_} samples but {args.data} has {len(data.train)}",
            hint="lower --grad-accum or --micro-batch",
        )
    args.total_steps = args.steps or args.epochs * steps_per_epoch
    cfg = resolve_config(args, info.world_size)
    dtype, precision = _precision_of(cfg)
    check_precision(precision)
    done = _finished_checkpoint(args)
    if done:  # a later link of a chain whose training has finished: nothing to start
        say(f"training already complete at step {done[1]} (checkpoint {done[0]}): nothing to do")
        return 0

    import deepspeed
    import deepspeed.comm as dcomm
    import torch
    import torch.nn.functional as F

    imported_at = time.time()

    # The process group and DeepSpeed's engine (which JIT-builds its ops on first use in an
    # environment, silently, for up to minutes): say so, so the follower can show progress.
    say("[hpc-train] starting DeepSpeed: process group, engine and ops (built once per environment)")
    init_started = time.perf_counter()
    dist.init_distributed(info)
    group_at = time.time()
    from . import watchdog

    wd = watchdog.start(info)  # hangs and stragglers, watched from outside each rank's main thread
    from deepspeed.accelerator import get_accelerator

    acc = get_accelerator()
    sync = acc.synchronize if acc.device_name() != "cpu" else (lambda: None)  # GPU work ends when it is done
    torch.manual_seed(args.seed)
    model = kind.build() if kind else build_model(args.model, data.num_classes)
    rate = lm_kind.token_rate(lm, model, acc.device_name(), precision) if lm else None  # before ZeRO-3 partitions it
    if lm and rate:
        say(lm_kind.describe(lm, model, rate, acc.device_name()))
    # The batches only: convolutions follow their input's layout, and DeepSpeed's engine moves
    # parameters as flat bytes (its broadcast refuses a channels_last weight).
    layout = None if kind else memory_format(model, args.memory_format, acc.device_name(), precision)
    if layout is not None:
        say("[hpc-train] image batches in channels_last (NHWC) memory format (--memory-format)")
    cfg = bf16_as_autocast(
        cfg,
        args.bf16_mode,
        model,
        acc.device_name() == "cpu",
        load_user_config(args.ds_config) if args.ds_config else None,
    )
    if cfg.get("torch_autocast", {}).get("enabled") and precision == "bf16":
        validate(cfg, info.world_size)
        dtype = torch.float32  # the batches stay fp32: autocast casts them inside the forward
        say("[hpc-train] bf16 as torch autocast over fp32 weights (--bf16-mode)")
    to_layout = {"memory_format": layout or torch.preserve_format}
    ds_startup.skip_muon_import(cfg)
    from deepspeed.runtime.constants import GRADIENT_CLIPPING_DEFAULT

    ds_cfg, max_norm = own_clipping(cfg, GRADIENT_CLIPPING_DEFAULT)  # ZeRO-0 fp32: clipped below, no collective
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_cfg)
    say(f"[hpc-train] DeepSpeed ready in {time.perf_counter() - init_started:.1f} s")
    ready_at = time.time()
    device = engine.device
    meta = {
        "model": args.model,
        "data": args.data,
        "num_classes": data.num_classes,
        "image_size": data.image_size,
        "zero_stage": engine.zero_optimization_stage(),
        "precision": precision,
        "memory_format": "channels_last" if layout is not None else "as built",
        "world_size": info.world_size,
        "global_batch": batch.global_,
        "micro_batch": batch.micro,
        "grad_accum": batch.accum,
        "seed": args.seed,
    }

    step = 0
    found = checkpoint.resolve_resume(args.resume, args.checkpoint_dir)
    if found is not None:
        saved = checkpoint.load(engine, *found)
        if saved.get("model") != args.model:
            raise TrainError(f"checkpoint {found[1]} is of model {saved.get('model')}, not {args.model}")
        if saved.get("global_batch") != batch.global_:
            say(
                f"warning: checkpoint global batch {saved.get('global_batch')} != {batch.global_}; "
                "data position follows the step count"
            )
        step = int(saved["step"])
        say(f"resumed from {os.path.join(*found)} at step {step}")
    # TensorBoard and W&B continue the axis DeepSpeed restored with the checkpoint (its global_samples)
    monitors = (
        monitor.open_monitors(
            args.monitor,
            monitor_dir=args.monitor_dir,
            job_name=args.job_name,
            checkpoint_dir=args.checkpoint_dir,
            samples=engine.global_samples,
            config=meta,
            say=say,
        )
        if is_main
        else None
    )
    stop = StopRequest(os.environ.get("HPC_LAUNCH_STOP"), os.environ.get("HPC_LAUNCH_DEADLINE"))
    say(
        f"training {args.model} on {args.data}: world={info.world_size} ({info.source}) zero={meta['zero_stage']} "
        f"offload={args.offload} precision={precision} micro={batch.micro} accum={batch.accum} global={batch.global_} "
        f"steps={args.total_steps} steps/epoch={steps_per_epoch} threads/rank={torch.get_num_threads()}"
    )

    from .metrics import StepMeter, step_line

    meter = StepMeter(batch.global_)
    last_saved = step
    started = time.perf_counter()
    while step < args.total_steps:
        epoch, in_epoch = divmod(step, steps_per_epoch)
        batches = iter(
            train_loader(
                data.train,
                batch.micro,
                info.rank,
                info.world_size,
                args.seed,
                epoch,
                in_epoch * batch.accum,
                args.num_workers,
            )
        )
        for _ in range(in_epoch, steps_per_epoch):
            if step >= args.total_steps:
                break
            loss_sum = torch.zeros((), device=device)
            work = 0.0  # this rank's own part of the step (data + forward): no collective waits in it
            for _ in range(batch.accum):
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
            if wd is not None:
                wd.progress(step, work)
            stop_asked = False
            if step % args.log_every == 0 or step == args.total_steps:
                # one all-reduce and one host sync for the loss and the stop request (asked every
                # --log-every steps, so the log's steps line up with it): [loss sum, ranks asked]
                shared = torch.stack([loss_sum.float() / batch.accum, torch.tensor(float(stop.local()), device=device)])
                dcomm.all_reduce(shared)
                loss_total, asked = shared.tolist()
                loss_value, stop_asked = loss_total / info.world_size, asked > 0
                say(step_line(step, epoch, loss_value, engine.get_lr()[0], meter, info.world_size, rate))
                events = [
                    ("Train/Samples/train_loss", loss_value, engine.global_samples),
                    ("Train/Samples/samples_per_sec", meter.average, engine.global_samples),
                ]
                if is_main and engine.monitor.enabled:  # DeepSpeed's CSV monitor logs lr itself, not the loss
                    engine.monitor.write_events(events)
                if monitors is not None:
                    monitors.write([*events, ("Train/Samples/lr", engine.get_lr()[0], engine.global_samples)])
            if step == 1:  # epoch seconds of each start-up phase on rank 0 (bench/bench_launch.py)
                say(
                    f"[hpc-train] start-up: process={started_at:.3f} imported={imported_at:.3f} "
                    f"process_group={group_at:.3f} deepspeed={ready_at:.3f} first_step={time.time():.3f}"
                )
            if args.checkpoint_dir and args.checkpoint_every and step % args.checkpoint_every == 0:
                with watchdog.busy(wd):
                    checkpoint.save(engine, args.checkpoint_dir, step, meta)
                last_saved = step
            if stop_asked and step < args.total_steps:
                # the walltime is near: a complete checkpoint now, and an exit code that says "resume me"
                if wd is not None:
                    wd.stop()
                if not args.checkpoint_dir:
                    say(
                        f"[hpc-train] stopping for time at step {step} with no --checkpoint-dir: nothing to resume from"
                    )
                    return RESUMABLE_EXIT
                if last_saved != step:
                    checkpoint.save(engine, args.checkpoint_dir, step, meta)
                say(
                    f"[hpc-train] stopped for time at step {step} of {args.total_steps}: checkpoint saved, resumable "
                    f"(exit {RESUMABLE_EXIT})"
                )
                dcomm.barrier()
                return RESUMABLE_EXIT
    if wd is not None:
        wd.stop()
    if args.checkpoint_dir and last_saved != step:
        checkpoint.save(engine, args.checkpoint_dir, step, meta)
    wall = time.perf_counter() - started
    # ended_at lets `hpc-launch logs --summary` split the job's time into start-up and training
    say(f"{protocol.TRAINING_FINISHED}steps={step} wall_s={wall:.1f} ended_at={time.time():.3f}")

    if lm and data.val is not None and not args.no_eval:
        evaluated = time.perf_counter()
        engine.eval()
        result = lm_kind.perplexity(
            engine, lm, data.val, info.rank, info.world_size, batch.micro, device, args.eval_limit, dcomm.all_reduce
        )
        say(lm_kind.perplexity_line(result, split="val", step=step, time_s=f"{time.perf_counter() - evaluated:.1f}"))
    elif kind is None and data.val is not None and not args.no_eval:  # a classifier's accuracy
        from .evaluate import accuracy, eval_line

        evaluated = time.perf_counter()
        engine.eval()
        result = accuracy(
            lambda x: engine(x.to(device, non_blocking=True).to(dtype, **to_layout)),
            data.val,
            info.rank,
            info.world_size,
            batch_size=max(batch.micro, 64),
            limit=args.eval_limit,
            all_reduce=dcomm.all_reduce,
        )
        engine.train()
        # time_s: the summary accounts for it between training and the job's end (hpc_launch/display.py)
        say(eval_line(result, split="val", step=step, time_s=f"{time.perf_counter() - evaluated:.1f}"))
    dcomm.barrier()
    dcomm.destroy_process_group()
    return 0
