"""What a rendered script refuses to do, run for real in bash with stand-ins for the scheduler's
environment and the launcher: fewer hosts than asked (PBS packing chunks on one host), a
missing network interface. And the files an earlier job with the same number left behind.
"""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import msgspec
import pytest

from hpc_launch.site import profiles
from hpc_launch.logs import LogTail, read_exit_code
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve
from hpc_launch.transport import LocalTransport

LAUNCHED = "launcher ran"


@pytest.fixture
def stubs(tmp_path):
    d = tmp_path / "stubs"
    d.mkdir()
    for name in ("mpirun", "deepspeed", "mpiexec", "srun", "torchrun"):
        p = d / name
        p.write_text(f"#!/bin/sh\necho '{LAUNCHED}'\n")
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    # the job asks python where the shipped entrypoint is
    (d / "python").write_text("#!/bin/sh\necho /site-packages/hpc_launch/train_entry.py\n")
    (d / "python").chmod(0o755)
    (d / "venv" / "bin").mkdir(parents=True)
    (d / "venv" / "bin" / "activate").write_text("# stand-in\n")
    return d


def _script(cluster: str, tmp: Path, stubs: Path, **spec) -> Path:
    # no site module system here: the site's `module` init line and loads are left out
    profile = profiles.load(cluster)
    profile = msgspec.structs.replace(
        profile, modules=profiles.Modules(), python=msgspec.structs.replace(profile.python, modules=[])
    )
    job = resolve(
        JobSpec(cluster=cluster, workdir=str(tmp), venv=str(stubs / "venv"), group="g1", modules=[], **spec), profile
    )
    path = tmp / "job.sh"
    path.write_text(render(job, stamp="t").text)
    return path


