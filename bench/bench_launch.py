"""What a launch costs: `hpc-launch submit` to the first training step, phase by phase, against a
hand-written `deepspeed --hostfile ...` command for the same job, run side by side.

    testbed/up.sh && . testbed/env.sh
    .venv/bin/python bench/bench_launch.py                      # every route, 1 and 2 nodes
    .venv/bin/python bench/bench_launch.py --routes pods --repeats 3
    .venv/bin/python bench/bench_launch.py --cold               # + one cold op build, then a warm job

Routes: `local` (this machine, 1 node: it has no other), `pods` (the testbed's ssh pods through
`--cluster pods --login pod1`, the user override of docs/sites/pods.md) and `slurm` (the testbed's
Slurm, `srun`). The baseline is the same training (same entrypoint, arguments, op cache and
interface pinning) started on pod1 by hand: `ssh pod1 deepspeed --hostfile H --launcher pdsh
--no_ssh_check --master_addr ... --ssh_port 22 train_entry.py ARGS` (1 node: a one-line hostfile, so
DeepSpeed starts the rank locally), timed from before `ssh` to the first step.

Phases, from timestamps the job logs (epoch seconds; the job's prologue prints `t=`, DeepSpeed's
runner logs `cmd = ...` with milliseconds, rank 0 prints `[hpc-train] start-up: ...` after step 1):

  hpc-launch   the submit command's own wall time (its `--dry-run`, i.e. start-up + render, is shown
               apart from upload + submit)
  scheduler    submit returned -> the job script's first line (`t=`)
  launcher     script start -> rank 0's process started (environment, hostfile, ssh check,
               DeepSpeed's runner, pdsh/srun fan-out, DeepSpeed's per-node launcher)
  framework    rank process start -> DeepSpeed ready (imports, process group, deepspeed.initialize
               with its op loads or builds)
  first step   DeepSpeed ready -> first step done

Prints figures and the ratio whole/baseline (target <= 1.5) and hpc-launch's share (target < 0.3 s);
asserts nothing, exits 0.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ARGS = "--model smallcnn --data synthetic --steps 2 --micro-batch 8 --log-every 1 --no-eval"


def testbed_env() -> dict:
    out = subprocess.run(["bash", "-c", f". {REPO}/testbed/env.sh && env -0"], capture_output=True, check=True).stdout
    return dict(item.decode().split("=", 1) for item in out.split(b"\0") if b"=" in item)


def ssh_args(tb: dict) -> str:
    return (
        f"-F {tb['HPC_TESTBED_SSH_CONFIG']} -i {tb['HPC_TESTBED_KEY']} -o IdentitiesOnly=yes "
        f"-o UserKnownHostsFile={tb['HPC_TESTBED_KNOWN_HOSTS']} -o "
        "StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=5"
    )


def setup(tb: dict, ext: str) -> tuple:
    """A profile dir (the pods override, the testbed's Slurm) and a state dir of our own."""
    root = Path(tempfile.mkdtemp(prefix="bench-launch.", dir=tb["HPC_TESTBED_WORK"]))
    root.chmod(0o755)
    clusters = root / "clusters"
    clusters.mkdir()
    (clusters / "pods.yaml").write_text(
        "node: {gpus: 1, cpus: 2}\npython: {venv: auto}\nenv: {OMP_NUM_THREADS: '1'}\nnet_if: eth0\n"
        f"launch: {{launcher: deepspeed-pdsh, ssh_port: 22, pdsh_ssh_args: '{ssh_args(tb)}'}}\n"
    )
    (clusters / "tb-slurm.yaml").write_text((REPO / "tests/e2e/profiles/tb-slurm.yaml").read_text())
    env = dict(os.environ, **tb)
    env.update(
        HPC_LAUNCH_CLUSTERS_DIR=str(clusters),
        HPC_LAUNCH_STATE_DIR=str(root / "state"),
        HPC_LAUNCH_SSH_CONFIG=tb["HPC_TESTBED_SSH_CONFIG"],
        HPC_LAUNCH_KNOWN_HOSTS=tb["HPC_TESTBED_KNOWN_HOSTS"],
        TORCH_EXTENSIONS_DIR=ext,
        PYTHONUNBUFFERED="1",
    )
    return root, env


def submit_argv(route: str, nodes: int, workdir: Path, ext: str) -> list:
    common = ["--workdir", str(workdir), "--train-args", ARGS, "-e", f"TORCH_EXTENSIONS_DIR={ext}"]
    if route == "local":
        return ["--cluster", "local", "--gpus-per-node", "1", *common]  # one rank, as the baseline
    if route == "pods":
        return ["--cluster", "pods", "--login", "pod1", "--hosts", ",".join(["pod1", "pod2"][:nodes]), *common]
    return ["--cluster", "tb-slurm", "--nodes", str(nodes), *common]


def startup_line(text: str) -> dict:
    m = re.search(r"\[hpc-train\] start-up: (.*)", text)
    if not m:
        return {}
    return {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}


def runner_time(text: str):
    m = re.search(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] \[INFO\] \[runner\.py:\d+:main\] cmd = ", text)
    if not m:
        return None
    return time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000


def wait_for_log(workdir: Path, timeout: float = 600) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for log in workdir.glob("train.o*"):
            if log.name.endswith((".exitcode", ".live")):
                continue
            text = log.read_text(errors="replace")
            if "[hpc-train] start-up:" in text or (log.with_name(log.name + ".exitcode").exists()):
                time.sleep(0.3)
                return log.read_text(errors="replace")
        time.sleep(0.2)
    raise SystemExit(f"no first step in {workdir} within {timeout:.0f} s")


def via_hpc_launch(route: str, nodes: int, root: Path, env: dict, ext: str) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix=f"{route}{nodes}.", dir=root))
    workdir.chmod(0o755)
    argv = [str(BIN / "hpc-launch"), "submit", *submit_argv(route, nodes, workdir, ext)]
    t0 = time.time()
    dry = subprocess.run(argv + ["--dry-run"], env=env, capture_output=True, text=True)
    dry_s = time.time() - t0
    if dry.returncode:
        raise SystemExit(f"dry-run failed: {dry.stderr}")
    t0 = time.time()
    sub = subprocess.run(argv, env=env, capture_output=True, text=True)
    t1 = time.time()
    if sub.returncode:
        raise SystemExit(f"submit failed: {sub.stderr}")
    text = wait_for_log(workdir)
    s = startup_line(text)
    m = re.search(r"^\[hpc-launch\] job .* t=([\d.]+)", text, re.M)
    if not s or not m:
        raise SystemExit(f"{route}: no start-up line in the log:\n{text[-3000:]}")
    script_t = float(m.group(1))
    runner = runner_time(text)
    return {
        "whole": s["first_step"] - t0,
        "hpc-launch": t1 - t0,
        "render": dry_s,
        "scheduler": script_t - t1,
        "launcher": s["process"] - script_t,
        "runner": (runner - script_t) if runner else None,
        "framework": s["deepspeed"] - s["process"],
        "imports": s["imported"] - s["process"],
        "first step": s["first_step"] - s["deepspeed"],
    }


