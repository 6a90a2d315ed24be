"""A rank's start-up, as every rank of every job pays it: the shipped entrypoint, one CPU rank,
four steps of smallcnn on synthetic data; CPU seconds (user + sys) and wall time per start.

    python bench/bench_rank_start.py            # ~1.5 min on 2 cores
    python bench/bench_rank_start.py --pairs 9

Interleaved pairs, the same command twice:
  now       - as the entrypoint runs (hpc_launch/train/ds_startup.py keeps DeepSpeed's Muon modules, and the
              torch compiler their `@compiler.compile()` pulls in, unimported for another optimizer)
  baseline  - the same, with DeepSpeed's own Muon modules imported first, as deepspeed 0.19.8
              imports them (ds_startup leaves modules already imported alone)
Also the phases the entrypoint prints (imported, process group, DeepSpeed ready, first step).
Prints figures only; it never fails (speed is not asserted in tests).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARGS = ["--model", "smallcnn", "--data", "synthetic", "--steps", "4", "--micro-batch", "8", "--no-eval"]
MUON = "deepspeed.runtime.zero.muon.muon_optimizer", "deepspeed.runtime.zero.muon.original_muon"
START = re.compile(
    r"start-up: process=([\d.]+) imported=([\d.]+) process_group=([\d.]+) deepspeed=([\d.]+) first_step=([\d.]+)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one(preimport: tuple, work: Path) -> dict:
    """One start in a fresh process; CPU from the kernel's account of the reaped child."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPC_LAUNCH_", "PYTHONPROFILEIMPORTTIME"))}
    env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    env.setdefault("TORCH_EXTENSIONS_DIR", str(REPO / ".ci-cache" / "torch_extensions"))
    entry = REPO / "hpc_launch" / "train_entry.py"
    code = (
        "import importlib, runpy, sys\n"
        f"for name in {list(preimport)!r}:\n"
        "    importlib.import_module(name)\n"
        f"sys.argv = [{str(entry)!r}, *sys.argv[1:]]\n"
        f"runpy.run_path({str(entry)!r}, run_name='__main__')\n"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, *ARGS], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"the entrypoint failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    m = START.search(proc.stdout + proc.stderr)
    p, imported, group, ready, first = map(float, m.groups()) if m else (0.0,) * 5
    return {
        "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "wall": wall,
        "import": imported - p,
        "deepspeed": ready - group,
        "first_step": first - ready,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    args = ap.parse_args()
    results: dict = {"now": [], "baseline": []}
    with tempfile.TemporaryDirectory() as tmp:
        one((), Path(tmp))  # warm the page cache and the .pyc files for both
        for _ in range(args.pairs):
            results["now"].append(one((), Path(tmp)))
            results["baseline"].append(one(MUON, Path(tmp)))
    print(f"one CPU rank, {' '.join(ARGS)}; {args.pairs} interleaved pairs, medians; load {os.getloadavg()[0]:.2f}")
    print(f"{'':10} {'CPU s':>7} {'wall s':>7} {'import':>7} {'DeepSpeed':>10} {'1st step':>9}")
    med = {}
    for side, runs in results.items():
        med[side] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        m = med[side]
        print(
            f"{side:10} {m['cpu']:7.2f} {m['wall']:7.2f} {m['import']:7.2f}"
            f" {m['deepspeed']:10.2f} {m['first_step']:9.2f}"
        )
    print(
        f"now / baseline: CPU {med['now']['cpu'] / med['baseline']['cpu']:.2f}x, "
        f"wall {med['now']['wall'] / med['baseline']['wall']:.2f}x "
        f"({med['baseline']['cpu'] - med['now']['cpu']:.2f} CPU-s less per rank start)"
    )


if __name__ == "__main__":
    main()
