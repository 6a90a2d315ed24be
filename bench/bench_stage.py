"""Node-local staging (hpc_launch/stage.py) on the testbed's Slurm pods: what the model in
docs/staging.md is checked against.

    . testbed/env.sh && .venv/bin/python bench/bench_stage.py             # the whole venv, ~5-10 min
    .venv/bin/python bench/bench_stage.py --src .venv/lib/python3.11/site-packages/deepspeed --repeats 3

(a) staging time per node count (1, 2, 3 pods): `srun -N k --ntasks-per-node=1 python -m
    hpc_launch.stage` of SRC (default: this venv), as the job script runs it; node 0's own line
    (bytes, seconds) and srun's wall time. Beside it, the naive way: every node copies SRC from the
    shared path itself (`srun -N k cp -a`), k readers of the shared file system at once.
(b) import time of `import torch, deepspeed` from the shared venv vs a staged copy of it
    (interleaved fresh processes, medians, warm page cache: the testbed's "shared" file system is
    this machine's own disk, so this shows the copy is not slower, NOT the parallel-FS storm).
Prints figures only; always exits 0. Prints nproc and the load average: a loaded machine's
figures are not comparable.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINE = re.compile(r"on (\d+) node\(s\), ([\d.]+) MB in ([\d.]+) s")


def _addrs(nodes: list, path: Path) -> None:
    out = subprocess.run(["scontrol", "show", "node", "-o", ",".join(nodes)], capture_output=True, text=True)
    with path.open("w") as fh:
        for line in out.stdout.splitlines():
            kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
            fh.write(f"{kv.get('NodeName')} {kv.get('NodeAddr')}\n")


def stage_once(k: int, src: Path, work: Path, port: int, python: str) -> tuple:
    nodes = [f"pod{i + 1}" for i in range(k)]
    hostfile = work / f"hosts{k}"
    hostfile.write_text("".join(f"{n} slots=1\n" for n in nodes))
    _addrs(nodes, work / f"addrs{k}")
    token = work / "token"
    token.write_text(os.urandom(32).hex())
    token.chmod(0o600)
    dest = work / f"dest{k}"
    argv = ["srun", "-N", str(k), "-w", ",".join(nodes), "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    argv += ["bash", "-c", 'cd / && exec "$0" -m hpc_launch.stage --index-var SLURM_NODEID "$@"', python]
    argv += ["--hostfile", str(hostfile), "--addrs", str(work / f"addrs{k}"), "--port", str(port)]
    argv += ["--token-file", str(token), "--src", str(src), "--dest", f"{dest}/{{host}}"]
    argv += ["--venv"] if (src / "pyvenv.cfg").exists() else []
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - t0
    m = LINE.search(r.stdout)
    shutil.rmtree(dest, ignore_errors=True)
    if r.returncode != 0 or not m:
        print(f"  stage k={k} failed: {r.stderr.strip()[-500:]}")
        return None, None, wall
    return float(m.group(2)), float(m.group(3)), wall


def naive_once(k: int, src: Path, work: Path) -> float:
    nodes = [f"pod{i + 1}" for i in range(k)]
    dest = work / f"naive{k}"
    dest.mkdir(exist_ok=True)
    t0 = time.monotonic()
    subprocess.run(
        [
            "srun",
            "-N",
            str(k),
            "-w",
            ",".join(nodes),
            "--ntasks-per-node=1",
            "bash",
            "-c",
            f'cp -a {src} {dest}/"$(hostname)"',
        ],
        check=True,
    )
    wall = time.monotonic() - t0
    shutil.rmtree(dest, ignore_errors=True)
    return wall


def import_time(python: str) -> float:
    t0 = time.monotonic()
    subprocess.run([python, "-c", "import torch, deepspeed"], check=True, capture_output=True, cwd="/")
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=Path(sys.prefix), help="what to stage (default: this venv)")
    ap.add_argument("--nodes", default="1,2,3")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--import-pairs", type=int, default=5)
    ap.add_argument(
        "--work", type=Path, default=Path(os.environ.get("HPC_TESTBED_DIR", "/tmp/hpc-testbed")) / "bench-stage"
    )
    ap.add_argument("--port", type=int, default=31700)
    ap.add_argument("--skip", default="", help="a,b")
    a = ap.parse_args()
    skip = set(a.skip.split(","))
    print(f"nproc {os.cpu_count()}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    a.work.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=a.work))
    python = str(Path(sys.prefix) / "bin" / "python")
    try:
        if "a" not in skip:
            print(f"(a) staging {a.src} over the pods (tree broadcast) vs every node copying it itself")
            print("  nodes  MB       stage s (node 0)  srun wall s  MB/s per node  naive cp -a wall s")
            for k in [int(x) for x in a.nodes.split(",")]:
                for _ in range(a.repeats):
                    mb, took, wall = stage_once(k, a.src, work, a.port, python)
                    naive = naive_once(k, a.src, work)
                    if mb is None:
                        continue
                    print(f"  {k:5d}  {mb:7.1f}  {took:16.1f}  {wall:11.1f}  {mb / took:13.1f}  {naive:18.1f}")
        if "b" not in skip:
            copy = work / "copy"
            (work / "token").write_text(os.urandom(32).hex())
            r = subprocess.run(
                [
                    python,
                    "-m",
                    "hpc_launch.stage",
                    "--hostfile",
                    "/dev/stdin",
                    "--index",
                    "0",
                    "--port",
                    str(a.port + 1),
                ]
                + ["--token-file", str(work / "token"), "--src", sys.prefix, "--dest", str(copy), "--venv"],
                input="127.0.0.1 slots=1\n",
                capture_output=True,
                text=True,
                cwd="/",
            )
            if r.returncode != 0:
                print(f"(b) staging for the import test failed: {r.stderr.strip()}")
                return 0
            shared, staged = [], []
            for _ in range(a.import_pairs):
                shared.append(import_time(python))
                staged.append(import_time(str(copy / "bin" / "python")))
            ms, mc = statistics.median(shared), statistics.median(staged)
            print(
                f"(b) import torch, deepspeed: shared venv {ms:.2f} s, staged copy {mc:.2f} s "
                f"(median of {a.import_pairs} interleaved pairs; ratio copy/shared {mc / ms:.2f})"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
