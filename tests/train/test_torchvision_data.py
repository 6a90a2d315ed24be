"""The guarded torchvision import on a CPU-only machine, and real image-folder training with workers."""

import os
from pathlib import Path

import pytest


from ds_launch import launch, run_python

pytestmark = pytest.mark.train


def test_guarded_import_gives_models_transforms_and_datasets(tmp_path):
    code = (
        "from hpc_launch.train.tv_compat import import_torchvision\n"
        "import torch\n"
        "tv = import_torchvision()\n"
        "m = tv.models.resnet18(num_classes=7).eval()\n"
        "assert m(torch.randn(1, 3, 64, 64)).shape == (1, 7)\n"
        "img, label = tv.datasets.FakeData(size=2, image_size=(3, 40, 40), transform=tv.transforms.Compose(\n"
        "    [tv.transforms.RandomResizedCrop(32), tv.transforms.ToTensor()]))[0]\n"
        "assert img.shape == (3, 32, 32)\n"
        "assert 'resnet50' in tv.models.list_models(module=tv.models)\n"
    )
    proc = run_python(["-c", code], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]


def write_image_folder(root, classes=2, per_class=12, size=40):
    from PIL import Image

    for split in ("train", "val"):
        for c in range(classes):
            folder = root / split / f"class{c}"
            folder.mkdir(parents=True)
            for i in range(per_class if split == "train" else 4):
                color = (255, 40 * i % 255, 0) if c == 0 else (0, 40 * i % 255, 255)
                Image.new("RGB", (size + i, size), color).save(folder / f"{i}.JPEG")


def test_image_folder_trains_with_worker_processes(tmp_path):
    write_image_folder(tmp_path / "imagenet")
    run = launch(
        [
            "--model",
            "smallcnn",
            "--data",
            str(tmp_path / "imagenet"),
            "--image-size",
            "32",
            "--micro-batch",
            "4",
            "--steps",
            "6",
            "--log-every",
            "1",
            "--zero",
            "1",
            "--num-workers",
            "2",
            "--lr",
            "1e-2",
        ],
        cwd=tmp_path,
    )
    assert run.rc == 0, run.out[-3000:]
    assert [s["step"] for s in run.steps] == list(range(1, 7))
    # Red vs blue JPEGs decoded by PIL through the standard augmentations: trivially separable.
    assert run.evals[-1]["samples"] == "8"
    assert float(run.evals[-1]["top1"]) == 1.0


class WhoLoads:
    """Sample i is (i, the pid that loaded it, that process's parent)."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        import torch

        return torch.tensor([i, os.getpid(), os.getppid()])


def _children() -> set:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] not in "ZX":
            found.add(int(stat.parent.name))
    return found


def test_loader_workers_are_forked_once_when_built_and_each_epoch_is_the_samplers():
    # A rank is multi-threaded once its process group starts (gloo, TCPStore, the watchdog); on
    # CPython < 3.11.10 a worker forked then can inherit the interpreter's thread-list lock held
    # and hang (gh-112275; CI hung on it at an epoch boundary). The trainer builds the loader
    # before that, and its workers are forked right then, once for the run.
    import threading

    import torch
    from torch.utils.data import DistributedSampler

    from hpc_launch.train.data import TrainBatches

    before = _children()
    batches = TrainBatches(WhoLoads(), micro_batch=2, rank=1, world_size=2, seed=3, num_workers=2)
    forked = _children() - before
    assert len(forked) == 2  # forked by the constructor, before anything asks for a batch
    busy = threading.Thread(target=lambda: None)  # threads started afterwards are not in the workers
    busy.start()
    busy.join()
    epochs = [torch.cat(list(batches.epoch(0))), torch.cat(list(batches.epoch(1, skip_micro_batches=1)))]
    assert {int(pid) for e in epochs for pid in e[:, 1]} == forked  # the same two serve both epochs
    for epoch, skip, got in [(0, 0, epochs[0]), (1, 2, epochs[1])]:
        order = DistributedSampler(range(16), num_replicas=2, rank=1, shuffle=True, seed=3, drop_last=True)
        order.set_epoch(epoch)
        assert got[:, 0].tolist() == list(order)[skip:]
    batches.close()
    assert not (_children() - before)  # closed: the workers are gone, not left to the rank's exit


def test_a_dataset_class_defined_in_a_function_reaches_the_workers():
    # forked, not pickled: whatever the rank built is what the workers read, as in a user's own loop
    import torch

    from hpc_launch.train.data import TrainBatches

    class Local(WhoLoads):
        pass

    batches = TrainBatches(Local(), micro_batch=4, rank=0, world_size=1, seed=0, num_workers=1)
    assert sorted(torch.cat(list(batches.epoch(0)))[:, 0].tolist()) == list(range(16))
    batches.close()
