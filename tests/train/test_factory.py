"""The user's own model and data from a module of theirs (written here, in the test's directory,
not in the project): trained under ZeRO-2 by the entrypoint, then resumed (`--resume auto`)."""

import pytest

from ds_launch import REPO, launch, run_python

pytestmark = pytest.mark.train

USER_MODULE = '''
import torch
import torch.nn as nn


class Blobs(torch.utils.data.Dataset):
    """4 classes of 8-d points around fixed centres: a model can learn them."""

    centres = torch.randn(4, 8, generator=torch.Generator().manual_seed(0)) * 3

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(4, (n,), generator=g)
        self.x = self.centres[self.y] + torch.randn(n, 8, generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def model():
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))


def data():
    return Blobs(1024, seed=1), Blobs(128, seed=2)
'''

ARGS = [
    "--model",
    "mytask:model",
    "--data",
    "mytask:data",
    "--zero",
    "2",
    "--micro-batch",
    "16",
    "--log-every",
    "1",
    "--lr",
    "3e-2",
]


def test_a_users_module_trains_under_zero2_and_resumes_where_it_stopped(tmp_path):
    (tmp_path / "mytask.py").write_text(USER_MODULE)
    ckpt = ["--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", "5"]
    first = launch([*ARGS, *ckpt, "--steps", "10"], cwd=tmp_path)  # imported from the working directory
    assert first.rc == 0, first.out[-3000:]
    assert [s["step"] for s in first.steps] == list(range(1, 11))
    assert "training mytask:model on mytask:data: world=2" in first.out and "zero=2" in first.out

    second = launch([*ARGS, *ckpt, "--steps", "20", "--resume", "auto"], cwd=tmp_path)
    assert second.rc == 0, second.out[-3000:]
    assert "at step 10" in second.out  # resumed from global_step10
    assert [s["step"] for s in second.steps] == list(range(11, 21))  # the step counter continues
    losses = first.losses + second.losses
    assert losses[-1] < 0.6 * losses[0], losses  # one training, continued: the loss keeps falling


def test_a_users_dataset_reaches_loader_workers_when_the_job_runs_the_entrypoint_by_path(tmp_path):
    # Job scripts run train_entry.py by path: the working directory is on sys.path only once the
    # factory is loaded; the workers, forked from the rank, read its mytask.Blobs as it built it
    # (one rank, no launcher: the loader is what is under test).
    (tmp_path / "mytask.py").write_text(USER_MODULE)
    entry = str(REPO / "hpc_launch" / "train_entry.py")
    args = [*ARGS, "--steps", "3", "--num-workers", "1", "--no-eval"]
    proc = run_python(["-u", entry, *args], cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "step=3 " in proc.stdout
