"""Preemption with requeue on the REAL testbed Slurm (issue 27): a user's plain torch loop in the
preemptible partition (`preempt`: PreemptMode=REQUEUE, GraceTime=20, testbed/up.sh) is preempted by
a job of `urgent`; its ranks get SIGTERM, the job layer turns it into stop_requested(), the script
saves its checkpoint inside the grace and exits, the job script asks Slurm for the requeue (Slurm
22.05 would otherwise end the job COMPLETED: its script ended inside the grace), and the requeued run
resumes from the checkpoint: no completed step lost, the loss exactly where an unbroken run has it,
the job `done`. A user's `cancel` in the same partition ends `cancelled` and is never requeued."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from e2e_support import make_cli, wait_for

pytestmark = [pytest.mark.scheduler, pytest.mark.side]  # preempt and urgent hold the side pods

LR, SEED, DATA_SEED = 0.05, 0, 1

# What a user writes: env:// gloo, a checkpoint of their own in a directory of their own, resumed
# when it is there; stop_agreed() after each step (the few lines docs/rank-layer.md shows).
SCRIPT = f"""\
import os, sys, time
import torch
import torch.distributed as dist
from hpc_launch.joblayer import stop_agreed

ckpt_dir, total = sys.argv[1], int(sys.argv[2])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed({SEED})
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr={LR})
path = os.path.join(ckpt_dir, "ckpt.pt")
start = 0
if os.path.exists(path):
    state = torch.load(path)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"]
print(f"preempt-script rank {{rank}} of {{world}} starts at step {{start}} pid {{os.getpid()}}", flush=True)
g = torch.Generator().manual_seed({DATA_SEED})
x, y = torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g)
for step in range(start + 1, total + 1):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x[rank::world]), y[rank::world])
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    print(f"preempt-script rank {{rank}} step {{step}} loss {{loss.item():.7f}}", flush=True)
    time.sleep(0.25)
    if stop_agreed():
        if rank == 0:
            torch.save({{"model": model.state_dict(), "opt": opt.state_dict(), "step": step}}, path + ".tmp")
            os.replace(path + ".tmp", path)
        print(f"preempt-script rank {{rank}} saved step {{step}} at {{time.time():.3f}}", flush=True)
        sys.exit(0)
print(f"preempt-script rank {{rank}} finished {{total}} steps", flush=True)
"""


def _reference_losses(total: int) -> list:
    """Rank 0's loss at each step of an unbroken run: the same arithmetic in one process."""
    import torch

    torch.manual_seed(SEED)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(DATA_SEED)
    x, y = torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g)
    losses = []
    for _ in range(total):
        grads, first = [], None
        for rank in (0, 1):
            model.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x[rank::2]), y[rank::2])
            loss.backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            first = loss.item() if rank == 0 else first
        for p, g0, g1 in zip(model.parameters(), *grads):
            p.grad = (g0 + g1) / 2
        opt.step()
        losses.append(first)
    return losses


def _slurm_job(job: str) -> str:
    return subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True).stdout


def _submit(cli, workdir: Path, name: str, total: int, nodes: int) -> str:
    partitions = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True).stdout.split()
    if not {"preempt", "urgent"} <= set(partitions):
        pytest.fail(f"the testbed's Slurm has no preempt/urgent partitions ({partitions}): re-run testbed/up.sh")
    script = workdir / "preempted.py"
    script.write_text(SCRIPT)
    (workdir / name).mkdir()
    return cli.submit(
        "--cluster", "tb-slurm-preempt", "--nodes", str(nodes), "--name", name, "--walltime", "10m",
        "--script", str(script), "--train-args", f"{workdir / name} {total}",
    )  # fmt: skip


def test_a_preempted_users_loop_saves_inside_the_grace_is_requeued_and_loses_no_step(
    hpc_launch_bin, testbed, shared_workdir
):
    total = 24
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    job = _submit(cli, shared_workdir, "victim", total, nodes=2)
    try:
        _preempt_and_check(cli, job, shared_workdir / f"victim.o{job}", total)
    finally:
        subprocess.run(["scancel", job], capture_output=True)  # a failed check leaves nothing running


