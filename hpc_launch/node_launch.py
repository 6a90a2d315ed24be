"""DeepSpeed's per-node launcher (`deepspeed/launcher/launch.py`, what `deepspeed --num_gpus N` runs on
a node) without importing torch or DeepSpeed.

launch.py imports DeepSpeed, and through it torch (~1.5 CPU-s and ~1.3 s before the first rank is
spawned, on every job), to learn one name: its accelerator's visible-devices variable. That is
`CUDA_VISIBLE_DEVICES` for CUDA, ROCm, CPU, MPS and Habana alike; where it is certainly that
(`visible_devices_variable`), this module does what launch.py does: the same ranks' environment
and command lines, the same log lines in DeepSpeed's logger format, a failing rank's code as the
launcher's once every rank's process tree is ended, SIGTERM/SIGINT likewise with code 1. Where it
is not (a build for Intel XPU, Ascend, Cambricon...; an option not taken here: `--save_pid`,
`--enable_each_rank_log`, `--bind_cores_to_rank`), `hpc_launch.ds_launcher` runs DeepSpeed's own.
tests/train/test_node_launch.py runs both on the same arguments and compares what the ranks get.

Standard library only: a job-side leaf (tests/test_job_side_imports.py)."""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import NoReturn

VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
# What DeepSpeed's get_accelerator() looks for before it settles on CUDA or CPU
# (deepspeed/accelerator/real_accelerator.py, 0.19): any of them there, and the answer may be
# another variable (ZE_AFFINITY_MASK, ASCEND_RT_VISIBLE_DEVICES, MLU_VISIBLE_DEVICES...).
OTHER_BACKENDS = (
    "intel_extension_for_pytorch",
    "intel_extension_for_deepspeed",
    "torch_npu",
    "torch_sdaa",
    "torch_mlu",
    "torch_supa",
    "torch_xmlir",
)
# DS_ACCELERATOR values DeepSpeed takes without a check that could refuse them, whose variable is ours.
CHOSEN_SAME = ("cuda", "cpu")
# Options of launch.py this module does not carry out: DeepSpeed's own launcher runs them.
NOT_HERE = ("save_pid", "enable_each_rank_log", "bind_cores_to_rank", "bind_core_list")
TERMINATE_GRACE_S = 30.0  # launch.py's psutil.wait_procs(timeout=30) before SIGKILL
SIGNAL_NAMES = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}


def visible_devices_variable(environ: Mapping[str, str]) -> str | None:
    """`CUDA_VISIBLE_DEVICES` where DeepSpeed would certainly pick an accelerator that sets it;
    None where only DeepSpeed can tell."""
    chosen = environ.get("DS_ACCELERATOR")
    if chosen is not None:
        return VISIBLE_DEVICES if chosen in CHOSEN_SAME else None
    if any(find_spec(name) for name in OTHER_BACKENDS) or _torch_may_have_xpu():
        return None
    return VISIBLE_DEVICES


def _torch_may_have_xpu() -> bool:
    built = torch_built_for(("xpu",))
    return built is None or "xpu" in built  # without a readable torch, DeepSpeed's launcher says what is missing


def torch_built_for(fields: Sequence[str]) -> set[str] | None:
    """Which of torch/version.py's build fields (`cuda`, `hip`, `xpu`) are set, read without importing
    torch; None where there is no torch to read."""
    spec = find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return None
    pattern = r"^(%s)\b[^=\n]*=\s*(.+?)\s*$" % "|".join(map(re.escape, fields))
    return {name for name, value in re.findall(pattern, text, re.M) if value != "None"}


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """launch.py's own options, with its defaults."""
    p = argparse.ArgumentParser(prog="launch.py", description="DeepSpeed's per-node launcher, without torch")
    p.add_argument("--node_rank", type=int, default=0)
    p.add_argument("--master_addr", default="127.0.0.1", type=str)
    p.add_argument("--master_port", default=29500, type=int)  # deepspeed/constants.py
    p.add_argument("--world_info", default="None", type=str, help="base64 of {host: [local ids]}")
    p.add_argument("--module", action="store_true", help="run the script as `python -m`")
    p.add_argument("--no_python", action="store_true", help="run the script as a command")
    p.add_argument("--no_local_rank", action="store_true", help="do not pass --local_rank=N")
    p.add_argument("--save_pid", type=int, default=0)
    p.add_argument("--enable_each_rank_log", default="None", type=str)
    p.add_argument("--bind_cores_to_rank", action="store_true")
    p.add_argument("--bind_core_list", type=str, default=None)
    p.add_argument("--log_level", type=str, default="info", choices=["debug", "info", "warning", "error", "critical"])
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("training_script", type=str)
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return p.parse_args(argv)


def runs_here(args: argparse.Namespace, environ: Mapping[str, str]) -> bool:
    """Whether this module launches these ranks as DeepSpeed's launcher would."""
    taken = (args.save_pid, args.enable_each_rank_log != "None", args.bind_cores_to_rank, args.bind_core_list)
    return not any(taken) and visible_devices_variable(environ) is not None


