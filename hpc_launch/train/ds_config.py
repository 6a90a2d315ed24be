"""DeepSpeed config from a few named presets, batch arithmetic, and DeepSpeed's own validation.

Pure Python until `validate()`, which imports DeepSpeed: the launcher can call
`resolve_batch()`/`build_config()`/`validate()` before submitting a job for N ranks.
"""

from __future__ import annotations

import contextlib
import copy
import json
from dataclasses import dataclass
from typing import Optional

from .errors import TrainError
from .monitor import parse_monitors

ZERO_STAGES = (0, 1, 2, 3)
OFFLOADS = ("none", "optimizer", "optimizer+params")
# The ZeRO stages each offload works with: there are optimizer states to offload from ZeRO-1 on;
# only ZeRO-3 partitions (and so can offload) the parameters.
OFFLOAD_STAGES = {"none": (0, 1, 2, 3), "optimizer": (1, 2, 3), "optimizer+params": (3,)}
PRECISIONS = ("fp32", "bf16", "fp16")
DEFAULT_MICRO_BATCH = 32
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


@dataclass(frozen=True)
class Batch:
    micro: int
    accum: int
    global_: int
    world_size: int


_FIT_HINT = (
    "train_batch_size = micro_batch_per_gpu * grad_accum * world_size; "
    "change --global-batch, --micro-batch or --grad-accum"
)


def _fit_error(micro, accum, global_, world) -> TrainError:
    return TrainError(
        f"batch arithmetic does not fit: global batch {global_} != micro-batch {micro} "
        f"x grad-accum {accum} x world size {world}",
        hint=_FIT_HINT,
    )


def _underivable(global_, known_name, known, world, missing_name) -> TrainError:
    return TrainError(
        f"batch arithmetic does not fit: global batch {global_} is not a multiple of "
        f"{known_name} {known} x world size {world} = {known * world}, so no whole "
        f"{missing_name} gives it",
        hint=_FIT_HINT,
    )


def resolve_batch(
    world_size: int, micro: Optional[int] = None, accum: Optional[int] = None, global_: Optional[int] = None
) -> Batch:
    """Fill in whichever of the three numbers is missing; refuse combinations that cannot hold."""
    for name, value in (("micro-batch", micro), ("grad-accum", accum), ("global batch", global_)):
        if value is not None and value < 1:
            raise TrainError(f"{name} must be at least 1, got {value}")
    if global_ is None:
        micro, accum = micro or DEFAULT_MICRO_BATCH, accum or 1
        return Batch(micro, accum, micro * accum * world_size, world_size)
    if micro is None and accum is None:
        accum = 1
    if micro is None:
        assert accum is not None
        micro, rest = divmod(global_, accum * world_size)
        if rest or micro == 0:
            raise _underivable(global_, "grad-accum", accum, world_size, "micro-batch")
    elif accum is None:
        assert micro is not None
        accum, rest = divmod(global_, micro * world_size)
        if rest or accum == 0:
            raise _underivable(global_, "micro-batch", micro, world_size, "grad-accum")
    assert micro is not None and accum is not None  # derived above when missing
    if micro * accum * world_size != global_:
        raise _fit_error(micro, accum, global_, world_size)
    return Batch(micro, accum, global_, world_size)


def stages_text(stages) -> str:
    """(1, 2, 3) -> "1, 2 or 3"."""
    words = [str(z) for z in stages]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _check_choices(zero: int, offload: str, precision: str) -> None:
    """Refuse a stage, offload or precision the presets do not know, or an offload the stage cannot do."""
    if zero not in ZERO_STAGES:
        raise TrainError(f"--zero must be one of 0,1,2,3, got {zero}")
    if offload not in OFFLOADS:
        raise TrainError(f"--offload must be one of {', '.join(OFFLOADS)}, got {offload}")
    if precision not in PRECISIONS:
        raise TrainError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision}")
    if zero not in OFFLOAD_STAGES[offload]:
        why = " (only ZeRO-3 partitions parameters)" if offload == "optimizer+params" else ""
        raise TrainError(f"--offload {offload} needs --zero {stages_text(OFFLOAD_STAGES[offload])}{why}")


