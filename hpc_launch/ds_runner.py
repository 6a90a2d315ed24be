"""DeepSpeed's multi-node runner for pdsh (`deepspeed --hostfile H --launcher pdsh ...`:
deepspeed/launcher/runner.py with multinode_runner.py's PDSHRunner) without importing torch, starting
`hpc_launch.ds_launcher` on every node where DeepSpeed starts `deepspeed.launcher.launch`.

`deepspeed` imports DeepSpeed and torch on the job's first node (~1.5 CPU-s, ~1.3 s) before pdsh
starts, and the launch.py it starts on each node imports them again before the first rank: about
2.6 s of every multi-node start, in series. This module builds DeepSpeed's pdsh command (the same
hosts, fan-out, exports, working directory, world info and options, the user's arguments quoted
alike) and its environment; on each node ds_launcher is DeepSpeed's launch.py without torch where the
accelerator's variable is certainly CUDA_VISIBLE_DEVICES, and DeepSpeed's own launch.py elsewhere.
Where this module cannot build DeepSpeed's command exactly (an option it does not carry out, one host,
a hostfile or .deepspeed_env DeepSpeed would refuse, no pdsh, another accelerator), DeepSpeed's runner
runs. tests/train/test_ds_runner.py runs both with a pdsh that records what it was given.

On purpose unlike DeepSpeed's runner:
- NCCL* variables are exported whenever torch is a CUDA or ROCm build; DeepSpeed exports them when
  torch also sees a GPU on this node (without one NCCL is not used).
- SIGINT/SIGTERM reach pdsh as DeepSpeed's runner sends them, then the runner exits 1, without its
  `pdsh ... pkill -f "<python> -u -m deepspeed.launcher.launch"`, which ends every job's launchers on
  those nodes; the job script stops this job's ranks (templates/body/launch/deepspeed-pdsh.sh.j2).

Standard library only: a job-side leaf (tests/test_job_side_imports.py)."""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from hpc_launch import node_launch

PER_NODE_LAUNCHER = "hpc_launch.ds_launcher"
# deepspeed/launcher/runner.py and constants.py (0.19)
PDSH_MAX_FAN_OUT = 1024
EXPORT_ENVS = ("MLFLOW", "PYTHON", "MV2", "UCX")
EXCLUDE_ENVS = {"AISC_JOB_NAME": ("NCCL_IB_HCA", "UCX_NET_DEVICES")}
HOSTFILE_LINE = re.compile(r"^(\S+)\s+slots=(\d+)")
UNQUOTED = re.compile(r"[^\w@%+=:,./-]")  # MultiNodeRunner.add_export quotes a value with any other character
DEFAULT_PORT = 29500  # TORCH_DISTRIBUTED_DEFAULT_PORT


class _NotHere(Exception):
    """DeepSpeed's runner does this launch (it may say why it cannot)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _NotHere(message)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The runner options the pdsh launch line uses, as DeepSpeed's runner reads them; any other
    option raises _NotHere."""
    p = _Parser(prog="deepspeed", add_help=False, allow_abbrev=False)
    p.add_argument("-H", "--hostfile", type=str, default="/job/hostfile")  # DLTS_HOSTFILE
    p.add_argument("--launcher", type=str, default="pdsh")
    p.add_argument("--launcher_args", type=str, default="")
    p.add_argument("--no_ssh_check", action="store_true")
    p.add_argument("--master_addr", type=str, default="")
    p.add_argument("--master_port", type=int, default=DEFAULT_PORT)
    p.add_argument("--ssh_port", type=int, default=None)
    p.add_argument("--module", action="store_true")
    p.add_argument("--no_python", action="store_true")
    p.add_argument("--no_local_rank", action="store_true")
    p.add_argument("user_script", type=str)
    p.add_argument("user_args", nargs=argparse.REMAINDER)
    return p.parse_args(argv)


def read_hostfile(path: str) -> dict[str, int]:
    """{host: slots} as DeepSpeed's _parse_hostfile reads it; _NotHere where it would refuse it."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as err:
        raise _NotHere(f"hostfile {path}: {err}") from None
    pool: dict[str, int] = {}
    for line in (raw.strip() for raw in lines):
        match = HOSTFILE_LINE.search(line)
        if line.startswith("#") or not line:
            continue
        if not match or match.group(1) in pool:
            raise _NotHere(f"hostfile line {line!r}")
        pool[match.group(1)] = int(match.group(2))
    return pool


def export_prefixes(environ: Mapping[str, str]) -> tuple[str, ...]:
    """EXPORT_ENVS and the accelerator's (get_accelerator().export_envs(): CUDA ['NCCL'], CPU [])."""
    chosen = environ.get("DS_ACCELERATOR")
    gpu_build = chosen == "cuda" or (chosen is None and _torch_built_for_gpus())
    return EXPORT_ENVS + (("NCCL",) if gpu_build else ())


def _torch_built_for_gpus() -> bool:
    built = node_launch.torch_built_for(("cuda", "hip"))
    if built is None:
        raise _NotHere("no torch here")
    return bool(built)


def quoted_export(value: str) -> str:
    value = value.strip()
    return f'"{value}"' if UNQUOTED.search(value) else value


