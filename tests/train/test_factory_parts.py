"""`--model pkg.module:factory` / `--data pkg.module:factory` without a launcher: what a factory may
return, how a sample becomes a loss, and one line for each thing a user can get wrong."""

import argparse
import itertools

import pytest

from hpc_launch.train import factory
from hpc_launch.train.errors import TrainError

pytestmark = pytest.mark.train

_names = itertools.count()

COMMON = """
import torch, torch.nn as nn
ds = torch.utils.data.TensorDataset(torch.randn(8, 3), torch.randint(2, (8,)))
"""


def _module(tmp_path, monkeypatch, body):
    """A module of the user's in tmp_path, under a fresh name (imports are cached)."""
    name = f"user_mod_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(COMMON + body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _prepare(model, data="synthetic"):
    return factory.prepare(argparse.Namespace(model=model, data=data, seed=0))


@pytest.mark.parametrize(
    "body, match",
    [
        ("def f(): return 3", r"--model MOD:f returned an int \(return an nn.Module, \(model, dataset\)"),
        ("def f(): return nn.Linear(3, 2), 5", r"returned a tuple of \(Linear, int\)"),
        ("def f(): return nn.Linear(3, 2), ds, 'x'", r"returned a tuple of \(Linear, TensorDataset, str\)"),
        ("def f(): raise KeyError('weights')", r"--model MOD:f: the factory raised KeyError: 'weights'"),
        ("g = 1", r"MOD has no callable 'f'"),
        ("def f(): return nn.Linear(3, 2)", r"returned no dataset"),
        ("raise ImportError('needs apex')", r"cannot import MOD: needs apex"),
    ],
)
def test_a_factory_that_cannot_be_used_is_one_line(tmp_path, monkeypatch, body, match):
    name = _module(tmp_path, monkeypatch, body)
    with pytest.raises(TrainError) as err:
        _prepare(f"{name}:f")
    line = err.value.one_line()
    assert "\n" not in line and __import__("re").search(match.replace("MOD", name), line), line


def test_a_module_that_is_not_there_names_where_it_is_looked_for():
    with pytest.raises(TrainError, match="cannot import no_such_pkg.mod: .*PYTHONPATH"):
        _prepare("no_such_pkg.mod:f")


def test_model_and_data_factories_and_the_loss_of_each_sample_shape(tmp_path, monkeypatch):
    import torch

    name = _module(
        tmp_path,
        monkeypatch,
        """
def model(): return nn.Linear(3, 2)
def data(): return ds, ds
def pair(): return nn.Linear(3, 2), ds, lambda out, target: (out.sum() * 0 + 7.0)
def dicts():
    class M(nn.Module):
        def __init__(self):
            super().__init__(); self.lin = nn.Linear(3, 1)
        def forward(self, x, y): return {"loss": ((self.lin(x).squeeze(-1) - y) ** 2).mean()}
    return M(), [{"x": torch.randn(3), "y": torch.tensor(1.0)}] * 4
""",
    )
    user = _prepare(f"{name}:model", f"{name}:data")
    assert user.train is not None and user.val is not None
    x, y = torch.randn(4, 3), torch.randint(2, (4,))
    expected = torch.nn.functional.cross_entropy(user.model(x), y)
    assert torch.allclose(user.loss(user.model, (x, y), "cpu", torch.float32), expected)  # default: cross-entropy
    pair = _prepare(f"{name}:pair")
    assert pair.loss(pair.model, (x, y), "cpu", torch.float32).item() == 7.0  # the user's loss_fn
    dicts = _prepare(f"{name}:dicts")
    batch = {"x": torch.randn(4, 3), "y": torch.ones(4)}
    assert dicts.loss(dicts.model, batch, "cpu", torch.float32).item() > 0  # the model's own loss
    with pytest.raises(TrainError, match="returned a dataset and --data"):
        _prepare(f"{name}:pair", f"{name}:data")
    with pytest.raises(TrainError, match="is a factory but --model resnet18 is not"):
        _prepare("resnet18", f"{name}:data")
    assert _prepare("resnet18", "cifar10:/data") is None  # not a factory: the built-in paths
