"""CIFAR-10 from its python files (`--data cifar10:DIR`): a tiny tree of pickles written here in
the dataset's exact format (byte-string keys, 3072 uint8 per image: the red plane, then green,
then blue), read and trained on by 2 ranks through the real deepspeed launcher."""

import pickle

import numpy as np
import pytest

from ds_launch import SMALL, launch

from hpc_launch.train import cifar
from hpc_launch.train.errors import TrainError

pytestmark = pytest.mark.train

PER_BATCH = 48


def _batch(n, seed):
    """n images of 10 classes: class c brightens colour plane c % 3 in a band at row 3*c (learnable)."""
    rng = np.random.default_rng(seed)
    labels = [int(c) for c in rng.integers(0, 10, n)]
    images = rng.integers(0, 96, (n, 3, 32, 32), dtype=np.uint8)
    for i, c in enumerate(labels):
        images[i, c % 3, 3 * c : 3 * c + 3, :] = 255
    return {
        b"batch_label": f"batch {seed}".encode(),
        b"labels": labels,
        b"data": images.reshape(n, 3072),
        b"filenames": [f"img_{seed}_{i}.png".encode() for i in range(n)],
    }


def write_tree(root):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for i in range(1, 6):
        (folder / f"data_batch_{i}").write_bytes(pickle.dumps(_batch(PER_BATCH, i), protocol=2))
    (folder / "test_batch").write_bytes(pickle.dumps(_batch(PER_BATCH, 99), protocol=2))
    return folder


def test_the_python_batches_are_read_plane_by_plane_and_normalised(tmp_path):
    folder = write_tree(tmp_path)
    data = cifar.load(f"cifar10:{tmp_path}", None)  # the parent of cifar-10-batches-py works too
    assert (len(data.train), len(data.val), data.num_classes, data.image_size) == (5 * PER_BATCH, PER_BATCH, 10, 32)
    raw = _batch(PER_BATCH, 1)
    image, label = data.train[0]
    c = raw[b"labels"][0]
    assert label == c and image.shape == (3, 32, 32)
    assert float(image[c % 3, 3 * c, 0]) == pytest.approx((1.0 - cifar.MEAN[c % 3]) / cifar.STD[c % 3], rel=1e-5)
    (folder / "data_batch_3").unlink()
    with pytest.raises(TrainError, match="data_batch_3 missing"):
        cifar.load(f"cifar10:{folder}", None)
    (folder / "data_batch_3").write_bytes(b"not a pickle")
    with pytest.raises(TrainError, match="data_batch_3 is not a CIFAR-10 python batch"):
        cifar.load(f"cifar10:{folder}", None)


def test_two_ranks_train_on_cifar10_files_and_evaluate_on_test_batch(tmp_path):
    folder = write_tree(tmp_path)
    args = [SMALL[0], SMALL[1], "--data", f"cifar10:{folder}", "--epochs", "6", "--micro-batch", "8"]
    run = launch([*args, "--log-every", "5", "--lr", "1e-2"], cwd=tmp_path)
    assert run.rc == 0, run.out[-3000:]
    assert f"training smallcnn on cifar10:{folder}" in run.out and "steps/epoch=15" in run.out  # 240 / (8 x 2)
    assert run.losses[-1] < 0.6 * run.losses[0], run.losses
    assert run.evals[-1]["samples"] == str(PER_BATCH) and float(run.evals[-1]["top1"]) > 0.3, run.evals
