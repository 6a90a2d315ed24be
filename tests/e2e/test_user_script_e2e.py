"""A user's own, unmodified training script keeps the job's guarantees (issue 27), on the REAL testbed:
every rank starts through the job layer (hpc_launch/joblayer), so a plain env:// script learns its
place under `srun` and under the PBS profile's `mpirun`, DeepSpeed's init_distributed() needs no
mpi4py and compiles nothing on CPU, and a rank of the user's DeepSpeed loop stopped with SIGSTOP
is named with its host by the watchdog, fed by torch's own optimizer hook."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from e2e_support import SIDE_QUEUE, make_cli, wait_for
from hpc_launch.records import JobStore

pytestmark = pytest.mark.scheduler

# The shape users bring: torch.distributed from env://, nothing of hpc-launch's.
PLAIN_ENV_SCRIPT = """\
import os, socket, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(64, 8), torch.randn(64, 1)
for step in range(1, 6):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x[rank::world]), y[rank::world])
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
sys.stdout.write(
    f"user-script rank {rank} of {world} on {socket.gethostname()} local {os.environ['LOCAL_RANK']} "
    f"node {os.environ['NODE_RANK']} argv {sys.argv[1:]} name {__name__} "
    f"weights {sum(p.sum().item() for p in model.parameters()):.6f}\\n"
)
sys.stdout.flush()
dist.destroy_process_group()
"""

# A DeepSpeed loop as DeepSpeed's own examples write it (init_distributed(), initialize(), the
# engine's backward/step), CPU; its steps from argv; it prints its pid once it is training.
DEEPSPEED_SCRIPT = """\
import importlib.util, os, socket, sys
import deepspeed
import torch

steps = int(sys.argv[-1])  # DeepSpeed's launchers put --local_rank=N first
deepspeed.init_distributed()  # auto_mpi_discovery stays on: it must find its variables, not mpi4py
rank = torch.distributed.get_rank()
sys.stdout.write(
    f"ds-script rank {rank} of {torch.distributed.get_world_size()} on {socket.gethostname()} pid {os.getpid()} "
    f"mpi4py {importlib.util.find_spec('mpi4py') is not None}\\n"
)
sys.stdout.flush()
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
config = {"train_micro_batch_size_per_gpu": 8, "optimizer": {"type": "SGD", "params": {"lr": 0.01}}}
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
for step in range(1, steps + 1):
    x = torch.randn(8, 16)
    loss = engine(x).pow(2).mean()
    engine.backward(loss)
    engine.step()
    if step % 10 == 0 and rank == 0:
        sys.stdout.write(f"ds-script step {step} loss {loss.item():.4f}\\n")
        sys.stdout.flush()
