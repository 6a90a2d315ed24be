"""`--container IMAGE` for real: Debian's charliecloud (`ch-run`, unprivileged) runs each rank of a
2-rank training inside an image built here without any registry (a directory holding a marker file
only the image has; the host's /usr, Python and venv bound in), on `--cluster local` (DeepSpeed's
launcher starts `--no_python` ranks through ch-run) and on the testbed's Slurm pods (srun starts
ch-run per task). Each rank prints what it sees: the marker, and whether a --pass-env secret
reached it; the losses must equal the same run outside the image, and the secret must be in no
process's command line and no file of the work dir."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_support import CLI, SIDE_QUEUE, make_cli

pytestmark = pytest.mark.scheduler

SECRET = "ct-s3cr3t-9f1e27"
TRAIN = "--model smallcnn --data digits --steps 4 --micro-batch 8 --log-every 1 --no-eval"
# The rank's own report, then the shipped entrypoint. It scans every process's command line on the
# node while the launcher and ch-run are alive (ch-run keeps the host's /proc and pid namespace).
MARKER_SCRIPT = """\
import os
import sys

from hpc_launch.train.__main__ import entry

names = ("OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK", "RANK")
rank = next((os.environ[k] for k in names if k in os.environ), "?")
marker = open("/IMAGE_MARKER").read().strip() if os.path.exists("/IMAGE_MARKER") else "absent"
secret = os.environ.get("CT_SECRET_TOKEN", "")
leaks = 0
for pid in os.listdir("/proc"):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            leaks += secret.encode() in f.read() if secret else 0
    except OSError:
        pass
