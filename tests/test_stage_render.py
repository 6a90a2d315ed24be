"""Node-local staging in the rendered script (templates/body/stage.sh.j2): every launcher's way of
running the broadcast once per node renders to valid, shellcheck-clean bash, in the right place;
with staging off nothing changes (tests/test_render_golden.py holds the scripts byte for byte)."""

from __future__ import annotations

import shutil
import subprocess

import msgspec
import pytest

from hpc_launch.site import launchers, profiles
from hpc_launch.errors import ProfileError
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve

# a shipped profile for each launcher (made to use it where none ships with it)
BY_LAUNCHER = {
    "deepspeed": JobSpec(cluster="local", nodes=1),
    "deepspeed-pdsh": JobSpec(cluster="pods", nodes=3, hosts=["10.0.0.11", "10.0.0.12", "10.0.0.13"]),
    "deepspeed-openmpi": JobSpec(cluster="abci2", nodes=2, group="g", walltime="10m"),
    "mpirun": JobSpec(cluster="abci", nodes=2, group="g"),
    "mpiexec": JobSpec(cluster="polaris", nodes=2, group="g", walltime="30m"),
    "mpirun-torchrun": JobSpec(cluster="miyabi", nodes=2, group="g", queue="short-g"),
    "srun": JobSpec(cluster="slurm", nodes=4),
    "srun-torchrun": JobSpec(cluster="slurm", nodes=2),
}


def _staged(spec: JobSpec, tmp_path, stage_yaml: str) -> str:
    launcher = next(k for k, v in BY_LAUNCHER.items() if v is spec)
    override = tmp_path / "stage.yaml"
    override.write_text(f"extends: {spec.cluster}\nname: staged\nlaunch: {{launcher: {launcher}}}\n{stage_yaml}\n")
    p = profiles.load("staged", profile_file=str(override))
    spec = msgspec.structs.replace(
        spec, cluster="staged", workdir="/work/project", venv=spec.venv or "/shared/venvs/ds"
    )
    return render(resolve(spec, p, cwd="/work/project"), stamp="20260101-000000-000").text


def test_every_launcher_has_a_case():
    assert sorted(BY_LAUNCHER) == sorted(launchers.names())