sys.stdout.write(f"ds-script rank {rank} done {steps} steps\\n")
sys.stdout.flush()
"""


def _submit(cli, cluster: str, name: str, script: Path, args: str, *extra: str) -> str:
    return cli.submit(
        "--cluster", cluster, "--nodes", "2", "--name", name, "--walltime", "10m", "--script", str(script),
        "--train-args", args, *extra,
    )  # fmt: skip


def _ended(cli, job: str, log: Path, timeout: float = 300) -> str:
    try:
        return cli.wait_state(job, {"failed", "done", "cancelled", "timeout"}, timeout=timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{log.read_text(errors='replace')[-4000:] if log.exists() else 'no log'}") from None


@pytest.mark.side
@pytest.mark.parametrize(
    "cluster, route",
    [
        ("tb-slurm", "srun: SLURM_PROCID/SLURM_NTASKS"),
        ("tb-pbs-mpi", "PBS + mpirun: OMPI_COMM_WORLD_*"),
        ("tb-pbs", "PBS + deepspeed over pdsh: DeepSpeed's launcher on each pod"),
        ("tb-slurm-torchrun", "srun + torchrun per node: torchrun --module"),
    ],
)
def test_an_unmodified_env_script_trains_across_two_pods(cluster, route, hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed["HPC_TESTBED_PBS_BIN"])
    script = shared_workdir / "plain_env.py"
    script.write_text(PLAIN_ENV_SCRIPT)
    job = _submit(cli, cluster, "plainenv", script, "--my-flag 3", *SIDE_QUEUE)
    log = shared_workdir / f"plainenv.o{job.split('.')[0]}"
    state = _ended(cli, job, log)
    text = log.read_text(errors="replace")
    assert state == "done", text[-4000:]
    ranks = re.findall(
        # pdsh prefixes each line with its pod; DeepSpeed's launchers pass --local_rank first (as without the layer)
        r"^(?:pod\d: )?user-script rank (\d) of 2 on (pod\d) local 0 node (\d) "
        r"argv \[(?:'--local_rank=0', )?'--my-flag', '3'\] name __main__ "
        r"weights (-?[\d.]+)$",
        text,
        re.M,
    )
    assert sorted(r[0] for r in ranks) == ["0", "1"], text[-4000:]
    assert len({r[1] for r in ranks}) == 2 and {r[2] for r in ranks} == {"0", "1"}, ranks  # a rank on each pod
    assert len({r[3] for r in ranks}) == 1, ranks  # one model: its gradients were all-reduced across the pods
    assert re.search(r"^(?:pod\d: )?\[hpc-launch\] job layer: 2 rank\(s\)", text, re.M), text[-4000:]


def test_deepspeed_init_distributed_needs_no_mpi4py_under_mpirun_and_compiles_nothing(
    hpc_launch_bin, testbed, shared_workdir
):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed["HPC_TESTBED_PBS_BIN"])
    script = shared_workdir / "ds_loop.py"
    script.write_text(DEEPSPEED_SCRIPT)
    job = _submit(cli, "tb-pbs-mpi", "dsmpi", script, "20")
    log = shared_workdir / f"dsmpi.o{job.split('.')[0]}"
    state = _ended(cli, job, log)
    text = log.read_text(errors="replace")
    assert state == "done", text[-4000:]
    found = re.findall(r"^ds-script rank (\d) of 2 on (pod\d) pid \d+ mpi4py False$", text, re.M)
    assert sorted(found) == [("0", "pod1"), ("1", "pod2")], text[-4000:]
    assert len(re.findall(r"^ds-script rank \d done 20 steps$", text, re.M)) == 2
    assert "shm_comm" not in text and "Building extension" not in text, text[-4000:]  # nothing compiled


@pytest.mark.faults
def test_a_stopped_rank_of_a_users_deepspeed_loop_is_named_by_the_watchdog(hpc_launch_bin, testbed, shared_workdir):
    """No line of hpc-launch's in the script: its steps reach the watchdog through torch's optimizer hook."""
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    script = shared_workdir / "ds_loop.py"
    script.write_text(DEEPSPEED_SCRIPT)
    # factor 2: the bound stays near the 10 s floor even when a loaded machine makes steps slow
    job = _submit(cli, "tb-slurm", "dshang", script, "1000000", "--env", "HPC_LAUNCH_HANG_S=10",
                  "--env", "HPC_LAUNCH_HANG_FACTOR=2")  # fmt: skip
    log = shared_workdir / f"dshang.o{job}"
    wait_for(log, r"^ds-script step 20 ", 240)
    pid = int(wait_for(log, r"^ds-script rank 1 of 2 on pod2 pid (\d+)", 5).group(1))
    stopped = time.monotonic()
    try:
        subprocess.run(["kill", "-STOP", str(pid)], check=True)
        state = _ended(cli, job, log, timeout=240)
        took = time.monotonic() - stopped
    finally:
        subprocess.run(["kill", "-CONT", str(pid)], capture_output=True)
        subprocess.run(["kill", "-KILL", str(pid)], capture_output=True)
    text = log.read_text(errors="replace")
    assert state == "failed", text[-4000:]
    hang = re.search(
        r"^\[hpc-launch\] hang: rank 1 on pod2 stopped: no heartbeat for \d+ s.*\(bound (\d+) s\)", text, re.M
    )
    assert hang, text[-4000:]
    assert took < int(hang.group(1)) + 40, took  # the bound, the watchdog's look, and Slurm ending the step
    assert re.search(r"^\[hpc-launch\] stacks of rank 0 on pod1", text, re.M), text[-4000:]
    assert re.search(r'File ".*ds_loop.py", line \d+ in <module>', text), text[-4000:]  # the user's own frame
    rec = JobStore().get(job, "tb-slurm")
    assert rec.exit_code == 124, (rec.exit_code, rec.comment)
    doctor = cli("doctor", job, "--cluster", "tb-slurm")
    assert "rank hung" in doctor.stdout or "hung:" in doctor.stdout, doctor.stdout
    assert "pod2" in doctor.stdout


# A user's loop that asks to stop (the in-job API, standard library only) and saves its step.
STOPPING_SCRIPT = """\
import os, sys, time
from hpc_launch.joblayer import stop_requested

rank, out = int(os.environ["RANK"]), sys.argv[1]
print(f"stop-script rank {rank} of {os.environ['WORLD_SIZE']} pid {os.getpid()}", flush=True)
step = 0
while not stop_requested():
    step += 1
    time.sleep(0.05)
with open(os.path.join(out, f"ckpt-rank{rank}.txt"), "w") as fh:
    fh.write(f"{step}\\n")
print(f"stop-script rank {rank} saved step {step}", flush=True)
"""


def test_a_cancelled_users_script_saves_its_checkpoint_within_the_grace_and_ends_cancelled(
    hpc_launch_bin, testbed, shared_workdir
):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    script = shared_workdir / "stopping.py"
    script.write_text(STOPPING_SCRIPT)
    job = _submit(cli, "tb-slurm", "stopper", script, str(shared_workdir))
    log = shared_workdir / f"stopper.o{job}"
    wait_for(log, r"^stop-script rank 1 of 2 pid", 120)
    wait_for(log, r"^stop-script rank 0 of 2 pid", 5)
    time.sleep(1)
    cli("cancel", job, check=True)  # scancel: SIGTERM, then SIGKILL after KillWait (5 s on the testbed)
    assert _ended(cli, job, log, timeout=60) == "cancelled"
    text = log.read_text(errors="replace")
    for rank in (0, 1):
        saved = re.search(rf"^stop-script rank {rank} saved step (\d+)$", text, re.M)
        assert saved, text[-4000:]
        assert (shared_workdir / f"ckpt-rank{rank}.txt").read_text().strip() == saved.group(1)
    assert "SIGTERM from the scheduler: stop_requested() is now true" in text
