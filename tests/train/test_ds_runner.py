"""hpc_launch.ds_runner: the pdsh launch line's runner (`deepspeed --hostfile H --launcher pdsh`) without
torch. DeepSpeed's own runner (deepspeed/launcher/runner.py) and ours run here on the same arguments,
environment and files, each with a `pdsh` on PATH that records what it was given: the command must be
DeepSpeed's, word for word, but for the per-node launcher's module (hpc_launch.ds_launcher), and the
environment pdsh gets must be the same; so must the exit code. What DeepSpeed's runner does on a
signal (its pkill on every node) is not copied on purpose (hpc_launch/ds_runner.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ds_launch import child_env
from hpc_launch import ds_runner

# CI runs it in the unit lane, after the unit tests (marker after_unit): the training lane ends last
pytestmark = [pytest.mark.train, pytest.mark.after_unit]

DEEPSPEED = [sys.executable, "-u", "-m", "deepspeed.launcher.runner"]
OURS = [sys.executable, "-u", "-m", "hpc_launch.ds_runner"]
FAKE_PDSH = """#!/usr/bin/env python3
import json, os, signal, sys, time
with open(os.environ["RECORD"], "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, f)
how = os.environ.get("PDSH_ENDS", "0")
if how == "wait":
    time.sleep(60)
if how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.exit(int(how))
"""


def _setup(tmp_path: Path, hosts: dict, env_file_lines: list) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "pdsh").write_text(FAKE_PDSH)
    (bin_dir / "pdsh").chmod(0o755)
    (tmp_path / "hostfile").write_text("# the job's nodes\n" + "".join(f"{h} slots={n}\n" for h, n in hosts.items()))
    (tmp_path / "ds_env").write_text("".join(line + "\n" for line in env_file_lines))
    env = {k: v for k, v in child_env().items() if not k.startswith(("NCCL", "UCX", "MV2", "MLFLOW", "DS_"))}
    return {**env, "PATH": f"{bin_dir}:{env['PATH']}", "DS_ENV_FILE": str(tmp_path / "ds_env"), "HOME": str(tmp_path)}


def _run(head: list, args: list, cwd: Path, env: dict, record: Path) -> tuple:
    proc = subprocess.run(
        head + args, cwd=cwd, env={**env, "RECORD": str(record)}, capture_output=True, text=True, timeout=120
    )
    return proc, json.loads(record.read_text()) if record.exists() else None


def _both(tmp_path: Path, args: list, env: dict) -> tuple:
    theirs = _run(DEEPSPEED, args, tmp_path, env, tmp_path / "theirs.json")
    ours = _run(OURS, args, tmp_path, env, tmp_path / "ours.json")
    return theirs, ours


CASES = {
    "a script, its arguments, an ssh port and an env file": (
        {"pod1": 1, "pod2": 1},
        ["--ssh_port", "22", "train.py", "--lr", "1e-3", "two words", 'say "hi"'],
        {"PYTHONPATH": "/opt/site", "NCCL_DEBUG": "INFO", "UCX_TLS": "tcp", "PYTHON_SITE_NOTE": "a b;c"},
    ),
    "a module over three nodes with pdsh's own options": (
        {"n1": 2, "n2": 2, "n3": 2},
        ["--launcher_args", "-R ssh -u 30", "--module", "hpc_launch.train", "--model", "smallcnn"],
        {"MLFLOW_TRACKING_URI": "file:///tmp/ml", "MV2_X": "1"},
    ),
    "a command run as given, as a container's": (
        {"a.example.org": 4, "b.example.org": 4},
        ["--no_python", "--no_local_rank", "ch-run", "-b", "/w:/w", "/img", "--", "python3", "-u", "t.py"],
        {"AISC_JOB_NAME": "j", "NCCL_IB_HCA": "mlx5", "UCX_NET_DEVICES": "mlx5_0:1", "UCX_TLS": "rc"},
    ),
    "DeepSpeed told to use CUDA (its NCCL variables go to every node)": (
        {"g1": 8, "g2": 8},
        ["train.py"],
        {"DS_ACCELERATOR": "cuda", "NCCL_SOCKET_IFNAME": "ib0", "NCCL_NET_GDR_LEVEL": "PHB"},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_pdsh_is_given_deepspeeds_command_and_environment(tmp_path, case):
    hosts, tail, extra = CASES[case]
    lines = ["MASTER_ADDR=10.0.0.1", f"PYTHONPATH={tmp_path}", "HPC_LAUNCH_RANKS_OF=7@10.0.0.1", "PATH=/x y/bin"]
    env = {**_setup(tmp_path, hosts, lines), **extra}
    args = ["--hostfile", str(tmp_path / "hostfile"), "--launcher", "pdsh", "--no_ssh_check"]
    args += ["--master_addr", "10.0.0.1", "--master_port", "29555", *tail]
    (theirs, got_theirs), (ours, got_ours) = _both(tmp_path, args, env)
    assert theirs.returncode == ours.returncode == 0, (theirs.stdout[-2000:], ours.stderr[-2000:])
    assert got_theirs and got_ours
    expected = [w.replace("deepspeed.launcher.launch", ds_runner.PER_NODE_LAUNCHER) for w in got_theirs["argv"]]
    assert got_ours["argv"] == expected
    assert "-m hpc_launch.ds_launcher" in " ".join(got_ours["argv"])
    assert {**got_ours["env"], "RECORD": ""} == {**got_theirs["env"], "RECORD": ""}
    for message in ("Running on the following workers", "cmd = pdsh", "deepspeed_env file = "):
        assert message in ours.stdout, ours.stdout


def test_pdshs_exit_code_is_the_runners_and_a_signal_ending_pdsh_is_0_as_in_deepspeed(tmp_path):
    env = _setup(tmp_path, {"p1": 1, "p2": 1}, ["A=1"])
    args = ["--hostfile", str(tmp_path / "hostfile"), "--no_ssh_check", "--master_addr", "h", "t.py"]
    for ends, code in (("3", 3), ("kill", 0)):
        (theirs, _), (ours, _) = _both(tmp_path, args, {**env, "PDSH_ENDS": ends})
        assert theirs.returncode == ours.returncode == code, (ends, theirs.returncode, ours.returncode)


def test_a_sigterm_ends_pdsh_and_the_runner_exits_1(tmp_path):
    env = {**_setup(tmp_path, {"p1": 1, "p2": 1}, ["A=1"]), "PDSH_ENDS": "wait", "RECORD": str(tmp_path / "r.json")}
    args = ["--hostfile", str(tmp_path / "hostfile"), "--no_ssh_check", "--master_addr", "h", "t.py"]
    runner = subprocess.Popen(OURS + args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (tmp_path / "r.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pdsh = [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == runner.pid]
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(timeout=30) == 1
    assert pdsh and not any(_alive(pid) for pid in pdsh)


@pytest.mark.parametrize(
    "args, why",
    [
        (["--include", "p1", "t.py"], "an option not carried out here"),
        (["--launcher", "openmpi", "t.py"], "another launcher"),
        (["--master_addr", "", "t.py"], "a master address to find over ssh"),
    ],
)
def test_what_only_deepspeed_does_is_left_to_deepspeeds_runner(tmp_path, args, why):
    with pytest.raises(ds_runner._NotHere):
        ds_runner.plan(["--hostfile", str(tmp_path / "none"), "--no_ssh_check", *args], {})


def test_one_host_or_a_hostfile_deepspeed_refuses_is_left_to_deepspeed(tmp_path):
    env = _setup(tmp_path, {"p1": 1}, ["A=1"])
    args = ["--hostfile", str(tmp_path / "hostfile"), "--no_ssh_check", "--master_addr", "h", "t.py"]
    with pytest.raises(ds_runner._NotHere):
        ds_runner.plan(args, env)
    (tmp_path / "hostfile").write_text("p1 slots=1\np1 slots=1\n")
    with pytest.raises(ds_runner._NotHere):
        ds_runner.plan(args, env)
    (tmp_path / "ds_env").write_text("NO_EQUALS_SIGN\n")
    (tmp_path / "hostfile").write_text("p1 slots=1\np2 slots=1\n")
    with pytest.raises(ds_runner._NotHere):
        ds_runner.plan(args, env)


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


HOSTFILES = {
    "comments, blank lines, tabs": "# nodes\n\npod1 slots=4\n  pod2\tslots=4   \n",
    "more fields after slots": "a.example.org slots=8 max_slots=8\nb.example.org slots=8\n",
    "a duplicate host": "n1 slots=1\nn1 slots=1\n",
    "a line without slots": "n1 slots=1\nn2\n",
    "slots not a number": "n1 slots=x\n",
}


@pytest.mark.parametrize("case", list(HOSTFILES))
def test_a_hostfile_is_read_as_deepspeeds_parser_reads_it(tmp_path, case):
    import deepspeed.launcher.runner as runner

    (tmp_path / "hostfile").write_text(HOSTFILES[case])
    try:
        theirs = dict(runner._parse_hostfile(HOSTFILES[case].splitlines(keepends=True)))
    except ValueError:
        theirs = None  # DeepSpeed refuses it: its runner launches, and says why
    try:
        ours = ds_runner.read_hostfile(str(tmp_path / "hostfile"))
    except ds_runner._NotHere:
        ours = None
    assert ours == theirs
