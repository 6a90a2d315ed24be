"""One experiment across a real chain (issue 29, item 6): `submit --chain 3` on the testbed's Slurm,
each link stopped by its walltime deadline and resumed by the next, logs one TensorBoard step axis
and one W&B run (offline: no key, WANDB_MODE=offline), read back with their own readers.
(The same with a SIGKILLed link, and the network watched: tests/train/test_monitor_links.py.)"""

from __future__ import annotations

import json
import re

import pytest

from e2e_support import SIDE_QUEUE, make_cli
from monitor_files import tensorboard_scalars, wandb_run

pytestmark = [pytest.mark.scheduler, pytest.mark.chain, pytest.mark.side]

# digits, micro-batch 16 on one rank: 16 samples a step. The deadline (walltime less --stop-before)
# falls 2 s after each link starts, before its first step: every link stops at its first logged
# step with a checkpoint, and the third reaches the end.
GLOBAL = 16
TRAIN = (
    "--model smallcnn --data digits --micro-batch 16 --steps 15 --log-every 5 --no-eval "
    "--monitor tensorboard,wandb-offline --job-name exp"
)


def test_a_chain_of_three_logs_one_tensorboard_axis_and_one_wandb_run(hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    home = shared_workdir / "wandb-home"
    env = [f"WANDB_{name}_DIR={home / name.lower()}" for name in ("CONFIG", "CACHE", "DATA")]
    r = cli(
        "submit",
        "--cluster",
        "tb-slurm",
        "--nodes",
        "1",
        "--name",
        "mon",
        *SIDE_QUEUE,
        "--walltime",
        "60s",
        "--stop-before",
        "58s",
        "--chain",
        "3",
        "-e",
        "WANDB_MODE=offline",
        *[arg for e in env for arg in ("-e", e)],
        "--follow",
        "--train-args",
        TRAIN,
        timeout=600,
        extra_env={"WANDB_API_KEY": ""},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    ids = [
        j["job_id"]
        for j in sorted(
            (j for j in json.loads(cli("list", "--json", check=True).stdout) if j["name"] == "mon"),
            key=lambda j: j["submit_time"],
        )
    ]
    assert len(ids) == 3
    for job in ids:
        cli.wait_state(job, {"done", "timeout", "failed", "cancelled"}, timeout=300)
    logs = [(shared_workdir / f"mon.o{job.split('.')[0]}").read_text() for job in ids]
    logged = [[int(s) for s in re.findall(r"^\[hpc-train\] step=(\d+) ", text, re.M)] for text in logs]
    assert logged == [[5], [10], [15]], [text[-1500:] for text in logs]
    assert [len(re.findall(r"resumed from .* at step (\d+)", text)) for text in logs] == [0, 1, 1]

    # TensorBoard: one run directory for the three links, one strictly increasing axis
    steps = [step for step, _ in tensorboard_scalars(shared_workdir / "runs" / "exp", "Train/Samples/train_loss")]
    assert steps == [5 * GLOBAL, 10 * GLOBAL, 15 * GLOBAL]

    # W&B: one offline run dir per link, all carrying the run id kept beside the chain's checkpoints
    run_id = (shared_workdir / "checkpoints" / "mon" / "wandb-run-id").read_text().strip()
    dirs = sorted((shared_workdir / "runs" / "wandb").glob("offline-run-*"))
    assert [wandb_run(d) for d in dirs] == [{"id": run_id, "steps": [s]} for s in steps]
    assert all(f"wandb sync {shared_workdir}/runs/wandb/offline-run-*-{run_id}" in text for text in logs)
