"""Throughput of the training entrypoint against plain PyTorch DDP, and a ZeRO-stage sweep.

    .venv/bin/python bench/bench_train.py                 # both parts
    .venv/bin/python bench/bench_train.py --part ddp      # entrypoint vs DDP only
    .venv/bin/python bench/bench_train.py --part sweep --sweep-model resnet18

Part 1 runs `deepspeed --num_gpus 2 --module train --zero 0` and a plain
DistributedDataParallel loop (this file, `--ddp-worker`, under torchrun) on the same model,
synthetic data, sampler, micro-batch and step count, alternating A/B for --repeats rounds, and
prints the median samples/s of each and their ratio (target >= 0.95).
Part 2 runs the entrypoint for ZeRO 0-3 (and, with --offload, ZeRO-2/3 with CPU optimizer
offload) and prints stage x samples/s x peak memory. Both report the running average after
the first 2 steps (warm-up), as the entrypoint's log line does.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(REPO))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), e.get("PYTHONPATH")]))
    e["PYTHONUNBUFFERED"] = "1"
    # A JIT-op cache of our own unless CI names one: checkouts at other paths compile the same ops
    # with other flags into the shared default dir and keep rebuilding each other's (~40 s each).
    e.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".ci-cache" / "torch_extensions"))
    return e


def last_metrics(out: str) -> dict:
    from hpc_launch.metrics_line import summarise

    return summarise(out.splitlines())


def run(cmd) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.exit(f"benchmark command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{proc.stdout[-4000:]}")
    metrics = last_metrics(proc.stdout)
    metrics["wall_s"] = time.perf_counter() - t0
    return metrics


def workload(args) -> list:
    return [
        "--model",
        args.model,
        "--data",
        "synthetic",
        "--image-size",
        str(args.image_size),
        "--synthetic-samples",
        str(args.samples),
        "--micro-batch",
        str(args.micro_batch),
        "--steps",
        str(args.steps),
        "--log-every",
        str(args.log_every),
        "--seed",
        "0",
    ]


def entrypoint_cmd(args, zero: int, offload: str = "none", model: str | None = None) -> list:
    work = workload(args)
    if model:
        work[work.index("--model") + 1] = model
    return [
        BIN / "deepspeed",
        "--num_gpus",
        "2",
        "--master_port",
        str(free_port()),
        "--module",
        "train",
        *work,
        "--zero",
        str(zero),
        "--offload",
        offload,
        "--no-eval",
        "--resume",
        "never",
    ]


def ddp_cmd(args) -> list:
    return [
        BIN / "torchrun",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        __file__,
        "--ddp-worker",
        *workload(args),
    ]


def ddp_worker(argv) -> None:
    """Plain DDP: same model, dataset, DistributedSampler, micro-batch, AdamW, loss sync at log steps."""
    p = argparse.ArgumentParser()
    for flag in ("--model", "--data"):
        p.add_argument(flag)
    for flag in ("--image-size", "--synthetic-samples", "--micro-batch", "--steps", "--log-every", "--seed"):
        p.add_argument(flag, type=int)
    a = p.parse_args(argv)
    import resource

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from hpc_launch.metrics_line import format_step_line
    from train.data import build_data, micro_batches_per_epoch, train_loader
    from train.metrics import StepMeter
    from train.models import build_model

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = build_data("synthetic", a.image_size, synthetic_samples=a.synthetic_samples, seed=a.seed)
    torch.manual_seed(a.seed)
    model = torch.nn.parallel.DistributedDataParallel(build_model(a.model, data.num_classes))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    per_epoch = micro_batches_per_epoch(len(data.train), a.micro_batch, world)
    meter = StepMeter(a.micro_batch * world)
    step = 0
    while step < a.steps:
        for images, labels in train_loader(data.train, a.micro_batch, rank, world, a.seed, step // per_epoch, 0, 0):
            if step >= a.steps:
                break
            loss = F.cross_entropy(model(images), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            meter.step()
            if step % a.log_every == 0 or step == a.steps:
                value = loss.detach().clone()
                dist.all_reduce(value)
                if rank == 0:
                    print(
                        format_step_line(
                            step=step,
                            loss=value.item() / world,
                            samples_per_sec=meter.current,
                            avg_samples_per_sec=meter.average,
                            world_size=world,
                            mem_peak_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                        ),
                        flush=True,
                    )
    dist.destroy_process_group()


def part_ddp(args) -> None:
    print(
        f"== entrypoint (ZeRO-0) vs plain DDP: {args.model}, synthetic {args.image_size}px, micro-batch "
        f"{args.micro_batch} x 2 ranks, {args.steps} steps, {args.repeats} alternating rounds",
        flush=True,
    )
    ours, ddp = [], []
    for i in range(args.repeats):
        a, b = run(entrypoint_cmd(args, 0)), run(ddp_cmd(args))
        ours.append(a["avg_samples_per_sec"])
        ddp.append(b["avg_samples_per_sec"])
        print(
            f"round {i + 1}: entrypoint {ours[-1]:.1f} samples/s, DDP {ddp[-1]:.1f} samples/s "
            f"(ratio {ours[-1] / ddp[-1]:.3f}); wall {a['wall_s']:.1f}s vs {b['wall_s']:.1f}s",
            flush=True,
        )
    mo, md = statistics.median(ours), statistics.median(ddp)
    print(
        f"median: entrypoint {mo:.1f} samples/s, DDP {md:.1f} samples/s, ratio {mo / md:.3f} "
        f"(target >= 0.95: {'met' if mo / md >= 0.95 else 'NOT met'})",
        flush=True,
    )


def part_sweep(args) -> None:
    print(
        f"== ZeRO-stage sweep: {args.sweep_model}, synthetic {args.image_size}px, micro-batch {args.micro_batch} "
        f"x 2 ranks, {args.steps} steps, median of {args.repeats}; peak memory = peak RSS of rank 0 (CPU)",
        flush=True,
    )
    configs = [(0, "none"), (1, "none"), (2, "none"), (3, "none")]
    if args.offload:
        configs += [(2, "optimizer"), (3, "optimizer")]
    rows = []
    for zero, offload in configs:
        results = [run(entrypoint_cmd(args, zero, offload, model=args.sweep_model)) for _ in range(args.repeats)]
        sps = statistics.median(r["avg_samples_per_sec"] for r in results)
        peak = statistics.median(r["mem_peak_gb"] for r in results)
        rows.append((zero, offload, sps, peak))
        print(f"  zero={zero} offload={offload}: {sps:.1f} samples/s, peak {peak:.3f} GiB", flush=True)
    print("\n| ZeRO stage | offload | samples/s (median) | peak memory GiB (rank 0 RSS) |")
    print("|---|---|---|---|")
    for zero, offload, sps, peak in rows:
        print(f"| {zero} | {offload} | {sps:.1f} | {peak:.3f} |")


def main() -> None:
    if "--ddp-worker" in sys.argv:
        argv = sys.argv[1:]
        argv.remove("--ddp-worker")
        return ddp_worker(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("all", "ddp", "sweep"), default="all")
    p.add_argument("--model", default="smallcnn")
    p.add_argument("--sweep-model", default="resnet18", help="big enough that ZeRO's memory savings show")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--micro-batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--offload", action="store_true", help="add ZeRO-2/3 with CPU optimizer offload (builds cpu_adam)")
    args = p.parse_args()
    if args.part in ("all", "ddp"):
        part_ddp(args)
    if args.part in ("all", "sweep"):
        sweep = argparse.Namespace(**vars(args))
        sweep.steps, sweep.micro_batch = min(args.steps, 30), min(args.micro_batch, 32)
        part_sweep(sweep)


if __name__ == "__main__":
    main()
