"""Lightning through the job layer with no code from the user (hpc_launch/joblayer/lightning.py):
two real DDP ranks (gloo, CPU) of a tiny LightningModule, started as torchrun starts them, each
through `python -m hpc_launch.joblayer`. Link 1: the job's stop file asks both ranks to stop; the
adapter saves one checkpoint after the same step on both and ends the fit, exit 0. Link 2 (the
chain's next link: the same $HPC_LAUNCH_CHECKPOINT_DIR): `fit()` resumes from that checkpoint by
itself, its global step continues to max_steps, no step run twice. Rank 0 prints the fit's numbers
(Lightning prints only a progress bar), which the summary and `report` read."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_STEPS = 24

# A user's Lightning script as its docs write one; nothing of hpc-launch's but the torchvision
# import this machine's wheel needs before Lightning (hpc_launch/train/tv_compat.py).
SCRIPT = """\
import sys, time
from hpc_launch.train.tv_compat import import_torchvision

import_torchvision()
import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

max_steps, root = int(sys.argv[1]), sys.argv[2]


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        time.sleep(0.05)  # a step of real length: the stop file comes while it trains
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_mse", loss)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        print(f"lightning-script rank {self.global_rank} step {self.trainer.global_step}", flush=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(4096, 8, generator=g), torch.randn(4096, 1, generator=g))
trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=max_steps, default_root_dir=root,
                    logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                    log_every_n_steps=4)
trainer.fit(Tiny(), DataLoader(data, batch_size=8))
print(f"lightning-script rank {trainer.global_rank} ends at global_step {trainer.global_step}", flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _link(tmp_path: Path, n: int, stop_after: int = 0) -> list:
    """Both ranks of one link; with stop_after, the stop file appears once rank 0 passed that step."""
    script = tmp_path / "fit_tiny.py"
    script.write_text(SCRIPT)
    stop = tmp_path / f"stop.{n}"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI", "HPC_LAUNCH"))}
    base.update(
        PYTHONPATH=str(REPO), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2", OMP_NUM_THREADS="1", HPC_LAUNCH_STOP=str(stop), HPC_LAUNCH_PREFLIGHT="0",
        HPC_LAUNCH_CHECKPOINT_DIR=str(tmp_path / "chain"),
    )  # fmt: skip
    ranks = []
    for rank in (0, 1):
        out = (tmp_path / f"link{n}.rank{rank}.out").open("w")
        env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
        cmd = [sys.executable, "-m", "hpc_launch.joblayer", str(script), str(MAX_STEPS), str(tmp_path / "root")]
        ranks.append((subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True), out))
    log0 = tmp_path / f"link{n}.rank0.out"
    try:
        if stop_after:
            deadline = time.monotonic() + 120
            while not re.search(rf"^lightning-script rank 0 step {stop_after}$", log0.read_text(), re.M):
                assert time.monotonic() < deadline and ranks[0][0].poll() is None, log0.read_text()[-3000:]
                time.sleep(0.1)
            stop.touch()  # as the deadline, the stop signal or the scheduler's SIGTERM ask
        codes = [p.wait(timeout=180) for p, _ in ranks]
    finally:
        for p, out in ranks:
            if p.poll() is None:
                p.kill()
            out.close()
    texts = [(tmp_path / f"link{n}.rank{rank}.out").read_text() for rank in (0, 1)]
    assert codes == [0, 0], texts[0][-3000:]
    return texts


def _steps(text: str, rank: int) -> list:
    return [int(s) for s in re.findall(rf"^lightning-script rank {rank} step (\d+)$", text, re.M)]