def deepspeed_logger(level: str) -> logging.Logger:
    """DeepSpeed's logger, as launch.py's lines look (deepspeed/utils/logging.py): stdout, its format."""
    log = logging.getLogger("hpc_launch.node_launch")
    handler = logging.StreamHandler(stream=sys.stdout)
    handler.setFormatter(
        logging.Formatter("[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s")
    )
    log.addHandler(handler)
    log.setLevel(logging.getLevelName(level.upper()))
    log.propagate = False
    return log


def rank_command(args: argparse.Namespace, local_rank: int) -> list[str]:
    if args.no_python and args.module:
        raise ValueError("Don't use both the '--no_python' flag and the '--module' flag at the same time.")
    cmd = [] if args.no_python else [sys.executable, "-u", *(["-m"] if args.module else [])]
    cmd.append(args.training_script)
    if not args.no_local_rank:
        cmd.append(f"--local_rank={local_rank}")
    return cmd + list(args.training_script_args)


def node_environment(args: argparse.Namespace, environ: Mapping[str, str], log: logging.Logger) -> tuple:
    """The environment every rank of this node shares, and this node's global ranks."""
    env = dict(environ)
    # DeepSpeed's import sets this (deepspeed/__init__.py) before launch.py copies the environment
    env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    for key in env:
        if "NCCL" in key:
            log.info(f"{args.node_rank} {key}={env[key]}")
    if args.world_info == "None":
        raise ValueError("world_info can not be None")
    world = json.loads(base64.urlsafe_b64decode(args.world_info))
    log.info(f"WORLD INFO DICT: {world}")
    nodes = list(world)
    local_ids = world[nodes[args.node_rank]]
    log.info(f"nnodes={len(nodes)}, num_local_procs={len(local_ids)}, node_rank={args.node_rank}")
    mapping: defaultdict = defaultdict(list)  # launch.py logs this defaultdict as it is
    world_size = 0
    for node in nodes:
        for _ in world[node]:
            mapping[node].append(world_size)
            world_size += 1
    log.info(f"global_rank_mapping={mapping}")
    log.info(f"dist_world_size={world_size}")
    env[VISIBLE_DEVICES] = ",".join(map(str, local_ids))
    log.info(f"Setting {VISIBLE_DEVICES}={env[VISIBLE_DEVICES]}")
    env.update(
        MASTER_ADDR=args.master_addr,
        MASTER_PORT=str(args.master_port),
        WORLD_SIZE=str(world_size),
        CROSS_RANK=str(args.node_rank),
        CROSS_SIZE=str(len(nodes)),
        LOCAL_SIZE=str(len(local_ids)),
    )
    return env, mapping[nodes[args.node_rank]]


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> NoReturn:
    """Launch this node's ranks as `parse` read them (ds_launcher parses once, to choose this or DeepSpeed's)."""
    log = deepspeed_logger("error" if args.quiet else args.log_level)
    env, ranks = node_environment(args, environ, log)
    ranks_here: list[tuple[subprocess.Popen, list[str]]] = []
    for dist_rank in ranks:
        local_rank = dist_rank % len(ranks)
        cmd = rank_command(args, local_rank)
        proc = subprocess.Popen(cmd, env={**env, "RANK": str(dist_rank), "LOCAL_RANK": str(local_rank)})
        log.info(f"process {proc.pid} spawned with command: {cmd}")
        ranks_here.append((proc, cmd))
    procs = [proc for proc, _ in ranks_here]
    failed: list[int] = []  # a rank's code, once one failed

    def on_signal(signum: int, _frame: object) -> None:
        _end_ranks(procs, log)
        if failed:
            sys.exit(failed[0])
        log.info(f"Main process received {SIGNAL_NAMES[signal.Signals(signum)]}, exiting")
        sys.exit(1)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    _watch(ranks_here, failed, log)
    sys.stdout.flush()
    sys.exit(0)


def _watch(ranks: list[tuple[subprocess.Popen, list[str]]], failed: list[int], log: logging.Logger) -> None:
    """Until every rank exited 0; the first that exits otherwise ends them all with its code. Wakes
    when a rank exits (launch.py looks once a second)."""
    alive = list(ranks)
    while alive:
        _wait_for_an_exit()
        for proc, cmd in list(alive):
            code = proc.poll()
            if code is None:
                continue
            if code != 0:
                failed.append(code)
                _end_ranks([p for p, _ in ranks], log)
                log.error(f"{cmd} exits with return code = {code}")
                sys.exit(code)
            log.info(f"Process {proc.pid} exits successfully.")
            alive.remove((proc, cmd))


def _wait_for_an_exit() -> None:
    """Blocks until a child has exited, leaving it to be collected by its Popen."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:
        pass


def _end_ranks(procs: list[subprocess.Popen], log: logging.Logger) -> None:
    """Every rank and everything it started: SIGTERM, then SIGKILL after the grace (launch.py's
    terminate_process_tree, one rank after the other)."""
    for proc in procs:
        log.info(f"Killing subprocess {proc.pid}")
        tree = [*_descendants(proc.pid), proc.pid]
        for pid in tree:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + TERMINATE_GRACE_S
        while any(_running(pid) for pid in tree) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in tree:
            if _running(pid):
                _signal(pid, signal.SIGKILL)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie rank is collected by its Popen afterwards)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
