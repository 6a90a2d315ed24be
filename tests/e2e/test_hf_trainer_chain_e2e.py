"""The Hugging Face Trainer through the job layer with no code from the user (issue 27), on the REAL
testbed: a T5-style seq2seq fine-tune built from a tiny T5Config (nothing downloaded) on 2 pods
under `srun`, `--chain 2` with a walltime whose deadline cuts link 1. The layer's adapter
(hpc_launch/joblayer/hf_trainer.py) has the Trainer save a checkpoint and stop at the deadline's
signal; link 2's Trainer resumes from the newest checkpoint in its output_dir: its global step
continues, the steps of both links add up to max_steps, both links `done`, and the summary shows
the Trainer's own numbers (its log dicts: loss, samples/s, steps/s)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from e2e_support import SIDE_QUEUE, make_cli
from hf_t5_script import SCRIPT

pytestmark = [pytest.mark.scheduler, pytest.mark.chain, pytest.mark.train, pytest.mark.side]

# link 1 ends at its deadline, 60 s after it starts (walltime 120 s less --stop-before 60 s): 100 steps
# of at least 0.6 s each (the pause) outlast it whatever its start-up, and link 2, given the same 60 s,
# finishes the rest while the two links' start-ups add up to under 55 s at 0.65 s a step (measured: 6 s
# and 12 s, 0.05 s of work a step). The test's time is about the two start-ups and MAX_STEPS x a step;
# a longer pause keeps the work per step, which eats the margin, small against it. MAX_STEPS is a
# multiple of the script's logging_steps (20): link 2's last step logs the loss the summary shows.
MAX_STEPS, PAUSE_S = 100, 0.6


def _ended(cli, job: str, log: Path, timeout: float) -> str:
    try:
        return cli.wait_state(job, {"failed", "done", "cancelled", "timeout"}, timeout=timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{log.read_text(errors='replace')[-4000:] if log.exists() else 'no log'}") from None


def _ran(text: str) -> dict:
    """rank -> (global step at the end of train(), steps run in this link)"""
    found = re.findall(r"^hf-script rank (\d) of 2 global_step (\d+) ran (\d+) here", text, re.M)
    return {int(r): (int(g), int(n)) for r, g, n in found}


def test_the_hf_trainer_stops_at_link_ones_deadline_and_link_two_resumes_its_global_step(
    hpc_launch_bin, testbed, shared_workdir
):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    script = shared_workdir / "t5_finetune.py"
    script.write_text(SCRIPT)
    out = shared_workdir / "t5-out"
    t0 = time.monotonic()
    r = cli(
        "submit", "--cluster", "tb-slurm", "--nodes", "2", "--name", "t5", "--walltime", "120s",
        "--stop-before", "60s", "--chain", "2", *SIDE_QUEUE, "--script", str(script),
        "--train-args", f"{out} {MAX_STEPS} {PAUSE_S}", check=True,
    )  # fmt: skip
    first = r.stdout.strip().splitlines()[-1]
    second = re.search(r"chain link 2 of 2: (\S+)", r.stderr).group(1)  # type: ignore[union-attr]
    log1, log2 = shared_workdir / f"t5.o{first}", shared_workdir / f"t5.o{second}"
    assert _ended(cli, first, log1, 300) == "done"
    assert _ended(cli, second, log2, 240) == "done"
    took = time.monotonic() - t0
    text1, text2 = log1.read_text(errors="replace"), log2.read_text(errors="replace")

    cut = re.search(r"^\[hpc-launch\] the job asked to stop: the Trainer saves at step (\d+) and stops$", text1, re.M)
    assert cut, text1[-4000:]
    at = int(cut.group(1))
    assert 0 < at < MAX_STEPS
    assert _ran(text1) == {0: (at, at), 1: (at, at)}, text1[-3000:]  # both ranks stopped after the same step
    assert (out / f"checkpoint-{at}" / "trainer_state.json").exists()
    assert f"the Trainer resumes from {out}/checkpoint-{at} (the newest checkpoint in its output_dir)" in text2
    # link 2 ran only the rest: the global step continued from the checkpoint, no step twice
    assert _ran(text2) == {0: (MAX_STEPS, MAX_STEPS - at), 1: (MAX_STEPS, MAX_STEPS - at)}, text2[-3000:]

    summary = cli("logs", second, "--summary", check=True).stdout
    assert re.search(r"final loss [\d.]+, [\d.]+ samples/s \(mean\), [\d.]+ steps/s", summary), summary
    print(f"link 1 cut at step {at} of {MAX_STEPS}; both links done in {took:.0f} s\n{summary}")
