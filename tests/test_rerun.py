"""`hpc-launch rerun JOB --cluster OTHER` (hpc_launch/jobs/rerun.py): a real `local` job's capsule
rebuilt for another site. What the training is travels (the capsule's code copy, training
arguments, nodes, walltime, --pass-env names); what the site is comes from the other profile."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from envutil import scheduler_env_cleared
from inproc import run_cli


def _run(hpc_launch_bin, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = scheduler_env_cleared()
    full.update(env)
    return run_cli(args, env=full, cwd=cwd)  # in-process (tests/inproc.py); the jobs it submits run as their own


@pytest.fixture
def local_job(hpc_launch_bin, tmp_path):
    """A real `local` job of a tiny script (no torch) with a neighbour module, a user --env, a
    secret passed by name and a walltime of 100 h (ABCI's queue takes it, Polaris' do not). Its
    capsule is written at submit: the rerun needs no more, and the job is cancelled at the end."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "quick.py").write_text("import sys, helper\nprint('quick ran', helper.X, sys.argv[1:])\n")
    (code / "helper.py").write_text("X = 'submitted'\n")
    r = _run(
        hpc_launch_bin,
        tmp_path,
        "submit",
        "-c",
        "local",
        "-g",
        "1",
        "--script",
        "code/quick.py",
        "--train-args",
        "--steps 3 --note 'a b'",
        "--workdir",
        "work",
        "--name",
        "quick",
        "-t",
        "100:00:00",
        "-e",
        "MY_SETTING=on",
        "--pass-env",
        "MY_TOKEN",
        MY_TOKEN="secret-at-submit",
    )
    assert r.returncode == 0, r.stderr
    job = r.stdout.split()[0]
    (code / "helper.py").write_text("X = 'edited after submit'\n")  # the rerun takes the capsule's copy
    yield job
    _run(hpc_launch_bin, tmp_path, "cancel", job)


def test_rerun_on_abci_runs_the_capsules_code_with_the_same_args_and_abcis_own_site(
    hpc_launch_bin, tmp_path, local_job
):
    job = local_job
    [capsule] = (tmp_path / "work" / ".hpc-launch" / "capsules").iterdir()
    assert "secret-at-submit" not in (capsule / "capsule.json").read_text()

    r = _run(
        hpc_launch_bin,
        tmp_path,
        "rerun",
        job,
        "--cluster",
        "abci",
        "--group",
        "g",
        "--venv",
        "/x/venv",
        "--login",
        "local",
        "--nodes",
        "2",
        "--dry-run",
        MY_TOKEN="secret-at-rerun",
    )
    assert r.returncode == 0, r.stderr
    script, err = r.stdout, r.stderr
    # the capsule's copy of the code (and its neighbour) is what the new job takes along and runs
    assert f"# capsule: {capsule}/code/quick.py and 1 file(s) beside it -> " in err
    launch = [line for line in script.splitlines() if "code/quick.py" in line]
    assert launch and launch[-1].rstrip(" \\").endswith("code/quick.py --steps 3 --note 'a b'")
    # the training's own things carried, the site's things from ABCI's profile
    assert "#PBS -l select=2:" in script and "#PBS -l walltime=100:00:00" in script  # --nodes wins, walltime kept
    assert "#PBS -P g" in script and "export MY_SETTING=on" in script
    assert "module load cuda/12.6" in script and "OMP_NUM_THREADS=1" not in script  # local's env stays home
    assert "MY_TOKEN" in script and "secret-at" not in script  # the name travels, never a value
    table = {line.split()[1] for line in err.splitlines() if line.startswith("hpc-launch:   ")}
    assert {"scheduler", "launcher", "queue", "modules", "interface", "ranks"} <= table
    assert "pbspro" in err and "mpirun" in err and "bond0" in err
    carried = next(line for line in err.splitlines() if "carried over:" in line)
    assert "quick.py" in carried and "--steps 3 --note 'a b'" in carried and "walltime 100:00:00" in carried
    assert "MY_TOKEN" in carried and "1 GPU(s) per node" in carried and "node(s)" not in carried  # -n overrode
    assert not (tmp_path / ".hpc-launch").exists()  # a dry-run writes nothing


def test_a_walltime_the_other_site_does_not_take_is_refused_in_one_line_naming_the_fix(
    hpc_launch_bin, tmp_path, local_job
):
    job = local_job
    r = _run(hpc_launch_bin, tmp_path, "rerun", job, "-c", "polaris", "-P", "p", "--login", "local", "--dry-run")
    assert r.returncode == 2 and r.stdout == ""
    [line] = r.stderr.strip().splitlines()
    assert "--walltime 100:00:00 is above" in line and "use --walltime" in line
    # the secret's value comes from this shell at rerun: without it, refused before anything is written
    r = _run(
        hpc_launch_bin, tmp_path, "rerun", job, "-c", "abci", "-P", "g", "--venv", "/v", "--login", "local", "--dry-run"
    )
    assert r.returncode == 2 and "--pass-env MY_TOKEN" in r.stderr and "export MY_TOKEN" in r.stderr
    # a capsule whose copy of the code was edited since submit is not what the job ran
    [capsule] = (tmp_path / "work" / ".hpc-launch" / "capsules").iterdir()
    manifest = json.loads((capsule / "capsule.json").read_text())
    assert manifest["code"]["kind"] == "snapshot"
    (capsule / "code" / "helper.py").write_text("X = 'tampered'\n")
    r = _run(hpc_launch_bin, tmp_path, "rerun", job, "-c", "local", "--dry-run", MY_TOKEN="x")
    assert r.returncode == 2 and "helper.py" in r.stderr and "changed since submit" in r.stderr


