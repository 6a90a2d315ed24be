"""The guarded torchvision import on a CPU-only machine, and real image-folder training with workers."""

import os

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
    """Sample i is (i, the pid that loaded it, that process's parent): module level, so the
    workers' forkserver can import it to unpickle the dataset."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        import torch

        return torch.tensor([i, os.getpid(), os.getppid()])


def test_loader_workers_start_once_from_a_forkserver_and_each_epoch_is_the_samplers():
    # A rank is multi-threaded (gloo, TCPStore, the watchdog); on CPython < 3.11.10 a worker it
    # forks can inherit the interpreter's thread-list lock held and hang (gh-112275; CI hung on it
    # at an epoch boundary). Workers forked by a forkserver, once per run, are not exposed.
    import torch
    from torch.utils.data import DistributedSampler

    from hpc_launch.train.data import TrainBatches

    batches = TrainBatches(WhoLoads(), micro_batch=2, rank=1, world_size=2, seed=3, num_workers=2)
    epochs = [torch.cat(list(batches.epoch(0))), torch.cat(list(batches.epoch(1, skip_micro_batches=1)))]
    workers = {int(pid) for e in epochs for pid in e[:, 1]}
    parents = {int(ppid) for e in epochs for ppid in e[:, 2]}
    assert len(workers) == 2 and os.getpid() not in workers  # two workers, serving both epochs
    assert parents.isdisjoint({os.getpid()})  # forked by the forkserver, not by this process
    for epoch, skip, got in [(0, 0, epochs[0]), (1, 2, epochs[1])]:
        order = DistributedSampler(range(16), num_replicas=2, rank=1, shuffle=True, seed=3, drop_last=True)
        order.set_epoch(epoch)
        assert got[:, 0].tolist() == list(order)[skip:]


def test_a_dataset_the_workers_cannot_receive_is_one_line_naming_the_fix():
    from hpc_launch.train.data import TrainBatches
    from hpc_launch.train.errors import TrainError

    class Local(WhoLoads):  # defined in a function: pickle cannot name it
        pass

    batches = TrainBatches(Local(), micro_batch=2, rank=0, world_size=1, seed=0, num_workers=1)
    with pytest.raises(TrainError) as err:
        batches.epoch(0)
    assert "worker processes" in err.value.one_line() and "--num-workers 0" in err.value.one_line()
