"""The one-shot GPU check, first thing on any lent GPU machine: the entrypoint through `hpc-launch sweep`
(ZeRO 0-3) against a hand-written PyTorch DDP loop on the same model, micro-batch and steps, in one run,
for a GPT of 124M parameters (tokens/s) and ResNet-50 (images/s), bf16. One command, about 7 minutes on one
H100 (each job ~45 s there: 12-14 s of imports, 5 s DeepSpeed, 6-8 s cuDNN's first step), prints the table
and writes DIR/gpu-bench.md; run it with a time limit that leaves room to rerun a part:

    python bench/bench_gpu.py --out DIR                     # both workloads, ZeRO 0,1,2,3 (~7 min)
    python bench/bench_gpu.py --out DIR --workloads gpt --zero 0,1
    python bench/bench_gpu.py --out DIR --variants --ddp-after   # + variant rows and a second DDP run

Needs torch with CUDA, deepspeed, torchvision, transformers and hpc-launch importable by the interpreter
that runs it (the jobs run in that same environment: the `local` dialect, one job after another). The
machine's profile is written to DIR/lent-gpu.yaml from what torch sees and passed to the sweep with
`--profile`, so the sweep's own checks (DeepSpeed's validator, the memory estimate) run too.

The baseline is PyTorch's own bf16 recipe, written by hand: `torch.autocast(bfloat16)` over fp32 weights,
torch's fused AdamW, clipping at 1.0 as DeepSpeed's default does, DDP; for ResNet-50 also the same loop
with model and batches in channels_last (the tuned hand-written loop). Order per workload: DDP, the
sweep, (with --ddp-after) DDP again, so a drift of the machine shows as a spread. Each figure is the
median of the current speed at three log steps after the warm-up (steps 15, 20 and 25 of 25 by default).
Why each choice (docs/training.md "On a GPU"): the entrypoint's bf16 is DeepSpeed's torch_autocast for
models with BatchNorm and DeepSpeed's bf16 weights otherwise (`--bf16-mode auto`), measured by
bench/bench_gpu_recipes.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# name -> (entrypoint model, DDP worker model, data, unit per sample, per-sample size flag and value, micro)
WORKLOADS = {
    "resnet50": {"model": "resnet50", "data": "synthetic", "size": ["--image-size", "224"], "micro": 256, "unit": 1},
    "gpt": {"model": "gpt-125m", "data": "synthetic-tokens", "size": ["--seq-len", "1024"], "micro": 16, "unit": 1024},
}


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


def workload_args(w: dict, a) -> list:
    samples = w["micro"] * a.gpus * (a.steps + 1)  # one epoch covers every step: no loader restart
    return [
        "--model", w["model"], "--data", w["data"], *w["size"], "--synthetic-samples", str(samples),
        "--micro-batch", str(w["micro"]), "--steps", str(a.steps), "--log-every", str(a.log_every),
        "--num-workers", str(a.workers), "--seed", "0",
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------
# the hand-written loop (runs under torchrun)
# ---------------------------------------------------------------------------------------------------------


def _ddp_model(name: str, channels_last: bool):
    import torch

    if name == "resnet50":
        from hpc_launch.train.models import build_model

        model = build_model("resnet50", 1000)
        return model.to(memory_format=torch.channels_last) if channels_last else model
    from hpc_launch.train.tv_compat import import_torchvision

    import_torchvision()  # transformers imports torchvision; on a CPU-only machine it needs the fix
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_positions=1024, n_embd=768, n_layer=12, n_head=12, vocab_size=50257)
    cfg._attn_implementation = "sdpa"
    return GPT2LMHeadModel(cfg)


def _ddp_data(name: str, micro: int, samples: int, seq_or_size: int):
    import torch
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(0)
    n = max(samples, micro)
    if name == "resnet50":
        return TensorDataset(torch.randn(n, 3, seq_or_size, seq_or_size, generator=g), torch.randint(0, 1000, (n,)))
    return TensorDataset(torch.randint(0, 50257, (n, seq_or_size), generator=g))


def ddp_worker(argv) -> None:
    p = argparse.ArgumentParser()
    for flag in ("--model", "--data"):
        p.add_argument(flag)
    for flag in ("--image-size", "--seq-len", "--synthetic-samples", "--micro-batch", "--steps", "--log-every"):
        p.add_argument(flag, type=int, default=0)
    p.add_argument("--num-workers", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--channels-last", action="store_true")
    a = p.parse_args(argv)
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from hpc_launch.metrics_line import format_step_line
    from hpc_launch.train.data import TrainBatches
    from hpc_launch.train.metrics import StepMeter

    local, rank, world = (int(os.environ[k]) for k in ("LOCAL_RANK", "RANK", "WORLD_SIZE"))
    image = a.model == "resnet50"
    data = _ddp_data(a.model, a.micro_batch, a.synthetic_samples, a.image_size if image else a.seq_len)
    # the loader as the entrypoint builds it: its workers forked before the process group's threads
    batches = TrainBatches(data, a.micro_batch, rank, world, a.seed, a.num_workers)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(local)
        torch.backends.cudnn.benchmark = True
    dist.init_process_group("nccl" if cuda else "gloo")
    torch.manual_seed(a.seed)
    raw = _ddp_model(a.model, a.channels_last).to(device)
    model = torch.nn.parallel.DistributedDataParallel(raw, device_ids=[local] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=cuda or None)
    layout = torch.channels_last if a.channels_last else torch.preserve_format
    meter = StepMeter(a.micro_batch * world)
    step = 0
    for batch in batches.epoch(0):
        if step >= a.steps:
            break
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            if image:
                x = batch[0].to(device, non_blocking=True).contiguous(memory_format=layout)
                loss = F.cross_entropy(model(x).float(), batch[1].to(device, non_blocking=True))
            else:
                x = batch[0].to(device, non_blocking=True)
                loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        meter.step()
        if step % a.log_every == 0 or step == a.steps:
            value = loss.detach().float().clone()
            dist.all_reduce(value)  # also the sync that makes the meter's clock honest
            if rank == 0:
                peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
                line = format_step_line(
                    step=step,
                    loss=value.item() / world,
                    samples_per_sec=meter.current,
                    avg_samples_per_sec=meter.average,
                    world_size=world,
                    mem_peak_gb=peak,
                )
                print(line, flush=True)
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------------------
# the runs and the table
# ---------------------------------------------------------------------------------------------------------


def windows(log_text: str, warm: int) -> tuple:
    """(current samples/s at each log step after `warm`, highest peak memory GB) from step lines; the
    last three log steps when there are more."""
    from hpc_launch.metrics_line import parse_line

    rates, peak = [], 0.0
    for line in log_text.splitlines():
        m = parse_line(line)
        if not m or "samples_per_sec" not in m:
            continue
        peak = max(peak, float(m.get("mem_peak_gb", 0.0) or 0.0))
        if int(m.get("step", 0)) > warm:
            rates.append(float(m["samples_per_sec"]))
    return rates[-3:], peak


def run_ddp(w: dict, a, log: Path, channels_last: bool) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={a.gpus}"]
    cmd += [__file__, "--ddp-worker", *workload_args(w, a)] + (["--channels-last"] if channels_last else [])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write_text(proc.stdout)
    rates, peak = windows(proc.stdout, 2 * a.log_every)
    if proc.returncode != 0 or not rates:
        print(f"bench_gpu: DDP run failed ({proc.returncode}); log {log}\n{proc.stdout[-2000:]}", flush=True)
        return {"rates": [], "peak": 0.0, "state": f"failed rc {proc.returncode}"}
    print(
        f"DDP {log.stem}: {statistics.median(rates):.1f} samples/s, wall {time.perf_counter() - t0:.0f} s", flush=True
    )
    return {"rates": rates, "peak": peak, "state": "done"}


# Beside the preset, one job each: the choice the preset no longer makes, and ZeRO-3 keeping parameters
# under 1M elements whole (on one GPU its gathers have nothing to gather; is the cost in the small ones?)
VARIANTS = {
    "gpt": [("0", ["--bf16-mode", "weights"], None, "bf16 weights, the old ZeRO-0 choice")],
    "resnet50": [],
}
Z3_PERSIST = {"zero_optimization": {"stage3_param_persistence_threshold": 1_000_000}}
# ZeRO-3 gathers and releases at every module's hooks; DeepSpeed's granularity threshold makes a module
# whose parameters per layer are at most N one "leaf", fetched whole with no hooks inside (as FSDP wraps a
# block). GPT-2 124M: a block 787,541 per layer, the transformer 1,104,925: 1M makes the 12 blocks leaves.
# On a CPU stand-in (12 blocks 64 wide, one rank, host cost only) ZeRO-3 ran 1.52x with blocks as leaves,
# the same losses on two ranks (docs/training.md "ZeRO-3 on one GPU"). Not for ResNet-50: its whole net
# (206,105 per layer) lies below its largest bottleneck (671,061), and with 200k (the early bottlenecks
# leaves) its first step failed on CPU ("output with shape [1] doesn't match the broadcast shape").
Z3_LEAF = {"gpt": 1_000_000}


def run_sweep(w: dict, a, profile: Path, out: Path, tag: str, zero: str, extra=(), ds_config=None) -> list:
    hpc = shutil.which("hpc-launch") or str(Path(sys.executable).parent / "hpc-launch")
    args = [*workload_args(w, a), "--no-eval", *extra]
    if ds_config is not None:
        (out / f"{tag}.json").write_text(json.dumps(ds_config))
        args += ["--ds-config", str(out / f"{tag}.json")]
    cmd = [hpc, "sweep", "--profile", str(profile), "--zero", zero, "--precision", "bf16"]
    cmd += ["--train-args", " ".join(args), "--out", str(out / tag)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    (out / f"{tag}.log").write_text(proc.stdout)
    print(proc.stdout[-1500:], flush=True)
    print(f"sweep {tag}: rc {proc.returncode}, wall {time.perf_counter() - t0:.0f} s", flush=True)
    import csv

    report = out / tag / "report.csv"
    rows = []
    for row in csv.DictReader(report.open()) if report.exists() else []:
        log = Path(row.get("log") or "")
        text = log.read_text(errors="replace") if log.is_file() else ""
        rates, peak = windows(text, 2 * a.log_every)
        bf16 = "autocast" if "bf16 as torch autocast" in text else "bf16 weights"
        rows.append({"label": f"entrypoint {row['configuration']} ({bf16})", "rates": rates, "peak": peak,
                     "state": f"{row['state']} {row['cause']}".strip()})  # fmt: skip
    return rows


def table(name: str, w: dict, dev: dict, a, ddp: list, rows: list) -> list:
    unit = "tokens/s" if w["unit"] > 1 else "samples/s"
    per_gpu = w["unit"] / dev["gpus"]
    base_rates = [r for run in ddp for r in run["rates"]]
    base = statistics.median(base_rates) * per_gpu if base_rates else float("nan")
    runs = "; ".join(", ".join(f"{r * per_gpu:.0f}" for r in run["rates"]) for run in ddp)
    lines = [
        f"## {name}: {w['model']} bf16, micro-batch {w['micro']}, {a.steps} steps, {a.workers} loader workers "
        f"per rank; {dev['gpus']} x {dev['name']} (torch {dev['torch']}, CUDA {dev['cuda']})",
        "",
        f"| run | {unit} per GPU (median) | vs DDP | at the log steps | peak GB per GPU | state |",
        "|---|---:|---:|---|---:|---|",
        f"| hand-written DDP, autocast (runs before and after) | {base:.0f} | 1.00 | {runs} | "
        f"{max((r['peak'] for r in ddp), default=0):.1f} | |",
    ]
    for row in rows:
        rate = statistics.median(row["rates"]) * per_gpu if row["rates"] else float("nan")
        spread = ", ".join(f"{r * per_gpu:.0f}" for r in row["rates"])
        lines.append(
            f"| {row['label']} | {rate:.0f} | {rate / base:.2f} | {spread} | {row['peak']:.1f} | {row['state']} |"
        )
    return lines + [""]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--ddp-worker":
        return ddp_worker(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--workloads", default="gpt,resnet50")
    p.add_argument("--zero", default="0,1,2,3")
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--workers", type=int, default=8, help="DataLoader workers per rank")
    p.add_argument("--variants", action="store_true", help="also the variant rows (one job each)")
    p.add_argument("--ddp-after", action="store_true", help="a second DDP run after the sweep")
    a = p.parse_args()
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    dev = detect()
    a.gpus = dev["gpus"]
    if dev["cuda"] is None:  # the CPU smoke run: tiny shapes, the same code paths
        WORKLOADS["resnet50"].update(size=["--image-size", "32"], micro=4)
        WORKLOADS["gpt"].update(model="gpt-tiny", size=["--seq-len", "64"], micro=2, unit=64)
        # gpt-tiny's blocks: 5,553 per layer, its transformer ~7,800 (a whole-model leaf fails on CPU in
        # DeepSpeed's zero_grad: record_stream of a CPU gradient, "unknown parameter type")
        Z3_LEAF["gpt"] = 6_000
    print(f"machine: {dev}, nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}", flush=True)
    profile = write_profile(out, dev)
    text = []
    for name in a.workloads.split(","):
        w = WORKLOADS[name]
        ddp = [run_ddp(w, a, out / f"ddp-{name}-1.log", False)]
        rows = []
        if name == "resnet50":
            tuned = run_ddp(w, a, out / f"ddp-{name}-cl.log", True)
            rows.append({"label": "hand-written DDP, autocast, model and batches channels_last", **tuned})
        rows += run_sweep(w, a, profile, out, f"sweep-{name}", a.zero)
        for i, (zero, extra, cfg, why) in enumerate(VARIANTS[name] if a.variants else []):
            for row in run_sweep(w, a, profile, out, f"variant-{name}-{i}", zero, extra, cfg):
                rows.append({**row, "label": f"{row['label']}: {why}"})
        if a.variants and "3" in a.zero.split(","):
            for row in run_sweep(w, a, profile, out, f"variant-{name}-z3", "3", (), Z3_PERSIST):
                rows.append({**row, "label": f"{row['label']}: persistence threshold 1M"})
            if name in Z3_LEAF:
                leaf = {"zero_optimization": {"stage3_module_granularity_threshold": Z3_LEAF[name]}}
                for row in run_sweep(w, a, profile, out, f"variant-{name}-z3-leaf", "3", (), leaf):
                    rows.append({**row, "label": f"{row['label']}: blocks as leaf modules ({Z3_LEAF[name]:,})"})
        if a.ddp_after:
            ddp.append(run_ddp(w, a, out / f"ddp-{name}-2.log", False))
        part = table(name, w, dev, a, ddp, rows)
        print("\n".join(part), flush=True)
        text += part
    (out / "gpu-bench.md").write_text("\n".join(text) + "\n")


if __name__ == "__main__":
    main()
