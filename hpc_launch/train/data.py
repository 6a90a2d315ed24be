"""Datasets and loaders: synthetic (learnable), sklearn digits (real, tiny), CIFAR-10's python files
(hpc_launch/train/cifar.py), or an ImageFolder tree.

Nothing is downloaded at run time. The train loader's position is a pure function of
(seed, epoch, micro-step), so a resumed run continues with exactly the next batch.
"""

from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from .errors import TrainError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
DIGITS_SAMPLES = 1797  # scikit-learn's digits: 1,797 8x8 scans
DIGITS_VAL_FRACTION = 0.2


@dataclass
class Data:
    train: Any  # a torch Dataset (map-style: len and indexing)
    val: Optional[Any]
    num_classes: int
    image_size: int
    kind: str  # synthetic | digits | imagefolder


class SyntheticImages:
    """Class prototype + noise: each class has a fixed random pattern, so a model can learn it.

    Samples are generated from (seed, index) on the fly, so every rank and every run agrees."""

    def __init__(self, length: int, num_classes: int, image_size: int, seed: int, signal: float = 0.5):
        import torch

        self.length, self.num_classes, self.size, self.seed = length, num_classes, image_size, seed
        g = torch.Generator().manual_seed(1234)  # prototypes shared by train and val
        self.prototypes = torch.randn(num_classes, 3, image_size, image_size, generator=g) * signal

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        import torch

        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        label = int(torch.randint(self.num_classes, (1,), generator=g))
        image = self.prototypes[label] + torch.randn(3, self.size, self.size, generator=g)
        return image, label


class TensorImages:
    """Images already in memory (digits), expanded to 3 channels for torchvision models."""

    def __init__(self, images, labels, image_size: int):
        import torch.nn.functional as F

        x = images.unsqueeze(1)
        if image_size != x.shape[-1]:
            x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
        self.images = x.expand(-1, 3, -1, -1).contiguous()
        self.labels = labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return self.images[index], int(self.labels[index])


def digits_file() -> Optional[str]:
    """The digits scans as scikit-learn ships them (`datasets/data/digits.csv.gz`), found without
    importing scikit-learn: its `datasets` package pulls in scipy, about 0.8 s of CPU on every
    rank of every job for a 500 KB file."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = os.path.join(root, "datasets", "data", "digits.csv.gz")
        if os.path.isfile(path):
            return path
    return None


def stratified_split(labels: Any, val_fraction: float, seed: int) -> Tuple[Any, Any]:
    """Train and validation indices with each class in both in proportion to its size: the
    validation set is ceil(n * fraction) samples, shared among the classes by largest remainder,
    each class's share drawn from a seeded permutation (the same split on every rank and run)."""
    import numpy as np

    labels = np.asarray(labels)
    classes, counts = np.unique(labels, return_counts=True)
    n_val = math.ceil(len(labels) * val_fraction)
    exact = counts * n_val / len(labels)
    share = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - share), kind="stable")[: n_val - int(share.sum())]:
        share[i] += 1
    rng = np.random.default_rng(seed)
    train, val = [], []
    for cls, k in zip(classes, share):
        members = rng.permutation(np.flatnonzero(labels == cls))
        val.append(members[:k])
        train.append(members[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(val))


def _digits(image_size: Optional[int]) -> Data:
    import gzip

    import numpy as np
    import torch

    path = digits_file()
    if path is None:
        raise TrainError(
            "--data digits needs scikit-learn, which ships the digits images",
            hint="pip install scikit-learn, or use --data synthetic",
        )
    with gzip.open(path, "rt") as f:  # 1,797 real 8x8 scans: 64 pixels (0-16) and the label per row
        table = np.loadtxt(f, delimiter=",")
    x, y = table[:, :-1], table[:, -1].astype(np.int64)
    tr, va = stratified_split(y, DIGITS_VAL_FRACTION, seed=0)
    x_tr, x_va, y_tr, y_va = x[tr], x[va], y[tr], y[va]
    mean, std = x_tr.mean(), x_tr.std()
    size = image_size or 8

    def tensors(a, b):
        imgs = torch.tensor((a - mean) / std, dtype=torch.float32).reshape(-1, 8, 8)
        return TensorImages(imgs, torch.tensor(b), size)

    return Data(tensors(x_tr, y_tr), tensors(x_va, y_va), 10, size, "digits")


def _image_folder(root: str, image_size: Optional[int]) -> Data:
    from .tv_compat import import_torchvision

    tv = import_torchvision()
    T = tv.transforms
    size = image_size or 224
    train_dir = os.path.join(root, "train")
    val_dir: Optional[str] = os.path.join(root, "val")
    if not os.path.isdir(train_dir):
        train_dir, val_dir = root, None  # a plain class-per-folder tree: train on it, no val split
    normalize = T.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    # The standard ImageNet recipe; ImageFolder decodes with PIL (torchvision.io needs the
    # compiled extension, which the CPU fallback lacks).
    train_tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), normalize])
    val_tf = T.Compose([T.Resize(int(size * 256 / 224)), T.CenterCrop(size), T.ToTensor(), normalize])
    try:
        train = tv.datasets.ImageFolder(train_dir, transform=train_tf)
        val = tv.datasets.ImageFolder(val_dir, transform=val_tf) if val_dir and os.path.isdir(val_dir) else None
    except (FileNotFoundError, OSError) as err:
        raise TrainError(
            f"cannot read image folder {root}: {err}",
            hint="expected ROOT/train/<class>/*.JPEG (and ROOT/val/<class>/...)",
        ) from None
    return Data(train, val, len(train.classes), size, "imagefolder")


