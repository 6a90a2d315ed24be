"""--container: the profile's wiring checked, and the lines each runtime renders (the shipped sites'
whole scripts are goldens in test_render_golden.py: container-*.sh)."""

from __future__ import annotations

import msgspec
import pytest

from hpc_launch.site import profiles
from hpc_launch.errors import SpecError
from hpc_launch.site.profiles import Container
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve


def _script(cluster: str, wiring: dict, **kw) -> str:
    raw = profiles.load(cluster).to_dict()
    raw["container"] = wiring
    p = msgspec.convert(raw, profiles.Profile)
    spec = JobSpec(cluster=cluster, workdir="/w", **kw)
    return render(resolve(spec, p, cwd="/w"), stamp="20260101-000000-000").text


def test_a_site_without_container_wiring_is_a_one_line_error_naming_what_to_add():
    with pytest.raises(SpecError) as err:
        resolve(JobSpec(cluster="thetagpu", group="g", container="/x.sif"), profiles.load("thetagpu"), cwd="/w")
    assert "thetagpu profile has no `container:` section" in str(err.value)
    assert "container: {runtime: apptainer" in err.value.hint and "\n" not in str(err.value)


def test_pyxis_is_srun_s_own_option_and_the_rank_command_is_untouched():
    text = _script(
        "slurm",
        {"runtime": "pyxis", "launch": "runtime", "binds": ["/scratch"]},
        nodes=2,
        queue=None,
        container="/images/pytorch.sqsh",
    )
    line = next(ln for ln in text.splitlines() if ln.startswith("srun --kill-on-bad-exit"))
    assert ' --container-image=/images/pytorch.sqsh --container-mounts=/scratch:/scratch,"$WORKDIR":"$WORKDIR"' in line
    assert ' --container-workdir="$WORKDIR"' in line
    assert "\n  python" in text or "\n  python3" in text


def test_shifter_takes_the_image_by_name_and_the_workdir_as_a_volume():
    text = _script(
        "slurm",
        {"runtime": "shifter", "gpu_flags": ["--module=gpu"]},
        nodes=2,
        queue=None,
        container="docker:nersc/pytorch:24.06",
    )
    assert '  shifter --image=docker:nersc/pytorch:24.06 --module=gpu --volume="$WORKDIR":"$WORKDIR"' in text
    assert "HPC_LAUNCH_IMAGE=" not in text  # a gateway name: no file to look for


def test_podman_passes_secrets_by_name_never_by_value(monkeypatch):
    monkeypatch.setenv("MY_TOKEN", "value-that-must-not-appear")
    text = _script(
        "slurm",
        {"runtime": "podman-hpc", "args": ["--mpi"]},
        nodes=2,
        queue=None,
        container="/img.tar",
        pass_env=["MY_TOKEN"],
    )
    assert "--env MY_TOKEN " in text and "value-that-must-not-appear" not in text


def test_user_values_in_image_paths_are_quoted():
    text = _script("slurm", {"runtime": "apptainer"}, nodes=1, queue=None, container="/img dir/$(reboot).sif")
    assert "'/img dir/$(reboot).sif'" in text and " $(reboot)" not in text


@pytest.mark.parametrize(
    "bad, word",
    [
        ({"runtime": "pyxis"}, "pyxis takes launch: runtime"),
        ({"runtime": "apptainer", "launch": "runtime"}, "apptainer takes launch: per-rank"),
        ({"runtime": "apptainer", "binds": ["relative/dir"]}, "not an absolute path"),
        ({"runtime": "apptainer", "env": {"X": "$(id)"}}, "no quote, backslash or $(...)"),
    ],
)
def test_bad_container_sections_are_refused_by_the_schema(bad, word):
    with pytest.raises(
        msgspec.ValidationError,
        match=word.replace("$", r"\$").replace("(", r"\(").replace(")", r"\)").replace(".", r"\."),
    ):
        msgspec.convert(bad, Container)


def test_every_active_site_says_how_it_runs_containers_and_where_that_comes_from():
    for name in profiles.available():
        p = profiles.load(name)
        if p.status == "retired":
            continue
        assert p.container is not None, name
        assert p.facts.get("container", "")[:1] in ("V", "U", "I"), name
        shown = profiles.resolved_yaml(name)  # what `hpc-launch clusters show NAME` prints
        assert f"container:\n  runtime: {p.container.runtime}\n" in shown, name


@pytest.mark.parametrize("cluster", ["local", "pods"])
def test_a_users_script_in_a_container_starts_through_the_layer_as_python_does(cluster, tmp_path):
    # DeepSpeed's launchers run a container's ranks `--no_python`: the command is python's own, where
    # the layer is `-m hpc_launch.joblayer` (DeepSpeed's `--module` reached python: CI, 2026-11-27)
    (tmp_path / "mine.py").write_text("print('hi')\n")
    wiring = {"runtime": "charliecloud", "binds": ["/usr"]}
    hosts = ["pod1", "pod2"] if cluster == "pods" else None
    spec = JobSpec(cluster=cluster, workdir=str(tmp_path), script="mine.py", container="/img", hosts=hosts)
    raw = profiles.load(cluster).to_dict()
    raw["container"] = wiring
    job = resolve(spec, msgspec.convert(raw, profiles.Profile), cwd=str(tmp_path))
    text = render(job, stamp="20260101-000000-000").text
    assert "HPC_LAUNCH_LAYER=(-m hpc_launch.joblayer)" in text
    assert "--no_python --no_local_rank " in text and "--module hpc_launch.joblayer" not in text
    # ch-run refuses to start without $USER, which CI's environment lacked (CI, 2026-11-27)
    assert 'export USER="${USER:-$(id -un)}"' in text