def _run(path: Path, tmp: Path, stubs: Path, **env):
    base = {"PATH": f"{stubs}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp)}
    return subprocess.run(["bash", str(path)], cwd=tmp, env={**base, **env}, capture_output=True, text=True, timeout=30)


def test_pbs_script_refuses_when_chunks_were_packed_on_one_host(tmp_path, stubs):
    """Observed on real PBS Pro (pbspro-observed 108-109): select=2 without place=scatter gave
    `exec_host = pbshead/3+pbshead/4`; the node file names one host. Before, the job trained on
    one node and was reported done."""
    nodefile = tmp_path / "nodes"
    nodefile.write_text("pbshead\n" * 16)  # one line per mpiproc, all on the same host
    path = _script("abci", tmp_path, stubs, nodes=2)
    r = _run(path, tmp_path, stubs, PBS_JOBID="51.pbshead", PBS_NODEFILE=str(nodefile))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "node list has 1 distinct host(s) but the job asked for 2" in r.stderr
    assert LAUNCHED not in r.stdout
    assert (tmp_path / "train.o51.exitcode").read_text().split()[0] == "3"


def test_pbs_script_launches_when_every_node_is_there(tmp_path, stubs):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("pbshead\n" * 8 + "pbsmom2\n" * 8)
    path = _script("polaris", tmp_path, stubs, nodes=2)
    r = _run(path, tmp_path, stubs, PBS_JOBID="52.pbshead", PBS_NODEFILE=str(nodefile))
    assert LAUNCHED in r.stdout, r.stderr


def test_slurm_script_refuses_fewer_hosts_than_asked(tmp_path, stubs):
    path = _script("slurm", tmp_path, stubs, nodes=3)
    r = _run(path, tmp_path, stubs, SLURM_JOB_ID="9", SLURM_JOB_NODELIST="n[1-2]")
    assert r.returncode == 3 and "has 2 distinct host(s) but the job asked for 3" in r.stderr
    assert LAUNCHED not in r.stdout


def test_missing_network_interface_names_the_profile_key_and_the_nodes_interfaces(tmp_path, stubs):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("pbshead\n")
    path = _script("abci", tmp_path, stubs, nodes=1)  # net_if: bond0, which this machine lacks
    assert not Path("/sys/class/net/bond0").exists()
    r = _run(path, tmp_path, stubs, PBS_JOBID="53.pbshead", PBS_NODEFILE=str(nodefile))
    assert r.returncode == 3, r.stdout + r.stderr
    line = [ln for ln in r.stderr.splitlines() if "net_if" in ln]
    assert line and "'bond0'" not in line[0] and "bond0 (profile key net_if)" in line[0]
    assert "lo" in line[0].split("this node has:")[1].split()
    assert LAUNCHED not in r.stdout


# ---- an earlier job with the same number in the same work dir ------------------------------


def _job_line(script: str) -> str:
    return f"[hpc-launch] job 7 on pod1 at 2026-11-22T10:00:00+0000, 1 node(s) x 2 rank(s), script {script}\n"


def test_follow_skips_an_earlier_jobs_log_until_this_job_writes(tmp_path):
    log = tmp_path / "train.o7"
    log.write_text(_job_line("train-old.sh") + "old step 1 loss 9\n")
    tail = LogTail(LocalTransport(), str(log), "train-new.sh")
    assert tail.read_new() == "" and not tail.exists
    log.write_text(_job_line("train-new.sh") + "new step 1\n")  # the scheduler truncates at start
    assert tail.read_new() == _job_line("train-new.sh") + "new step 1\n"


def test_follow_of_an_appended_live_log_starts_at_this_jobs_first_line(tmp_path):
    log = tmp_path / "train.o7.live"
    log.write_text(_job_line("train-old.sh") + "old line\n" + _job_line("train-new.sh") + "new line\n")
    tail = LogTail(LocalTransport(), str(log), "train-new.sh")
    assert tail.read_new() == _job_line("train-new.sh") + "new line\n"
    with log.open("a") as fh:
        fh.write("more\n")
    assert tail.read_new() == "more\n"


def test_a_log_without_any_job_line_yet_is_shown(tmp_path):
    log = tmp_path / "train.o7"
    log.write_text("site prologue: welcome\n")
    assert LogTail(LocalTransport(), str(log), "train-new.sh").read_new() == "site prologue: welcome\n"


def test_an_earlier_jobs_exit_code_file_is_not_this_jobs(tmp_path):
    path = tmp_path / "train.o7.exitcode"
    path.write_text("0 train-old.sh\n")
    t = LocalTransport()
    assert read_exit_code(t, str(path), "train-new.sh") is None
    path.write_text("3 train-new.sh\n")
    assert read_exit_code(t, str(path), "train-new.sh") == 3
    path.write_text("0\n")  # written by an older hpc-launch: no name to compare
    assert read_exit_code(t, str(path), "train-new.sh") == 0


@pytest.mark.parametrize(
    "verdict, launcher_exit, job_exit", [(124, 143, 124), (78, 1, 78), (None, 143, 143), (124, 0, 0)]
)
def test_the_job_ends_with_the_code_a_rank_reported_not_the_launchers(
    tmp_path, stubs, verdict, launcher_exit, job_exit
):
    """Seen on the testbed: the watchdog's rank exited 124, srun then terminated the other ranks and
    returned 143, and the job was reported as killed by a SIGTERM nobody sent."""
    import sys

    report = (
        f'"{sys.executable}" -c "from hpc_launch import protocol; protocol.report_verdict({verdict})"\n'
        if verdict
        else ""
    )
    (stubs / "mpiexec").write_text(f"#!/bin/sh\n{report}exit {launcher_exit}\n")
    nodefile = tmp_path / "nodes"
    nodefile.write_text("x1\nx2\n")
    path = _script("polaris", tmp_path, stubs, nodes=2)
    r = _run(
        path,
        tmp_path,
        stubs,
        PBS_JOBID="77.polaris-pbs-01",
        PBS_NODEFILE=str(nodefile),
        PYTHONPATH=str(Path(__file__).parents[1]),
    )
    assert r.returncode == job_exit, r.stderr
    assert (tmp_path / "train.o77.exitcode").read_text().split()[0] == str(job_exit)
