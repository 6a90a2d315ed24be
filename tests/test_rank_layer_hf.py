"""The HF Trainer adapter's edge cases (hpc_launch/joblayer/hf_trainer.py), fast: transformers' own
TrainerCallback, TrainerControl and get_last_checkpoint, on a Trainer stand-in with the real one's
`train(resume_from_checkpoint=...)` and `add_callback`. The real Trainer through the layer:
tests/test_hf_trainer_adapter.py and tests/e2e/test_hf_trainer_chain_e2e.py."""

from __future__ import annotations

import types

import pytest

from hpc_launch.joblayer import api, hf_trainer


class StandIn:
    """What the wrapper touches of transformers.Trainer: args.output_dir, add_callback, train()."""

    def __init__(self, output_dir):
        self.args = types.SimpleNamespace(output_dir=str(output_dir))
        self.callbacks = []
        self.resumed_from = "unset"

    def add_callback(self, cb):
        self.callbacks.append(cb)

    def train(self, resume_from_checkpoint=None, **kwargs):
        self.resumed_from = resume_from_checkpoint
        return "trained"


@pytest.fixture
def trainer_module(monkeypatch):
    cls = type("Trainer", (StandIn,), {})  # a fresh class per test: install wraps it in place
    module = types.SimpleNamespace(Trainer=cls)
    hf_trainer.install(module)
    return module


def _checkpoints(out, *steps):
    for step in steps:
        (out / f"checkpoint-{step}").mkdir(parents=True)


def test_a_chain_link_resumes_from_the_newest_checkpoint_in_output_dir(trainer_module, tmp_path, monkeypatch):
    monkeypatch.setenv("HPC_LAUNCH_CHECKPOINT_DIR", str(tmp_path / "chain"))
    _checkpoints(tmp_path / "out", 10, 40, 20)
    t = trainer_module.Trainer(tmp_path / "out")
    assert t.train() == "trained"
    assert t.resumed_from == str(tmp_path / "out" / "checkpoint-40")


def test_a_first_start_a_job_not_resumed_and_the_scripts_own_choice_are_left_alone(
    trainer_module, tmp_path, monkeypatch
):
    monkeypatch.setenv("HPC_LAUNCH_CHECKPOINT_DIR", str(tmp_path / "chain"))
    t = trainer_module.Trainer(tmp_path / "empty")
    t.train()
    assert t.resumed_from is None  # nothing saved yet
    _checkpoints(tmp_path / "out", 10)
    t = trainer_module.Trainer(tmp_path / "out")
    t.train(resume_from_checkpoint=False)
    assert t.resumed_from is False  # the script said so
    monkeypatch.delenv("HPC_LAUNCH_CHECKPOINT_DIR")
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    monkeypatch.delenv("PBS_RUN_COUNT", raising=False)
    t = trainer_module.Trainer(tmp_path / "out")
    t.train()
    assert t.resumed_from is None  # not a chain link, not requeued
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # Slurm's requeue
    t.train()
    assert t.resumed_from == str(tmp_path / "out" / "checkpoint-10")


def test_on_the_jobs_stop_request_the_callback_has_the_trainer_save_and_stop(trainer_module, tmp_path, monkeypatch):
    # here, not at the top: importing transformers took 2.5-3.3 CPU-s of every pytest process's
    # collection (five in CI, one per xdist worker in the fast tier)
    from transformers.trainer_callback import TrainerCallback, TrainerControl, TrainerState

    stop_file = tmp_path / "stop.1"
    monkeypatch.setenv("HPC_LAUNCH_STOP_FILE", str(stop_file))
    monkeypatch.delenv("HPC_LAUNCH_DEADLINE", raising=False)
    monkeypatch.setattr(api, "_REQUEST", None)
    t = trainer_module.Trainer(tmp_path / "out")
    t.train()
    t.train()  # a second train() adds no second callback
    (cb,) = t.callbacks
    assert isinstance(cb, TrainerCallback)
    state, control = TrainerState(global_step=7), TrainerControl()
    cb.on_step_end(t.args, state, control)
    assert not control.should_save and not control.should_training_stop
    stop_file.touch()
    cb.on_step_end(t.args, state, control)
    assert control.should_save and control.should_training_stop


def test_the_layer_installs_the_adapter_when_the_script_imports_the_trainer(tmp_path, monkeypatch):
    from hpc_launch.joblayer import __main__ as layer
    from hpc_launch.joblayer.after_import import _FINDER
    from hpc_launch.joblayer.ranks import discover

    monkeypatch.setenv("HPC_LAUNCH_STOP", str(tmp_path / "stop.1"))
    monkeypatch.setattr(api, "_REQUEST", None)
    for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "HPC_LAUNCH_DEADLINE"):
        monkeypatch.delenv(k, raising=False)
    import signal

    import os

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    env = dict(os.environ)  # set_up writes the rank's variables into the environment
    try:
        layer.set_up(discover())
        assert layer._hf_trainer in _FINDER.pending.get("transformers.trainer", [])
    finally:
        _FINDER.pending.pop("transformers.trainer", None)
        for s, h in saved.items():
            signal.signal(s, h)
        os.environ.clear()
        os.environ.update(env)
