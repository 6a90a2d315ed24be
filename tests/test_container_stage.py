"""A --container image staged to every node's local disk like the venv (docs/containers.md,
templates/body/stage.sh.j2): when it is staged, what the rank line runs, what the capsule records.
The run itself is tests/e2e/test_container_e2e.py (charliecloud on two Slurm pods)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest

from hpc_launch.site import profiles
from hpc_launch.container import check_image
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve
from hpc_launch.transport.local import LocalTransport

CH = {"runtime": "charliecloud", "binds": ["/usr"]}
SIF = {"runtime": "apptainer", "gpu_flags": ["--nv"]}


def _job(cluster: str, wiring: dict, stage: dict, **kw):
    raw = profiles.load(cluster).to_dict()
    raw["container"] = wiring
    raw["stage"] = stage
    p = msgspec.convert(raw, profiles.Profile)
    kw.setdefault("workdir", "/w")
    return resolve(JobSpec(cluster=cluster, **kw), p, cwd="/w")


@pytest.mark.parametrize(
    "wiring, stage, image, options, staged",
    [
        (CH, {"env": True, "dest": "/l"}, "/img", {}, True),  # staging on: the image goes too
        (CH, {"data": "/d", "dest": "/l"}, "/img", {}, True),
        (CH, {"image": True, "dest": "/l"}, "/img", {}, True),  # the image alone
        (CH, {"env": True, "image": False, "dest": "/l"}, "/img", {}, False),  # the shared image, by choice
        (CH, {"dest": "/l"}, "/img", {}, False),  # staging off
        (CH, {"dest": "/l"}, "/img", {"stage_env": True}, True),  # --stage-env: the job's environment
        (CH, {"image": True, "dest": "/l"}, "/img", {"stage_env": False}, False),  # --no-stage
        (SIF, {"env": True, "dest": "/l"}, "docker://nvcr.io/nvidia/pytorch:24.05-py3", {}, False),  # a name
        ({"runtime": "shifter"}, {"image": True, "dest": "/l"}, "/sh/img", {}, False),  # runs images by name
        ({"runtime": "pyxis", "launch": "runtime"}, {"image": True, "dest": "/l"}, "/x.sqsh", {}, True),
    ],
)
def test_when_the_image_is_staged(wiring, stage, image, options, staged):
    job = _job("slurm", wiring, stage, nodes=2, container=image, venv="/v", **options)
    assert job.profile.stage.image is staged
    assert job.profile.stage.on is (staged or job.profile.stage.env or job.profile.stage.data is not None)


def test_a_profile_that_stages_images_stages_nothing_for_a_job_without_one():
    job = _job("slurm", CH, {"image": True, "dest": "/l"}, nodes=2, venv="/v")
    assert not job.profile.stage.on
    assert "# --- node-local staging" not in render(job, stamp="s").text


# one shipped profile per launcher family that runs ranks through a per-rank runtime line
LAUNCHERS = {
    "slurm": dict(nodes=2),  # srun
    "pods": dict(nodes=2, hosts=["10.0.0.11", "10.0.0.12"]),  # DeepSpeed's pdsh runner, --no_python ranks
    "abci": dict(nodes=2, group="g"),  # Open MPI mpirun
    "polaris": dict(nodes=2, group="g", walltime="30m"),  # PALS mpiexec
}


@pytest.mark.parametrize("cluster", sorted(LAUNCHERS))
def test_the_ranks_run_the_node_local_copy_and_the_script_is_shellcheck_clean(cluster, tmp_path):
    job = _job(
        cluster,
        CH,
        {"env": True, "dest": "$TMPDIR/hl"},
        container="/shared/imgs/torch img",
        venv="/v",
        **LAUNCHERS[cluster],
    )
    text = render(job, stamp="s").text
    path = tmp_path / "job.sh"
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True)
    assert shutil.which("shellcheck"), "shellcheck is required (apt-get install shellcheck)"
    out = subprocess.run(["shellcheck", "-S", "style", "-s", "bash", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
    # staged whole, read once from the shared path, before the ranks; the failure line says the fix
    assert "--entry --src '/shared/imgs/torch img' --dest \"$HPC_LAUNCH_STAGE_DEST/image\"" in text
    assert '--fix "stage.dest must be a node-local directory' in text
    assert "HPC_LAUNCH_IMAGE=$HPC_LAUNCH_STAGED_IMAGE" in text
    assert text.index("--entry --src") < text.index("HPC_LAUNCH_IMAGE=") < text.index("# --- launch")
    # the rank line runs the copy: the shared path is only read by the staging
    assert 'ch-run -b /usr:/usr -b "$WORKDIR":"$WORKDIR" -c "$WORKDIR" "$HPC_LAUNCH_IMAGE" --' in text
    launch = text[text.index("# --- launch") :]
    assert "/shared/imgs" not in launch


def test_pyxis_takes_the_copy_as_its_container_image():
    job = _job(
        "slurm",
        {"runtime": "pyxis", "launch": "runtime"},
        {"image": True, "dest": "/l"},
        nodes=2,
        container="/p/x.sqsh",
        venv="/v",
    )
    text = render(job, stamp="s").text
    assert '--container-image="$HPC_LAUNCH_IMAGE"' in text and "--entry --src /p/x.sqsh" in text


def test_a_container_job_without_a_venv_stages_its_image_not_an_error():
    # --stage-env on a job whose environment is its image: the image is what is staged
    job = _job("slurm", CH, {"dest": "/l"}, nodes=2, container="/img", stage_env=True)
    text = render(job, stamp="s").text
    assert "stage.env copies a virtualenv, and this job has none" not in text
    assert "--entry --src /img" in text and 'source "$HPC_LAUNCH_STAGED/env/bin/activate"' not in text


def test_the_capsule_records_the_shared_image_its_digest_and_the_staged_path(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    sif = images / "torch-24.05.sif"
    sif.write_bytes(b"SIF-bytes")
    (tmp_path / "current.sif").symlink_to(sif)
    job = _job(
        "slurm",
        SIF,
        {"env": True, "dest": "/tmp/hl-$SLURM_JOB_ID"},
        nodes=2,
        container=str(tmp_path / "current.sif"),
        venv="/v",
    )
    record = check_image(LocalTransport(), job, str(tmp_path))
    assert record["image"] == str(tmp_path / "current.sif") and record["real"] == str(sif)
    assert record["sha256"] == _sha(sif)  # the original, by digest
    assert record["staged"] == "/tmp/hl-$SLURM_JOB_ID/image/torch-24.05.sif"  # as the job names it
    unstaged = _job("slurm", SIF, {"dest": "/l"}, nodes=2, container=str(sif), venv="/v")
    assert "staged" not in check_image(LocalTransport(), unstaged, str(tmp_path))


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()