@pytest.mark.parametrize("launcher", sorted(BY_LAUNCHER))
def test_staging_renders_valid_shellcheck_clean_bash(launcher, tmp_path):
    text = _staged(BY_LAUNCHER[launcher], tmp_path, "stage: {env: true, data: /shared/data set, dest: $TMPDIR/ds}")
    path = tmp_path / "job.sh"
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True)
    assert shutil.which("shellcheck"), "shellcheck is required (apt-get install shellcheck)"
    out = subprocess.run(["shellcheck", "-S", "style", "-s", "bash", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
    # after the hostfile and rendezvous, before the ranks start; the values reach stage.py unexpanded
    stage_at = text.index("# --- node-local staging")
    assert text.index("# --- rendezvous ---") < stage_at < text.index("# --- launch")
    assert "HPC_LAUNCH_STAGE_DEST='$TMPDIR/ds'" in text and "--src '/shared/data set'" in text
    assert 'source "$HPC_LAUNCH_STAGED/env/bin/activate"' in text


def test_each_launcher_runs_one_task_per_node(tmp_path):
    words = {
        "srun": 'srun --nodes="$NNODES" --ntasks-per-node=1 --kill-on-bad-exit=1',
        "mpiexec": 'mpiexec --envall -n "$NNODES" --ppn 1',
        "mpirun": 'mpirun -np "$NNODES" --npernode 1',
        "deepspeed-pdsh": "pdsh -S -f 256 -w",
        "deepspeed": "--index 0",
    }
    for launcher, want in words.items():
        text = _staged(BY_LAUNCHER[launcher], tmp_path, "stage: {env: true, dest: /local/scratch}")
        assert want in text, launcher


def test_staging_without_a_venv_stops_the_job_before_any_rank_starts(tmp_path):
    override = tmp_path / "s.yaml"
    override.write_text("extends: slurm\nname: s2\nstage: {env: true, dest: /tmp/x}\n")
    job = resolve(JobSpec(cluster="s2", nodes=2, workdir="/w"), profiles.load("s2", profile_file=str(override)))
    script = tmp_path / "job.sh"
    text = render(job, stamp="s").text
    block = text[text.index("# --- node-local staging") :]
    assert block.splitlines()[2:4] == [
        'echo "[hpc-launch] error: stage.env copies a virtualenv, and this job has none '
        '(pass --venv, or set stage.env: false)" >&2',
        "exit 3",
    ]
    script.write_text(text)


@pytest.mark.parametrize(
    "stage, words",
    [
        ("{env: true}", "give stage.dest"),
        ("{env: true, dest: scratch}", "is not an absolute directory"),
        ("{data: rel/dir, dest: /tmp}", "stage.data: 'rel/dir' is not an absolute directory"),
        ("{env: true, dest: /tmp, timeout_s: 1}", "timeout_s"),
        ("{env: yes-please, dest: /tmp}", "stage.env"),
    ],
)
def test_bad_stage_settings_are_refused_naming_the_key(tmp_path, stage, words):
    override = tmp_path / "bad.yaml"
    override.write_text(f"extends: slurm\nname: bad\nstage: {stage}\n")
    with pytest.raises(ProfileError) as err:
        profiles.load("bad", profile_file=str(override))
    assert words in str(err.value)


def test_staging_off_by_default_everywhere():
    for name in profiles.available():
        assert not profiles.load(name).stage.on, name


def _resolve(tmp_path, stage_yaml: str, **options):
    override = tmp_path / "opt.yaml"
    override.write_text(f"extends: slurm\nname: opt\n{stage_yaml}\n")
    p = profiles.load("opt", profile_file=str(override))
    spec = JobSpec(cluster="opt", nodes=2, workdir="/w", venv="/shared/venv", **options)
    return render(resolve(spec, p, cwd="/w"), stamp="s").text


def test_stage_env_turns_staging_on_for_one_job(tmp_path):
    off = _resolve(tmp_path, "stage: {dest: /local/x}")
    assert "# --- node-local staging" not in off
    on = _resolve(tmp_path, "stage: {dest: /local/x}", stage_env=True)
    assert "# --- node-local staging" in on and 'source "$HPC_LAUNCH_STAGED/env/bin/activate"' in on
    data = _resolve(tmp_path, "stage: {dest: /local/x}", stage_data="/shared/set")
    assert "--src /shared/set" in data and 'source "$HPC_LAUNCH_STAGED/env/bin/activate"' not in data


def test_no_stage_turns_a_profiles_staging_off_for_one_job(tmp_path):
    profile = "stage: {env: true, data: /shared/set, dest: /local/x}"
    assert "# --- node-local staging" in _resolve(tmp_path, profile)
    assert "# --- node-local staging" not in _resolve(tmp_path, profile, stage_env=False)


@pytest.mark.parametrize(
    "stage_yaml,options,words",
    [
        ("", {"stage_env": True}, "--stage-env: stage: give stage.dest"),
        (
            "stage: {dest: /local/x}",
            {"stage_data": "rel/dir"},
            "--stage-data: stage.data: 'rel/dir' is not an absolute",
        ),
    ],
)
def test_a_staging_option_the_profile_cannot_serve_is_one_line(tmp_path, stage_yaml, options, words):
    from hpc_launch.errors import SpecError

    with pytest.raises(SpecError) as err:
        _resolve(tmp_path, stage_yaml, **options)
    assert str(err.value).startswith(words) and "\n" not in str(err.value)


def test_frontier_asks_for_its_node_local_nvme_only_when_it_stages():
    # OLCF: /mnt/bb/$USER exists only for a job that asked for it with -C nvme
    from hpc_launch.prepare import prepare

    def script(**kw) -> str:
        spec = JobSpec(cluster="frontier", group="p", venv="/v", workdir="/w", nodes=2, **kw)
        return render(prepare(spec).job, stamp="s").text

    assert "#SBATCH --constraint=nvme" in script(stage_env=True)
    assert "mnt/bb" in script(stage_env=True)
    assert "nvme" not in script()
    assert "nvme" not in script(stage_env=False)
