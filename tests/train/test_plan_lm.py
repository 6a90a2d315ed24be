"""`hpc-launch plan` for language models: model states from DeepSpeed's own estimators, plus the
activations at --seq-len and --micro-batch (hpc_launch/plan.py activation_bytes), checked against
the estimators and against what a CPU training step of gpt-tiny really takes."""

import subprocess
import sys

import pytest

from ds_launch import REPO, child_env

from hpc_launch.plan import GIB, activation_bytes, format_plan, plan_memory

pytestmark = pytest.mark.train

GPT2_SMALL = 124_439_808


def test_gpt_125m_model_states_are_deepspeeds_estimates_plus_the_activations():
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    result = plan_memory("gpt-125m", nodes=2, gpus_per_node=4, gpu_mem_gib=40, seq_len=1024, micro_batch=8)
    assert result.total_params == GPT2_SMALL and result.largest_layer_params == 50257 * 768  # the tied embedding
    by = {(r.stage, r.offload): r for r in result.rows}
    zero2 = estimate_zero2_model_states_mem_needs(GPT2_SMALL, 4, 2, cpu_offload=False, additional_buffer_factor=1.5)
    assert by[(2, "none")].gpu_gib == pytest.approx(zero2[1] / GIB, abs=1e-3)
    zero3 = estimate_zero3_model_states_mem_needs(
        GPT2_SMALL,
        50257 * 768,
        4,
        2,
        cpu_offload=True,
        cpu_offload_params=True,
        zero_init=True,
        additional_buffer_factor=1.5,
    )
    assert by[(3, "optimizer+params")].gpu_gib == pytest.approx(zero3[1] / GIB, abs=1e-3)
    # 12 layers x 34·s·b·h (bf16, fused attention) + the logits s·b·V·(2 + 12), by hand
    s, b, h, v = 1024, 8, 768, 50257
    acts = (12 * 34 * s * b * h + s * b * v * 14) / GIB
    assert result.activations_gib == pytest.approx(acts, abs=1e-3)
    assert result.activations_unfused_gib == pytest.approx(acts + 12 * 5 * 12 * s * s * b / GIB, abs=1e-3)
    assert by[(0, "none")].fits and not plan_memory("gpt-125m", 2, 4, 13, seq_len=1024, micro_batch=8).rows[0].fits
    assert (result.recommended.stage, result.recommended.offload) == (0, "none")  # 2.3 + 7.8 GiB of 40
    assert "recommended: --zero 0 --offload none" in format_plan(result)
    # activations do not shrink with ZeRO: a micro-batch too large for any stage needs a smaller one
    crowded = plan_memory("gpt-125m", nodes=1, gpus_per_node=1, gpu_mem_gib=16, seq_len=1024, micro_batch=16)
    assert crowded.recommended is None and all(r.gpu_gib < 12 for r in crowded.rows if r.stage == 3)


def test_t5_counts_the_decoder_cross_attention():
    result = plan_memory("t5-small", nodes=1, gpus_per_node=1, gpu_mem_gib=80, seq_len=512, micro_batch=4)
    assert result.total_params == 60_506_624  # t5-small's published 60M
    s, b, h, v = 512, 4, 512, 32128
    assert result.activations_gib == pytest.approx(
        (6 * 34 * s * b * h + 6 * 47 * s * b * h + s * b * v * 14) / GIB, abs=1e-3
    )


MEASURE = """
import argparse, gc, resource, sys, torch
from hpc_launch.train import lm
torch.manual_seed(0); torch.set_num_threads(1)
s, b = int(sys.argv[1]), int(sys.argv[2])
args = argparse.Namespace(model="gpt-tiny", data="synthetic-tokens", seq_len=s, tokenizer=None,
                          synthetic_samples=b, seed=0)
run = lm.prepare(args)
model = run.build().train()
batch = {k: torch.stack([run.data.train[i][k] for i in range(b)]) for k in ("input_ids", "labels")}
small = {k: v[:1, :8] for k, v in batch.items()}
run.loss(model, small, "cpu").backward()  # allocator and autograd warmed, gradients allocated
gc.collect()
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
before = max(int(open("/proc/self/statm").read().split()[1]) * 4096, peak())
run.loss(model, batch, "cpu").backward()
print(peak() - before)
"""


def test_gpt_tiny_activations_against_a_measured_cpu_training_step(tmp_path):
    """The CPU's SDPA in training (dropout) stores the attention scores: the unfused estimate.
    What a real step of the entrypoint's gpt-tiny adds to the process's peak RSS lies within a
    loose bound of it (allocator slack, saved temporaries the formula does not name)."""
    from hpc_launch.train.lm import meta_model

    s, b = 512, 16
    proc = subprocess.run(
        [sys.executable, "-c", MEASURE, str(s), str(b)],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = int(proc.stdout.split()[-1])
    estimate = activation_bytes(meta_model("gpt-tiny", s)[1], s, b, "fp32", fused_attention=False)
    print(f"gpt-tiny s={s} b={b}: estimate {estimate / 2**20:.0f} MiB, measured {measured / 2**20:.0f} MiB")
    assert 0.5 * measured <= estimate <= 1.5 * measured, (estimate / 2**20, measured / 2**20)
