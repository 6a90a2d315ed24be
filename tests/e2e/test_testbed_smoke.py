"""Smoke tests for the testbed itself (testbed/up.sh): every piece is real and alive.

These talk to the real daemons with their own command-line tools -- no hpc_launch code is involved -- so a
failure here means "the testbed is broken", not "the product is broken".

They never skip: if the testbed is not up they fail and say how to start it (scripts/test.sh does).
Deselect them with `-m "not scheduler"` for a quick run without the testbed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.scheduler

TB_DIR = Path(os.environ.get("HPC_TESTBED_DIR", "/tmp/hpc-testbed"))
TB_OPT = Path(os.environ.get("HPC_TESTBED_OPT", "/opt/hpc-testbed"))
SSH_CONFIG = Path(os.environ.get("HPC_TESTBED_SSH_CONFIG", str(TB_DIR / "ssh" / "ssh_config")))
KNOWN_HOSTS = Path(os.environ.get("HPC_TESTBED_KNOWN_HOSTS", str(TB_DIR / "ssh" / "known_hosts")))
PBS_BIN = os.environ.get("HPC_TESTBED_PBS_BIN", str(TB_OPT / "pbs" / "bin"))
SGE_BIN = os.environ.get("HPC_TESTBED_SGE_BIN", str(TB_OPT / "sge" / "bin"))
LOGIN = os.environ.get("HPC_TESTBED_LOGIN_HOST", "hpc-login")
LOGIN_SGE = os.environ.get("HPC_TESTBED_LOGIN_HOST_SGE", "hpc-login-sge")
PODS = [p for p in os.environ.get("HPC_TESTBED_POD_NAMES", "pod1,pod2,pod3").split(",") if p]
SGE_ENV = {
    "SGE_ROOT": os.environ.get("SGE_ROOT", "/var/lib/gridengine"),
    "SGE_CELL": os.environ.get("SGE_CELL", "default"),
}
TERMINAL_SLURM = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"}
JOB_TIMEOUT = 60  # seconds any single job may take from submission to its output file


def _testbed_up() -> bool:
    return SSH_CONFIG.is_file() and (TB_DIR / "pods").is_file() and shutil.which("sbatch") is not None


@pytest.fixture(autouse=True, scope="module")
def _require_testbed():
    # Never skipped: a missing testbed must fail loudly (scripts/test.sh starts it).
    assert _testbed_up(), f"the testbed is not up ({TB_DIR}): run testbed/install.sh && testbed/up.sh"


def run(
    cmd: list[str],
    *,
    path_first: str | None = None,
    cwd: Path | None = None,
    timeout: float = 30,
    check: bool = True,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(SGE_ENV)
    if path_first:
        env["PATH"] = f"{path_first}:{env.get('PATH', '/usr/bin:/bin')}"
    if extra_env:
        env.update(extra_env)
    cp = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and cp.returncode != 0:
        raise AssertionError(f"{cmd} -> rc {cp.returncode}\nstdout: {cp.stdout}\nstderr: {cp.stderr}")
    return cp


def wait_for(what: str, probe, timeout: float = JOB_TIMEOUT, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last probe: {last!r})")


def slurm_state(job_id: str) -> str:
    cp = run(["squeue", "-h", "--states=all", "-o", "%T", "-j", job_id], check=False)
    return cp.stdout.strip()


def wait_slurm_done(job_id: str) -> str:
    return wait_for(f"slurm job {job_id} to finish", lambda: (s := slurm_state(job_id)) in TERMINAL_SLURM and s)


def file_with_text(path: Path, last: str = ""):
    """The file's text once it has some (and, with `last`, once a complete line starting with it
    is there): a job's output lands line by line, and under load the probe can fall in between."""

    def probe():
        if not (path.is_file() and path.stat().st_size > 0):
            return False
        text = path.read_text()
        if last and not re.search(rf"(?m)^{re.escape(last)}.*\n", text):
            return False
        return text

    return probe


@pytest.fixture
def workdir(tmp_path_factory) -> Path:
    # jobs run inside the pods, which share this filesystem (and mount namespace) with us
    d = tmp_path_factory.mktemp("smoke", numbered=True)
    d.chmod(0o777)
    return d


# ---------------------------------------------------------------------------------------------------------- Slurm
def test_slurm_nodes_are_the_pods():
    out = run(["sinfo", "-h", "-N", "-p", "debug", "-o", "%N %T"]).stdout.split("\n")
    states = dict(line.split() for line in out if line.strip())
    assert sorted(states) == sorted(PODS)
    # up and taking jobs: `completing` is a node whose last job is still ending (seen in CI right after
    # the test before it), not a node that is down, drained or not responding
    assert all(s in {"idle", "mixed", "allocated", "completing"} for s in states.values()), states


