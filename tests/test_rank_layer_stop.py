"""--stop-signal and $HPC_LAUNCH_STOP_FILE for a user's script (hpc_launch/joblayer/stop.py): the
deadline sends the job's stop signal, that signal asks stop_requested(), and the stop file is named
as the guide names it, with the job script's $HPC_LAUNCH_STOP still working."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """\
import os, signal, sys, time
from hpc_launch.joblayer import stop_requested
got = []
if sys.argv[1] == "own":
    signal.signal(signal.SIGUSR2, lambda s, f: got.append("usr2"))  # the script's own handler
print("file", os.environ.get("HPC_LAUNCH_STOP_FILE"), flush=True)
end = time.time() + 20
while time.time() < end and not got and not (sys.argv[1] != "own" and stop_requested()):
    time.sleep(0.02)
print("stopped", got, flush=True)
"""


def _rank(tmp_path: Path, mode: str, **env: str) -> subprocess.Popen:
    (tmp_path / "mine.py").write_text(SCRIPT)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI", "HPC_LAUNCH"))}
    full.update(PYTHONPATH=str(REPO), HPC_LAUNCH_STOP=str(tmp_path / "stop.1"), **env)
    return subprocess.Popen(
        [sys.executable, "-m", "hpc_launch.joblayer", str(tmp_path / "mine.py"), mode],
        env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_the_deadline_sends_the_jobs_stop_signal_to_the_scripts_own_handler(tmp_path):
    p = _rank(tmp_path, "own", HPC_LAUNCH_STOP_SIGNAL="SIGUSR2", HPC_LAUNCH_DEADLINE=str(time.time() + 1))
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0 and "stopped ['usr2']" in out, (out, err)


def test_the_stop_signal_asks_stop_requested_and_sigusr1_is_not_it(tmp_path):
    p = _rank(tmp_path, "api", HPC_LAUNCH_STOP_SIGNAL="SIGUSR2")
    assert p.stdout is not None and p.stdout.readline().startswith("file ")
    p.send_signal(signal.SIGUSR2)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0 and "stopped []" in out, (out, err)
    q = _rank(tmp_path, "api", HPC_LAUNCH_STOP_SIGNAL="SIGUSR2")
    assert q.stdout is not None and q.stdout.readline().startswith("file ")
    q.send_signal(signal.SIGUSR1)  # not the job's stop signal: Python's default, as without the layer
    q.communicate(timeout=30)
    assert q.returncode == -signal.SIGUSR1


def test_the_stop_file_is_named_as_hpc_launch_stop_file_and_asks_to_stop(tmp_path):
    p = _rank(tmp_path, "api")
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line == f"file {tmp_path / 'stop.1'}\n"
    Path(line.split(" ", 1)[1].strip()).touch()
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0 and "stopped []" in out, (out, err)


# ---- a straggler's measure: the CPU time a rank wanted per step (steps.py) -------------------------


def test_wanted_cpu_time_adds_running_and_runnable_time_of_every_thread(tmp_path):
    from hpc_launch.joblayer.steps import wanted_cpu_s

    for tid, line in (("101", "2000000000 500000000 9\n"), ("102", "1000000000 0 3\n")):
        (tmp_path / tid).mkdir()
        (tmp_path / tid / "schedstat").write_text(line)
    (tmp_path / "103").mkdir()  # a thread that ended between the listing and the read
    assert wanted_cpu_s(str(tmp_path)) == 3.5
    assert wanted_cpu_s(str(tmp_path / "gone")) == 0.0
    assert wanted_cpu_s() > 0  # this machine's own schedstat


def test_a_ranks_work_per_step_is_sampled_once_a_second(monkeypatch):
    from hpc_launch.joblayer import steps

    monkeypatch.setattr(steps, "_STEPS", steps._Steps())
    busy = iter([10.0, 10.6, 11.8])
    monkeypatch.setattr(steps, "wanted_cpu_s", lambda: next(busy))
    steps._STEPS.count = 5
    assert steps._work_per_step(100.0) == 0.0  # the first sample: nothing to compare with
    steps._STEPS.count = 8
    assert steps._work_per_step(100.5) == 0.0  # within the second: no read of schedstat
    assert abs(steps._work_per_step(101.0) - 0.2) < 1e-9  # 0.6 s over 3 steps
    steps._STEPS.count = 11
    assert abs(steps._work_per_step(102.5) - 0.4) < 1e-9  # a neighbour took its CPU: 1.2 s over 3 steps