def by_hand(nodes: int, root: Path, env: dict, tb: dict, ext: str) -> dict:
    """The same job as a user would type it on pod1: hostfile, .deepspeed_env, one deepspeed command."""
    workdir = Path(tempfile.mkdtemp(prefix=f"hand{nodes}.", dir=root))
    workdir.chmod(0o755)
    (workdir / "hostfile").write_text("".join(f"pod{i + 1} slots=1\n" for i in range(nodes)))
    venv = str(BIN.parent)
    (workdir / ".deepspeed_env").write_text(
        f"GLOO_SOCKET_IFNAME=eth0\nOMP_NUM_THREADS=1\nTORCH_EXTENSIONS_DIR={ext}\nPATH={BIN}:/usr/bin:/bin\nVIRTUAL_ENV={venv}\n"
    )
    entry = REPO / "hpc_launch" / "train_entry.py"
    cmd = (
        f"cd {shlex.quote(str(workdir))} && export PATH={BIN}:$PATH GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 "
        f"TORCH_EXTENSIONS_DIR={shlex.quote(ext)} PDSH_SSH_ARGS_APPEND={shlex.quote(ssh_args(tb))} && "
        "deepspeed --hostfile hostfile --launcher pdsh --no_ssh_check --master_addr 10.200.0.11 --master_port "
        f"29{nodes}77 --ssh_port 22 {entry} {ARGS}"
    )
    t0 = time.time()
    r = subprocess.run(
        ["ssh", "-F", tb["HPC_TESTBED_SSH_CONFIG"], "pod1", cmd], env=env, capture_output=True, text=True
    )
    s = startup_line(r.stdout + r.stderr)
    if not s:
        raise SystemExit(f"hand-written run failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    return {
        "whole": s["first_step"] - t0,
        "launcher": s["process"] - t0,
        "framework": s["deepspeed"] - s["process"],
        "first step": s["first_step"] - s["deepspeed"],
    }


