"""Kill a job with SIGKILL mid-run, relaunch with --resume auto: it continues exactly where the
newest complete checkpoint left off (same steps, same data position, same losses)."""

import pytest


from ds_launch import launch, launch_and_kill, shm_segments
from hpc_launch.train import checkpoint

# CI runs it after the unit tests (marker after_unit): the training lane ended last by about its length
pytestmark = [pytest.mark.train, pytest.mark.after_unit]

# Synthetic 32px images: steps slow enough (~10 ms) that the kill lands mid-run; 2048 samples,
# micro-batch 32 on 2 ranks = 32 steps per epoch: the resumed run (from step 20) crosses an epoch's end.
STEPS = 60
ARGS = [
    "--model",
    "smallcnn",
    "--data",
    "synthetic",
    "--synthetic-samples",
    "2048",
    "--micro-batch",
    "32",
    "--steps",
    str(STEPS),
    "--log-every",
    "1",
    "--zero",
    "2",
    "--checkpoint-every",
    "10",
    "--no-eval",
]


def test_sigkill_then_resume_auto_continues_the_same_run(tmp_path):
    reference = launch([*ARGS, "--checkpoint-dir", str(tmp_path / "ref")], cwd=tmp_path)
    assert reference.rc == 0, reference.out[-3000:]
    ref_loss = {s["step"]: s["loss"] for s in reference.steps}
    assert sorted(ref_loss) == list(range(1, STEPS + 1))

    ckpt = tmp_path / "ckpt"
    killed = launch_and_kill([*ARGS, "--checkpoint-dir", str(ckpt)], cwd=tmp_path, kill_after_step=25)
    assert killed.rc != 0, "the job should have died from SIGKILL"
    last_logged = killed.steps[-1]["step"]
    assert 25 <= last_logged < STEPS
    assert shm_segments(killed) == []  # nothing left in RAM by a job killed mid-run

    found = checkpoint.find_resume(str(ckpt))
    assert found is not None
    resume_step = checkpoint.read_marker(*found)["step"]
    assert resume_step % 10 == 0 and 20 <= resume_step <= last_logged

    resumed = launch([*ARGS, "--checkpoint-dir", str(ckpt), "--resume", "auto"], cwd=tmp_path)
    assert resumed.rc == 0, resumed.out[-3000:]
    assert f"at step {resume_step}" in resumed.out
    steps = [s["step"] for s in resumed.steps]
    # Continues right after the checkpoint; no step of it repeated, none skipped.
    assert steps == list(range(resume_step + 1, STEPS + 1))
    # Same weights, optimizer, LR schedule and next batch as the uninterrupted run.
    for s in resumed.steps:
        assert s["loss"] == pytest.approx(ref_loss[s["step"]], abs=2e-4), s
