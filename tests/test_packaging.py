"""The launcher stays light and ships its data: what a `pip install .` user gets."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_render_path_imports_no_torch_deepspeed_or_paramiko(tmp_path):
    code = (
        "import sys\n"
        "from hpc_launch.cli import main\n"
        "try:\n"
        "    main(['submit', '--cluster', 'abci', '--nodes', '9', '--group', 'g1', '--login', 'local', '--dry-run'])\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'deepspeed', 'paramiko', 'pydantic', 'numpy', 'tensorboard', 'wandb'))\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stderr, r.stderr.splitlines()[-1]
    assert r.stdout.startswith("#!/bin/bash")


def test_wheel_carries_profiles_and_templates_and_finds_them_outside_the_repo(tmp_path):
    wheel_dir = tmp_path / "wheel"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheel_dir),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(wheel_dir.glob("hpc_launch-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for needed in (
        "hpc_launch/clusters/abci.yaml",
        "hpc_launch/clusters/local.yaml",
        "hpc_launch/templates/script.sh.j2",
        "hpc_launch/templates/body/launch/mpirun.sh.j2",
        "hpc_launch/train/__main__.py",
        "hpc_launch/train_entry.py",
    ):
        assert needed in names, needed
    # `pip install hpc-launch` claims no common name (a user's own `train` package, say) in
    # site-packages: every importable top-level name is the project's own.
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert top_level == {"hpc_launch"}, top_level
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import hpc_launch, hpc_launch.paths as p\n"
        "assert hpc_launch.__file__.startswith(%r), hpc_launch.__file__\n"
        "print(p.clusters_dirs()[0]); print(p.templates_dirs()[-1])\n"
        "from hpc_launch.cli import main\n"
        "main(['submit', '--cluster', 'miyabi', '--nodes', '2', '--group', 'gc64', '--login', 'local', '--dry-run'])\n"
    ) % str(site)
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == str(site / "hpc_launch" / "clusters")
    assert lines[1] == str(site / "hpc_launch" / "templates")
    assert "#PBS -W group_list=gc64" in r.stdout