def build_data(
    spec: str, image_size: Optional[int] = None, num_classes: int = 10, synthetic_samples: int = 4096, seed: int = 0
) -> Data:
    if spec == "synthetic":
        size = image_size or 32
        return Data(
            SyntheticImages(synthetic_samples, num_classes, size, seed=seed + 1),
            SyntheticImages(max(256, synthetic_samples // 8), num_classes, size, seed=seed + 2),
            num_classes,
            size,
            "synthetic",
        )
    if spec == "digits":
        return _digits(image_size)
    if spec.startswith("cifar10:"):
        from . import cifar

        return cifar.load(spec, image_size)
    if not os.path.isdir(spec):
        raise TrainError(
            f"data folder not found: {spec}",
            hint="pass --data synthetic, digits, cifar10:DIR or an ImageFolder root (ROOT/train, ROOT/val)",
        )
    return _image_folder(spec, image_size)


def train_samples(spec: str, synthetic_samples: int) -> Optional[int]:
    """How many samples `build_data(spec)` trains on, known without loading them (a sweep checks
    its batches against it); None: only reading the data tells (an image folder)."""
    if spec == "synthetic":
        return synthetic_samples
    if spec == "digits":  # stratified_split holds out ceil(n * fraction)
        return DIGITS_SAMPLES - math.ceil(DIGITS_SAMPLES * DIGITS_VAL_FRACTION)
    return None


class _ResumableSampler:
    """DistributedSampler order for one epoch, starting `skip` samples in (resume mid-epoch).
    `TrainBatches.epoch` moves it; the loader reads it at each `iter()`."""

    def __init__(self, base, skip: int):
        self.base, self.skip = base, skip

    def __iter__(self):
        it = iter(self.base)
        for _ in range(self.skip):
            next(it)
        return it

    def __len__(self):
        return len(self.base) - self.skip


def micro_batches_per_epoch(dataset_len: int, micro_batch: int, world_size: int) -> int:
    n = (dataset_len // world_size) // micro_batch  # drop_last everywhere: every rank sees equal full batches
    if n == 0:
        raise TrainError(
            f"dataset of {dataset_len} samples is smaller than one global micro-batch "
            f"({micro_batch} per rank x {world_size} ranks)",
            hint="lower --micro-batch",
        )
    return n


class TrainBatches:
    """This rank's training micro-batches for the whole run: one DataLoader, positioned per epoch.

    Its workers are forked once, here, and serve every epoch (persistent); the trainer builds this
    before the process group starts, while the rank has no other thread. fork() copies whatever
    lock another thread holds at that instant, and a rank that trains has many (gloo's loops,
    TCPStore's, the watchdog): on CPython before 3.11.10 a worker forked then can inherit the
    interpreter's thread-list lock held and hang in `PyOS_AfterFork_Child` forever (CPython
    gh-112275; CI hung on it: a worker forked at an epoch boundary, and its rank waited for its
    batch). Forked early, the workers also share the dataset as the rank built it (nothing is
    pickled to them, as in a user's own loop) and copy no model or device state."""

    def __init__(self, dataset, micro_batch: int, rank: int, world_size: int, seed: int, num_workers: int):
        import torch
        from torch.utils.data import DataLoader, DistributedSampler

        base: DistributedSampler = DistributedSampler(
            dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
        )
        self.micro_batch = micro_batch
        self.sampler = _ResumableSampler(base, len(base))  # no samples until epoch() positions it
        self.loader: Any = DataLoader(
            dataset,
            batch_size=micro_batch,
            sampler=self.sampler,
            drop_last=True,
            num_workers=num_workers,
            pin_memory=torch.cuda.is_available(),
            persistent_workers=num_workers > 0,
            prefetch_factor=4 if num_workers else None,
        )
        if num_workers:
            iter(self.loader)  # forks the workers now; the DataLoader keeps them (and this first, empty epoch)

    def epoch(self, epoch: int, skip_micro_batches: int = 0):
        """An iterator over `epoch`'s micro-batches, `skip_micro_batches` in."""
        self.sampler.base.set_epoch(epoch)
        self.sampler.skip = skip_micro_batches * self.micro_batch
        return iter(self.loader)

    def close(self) -> None:
        """End the workers now (the DataLoader joins them as it goes), not when the rank exits."""
        self.loader = None


def eval_shards(length: int, rank: int, world_size: int):
    """Indices of this rank's share of an evaluation set, padded with -1 so every rank runs the
    same number of batches (ZeRO-3 forward passes are collective)."""
    per_rank = math.ceil(length / world_size)
    mine = list(range(rank, length, world_size))
    return mine + [-1] * (per_rank - len(mine))


class EvalSubset:
    """(image, label, valid) for the given indices; -1 marks padding that must not be counted."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        index = self.indices[i]
        image, label = self.dataset[max(index, 0)]
        return image, label, index >= 0
