"""`hpc-launch plan`: per-GPU memory for model states under each ZeRO stage, and the stage to use.

Numbers come from DeepSpeed's own estimators (`estimate_zero2_model_states_mem_needs`,
`estimate_zero3_model_states_mem_needs`). The model is built on the meta device to count its
parameters (no weights allocated). torch/torchvision/deepspeed are imported lazily: the launcher
stays light until someone actually plans.

Model states only (fp16/bf16 params and grads, fp32 master params, grads and Adam moments):
activations, the data pipeline and communication buffers come on top, so a row "fits" when its
model states leave HEADROOM of the GPU's memory free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

GIB = 1024 ** 3
HEADROOM = 0.25  # fraction of GPU memory kept for activations and buffers
BUFFER_FACTOR = 1.5  # DeepSpeed's default additional_buffer_factor for CPU-side estimates


@dataclass(frozen=True)
class PlanRow:
    stage: int
    offload: str  # none | optimizer | optimizer+params
    gpu_gib: float  # per GPU
    cpu_gib: float  # per node (host memory)
    fits: bool
    source: str  # which estimator produced the row


@dataclass
class PlanResult:
    model: str
    total_params: int
    largest_layer_params: int
    nodes: int
    gpus_per_node: int
    gpu_mem_gib: float
    cpu_mem_gib: Optional[float]
    rows: List[PlanRow] = field(default_factory=list)
    recommended: Optional[PlanRow] = None


def count_params(model: str, num_classes: int = 1000) -> Tuple[int, int]:
    """(total params, params of the largest single module), from a meta-device build."""
    from train.models import build_model

    net = build_model(model, num_classes, device="meta")
    # Deduplicate shared parameters by identity: on the meta device every data_ptr() is 0, so
    # DeepSpeed's own model_to_params() would count each model as one parameter tensor.
    total = sum({id(p): p.numel() for p in net.parameters()}.values())
    largest = max((sum(p.numel() for p in m.parameters(recurse=False)) for m in net.modules()), default=0)
    return total, largest


def _rows(total: int, largest: int, nodes: int, gpus_per_node: int) -> List[Tuple[int, str, int, int, str]]:
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    n_gpus = nodes * gpus_per_node
    rows = []
    # DeepSpeed ships no estimator for stages 0 and 1; these use the byte accounting of its
    # stage-2 estimator (2 bytes 16-bit params + 18 bytes grads/master/Adam per parameter):
    # stage 0 replicates all 20; stage 1 replicates 16-bit params and grads (4) and partitions
    # the fp32 master params, grads and Adam moments (16).
    host = int(total * 4 * gpus_per_node * BUFFER_FACTOR)
    rows.append((0, "none", 20 * total, host, "stage-2 byte accounting"))
    rows.append((1, "none", 4 * total + int(16 * total / n_gpus), host, "stage-2 byte accounting"))
    for offload in (False, True):
        cpu, gpu = estimate_zero2_model_states_mem_needs(total, gpus_per_node, nodes, cpu_offload=offload,
                                                         additional_buffer_factor=BUFFER_FACTOR)
        rows.append((2, "optimizer" if offload else "none", gpu, cpu, "estimate_zero2_model_states_mem_needs"))
    for offload, params in ((False, False), (True, False), (True, True)):
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(total, largest, gpus_per_node, nodes,
                                                            cpu_offload=offload, cpu_offload_params=params,
                                                            zero_init=True, additional_buffer_factor=BUFFER_FACTOR)
        name = "optimizer+params" if params else ("optimizer" if offload else "none")
        rows.append((3, name, gpu, cpu, "estimate_zero3_model_states_mem_needs"))
    return rows


def plan_memory(model: str, nodes: int, gpus_per_node: int, gpu_mem_gib: float,
                cpu_mem_gib: Optional[float] = None) -> PlanResult:
    """Per-stage memory for `model` on nodes x gpus_per_node GPUs of gpu_mem_gib each.

    recommended: the first row that fits, in order of speed: no offload before offload, and
    the lowest stage (least communication) first; None when nothing fits."""
    if nodes < 1 or gpus_per_node < 1 or gpu_mem_gib <= 0:
        from hpc_launch.errors import SpecError

        raise SpecError(f"plan needs nodes >= 1, gpus_per_node >= 1 and GPU memory > 0 "
                        f"(got {nodes}, {gpus_per_node}, {gpu_mem_gib})")
    total, largest = count_params(model)
    result = PlanResult(model, total, largest, nodes, gpus_per_node, gpu_mem_gib, cpu_mem_gib)
    for stage, offload, gpu, cpu, source in _rows(total, largest, nodes, gpus_per_node):
        gpu_gib, cpu_gib = gpu / GIB, cpu / GIB
        fits = gpu_gib <= gpu_mem_gib * (1 - HEADROOM) and (cpu_mem_gib is None or cpu_gib <= cpu_mem_gib)
        result.rows.append(PlanRow(stage, offload, round(gpu_gib, 3), round(cpu_gib, 3), fits, source))
    order = sorted(result.rows, key=lambda r: (r.offload != "none", r.stage, r.offload))
    result.recommended = next((r for r in order if r.fits), None)
    return result


def format_plan(result: PlanResult) -> str:
    """Plain-text table (what `hpc-launch plan` prints)."""
    n_gpus = result.nodes * result.gpus_per_node
    lines = [
        f"{result.model}: {result.total_params / 1e6:.1f}M params (largest layer {result.largest_layer_params / 1e6:.2f}M)"
        f" on {result.nodes} node(s) x {result.gpus_per_node} GPU(s) = {n_gpus} GPUs of {result.gpu_mem_gib:g} GiB"
        + (f", {result.cpu_mem_gib:g} GiB host memory per node" if result.cpu_mem_gib else ""),
        "model states only (params, grads, optimizer); activations need the rest "
        f"(a row fits when it leaves {int(HEADROOM * 100)}% of GPU memory free)",
        f"{'stage':>5}  {'offload':<17} {'per GPU GiB':>11}  {'per node CPU GiB':>16}  fits",
    ]
    for row in result.rows:
        mark = "  <- recommended" if row == result.recommended else ""
        lines.append(f"{row.stage:>5}  {row.offload:<17} {row.gpu_gib:>11.3f}  {row.cpu_gib:>16.3f}  "
                     f"{'yes' if row.fits else 'no'}{mark}")
    if result.recommended is None:
        lines.append("nothing fits: use more nodes, a GPU with more memory, or a smaller model")
    else:
        r = result.recommended
        lines.append(f"recommended: --zero {r.stage} --offload {r.offload}")
    return "\n".join(lines)
