"""Node-local staging on the real testbed Slurm (pods pod1..pod3): the job's virtualenv (torch,
DeepSpeed: ~1.5 GB, ~37k files) and a data directory broadcast to every node by srun-launched
hpc_launch.stage, then the ranks import torch and DeepSpeed from the copy; a node that cannot
stage fails the job before any rank starts, named in the log.

The pods share one file system, so each node's copy goes to its own {host} directory; the ranks
inherit the batch node's PATH, so on the testbed every rank runs from pod1's copy (on a real
cluster `dest` is the same node-local path on every node). That every node received a verified,
relocated copy is checked on each node's directory."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from e2e_support import make_cli

pytestmark = pytest.mark.scheduler

# Each probe writes its line in one write (`python -u`: print's text and its newline are two, and
# mpirun or srun interleaves two ranks' writes: "...mark=...pySTAGE-PROBE rank=1 ...").
PROBE = """\
import os, socket, sys
import torch, deepspeed
data = open(os.path.join(os.environ["HPC_LAUNCH_STAGED_DATA"], "part-0.txt")).read().strip()
sys.stdout.write(f"STAGE-PROBE rank={os.environ['SLURM_PROCID']} host={socket.gethostname()} prefix={sys.prefix} "
                 f"torch={torch.__file__} deepspeed={deepspeed.__file__} data={data}\\n")
"""


PODS_PROBE = """\
import os, socket, sys
import stagedmark, torch
sys.stdout.write(f"STAGE-PROBE rank={os.environ['RANK']} host={socket.gethostname()} prefix={sys.prefix} "
                 f"mark={stagedmark.__file__} torch={torch.__version__}\\n")
"""


@pytest.fixture
def stage_base(testbed, shared_workdir):
    # node-local storage is often memory (Aurora's /tmp): /dev/shm here, where removing 2 x 1.5 GB
    # copies takes a second instead of 25 s on this machine's disk
    shm = Path("/dev/shm")
    room = shutil.disk_usage(shm).free if shm.is_dir() else 0
    root = shm if room > 8 * 2**30 else Path(testbed["HPC_TESTBED_DIR"])
    base = root / "hpc-stage-e2e" / shared_workdir.name
    base.mkdir(parents=True)
    yield base
    shutil.rmtree(base, ignore_errors=True)  # ~1.5 GB per node


@pytest.fixture
def small_venv(hpc_launch_bin, shared_workdir) -> Path:
    """A venv of a few files that reaches the project's packages through a .pth: what the failure and
    pdsh tests stage (the 1.5 GB one, in the first test, costs a minute per copy here). Its own module
    `stagedmark` proves the ranks import from the staged copy."""
    venv = shared_workdir / "small-venv"
    python = hpc_launch_bin.replace("hpc-launch", "python")
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    [own] = (venv / "lib").glob("python3*/site-packages")
    (own / "project.pth").write_text(f"import site; site.addsitedir({site!r})\n")
    (own / "stagedmark.py").write_text("")
    launcher = Path(hpc_launch_bin).with_name("deepspeed").read_text().split("\n", 1)[1]
    (venv / "bin" / "deepspeed").write_text(f"#!{venv}/bin/python\n{launcher}")  # pdsh's runner, from this venv
    (venv / "bin" / "deepspeed").chmod(0o755)
    return venv


def _profile(tmp_path: Path, dest: Path, data: Path) -> list:
    path = tmp_path / "staged.yaml"
    path.write_text(
        f"name: tb-staged\nextends: tb-slurm\nstage: {{env: true, data: {str(data)!r}, dest: '{dest}/{{host}}'}}\n"
    )
    return ["--cluster", "tb-staged", "--profile", str(path)]


def test_ranks_import_torch_and_deepspeed_from_the_staged_copy(
    hpc_launch_bin, testbed, shared_workdir, stage_base, tmp_path
):
    data = shared_workdir / "dataset"
    data.mkdir()
    (data / "part-0.txt").write_text("shard-zero\n")
    (shared_workdir / "probe.py").write_text(PROBE)
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    venv = Path(
        subprocess.run(
            [hpc_launch_bin.replace("hpc-launch", "python"), "-c", "import sys; print(sys.prefix)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    job_id = cli.submit(*_profile(tmp_path, stage_base, data), "--nodes", "2", "--script", "probe.py")
    r = cli("logs", "-f", job_id, timeout=580)
    log = (shared_workdir / f"train.o{job_id}").read_text()
    assert r.returncode == 0, log[-3000:]
    assert "[hpc-launch] stage: " in log and "on 2 node(s)" in log and "every copy verified" in log
    copy = stage_base / "pod1" / "env"
    probes = sorted(line for line in log.splitlines() if line.startswith("STAGE-PROBE"))
    assert len(probes) == 2, log[-3000:]
    for line in probes:
        fields = dict(kv.split("=", 1) for kv in line.split()[1:])
        assert fields["prefix"] == str(copy)
        assert fields["torch"].startswith(f"{copy}/lib/") and fields["deepspeed"].startswith(f"{copy}/lib/")
        assert not fields["torch"].startswith(str(venv))
        assert fields["data"] == "shard-zero"  # read from the staged data directory
    for pod in ("pod1", "pod2"):  # each node's own verified, relocated copy
        env = stage_base / pod / "env"
        activate = (env / "bin" / "activate").read_text()
        assert str(env) in activate and f"{venv}/" not in activate and f"{venv}\n" not in activate
        assert (stage_base / pod / "data" / "part-0.txt").read_text() == "shard-zero\n"
        assert not list((stage_base / pod).glob("*.partial-*"))
    assert not list((shared_workdir / ".hpc-launch").glob("stage-*.token"))  # the job's secret is gone


def test_a_node_that_cannot_stage_fails_the_job_before_any_rank(
    hpc_launch_bin, testbed, shared_workdir, stage_base, tmp_path, small_venv
):
    data = shared_workdir / "dataset"
    data.mkdir()
    (data / "x").write_text("x")
    (stage_base / "pod2").write_text("a file where pod2's directory should be")
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    job_id = cli.submit(*_profile(tmp_path, stage_base, data), "--nodes", "2", "--venv", str(small_venv))
    r = cli("logs", "-f", job_id, timeout=400)
    log = (shared_workdir / f"train.o{job_id}").read_text()
    assert r.returncode == 3, log[-3000:]
    assert "[hpc-launch] stage: error on pod2:" in log, log[-3000:]
    assert "staging the environment failed (the node is named above); not launching" in log
    assert "[hpc-train]" not in log
    assert not (stage_base / "pod1" / "env").exists()  # all or nothing
    assert not list(stage_base.glob("pod1/*.partial-*"))


@pytest.mark.pods
def test_pods_stage_over_pdsh_and_ranks_run_from_the_copy(
    hpc_launch_bin, testbed, shared_workdir, stage_base, tmp_path, small_venv
):
    """The pdsh way (`--cluster pods`, no scheduler): the pods' names are ssh config aliases that do
    not resolve, so their addresses come from `ssh -G`; each pod finds its place by its own name."""
    over = tmp_path / "clusters"
    over.mkdir()
    ssh = (
        f"-F {testbed['HPC_TESTBED_SSH_CONFIG']} -i {testbed['HPC_TESTBED_KEY']} -o IdentitiesOnly=yes "
        f"-o UserKnownHostsFile={testbed['HPC_TESTBED_KNOWN_HOSTS']} -o StrictHostKeyChecking=yes -o BatchMode=yes"
    )
    (over / "pods.yaml").write_text(
        "node: {gpus: 1, cpus: 2}\npython: {venv: auto}\nenv: {OMP_NUM_THREADS: '1'}\nnet_if: eth0\n"
        f"launch: {{launcher: deepspeed-pdsh, ssh_port: 22, pdsh_ssh_args: '{ssh}'}}\n"
        f"stage: {{env: true, dest: '{stage_base}/{{host}}'}}\n"
    )
    (shared_workdir / "probe.py").write_text(PODS_PROBE)
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    cli.env["HPC_LAUNCH_CLUSTERS_DIR"] = str(over)
    r = cli(
        "submit",
        "--cluster",
        "pods",
        "--login",
        "pod1",
        "--workdir",
        str(shared_workdir),
        "--hosts",
        "pod1,pod2",
        "--venv",
        str(small_venv),
        "--script",
        "probe.py",
        "--follow",
        "--all",
        timeout=580,
    )
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-2000:])
    log = r.stdout
    assert "every copy verified" in log and "on 2 node(s)" in log
    copy = stage_base / "pod1" / "env"
    probes = [line for line in log.splitlines() if "STAGE-PROBE" in line]
    assert len(probes) == 2, log[-3000:]
    for line in probes:
        fields = dict(kv.split("=", 1) for kv in line.split("STAGE-PROBE", 1)[1].split())
        assert fields["prefix"] == str(copy) and fields["mark"].startswith(f"{copy}/lib/")
    assert str(stage_base / "pod2" / "env") in (stage_base / "pod2" / "env" / "bin" / "activate").read_text()


MPI_PROBE = """\
import os, socket, sys
import stagedmark, torch
rank = os.environ["OMPI_COMM_WORLD_RANK"]
sys.stdout.write(f"STAGE-PROBE rank={rank} host={socket.gethostname()} prefix={sys.prefix} "
                 f"mark={stagedmark.__file__}\\n")