def median(rows: list, key: str):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--routes", default="local,pods,slurm")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument(
        "--cold", action="store_true", help="first a job with an empty op cache, then one with the cache it built"
    )
    a = ap.parse_args()
    tb = testbed_env()
    ext = str(BIN.parent / "torch_extensions")  # the environment's op cache, as jobs default to it
    root, env = setup(tb, ext)
    print(f"# machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; op cache {ext}; work {root}")
    if a.cold:
        cold_ext = str(root / "cold-torch-extensions")
        for label in ("cold (empty op cache)", "warm (the same cache, next job)"):
            row = via_hpc_launch("pods", 2, root, env, cold_ext)
            print(f"pods 2 nodes, {label}: whole {row['whole']:.1f} s, framework {row['framework']:.1f} s")
    results = []
    for route in filter(None, a.routes.split(",")):
        for nodes in (1,) if route == "local" else (1, 2):
            ours, hand = [], []
            for _ in range(a.repeats):  # side by side: A, B, A, B ...
                ours.append(via_hpc_launch(route, nodes, root, env, ext))
                hand.append(by_hand(nodes, root, env, tb, ext))
            results.append((route, nodes, ours, hand))
    if not results:
        return 0
    keys = ["hpc-launch", "render", "scheduler", "launcher", "runner", "framework", "imports", "first step", "whole"]
    print("\n| route | nodes | " + " | ".join(keys) + " | hand-written deepspeed | ratio |")
    print("|---|---|" + "---|" * (len(keys) + 2))
    for route, nodes, ours, hand in results:
        whole, base = median(ours, "whole"), median(hand, "whole")
        print(
            f"| {route} | {nodes} | "
            + " | ".join(fmt(median(ours, k)) for k in keys)
            + f" | {base:.2f} | {whole / base:.2f} |"
        )
    print(
        "\nhand-written phases (median s): "
        + "; ".join(
            f"{nodes} node(s): launcher {fmt(median(hand, 'launcher'))}, framework {fmt(median(hand, 'framework'))}, "
            f"first step {fmt(median(hand, 'first step'))}"
            for route, nodes, _, hand in results
            if route == "pods"
        )
    )
    worst = max(median(o, "whole") / median(h, "whole") for _, _, o, h in results)
    own = max(median(o, "hpc-launch") for _, _, o, _ in results)
    print(f"\nwhole start-up / hand-written: worst {worst:.2f} (target <= 1.5): {'PASS' if worst <= 1.5 else 'FAIL'}")
    print(f"hpc-launch's own share: worst {own:.2f} s (target < 0.3 s): {'PASS' if own < 0.3 else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
