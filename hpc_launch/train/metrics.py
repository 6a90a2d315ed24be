"""Per-step throughput and memory, printed in the shared `[hpc-train] key=value` line format."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

from hpc_launch.metrics_line import format_step_line

GB = 1024**3


class StepMeter:
    """Current and running-average samples/s. The first `warmup` steps (graph setup, allocator
    growth, JIT) are left out of the running average, as DeepSpeed's ThroughputTimer does."""

    def __init__(self, samples_per_step: int, warmup: int = 2):
        self.samples_per_step = samples_per_step
        self.warmup = warmup
        self.steps = 0
        self._last = time.perf_counter()
        self._avg_start: Optional[float] = None
        self._avg_steps = 0
        self.current = 0.0

    def step(self) -> None:
        now = time.perf_counter()
        self.current = self.samples_per_step / max(now - self._last, 1e-9)
        self._last = now
        self.steps += 1
        if self.steps == self.warmup:
            self._avg_start = now
        elif self.steps > self.warmup:
            self._avg_steps += 1

    @property
    def average(self) -> float:
        if self._avg_start is None or self._avg_steps == 0:
            return self.current
        return self._avg_steps * self.samples_per_step / max(self._last - self._avg_start, 1e-9)


def memory_gb() -> tuple:
    """(allocated, peak) in GiB from the accelerator: device memory on GPUs, process RSS on CPU."""
    from deepspeed.accelerator import get_accelerator

    acc = get_accelerator()
    if acc.device_name() == "cpu":
        # The CPU accelerator's "max" only remembers RSS at the moments it was asked; the kernel's
        # ru_maxrss is the true peak of this process.
        import resource

        now = acc.memory_allocated()
        return now / GB, max(now, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) / GB
    return acc.memory_allocated() / GB, acc.max_memory_allocated() / GB


@dataclass(frozen=True)
class TokenRate:
    """What turns a language model's samples/s into tokens/s and MFU."""

    tokens_per_sample: int
    flops_per_token: float  # hpc_launch/train/lm.py flops_per_token
    peak_flops: Optional[float]  # one device's dense peak FLOP/s (hpc_launch/train/peak_flops.py); None: unknown

    def fields(self, meter: StepMeter, world_size: int) -> dict:
        tokens, avg_tokens = meter.current * self.tokens_per_sample, meter.average * self.tokens_per_sample
        # per device: the model FLOPs all ranks did per second, shared among them, over one device's peak
        mfu = avg_tokens * self.flops_per_token / world_size / self.peak_flops if self.peak_flops else float("nan")
        return {"tokens_per_sec": tokens, "avg_tokens_per_sec": avg_tokens, "mfu": mfu}


def step_line(
    step: int, epoch: int, loss: float, lr: float, meter: StepMeter, world_size: int, rate: Optional[TokenRate] = None
) -> str:
    alloc, peak = memory_gb()
    return format_step_line(
        step=step,
        epoch=epoch,
        loss=loss,
        lr=lr,
        samples_per_sec=meter.current,
        avg_samples_per_sec=meter.average,
        mem_alloc_gb=alloc,
        mem_peak_gb=peak,
        world_size=world_size,
        **(rate.fields(meter, world_size) if rate else {}),
    )