def test_a_capsule_on_the_login_host_comes_here_whole_and_checked(transport, tmp_path):
    """A job submitted over SSH has its capsule on the login host: its code is read through the
    transport into the rerun's scratch folder (the neighbours too), each file checked."""
    import hashlib
    from types import SimpleNamespace

    from hpc_launch.capsule_read import Capsule
    from hpc_launch.jobs.rerun import _code
    from hpc_launch.errors import SpecError

    files = {"quick.py": b"import helper\n", "pkg/helper.py": b"X = 1\n"}
    for rel, data in files.items():
        (tmp_path / "cap" / "code" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "cap" / "code" / rel).write_bytes(data)
    listed = [{"path": rel, "sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)} for rel, d in files.items()]
    found = Capsule(str(tmp_path / "cap"), {"code": {"kind": "snapshot", "files": listed}}, [])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script, words = _code(found, SimpleNamespace(host="login-host", job_id="7"), transport, str(scratch))
    assert script == str(scratch / "quick.py") and "from login-host" in words
    assert (scratch / "pkg" / "helper.py").read_bytes() == b"X = 1\n"

    outside = Capsule(found.path, {"code": {"kind": "snapshot", "files": [{**listed[0], "path": "../../x.py"}]}}, [])
    with pytest.raises(SpecError, match="outside it"):
        _code(outside, SimpleNamespace(host="login-host", job_id="7"), transport, str(scratch))


def test_a_rerun_keeps_the_jobs_notification_by_its_variables_name(hpc_launch_bin, tmp_path):
    (tmp_path / "quick.py").write_text("print('quick ran')\n")
    hook = "http://127.0.0.1:9/hooks/T0k3n"  # nothing listens: the job's posts fail quietly
    r = _run(
        hpc_launch_bin, tmp_path, "submit", "-c", "local", "-g", "1", "--script", "quick.py", "--notify", "MY_HOOK",
        MY_HOOK=hook, HPC_LAUNCH_NOTIFY_PAUSES="0.2,0.3",  # its 3 tries per message without 7 s of pauses: the
    )  # fmt: skip  # cancel below waited for them
    assert r.returncode == 0, r.stderr
    job = r.stdout.split()[0]
    try:
        r = _run(
            hpc_launch_bin, tmp_path, "rerun", job, "-c", "abci", "-P", "g", "--venv", "/v", "--login", "local",
            "--dry-run", MY_HOOK=hook,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "--url-from MY_HOOK" in r.stdout and "hpc_launch_notify --event start" in r.stdout
        assert "T0k3n" not in r.stdout + r.stderr
        assert "notify via $MY_HOOK" in next(line for line in r.stderr.splitlines() if "carried over:" in line)
    finally:
        _run(hpc_launch_bin, tmp_path, "cancel", job)


def test_a_rerun_runs_in_the_jobs_container_image_unless_told_otherwise(hpc_launch_bin, tmp_path):
    (tmp_path / "quick.py").write_text("print('quick ran')\n")
    image = tmp_path / "images" / "torch.sif"
    image.parent.mkdir()
    image.write_bytes(b"not really an image")
    r = _run(hpc_launch_bin, tmp_path, "submit", "-c", "local", "-g", "1", "--script", "quick.py",
             "--container", str(image), "-t", "10:00:00")  # fmt: skip
    assert r.returncode == 0, r.stderr
    job = r.stdout.split()[0]
    try:
        [capsule] = (tmp_path / ".hpc-launch" / "capsules").iterdir()
        recorded = json.loads((capsule / "capsule.json").read_text())["container"]
        assert recorded["image"] == str(image) and recorded["bytes"] == 19 and len(recorded["sha256"]) == 64
        rerun = ("rerun", job, "-c", "abci", "-P", "g", "--venv", "/v", "--login", "local", "--dry-run")
        r = _run(hpc_launch_bin, tmp_path, *rerun)
        assert r.returncode == 0, r.stderr
        assert f'singularity exec --nv -B "$WORKDIR":"$WORKDIR" --pwd "$WORKDIR" {image} ' in r.stdout
        assert f"container image {image}" in next(ln for ln in r.stderr.splitlines() if "carried over:" in ln)
        r = _run(hpc_launch_bin, tmp_path, *rerun, "--container", "/groups/g/other.sif")
        assert r.returncode == 0, r.stderr
        assert "/groups/g/other.sif" in r.stdout and str(image) not in r.stdout
    finally:
        _run(hpc_launch_bin, tmp_path, "cancel", job)
