"""Models by name: any torchvision classification model, plus `smallcnn` for CPU tests."""

from __future__ import annotations

from .errors import TrainError

SMALL_MODELS = ("smallcnn",)
MEMORY_FORMATS = ("auto", "channels_last", "contiguous")


def _small_cnn(num_classes: int):
    import torch.nn as nn

    # ~25k params: trains in seconds on 2 CPU cores; BatchNorm kept so the bf16 path meets
    # the same buffer-dtype issue a ResNet does.
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(inplace=True),
        nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.Conv2d(64, 64, 3, padding=1, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, num_classes),
    )


def memory_format(model, choice: str, device_type: str, precision: str):
    """The layout the model's image batches train in: torch.channels_last (NHWC) or None (as loaded).

    `auto` chooses channels_last for a model with 2-D convolutions on the CPU, where oneDNN's
    convolutions run faster on it (smallcnn, one thread: 81 -> 71-75 ms per forward+backward with
    the batches alone in channels_last, docs/training.md), and on an accelerator in bf16/fp16,
    where PyTorch's memory-format tutorial documents the gain for Tensor Cores (not measured
    here); fp32 on an accelerator stays as loaded."""
    import torch

    if choice == "contiguous" or not any(isinstance(m, torch.nn.Conv2d) for m in model.modules()):
        return None
    if choice == "channels_last" or device_type == "cpu" or precision in ("bf16", "fp16"):
        return torch.channels_last
    return None


def torchvision_models() -> list:
    from .tv_compat import import_torchvision

    tv = import_torchvision()
    return sorted(tv.models.list_models(module=tv.models))  # classification models only


def check_model_name(name: str) -> None:
    if name in SMALL_MODELS or name in torchvision_models():
        return
    raise TrainError(
        f"unknown model {name!r}",
        hint="use smallcnn or a torchvision classification model such as resnet50; "
        "`python -m hpc_launch.train --list-models` lists them",
    )


def build_model(name: str, num_classes: int, device=None):
    """A freshly initialised model (no pretrained weights: nothing is downloaded).

    device="meta" builds only the shapes, for counting parameters without allocating them."""
    import torch

    check_model_name(name)
    with torch.device(device or "cpu"):
        if name == "smallcnn":
            return _small_cnn(num_classes)
        from .tv_compat import import_torchvision

        return import_torchvision().models.get_model(name, weights=None, num_classes=num_classes)