def exports(environ: Mapping[str, str], env_files: Sequence[str]) -> dict[str, str]:
    """What runner.main exports to every node: variables with an exported prefix, then each
    .deepspeed_env line (KEY=VALUE), in its order."""
    excluded = {name for key, names in EXCLUDE_ENVS.items() if key in environ for name in names}
    prefixes = export_prefixes(environ)
    out = {}
    for key, value in environ.items():
        if key.startswith(prefixes) and key not in excluded:
            out[key.strip()] = quoted_export(value)
    for path in env_files:
        for line in Path(path).read_text().splitlines(keepends=True):
            if "=" not in line:
                raise _NotHere(f"{path}: a line without '=': {line!r}")
            key, value = line.split("=", 1)
            out[key.strip()] = quoted_export(value)
    return out


def env_files(environ: Mapping[str, str]) -> list[str]:
    """DEEPSPEED_ENVIRONMENT_PATHS x DS_ENV_FILE, as runner.main looks (an absolute name twice)."""
    name = environ.get("DS_ENV_FILE", ".deepspeed_env")
    paths = (os.path.join(os.path.expanduser("~"), name), os.path.join(".", name))
    return [path for path in paths if os.path.isfile(path)]


def pdsh_command(args: argparse.Namespace, pool: dict[str, int], exported: Mapping[str, str]) -> list[str]:
    """PDSHRunner.get_cmd's command, with ds_launcher on each node."""
    world = {host: list(range(slots)) for host, slots in pool.items()}
    world_info = base64.urlsafe_b64encode(json.dumps(world).encode("utf-8")).decode("utf-8")
    cmd = ["pdsh", "-S", "-f", str(PDSH_MAX_FAN_OUT), "-w", ",".join(pool), *shlex.split(args.launcher_args)]
    cmd += ["".join(f"export {key}={value}; " for key, value in exported.items()), f"cd {os.path.abspath('.')};"]
    cmd += [sys.executable, "-u", "-m", PER_NODE_LAUNCHER, f"--world_info={world_info}", "--node_rank=%n"]
    cmd += [f"--master_addr={args.master_addr}", f"--master_port={args.master_port}"]
    cmd += [flag for flag in ("--no_python", "--module", "--no_local_rank") if getattr(args, flag[2:])]
    cmd.append("--enable_each_rank_log=None")  # its default, the string "None", is true: always passed on
    # pdsh joins the remote command with spaces: an argument with one is quoted (PDSHRunner.parse_user_args)
    user_args = ['"{}"'.format(arg.replace('"', '\\"')) if " " in arg else arg for arg in args.user_args]
    return [*cmd, args.user_script, *user_args]


def runner_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """runner.main's environment, before it picks what to export: the current directory first on PYTHONPATH."""
    env = dict(environ)
    env.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # DeepSpeed's import sets it (deepspeed/__init__.py)
    here = os.path.abspath(".")
    env["PYTHONPATH"] = f"{here}:{env['PYTHONPATH']}" if "PYTHONPATH" in env else here
    return env


def with_pdsh_settings(args: argparse.Namespace, env: dict[str, str]) -> dict[str, str]:
    """PDSHRunner.get_cmd's additions: ssh as pdsh's rcmd, and --ssh_port."""
    env["PDSH_RCMD_TYPE"] = "ssh"
    if args.ssh_port is not None:  # DeepSpeed's f-string continues its line: 12 spaces before -p
        env["PDSH_SSH_ARGS_APPEND"] = f"{env.get('PDSH_SSH_ARGS_APPEND', '')} {' ' * 12}-p {args.ssh_port}"
    return env


def plan(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[list[str], dict[str, str], list[str]]:
    """(pdsh command, its environment, the .deepspeed_env files read); _NotHere where DeepSpeed's
    runner must launch."""
    args = parse(argv)
    if args.launcher.lower() != "pdsh" or not args.no_ssh_check or not args.master_addr:
        raise _NotHere("another launcher, an ssh check or a master address to find")
    if node_launch.visible_devices_variable(environ) is None:
        raise _NotHere("an accelerator only DeepSpeed can name")
    pool = read_hostfile(args.hostfile)
    if len(pool) < 2 or shutil.which("pdsh") is None:
        raise _NotHere("one host (DeepSpeed launches it locally) or no pdsh")
    env = runner_environment(environ)
    files = env_files(environ)
    exported = exports(env, files)
    return pdsh_command(args, pool, exported), with_pdsh_settings(args, env), files


def main() -> None:
    try:
        cmd, env, files = plan(sys.argv[1:], os.environ)
    except _NotHere:
        from deepspeed.launcher.runner import main as deepspeed_runner

        deepspeed_runner()
        return
    log = node_launch.deepspeed_logger("info")
    for path in files:
        log.info(f"deepspeed_env file = {path}")
    log.info("Running on the following workers: %s" % cmd[cmd.index("-w") + 1])
    log.info(f"cmd = {' '.join(cmd)}")
    sys.stdout.flush()
    pdsh = subprocess.Popen(cmd, env=env)

    def on_signal(_signum: int, _frame: object) -> None:
        pdsh.send_signal(signal.SIGINT)  # as DeepSpeed's sigkill_handler, less its pkill on every node
        time.sleep(0.1)
        pdsh.send_signal(signal.SIGTERM)
        sys.exit(1)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    code = pdsh.wait()
    sys.exit(code if code > 0 else 0)  # a pdsh ended by a signal leaves DeepSpeed's runner with 0


if __name__ == "__main__":
    main()
