"""The HF Trainer adapter (hpc_launch/joblayer/hf_trainer.py) with transformers' real Trainer (on
accelerate), run as a job runs a rank: `python -m hpc_launch.joblayer SCRIPT`. Link 1: the job's stop
file asks to stop; the Trainer saves checkpoint-N into its own output_dir and ends its training,
exit 0. Link 2 (a chain's next link: $HPC_LAUNCH_CHECKPOINT_DIR set): train() resumes from
checkpoint-N by itself and runs only the rest. Two ranks (gloo), started as torchrun starts them;
the same over srun on 2 pods, cut by a real deadline: tests/e2e/test_hf_trainer_chain_e2e.py."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_t5_script import SCRIPT

pytestmark = pytest.mark.train

REPO = Path(__file__).resolve().parents[1]
MAX_STEPS = 120


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _link(tmp_path: Path, n: int, stop_when_logging: bool) -> list:
    """Both ranks of one link, started as torchrun starts them; with stop_when_logging, the stop file
    appears once the Trainer's first log dict is out (it is training)."""
    script = tmp_path / "t5_finetune.py"
    script.write_text(SCRIPT)
    stop = tmp_path / f"stop.{n}"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI", "HPC_LAUNCH"))}
    base.update(
        PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HPC_LAUNCH_STOP=str(stop), HPC_LAUNCH_PREFLIGHT="0",
        HPC_LAUNCH_CHECKPOINT_DIR=str(tmp_path / "chain"), MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
    )  # fmt: skip
    cmd = [sys.executable, "-m", "hpc_launch.joblayer", str(script), str(tmp_path / "out"), str(MAX_STEPS), "0.05"]
    logs = [tmp_path / f"link{n}.rank{rank}.out" for rank in (0, 1)]
    ranks = []
    for rank, log in enumerate(logs):
        out = log.open("w")
        env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
        ranks.append((subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True), out))
    try:
        if stop_when_logging:
            deadline = time.monotonic() + 120
            while "{'loss'" not in logs[0].read_text():
                assert time.monotonic() < deadline and ranks[0][0].poll() is None, logs[0].read_text()[-3000:]
                time.sleep(0.1)
            stop.touch()  # as the deadline, the stop signal or the scheduler's SIGTERM ask
        codes = [p.wait(timeout=180) for p, _ in ranks]
    finally:
        for p, out in ranks:
            if p.poll() is None:
                p.kill()
            out.close()
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0], texts[0][-3000:] + texts[1][-3000:]
    return texts


def test_the_real_trainer_saves_and_stops_on_the_jobs_request_and_the_next_link_resumes(tmp_path):
    first = _link(tmp_path, 1, stop_when_logging=True)
    cut = re.search(r"the job asked to stop: the Trainer saves at step (\d+) and stops", first[0])
    assert cut, first[0][-3000:]
    at = int(cut.group(1))
    assert 20 <= at < MAX_STEPS
    for rank in (0, 1):  # both ranks stopped after the same step
        assert f"hf-script rank {rank} of 2 global_step {at} ran {at} here" in first[rank], first[rank][-2000:]
    assert (tmp_path / "out" / f"checkpoint-{at}" / "trainer_state.json").is_file()

    second = _link(tmp_path, 2, stop_when_logging=False)
    assert f"the Trainer resumes from {tmp_path / 'out'}/checkpoint-{at}" in second[0], second[0][-3000:]
    for rank in (0, 1):  # the optimizer too (on CPU ranks: cpu:N, hf_trainer.restore_indexed_cpu_locations)
        assert f"global_step {MAX_STEPS} ran {MAX_STEPS - at} here" in second[rank], second[rank][-3000:]
    assert "'train_samples_per_second'" in second[0]  # the Trainer's numbers, which the summary reads
