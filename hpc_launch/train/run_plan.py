"""What a run decides before any process group starts: the model kind, the data, the batch, the
step count, the DeepSpeed config and the precision, each checked where a user can get it wrong.

Every rank decides the same from the same flags and files, so a refusal here is one line, once,
with nothing started (hpc_launch/train/__main__.py prints it); DeepSpeed is imported only for its
config validator and accelerator, torch's process group not at all.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

from . import checkpoint, monitor
from .ds_config import Batch, batch_of, build_config, fused_adamw_available, load_user_config
from .ds_config import merge_user_config, resolve_batch, validate
from .errors import TrainError
from .rank_info import RankInfo


@dataclass(frozen=True)
class RunPlan:
    """One rank's run as decided before DeepSpeed starts."""

    info: RankInfo
    say: Callable[[str], None]  # prints on rank 0 only
    kind: Any  # a model kind with its own batches and loss (the user's factories, a language model); None: a classifier
    lm: Any  # the kind when it is a language model (lm.LanguageModel), else None
    data: Any  # .train, .val, .num_classes, .image_size
    cfg: dict  # DeepSpeed's config, validated for the world size
    batch: Batch
    steps_per_epoch: int
    dtype: Any  # the batches' torch dtype
    precision: str  # "fp32", "bf16" or "fp16"


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


def _precision_of(cfg: dict) -> Tuple[Any, str]:
    import torch

    if cfg.get("bf16", {}).get("enabled"):
        return torch.bfloat16, "bf16"
    if cfg.get("fp16", {}).get("enabled"):
        return torch.float16, "fp16"
    return torch.float32, "fp32"


def finished_checkpoint(args) -> Optional[Tuple[str, int]]:
    """(path, step) of a complete checkpoint that already holds every step, read from its marker
    before any process group starts (every rank reads the same files and leaves together)."""
    found = checkpoint.resolve_resume(args.resume, args.checkpoint_dir) if args.resume == "auto" else None
    if found is None:
        return None
    meta = checkpoint.read_marker(*found) or {}
    step = int(meta.get("step", -1))
    return (os.path.join(*found), step) if step >= args.total_steps else None


def process_start() -> float:
    """When this process started (epoch seconds), from /proc; now where /proc is missing."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def _kind_and_data(args) -> Tuple[Any, Any, Any]:
    """(kind, lm, data): the user's factories or a language model with its data, else a built-in
    classifier's name checked and its image data built; the monitors named are checked too."""
    from .data import build_data
    from .models import check_model_name
    from . import factory
    from . import lm as lm_kind

    kind = factory.prepare(args) or lm_kind.prepare(args)
    lm = kind if isinstance(kind, lm_kind.LanguageModel) else None
    if kind is None:
        check_model_name(args.model)
    monitor.check(args.monitor)
    if kind:
        return kind, lm, kind.data
    data = build_data(
        args.data,
        args.image_size,
        num_classes=args.num_classes,
        synthetic_samples=args.synthetic_samples,
        seed=args.seed,
    )
    return kind, lm, data


def _steps_and_config(args, world_size: int, train_samples: int) -> Tuple[dict, Batch, int]:
    """(config, batch, steps per epoch), with args.total_steps set. Steps depend on the batch, the
    batch on the config: the config is resolved with a provisional step count, then again."""
    from .data import micro_batches_per_epoch

    args.total_steps = args.steps or 1
    cfg = resolve_config(args, world_size)
    batch = batch_of(cfg, world_size)
    steps_per_epoch = micro_batches_per_epoch(train_samples, batch.micro, world_size) // batch.accum
    if steps_per_epoch == 0:
        raise TrainError(
            f"one optimizer step needs {batch.global_} samples but {args.data} has {train_samples}",
            hint="lower --grad-accum or --micro-batch",
        )
    args.total_steps = args.steps or args.epochs * steps_per_epoch
    return resolve_config(args, world_size), batch, steps_per_epoch


def plan(args, info: RankInfo, say: Callable[[str], None]) -> RunPlan:
    """Everything a user can get wrong, checked before the process group starts."""
    kind, lm, data = _kind_and_data(args)
    cfg, batch, steps_per_epoch = _steps_and_config(args, info.world_size, len(data.train))
    dtype, precision = _precision_of(cfg)
    check_precision(precision)
    return RunPlan(info, say, kind, lm, data, cfg, batch, steps_per_epoch, dtype, precision)
