"""hpc_launch.ds_launcher: the `local` launch line's per-node launcher. Where DeepSpeed's accelerator
certainly sets CUDA_VISIBLE_DEVICES it is hpc_launch/node_launch.py (no torch import); elsewhere
DeepSpeed's own `deepspeed.launcher.launch`. Both are run here on the same arguments against the real
DeepSpeed: what each rank gets (argv, the whole environment), the launcher's log lines, a failing
rank's code, a SIGTERM; and the ends (success 0, a failing rank's code, no wait after the last rank)."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ds_launch import child_env, free_port, launcher_cmd
from hpc_launch import node_launch

pytestmark = pytest.mark.train

DEEPSPEED = [sys.executable, "-u", "-m", "deepspeed.launcher.launch"]
OURS = [sys.executable, "-u", "-m", "hpc_launch.ds_launcher"]
PROBE = (
    "#!/usr/bin/env python3\nimport json, os, sys\n"
    "os.write(1, ('PROBE ' + json.dumps({'argv': sys.argv, 'env': dict(os.environ)}) + '\\n').encode())\n"
)
# DeepSpeed's logger line: the time and the file:line:function differ, the message must not
LOG_LINE = re.compile(r"^\[[\d\- :,]+\] \[(\w+)\] \[[\w.]+:\d+:\w+\] (.*)$")


def _world(hosts: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(hosts).encode()).decode()


def _run(head: list, args: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(head + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _ranks(out: str) -> dict:
    probes = [json.loads(line[6:]) for line in out.splitlines() if line.startswith("PROBE ")]
    return {p["env"]["RANK"]: p for p in probes}


def _messages(out: str) -> list:
    """The launcher's log messages, pids made equal; DeepSpeed's accelerator notice is its import's."""
    found = [m.groups() for line in out.splitlines() if (m := LOG_LINE.match(line))]
    return [(level, re.sub(r"\b\d{2,}\b", "N", text)) for level, text in found if "Setting accelerator" not in text]


