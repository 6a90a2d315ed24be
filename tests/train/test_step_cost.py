"""What a training step costs beyond forward, backward and the optimizer: the ZeRO-0 fp32 gradient
clipping is done by the trainer with no collective, and the stop request rides on the loss's
all-reduce. The throughput itself is measured by bench/bench_train.py --part ddp (docs/training.md)."""

import subprocess
import sys
import textwrap

import pytest

from ds_launch import child_env, free_port, launch
from train import checkpoint
from train.ds_config import build_config, own_clipping, resolve_batch
from train.stop import RESUMABLE_EXIT

pytestmark = pytest.mark.train

BATCH = resolve_batch(2, 32)


def test_zero0_fp32_clipping_moves_from_deepspeed_to_the_trainer():
    cfg = build_config(batch=BATCH, zero=0, on_cpu=True)
    ds_cfg, max_norm = own_clipping(cfg, 1.0)
    assert (ds_cfg["gradient_clipping"], max_norm) == (0.0, 1.0)  # DeepSpeed's default max norm, kept
    assert "gradient_clipping" not in cfg  # the caller's config is not changed
    user = own_clipping({**cfg, "gradient_clipping": 0.5}, 1.0)
    assert (user[0]["gradient_clipping"], user[1]) == (0.0, 0.5)  # the user's max norm wins


@pytest.mark.parametrize(
    "cfg",
    [
        build_config(batch=BATCH, zero=1, on_cpu=True),  # ZeRO optimizers clip their own partitions
        build_config(batch=BATCH, zero=0, precision="bf16", on_cpu=True),  # so does the bf16 optimizer
        {**build_config(batch=BATCH, zero=0, on_cpu=True), "gradient_clipping": 0.0},  # the user turned it off
    ],
)
def test_every_other_config_leaves_clipping_to_deepspeed(cfg):
    assert own_clipping(cfg, 1.0) == (cfg, 0.0)


def test_torch_clipping_after_the_all_reduce_equals_deepspeeds(tmp_path):
    """The same gradients clipped both ways give the same gradients (one rank: DeepSpeed's extra
    all-reduce averages a norm that is already the same on every rank)."""
    script = textwrap.dedent(
        """
        import os
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        import torch, deepspeed
        from deepspeed.runtime.utils import clip_grad_norm_
        from train import ds_startup
        ds_startup.skip_shm_comm_op()
        deepspeed.init_distributed("gloo", auto_mpi_discovery=False, verbose=False)
        torch.manual_seed(0)
        for scale in (0.01, 100.0):  # below the max norm (left as is) and above it (scaled down)
            a = [torch.nn.Parameter(torch.randn(n)) for n in (7, 300, 5000)]
            b = [torch.nn.Parameter(p.detach().clone()) for p in a]
            for p, q in zip(a, b):
                p.grad = torch.randn(p.shape) * scale
                q.grad = p.grad.clone()
            clip_grad_norm_(a, 1.0)
            torch.nn.utils.clip_grad_norm_(b, 1.0)
            for p, q in zip(a, b):
                torch.testing.assert_close(p.grad, q.grad)
        print("same")
        """
    )
    path = tmp_path / "clip.py"
    path.write_text(script)
    done = subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        env={**child_env(), "PORT": str(free_port())},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("same"), done.stdout[-2000:]


def test_a_stop_asked_before_the_first_step_ends_every_rank_at_the_first_log_step(tmp_path):
    """The stop request shares the loss's all-reduce: asked before the run, every rank stops after
    the first --log-every steps with a complete checkpoint and the resumable exit code."""
    stop = tmp_path / "STOP"
    stop.touch()
    args = ["--model", "smallcnn", "--data", "synthetic", "--synthetic-samples", "1024", "--micro-batch", "32"]
    args += ["--steps", "40", "--log-every", "4", "--zero", "0", "--checkpoint-dir", "ck", "--no-eval"]
    run = launch(args, cwd=tmp_path, extra_env={"HPC_LAUNCH_STOP": str(stop)})
    assert run.rc == RESUMABLE_EXIT, run.out[-3000:]
    assert [s["step"] for s in run.steps] == [4]
    assert "stopped for time at step 4 of 40" in run.out
    assert checkpoint.resolve_resume("auto", str(tmp_path / "ck")) == (str(tmp_path / "ck"), "global_step4")


def test_a_zero0_fp32_run_still_clips_to_the_configured_max_norm(tmp_path):
    """With the clipping in the trainer, a max norm so small that Adam's eps swamps the gradients
    leaves the weights where the seed put them (without clipping they move by ~lr per step)."""
    import json

    import torch

    from train.models import build_model

    (tmp_path / "ds.json").write_text(
        json.dumps({"gradient_clipping": 1e-12, "optimizer": {"params": {"weight_decay": 0.0}}})
    )
    args = ["--model", "smallcnn", "--data", "synthetic", "--synthetic-samples", "1024", "--micro-batch", "32"]
    args += ["--steps", "8", "--log-every", "4", "--zero", "0", "--ds-config", "ds.json", "--seed", "3"]
    args += ["--checkpoint-dir", "ck", "--no-eval"]
    run = launch(args, cwd=tmp_path)
    assert run.rc == 0, run.out[-3000:]
    saved = torch.load(tmp_path / "ck" / "global_step8" / "mp_rank_00_model_states.pt", weights_only=False)["module"]
    torch.manual_seed(3)
    initial = build_model("smallcnn", 10).state_dict()
    moved = max((saved[k].float() - initial[k].float()).abs().max().item() for k in initial if "weight" in k)
    assert moved < 1e-6, f"weights moved by {moved}: the max norm was not applied"
