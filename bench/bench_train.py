"""Throughput of the training entrypoint against plain PyTorch DDP, and a ZeRO-stage sweep.

    .venv/bin/python bench/bench_train.py                 # both parts
    .venv/bin/python bench/bench_train.py --part ddp      # entrypoint vs DDP only
    .venv/bin/python bench/bench_train.py --part sweep --sweep-model resnet18
    .venv/bin/python bench/bench_train.py --part phases   # per-phase, both in the same 2 processes

Part 1 runs `deepspeed --num_gpus 2 --module hpc_launch.train --zero 0` and a plain
DistributedDataParallel loop (this file, `--ddp-worker`, under torchrun) on the same model,
synthetic data, sampler, micro-batch and step count, alternating A/B for --repeats rounds, and
prints the median samples/s of each and their ratio (target >= 1.0), with the load average
before each round (the machine may be shared: rerun when it is high). The DDP loop does what
the entrypoint's ZeRO-0 config does: gradient clipping at DeepSpeed's default max norm (the
entrypoint clips; a baseline that does not is not the same training), the loss averaged over
the ranks every --log-every steps.
Part 2 runs the entrypoint for ZeRO 0-3 (and, with --offload, ZeRO-2/3 with CPU optimizer
offload) and prints stage x samples/s x peak memory. Part 3 (`--part phases`, not in `all`) builds
the entrypoint's ZeRO-0 engine (its config and its clipping) and a DDP model in the same two
ranks and alternates blocks of 10 steps between them: per-phase medians (forward, backward with
its all-reduce, clip + optimizer step) that a shared machine's load shifts alike for both.
Parts 1 and 2 report the running average after the first 2 steps (warm-up), as the entrypoint's
log line does.
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
        "hpc_launch.train",
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
        *(["--same-choices"] if args.ddp_same else []),
    ]


def ddp_worker(argv) -> None:
    """Plain DDP: same model, dataset, DistributedSampler, micro-batch, AdamW, gradient clipping and
    loss sync at log steps as the entrypoint's ZeRO-0 fp32 run."""
    p = argparse.ArgumentParser()
    for flag in ("--model", "--data"):
        p.add_argument(flag)
    for flag in ("--image-size", "--synthetic-samples", "--micro-batch", "--steps", "--log-every", "--seed"):
        p.add_argument(flag, type=int)
    p.add_argument("--same-choices", dest="same", action="store_true")
    a = p.parse_args(argv)
    import resource

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from deepspeed.runtime.constants import GRADIENT_CLIPPING_DEFAULT  # the max norm the entrypoint clips to

    from hpc_launch.metrics_line import format_step_line
    from hpc_launch.train.data import build_data, micro_batches_per_epoch, TrainBatches
    from hpc_launch.train.metrics import StepMeter
    from hpc_launch.train.models import build_model

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = build_data("synthetic", a.image_size, synthetic_samples=a.synthetic_samples, seed=a.seed)
    torch.manual_seed(a.seed)
    model = torch.nn.parallel.DistributedDataParallel(build_model(a.model, data.num_classes))
    # What a hand-written loop gets: torch's default AdamW, batches as loaded. With --ddp-same-choices
    # the entrypoint's own choices on a CPU: torch's fused AdamW (hpc_launch/train/ds_config.py) and channels_last
    # image batches (hpc_launch/train/models.py memory_format).
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=a.same or None)
    layout = torch.channels_last if a.same else torch.preserve_format
    per_epoch = micro_batches_per_epoch(len(data.train), a.micro_batch, world)
    meter = StepMeter(a.micro_batch * world)
    step = 0
    while step < a.steps:
        for images, labels in TrainBatches(data.train, a.micro_batch, rank, world, a.seed, 0).epoch(step // per_epoch):
            if step >= a.steps:
                break
            loss = F.cross_entropy(model(images.to(memory_format=layout)), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), GRADIENT_CLIPPING_DEFAULT)
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
        f"{args.micro_batch} x 2 ranks, {args.steps} steps, {args.repeats} alternating rounds; DDP with "
        + ("the entrypoint's choices (fused AdamW, channels_last batches)" if args.ddp_same else "torch's defaults"),
        flush=True,
    )
    ours, ddp = [], []
    for i in range(args.repeats):
        load = os.getloadavg()[0]
        a, b = run(entrypoint_cmd(args, 0)), run(ddp_cmd(args))
        ours.append(a["avg_samples_per_sec"])
        ddp.append(b["avg_samples_per_sec"])
        print(
            f"round {i + 1}: entrypoint {ours[-1]:.1f} samples/s, DDP {ddp[-1]:.1f} samples/s "
            f"(ratio {ours[-1] / ddp[-1]:.3f}); wall {a['wall_s']:.1f}s vs {b['wall_s']:.1f}s; "
            f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after",
            flush=True,
        )
    mo, md = statistics.median(ours), statistics.median(ddp)
    print(
        f"median: entrypoint {mo:.1f} samples/s, DDP {md:.1f} samples/s, ratio {mo / md:.3f}; median of the "
        f"rounds' ratios {statistics.median(o / d for o, d in zip(ours, ddp)):.3f} "
        f"(target >= 1.0: {'met' if mo / md >= 1.0 else 'NOT met'}); {os.cpu_count()} CPUs",
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


def phases_worker(blocks: int, ddp_same: bool) -> None:
    """One rank of --part phases (under torchrun)."""
    import torch
    import torch.distributed as tdist
    import torch.nn.functional as F
    from deepspeed.runtime.constants import GRADIENT_CLIPPING_DEFAULT

    os.environ["HPC_LAUNCH_PREFLIGHT"] = "0"
    import deepspeed

    from hpc_launch.train import dist as train_dist
    from hpc_launch.train.data import TrainBatches, build_data
    from hpc_launch.train.ds_config import build_config, fused_adamw_available, own_clipping, resolve_batch
    from hpc_launch.train.models import build_model

    info = train_dist.discover()
    train_dist.default_threads(info)
    train_dist.export_env(info)
    train_dist.init_distributed(info)
    data = build_data("synthetic", 32, synthetic_samples=8192, seed=0)
    cfg = build_config(
        batch=resolve_batch(info.world_size, 64),
        zero=0,
        total_steps=10**4,
        on_cpu=True,
        fused_adamw=fused_adamw_available("cpu"),  # as hpc_launch/train/trainer.py asks
    )
    ds_cfg, max_norm = own_clipping(cfg, GRADIENT_CLIPPING_DEFAULT)
    torch.manual_seed(0)
    model = build_model("smallcnn", data.num_classes)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_cfg)
    torch.manual_seed(0)
    ddp = torch.nn.parallel.DistributedDataParallel(build_model("smallcnn", data.num_classes))
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3, weight_decay=0.01, fused=ddp_same or None)
    loader = TrainBatches(data.train, 64, info.rank, info.world_size, 0, 0).epoch(0)
    batches = [next(loader) for _ in range(8)]

    def entrypoint_step(x, y):
        t0 = time.perf_counter()
        loss = F.cross_entropy(engine(x.to(memory_format=torch.channels_last)).float(), y)  # as the trainer, on CPUs
        t1 = time.perf_counter()
        engine.backward(loss)
        t2 = time.perf_counter()
        if max_norm:
            torch.nn.utils.clip_grad_norm_(engine.module.parameters(), max_norm)
        engine.step()
        return t0, t1, t2, time.perf_counter()

    def ddp_step(x, y):
        t0 = time.perf_counter()
        loss = F.cross_entropy(ddp(x.to(memory_format=torch.channels_last if ddp_same else torch.preserve_format)), y)
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), GRADIENT_CLIPPING_DEFAULT)
        opt.step()
        return t0, t1, t2, time.perf_counter()

    times: dict = {"entrypoint": [], "DDP": []}
    cpu: dict = {"entrypoint": [], "DDP": []}  # this process's CPU seconds per step: what load does not inflate
    for block in range(blocks + 1):  # block 0 warms both up
        pair = [("entrypoint", entrypoint_step), ("DDP", ddp_step)]
        for name, fn in pair if block % 2 else pair[::-1]:
            tdist.barrier()
            cpu0 = time.process_time()
            marks = [fn(*batches[i % len(batches)]) for i in range(10)]
            if block:
                times[name] += marks
                cpu[name].append((time.process_time() - cpu0) / 10)
    if info.rank == 0:
        med = {
            name: [statistics.median(m[i + 1] - m[i] for m in marks) * 1000 for i in range(3)]
            for name, marks in times.items()
        }
        for name, (fwd, bwd, step) in med.items():
            print(
                f"{name}: forward {fwd:.2f} ms, backward + all-reduce {bwd:.2f} ms, clip + step {step:.2f} ms; "
                f"CPU {statistics.median(cpu[name]) * 1000:.2f} ms per step (rank 0)"
            )
        ratio = sum(med["DDP"]) / sum(med["entrypoint"])
        cpu_ratio = statistics.median(cpu["DDP"]) / statistics.median(cpu["entrypoint"])
        print(f"entrypoint/DDP: {ratio:.3f} from the wall-time medians, {cpu_ratio:.3f} from CPU time", flush=True)
    tdist.barrier()