def test_in_a_job_the_layer_imports_no_framework_until_the_script_does(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import sys\n"
        "print(sorted(m for m in ('torch', 'lightning', 'pytorch_lightning', 'transformers') if m in sys.modules))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI", "HPC_LAUNCH"))}
    env.update(PYTHONPATH=str(REPO), HPC_LAUNCH_STOP=str(tmp_path / "stop.1"))  # in a job: the adapters wait
    r = subprocess.run(
        [sys.executable, "-m", "hpc_launch.joblayer", str(probe)], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout == "[]\n", r.stderr


@pytest.mark.train
def test_lightning_saves_and_stops_on_the_jobs_request_and_the_next_link_resumes_its_global_step(tmp_path):
    first = _link(tmp_path, 1, stop_after=5)
    saved = re.search(r"Lightning saved (\S+) at step (\d+) and stops", first[0])
    assert saved, first[0][-3000:]
    at = int(saved.group(2))
    assert Path(saved.group(1)) == tmp_path / "chain" / f"step={at}.ckpt" and Path(saved.group(1)).is_file()
    assert 5 <= at < MAX_STEPS
    for rank in (0, 1):  # both ranks stopped after the same step
        assert _steps(first[rank], rank)[-1] == at
        assert f"lightning-script rank {rank} ends at global_step {at}" in first[rank]

    second = _link(tmp_path, 2)
    assert f"Lightning resumes from {saved.group(1)}" in second[0], second[0][-3000:]
    for rank in (0, 1):
        assert _steps(second[rank], rank) == list(range(at + 1, MAX_STEPS + 1)), second[rank][-2000:]
        assert f"lightning-script rank {rank} ends at global_step {MAX_STEPS}" in second[rank]
    _the_summary_shows_lightnings_numbers(second, at)


def _the_summary_shows_lightnings_numbers(ranks: list, resumed_at: int) -> None:
    """Rank 0 printed a line every log_every_n_steps (4) and the totals at the end; rank 1 none."""
    from hpc_launch.display import format_summary, summarise
    from hpc_launch.report.rows import row_for

    assert "[hpc-launch] lightning" not in ranks[1]
    lines = re.findall(r"^\[hpc-launch\] lightning (?:end )?step=(\d+) .*train_mse=\S+$", ranks[0], re.M)
    expected = [s for s in range(resumed_at + 1, MAX_STEPS + 1) if s % 4 == 0] + [MAX_STEPS]
    assert [int(s) for s in lines] == expected, ranks[0][-2000:]
    s = summarise(ranks[0], state="done", exit_code=0, log_path="job.log")
    # 16 samples a step (batch 8 on each of 2 ranks); a step takes >= 50 ms (the script's sleep)
    assert s.metrics["step"] == MAX_STEPS and 0 < s.metrics["loss"] < 10
    assert 0 < s.metrics["steps_per_sec"] <= 20 and s.metrics["avg_samples_per_sec"] == pytest.approx(
        16 * s.metrics["steps_per_sec"], rel=0.02
    )
    text = format_summary(s, "9")
    assert f"{MAX_STEPS} steps, final loss {s.metrics['loss']:.4f}, " in text and " samples/s (mean), " in text

    class Record:
        job_id, state, exit_code, log_path, comment, cluster, extra = "9", "done", 0, "job.log", "", "local", {}

    row = row_for(Record(), ranks[0])
    assert (row.steps, row.final_loss, row.samples_per_sec) == (
        MAX_STEPS,
        s.metrics["loss"],
        s.metrics["avg_samples_per_sec"],
    )


class _Fit:
    """What the wrapper touches of Lightning's Trainer: default_root_dir, callbacks, is_global_zero, fit()."""

    def __init__(self, root):
        self.default_root_dir, self.callbacks, self.is_global_zero, self.got = str(root), [], True, "unset"

    def fit(self, model, train_dataloaders=None, val_dataloaders=None, datamodule=None, ckpt_path=None):
        self.got = ckpt_path


def _fit_class():
    from hpc_launch.joblayer import lightning as adapter

    cls = type("Trainer", (_Fit,), {})
    cls.fit = adapter.wrap_fit(cls.fit, object)
    return cls


def _ckpts(where: Path, *names: str) -> None:
    where.mkdir(parents=True)
    for i, name in enumerate(names):
        (where / name).write_text("")
        os.utime(where / name, (1_000_000 + i, 1_000_000 + i))  # the later, the newer


def test_a_requeued_run_without_a_chain_resumes_from_the_newest_under_default_root_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("HPC_LAUNCH_CHECKPOINT_DIR", raising=False)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    _ckpts(tmp_path / "hpc-launch-checkpoints", "step=10.ckpt", "step=30.ckpt")
    t = _fit_class()(tmp_path)
    t.fit("model")
    assert t.got == str(tmp_path / "hpc-launch-checkpoints" / "step=30.ckpt")
    assert [type(cb).__name__ for cb in t.callbacks] == ["StopForTheJob", "NumbersForTheJob"]


def test_a_first_start_and_the_scripts_own_ckpt_path_are_left_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("HPC_LAUNCH_CHECKPOINT_DIR", raising=False)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    monkeypatch.delenv("PBS_RUN_COUNT", raising=False)
    _ckpts(tmp_path / "hpc-launch-checkpoints", "step=10.ckpt")
    first = _fit_class()(tmp_path)
    first.fit("model")
    assert first.got is None
    monkeypatch.setenv("PBS_RUN_COUNT", "2")  # a PBS rerun: resumed, but the script named its own
    own = _fit_class()(tmp_path)
    own.fit("model", ckpt_path="mine.ckpt")
    assert own.got == "mine.ckpt"


class _Trainer:
    """What the numbers callback reads of Lightning's Trainer."""

    def __init__(self, zero=True):
        self.global_step, self.current_epoch, self.world_size, self.log_every_n_steps = 0, 0, 2, 2
        self.is_global_zero, self.callback_metrics, self.optimizers = zero, {}, []


def _numbers(trainer, batches, accumulate=1):
    """Run the callback over `batches` (one optimizer step every `accumulate`); its printed lines."""
    import contextlib
    import io

    from hpc_launch.joblayer import lightning as adapter

    cb, out = adapter.numbers_callback(object), io.StringIO()
    with contextlib.redirect_stdout(out):
        cb.on_train_start(trainer, None)
        for i, batch in enumerate(batches):
            trainer.global_step += (i + 1) % accumulate == 0
            cb.on_train_batch_end(trainer, None, {"loss": 0.5}, batch, i)
        cb.on_train_end(trainer, None)
    return out.getvalue().splitlines()


def test_numbers_every_log_every_n_optimizer_steps_on_rank_0_only():
    import torch

    from hpc_launch.metrics_line import parse_line

    batch = {"input_ids": torch.zeros(4, 16, dtype=torch.long)}
    t = _Trainer()
    t.callback_metrics = {"train/tokens_per_sec": torch.tensor(1000.0), "train|device/tokens_per_sec": 7.0}
    lines = _numbers(t, [batch] * 8, accumulate=2)  # 4 optimizer steps: lines at 2 and 4, then the end
    assert [parse_line(line)["step"] for line in lines] == [2, 4, 4], lines
    assert lines[-1].startswith("[hpc-launch] lightning end step=4 ")
    last = parse_line(lines[-1])
    assert last["loss"] == 0.5 and last["avg_tokens_per_sec"] == 1000.0 and "tokens_per_sec" not in last
    assert last["avg_samples_per_sec"] == pytest.approx(4 * 2 * 8 / 4 * last["steps_per_sec"], rel=1e-3)  # 16/step
    assert _numbers(_Trainer(zero=False), [batch] * 8) == []


def test_a_batch_without_a_tensor_gives_steps_per_second_only():
    from hpc_launch.joblayer.lightning import batch_size
    from hpc_launch.metrics_line import parse_line

    lines = _numbers(_Trainer(), [["text"]] * 4)
    assert {k for k in parse_line(lines[-1])} == {"step", "loss", "steps_per_sec"}
    assert (batch_size(["text"]), batch_size(([], 1)), batch_size({})) == (None, None, None)
