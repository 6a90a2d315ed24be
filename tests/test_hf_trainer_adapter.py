"""The HF Trainer adapter (hpc_launch/joblayer/hf_trainer.py) with transformers' real Trainer (on
accelerate), run as a job runs a rank: `python -m hpc_launch.joblayer SCRIPT`. Link 1: the job's stop
file asks to stop; the Trainer saves checkpoint-N into its own output_dir and ends its training,
exit 0. Link 2 (a chain's next link: $HPC_LAUNCH_CHECKPOINT_DIR set): train() resumes from
checkpoint-N by itself and runs only the rest. One rank here (the 2-rank run over srun, cut by a real
deadline, is tests/e2e/test_hf_trainer_chain_e2e.py): a rank costs ~10 s of CPU to import the stack."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_t5_script import SCRIPT

pytestmark = pytest.mark.train

REPO = Path(__file__).resolve().parents[1]
MAX_STEPS = 120


def _link(tmp_path: Path, n: int, stop_when_logging: bool) -> str:
    script = tmp_path / "t5_finetune.py"
    script.write_text(SCRIPT)
    stop, log = tmp_path / f"stop.{n}", tmp_path / f"link{n}.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI", "HPC_LAUNCH"))}
    env.update(
        PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HPC_LAUNCH_STOP=str(stop),
        HPC_LAUNCH_CHECKPOINT_DIR=str(tmp_path / "chain"),
    )  # fmt: skip
    cmd = [sys.executable, "-m", "hpc_launch.joblayer", str(script), str(tmp_path / "out"), str(MAX_STEPS), "0.05"]
    with log.open("w") as out:
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        try:
            if stop_when_logging:  # the Trainer's first log dict: it is training
                deadline = time.monotonic() + 120
                while "{'loss'" not in log.read_text():
                    assert time.monotonic() < deadline and p.poll() is None, log.read_text()[-3000:]
                    time.sleep(0.1)
                stop.touch()  # as the deadline, the stop signal or the scheduler's SIGTERM ask
            assert p.wait(timeout=180) == 0, log.read_text()[-3000:]
        finally:
            if p.poll() is None:
                p.kill()
    return log.read_text()


def test_the_real_trainer_saves_and_stops_on_the_jobs_request_and_the_next_link_resumes(tmp_path):
    first = _link(tmp_path, 1, stop_when_logging=True)
    cut = re.search(r"the job asked to stop: the Trainer saves at step (\d+) and stops", first)
    assert cut, first[-3000:]
    at = int(cut.group(1))
    assert 20 <= at < MAX_STEPS
    assert f"hf-script rank 0 of 1 global_step {at} ran {at} here" in first
    assert (tmp_path / "out" / f"checkpoint-{at}" / "trainer_state.json").is_file()

    second = _link(tmp_path, 2, stop_when_logging=False)
    assert f"the Trainer resumes from {tmp_path / 'out'}/checkpoint-{at}" in second, second[-3000:]
    assert f"hf-script rank 0 of 1 global_step {MAX_STEPS} ran {MAX_STEPS - at} here" in second, second[-3000:]
    assert "'train_samples_per_second'" in second  # the Trainer's numbers, which the summary reads
