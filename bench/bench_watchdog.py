"""What the pre-flight gate and the watchdog cost: the same local training with both on and with
both off (HPC_LAUNCH_PREFLIGHT=0 HPC_LAUNCH_WATCHDOG=0), interleaved A/B for --repeats rounds.

    .venv/bin/python bench/bench_watchdog.py                  # 3 rounds, 2 ranks, 300 steps of smallcnn
    .venv/bin/python bench/bench_watchdog.py --repeats 5 --steps 600

Prints the median samples/s of each (the entrypoint's running average after its warm-up), their
ratio (target: the watchdog costs under 1% per step, ratio >= 0.99), and the gate's own time from
its log line (`gate N s`). Always exits 0; quote it with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_train import BIN, REPO, env, free_port, last_metrics  # noqa: E402  (the same environment)

OFF = {"HPC_LAUNCH_PREFLIGHT": "0", "HPC_LAUNCH_WATCHDOG": "0"}


def once(steps: int, ranks: int, extra_env: dict) -> dict:
    cmd = [
        str(BIN / "deepspeed"),
        "--num_gpus",
        str(ranks),
        "--master_port",
        str(free_port()),
        "--module",
        "hpc_launch.train",
        "--model",
        "smallcnn",
        "--data",
        "synthetic",
        "--steps",
        str(steps),
        "--log-every",
        "50",
        "--no-eval",
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=REPO, env={**env(), **extra_env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    if proc.returncode != 0:
        sys.exit(f"benchmark command failed ({proc.returncode}):\n{proc.stdout[-4000:]}")
    metrics = last_metrics(proc.stdout)
    metrics["wall_s"] = time.perf_counter() - t0
    metrics["out"] = proc.stdout
    return metrics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--ranks", type=int, default=2)
    a = ap.parse_args()
    print(
        f"nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}; {a.ranks} "
        f"ranks x {a.steps} steps of smallcnn, {a.repeats} rounds"
    )
    on, off, gates = [], [], []
    for i in range(a.repeats):
        for label, extra in (("on", {}), ("off", OFF)):
            m = once(a.steps, a.ranks, extra)
            rate = float(m.get("avg_samples_per_sec") or 0)
            (on if label == "on" else off).append(rate)
            gate = re.search(r"; gate ([\d.]+) s$", m["out"], re.M)
            if gate:
                gates.append(float(gate.group(1)))
            print(f"  round {i + 1} {label:3s}: {rate:8.1f} samples/s, wall {m['wall_s']:.1f} s")
    mon, moff = statistics.median(on), statistics.median(off)
    ratio = mon / moff if moff else float("nan")
    print(f"gate+watchdog on : {mon:8.1f} samples/s (median)")
    print(f"both off         : {moff:8.1f} samples/s (median)")
    print(f"ratio on/off     : {ratio:.3f}  target >= 0.99: {'PASS' if ratio >= 0.99 else 'FAIL'}")
    if gates:
        print(f"gate time        : {statistics.median(gates):.2f} s (median of the gate's own log line)")


if __name__ == "__main__":
    main()
