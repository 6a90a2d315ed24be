"""Batch arithmetic, presets, user JSON, and DeepSpeed's own validation for N ranks."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


from hpc_launch.train.ds_config import (
    bf16_as_autocast,
    build_config,
    merge_user_config,
    own_clipping,
    resolve_batch,
    validate,
)
from hpc_launch.train.errors import TrainError

pytestmark = pytest.mark.train


@given(micro=st.integers(1, 64), accum=st.integers(1, 16), world=st.integers(1, 64))
def test_any_two_numbers_determine_the_third(micro, accum, world):
    total = micro * accum * world
    assert resolve_batch(world, micro, accum).global_ == total
    assert resolve_batch(world, micro, None, total).accum == accum
    assert resolve_batch(world, None, accum, total).micro == micro
    assert resolve_batch(world, micro, accum, total).global_ == total


@given(micro=st.integers(1, 64), accum=st.integers(1, 16), world=st.integers(1, 64), delta=st.integers(1, 7))
def test_a_global_batch_that_does_not_fit_names_the_three_numbers(micro, accum, world, delta):
    bad = micro * accum * world + delta
    with pytest.raises(TrainError) as err:
        resolve_batch(world, micro, accum, bad)
    msg = str(err.value)
    assert f"global batch {bad}" in msg and f"micro-batch {micro}" in msg and f"grad-accum {accum}" in msg
    assert f"world size {world}" in msg and "\n" not in msg


def test_tutorial_batch_on_abci_resolves():
    # seed 000: global batch 10,000 on 9 nodes x 4 GPUs does not divide; 10,080 does.
    with pytest.raises(TrainError, match="global batch 10000"):
        resolve_batch(36, global_=10000)
    assert resolve_batch(36, micro=70, global_=10080).accum == 4


@settings(deadline=None, max_examples=20)
@given(
    zero=st.sampled_from([0, 1, 2, 3]),
    precision=st.sampled_from(["fp32", "bf16", "fp16"]),
    offload=st.sampled_from(["none", "optimizer", "optimizer+params"]),
    world=st.sampled_from([1, 2, 36]),
)
def test_every_valid_preset_passes_deepspeed_validation(zero, precision, offload, world):
    if (offload == "optimizer" and zero == 0) or (offload == "optimizer+params" and zero != 3):
        with pytest.raises(TrainError, match="--offload"):
            build_config(batch=resolve_batch(world, 8, 2), zero=zero, offload=offload, precision=precision)
        return
    cfg = build_config(batch=resolve_batch(world, 8, 2), zero=zero, offload=offload, precision=precision)
    ds = validate(cfg, world)
    assert ds.world_size == world
    assert ds.zero_optimization_stage == zero
    assert ds.train_batch_size == 16 * world
    assert ds.bfloat16_config.enabled == (precision == "bf16")
    assert ds.float16_config.enabled == (precision == "fp16")
    if precision == "fp16":
        assert ds.float16_config.loss_scale == 0  # 0 = dynamic loss scaling


def test_deepspeed_validation_is_for_the_given_world_size():
    cfg = build_config(batch=resolve_batch(4, 8, 2))
    validate(cfg, 4)
    with pytest.raises(TrainError, match="global batch 64 != micro-batch 8 x grad-accum 2 x world size 2"):
        validate(cfg, 2)


def test_user_json_wins_over_presets(tmp_path):
    preset = build_config(batch=resolve_batch(2, 8, 1), zero=2)
    user = {"zero_optimization": {"stage": 3}, "optimizer": {"params": {"lr": 0.5}}, "train_batch_size": 64}
    cfg = merge_user_config(preset, user, world_size=2)
    assert cfg["zero_optimization"]["stage"] == 3
    assert cfg["zero_optimization"]["contiguous_gradients"] is True  # preset keys the user left alone stay
    assert cfg["optimizer"]["params"]["lr"] == 0.5 and cfg["optimizer"]["type"] == "AdamW"
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == (
        64,
        32,
        1,
    )
    validate(cfg, 2)
    with pytest.raises(TrainError, match="global batch 63"):
        merge_user_config(preset, {"train_batch_size": 63, "train_micro_batch_size_per_gpu": 8}, world_size=2)


def test_deepspeed_rejects_unknown_keys_as_one_line():
    cfg = build_config(batch=resolve_batch(1, 8, 1))
    cfg["zero_optimization"]["stagex"] = 1
    with pytest.raises(TrainError, match="DeepSpeed rejected the config") as err:
        validate(cfg, 1)
    assert "\n" not in str(err.value)


def test_print_config_checks_for_the_target_world(tmp_path):
    from ds_launch import run_python

    proc = run_python(
        [
            "-m",
            "hpc_launch.train",
            "--print-config",
            "--world-size",
            "36",
            "--global-batch",
            "10080",
            "--micro-batch",
            "70",
            "--zero",
            "3",
            "--precision",
            "bf16",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    cfg = json.loads(proc.stdout)
    assert cfg["gradient_accumulation_steps"] == 4 and cfg["zero_optimization"]["stage"] == 3


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("on_cpu", [True, False])
def test_batchnorm_buffers_follow_the_parameters_on_every_device(precision, on_cpu):
    # DeepSpeed 0.18+ casts parameters only; on an H200 ResNet-50 bf16 failed in cuDNN's BatchNorm
    # backward ("Expected running_mean to have type BFloat16 but got Float") while the preset set the
    # buffer dtype on CPUs alone (docs/training.md, "On a GPU").
    cfg = build_config(batch=resolve_batch(1, 8, 1), precision=precision, on_cpu=on_cpu)
    assert cfg["data_types"] == {"buffer_dtype": precision}
    assert validate(cfg, 1).bfloat16_config.enabled == (precision == "bf16")


@pytest.mark.parametrize("on_cpu", [True, False])
def test_the_preset_optimizer_needs_no_compiled_op(on_cpu):
    # DeepSpeed's FusedAdam (GPU) and its CPU ops are JIT builds: torch's AdamW ships compiled
    cfg = build_config(batch=resolve_batch(1, 8, 1), on_cpu=on_cpu)
    assert cfg["optimizer"]["type"] == "AdamW" and cfg["optimizer"]["params"]["torch_adam"] is True


def test_gpu_offload_keeps_deepspeeds_cpu_optimizer():
    # with the optimizer on the CPU, DeepSpeed insists on its CPUAdam: the user asked for offload
    cfg = build_config(batch=resolve_batch(1, 8, 1), zero=2, offload="optimizer", on_cpu=False)
    assert "torch_adam" not in cfg["optimizer"]["params"]
    validate(cfg, 1)


def test_another_optimizer_replaces_the_presets_whole():
    preset = build_config(batch=resolve_batch(1, 8, 1), on_cpu=True)
    lamb = {"optimizer": {"type": "Lamb", "params": {"lr": 0.01}}}
    assert merge_user_config(preset, lamb, world_size=1)["optimizer"] == lamb["optimizer"]
    adam = merge_user_config(preset, {"optimizer": {"type": "Adam", "params": {"lr": 0.01}}}, world_size=1)
    assert adam["optimizer"]["type"] == "Adam" and adam["optimizer"]["params"]["torch_adam"] is True


def _bf16_preset(zero: int = 0) -> dict:
    return build_config(batch=resolve_batch(1, 8, 1), zero=zero, precision="bf16", on_cpu=False)


def _bn_model():
    import torch

    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))


def _ln_model():
    import torch

    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_bf16_with_batchnorm_on_an_accelerator_trains_under_torch_autocast(zero):
    # ResNet-50 on an H100: 2228 samples/s with bf16 weights, 3400 under torch_autocast (docs/training.md)
    cfg = bf16_as_autocast(_bf16_preset(zero), "auto", _bn_model(), on_cpu=False)
    assert "bf16" not in cfg and "data_types" not in cfg
    assert cfg["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"}
    assert cfg["zero_optimization"]["stage"] == zero
    assert validate(cfg, 1).torch_autocast_enabled


@pytest.mark.parametrize(
    ("mode", "model", "on_cpu", "autocast"),
    [
        ("auto", "ln", False, False),  # ZeRO-1, no BatchNorm: DeepSpeed's bf16 weights (GPT-2: no winner)
        ("auto", "bn", True, False),  # CPUs were not measured: as before
        ("weights", "bn", False, False),
        ("autocast", "ln", False, True),
        ("autocast", "bn", True, True),
    ],
)
def test_the_bf16_mode_follows_the_choice(mode, model, on_cpu, autocast):
    chosen = _bn_model() if model == "bn" else _ln_model()
    cfg = bf16_as_autocast(_bf16_preset(1), mode, chosen, on_cpu=on_cpu)
    assert ("torch_autocast" in cfg) is autocast and ("bf16" in cfg) is not autocast


def test_zero0_bf16_on_an_accelerator_trains_under_autocast_whatever_the_model():
    # DeepSpeed's ZeRO-0 bf16 optimizer walks every parameter at each step (GPT-2 124M: 0.89 vs 0.94)
    assert "torch_autocast" in bf16_as_autocast(_bf16_preset(0), "auto", _ln_model(), on_cpu=False)
    assert "bf16" in bf16_as_autocast(_bf16_preset(0), "auto", _ln_model(), on_cpu=True)
    assert "bf16" in bf16_as_autocast(_bf16_preset(0), "weights", _ln_model(), on_cpu=False)


def test_a_users_precision_section_wins_over_the_bf16_mode():
    user = {"bf16": {"enabled": True}}
    assert bf16_as_autocast(_bf16_preset(), "auto", _bn_model(), on_cpu=False, user=user) == _bf16_preset()
    fp32 = build_config(batch=resolve_batch(1, 8, 1), precision="fp32", on_cpu=False)
    assert bf16_as_autocast(fp32, "autocast", _bn_model(), on_cpu=False) == fp32
    with pytest.raises(TrainError, match="--bf16-mode must be one of"):
        bf16_as_autocast(_bf16_preset(), "fast", _bn_model(), on_cpu=False)


def test_zero0_clipping_under_bf16_autocast_is_the_trainers_own():
    # fp32 weights and gradients, no scaler: torch's clip, not DeepSpeed's per-parameter path
    cfg = bf16_as_autocast(_bf16_preset(0), "autocast", _bn_model(), on_cpu=False)
    ds_cfg, max_norm = own_clipping(cfg, 1.0)
    assert max_norm == 1.0 and ds_cfg["gradient_clipping"] == 0.0
    fp16 = {**cfg, "torch_autocast": {"enabled": True, "dtype": "float16"}}  # its scaler unscales first
    assert own_clipping(fp16, 1.0) == (fp16, 0.0)
    assert own_clipping(_bf16_preset(0), 1.0) == (_bf16_preset(0), 0.0)
    assert own_clipping(bf16_as_autocast(_bf16_preset(1), "autocast", _bn_model(), on_cpu=False), 1.0)[1] == 0.0
