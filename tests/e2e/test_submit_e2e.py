"""submit -> status -> logs -f -> done with exit code, and cancel, on every real scheduler the
testbed has: local (no scheduler), Slurm (pods), the PBS dialect on Slurm's qsub wrappers,
Grid Engine, and the PBS dialect again through SSH to a login host. Real DeepSpeed trains
in every job (small CNN, synthetic data, a few steps)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from e2e_support import CLI, SIDE_QUEUE, make_cli

pytestmark = pytest.mark.scheduler

LONG = ["--train-args", "--model smallcnn --data synthetic --steps 100000 --micro-batch 8 --log-every 1 --no-eval"]


def _check_done(cli, job_id: str, workdir: Path, name="train", world=2):
    r = cli("logs", job_id, "--summary")
    assert r.returncode == 0, r.stderr
    assert "loss" in r.stdout, r.stdout
    log = (workdir / f"{name}.o{job_id.split('.')[0]}").read_text()
    assert re.search(rf"\[hpc-train\] step=4 .*world_size={world}", log), log[-2000:]
    assert (workdir / f"{name}.o{job_id.split('.')[0]}.exitcode").read_text().split()[0] == "0"
    assert cli.wait_state(job_id, {"done"}, timeout=60) == "done"


def _follow(cli, job_id):
    r = cli("logs", "-f", job_id, timeout=400)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert "[hpc-train] step=4" in r.stdout
    assert f"job {job_id} done" in r.stderr
    return r


# ---- local ------------------------------------------------------------------------------------


@pytest.mark.beside
def test_local_submit_follow_done(hpc_launch_bin, tmp_path):
    cli = CLI(hpc_launch_bin, dict(os.environ), tmp_path)
    r = cli(
        "submit",
        "--cluster",
        "local",
        "--follow",
        "--train-args",
        "--model smallcnn --data synthetic --steps 4 --micro-batch 8 --log-every 1 --no-eval",
        timeout=400,
    )
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    job_id = r.stdout.splitlines()[0].strip()
    assert job_id.isdigit()
    assert "[hpc-train] step=4" in r.stdout
    _check_done(cli, job_id, tmp_path)


@pytest.mark.beside
def test_local_failing_job_reports_failure_and_exit_code(hpc_launch_bin, tmp_path):
    cli = CLI(hpc_launch_bin, dict(os.environ), tmp_path)
    (tmp_path / "boom.py").write_text("import sys\nprint('about to fail', flush=True)\nsys.exit(7)\n")
    job_id = cli.submit("--cluster", "local", "--script", str(tmp_path / "boom.py"), "--train-args", "")
    r = cli("logs", "-f", job_id, timeout=300)
    assert r.returncode != 0
    assert "about to fail" in r.stdout
    assert cli.wait_state(job_id, {"failed"}, timeout=30) == "failed"


@pytest.mark.beside
def test_local_cancel_kills_the_whole_job(hpc_launch_bin, tmp_path):
    cli = CLI(hpc_launch_bin, dict(os.environ), tmp_path)
    job_id = cli.submit("--cluster", "local", *LONG)
    cli.wait_log(tmp_path / f"train.o{job_id}", "[hpc-train] step=2", timeout=300)
    r = cli("cancel", job_id)
    assert r.returncode == 0, r.stderr
    assert cli.wait_state(job_id, {"cancelled"}, timeout=30) == "cancelled"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = subprocess.run(["pgrep", "-g", job_id], capture_output=True, text=True).stdout.split()
        if not left:
            break
        time.sleep(0.5)
    assert not left, f"processes of job {job_id} still running: {left}"
    assert (tmp_path / f"train.o{job_id}.exitcode").read_text().split()[0] == "143"


# ---- Slurm -------------------------------------------------------------------------------------


def test_slurm_two_nodes_submit_follow_done(hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    job_id = cli.submit("--cluster", "tb-slurm", "--nodes", "2")
    _follow(cli, job_id)
    _check_done(cli, job_id, shared_workdir)
    hostfile = (shared_workdir / f"hostfile_{job_id}").read_text()
    assert hostfile == "pod1 slots=1\npod2 slots=1\n" or hostfile.count("slots=1") == 2


def test_slurm_rendered_generic_profile_passes_sbatch_test_only(hpc_launch_bin, testbed, shared_workdir):
    # the pods have 2 CPUs: say so, as a user says how many CPUs their nodes have (--cpus-per-task)
    config = Path(os.environ["HPC_LAUNCH_CONFIG_DIR"]) / "clusters"
    config.mkdir(parents=True, exist_ok=True)
    (config / "slurm.yaml").write_text("node: {cpus: 2}\n")
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    r = cli(
        "submit",
        "--cluster",
        "slurm",
        "--nodes",
        "2",
        "--gpus-per-node",
        "0",
        "--login",
        "local",
        "--dry-run",
        check=True,
    )
    assert "#SBATCH --cpus-per-task=2\n" in r.stdout
    script = shared_workdir / "generic.sh"
    script.write_text(r.stdout)
    ok = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, cwd=shared_workdir)
    assert ok.returncode == 0, ok.stderr
    assert "to start at" in ok.stderr and "pod[1-2]" in ok.stderr
    # with GPUs the only objection is the testbed's lack of GPUs (no GRES), not our directives
    r = cli("submit", "--cluster", "slurm", "--nodes", "2", "--login", "local", "--dry-run", check=True)
    script.write_text(r.stdout)
    gpus = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, cwd=shared_workdir)
    assert gpus.returncode != 0 and "gres" in gpus.stderr.lower()


# ---- PBS dialect on Slurm's qsub wrappers -------------------------------------------------------


def test_pbs_two_nodes_pdsh_submit_follow_done(hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed["HPC_TESTBED_PBS_BIN"])
    job_id = cli.submit("--cluster", "tb-pbs", "--nodes", "2")
    _follow(cli, job_id)
    _check_done(cli, job_id, shared_workdir)
    log = (shared_workdir / f"train.o{job_id}").read_text()
    assert "pod1 slots=1" in log and "pod2 slots=1" in log  # hostfile from $PBS_NODEFILE


def test_flaky_qsub_is_retried_without_a_duplicate_job(hpc_launch_bin, testbed, shared_workdir):
    flaky = shared_workdir / "flaky-qsub"
    marker = shared_workdir / "failed-once"
    flaky.write_text(
        "#!/bin/bash\n"
        f"if [ ! -e {marker} ]; then touch {marker}; echo 'qsub: cannot "
        "connect to server pbs1 (errno=15010)' >&2; exit 1; fi\n"
        f'exec {testbed["HPC_TESTBED_PBS_BIN"]}/qsub "$@"\n'
    )
    flaky.chmod(0o755)
    profile = shared_workdir / "flaky.yaml"
    profile.write_text(f"name: tb-pbs-flaky\nextends: tb-pbs\ncommands: {{qsub: {flaky}}}\n")
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed["HPC_TESTBED_PBS_BIN"])
    name = f"flaky{os.getpid()}"
    job_id = cli.submit("--profile", str(profile), "--cluster", "tb-pbs-flaky", "--name", name, *LONG)
    assert marker.exists(), "the flaky qsub was not exercised"
    jobs = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True).stdout.split()
    assert jobs == [job_id], f"expected exactly one job named {name}, got {jobs}"
    assert cli("cancel", job_id).returncode == 0


# ---- Grid Engine -------------------------------------------------------------------------------


@pytest.mark.beside
def test_gridengine_submit_follow_done(hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed["HPC_TESTBED_SGE_BIN"])
    job_id = cli.submit("--cluster", "tb-sge", "--nodes", "1")
    _follow(cli, job_id)
    _check_done(cli, job_id, shared_workdir)


# ---- cancel a running job on each scheduler -----------------------------------------------


@pytest.mark.parametrize(
    "cluster,bin_key,where",
    [
        pytest.param("tb-slurm", "HPC_TESTBED_PBS_BIN", SIDE_QUEUE, marks=pytest.mark.side),
        pytest.param("tb-pbs", "HPC_TESTBED_PBS_BIN", SIDE_QUEUE, marks=pytest.mark.side),
        pytest.param("tb-sge", "HPC_TESTBED_SGE_BIN", (), marks=pytest.mark.beside),
    ],
)
def test_cancel_running_job(cluster, bin_key, where, hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed[bin_key])
    job_id = cli.submit("--cluster", cluster, "--nodes", "1", *where, *LONG)
    cli.wait_log(shared_workdir / f"train.o{job_id}", "[hpc-train] step=2", timeout=300)
    assert cli("cancel", job_id).returncode == 0
    assert cli.wait_state(job_id, {"cancelled"}, timeout=60) == "cancelled"
    if cluster == "tb-slurm":  # and Slurm itself agrees
        sq = subprocess.run(["squeue", "-h", "--states=all", "-o", "%T", "-j", job_id], capture_output=True, text=True)
        assert "CANCELLED" in sq.stdout or "COMPLETING" in sq.stdout


# ---- over SSH to a login host -----------------------------------------------------------------


@pytest.mark.side
def test_ssh_login_submit_follow_cancel(hpc_launch_bin, testbed, shared_workdir):
    # no scheduler on this side's PATH: everything must happen on the login host
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    login = testbed["HPC_TESTBED_LOGIN_HOST"]
    where = ("--login", login, "--workdir", str(shared_workdir), *SIDE_QUEUE)
    job_id = cli.submit("--cluster", "tb-pbs", "--nodes", "2", *where)
    r = cli("list")
    assert job_id in r.stdout and login in r.stdout
    _follow(cli, job_id)
    _check_done(cli, job_id, shared_workdir)
    # cancel over ssh too
    long_id = cli.submit("--cluster", "tb-pbs", "--nodes", "1", *where, *LONG)
    cli.wait_log(shared_workdir / f"train.o{long_id}", "[hpc-train] step=2", timeout=300)
    assert cli("cancel", long_id).returncode == 0
    assert cli.wait_state(long_id, {"cancelled"}, timeout=60) == "cancelled"


def test_ssh_host_key_mismatch_is_refused_and_nothing_submitted(hpc_launch_bin, testbed, shared_workdir, tmp_path):
    real = Path(testbed["HPC_TESTBED_KNOWN_HOSTS"]).read_text().splitlines()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "impostor")], check=True)
    impostor = (tmp_path / "impostor.pub").read_text().split()[:2]
    forged = []
    for line in real:
        host = line.split()[0]
        forged.append(f"{host} {' '.join(impostor)}")
    (tmp_path / "known_hosts").write_text("\n".join(forged) + "\n")
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    # asked by name: the other lanes submit, and their arrays expand into tasks, while this runs
    name = f"forged{os.getpid()}"
    r = cli(
        "submit",
        "--cluster",
        "tb-pbs",
        "--name",
        name,
        "--nodes",
        "1",
        "--login",
        testbed["HPC_TESTBED_LOGIN_HOST"],
        "--workdir",
        str(shared_workdir),
        extra_env={"HPC_LAUNCH_KNOWN_HOSTS": str(tmp_path / "known_hosts")},
    )
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "CHANGED" in r.stderr
    submitted = subprocess.run(["squeue", "-h", "-t", "all", "-n", name, "-o", "%i"], capture_output=True, text=True)
    assert submitted.returncode == 0 and submitted.stdout.split() == [], submitted
    assert not list(shared_workdir.glob(".hpc-launch/*.sh"))


# ---- every launch route the profiles use, across two pods ------------------------------------


@pytest.mark.parametrize(
    "cluster,route",
    [
        ("tb-pbs-mpi", "mpirun (ABCI 3.0): ranks from OMPI_COMM_WORLD_*"),
        ("tb-pbs-dsmpi", "deepspeed --launcher openmpi (ABCI 2.0 tutorial)"),
        ("tb-pbs-torchrun", "mpirun + torchrun per node (Miyabi)"),
        ("tb-slurm-torchrun", "srun + torchrun per node, static rendezvous"),
    ],
)
@pytest.mark.side
def test_launch_route_trains_across_two_pods(cluster, route, hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed["HPC_TESTBED_PBS_BIN"])
    job_id = cli.submit("--cluster", cluster, "--nodes", "2", *SIDE_QUEUE)
    _follow(cli, job_id)
    _check_done(cli, job_id, shared_workdir)


# ---- secrets reach the job without being written anywhere ---------------------------------


@pytest.mark.parametrize(
    "cluster, where",
    [
        pytest.param("local", (), marks=pytest.mark.beside),
        pytest.param("tb-pbs", SIDE_QUEUE, marks=pytest.mark.side),
        pytest.param("tb-slurm", SIDE_QUEUE, marks=pytest.mark.side),
    ],
)
def test_pass_env_secret_reaches_the_job_but_not_the_script(cluster, where, hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed["HPC_TESTBED_PBS_BIN"])
    secret = f"s3cr3t-{os.getpid()}-{cluster}"
    probe = shared_workdir / "probe.py"
    # one write per line: two ranks print at once
    probe.write_text(
        "import hashlib, os, sys\nv = os.environ.get('MY_API_TOKEN', '')\n"
        "sys.stdout.write(f'token sha256 {hashlib.sha256(v.encode()).hexdigest()}\\n'); sys.stdout.flush()\n"
    )
    job_id = cli.submit(
        "--cluster",
        cluster,
        "--nodes",
        "1",
        "--script",
        str(probe),
        "--train-args",
        "",
        "--pass-env",
        "MY_API_TOKEN",
        *where,
        extra_env={"MY_API_TOKEN": secret},
    )
    r = cli("logs", "-f", job_id, timeout=300)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    import hashlib

    assert f"token sha256 {hashlib.sha256(secret.encode()).hexdigest()}" in r.stdout
    for path in shared_workdir.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), f"the secret was written to {path}"
    assert not list(shared_workdir.glob(".hpc-launch/*.secrets")), "the job must delete the file that carried it"