def _preempt_and_check(cli, job: str, log: Path, total: int) -> None:
    wait_for(log, r"^preempt-script rank 0 step 4 loss", 120)
    nodes = re.search(r" NodeList=(\S+)", _slurm_job(job)).group(1)
    urgent = subprocess.run(
        ["sbatch", "--parsable", "-p", "urgent", "-w", nodes, "-N", "2", "--exclusive", "-t", "1",
         "-o", "/dev/null", "--wrap", "sleep 2"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    asked = time.time()
    saved = wait_for(log, r"^preempt-script rank 0 saved step (\d+) at ([\d.]+)$", 30)
    wait_for(log, r"^\[hpc-launch\] preempted at \S+: Slurm requeues job", 15)
    deadline, queued = time.monotonic() + 15, ""
    while time.monotonic() < deadline and "a requeued job" not in queued:  # Slurm's own words, then ours
        queued = cli("status", job, check=True).stdout
        time.sleep(0.5)
    assert re.search(rf"^{job}\s+\S+\s+\S+\s+queued\b.*a requeued job", queued, re.M), queued
    assert cli.wait_state(job, {"done", "failed", "cancelled", "timeout"}, timeout=150) == "done", log.read_text()

    text = log.read_text(errors="replace")
    cut = int(saved.group(1))
    grace_used = float(saved.group(2)) - asked
    assert grace_used < 20, f"saved {grace_used:.1f} s after the preemptor's submission: not inside the grace"
    assert re.search(rf"^\[hpc-launch\] run 2 of job {job}: Slurm requeued it$", text, re.M), text[-3000:]
    assert "SIGTERM from the scheduler: stop_requested() is now true" in text
    for rank in (0, 1):
        starts = re.findall(rf"^preempt-script rank {rank} of 2 starts at step (\d+)", text, re.M)
        assert starts == ["0", str(cut)], (rank, starts)
    steps = [int(s) for s in re.findall(r"^preempt-script rank 0 step (\d+) ", text, re.M)]
    assert steps == list(range(1, total + 1)), steps  # each completed step once: none lost, none done twice
    losses = [float(v) for v in re.findall(r"^preempt-script rank 0 step \d+ loss ([\d.]+)$", text, re.M)]
    assert losses == pytest.approx(_reference_losses(total), rel=1e-5)  # the resumed run continues the loss
    assert "Restarts=1 " in _slurm_job(job) and "JobState=COMPLETED" in _slurm_job(job)
    assert "JobState=COMPLETED" in _slurm_job(urgent) or "JobState=RUNNING" in _slurm_job(urgent)
    summary = cli("logs", job, "--summary", check=True)
    said = summary.stdout + summary.stderr
    assert re.search(r"^\s+requeued\s+1 time: preempted at \S+ \(Slurm\), run 2 ran to the end", said, re.M), said
    print(f"preempted after step {cut}; saved {grace_used:.2f} s after the preemptor came (grace 20 s); steps lost 0")


def test_a_cancelled_job_in_the_preemptible_partition_ends_cancelled_and_is_never_requeued(
    hpc_launch_bin, testbed, shared_workdir
):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    job = _submit(cli, shared_workdir, "cancelled", 400, nodes=2)
    try:
        _cancel_and_check(cli, job, shared_workdir)
    finally:
        subprocess.run(["scancel", job], capture_output=True)


def _cancel_and_check(cli, job: str, shared_workdir: Path) -> None:
    log = shared_workdir / f"cancelled.o{job}"
    wait_for(log, r"^preempt-script rank 0 step 2 loss", 120)
    cli("cancel", job, check=True)
    assert cli.wait_state(job, {"done", "failed", "cancelled", "timeout"}, timeout=60) == "cancelled"
    saved = wait_for(log, r"^preempt-script rank 0 saved step (\d+)", 5)
    assert (shared_workdir / "cancelled" / "ckpt.pt").exists(), saved.group(0)  # the cancel's grace saved it too
    time.sleep(3)  # a requeue would show at once: the job pending again
    state = _slurm_job(job)
    assert "JobState=CANCELLED" in state and "Restarts=0 " in state, state
    text = log.read_text(errors="replace")
    assert "preempted at" not in text and "Slurm requeued it" not in text, text[-2000:]
