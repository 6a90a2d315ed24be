"""Golden-file tests: each shipped profile renders exactly the reviewed script, and every
rendered script is valid bash that shellcheck passes with no finding at any level."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hpc_launch.site import profiles
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve

GOLDEN = Path(__file__).parent / "golden" / "scripts"
UPDATE = os.environ.get("HPC_LAUNCH_UPDATE_GOLDEN") == "1"

# One realistic request per site (the first is the issue's own example).
CASES = {
    "abci": JobSpec(cluster="abci", nodes=9, group="gcb50389", venv="/groups/gcb50389/venv"),
    "abci2": JobSpec(
        cluster="abci2", nodes=9, group="gcb50389", name="tutorial", walltime="0:7:00", venv="/work/project/work"
    ),
    "miyabi": JobSpec(cluster="miyabi", nodes=2, group="gc64", queue="short-g", venv="/work/gc64/venv"),
    "polaris": JobSpec(cluster="polaris", nodes=2, group="datascience", walltime="30m"),
    "thetagpu": JobSpec(cluster="thetagpu", nodes=2, group="SDL_Workshop", walltime="0:10:00"),
    "slurm": JobSpec(cluster="slurm", nodes=4, queue=None, env={"WANDB_MODE": "offline"}),
    # a chain link keeps the next link off the hosts it found bad, as it ends
    "slurm-chain": JobSpec(cluster="slurm", nodes=2, queue=None, walltime="1h", chain=3),
    "pods": JobSpec(cluster="pods", nodes=3, hosts=["10.0.0.11", "10.0.0.12", "10.0.0.13"]),
    "local": JobSpec(cluster="local", nodes=1, venv="/opt/venv"),
    "tsubame4": JobSpec(
        cluster="tsubame4", nodes=2, group="tga-mygroup", walltime="2h", venv="/gs/fs/tga-mygroup/venv"
    ),
    "aurora": JobSpec(
        cluster="aurora", nodes=2, group="datascience", walltime="30m", venv="/flare/datascience/venvs/ds"
    ),
    "perlmutter": JobSpec(
        cluster="perlmutter",
        nodes=2,
        group="m1234_g",
        queue="regular",
        walltime="2h",
        venv="/global/common/software/m1234/venv",
    ),
    "frontier": JobSpec(cluster="frontier", nodes=2, group="abc123", venv="/lustre/orion/abc123/proj-shared/venvs/ds"),
    # PBS cannot exclude hosts: one spare node, the job trains on the two that pass its check
    "polaris-spares": JobSpec(cluster="polaris", nodes=2, spares=1, group="datascience", walltime="30m"),
    # --container IMAGE: each site's runtime per rank, as its profile's container: says (docs/containers.md)
    "container-abci": JobSpec(
        cluster="abci",
        nodes=2,
        group="gcb50389",
        container="/groups/gcb50389/pytorch.sif",
        venv="/groups/gcb50389/venv",
    ),
    "container-aurora": JobSpec(
        cluster="aurora", nodes=2, group="datascience", container="/flare/ds/ipex.sif", venv="/flare/ds/venv"
    ),
    "container-frontier": JobSpec(
        cluster="frontier",
        nodes=2,
        group="abc123",
        container="$PROJWORK/abc123/rocm.sif",
        venv="/lustre/orion/abc123/venv",
    ),
    "container-local": JobSpec(cluster="local", nodes=1, container="~/images/torch", venv="/opt/venv"),
    "container-miyabi": JobSpec(
        cluster="miyabi", nodes=2, group="gc64", queue="short-g", container="ngc.sif", venv="/work/gc64/venv"
    ),
    "container-perlmutter": JobSpec(
        cluster="perlmutter",
        nodes=2,
        group="m1234_g",
        queue="regular",
        container="nvcr.io/nvidia/pytorch:24.01-py3",
        venv="/global/common/software/m1234/venv",
    ),
    "container-pods": JobSpec(cluster="pods", nodes=2, hosts=["10.0.0.11", "10.0.0.12"], container="/srv/img/torch"),
    "container-polaris": JobSpec(cluster="polaris", nodes=2, group="datascience", container="/eagle/ds/pytorch.sif"),
    "container-slurm": JobSpec(cluster="slurm", nodes=2, queue=None, container="/srv/img/torch"),
    "container-tsubame4": JobSpec(
        cluster="tsubame4", nodes=2, group="tga-g", container="/gs/fs/tga-g/pytorch.sif", venv="/gs/fs/tga-g/venv"
    ),
}


def _render(name: str) -> str:
    spec = CASES[name]
    spec.workdir = spec.workdir or "/work/project"
    job = resolve(spec, profiles.load(spec.cluster), cwd="/work/project")
    return render(job, stamp="20260101-000000-000").text


def test_every_shipped_profile_has_a_golden_case():
    assert sorted({CASES[name].cluster for name in CASES}) == profiles.available()


@pytest.mark.parametrize("name", sorted(CASES))
def test_script_matches_golden(name):
    text = _render(name)
    golden = GOLDEN / f"{name}.sh"
    if UPDATE or not golden.exists():
        golden.write_text(text)
    assert text == golden.read_text(), (
        f"{name}: rendered script differs from {golden} (HPC_LAUNCH_UPDATE_GOLDEN=1 to accept)"
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_script_is_valid_bash_and_shellcheck_clean(name, tmp_path):
    path = tmp_path / f"{name}.sh"
    path.write_text(_render(name))
    subprocess.run(["bash", "-n", str(path)], check=True)
    assert shutil.which("shellcheck"), "shellcheck is required (apt-get install shellcheck)"
    out = subprocess.run(["shellcheck", "-S", "style", "-s", "bash", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_abci_script_is_what_an_abci3_user_would_submit():
    text = _render("abci")
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    directives = [l for l in lines if l.startswith("#PBS ")]
    assert "#PBS -q rt_HF" in directives
    assert "#PBS -l select=9:mpiprocs=8:ompthreads=12" in directives and "#PBS -l place=scatter" in directives
    assert "#PBS -P gcb50389" in directives
    assert "#PBS -k oed" in directives and "#PBS -j oe" in directives
    # directives form one block at the top: PBS stops reading them at the first command
    first_cmd = next(i for i, l in enumerate(lines) if l and not l.startswith("#"))
    assert all(lines.index(d) < first_cmd for d in directives)
    assert 'mpirun -np "$WORLD_SIZE" --npernode 8' in text
    assert "source /etc/profile.d/modules.sh" in text


def test_abci2_group_goes_on_the_command_line_not_in_the_script():
    spec = CASES["abci2"]
    spec.workdir = "/work/project"
    job = resolve(spec, profiles.load("abci2"), cwd="/work/project")
    script = render(job, stamp="s")
    assert "-g" not in [l.split()[1] for l in script.text.splitlines() if l.startswith("#$ ")]
    assert script.submit_argv[:3] == ["qsub", "-g", "gcb50389"]
    assert "#$ -l rt_F=9" in script.text and "#$ -l h_rt=00:07:00" in script.text


def test_cobalt_directives_start_right_after_the_shebang():
    lines = _render("thetagpu").splitlines()
    # Cobalt ignores #COBALT lines after a blank line
    assert lines[1].startswith("#COBALT -n 2")
    assert "#COBALT -t 10" in lines


def test_user_directive_replaces_default_instead_of_duplicating():
    spec = JobSpec(cluster="abci", nodes=2, group="g1", directives=["-l walltime=02:00:00", "-m abe"], workdir="/w")
    text = render(resolve(spec, profiles.load("abci")), stamp="s").text
    walltimes = [l for l in text.splitlines() if l.startswith("#PBS -l walltime")]
    assert walltimes == ["#PBS -l walltime=02:00:00"]
    assert "#PBS -m abe" in text


@pytest.mark.parametrize("cluster", ["abci", "abci2"])
def test_every_rank_on_every_node_knows_where_the_jobs_verdict_goes(cluster):
    # the watchdog or the gate on a remote rank writes the job's exit code there; mpirun -x and
    # .deepspeed_env carry only named variables (a pdsh job hung by a stopped rank lost it)
    job = resolve(JobSpec(cluster=cluster, nodes=2, group="g1", workdir="/w"), profiles.load(cluster), cwd="/w")
    text = render(job, stamp="20260101-000000-000").text
    assert "-x HPC_LAUNCH_VERDICT" in text or "printf '%s=%s\\n' HPC_LAUNCH_VERDICT" in text
