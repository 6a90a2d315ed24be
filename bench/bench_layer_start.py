"""The job layer's start cost per rank: `python -m hpc_launch.joblayer SCRIPT` against `python SCRIPT`
and `python -c pass`, with a Slurm rank's variables (what srun gives), wall time per start.

    python bench/bench_layer_start.py            # ~10 s
    python bench/bench_layer_start.py --runs 60

Interleaved, the same empty script each time; prints the medians and the layer's extra cost
(target: under 50 ms per rank). Prints figures only; it never fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SLURM_RANK = {
    "SLURM_PROCID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "1",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
    # the layer's own start: the pre-flight gate (torch, a rendezvous with the other rank) is the
    # gate's cost, printed by every gated job (`preflight ok: ... gate N s`)
    "HPC_LAUNCH_PREFLIGHT": "0",
}


def wall(argv: list, env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    runs = ap.parse_args().runs
    env = dict(os.environ, PYTHONPATH=str(REPO), **SLURM_RANK)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "empty.py"
        script.write_text("")
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "python SCRIPT": [sys.executable, "-u", str(script)],
            "python -m hpc_launch.joblayer SCRIPT": [sys.executable, "-u", "-m", "hpc_launch.joblayer", str(script)],
        }
        times: dict = {name: [] for name in commands}
        for argv in commands.values():
            wall(argv, env)  # warm the page cache and the bytecode
        for _ in range(runs):
            for name, argv in commands.items():
                times[name].append(wall(argv, env))
    median = {name: statistics.median(t) * 1000 for name, t in times.items()}
    for name, ms in median.items():
        print(f"{name:<40} {ms:7.1f} ms (median of {runs})")
    extra = median["python -m hpc_launch.joblayer SCRIPT"] - median["python -c pass"]
    print(f"the layer's start cost per rank: {extra:.1f} ms over `python -c pass` (target < 50 ms)")


if __name__ == "__main__":
    main()