def part_phases(args) -> None:
    print(f"== per phase, entrypoint's engine vs DDP in the same 2 ranks, {args.blocks} blocks of 10 steps", flush=True)
    load = os.getloadavg()[0]
    cmd = [BIN / "torchrun", "--nproc_per_node", "2", "--master_port", str(free_port()), __file__]
    fused = ["--ddp-same-choices"] if args.ddp_same else []
    proc = subprocess.run([*cmd, "--phases-worker", str(args.blocks), *fused], cwd=REPO, env=env(), text=True)
    print(f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; {os.cpu_count()} CPUs", flush=True)
    if proc.returncode:
        sys.exit(proc.returncode)


def main() -> None:
    if "--phases-worker" in sys.argv:
        return phases_worker(int(sys.argv[sys.argv.index("--phases-worker") + 1]), "--ddp-same-choices" in sys.argv)
    if "--ddp-worker" in sys.argv:
        argv = sys.argv[1:]
        argv.remove("--ddp-worker")
        return ddp_worker(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("all", "ddp", "sweep", "phases"), default="all")
    p.add_argument("--blocks", type=int, default=20, help="--part phases: blocks of 10 steps each side")
    p.add_argument("--model", default="smallcnn")
    p.add_argument("--sweep-model", default="resnet18", help="big enough that ZeRO's memory savings show")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--micro-batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--repeats", type=int, default=7, help="alternating rounds (the target is read on >= 7)")
    p.add_argument(
        "--ddp-same-choices",
        dest="ddp_same",
        action="store_true",
        help="the DDP baseline with the entrypoint's CPU choices (fused AdamW, channels_last batches); default: "
        "torch's defaults, as a hand-written loop has them",
    )
    p.add_argument("--offload", action="store_true", help="add ZeRO-2/3 with CPU optimizer offload (builds cpu_adam)")
    args = p.parse_args()
    if args.part == "phases":
        return part_phases(args)
    if args.part in ("all", "ddp"):
        part_ddp(args)
    if args.part in ("all", "sweep"):
        sweep = argparse.Namespace(**vars(args))
        sweep.steps, sweep.micro_batch = min(args.steps, 30), min(args.micro_batch, 32)
        part_sweep(sweep)


if __name__ == "__main__":
    main()
