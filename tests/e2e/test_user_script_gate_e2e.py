"""A user's own script behind the pre-flight gate, and its chain resumed, on the REAL testbed
(issue 27 items 2, 4, 6): a 2-pod env:// script under srun passes the entrypoint's gate before its
first line (the gate's line and cost in the summary); a pod whose interface goes down fails the gate
with the entrypoint's wording and none of the user's code runs; a plain DeepSpeed loop using the
guide's few lines (stop_agreed, checkpoint_dir, resume_from), cut in link 1 of `--chain 2` by its
stop file, resumes in link 2 at the saved step with the saved loss, both links `done`, and its own
DeepSpeed timer figures in `logs --summary`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from e2e_support import SIDE_QUEUE, make_cli
from test_preflight_e2e import GATE_OK, fabric  # noqa: F401 - the fixture, used by name
from e2e_support import wait_for
from test_user_script_e2e import PLAIN_ENV_SCRIPT, _ended, _submit

pytestmark = pytest.mark.scheduler


def test_a_users_script_on_two_pods_passes_the_gate_before_its_first_line(hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    script = shared_workdir / "plain_env.py"
    script.write_text(PLAIN_ENV_SCRIPT)
    job = _submit(cli, "tb-slurm", "gatedmine", script, "--my-flag 3")
    log = shared_workdir / f"gatedmine.o{job}"
    state = _ended(cli, job, log)
    text = log.read_text(errors="replace")
    assert state == "done", text[-4000:]
    gate = GATE_OK.search(text)
    assert gate and (gate.group(1), gate.group(2)) == ("2", "2"), text[-4000:]
    assert text.index("preflight ok") < text.index("user-script rank")  # before the user's code
    assert len(re.findall(r"^user-script rank \d of 2 on pod\d", text, re.M)) == 2, text[-4000:]
    summary = cli("logs", job, "--summary", check=True).stdout
    assert re.search(r"preflight 2 ranks on 2 hosts as planned in [\d.]+ s; all-reduce 4 MiB", summary), summary


@pytest.mark.faults
def test_a_pod_whose_interface_is_down_fails_the_gate_before_the_users_code(
    hpc_launch_bin,
    testbed,
    shared_workdir,
    tmp_path,
    fabric,  # noqa: F811
):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    profile = tmp_path / "tb-slurm-hsn.yaml"  # the pods' fabric, with a pause before the ranks start
    profile.write_text("name: tb-slurm\nnet_if: hsn0\nmodules: {init: 'sleep 8', load: []}\n")
    script = shared_workdir / "plain_env.py"
    script.write_text(PLAIN_ENV_SCRIPT)
    job = _submit(cli, "tb-slurm", "downmine", script, "x", "--profile", str(profile))
    log = shared_workdir / f"downmine.o{job}"
    cli.wait_state(job, {"running"}, timeout=120)
    subprocess.run(["ip", "netns", "exec", "pod2", "ip", "link", "set", "hsn0", "down"], check=True)
    state = _ended(cli, job, log, timeout=240)
    text = log.read_text(errors="replace")
    assert state == "failed", text[-4000:]
    assert "[hpc-launch] preflight failed: pod2: interface hsn0 is down" in text, text[-4000:]
    assert "error: the job is not what was asked on pod2: interface hsn0 is down" in text
    assert "user-script rank" not in text  # the user's code never ran
    doctor = cli("doctor", job, "--cluster", "tb-slurm").stdout
    assert "pre-flight gate" in doctor and "pod2" in doctor, doctor


# A plain DeepSpeed loop with the guide's lines (docs/rank-layer.md): resume, agree to stop, save.
CHAIN_SCRIPT = """\
import os, sys, time
import deepspeed, torch, torch.nn as nn
from hpc_launch.joblayer import checkpoint_dir, resume_from, stop_agreed