seen = "yes" if secret else "no"
print(f"[container-check] rank={rank} marker={marker} secret={seen} cmdline_leaks={leaks}", flush=True)
sys.argv[0] = "hpc-train"
entry()
"""


def _host_binds() -> list:
    """What the image borrows from the host: /usr, the Python the venv was made from, and the
    tree holding this checkout and its venv."""
    python_home = os.path.realpath(sys.base_prefix)
    checkout = "/" + Path(__file__).resolve().parts[1]
    return sorted({"/usr", python_home, checkout, "/" + Path(os.path.realpath(sys.prefix)).parts[1]})


def _image(base: Path) -> Path:
    """A charliecloud image directory: mount points for the host's trees it borrows, the files
    ch-run binds over, and the marker."""
    img = base / "img"
    for d in ("usr", "etc", "tmp", "proc", "dev", "sys", "home", "run", "var", *(b.lstrip("/") for b in _host_binds())):
        (img / d).mkdir(parents=True, exist_ok=True)
    for name in ("bin", "lib", "lib64", "sbin"):
        os.symlink(f"usr/{name}", img / name)
    for f in ("passwd", "group", "hosts", "resolv.conf", "nsswitch.conf"):
        (img / "etc" / f).touch()
    (img / "IMAGE_MARKER").write_text("inside-hpc-launch-test-image\n")
    return img


def _binds_profile(base: Path, name: str) -> Path:
    """A partial profile: charliecloud (whatever the site's runtime) with the host's trees bound."""
    path = base / f"{name}-container.yaml"
    wiring = "{runtime: charliecloud, modules: [], gpu_flags: [], args: [], env: {}, binds: [%s]}"
    path.write_text(f"name: {name}\ncontainer: {wiring % ', '.join(_host_binds())}\n")
    return path


def _losses(log: str) -> list:
    return re.findall(r"\[hpc-train\] step=(\d+) .*?loss=([\d.]+)", log)


def _run(cli: CLI, workdir: Path, *extra: str, timeout=300, secret=True) -> str:
    r = cli(
        "submit",
        "--script",
        "marker.py",
        *(["--pass-env", "CT_SECRET_TOKEN"] if secret else []),
        "--train-args",
        TRAIN,
        "-f",
        "-a",
        *extra,
        timeout=timeout,
        extra_env={"CT_SECRET_TOKEN": SECRET, "USER": os.environ.get("USER", "root")},
    )
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    return r.stdout


def _check_inside(out: str, workdir: Path) -> None:
    checks = re.findall(r"\[container-check\] rank=(\S+) marker=(\S+) secret=(\S+) cmdline_leaks=(\d+)", out)
    assert sorted(c[0] for c in checks) == ["0", "1"], out[-3000:]
    assert all(c[1] == "inside-hpc-launch-test-image" for c in checks), checks
    assert all(c[2] == "yes" and c[3] == "0" for c in checks), checks  # reached the rank, on no command line
    leaked = subprocess.run(["grep", "-rlF", SECRET, str(workdir)], capture_output=True, text=True)
    assert leaked.stdout == "", f"the secret is written in {leaked.stdout}"


def _ch_run() -> None:
    if not shutil.which("ch-run"):
        pytest.fail("ch-run is not installed: testbed/install.sh installs charliecloud-runtime")


@pytest.mark.beside
def test_local_ranks_run_inside_the_image_and_train_the_same(hpc_launch_bin, tmp_path):
    _ch_run()
    (tmp_path / "marker.py").write_text(MARKER_SCRIPT)
    img = _image(tmp_path / "image")
    env = dict(os.environ, HPC_LAUNCH_CLUSTERS_DIR=str(tmp_path))
    cli = CLI(hpc_launch_bin, env, tmp_path)
    _binds_profile(tmp_path, "local").rename(tmp_path / "local.yaml")
    inside = _run(cli, tmp_path, "--cluster", "local", "--container", str(img))
    _check_inside(inside, tmp_path)
    assert "[hpc-launch] preflight ok: 2 ranks" in inside  # the start gate ran inside the image
    outside = _run(cli, tmp_path, "--cluster", "local")
    assert "marker=absent" in outside
    assert _losses(inside) and _losses(inside) == _losses(outside)
    capsules = list((tmp_path / ".hpc-launch").rglob("capsule.json"))
    assert any(f'"image": "{img}"' in c.read_text() for c in capsules), "the capsule records the image"


# srun starts ch-run per task (Slurm); Open MPI's mpirun does across the pods (the PBS dialect, ABCI's route)
@pytest.mark.side
@pytest.mark.parametrize("cluster", ["tb-slurm", "tb-pbs-mpi"])
def test_scheduled_ranks_run_inside_the_image_on_two_pods(hpc_launch_bin, testbed, shared_workdir, cluster):
    _ch_run()
    (shared_workdir / "marker.py").write_text(MARKER_SCRIPT)
    img = _image(shared_workdir / "image")
    pbs_bin = testbed["HPC_TESTBED_PBS_BIN"] if cluster.startswith("tb-pbs") else None  # Slurm's qsub wrappers
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=pbs_bin)
    extra = _binds_profile(shared_workdir, cluster)
    common = ("--cluster", cluster, "--nodes", "2", "--profile", str(extra), *SIDE_QUEUE)
    inside = _run(cli, shared_workdir, *common, "--container", str(img))
    _check_inside(inside, shared_workdir)
    assert "[hpc-launch] preflight ok: 2 ranks on 2 hosts" in inside
    outside = _run(cli, shared_workdir, *common)
    assert _losses(inside) and _losses(inside) == _losses(outside)


def test_pods_ranks_run_inside_the_image_through_deepspeeds_pdsh_runner(hpc_launch_bin, testbed, shared_workdir):
    """DeepSpeed's pdsh runner starts `--no_python` ranks through ch-run on each pod; submitted over
    SSH from pod1, where the image is checked first. (--pass-env is refused there for 2 nodes: the
    runner would put values on a command line.)"""
    _ch_run()
    (shared_workdir / "marker.py").write_text(MARKER_SCRIPT)
    img = _image(shared_workdir / "image")
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    over = shared_workdir / "clusters"
    over.mkdir()
    ssh = (
        f"-F {testbed['HPC_TESTBED_SSH_CONFIG']} -i {testbed['HPC_TESTBED_KEY']} -o IdentitiesOnly=yes "
        f"-o UserKnownHostsFile={testbed['HPC_TESTBED_KNOWN_HOSTS']} -o StrictHostKeyChecking=yes -o BatchMode=yes"
    )
    wiring = _binds_profile(shared_workdir, "pods").read_text().split("\n", 1)[1]
    (over / "pods.yaml").write_text(
        "node: {gpus: 1, cpus: 2}\npython: {venv: auto}\nenv: {OMP_NUM_THREADS: '1'}\nnet_if: eth0\n"
        f"launch: {{launcher: deepspeed-pdsh, ssh_port: 22, pdsh_ssh_args: '{ssh}'}}\n{wiring}"
    )
    cli.env["HPC_LAUNCH_CLUSTERS_DIR"] = str(over)
    ext = os.environ.get("TORCH_EXTENSIONS_DIR")
    common = ("--cluster", "pods", "--login", "pod1", "--workdir", str(shared_workdir), "--hosts", "pod1,pod2",
              *(["-e", f"TORCH_EXTENSIONS_DIR={ext}"] if ext else []))  # fmt: skip
    missing = cli("submit", *common, "--container", str(shared_workdir / "nope"), "--dry-run")
    assert missing.returncode == 0  # a dry-run looks at nothing
    missing = cli("submit", *common, "--container", str(shared_workdir / "nope"))
    assert f"image {shared_workdir}/nope not found or not readable on pod1" in missing.stderr, missing.stderr
    inside = _run(cli, shared_workdir, *common, "--container", str(img), secret=False)
    checks = re.findall(r"\[container-check\] rank=(\S+) marker=(\S+)", inside)
    assert sorted(checks) == [("0", "inside-hpc-launch-test-image"), ("1", "inside-hpc-launch-test-image")], inside
    outside = _run(cli, shared_workdir, *common, secret=False)
    assert _losses(inside) and _losses(inside) == _losses(outside)


def test_a_missing_image_is_refused_before_anything_is_written(hpc_launch_bin, tmp_path):
    cli = CLI(hpc_launch_bin, dict(os.environ), tmp_path)
    r = cli("submit", "--cluster", "local", "--container", str(tmp_path / "nope.sif"))
    assert r.returncode != 0
    assert f"image {tmp_path}/nope.sif not found or not readable on localhost" in r.stderr
    assert not (tmp_path / ".hpc-launch").exists() or not list((tmp_path / ".hpc-launch").iterdir())


@pytest.mark.beside
def test_the_watchdog_names_a_stopped_rank_inside_the_image(hpc_launch_bin, tmp_path):
    """ch-run keeps the host's pid namespace: the rank's pid as it prints it is the one to stop."""
    _ch_run()
    (tmp_path / "marker.py").write_text(MARKER_SCRIPT)
    img = _image(tmp_path / "image")
    cli = CLI(hpc_launch_bin, dict(os.environ, HPC_LAUNCH_CLUSTERS_DIR=str(tmp_path)), tmp_path)
    _binds_profile(tmp_path, "local").rename(tmp_path / "local.yaml")
    job = cli.submit(
        "--cluster", "local", "--container", str(img), "--script", "marker.py", "--name", "hangs",
        "--env", "HPC_LAUNCH_HANG_S=8", "--env", "HPC_LAUNCH_HANG_FACTOR=2", "--pass-env", "CT_SECRET_TOKEN",
        "--train-args", "--model smallcnn --data synthetic --steps 100000 --micro-batch 8 --log-every 10 --no-eval",
        extra_env={"CT_SECRET_TOKEN": SECRET},
    )  # fmt: skip
    log = tmp_path / f"hangs.o{job}"
    text = cli.wait_log(log, "[hpc-train] step=20 ", timeout=240)
    assert "marker=inside-hpc-launch-test-image" in text
    pid = _rank_pid(tmp_path, "1")
    try:
        subprocess.run(["kill", "-STOP", pid], check=True)
        assert cli.wait_state(job, {"failed", "done", "cancelled"}, timeout=120) == "failed"
    finally:
        subprocess.run(["kill", "-CONT", pid], capture_output=True)
        cli("cancel", job)
    assert re.search(r"^\[hpc-launch\] hang: rank 1 on \S+ stopped", log.read_text(), re.M), log.read_text()[-3000:]


def _rank_pid(workdir: Path, rank: str) -> str:
    """The pid of this job's rank `rank` (ch-run execs the rank: the pid the host sees is the rank's)."""
    for entry in Path("/proc").iterdir():
        try:
            cmd = (entry / "cmdline").read_bytes()
            env = (entry / "environ").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if b"marker.py" in cmd and cwd == str(workdir) and f"RANK={rank}".encode() in env:
            return entry.name
    raise AssertionError(f"no rank {rank} of the job in {workdir}")


# The root ch-run gave the rank: the host path it bound as the image (mountinfo's root field of "/")
ROOT_PROBE = """\
import os
root = [line.split()[3] for line in open("/proc/self/mountinfo") if line.split()[4] == "/"][-1]
print(f"[image-root] rank={os.environ.get('SLURM_PROCID', '?')} root={root}", flush=True)
"""


def test_a_staged_image_runs_from_the_node_local_copy_on_two_pods(hpc_launch_bin, testbed, shared_workdir):
    """`stage: {image: true}`: the image is broadcast to each pod's node-local directory (the pods
    share one file system, so each has its own {host} directory) and the ranks run that copy; a pod
    that cannot take its copy fails the job before any rank, named with the fix, and no pod keeps a
    copy. Losses equal the same run from the shared image."""
    _ch_run()
    (shared_workdir / "marker.py").write_text(ROOT_PROBE + MARKER_SCRIPT)
    img = _image(shared_workdir / "image")
    local = shared_workdir / "nodelocal"
    local.mkdir()
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    shared = _binds_profile(shared_workdir, "tb-slurm")
    staged = shared_workdir / "staged.yaml"
    staged.write_text(shared.read_text() + f"stage: {{image: true, dest: '{local}/{{host}}'}}\n")
    common = ("--cluster", "tb-slurm", "--nodes", "2", "--container", str(img))

    (local / "pod2").write_text("a file where pod2's node-local directory should be")
    job = cli.submit(*common, "--profile", str(staged), "--script", "marker.py", "--train-args", TRAIN)
    r = cli("logs", "-f", job, timeout=300)
    log = (shared_workdir / f"train.o{job}").read_text()
    assert r.returncode == 3, log[-3000:]
    # one line (pod2's own, and node 0's relay of it: the same words)
    [line] = {x for x in log.splitlines() if x.startswith("[hpc-launch] stage: error")}
    assert line.startswith("[hpc-launch] stage: error on pod2: ") and "stage.image: false" in line, line
    assert "staging the container image failed" in log and "[container-check]" not in log
    assert not (local / "pod1" / "image").exists() and not list(local.glob("pod1/*.partial-*"))  # all or nothing
    (local / "pod2").unlink()

    inside = _run(cli, shared_workdir, *common, "--profile", str(staged))
    _check_inside(inside, shared_workdir)
    roots = dict(re.findall(r"\[image-root\] rank=(\S+) root=(\S+)", inside))
    # on the testbed the ranks take node 0's path, as a real site's same node-local path on every node
    assert roots == {"0": f"{local}/pod1/image/img", "1": f"{local}/pod1/image/img"}, inside[-3000:]
    assert f"[hpc-launch] staging the container image {img} to {local}/pod1/image on 2 node(s)" in inside
    for pod in ("pod1", "pod2"):  # each node's own verified copy
        assert (local / pod / "image" / "img" / "IMAGE_MARKER").read_text() == "inside-hpc-launch-test-image\n"
    capsules = [c.read_text() for c in (shared_workdir / ".hpc-launch").rglob("capsule.json")]
    assert any(f'"staged": "{local}/{{host}}/image/img"' in c for c in capsules), "the capsule records the copy"

    unstaged = _run(cli, shared_workdir, *common, "--profile", str(shared))
    assert re.findall(r"\[image-root\] rank=\S+ root=(\S+)", unstaged) == [str(img)] * 2
    assert _losses(inside) and _losses(inside) == _losses(unstaged)
