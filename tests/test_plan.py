"""`hpc-launch plan`: ZeRO memory per stage from DeepSpeed's estimators, and the recommended stage."""

import pytest

from hpc_launch.plan import GIB, HEADROOM, count_params, format_plan, plan_memory  # noqa: E402

pytestmark = pytest.mark.train


def test_meta_count_matches_a_real_build():
    from hpc_launch.train.models import build_model

    real = build_model("resnet18", 1000)
    assert count_params("resnet18") == (
        sum(p.numel() for p in real.parameters()),
        max(sum(p.numel() for p in m.parameters(recurse=False)) for m in real.modules()),
    )
    assert count_params("resnet50")[0] == 25_557_032  # torchvision's published size


def test_resnet50_on_abci_tutorial_setup():
    result = plan_memory("resnet50", nodes=9, gpus_per_node=4, gpu_mem_gib=16)
    psi, n = 25_557_032, 36
    by = {(r.stage, r.offload): r for r in result.rows}
    # DeepSpeed's ZeRO-2 estimator: 2 bytes of 16-bit params + 18 bytes/param partitioned.
    assert by[(2, "none")].gpu_gib == pytest.approx((2 * psi + int(18 * psi / n)) / GIB, abs=1e-3)
    assert by[(0, "none")].gpu_gib == pytest.approx(20 * psi / GIB, abs=1e-3)
    gpu = [by[(s, "none")].gpu_gib for s in (0, 1, 2, 3)]
    assert gpu == sorted(gpu, reverse=True) and gpu[3] < gpu[0] / 10
    # Everything fits in 16 GiB: the least communication wins.
    assert (result.recommended.stage, result.recommended.offload) == (0, "none")
    assert "recommended: --zero 0 --offload none" in format_plan(result)


def test_recommends_the_lowest_stage_that_fits_and_offload_only_when_needed():
    psi = count_params("vit_h_14")[0]  # 632M params: 20 bytes/param replicated is ~11.8 GiB
    result = plan_memory("vit_h_14", nodes=1, gpus_per_node=8, gpu_mem_gib=12)
    assert result.recommended.stage >= 1 and result.recommended.offload == "none"
    assert result.recommended.gpu_gib <= 12 * (1 - HEADROOM)
    assert not next(r for r in result.rows if r.stage == 0).fits
    small_gpu = plan_memory("vit_h_14", nodes=1, gpus_per_node=1, gpu_mem_gib=4)
    assert small_gpu.recommended.offload != "none"
    assert small_gpu.recommended.gpu_gib < 20 * psi / GIB
    nothing = plan_memory("vit_h_14", nodes=1, gpus_per_node=1, gpu_mem_gib=4, cpu_mem_gib=1)
    assert nothing.recommended is None and "nothing fits" in format_plan(nothing)


def test_more_nodes_shrink_partitioned_states_only():
    one = {(r.stage, r.offload): r.gpu_gib for r in plan_memory("resnet50", 1, 4, 80).rows}
    many = {(r.stage, r.offload): r.gpu_gib for r in plan_memory("resnet50", 16, 4, 80).rows}
    assert many[(0, "none")] == one[(0, "none")]
    assert many[(3, "none")] < one[(3, "none")]
