"""The user's own model and data without a loop: `--model pkg.module:factory`, `--data pkg.module:factory`.

A factory is called once, with no arguments, on every rank, after `torch.manual_seed(--seed)`:

- a model factory returns an `nn.Module`, or `(model, dataset)`, or `(model, dataset, loss_fn)`;
- a data factory returns a `Dataset` (map-style: `len` and indexing), or `(train, val)`.

A sample is `(input, target)` (the loss is `loss_fn(model(input), target)`, cross-entropy when no
loss is given) or a dict of tensors (the model is called with them as keyword arguments and its
output's `loss` is the loss, as a Hugging Face model gives it; `loss_fn(output, batch)` where
one is given). Floating-point inputs are cast to the run's precision. The module is imported
from the working directory or PYTHONPATH. Everything the user can get wrong ends in one line.
"""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .errors import TrainError

_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
SHAPES = "an nn.Module, (model, dataset) or (model, dataset, loss_fn)"
DATA_SHAPES = "a Dataset (len and indexing) or (train, val)"


def is_factory(spec: str) -> bool:
    return bool(_SPEC.match(spec)) and not spec.startswith("cifar10:")


def load(spec: str, flag: str) -> Callable:
    """The callable `spec` names (`pkg.module:name`), imported from the working directory or PYTHONPATH."""
    module_name, attr = spec.split(":")
    if "" not in sys.path:
        sys.path.insert(0, "")  # the working directory, as `python -m` puts it for its own module
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise TrainError(
            f"{flag} {spec}: cannot import {module_name}: {err}",
            hint=f"run from the directory that holds {module_name.split('.')[0]}, or add it to PYTHONPATH",
        ) from None
    except Exception as err:  # the user's module failed while importing: say where, in one line
        raise TrainError(f"{flag} {spec}: importing {module_name} raised {type(err).__name__}: {err}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise TrainError(
            f"{flag} {spec}: {module_name} has no callable {attr!r}",
            hint=f"define def {attr}(): returning " + (SHAPES if flag == "--model" else DATA_SHAPES),
        )
    return factory


def _call(factory: Callable, spec: str, flag: str):
    try:
        return factory()
    except Exception as err:
        raise TrainError(f"{flag} {spec}: the factory raised {type(err).__name__}: {err}") from None


def _is_dataset(value) -> bool:
    return hasattr(value, "__len__") and hasattr(value, "__getitem__") and not isinstance(value, (str, bytes))


def _what(value) -> str:
    if isinstance(value, tuple):
        return "a tuple of (" + ", ".join(type(v).__name__ for v in value) + ")"
    name = type(value).__name__
    return f"{'an' if name[0].lower() in 'aeiou' else 'a'} {name}"


@dataclass
class UserModel:
    """A model (and maybe data and a loss) from the user's factories: the entrypoint's model kind
    for them (the batch -> loss step)."""

    spec: str
    model: Any
    train: Any
    val: Any
    loss_fn: Optional[Callable]

    @property
    def data(self):
        from .data import Data

        return Data(self.train, self.val, 0, 0, "factory")

    def build(self):
        return self.model

    def loss(self, engine, batch, device, dtype):
        import torch
        import torch.nn.functional as F

        def move(t):
            if not isinstance(t, torch.Tensor):
                return t
            return t.to(device, dtype if t.is_floating_point() else None, non_blocking=True)

        if isinstance(batch, dict):
            out = engine(**{k: move(v) for k, v in batch.items()})
            if self.loss_fn is not None:
                return self.loss_fn(out, batch)
            loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
            if loss is None:
                raise TrainError(
                    f"--model {self.spec}: a dict sample needs a model output with a loss, or a loss_fn",
                    hint="return (model, dataset, loss_fn) from the factory",
                )
            return loss
        if isinstance(batch, (list, tuple)) and len(batch) == 2:
            inputs, target = batch
            out = engine(move(inputs))
            target = target.to(device, non_blocking=True) if isinstance(target, torch.Tensor) else target
            if self.loss_fn is not None:
                return self.loss_fn(out, target)
            return F.cross_entropy(out.float(), target)
        raise TrainError(
            f"samples of {self.spec} are {_what(tuple(batch)) if isinstance(batch, list) else _what(batch)}",
            hint="a sample is (input, target) or a dict of tensors",
        )


def model_from(spec: str):
    """(model, dataset or None, loss_fn or None) from a model factory, its return checked."""
    import torch.nn as nn

    made = _call(load(spec, "--model"), spec, "--model")
    parts = made if isinstance(made, tuple) else (made,)
    model, dataset, loss_fn = (list(parts) + [None, None])[:3]
    if (
        not 1 <= len(parts) <= 3
        or not isinstance(model, nn.Module)
        or (dataset is not None and not _is_dataset(dataset))
        or (loss_fn is not None and not callable(loss_fn))
    ):
        raise TrainError(f"--model {spec} returned {_what(made)}", hint=f"return {SHAPES}")
    return model, dataset, loss_fn


def data_from(spec: str):
    """(train, val or None) from a data factory, its return checked."""
    made = _call(load(spec, "--data"), spec, "--data")
    parts = made if isinstance(made, tuple) else (made,)
    if not 1 <= len(parts) <= 2 or not all(_is_dataset(p) for p in parts):
        raise TrainError(f"--data {spec} returned {_what(made)}", hint=f"return {DATA_SHAPES}")
    return parts[0], (parts[1] if len(parts) == 2 else None)


def prepare(args) -> Optional[UserModel]:
    """The user's model and data when either flag names a factory; None otherwise."""
    if not is_factory(args.model) and not is_factory(args.data):
        return None
    import torch

    torch.manual_seed(args.seed)  # every rank builds the same initial weights
    if not is_factory(args.model):
        raise TrainError(
            f"--data {args.data} is a factory but --model {args.model} is not",
            hint="give your model as --model pkg.module:factory too (built-in models train built-in data)",
        )
    model, train, loss_fn = model_from(args.model)
    val = None
    if is_factory(args.data):
        if train is not None:
            raise TrainError(
                f"--model {args.model} returned a dataset and --data {args.data} names another",
                hint="leave --data out, or return only the model",
            )
        train, val = data_from(args.data)
    elif train is None:
        raise TrainError(
            f"--model {args.model} returned no dataset",
            hint="return (model, dataset) from it, or pass --data pkg.module:factory",
        )
    return UserModel(args.model, model, train, val, loss_fn)
