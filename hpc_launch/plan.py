"""`hpc-launch plan`: per-GPU memory for model states under each ZeRO stage, and the stage to use.

Numbers come from DeepSpeed's own estimators (`estimate_zero2_model_states_mem_needs`,
`estimate_zero3_model_states_mem_needs`). The model is built on the meta device to count its
parameters (no weights allocated). torch/torchvision/deepspeed are imported lazily: the launcher
stays light until someone actually plans.

It is also the one place that checks a configuration before it is submitted (`check_points`,
for `sweep`): the entrypoint's own argument parser and batch arithmetic, DeepSpeed's config
validator and the same estimators. The launcher's render/submit path never imports it.

Model states (fp16/bf16 params and grads, fp32 master params, grads and Adam moments); for a
language model (hpc_launch/train/lm.py) also its activations at `--seq-len` and `--micro-batch`
(`activation_bytes`). The data pipeline and communication buffers come on top, so a row "fits"
when what it counts leaves HEADROOM of the GPU's memory free.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .errors import HpcLaunchError, SpecError

GIB = 1024**3
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
    # a language model's activations (activation_bytes): at this sequence length, micro-batch, precision
    seq_len: Optional[int] = None
    micro_batch: Optional[int] = None
    precision: Optional[str] = None
    activations_gib: Optional[float] = None  # per GPU, fused attention (SDPA on GPUs): counted in every row's fit
    activations_unfused_gib: Optional[float] = None  # with the attention scores stored (eager, CPU math path)


def is_language_model(model: str) -> bool:
    from hpc_launch.train.lm_sizes import is_lm_size

    return is_lm_size(model) or os.path.isfile(os.path.join(model, "config.json"))


def activation_bytes(shape: Any, seq_len: int, micro_batch: int, precision: str, fused_attention: bool) -> int:
    """A language model's activations per GPU for one micro-batch, held from forward to backward.

    Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
    section 4.1, no parallelism, no recomputation): a transformer layer stores
    s*b*h*(34 + 5*a*s/h) bytes with 16-bit activations (s sequence, b micro-batch, h hidden, a
    heads): 34*s*b*h for its inputs, projections, MLP, norms and dropout masks, and 5*a*s^2*b for
    the attention scores, their softmax and dropout, which a fused attention kernel (SDPA's
    flash or memory-efficient kernel on GPUs) does not store. A T5 decoder layer has a second
    (cross-)attention block: 47*s*b*h + 10*a*s^2*b. fp32 activations take twice the bytes.
    The output layer adds s*b*V*(p + 12): the logits (p bytes each: 2, or 4 in fp32), their fp32
    copy shifted for the loss and its saved log-softmax. ZeRO partitions model states, not
    activations: every stage holds all of them."""
    p = 4 if precision == "fp32" else 2
    s, b, h, a = seq_len, micro_batch, shape.hidden, shape.heads
    scores = 0 if fused_attention else 5 * a * s * s * b
    layers = shape.encoder_layers * (34 * s * b * h + scores) + shape.decoder_layers * (47 * s * b * h + 2 * scores)
    return int(layers * p / 2 + s * b * shape.vocab * (p + 12))


def count_params(model: str, num_classes: int = 1000) -> Tuple[int, int]:
    """(total params, params of the largest single module), from a meta-device build."""
    if is_language_model(model):
        from hpc_launch.train.lm import meta_model

        net = meta_model(model, 1)[0]
    else:
        from hpc_launch.train.models import build_model

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
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            total, gpus_per_node, nodes, cpu_offload=offload, additional_buffer_factor=BUFFER_FACTOR
        )
        rows.append((2, "optimizer" if offload else "none", gpu, cpu, "estimate_zero2_model_states_mem_needs"))
    for offload, params in ((False, False), (True, False), (True, True)):
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            total,
            largest,
            gpus_per_node,
            nodes,
            cpu_offload=offload,
            cpu_offload_params=params,
            zero_init=True,
            additional_buffer_factor=BUFFER_FACTOR,
        )
        name = "optimizer+params" if params else ("optimizer" if offload else "none")
        rows.append((3, name, gpu, cpu, "estimate_zero3_model_states_mem_needs"))
    return rows


def plan_memory(
    model: str,
    nodes: int,
    gpus_per_node: int,
    gpu_mem_gib: float,
    cpu_mem_gib: Optional[float] = None,
    seq_len: Optional[int] = None,
    micro_batch: Optional[int] = None,
    precision: str = "bf16",
) -> PlanResult:
    """Per-stage memory for `model` on nodes x gpus_per_node GPUs of gpu_mem_gib each; a language
    model's activations at seq_len and micro_batch (the entrypoint's defaults where None) on top.

    recommended: the first row that fits, in order of speed: no offload before offload, and
    the lowest stage (least communication) first; None when nothing fits."""
    if nodes < 1 or gpus_per_node < 1 or gpu_mem_gib <= 0:
        from hpc_launch.errors import SpecError

        raise SpecError(
            f"plan needs nodes >= 1, gpus_per_node >= 1 and GPU memory > 0 "
            f"(got {nodes}, {gpus_per_node}, {gpu_mem_gib})"
        )
    total, largest = count_params(model)
    result = PlanResult(model, total, largest, nodes, gpus_per_node, gpu_mem_gib, cpu_mem_gib)
    acts = 0.0
    if is_language_model(model):
        from hpc_launch.train.ds_config import DEFAULT_MICRO_BATCH
        from hpc_launch.train.lm import meta_model
        from hpc_launch.train.lm_sizes import DEFAULT_SEQ_LEN

        result.seq_len, result.micro_batch = seq_len or DEFAULT_SEQ_LEN, micro_batch or DEFAULT_MICRO_BATCH
        result.precision = precision
        shape = meta_model(model, result.seq_len)[1]
        acts = activation_bytes(shape, result.seq_len, result.micro_batch, precision, fused_attention=True) / GIB
        unfused = activation_bytes(shape, result.seq_len, result.micro_batch, precision, fused_attention=False)
        result.activations_gib, result.activations_unfused_gib = round(acts, 3), round(unfused / GIB, 3)
    for stage, offload, gpu, cpu, source in _rows(total, largest, nodes, gpus_per_node):
        gpu_gib, cpu_gib = gpu / GIB, cpu / GIB
        fits = gpu_gib + acts <= gpu_mem_gib * (1 - HEADROOM) and (cpu_mem_gib is None or cpu_gib <= cpu_mem_gib)
        result.rows.append(PlanRow(stage, offload, round(gpu_gib, 3), round(cpu_gib, 3), fits, source))
    order = sorted(result.rows, key=lambda r: (r.offload != "none", r.stage, r.offload))
    result.recommended = next((r for r in order if r.fits), None)
    return result


def format_plan(result: PlanResult) -> str:
    """Plain-text table (what `hpc-launch plan` prints)."""
    n_gpus = result.nodes * result.gpus_per_node
    lines = [
        f"{result.model}: {result.total_params / 1e6:.1f}M params (largest layer "
        f"{result.largest_layer_params / 1e6:.2f}M) on {result.nodes} node(s) x {result.gpus_per_node} GPU(s) = "
        f"{n_gpus} GPUs of {result.gpu_mem_gib:g} GiB"
        + (f", {result.cpu_mem_gib:g} GiB host memory per node" if result.cpu_mem_gib else ""),
    ]
    if result.activations_gib is None:
        lines.append(
            "model states only (params, grads, optimizer); activations need the rest "
            f"(a row fits when it leaves {int(HEADROOM * 100)}% of GPU memory free)"
        )
    else:
        lines.append(
            f"activations {result.activations_gib:.3f} GiB per GPU on top of each row's model states (seq_len "
            f"{result.seq_len}, micro-batch {result.micro_batch}, {result.precision}, fused attention; "
            f"{result.activations_unfused_gib:.3f} GiB with the attention scores stored): 34sbh + 5as^2b bytes "
            "a layer (16-bit; Korthikanti et al. 2022) + the logits; a row fits when both leave "
            f"{int(HEADROOM * 100)}% of GPU memory free"
        )
    lines.append(f"{'stage':>5}  {'offload':<17} {'per GPU GiB':>11}  {'per node CPU GiB':>16}  fits")
    for row in result.rows:
        mark = "  <- recommended" if row == result.recommended else ""
        lines.append(
            f"{row.stage:>5}  {row.offload:<17} {row.gpu_gib:>11.3f}  {row.cpu_gib:>16.3f}  "
            f"{'yes' if row.fits else 'no'}{mark}"
        )
    if result.recommended is None:
        lines.append("nothing fits: use more nodes, a GPU with more memory, or a smaller model")
    else:
        r = result.recommended
        lines.append(f"recommended: --zero {r.stage} --offload {r.offload}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# checking configurations before they are submitted (the sweep's points): the one planner

# The axes of a grid, in the order a point's label names them. `nodes` is a job resource; the
# others are the entrypoint's flags.
AXES = ("zero", "offload", "precision", "nodes", "micro_batch")
FLAGS = {"zero": "--zero", "offload": "--offload", "precision": "--precision", "micro_batch": "--micro-batch"}


def entry_choices() -> Dict[str, Tuple[Any, ...]]:
    """The values the shipped entrypoint accepts for each axis but nodes and micro-batch."""
    from hpc_launch.train.ds_config import OFFLOADS, PRECISIONS, ZERO_STAGES

    return {"zero": ZERO_STAGES, "offload": OFFLOADS, "precision": PRECISIONS}


_OFFLOAD_WORDS = {"optimizer": "optimizer offload", "optimizer+params": "parameter offload"}


def undefined(point: Dict[str, Any]) -> Optional[str]:
    """Why a combination is not a configuration at all (the presets cannot express it), or None."""
    from hpc_launch.train.ds_config import OFFLOAD_STAGES, stages_text

    offload, zero = point.get("offload", "none"), point.get("zero")
    stages = OFFLOAD_STAGES[offload]
    if zero is None or zero in stages:
        return None
    return f"{_OFFLOAD_WORDS[offload]} needs ZeRO {stages_text(stages)}"


def label(point: Dict[str, Any]) -> str:
    """`zero=3 offload=optimizer precision=bf16 nodes=2 micro_batch=8` (the axes it names)."""
    return " ".join(f"{a}={point[a]}" for a in AXES if a in point) or "(defaults)"


def _entry_args(point: Any) -> Any:
    """The entrypoint's own reading of the point's arguments (its defaults filled in)."""
    from hpc_launch.train.__main__ import parse_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parse_args(point.train_args)
    except SystemExit:
        why = (err.getvalue().strip().splitlines() or ["bad arguments"])[-1]
        raise SpecError(
            f"sweep point {point.index + 1} ({point.label}): the entrypoint refuses its arguments: {why}",
            hint="fix --train-args",
        ) from None


def check_points(points: Sequence[Any]) -> None:
    """Refuse the first impossible point, with one line; nothing is submitted. Cheap checks first
    for every point, then DeepSpeed's validator and the memory estimators."""
    from hpc_launch.train.data import train_samples
    from hpc_launch.train.ds_config import build_config, resolve_batch
    from hpc_launch.train.errors import TrainError

    configs = []
    for p in points:
        args = p.entry = _entry_args(p)
        world = p.prepared.job.world_size
        try:
            batch = resolve_batch(world, args.micro_batch, args.grad_accum, args.global_batch)
            cfg = build_config(
                batch=batch,
                zero=args.zero,
                offload=args.offload,
                precision=args.precision,
                lr=args.lr,
                total_steps=args.steps or 1000,
            )
        except TrainError as exc:
            raise SpecError(
                f"sweep point {p.index + 1} ({p.label}, {world} rank(s)): {exc.message}", hint=exc.hint
            ) from None
        samples = train_samples(args.data, args.synthetic_samples)
        if samples is not None and samples // world // batch.micro < batch.accum:  # the trainer's own refusal
            raise SpecError(
                f"sweep point {p.index + 1} ({p.label}, {world} rank(s)): one optimizer step takes "
                f"{batch.global_} samples but --data {args.data} has {samples} to train on",
                hint="lower --micro-batch, --grad-accum or the node count",
            )
        configs.append((p, cfg, world))
    from hpc_launch.train.ds_config import validate

    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed's logger writes to the stdout it finds
        for p, cfg, world in configs:
            try:
                validate(cfg, world)
            except TrainError as exc:
                raise SpecError(
                    f"sweep point {p.index + 1} ({p.label}, {world} rank(s)): {exc.message}", hint=exc.hint
                ) from None
        _check_memory(points)


