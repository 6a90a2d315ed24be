"""Where the entrypoint's step loses to a hand-written loop on one GPU: the training step's recipes side
by side in ONE process (one CUDA context, one warm cuDNN cache), so the differences are the recipes'.

    python bench/bench_gpu_recipes.py [--models resnet50,gpt2-124m] [--steps 20] [--windows 3]

Recipes, each on a freshly built model, the same batches and AdamW (torch's fused kernel) with clipping at 1.0:
  loop            fp32 weights, torch.autocast(bfloat16), DDP (world 1): PyTorch's own bf16 recipe
  loop+cl         the same with model and batches in channels_last (convolutional models)
  ds-bf16 zN      DeepSpeed's bf16 mode (bf16 weights, fp32 master copy in the optimizer), ZeRO stage N
  ds-autocast zN  DeepSpeed's torch_autocast mode (fp32 weights, autocast in the engine's forward), ZeRO N
Input paths (image models; the entrypoint's loader hands over pinned fp32 batches):
  cast-on-host    .to(device, bf16, non_blocking, memory_format): the cast and layout change run on
                  the CPU before an unpinned copy (the entrypoint's path until 2026-11-27)
  cast-on-device  .to(device, non_blocking) then .to(bf16, memory_format) on the GPU
Each figure is the median of --windows timed windows of --steps steps after --warmup steps (units/s:
samples for images, tokens for LMs), with the peak memory of the recipe. Needs torch with CUDA,
deepspeed, torchvision (ResNet-50) and transformers (GPT-2 124M from its configuration, random weights).
On a machine without CUDA it runs a tiny smoke version on the CPU; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _dist_env() -> None:
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("MASTER_PORT", "29517")


class Workload:
    """A model factory, a host batch and the loss of one micro-batch."""

    def __init__(self, name: str, cuda: bool, micro: int):
        import torch

        self.name, self.micro = name, micro
        g = torch.Generator().manual_seed(0)
        if name == "resnet50":
            size = 224 if cuda else 32
            self.images = torch.randn(micro, 3, size, size, generator=g)
            self.labels = torch.randint(0, 1000, (micro,), generator=g)
            self.units_per_step, self.unit, self.conv = micro, "samples", True
            if cuda:
                self.images, self.labels = self.images.pin_memory(), self.labels.pin_memory()
        else:
            seq = 1024 if cuda else 64
            self.tokens = torch.randint(0, 50257, (micro, seq), generator=g)
            self.units_per_step, self.unit, self.conv = micro * seq, "tokens", False
            if cuda:
                self.tokens = self.tokens.pin_memory()

    def build(self):
        import torch

        torch.manual_seed(0)
        if self.name == "resnet50":
            from hpc_launch.train.models import build_model

            return build_model("resnet50", 1000)
        from hpc_launch.train.tv_compat import import_torchvision

        import_torchvision()  # transformers imports torchvision; on a CPU-only machine it needs the fix
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(n_positions=1024, n_embd=768, n_layer=12, n_head=12, vocab_size=50257)
        cfg._attn_implementation = "sdpa"  # torch's fused attention, as a hand-written GPT would use
        return GPT2LMHeadModel(cfg)

    def loss(self, model, device, dtype, layout, input_path: str):
        import torch
        import torch.nn.functional as F

        if self.name != "resnet50":
            x = self.tokens.to(device, non_blocking=True)
            return model(input_ids=x, labels=x).loss
        fmt = layout or torch.preserve_format
        if input_path == "cast-on-host":
            x = self.images.to(device, dtype, non_blocking=True, memory_format=fmt)
        else:
            x = self.images.to(device, non_blocking=True).to(dtype, memory_format=fmt)
        return F.cross_entropy(model(x).float(), self.labels.to(device, non_blocking=True))


def _ds_config(recipe: str, zero: int, micro: int, conv: bool, fused: bool) -> dict:
    cfg: dict = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 10**9,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01, "torch_adam": True}},
        "zero_optimization": {"stage": zero},
    }
    if fused:
        cfg["optimizer"]["params"]["fused"] = True
    if zero >= 2:
        cfg["zero_optimization"].update({"overlap_comm": True, "contiguous_gradients": True})
    if recipe == "ds-bf16":
        cfg["bf16"] = {"enabled": True}
        if conv:
            cfg["data_types"] = {"buffer_dtype": "bf16"}
    else:
        cfg["torch_autocast"] = {"enabled": True, "dtype": "bfloat16"}
    return cfg


def _timed(step, cuda: bool, warmup: int, steps: int, windows: int) -> list:
    import torch

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    rates = []
    for _ in range(windows):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        rates.append(steps / (time.perf_counter() - t))
    return rates


def run_loop(w: Workload, device, cuda: bool, channels_last: bool, a) -> dict:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = w.build().to(device)
    layout = torch.channels_last if channels_last else None
    if layout is not None:
        model = model.to(memory_format=layout)
    ddp = DDP(model, device_ids=[0] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=cuda or None)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = w.loss(ddp, device, torch.float32, layout, "cast-on-device")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()

    return {"rates": _timed(step, cuda, a.warmup, a.steps, a.windows)}


def run_deepspeed(w: Workload, device, cuda: bool, recipe: str, zero: int, input_path: str, channels_last: bool, a):
    import deepspeed
    import torch

    model = w.build()
    cfg = _ds_config(recipe, zero, w.micro, w.conv, fused=cuda)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    dtype = torch.bfloat16 if recipe == "ds-bf16" else torch.float32
    layout = torch.channels_last if channels_last else None

    def step():
        loss = w.loss(engine, device, dtype, layout, input_path)
        engine.backward(loss)
        engine.step()

    rates = _timed(step, cuda, a.warmup, a.steps, a.windows)
    if hasattr(engine, "destroy"):
        engine.destroy()  # ZeRO-3's hooks and buffers go before the next recipe's model
    return {"rates": rates}


def plan(w: Workload, stages: list) -> list:
    """(label, runner kwargs) in the order run; the loop first and last shows the machine's drift."""
    rows = [("loop", {"kind": "loop", "channels_last": False})]
    if w.conv:
        rows.append(("loop+cl", {"kind": "loop", "channels_last": True}))
        rows.append(
            (
                "ds-bf16 z0 cast-on-host",
                {"kind": "ds", "recipe": "ds-bf16", "zero": 0, "path": "cast-on-host", "cl": True},
            )
        )
        rows.append(
            (
                "ds-bf16 z0 contiguous",
                {"kind": "ds", "recipe": "ds-bf16", "zero": 0, "path": "cast-on-device", "cl": False},
            )
        )
    for recipe in ("ds-bf16", "ds-autocast"):
        for zero in stages:
            rows.append(
                (
                    f"{recipe} z{zero}",
                    {"kind": "ds", "recipe": recipe, "zero": zero, "path": "cast-on-device", "cl": w.conv},
                )
            )
    rows.append(("loop (again)", {"kind": "loop", "channels_last": False}))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet50,gpt2-124m")
    p.add_argument("--zero", default="0,1,2,3")
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--warmup", type=int, default=6)
    p.add_argument("--micro-resnet", type=int, default=256)
    p.add_argument("--micro-gpt", type=int, default=16)
    p.add_argument("--out", default="")
    a = p.parse_args()
    _dist_env()
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)  # torch's deprecation notes per collective
    import torch

    cuda = torch.cuda.is_available()
    if not cuda:
        a.micro_resnet, a.micro_gpt, a.steps, a.windows, a.warmup = 4, 2, 2, 1, 1
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(0)
        torch.backends.cudnn.benchmark = True
    import deepspeed

    deepspeed.init_distributed("nccl" if cuda else "gloo")
    name = torch.cuda.get_device_name(0) if cuda else "CPU (smoke run)"
    head = f"# {name}, torch {torch.__version__}, CUDA {torch.version.cuda}, deepspeed {deepspeed.__version__}"
    lines = [head, ""]
    print(head, flush=True)
    stages = [int(s) for s in a.zero.split(",") if s]
    for model_name in a.models.split(","):
        w = Workload(model_name, cuda, a.micro_resnet if model_name == "resnet50" else a.micro_gpt)
        rows, base = [], None
        for label, spec in plan(w, stages):
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            try:
                if spec["kind"] == "loop":
                    got = run_loop(w, device, cuda, spec["channels_last"], a)
                else:
                    got = run_deepspeed(w, device, cuda, spec["recipe"], spec["zero"], spec["path"], spec["cl"], a)
                rate = statistics.median(got["rates"]) * w.units_per_step
                spread = ", ".join(f"{r * w.units_per_step:.0f}" for r in got["rates"])
                peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
                base = base or rate
                wall = time.perf_counter() - t0
                row = f"| {label} | {rate:.0f} | {rate / base:.3f} | {spread} | {peak:.1f} | {wall:.0f} |"
            except Exception as exc:  # one recipe's failure is a finding, not the end of the run
                row = f"| {label} | failed: {type(exc).__name__}: {str(exc)[:120]} | | | | |"
            print(row, flush=True)
            rows.append(row)
        table = [
            f"## {model_name}, micro-batch {w.micro}, {w.unit}/s (median of {a.windows} x {a.steps} steps)",
            "",
            f"| recipe | {w.unit}/s | vs loop | windows | peak GiB | wall s |",
            "|---|---:|---:|---|---:|---:|",
            *rows,
            "",
        ]
        print("\n".join(table), flush=True)
        lines += table
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