def test_slurm_two_node_job_runs_on_two_pods(workdir: Path):
    script = workdir / "two.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH -J smoke2\n#SBATCH -N 2\n#SBATCH -t 1\n#SBATCH -o two-%j.out\n"
        "srun -l hostname\necho BATCH_HOST=$(hostname)\n"
    )
    job_id = run(["sbatch", "--parsable", str(script)], cwd=workdir).stdout.strip()
    assert re.fullmatch(r"\d+", job_id), job_id
    assert wait_slurm_done(job_id) == "COMPLETED"
    text = wait_for("output file", file_with_text(workdir / f"two-{job_id}.out"))
    tasks = dict(re.findall(r"^(\d+): (\S+)$", text, re.M))
    assert len(set(tasks.values())) == 2 and set(tasks.values()) <= set(PODS), text
    # the batch script runs on the allocation's first node, task 0's (pod1 unless the test before's
    # job is still completing there: CI saw pod2 and pod3)
    assert f"BATCH_HOST={tasks['0']}" in text, text


def test_slurm_enforces_partition_limits(workdir: Path):
    cp = run(["sbatch", "--parsable", "-N", str(len(PODS) + 5), "--wrap", "true"], cwd=workdir, check=False)
    assert cp.returncode != 0 and "error" in cp.stderr.lower(), (cp.stdout, cp.stderr)


def test_sacct_sees_finished_jobs(workdir: Path):
    assert "accounting_storage/slurmdbd" in run(["scontrol", "show", "config"]).stdout, (
        "testbed started with HPC_TESTBED_ACCT=0"
    )
    job_id = run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "exit 3"], cwd=workdir).stdout.strip()
    assert wait_slurm_done(job_id) == "FAILED"

    def acct():
        out = run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "JobID,State,ExitCode"]).stdout.strip()
        return out if "FAILED" in out else None

    assert wait_for("sacct record", acct, timeout=30) == f"{job_id}|FAILED|3:0"


# ---------------------------------------------------------------------------------------------- PBS via Slurm
def test_pbs_wrapper_qsub_gives_pbs_environment(workdir: Path):
    qsub = run(["sh", "-c", "command -v qsub"], path_first=PBS_BIN).stdout.strip()
    assert qsub == f"{PBS_BIN}/qsub" and Path(qsub).read_text().startswith("#! /usr/bin/perl")
    script = workdir / "x.pbs"
    script.write_text(
        "#!/bin/bash\n#PBS -l nodes=2:ppn=1\n#PBS -l walltime=00:01:00\n"
        'echo "PBS_JOBID=$PBS_JOBID PBS_JOBNAME=$PBS_JOBNAME PBS_O_WORKDIR=$PBS_O_WORKDIR"\n'
        'echo "NODEFILE=$(sort -u $PBS_NODEFILE | paste -sd,)"\n'
    )
    cp = run(["qsub", "-N", "x", "-j", "oe", str(script)], path_first=PBS_BIN, cwd=workdir)
    job_id = cp.stdout.strip()
    assert re.fullmatch(r"\d+", job_id), cp.stdout  # bare id: Slurm's wrapper has no ".server" suffix
    text = wait_for("x.o<ID>", file_with_text(workdir / f"x.o{job_id}", last="NODEFILE="))
    assert f"PBS_JOBID={job_id} PBS_JOBNAME=x PBS_O_WORKDIR={workdir}" in text
    nodes = re.search(r"NODEFILE=(\S+)", text).group(1).split(",")
    assert len(nodes) == 2 and set(nodes) <= set(PODS), text
    qstat = run(["qstat", "-f", job_id], path_first=PBS_BIN).stdout
    assert f"Job Id:\t{job_id}" in qstat and "Job_Name = x" in qstat


# ---------------------------------------------------------------------------------------------- Grid Engine
def test_gridengine_qsub_runs_job(workdir: Path):
    qsub = run(["sh", "-c", "command -v qsub"], path_first=SGE_BIN).stdout.strip()
    assert qsub == f"{SGE_BIN}/qsub"
    assert run([qsub, "-help"]).stdout.startswith("SGE ")  # Grid Engine's own qsub, not the PBS wrapper
    script = workdir / "g.sge"
    script.write_text(
        "#!/bin/bash\n#$ -N gsmoke\n#$ -cwd\n#$ -j y\n#$ -l h_rt=00:01:00\n"
        'echo "JOB_ID=$JOB_ID JOB_NAME=$JOB_NAME NSLOTS=$NSLOTS"\n'
    )
    out = run(["qsub", str(script)], path_first=SGE_BIN, cwd=workdir).stdout
    m = re.fullmatch(r'Your job (\d+) \("gsmoke"\) has been submitted\n', out)
    assert m, out
    job_id = m.group(1)
    text = wait_for("gsmoke.o<ID>", file_with_text(workdir / f"gsmoke.o{job_id}"))
    assert f"JOB_ID={job_id} JOB_NAME=gsmoke NSLOTS=1" in text
    terse = run(["qsub", "-terse", "-pe", "smp", "2", str(script)], path_first=SGE_BIN, cwd=workdir).stdout.strip()
    assert re.fullmatch(r"\d+", terse), terse
    text = wait_for("terse job output", file_with_text(workdir / f"gsmoke.o{terse}"))
    assert "NSLOTS=2" in text

    def acct():
        cp = run(["qacct", "-j", job_id], path_first=SGE_BIN, check=False)
        return cp.returncode == 0 and cp.stdout

    assert re.search(r"^exit_status\s+0\s*$", wait_for("qacct record", acct, timeout=30), re.M)