def _check_memory(points: Sequence[Any]) -> None:
    """plan's estimators (DeepSpeed's) for each point's stage and offload, where the profile
    knows its GPUs' memory; a point whose model states do not fit is refused."""
    cache: Dict[tuple, Any] = {}
    for p in points:
        job = p.prepared.job
        gpu_mem = job.profile.node.gpu_mem_gib
        if not gpu_mem:
            continue  # no GPU memory in the profile (CPU testbeds, local): nothing to hold it against
        key = (p.entry.model, job.nodes, job.procs_per_node, p.entry.micro_batch, p.entry.precision)
        if key not in cache:
            try:
                cache[key] = plan_memory(
                    p.entry.model,
                    job.nodes,
                    max(job.procs_per_node, 1),
                    gpu_mem,
                    job.profile.node.mem_gib,
                    seq_len=getattr(p.entry, "seq_len", None),
                    micro_batch=p.entry.micro_batch,
                    precision=p.entry.precision,
                )
            except Exception as exc:  # an unknown model, no torch here: the entrypoint will say it in the job
                sys.stderr.write(
                    f"hpc-launch: note: no memory estimate for {p.entry.model} ({type(exc).__name__}: {exc})\n"
                )
                cache[key] = None
        result = cache[key]
        if result is None:
            continue
        row = next((r for r in result.rows if r.stage == p.entry.zero and r.offload == p.entry.offload), None)
        if row is not None and not row.fits:
            cpu = job.profile.node.mem_gib
            over_cpu = cpu is not None and row.cpu_gib > cpu
            what = (
                f"needs {row.cpu_gib:.1f} GiB of host memory per node, the node has {cpu:g}"
                if over_cpu
                else (
                    f"needs {row.gpu_gib + (result.activations_gib or 0.0):.1f} GiB per GPU for model states"
                    + (" and activations" if result.activations_gib else " alone")
                    + f", more than {int((1 - HEADROOM) * 100)}% of the GPU's {gpu_mem:g} GiB"
                )
            )
            better = result.recommended
            hint = (
                f"use --zero {better.stage} --offload {better.offload} (hpc-launch plan), or more nodes"
                if better
                else "use more nodes or a smaller model (hpc-launch plan)"
            )
            raise SpecError(
                f"sweep point {p.index + 1} ({p.label}): {p.entry.model} "
                f"under ZeRO-{row.stage} with offload {row.offload} {what}",
                hint=hint,
            )


def plan_for_cluster(
    model: str,
    cluster: str,
    nodes: int,
    gpus_per_node: Optional[int],
    queue: Optional[str],
    seq_len: Optional[int] = None,
    micro_batch: Optional[int] = None,
    precision: str = "bf16",
) -> PlanResult:
    """`hpc-launch plan`: the estimates for `nodes` of `cluster` (its queue's GPUs per node)."""
    from .site import profiles

    p = profiles.load(cluster)
    gpus = gpus_per_node if gpus_per_node is not None else p.node_gpus(queue)
    if not p.node.gpu_mem_gib:
        raise HpcLaunchError(f"{cluster} has no node.gpu_mem_gib in its profile", hint="add it, or pick a GPU cluster")
    # DeepSpeed's logger writes to the stdout it finds when first imported: keep it off ours
    with contextlib.redirect_stdout(sys.stderr):
        return plan_memory(
            model,
            nodes=nodes,
            gpus_per_node=max(gpus, 1),
            gpu_mem_gib=p.node.gpu_mem_gib,
            cpu_mem_gib=p.node.mem_gib,
            seq_len=seq_len,
            micro_batch=micro_batch,
            precision=precision,
        )
