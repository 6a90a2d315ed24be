"""The guarded torchvision import on a CPU-only machine, and real image-folder training with workers."""

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
