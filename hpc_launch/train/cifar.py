"""CIFAR-10 from the user's own copy of its python files: `--data cifar10:DIR`.

DIR is `cifar-10-batches-py` (as the archive from the dataset's page unpacks) or the folder that
holds it. Its files are the dataset's own format (https://www.cs.toronto.edu/~kriz/cifar.html,
"Python version"): `data_batch_1` .. `data_batch_5` (training) and `test_batch` (held out), each a
pickled dict with `data` (a 10000 x 3072 uint8 array: 1024 red, 1024 green, 1024 blue values of a
32x32 image, row-major) and `labels` (10000 ints 0-9). Nothing is downloaded. Images stay uint8 in
memory (150 MB for the training set) and are normalised per sample with the training set's
per-channel mean and standard deviation; no augmentation (as DeepSpeed's CIFAR-10 tutorial).
"""

from __future__ import annotations

import os
import pickle
from typing import Optional

from .errors import TrainError

PREFIX = "cifar10:"
FOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"
# per-channel mean and standard deviation of the 50,000 training images, scaled to [0, 1]
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def is_cifar(spec: str) -> bool:
    return spec.startswith(PREFIX)


def folder_of(spec: str) -> str:
    root = spec[len(PREFIX) :]
    if not root:
        raise TrainError("--data cifar10: needs the folder", hint=f"--data cifar10:PATH/{FOLDER}")
    nested = os.path.join(root, FOLDER)
    return nested if os.path.isdir(nested) else root


def _read_batch(path: str):
    """(uint8 images [n, 3, 32, 32], int64 labels [n]) from one of the dataset's pickles."""
    import numpy as np

    try:
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")  # written by Python 2: byte-string keys
        data, labels = batch[b"data"], batch[b"labels"]
        images = np.asarray(data, dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = np.asarray(labels, dtype=np.int64)
    except (OSError, pickle.UnpicklingError, EOFError, KeyError, ValueError, TypeError) as err:
        raise TrainError(
            f"{path} is not a CIFAR-10 python batch ({type(err).__name__}: {err})",
            hint="unpack cifar-10-python.tar.gz as it comes",
        ) from None
    if len(images) != len(labels):
        raise TrainError(f"{path} holds {len(images)} images but {len(labels)} labels")
    return images, labels


class CifarImages:
    """uint8 images in memory, normalised (and resized where --image-size asks) per sample."""

    def __init__(self, images, labels, image_size: int):
        import torch

        self.images = torch.from_numpy(images)
        self.labels = labels.tolist()
        self.size = image_size
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        import torch.nn.functional as F

        x = (self.images[index].float() / 255 - self.mean) / self.std
        if self.size != 32:
            x = F.interpolate(x[None], size=(self.size, self.size), mode="bilinear", align_corners=False)[0]
        return x, self.labels[index]


def load(spec: str, image_size: Optional[int]):
    import numpy as np

    from .data import Data

    folder = folder_of(spec)
    missing = [f for f in (*TRAIN_FILES, TEST_FILE) if not os.path.isfile(os.path.join(folder, f))]
    if missing:
        raise TrainError(
            f"{folder} is not a CIFAR-10 python folder: {', '.join(missing)} missing",
            hint=f"point --data cifar10: at the unpacked {FOLDER} (data_batch_1..5, test_batch)",
        )
    parts = [_read_batch(os.path.join(folder, f)) for f in TRAIN_FILES]
    train_x, train_y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    test_x, test_y = _read_batch(os.path.join(folder, TEST_FILE))
    if train_y.size and not (0 <= train_y.min() and train_y.max() < 10):
        raise TrainError(f"{folder}: labels outside 0-9 (CIFAR-10 has 10 classes)")
    size = image_size or 32
    return Data(CifarImages(train_x, train_y, size), CifarImages(test_x, test_y, size), 10, size, "cifar10")