# ---------------------------------------------------------------------------------------------- ssh / pdsh / mpi
def test_pdsh_across_pods():
    env = {"PDSH_SSH_ARGS_APPEND": f"-F {SSH_CONFIG}", "PDSH_RCMD_TYPE": "ssh"}
    cp = run(["pdsh", "-S", "-w", ",".join(PODS), "hostname"], extra_env=env)
    got = sorted(line.split(": ", 1) for line in cp.stdout.strip().splitlines())
    assert got == [[p, p] for p in sorted(PODS)], cp.stdout
    cp = run(["pdsh", "-S", "-w", PODS[0], "exit 3"], extra_env=env, check=False)
    assert cp.returncode == 3, (cp.returncode, cp.stderr)


def test_ssh_login_host_verifies_host_key(tmp_path: Path):
    out = run(
        [
            "ssh",
            "-F",
            str(SSH_CONFIG),
            LOGIN,
            "command -v qsub; for c in sbatch squeue scancel; do readlink -f $(command -v $c); done; echo $SGE_ROOT",
        ]
    ).stdout
    assert out.split() == [
        f"{PBS_BIN}/qsub",
        "/usr/bin/sbatch",
        "/usr/bin/squeue",
        "/usr/bin/scancel",
        SGE_ENV["SGE_ROOT"],
    ], out
    out = run(["ssh", "-F", str(SSH_CONFIG), LOGIN_SGE, "command -v qsub qacct; qstat -f | head -1"]).stdout
    assert out.split()[:2] == [f"{SGE_BIN}/qsub", f"{SGE_BIN}/qacct"], out
    out = run(["ssh", "-F", str(SSH_CONFIG), PODS[1], "hostname; echo $SSH_CONNECTION"]).stdout.split()
    assert out[0] == PODS[1] and out[3] == "10.200.0.12", out

    # a known_hosts that names the right host with the WRONG key must be refused
    wrong_key = tmp_path / "k"
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong_key)])
    pub = " ".join(wrong_key.with_suffix(".pub").read_text().split()[:2])
    bad_kh = tmp_path / "known_hosts"
    bad_kh.write_text(
        "\n".join(
            f"{name} {pub}" if not name.startswith("pod") else line
            for line in KNOWN_HOSTS.read_text().splitlines()
            for name in [line.split()[0]]
        )
        + "\n"
    )
    cp = run(["ssh", "-F", str(SSH_CONFIG), "-o", f"UserKnownHostsFile={bad_kh}", LOGIN, "true"], check=False)
    assert cp.returncode == 255 and "REMOTE HOST IDENTIFICATION HAS CHANGED" in cp.stderr, cp.stderr
    # and an unknown host key is refused too (StrictHostKeyChecking yes, no TOFU)
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    cp = run(["ssh", "-F", str(SSH_CONFIG), "-o", f"UserKnownHostsFile={empty}", LOGIN, "true"], check=False)
    assert cp.returncode == 255 and "Host key verification failed" in cp.stderr, cp.stderr


def test_mpirun_over_ssh_across_pods():
    assert shutil.which("mpirun"), "openmpi-bin missing: testbed/install.sh installs it"
    hosts = ",".join(f"{p}:1" for p in PODS[:2])
    cp = run(
        [
            "mpirun",
            "--allow-run-as-root",
            "-np",
            "2",
            "-H",
            hosts,
            "--mca",
            "plm_rsh_agent",
            f"ssh -F {SSH_CONFIG}",
            "--mca",
            "oob_tcp_if_include",
            "10.200.0.0/24",
            "--mca",
            "btl_tcp_if_include",
            "10.200.0.0/24",
            "--mca",
            "btl",
            "tcp,self",
            "hostname",
        ],
        timeout=60,
    )
    assert sorted(cp.stdout.split()) == sorted(PODS[:2]), cp.stdout
