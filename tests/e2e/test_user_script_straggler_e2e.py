"""A straggler in a user's own script (issue 27 item 3), on the REAL testbed: a plain env:// loop
across 3 pods, unmodified, whose pod2 rank shares its CPU with a hog is named a straggler with its
factor, as the entrypoint's watchdog names one; the hook measures each rank's wanted CPU time per
step (run + run queue), which the peers' waits in the all-reduce do not inflate."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest

from e2e_support import make_cli
from e2e_support import wait_for
from test_user_script_e2e import _ended

pytestmark = [pytest.mark.scheduler, pytest.mark.faults]

LOOP = """\
import os, socket, sys
import torch, torch.distributed as dist

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print(f"loop rank {rank} on {socket.gethostname()} pid {os.getpid()}", flush=True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(256, 256)
stop = torch.zeros(1)
for step in range(1, int(sys.argv[1]) + 1):
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    if step % 20 == 0:
        if rank == 0:
            print(f"loop step {step}", flush=True)
            stop.fill_(float(os.path.exists(sys.argv[2])))
        dist.broadcast(stop, 0)  # every rank leaves at the same step
        if stop.item():
            break
dist.destroy_process_group()
"""


def test_a_rank_beside_a_cpu_hog_is_named_a_straggler_in_a_users_loop(hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    script = shared_workdir / "loop.py"
    script.write_text(LOOP)
    stop = shared_workdir / "stop"  # the loop ends early once it exists: the straggler is named by then
    job = cli.submit(
        "--cluster", "tb-slurm", "--nodes", "3", "--name", "slowmine", "--walltime", "10m", "--script", str(script),
        "--train-args", f"4000 {stop}", "--env", "HPC_LAUNCH_HANG_S=15", "--env", "HPC_LAUNCH_STRAGGLER_FACTOR=1.4",
    )  # fmt: skip
    log = shared_workdir / f"slowmine.o{job}"
    wait_for(log, r"^loop step 40$", 240)
    pids = {
        pod: (int(rank), int(pid))
        for rank, pod, pid in re.findall(r"^loop rank (\d) on (pod\d) pid (\d+)$", log.read_text(), re.M)
    }
    # as tests/e2e/test_watchdog_e2e.py: pod2's rank on CPU 1 beside a hog in its own session at
    # nice -10 (an equal hog takes nothing from a rank that sleeps in all-reduces), the others on CPU 0
    hog = subprocess.Popen(
        ["taskset", "-c", "1", "nice", "-n", "-10", "sh", "-c", "while :; do :; done"], start_new_session=True
    )
    autogroup = Path(f"/proc/{hog.pid}/autogroup")
    if autogroup.exists():
        autogroup.write_text("-10")
    try:
        for pod, (_, pid) in pids.items():
            subprocess.run(
                ["taskset", "-apc", "1" if pod == "pod2" else "0", str(pid)], check=True, capture_output=True
            )
        m = wait_for(log, r"^\[hpc-launch\] straggler: rank (\d+) on (pod\d) is ([\d.]+)x slower", 150)
    finally:
        hog.send_signal(signal.SIGKILL)
        hog.wait()
        stop.touch()
    assert m.group(2) == "pod2" and int(m.group(1)) == pids["pod2"][0] and float(m.group(3)) >= 1.4, m.group(0)
    assert "its CPU time wanted (run + run queue)" in m.string
    assert _ended(cli, job, log, timeout=600) == "done", log.read_text()[-3000:]
    summary = cli("logs", job, "--summary", check=True)
    assert re.search(r"hosts     straggler: pod2 \(rank \d+, [\d.]+x slower", summary.stdout + summary.stderr)