"""


def test_stage_env_on_the_command_line_stages_through_mpirun(
    hpc_launch_bin, testbed, shared_workdir, stage_base, tmp_path, small_venv
):
    """The mpirun way (ABCI 3.0's launcher on the testbed's PBS): the profile names only where to
    stage, `--stage-env` turns staging on for this job; `mpirun --npernode 1` runs the broadcast
    once per node, and the ranks mpirun starts import from the copy."""
    path = tmp_path / "staged-mpi.yaml"
    path.write_text(f"name: tb-staged-mpi\nextends: tb-pbs-mpi\nstage: {{dest: '{stage_base}/{{host}}'}}\n")
    (shared_workdir / "probe.py").write_text(MPI_PROBE)
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed["HPC_TESTBED_PBS_BIN"])
    common = ["--cluster", "tb-staged-mpi", "--profile", str(path), "--nodes", "2", "--venv", str(small_venv)]
    dry = cli("submit", *common, "--script", "probe.py", "--dry-run")
    assert dry.returncode == 0 and "# --- node-local staging" not in dry.stdout  # off in the profile
    job_id = cli.submit(*common, "--script", "probe.py", "--stage-env")
    r = cli("logs", "-f", job_id, timeout=400)
    log = (shared_workdir / f"train.o{job_id}").read_text()
    assert r.returncode == 0, log[-3000:]
    assert "every copy verified" in log and "on 2 node(s)" in log, log[-3000:]
    probes = sorted(line for line in log.splitlines() if line.startswith("STAGE-PROBE"))
    assert len(probes) == 2, log[-3000:]
    copy = stage_base / "pod1" / "env"  # the ranks inherit the batch node's PATH (module docstring)
    for line in probes:
        fields = dict(kv.split("=", 1) for kv in line.split()[1:])
        assert fields["prefix"] == str(copy) and fields["mark"].startswith(f"{copy}/lib/")
    for pod in ("pod1", "pod2"):
        assert str(stage_base / pod / "env") in (stage_base / pod / "env" / "bin" / "activate").read_text()
