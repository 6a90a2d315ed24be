"""Throughput per GPU on a GPU machine: the entrypoint through `hpc-launch sweep` (ZeRO 0-3) against
plain PyTorch DDP on the same model, data pipeline, micro-batch and step count, in one run.

    python bench/bench_gpu.py --out DIR                      # ResNet-50, bf16, 224 px, ZeRO 0,1,2,3
    python bench/bench_gpu.py --out DIR --zero 0 --steps 30  # shorter

Needs torch with CUDA, deepspeed and hpc-launch installed in the interpreter that runs it (the jobs
run in that same environment: the `local` dialect, one job after another). The machine's profile is
written to DIR/lent-gpu.yaml from what torch sees (GPU count and memory) and passed to the sweep with
`--profile`, so the sweep's own checks (DeepSpeed's config validator, the memory estimate) run too.

Order: DDP, the sweep (one job per ZeRO stage), the variants at --variant-zero (torch's fused AdamW,
DeepSpeed's FusedAdam: its JIT build shows in "DeepSpeed ready in"), the preset in --also-precision,
DDP again; the DDP figure is the median of its runs,
so a drift of the machine between the first and the last run shows as a spread. The baseline is
PyTorch's own recipe for bf16: `torch.autocast(bfloat16)` over fp32 weights, AdamW (foreach), DDP;
the entrypoint is DeepSpeed's bf16 mode (bf16 weights, fp32 master weights in the optimizer). Both
read the same synthetic dataset through the same DistributedSampler loader with the same workers.
Figures are the running mean of samples/s after the warm-up steps, as the entrypoint's step line and
`hpc-launch report` give them. Prints a table and writes DIR/gpu-bench.md; exits 0.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

READY = re.compile(r"DeepSpeed ready in ([0-9.]+) s")


def detect() -> dict:
    import torch

    if not torch.cuda.is_available():  # a smoke run of the bench itself: 1 CPU rank, gloo, no autocast
        print("bench_gpu: no CUDA device: a CPU smoke run, its figures mean nothing", flush=True)
        return {"gpus": 1, "name": "CPU", "mem_gib": 0, "torch": torch.__version__, "cuda": None}
    props = torch.cuda.get_device_properties(0)
    return {
        "gpus": torch.cuda.device_count(),
        "name": props.name,
        "mem_gib": int(props.total_memory / 2**30),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def write_profile(out: Path, dev: dict) -> Path:
    path = out / "lent-gpu.yaml"
    mem = f", gpu_mem_gib: {dev['mem_gib']}" if dev["mem_gib"] else ""
    path.write_text(
        "# written by bench/bench_gpu.py from what torch saw on this machine\n"
        "extends: local\n"
        "name: lent-gpu\n"
        f'title: "{dev["gpus"]} x {dev["name"]} (bench/bench_gpu.py)"\n'
        f"node: {{gpus: {dev['gpus']}{mem}}}\n"
    )
    return path


def workload(a) -> list:
    return [
        "--model", a.model, "--data", "synthetic", "--image-size", str(a.image_size),
        "--synthetic-samples", str(a.samples), "--micro-batch", str(a.micro_batch),
        "--steps", str(a.steps), "--log-every", str(a.log_every), "--num-workers", str(a.workers),
        "--seed", "0",
    ]  # fmt: skip


def ddp_worker(argv) -> None:
    """Plain DDP on CUDA: same model, dataset, loader, micro-batch; bf16 autocast, AdamW."""
    p = argparse.ArgumentParser()
    for flag in ("--model", "--data"):
        p.add_argument(flag)
    for flag in ("--image-size", "--synthetic-samples", "--micro-batch", "--steps", "--log-every", "--num-workers"):
        p.add_argument(flag, type=int)
    p.add_argument("--seed", type=int)
    a = p.parse_args(argv)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from hpc_launch.metrics_line import format_step_line
    from train.data import build_data, micro_batches_per_epoch, train_loader
    from train.metrics import StepMeter
    from train.models import build_model

    local = int(os.environ["LOCAL_RANK"])
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = build_data("synthetic", a.image_size, synthetic_samples=a.synthetic_samples, seed=a.seed)
    torch.manual_seed(a.seed)
    model = build_model(a.model, data.num_classes).to(device)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    per_epoch = micro_batches_per_epoch(len(data.train), a.micro_batch, world)
    meter = StepMeter(a.micro_batch * world)
    step = 0
    while step < a.steps:
        loader = train_loader(data.train, a.micro_batch, rank, world, a.seed, step // per_epoch, 0, a.num_workers)
        for images, labels in loader:
            if step >= a.steps:
                break
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                logits = model(images.to(device, non_blocking=True))
            loss = F.cross_entropy(logits.float(), labels.to(device, non_blocking=True))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            meter.step()
            if step % a.log_every == 0 or step == a.steps:
                value = loss.detach().clone()
                dist.all_reduce(value)  # also the sync that makes the meter's clock honest
                if rank == 0:
                    print(
                        format_step_line(
                            step=step,
                            loss=value.item() / world,
                            samples_per_sec=meter.current,
                            avg_samples_per_sec=meter.average,
                            world_size=world,
                            mem_peak_gb=torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0,
                        ),
                        flush=True,
                    )
    dist.destroy_process_group()


def run_ddp(a, gpus: int, log: Path) -> float:
    from hpc_launch.metrics_line import summarise

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}"]
    cmd += [__file__, "--ddp-worker", *workload(a)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write_text(proc.stdout)
    if proc.returncode != 0:
        sys.exit(f"bench_gpu: DDP run failed ({proc.returncode}); log {log}\n{proc.stdout[-3000:]}")
    sps = float(summarise(proc.stdout.splitlines())["avg_samples_per_sec"])
    print(f"DDP: {sps:.1f} samples/s ({sps / gpus:.1f} per GPU), wall {time.perf_counter() - t0:.1f} s", flush=True)
    return sps


# Variants beside the preset (torch's AdamW, foreach: nothing to build), one ZeRO stage each:
# torch's fused AdamW kernel, and DeepSpeed's FusedAdam (JIT-compiled by the first job that uses it).
VARIANTS = {
    "torch-fused-adamw": {"optimizer": {"params": {"fused": True}}},
    "ds-fusedadam": {"optimizer": {"params": {"torch_adam": False}}},
}


def run_sweep(a, profile: Path, out: Path, tag: str, zero: str, precision: str, ds_config: dict | None) -> list:
    hpc = shutil.which("hpc-launch") or str(Path(sys.executable).parent / "hpc-launch")
    train_args = [*workload(a), "--no-eval"]
    if ds_config is not None:
        cfg = out / f"{tag}.json"
        cfg.write_text(json.dumps(ds_config))
        train_args += ["--ds-config", str(cfg)]
    cmd = [hpc, "sweep", "--profile", str(profile), "--zero", zero, "--precision", precision]
    cmd += ["--train-args", " ".join(train_args), "--out", str(out / tag)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    (out / f"{tag}.log").write_text(proc.stdout)
    print(proc.stdout[-2500:], flush=True)
    print(f"sweep {tag}: rc {proc.returncode}, wall {time.perf_counter() - t0:.1f} s", flush=True)
    report = out / tag / "report.csv"
    rows = list(csv.DictReader(report.open())) if report.exists() else []
    for row in rows:
        row["variant"] = tag
        log = Path(row.get("log") or "")
        found = READY.search(log.read_text(errors="replace")) if log.is_file() else None
        row["ready_s"] = found.group(1) if found else "?"
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--ddp-worker":
        return ddp_worker(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--precision", default="bf16")
    p.add_argument("--zero", default="0,1,2,3")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--micro-batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--workers", type=int, default=8, help="DataLoader workers per rank")
    p.add_argument("--variant-zero", default="0", help="ZeRO stages for the optimizer variants ('' none)")
    p.add_argument("--also-precision", default="fp16", help="one more precision, preset, at --variant-zero ('' none)")
    p.add_argument("--ddp-runs", type=int, default=2, help="DDP runs, split before and after the sweep")
    a = p.parse_args()
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    dev = detect()
    a.samples = a.micro_batch * dev["gpus"] * (a.steps + 1)  # one epoch covers every step: no loader restart
    print(f"machine: {dev}, nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}", flush=True)
    profile = write_profile(out, dev)
    before = (a.ddp_runs + 1) // 2
    ddp = [run_ddp(a, dev["gpus"], out / f"ddp-{i + 1}.log") for i in range(before)]
    rows = run_sweep(a, profile, out, "preset", a.zero, a.precision, None)
    if a.variant_zero:
        for tag, cfg in VARIANTS.items():
            rows += run_sweep(a, profile, out, tag, a.variant_zero, a.precision, cfg)
    if a.also_precision:  # the same preset in another precision: does it train at all?
        rows += run_sweep(a, profile, out, f"preset-{a.also_precision}", a.variant_zero or "0", a.also_precision, None)
    ddp += [run_ddp(a, dev["gpus"], out / f"ddp-{i + 1}.log") for i in range(before, a.ddp_runs)]
    base = statistics.median(ddp) / dev["gpus"]
    runs = ", ".join(f"{x / dev['gpus']:.0f}" for x in ddp)
    lines = [
        f"# {a.model} {a.precision}, {a.image_size} px, micro-batch {a.micro_batch}, {a.steps} steps, "
        f"{a.workers} loader workers per rank: {dev['gpus']} x {dev['name']} "
        f"(torch {dev['torch']}, CUDA {dev['cuda']})",
        "",
        "| run | variant | samples/s per GPU | vs DDP | DeepSpeed ready in (s) | peak memory per GPU (GB) | state |",
        "|---|---|---:|---:|---:|---:|---|",
        f"| plain PyTorch DDP (median of {len(ddp)}: {runs}) | torch AdamW | {base:.1f} | 1.00 | | | |",
    ]
    for row in rows:
        sps = float(row["samples_per_sec"] or 0) / max(1, int(row["ranks"]))
        lines.append(
            f"| entrypoint {row['configuration']} | {row['variant']} | {sps:.1f} | {sps / base:.2f} | {row['ready_s']} "
            f"| {row['peak_mem_gb_per_gpu']} | {row['state']} {row['cause']} |"
        )
    text = "\n".join(lines) + "\n"
    (out / "gpu-bench.md").write_text(text)
    print(text, flush=True)


if __name__ == "__main__":
    main()
