"""2 CPU ranks through the real deepspeed launcher, every ZeRO stage: the model really learns."""

import os
import re

import pytest


from ds_launch import SMALL, launch, run_python, shm_segments

pytestmark = pytest.mark.train

ARGS = [*SMALL, "--steps", "60", "--log-every", "5", "--lr", "3e-3"]


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_zero_stage_trains_on_two_ranks(zero, tmp_path):
    ckpt = tmp_path / "ckpt"
    extra = ["--monitor", "csv", "--monitor-dir", str(tmp_path / "runs")] if zero == 1 else []
    # every Python of the run lists what it imports (stderr, in run.out)
    imports = {"PYTHONPROFILEIMPORTTIME": "1"} if zero == 2 else {}
    run = launch([*ARGS, "--zero", str(zero), "--checkpoint-dir", str(ckpt), *extra], cwd=tmp_path, extra_env=imports)
    assert run.rc == 0, run.out[-3000:]
    if imports:  # DeepSpeed's Muon modules, and the torch compiler they pull in, stay unimported (ds_startup)
        imported = set(re.findall(r"^import time:.*\|\s+(\S+)$", run.out, re.M))
        assert {"torch", "deepspeed.runtime.engine"} <= imported  # the listing is there
        # (torch.optim imports a little of torch._inductor itself; torch.compile brings compile_fx and ~500 more)
        assert not [m for m in imported if m.startswith(("deepspeed.runtime.zero.muon", "torch._inductor.compile_fx"))]
    assert [s["step"] for s in run.steps] == list(range(5, 61, 5))
    assert {s["world_size"] for s in run.steps} == {2}
    assert shm_segments(run) == []  # no shm all-reduce workspace left in RAM
    assert "shm_comm" not in run.out  # an op inference alone uses is never compiled or loaded
    assert all(s["avg_samples_per_sec"] > 0 and s["mem_peak_gb"] > 0 for s in run.steps)
    assert run.losses[-1] < 0.6 * run.losses[0], run.losses
    # Held-out digits (360 scans never trained on): chance is 0.10.
    assert float(run.evals[-1]["top1"]) >= 0.85, run.evals

    files = sorted(os.listdir(ckpt / "global_step60"))
    if zero >= 1:  # optimizer state really is partitioned over the two ranks
        assert "zero_pp_rank_0_mp_rank_00_optim_states.pt" in files
        assert "zero_pp_rank_1_mp_rank_00_optim_states.pt" in files
    if zero == 1:  # DeepSpeed's CSV monitor wrote the loss curve
        csvs = [f for _, _, fs in os.walk(tmp_path / "runs") for f in fs if f.endswith(".csv")]
        assert any("loss" in f for f in csvs), csvs

    if zero in (0, 3):  # the standalone eval consolidates the (ZeRO-3: partitioned) weights in one process
        proc = run_python(["-m", "hpc_launch.train.evaluate", "--checkpoint-dir", str(ckpt)], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        line = [l for l in proc.stdout.splitlines() if l.startswith("[hpc-eval]")][0]
        result = dict(kv.split("=", 1) for kv in line.split()[1:])
        assert result["samples"] == "360"
        # Ranks keep their own BatchNorm statistics; the checkpoint holds rank 0's, so allow a little.
        assert abs(float(result["top1"]) - float(run.evals[-1]["top1"])) <= 0.03


def test_zero3_with_cpu_offload_of_optimizer_and_params(tmp_path):
    # ZeRO-Infinity's param offload, with torch's AdamW on CPU: no JIT-built cpu_adam (it took ~65 s cold)
    run = launch(
        [*SMALL, "--steps", "40", "--log-every", "10", "--lr", "3e-3", "--zero", "3", "--offload", "optimizer+params"],
        cwd=tmp_path,
    )
    assert run.rc == 0, run.out[-3000:]
    assert run.losses[-1] < 0.6 * run.losses[0], run.losses
    assert float(run.evals[-1]["top1"]) >= 0.8