total = int(sys.argv[-1])
deepspeed.init_distributed()
rank = torch.distributed.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
cfg = {"train_micro_batch_size_per_gpu": 8, "steps_per_print": 5, "wall_clock_breakdown": True,
       "log_level": "info", "optimizer": {"type": "SGD", "params": {"lr": 0.02}}}
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
start = 0
if resume_from():
    _, state = engine.load_checkpoint(resume_from())
    start = state["step"]
    print(f"chain-script rank {rank} resumed at step {start} loss {state['loss']:.6f}", flush=True)
if rank == 0:
    print(f"chain-script stop file {os.environ['HPC_LAUNCH_STOP_FILE']}", flush=True)
w = torch.randn(16, 1, generator=torch.Generator().manual_seed(1))
x = torch.randn(32, 16, generator=torch.Generator().manual_seed(2))  # one batch: the loss falls step by step
for step in range(start, total):
    loss = nn.functional.mse_loss(engine(x), x @ w)
    engine.backward(loss)
    engine.step()
    time.sleep(0.1)
    if rank == 0:
        print(f"chain-script step {step + 1} loss {loss.item():.6f}", flush=True)
    if stop_agreed():
        engine.save_checkpoint(checkpoint_dir(), client_state={"step": step + 1, "loss": loss.item()})
        print(f"chain-script rank {rank} saved at step {step + 1} loss {loss.item():.6f}", flush=True)
        sys.exit(0)
print(f"chain-script rank {rank} finished {total} steps", flush=True)
"""


def _losses(text: str) -> dict:
    return {int(s): float(v) for s, v in re.findall(r"^chain-script step (\d+) loss ([\d.]+)$", text, re.M)}


@pytest.mark.side
def test_a_users_deepspeed_loop_cut_in_link_one_resumes_in_link_two(hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    script = shared_workdir / "chain_loop.py"
    script.write_text(CHAIN_SCRIPT)
    r = cli(
        "submit", "--cluster", "tb-slurm", *SIDE_QUEUE, "--nodes", "2", "--name", "chainmine", "--walltime", "10m",
        "--chain", "2", "--script", str(script), "--train-args", "60", check=True,
    )  # fmt: skip
    first = r.stdout.strip().splitlines()[-1]
    second = re.search(r"chain link 2 of 2: (\S+)", r.stderr).group(1)  # type: ignore[union-attr]
    log1, log2 = shared_workdir / f"chainmine.o{first}", shared_workdir / f"chainmine.o{second}"
    stop_file = wait_for(log1, r"^chain-script stop file (\S+)$", 300).group(1)
    wait_for(log1, r"^chain-script step 15 ", 120)
    Path(stop_file).touch()  # as the deadline or the scheduler's warning asks
    assert _ended(cli, first, log1) == "done"
    assert _ended(cli, second, log2) == "done"
    text1, text2 = log1.read_text(errors="replace"), log2.read_text(errors="replace")
    saved = re.findall(r"^chain-script rank (\d) saved at step (\d+) loss ([\d.]+)$", text1, re.M)
    assert sorted(s[0] for s in saved) == ["0", "1"] and len({s[1] for s in saved}) == 1, text1[-4000:]
    at = int(saved[0][1])
    resumed = re.findall(r"^chain-script rank (\d) resumed at step (\d+) loss ([\d.]+)$", text2, re.M)
    assert sorted(r[0] for r in resumed) == ["0", "1"], text2[-4000:]
    assert {int(r[1]) for r in resumed} == {at} and {r[2] for r in resumed} == {saved[0][2]}  # step and loss continue
    l1, l2 = _losses(text1), _losses(text2)
    assert min(l2) == at + 1 and max(l2) == 60 and "finished 60 steps" in text2, text2[-4000:]
    # the model continued where link 1 left it (a fresh start would be back at step 1's loss)
    assert l2[at + 1] < l1[at] < 0.9 * l1[1], (l1, l2)
    summary = cli("logs", second, "--summary", check=True).stdout
    assert re.search(r"[\d.]+ samples/s \(mean\)", summary), summary  # DeepSpeed's own timer lines