CASES = {
    "a script and its arguments": ([], "probe.py", ["--lr", "1e-3", "a b"]),
    "a module (--module)": (["--module"], "probe", ["--x"]),
    "a command (--no_python --no_local_rank, as with a container)": (
        ["--no_python", "--no_local_rank"],
        "./probe.py",
        ["-u"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_ranks_get_what_deepspeeds_launcher_gives_them(tmp_path, case):
    flags, script, script_args = CASES[case]
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    probe.chmod(0o755)
    # node 1 of two (its ranks are 2 and 3), a variable the scheduler set that the launcher
    # overwrites, and an NCCL one it logs
    env = {**child_env(), "CUDA_VISIBLE_DEVICES": "5", "NCCL_DEBUG": "WARN", "PYTHONPATH": f"{tmp_path}"}
    args = [f"--world_info={_world({'n1': [0, 1], 'n2': [0, 1]})}", "--node_rank=1", "--master_addr=10.0.0.1"]
    args += [f"--master_port={free_port()}", *flags, script, *script_args]
    theirs, ours = _run(DEEPSPEED, args, tmp_path, env), _run(OURS, args, tmp_path, env)
    assert theirs.returncode == ours.returncode == 0, (theirs.stderr[-2000:], ours.stderr[-2000:])
    a, b = _ranks(theirs.stdout), _ranks(ours.stdout)
    assert sorted(a) == sorted(b) == ["2", "3"]
    for rank in a:
        assert b[rank]["argv"] == a[rank]["argv"]
        assert b[rank]["env"] == a[rank]["env"]
    assert _messages(ours.stdout) == _messages(theirs.stdout)


def _sleepers(tmp_path: Path) -> Path:
    """Rank 0 and a child of its own sleep; rank 1 sleeps too, or ends as its last argument says
    (`exit:N`, `signal:N`). Each writes its pids."""
    script = tmp_path / "rank.py"
    script.write_text(
        "import os, subprocess, sys, time\n"
        "pids = [os.getpid()]\n"
        "if os.environ['RANK'] == '0': pids.append(subprocess.Popen(['sleep', '300']).pid)\n"
        "open(f\"pids.{os.environ['RANK']}\", 'w').write(' '.join(map(str, pids)))\n"
        "how, _, n = sys.argv[-1].partition(':')\n"
        "if os.environ['RANK'] == '1' and how in ('exit', 'signal'):\n"
        "    time.sleep(0.5)\n"
        "    sys.exit(int(n)) if how == 'exit' else os.kill(os.getpid(), int(n))\n"
        "time.sleep(300)\n"
    )
    return script


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _left_behind(tmp_path: Path) -> list:
    pids = [int(p) for f in tmp_path.glob("pids.*") for p in f.read_text().split()]
    assert len(pids) == 3
    return [p for p in pids if not _gone(p)]


def _launch_in(tmp_path: Path, head: list, *script_args: str) -> subprocess.Popen:
    for old in tmp_path.glob("pids.*"):
        old.unlink()
    args = [f"--world_info={_world({'localhost': [0, 1]})}", f"--master_port={free_port()}"]
    args += [str(_sleepers(tmp_path)), *script_args]
    return subprocess.Popen(head + args, cwd=tmp_path, env=child_env(), stdout=subprocess.PIPE, text=True)


def _both_started(tmp_path: Path) -> None:
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("pids.*"))) < 2 or any(not f.read_text() for f in tmp_path.glob("pids.*")):
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.parametrize("how, code", [("exit:7", 7), (f"signal:{int(signal.SIGKILL)}", -9)])
def test_a_failing_rank_ends_every_ranks_tree_with_its_code_as_deepspeeds_does(tmp_path, how, code):
    ends = {}
    for name, head in (("deepspeed", DEEPSPEED), ("ours", OURS)):
        proc = _launch_in(tmp_path, head, how)
        out, _ = proc.communicate(timeout=90)
        assert _left_behind(tmp_path) == [], name
        ends[name] = (proc.returncode, [text for level, text in _messages(out) if level == "ERROR"])
    assert ends["ours"][0] == ends["deepspeed"][0] == code % 256, ends
    # doctor reads `return code = -9` as a SIGKILL nobody asked for (causes_run.py)
    assert len(ends["ours"][1]) == 1 and ends["ours"][1][0].endswith(f"exits with return code = {code}"), ends


def test_a_sigterm_to_the_launcher_ends_every_ranks_tree_and_exits_1_as_deepspeeds_does(tmp_path):
    for name, head in (("deepspeed", DEEPSPEED), ("ours", OURS)):
        proc = _launch_in(tmp_path, head)
        _both_started(tmp_path)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
        assert proc.returncode == 1, (name, out[-2000:])
        assert _left_behind(tmp_path) == [], name
        assert ("INFO", "Main process received SIGTERM, exiting") in _messages(out), name


def test_the_launcher_imports_no_torch_where_cuda_visible_devices_is_certain(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    watch = (
        "import atexit, runpy, sys; atexit.register(lambda: print('torch loaded:', 'torch' in sys.modules)); "
        "sys.argv[0] = 'ds_launcher'; runpy.run_module('hpc_launch.ds_launcher', run_name='__main__')"
    )
    r = _run(
        [sys.executable, "-c", watch],
        [f"--world_info={_world({'localhost': [0]})}", "probe.py"],
        tmp_path,
        child_env(),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "torch loaded: False" in r.stdout and "PROBE " in r.stdout


def test_an_option_not_carried_out_here_runs_deepspeeds_own_launcher(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    args = [f"--world_info={_world({'localhost': [0]})}", "--enable_each_rank_log", "rank-logs", "probe.py"]
    r = _run(OURS, args, tmp_path, child_env())
    assert r.returncode == 0, r.stderr[-2000:]
    logs = list((tmp_path / "rank-logs").glob("*_rank0.log"))  # DeepSpeed's own per-rank log
    assert len(logs) == 1 and "PROBE " in logs[0].read_text()


def _variable_with(first_on_path: Path) -> str:
    """node_launch's answer in a fresh interpreter that finds `first_on_path`'s packages first."""
    code = "from hpc_launch import node_launch; print(node_launch.visible_devices_variable({}))"
    env = {**child_env(), "PYTHONPATH": os.pathsep.join([str(first_on_path), child_env()["PYTHONPATH"]])}
    env.pop("DS_ACCELERATOR", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_the_visible_devices_variable_is_ours_only_where_deepspeed_would_pick_cuda_or_cpu(tmp_path):
    assert _variable_with(tmp_path) == "CUDA_VISIBLE_DEVICES"  # this machine: CPU torch, no other backend
    assert node_launch.visible_devices_variable({"DS_ACCELERATOR": "cpu"}) == "CUDA_VISIBLE_DEVICES"
    for other in ("xpu", "npu", "hpu", "mps", "mlu", "nonsense"):  # DeepSpeed checks (or refuses) these
        assert node_launch.visible_devices_variable({"DS_ACCELERATOR": other}) is None, other
    # a vendor's torch backend importable there: DeepSpeed would pick it
    (tmp_path / "vendor").mkdir()
    (tmp_path / "vendor" / "torch_npu.py").write_text("")
    assert _variable_with(tmp_path / "vendor") == "None"
    # a torch built for Intel GPUs (its torch/version.py names the XPU toolkit)
    (tmp_path / "xpu" / "torch").mkdir(parents=True)
    (tmp_path / "xpu" / "torch" / "__init__.py").write_text("")
    (tmp_path / "xpu" / "torch" / "version.py").write_text("xpu: Optional[str] = '20250101'\n")
    assert _variable_with(tmp_path / "xpu") == "None"


def test_every_backend_deepspeed_probes_for_is_one_we_step_aside_for():
    """deepspeed/accelerator/real_accelerator.py's probes, read from the installed DeepSpeed: a new one
    there fails this test until node_launch knows it (habana's sets CUDA_VISIBLE_DEVICES too)."""
    import deepspeed.accelerator.real_accelerator as real

    probed = set(re.findall(r"^\s+import (torch_\w+|intel_extension\w+)", Path(real.__file__).read_text(), re.M))
    assert probed and probed <= set(node_launch.OTHER_BACKENDS), probed
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator
    from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator

    assert (
        CPU_Accelerator.visible_devices_envs(None)
        == CUDA_Accelerator.visible_devices_envs(None)
        == [node_launch.VISIBLE_DEVICES]
    )


def test_success_is_zero_and_every_line_is_there(tmp_path):
    # one write per line: print() writes its words one by one, and two ranks' words interleave
    rank = tmp_path / "rank.py"
    rank.write_text(
        "import os\nos.write(1, f\"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}\\n\".encode())\n"
    )
    r = subprocess.run(launcher_cmd([str(rank)]), cwd=tmp_path, env=child_env(), capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    ranks = sorted(line for line in r.stdout.splitlines() if line.startswith("rank "))
    assert ranks == ["rank 0 of 2", "rank 1 of 2"], r.stdout[-3000:]
    assert r.stdout.count("exits successfully") == 2  # the launcher's own log lines (stdout), flushed before it ends


def test_the_launcher_ends_at_once_after_its_last_rank(tmp_path):
    """DeepSpeed's loop looks at its ranks once a second and sleeps a second more after the last one
    ended (1-2 s at the end of every job); this one wakes when a rank exits."""
    rank = tmp_path / "rank.py"
    rank.write_text('import os, time\nos.write(1, f"ended {time.time()}\\n".encode())\n')
    r = subprocess.run(launcher_cmd([str(rank)]), cwd=tmp_path, env=child_env(), capture_output=True, text=True)
    returned = time.time()
    assert r.returncode == 0, r.stderr[-2000:]
    ended = [float(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("ended ")]
    assert len(ended) == 2, r.stdout[-2000:]
    assert returned - max(ended) < 0.5, returned - max(ended)  # before: at least the final 1-s sleep
    assert os.environ.get("DS_ACCELERATOR") is None  # the path measured is node_launch's
