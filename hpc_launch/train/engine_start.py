"""DeepSpeed up for one rank: the process group, the watchdog, the model and its engine, then the
resume from a checkpoint and the monitors. What the step loop and the end read is one `TrainState`."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

from . import checkpoint, dist, ds_startup, monitor
from .ds_config import bf16_as_autocast, load_user_config, own_clipping, validate
from .errors import TrainError
from .run_plan import RunPlan


@dataclass
class StartTimes:
    """Epoch seconds of each start-up phase, said on rank 0 at the first step (bench/bench_launch.py)."""

    process: float
    imported: float
    process_group: float = 0.0
    deepspeed: float = 0.0


@dataclass
class TrainState:
    """One rank's training once DeepSpeed is up; `step` and `last_saved` move as it trains."""

    args: Any
    plan: RunPlan
    engine: Any
    device: Any
    dtype: Any  # the batches' dtype (fp32 under bf16 autocast)
    to_layout: dict  # .to() keywords that lay an image batch out as the model wants it
    max_norm: float  # clipped by the trainer itself when > 0 (ds_config.own_clipping)
    rate: Any  # a language model's token rate (lm.token_rate), else None
    wd: Any  # the watchdog, or None
    sync: Callable[[], None]  # waits for the device's queued work (nothing on CPU)
    meta: dict  # what a checkpoint records about the run
    times: StartTimes
    monitors: Any = None  # TensorBoard/W&B on rank 0 (monitor.open_monitors)
    batches: Any = None  # data.TrainBatches: built before the engine, its workers forked before any thread
    stop: Any = None  # the walltime's stop request (StopRequest)
    step: int = 0
    last_saved: int = 0
    started: float = 0.0  # perf_counter when the step loop began


def _model_and_config(args, plan: RunPlan, device_name: str) -> Tuple[Any, Any, Any, dict, Any]:
    """(model, token rate, image layout, config, batch dtype): the model built, and the config
    settled for it (bf16 as autocast where that is faster)."""
    import torch

    from .models import build_model, memory_format
    from . import lm as lm_kind

    kind, lm, say = plan.kind, plan.lm, plan.say
    torch.manual_seed(args.seed)
    model = kind.build() if kind else build_model(args.model, plan.data.num_classes)
    rate = lm_kind.token_rate(lm, model, device_name, plan.precision) if lm else None  # before ZeRO-3 partitions it
    if lm and rate:
        say(lm_kind.describe(lm, model, rate, device_name))
    # The batches only: convolutions follow their input's layout, and DeepSpeed's engine moves
    # parameters as flat bytes (its broadcast refuses a channels_last weight).
    layout = None if kind else memory_format(model, args.memory_format, device_name, plan.precision)
    if layout is not None:
        say("[hpc-train] image batches in channels_last (NHWC) memory format (--memory-format)")
    user = load_user_config(args.ds_config) if args.ds_config else None
    cfg = bf16_as_autocast(plan.cfg, args.bf16_mode, model, device_name == "cpu", user)
    dtype = plan.dtype
    if cfg.get("torch_autocast", {}).get("enabled") and plan.precision == "bf16":
        validate(cfg, plan.info.world_size)
        dtype = torch.float32  # the batches stay fp32: autocast casts them inside the forward
        say("[hpc-train] bf16 as torch autocast over fp32 weights (--bf16-mode)")
    return model, rate, layout, cfg, dtype


def _meta(args, plan: RunPlan, engine, layout) -> dict:
    batch = plan.batch
    return {
        "model": args.model,
        "data": args.data,
        "num_classes": plan.data.num_classes,
        "image_size": plan.data.image_size,
        "zero_stage": engine.zero_optimization_stage(),
        "precision": plan.precision,
        "memory_format": "channels_last" if layout is not None else "as built",
        "world_size": plan.info.world_size,
        "global_batch": batch.global_,
        "micro_batch": batch.micro,
        "grad_accum": batch.accum,
        "seed": args.seed,
    }


def start(args, plan: RunPlan, started_at: float) -> TrainState:
    """The process group and DeepSpeed's engine (which JIT-builds its ops on first use in an
    environment, silently, for up to minutes): said first, so the follower can show progress."""
    import deepspeed
    import torch

    times = StartTimes(process=started_at, imported=time.time())
    plan.say("[hpc-train] starting DeepSpeed: process group, engine and ops (built once per environment)")
    init_started = time.perf_counter()
    dist.init_distributed(plan.info)
    times.process_group = time.time()
    from . import watchdog

    wd = watchdog.start(plan.info)  # hangs and stragglers, watched from outside each rank's main thread
    from deepspeed.accelerator import get_accelerator

    acc = get_accelerator()
    sync = acc.synchronize if acc.device_name() != "cpu" else (lambda: None)  # GPU work ends when it is done
    model, rate, layout, cfg, dtype = _model_and_config(args, plan, acc.device_name())
    to_layout = {"memory_format": layout or torch.preserve_format}
    ds_startup.skip_muon_import(cfg)
    from deepspeed.runtime.constants import GRADIENT_CLIPPING_DEFAULT

    ds_cfg, max_norm = own_clipping(cfg, GRADIENT_CLIPPING_DEFAULT)  # ZeRO-0 fp32: clipped below, no collective
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_cfg)
    plan.say(f"[hpc-train] DeepSpeed ready in {time.perf_counter() - init_started:.1f} s")
    times.deepspeed = time.time()
    meta = _meta(args, plan, engine, layout)
    return TrainState(args, plan, engine, engine.device, dtype, to_layout, max_norm, rate, wd, sync, meta, times)


def resume(state: TrainState) -> int:
    """The step to start from: 0, or a checkpoint's (--resume), loaded into the engine."""
    args, plan = state.args, state.plan
    found = checkpoint.resolve_resume(args.resume, args.checkpoint_dir)
    if found is None:
        return 0
    saved = checkpoint.load(state.engine, *found)
    if saved.get("model") != args.model:
        raise TrainError(f"checkpoint {found[1]} is of model {saved.get('model')}, not {args.model}")
    if saved.get("global_batch") != plan.batch.global_:
        plan.say(
            f"warning: checkpoint global batch {saved.get('global_batch')} != {plan.batch.global_}; "
            "data position follows the step count"
        )
    step = int(saved["step"])
    plan.say(f"resumed from {os.path.join(*found)} at step {step}")
    return step


def open_monitors(state: TrainState) -> Optional[Any]:
    """TensorBoard and W&B on rank 0, continuing the axis DeepSpeed restored with the checkpoint
    (its global_samples); None on the other ranks."""
    args, plan = state.args, state.plan
    if plan.info.rank != 0:
        return None
    return monitor.open_monitors(
        args.monitor,
        monitor_dir=args.monitor_dir,
        job_name=args.job_name,
        checkpoint_dir=args.checkpoint_dir,
        samples=state.engine.global_samples,
        config=state.meta,
        say=plan.say,
    )
