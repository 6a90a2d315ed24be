"""What a training step costs beyond forward, backward and the optimizer: the ZeRO-0 fp32 gradient
clipping is done by the trainer with no collective, and the stop request rides on the loss's
all-reduce. The throughput itself is measured by bench/bench_train.py --part ddp (docs/training.md)."""

import subprocess
import sys
import textwrap

import pytest

from ds_launch import child_env, free_port, launch
from hpc_launch.train import checkpoint
from hpc_launch.train.ds_config import build_config, own_clipping, resolve_batch
from hpc_launch.train.stop import RESUMABLE_EXIT

pytestmark = pytest.mark.train

BATCH = resolve_batch(2, 32)


def _one_rank(tmp_path, body: str, last_line: str) -> None:
    """Run `body` as one DeepSpeed rank over gloo (a process group of one, DeepSpeed's shm op
    skipped) in its own interpreter; it must end by printing `last_line`."""
    prelude = textwrap.dedent(
        """
        import os
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        import deepspeed
        from hpc_launch.train import ds_startup
        ds_startup.skip_shm_comm_op()
        deepspeed.init_distributed("gloo", auto_mpi_discovery=False, verbose=False)
        """
    )
    path = tmp_path / "rank.py"
    path.write_text(prelude + body)
    done = subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        env={**child_env(), "PORT": str(free_port())},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith(last_line), done.stdout[-3000:]


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
        import torch, deepspeed
        from deepspeed.runtime.utils import clip_grad_norm_
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
    _one_rank(tmp_path, script, "same")


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

    from hpc_launch.train.models import build_model

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


def test_the_fused_adamw_the_preset_asks_for_reaches_torch_and_updates_alike(tmp_path):
    """Where torch has a fused AdamW for the device (CPU since torch 2.4), the preset asks for it:
    DeepSpeed passes `fused` through to torch.optim.AdamW, and ten steps under ZeRO 0, 1 and 2
    leave the same parameters as the loop-of-ops AdamW (bench/bench_train.py: the step's cost)."""
    script = textwrap.dedent(
        """
        import torch, deepspeed
        from hpc_launch.train.ds_config import build_config, fused_adamw_available, resolve_batch
        assert fused_adamw_available("cpu")
        for zero in (0, 1, 2):
            finals = {}
            for fused in (True, False):
                cfg = build_config(batch=resolve_batch(1, 8), zero=zero, on_cpu=True, fused_adamw=fused)
                assert cfg["optimizer"]["params"].get("fused", False) is fused
                torch.manual_seed(0)
                model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
                engine, opt, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
                base = getattr(opt, "optimizer", opt)
                assert type(base) is torch.optim.AdamW and base.defaults["fused"] is (True if fused else None)
                g = torch.Generator().manual_seed(1)
                for _ in range(10):
                    x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
                    engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
                    engine.step()
                finals[fused] = [p.detach().clone() for p in engine.module.parameters()]
            for a, b in zip(finals[True], finals[False]):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
            print("zero", zero, "same")
        print("all same")
        """
    )
    _one_rank(tmp_path, script, "all same")


def test_a_users_foreach_choice_drops_the_presets_fused():
    from hpc_launch.train.ds_config import merge_user_config

    preset = build_config(batch=resolve_batch(1, 8), on_cpu=True, fused_adamw=True)
    assert preset["optimizer"]["params"]["fused"] is True
    user = {"optimizer": {"type": "AdamW", "params": {"foreach": True}}}
    merged = merge_user_config(preset, user, world_size=1)
    assert "fused" not in merged["optimizer"]["params"] and merged["optimizer"]["params"]["foreach"] is True
    assert preset["optimizer"]["params"]["fused"] is True  # the preset itself is not changed


def test_memory_format_auto_chooses_channels_last_where_it_is_faster_or_documented():
    import torch

    from hpc_launch.train.models import build_model, memory_format

    cnn, mlp = build_model("smallcnn", 10), torch.nn.Sequential(torch.nn.Linear(4, 4))
    assert memory_format(cnn, "auto", "cpu", "fp32") is torch.channels_last
    assert memory_format(cnn, "auto", "cuda", "bf16") is torch.channels_last
    assert memory_format(cnn, "auto", "cuda", "fp32") is None  # not measured, not documented: as built
    assert memory_format(cnn, "channels_last", "cuda", "fp32") is torch.channels_last
    assert memory_format(cnn, "contiguous", "cpu", "fp32") is None
    assert memory_format(mlp, "channels_last", "cpu", "fp32") is None  # no images to lay out


def test_channels_last_trains_to_the_same_parameters_under_every_zero_stage(tmp_path):
    """A CNN with BatchNorm fed channels_last batches (as the trainer lays them out) and as loaded:
    ten steps under ZeRO 0-3 leave the same parameters and BatchNorm statistics."""
    script = textwrap.dedent(
        """
        import torch, deepspeed
        from hpc_launch.train.ds_config import build_config, resolve_batch
        from hpc_launch.train.models import build_model
        for zero in (0, 1, 2, 3):
            finals = {}
            for layout in (torch.channels_last, torch.preserve_format):
                cfg = build_config(batch=resolve_batch(1, 8), zero=zero, on_cpu=True)
                torch.manual_seed(0)
                model = build_model("smallcnn", 10)
                engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
                g = torch.Generator().manual_seed(1)
                for _ in range(10):
                    x, y = torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
                    x = x.to(memory_format=layout)
                    assert x.is_contiguous(memory_format=torch.channels_last) == (layout is torch.channels_last)
                    out = engine(x)
                    engine.backward(torch.nn.functional.cross_entropy(out, y))
                    engine.step()
                with deepspeed.zero.GatheredParameters(list(engine.module.parameters()), enabled=zero == 3):
                    finals[layout] = [t.detach().clone() for t in engine.module.state_dict().values()]
            for a, b in zip(finals[torch.channels_last], finals[torch.preserve_format]):
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
            print("zero", zero, "same")
        print("all same")
        """
    )
    _one_rank(tmp_path, script, "all same")