def _base_config(batch: Batch, zero: int, lr: float, total_steps: int) -> dict:
    """The batch, AdamW with warmup/cosine LR over `total_steps`, and the ZeRO stage."""
    return {
        "train_batch_size": batch.global_,
        "train_micro_batch_size_per_gpu": batch.micro,
        "gradient_accumulation_steps": batch.accum,
        # Our own per-step line carries throughput; DeepSpeed's would interleave with it.
        "steps_per_print": 10**9,
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
        "scheduler": {
            "type": "WarmupCosineLR",
            "params": {
                "total_num_steps": max(1, total_steps),
                "warmup_num_steps": max(1, min(100, total_steps // 10)),
                "warmup_min_ratio": 0.0,
                "cos_min_ratio": 0.01,
            },
        },
        "zero_optimization": {"stage": zero},
        "wall_clock_breakdown": False,
    }


def _choose_adamw(cfg: dict, offload: str, on_cpu: bool, fused_adamw: bool) -> None:
    """torch's AdamW (fused where it can be) wherever DeepSpeed's own would have to be built first."""
    if on_cpu:
        # DeepSpeed's FusedAdam and CPUAdam are JIT-compiled ops (a minute cold); on a CPU-only run
        # torch's AdamW does the same work where the parameters already are, with nothing to build.
        cfg["optimizer"]["params"]["torch_adam"] = True
        if offload != "none":
            cfg["zero_force_ds_cpu_optimizer"] = False  # ZeRO-Offload otherwise insists on CPUAdam
    elif offload == "none":
        # On GPUs too: torch's AdamW ships compiled, while DeepSpeed's FusedAdam is built by the first
        # job of each environment (33 s on an H200 with 16 cores; speeds side by side in
        # docs/training.md). With offload the optimizer runs on the CPU: DeepSpeed's CPUAdam stays.
        cfg["optimizer"]["params"]["torch_adam"] = True
    if fused_adamw and cfg["optimizer"]["params"].get("torch_adam"):
        # torch's fused AdamW: one kernel over all parameters instead of a loop of small ops; the
        # same update (tests/train/test_ds_config.py), 5x faster per step on CPU (docs/training.md).
        cfg["optimizer"]["params"]["fused"] = True


def _zero_settings(zero_cfg: dict, zero: int, offload: str, on_cpu: bool) -> None:
    """Buckets from ZeRO-2 on, and where the offloaded optimizer states and parameters go."""
    if zero >= 2:
        zero_cfg.update(
            {
                "overlap_comm": not on_cpu,
                "contiguous_gradients": True,
                "reduce_bucket_size": 5e8,
                "allgather_bucket_size": 5e8,
            }
        )
    if offload != "none":
        zero_cfg["offload_optimizer"] = {"device": "cpu", "pin_memory": not on_cpu}
    if offload == "optimizer+params":
        zero_cfg["offload_param"] = {"device": "cpu", "pin_memory": not on_cpu}


def _precision_settings(cfg: dict, precision: str) -> None:
    """bf16 or fp16 weights, with buffers (BatchNorm's statistics) in the same type."""
    if precision == "bf16":
        cfg["bf16"] = {"enabled": True}
        # DeepSpeed (>= 0.18) casts parameters only; BatchNorm then refuses bf16 input with fp32 running
        # stats, on CPUs and on GPUs alike (cuDNN's backward on an H200: "Expected running_mean to have
        # type BFloat16 but got Float", docs/training.md). Buffers follow the parameters.
        cfg["data_types"] = {"buffer_dtype": "bf16"}
    elif precision == "fp16":
        # Dynamic loss scaling (loss_scale 0), the settings of the seeds' fp16 run.
        cfg["fp16"] = {
            "enabled": True,
            "loss_scale": 0,
            "initial_scale_power": 15,
            "loss_scale_window": 500,
            "hysteresis": 2,
            "min_loss_scale": 1,
        }
        cfg["data_types"] = {"buffer_dtype": "fp16"}  # the same BatchNorm rule as bf16


def build_config(
    *,
    batch: Batch,
    zero: int = 0,
    offload: str = "none",
    precision: str = "fp32",
    lr: float = 1e-3,
    total_steps: int = 1000,
    on_cpu: bool = False,
    monitor: str | tuple = "none",
    monitor_dir: str = "runs",
    job_name: str = "hpc-train",
    fused_adamw: bool = False,
) -> dict:
    """The preset: AdamW + warmup/cosine LR, ZeRO stage, offload, precision, monitor.
    `fused_adamw`: torch has a fused AdamW kernel for this device (`fused_adamw_available`)."""
    _check_choices(zero, offload, precision)
    cfg = _base_config(batch, zero, lr, total_steps)
    _choose_adamw(cfg, offload, on_cpu, fused_adamw)
    _zero_settings(cfg["zero_optimization"], zero, offload, on_cpu)
    _precision_settings(cfg, precision)
    # TensorBoard and W&B are opened by hpc_launch/train/monitor.py after the resume, where the step is known
    monitors = parse_monitors(monitor) if isinstance(monitor, str) else tuple(monitor)
    if "csv" in monitors:
        cfg["csv_monitor"] = {"enabled": True, "output_path": monitor_dir, "job_name": job_name}
    return cfg


def own_clipping(cfg: dict, deepspeed_default: float) -> tuple:
    """(config for DeepSpeed, max norm the trainer clips to itself; 0.0: DeepSpeed clips, or nobody).

    ZeRO-0 in fp32 is the one case where DeepSpeed clips in the engine: per-parameter norms and
    an extra all-reduce every step that averages a norm every rank already holds (it is there
    for MoE experts, which our models lack). After the gradient all-reduce every rank has the same
    gradients, so torch's clip_grad_norm_ gives the same result with no collective: measured on
    2 CPU ranks, DeepSpeed's clip was most of the step's time outside forward and backward."""
    max_norm = float(cfg.get("gradient_clipping", deepspeed_default) or 0.0)
    stage = cfg.get("zero_optimization", {}).get("stage", 0)
    mixed = any(isinstance(cfg.get(k), dict) and cfg[k].get("enabled") for k in ("fp16", "bf16", "amp"))
    # torch_autocast in bf16 keeps fp32 weights and gradients and no loss scaler: DeepSpeed clips
    # them as it clips fp32 ones (its slow per-parameter path). In fp16 a scaler must unscale first.
    autocast = cfg.get("torch_autocast")
    if isinstance(autocast, dict) and autocast.get("enabled") and autocast_dtype(cfg) != "bfloat16":
        mixed = True
    if max_norm <= 0 or stage != 0 or mixed:
        return cfg, 0.0
    return {**cfg, "gradient_clipping": 0.0}, max_norm


BF16_MODES = ("auto", "weights", "autocast")


def autocast_dtype(cfg: dict) -> str:
    """The dtype of a torch_autocast section, in DeepSpeed's spelling (its default is bfloat16)."""
    return str(cfg.get("torch_autocast", {}).get("dtype", "bfloat16")).replace("torch.", "")


def has_batchnorm(model) -> bool:
    import torch

    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())


def bf16_as_autocast(cfg: dict, mode: str, model, on_cpu: bool, user: Optional[dict] = None) -> dict:
    """The bf16 preset as DeepSpeed's torch_autocast mode (fp32 weights, bf16 autocast in the engine's
    forward), where that is the faster recipe; otherwise `cfg` unchanged.

    DeepSpeed's bf16 mode keeps bf16 weights and bf16 BatchNorm statistics, which cuDNN's fast
    channels_last kernels do not take: ResNet-50 on one H100 ran 2228 samples/s in it against 3400 in
    torch_autocast (bench/bench_gpu_recipes.py, docs/training.md). ZeRO-0's bf16 mode is DeepSpeed's
    BF16_Optimizer, which walks every parameter in Python at each step: GPT-2 124M ran 113.7k tokens/s
    in it against 120.8k under torch_autocast. Above ZeRO-0 a model without BatchNorm had no winner
    (within 2-8 %, either way), so `auto` chooses autocast on accelerators for a model with BatchNorm
    or at ZeRO-0 (the CPU was not measured). `weights` and `autocast` force one. A user's --ds-config
    (`user`) that chooses a precision section wins."""
    if mode not in BF16_MODES:
        raise TrainError(f"--bf16-mode must be one of {', '.join(BF16_MODES)}, got {mode}")
    if not cfg.get("bf16", {}).get("enabled") or mode == "weights":
        return cfg
    if user and any(k in user for k in ("bf16", "fp16", "torch_autocast", "data_types")):
        return cfg
    zero0 = cfg.get("zero_optimization", {}).get("stage", 0) == 0
    if mode == "auto" and (on_cpu or not (zero0 or has_batchnorm(model))):
        return cfg
    out = {k: v for k, v in cfg.items() if k not in ("bf16", "data_types")}
    out["torch_autocast"] = {"enabled": True, "dtype": "bfloat16"}
    return out


def _deep_merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_user_config(path: str) -> dict:
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise TrainError(f"DeepSpeed config not found: {path}") from None
    except json.JSONDecodeError as err:
        raise TrainError(f"DeepSpeed config {path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise TrainError(f"DeepSpeed config {path} must be a JSON object")
    return data


def fused_adamw_available(device_type: str) -> bool:
    """Whether this torch has a fused AdamW kernel for `device_type` ("cpu", "cuda", "xpu"): CPU
    since torch 2.4. torch's own list of the devices with fused optimizer kernels is private,
    so a torch without it gets the default implementation."""
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    except ImportError:
        return False
    return device_type in _get_fused_kernels_supported_devices()


def merge_user_config(preset: dict, user: dict, world_size: int) -> dict:
    """The user's JSON wins key by key. If it sets any batch key, its batch numbers replace the
    preset's and the missing ones are derived (so a bad combination gets the same clear error)."""
    optimizer = user.get("optimizer")
    if isinstance(optimizer, dict) and str(optimizer.get("type", "AdamW")).lower() not in ("adam", "adamw"):
        # another optimizer replaces the preset's whole: Adam's parameters (torch_adam) mean nothing to it
        preset = {k: v for k, v in preset.items() if k != "optimizer"}
    elif isinstance(optimizer, dict) and "foreach" in (optimizer.get("params") or {}):
        # the user chose the implementation: torch refuses fused and foreach together
        params = {k: v for k, v in preset["optimizer"]["params"].items() if k != "fused"}
        preset = {**preset, "optimizer": {**preset["optimizer"], "params": params}}
    merged = _deep_merge(preset, {k: v for k, v in user.items() if k not in BATCH_KEYS})
    if any(k in user for k in BATCH_KEYS):
        batch = resolve_batch(
            world_size,
            user.get("train_micro_batch_size_per_gpu"),
            user.get("gradient_accumulation_steps"),
            user.get("train_batch_size"),
        )
        merged.update(batch_keys(batch))
    return merged


def batch_keys(batch: Batch) -> dict:
    return {
        "train_batch_size": batch.global_,
        "train_micro_batch_size_per_gpu": batch.micro,
        "gradient_accumulation_steps": batch.accum,
    }


def batch_of(cfg: dict, world_size: int) -> Batch:
    return Batch(
        cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"], cfg["train_batch_size"], world_size
    )


class _FixedWorld:
    """Stands in for deepspeed.comm inside DeepSpeedConfig so a config is checked for N ranks
    before any process group exists (DeepSpeedConfig otherwise assumes a world of 1)."""

    def __init__(self, world_size: int):
        self.world_size = world_size

    def get_rank(self):
        return 0

    def get_world_size(self, group=None):
        return self.world_size


@contextlib.contextmanager
def _world(world_size: int):
    import deepspeed.runtime.config as ds_runtime_config

    real = ds_runtime_config.dist
    if real.is_initialized():
        yield
        return
    ds_runtime_config.dist = _FixedWorld(world_size)
    try:
        yield
    finally:
        ds_runtime_config.dist = real


def validate(cfg: dict, world_size: int):
    """Run DeepSpeed's own config parsing/sanity checks for `world_size` ranks -> DeepSpeedConfig."""
    from deepspeed.runtime.config import DeepSpeedConfig

    try:
        with _world(world_size):
            return DeepSpeedConfig(copy.deepcopy(cfg))
    except AssertionError as err:
        if "batch" in str(err):
            raise _fit_error(
                cfg.get("train_micro_batch_size_per_gpu"),
                cfg.get("gradient_accumulation_steps"),
                cfg.get("train_batch_size"),
                world_size,
            ) from None
        raise TrainError(f"DeepSpeed rejected the config: {err}") from None
    except (ValueError, TypeError) as err:  # pydantic ValidationError is a ValueError
        raise TrainError(f"DeepSpeed rejected the config: {' '.join(str(err).split())}") from None
