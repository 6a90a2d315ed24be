"""--failover N (issue 32): --spares N plus a loop around the launch that, when the pre-flight
gate or the watchdog names a bad node, restarts the ranks on the healthy nodes plus a spare in the
same job. Refusals are one line; the loop is run for real in bash with a stand-in launcher."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess

import msgspec
import pytest

from hpc_launch.site import profiles
from hpc_launch.errors import SpecError
from hpc_launch.follow import host_lines
from hpc_launch.records import JobRecord
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve

CKPT = ["--steps", "50", "--checkpoint-dir", "ck"]


def _job(cluster: str, **given):
    given = {"nodes": 2, "failover": 1, "group": "g1", "workdir": "/w", "train_args": CKPT, **given}
    return resolve(JobSpec(cluster=cluster, **given), profiles.load(cluster))


@pytest.mark.parametrize(
    "cluster, given, words",
    [
        ("abci", {"train_args": ["--steps", "50"]}, "name no --checkpoint-dir"),
        ("abci", {"script": "run.py", "train_args": None}, "a --script resumes as it sees fit"),
        ("abci", {"failover": -1}, "--failover must be a whole number"),
        ("slurm", {}, "--failover: the srun launcher places ranks on every allocated node"),
        ("local", {}, "--failover needs a scheduler that allocates the nodes"),
        ("abci", {"stage_env": True}, "a spare swapped in has no node-local copy"),
    ],
)
def test_failover_is_refused_in_one_line_where_it_cannot_work(cluster, given, words):
    with pytest.raises(SpecError, match=words) as err:
        _job(cluster, **given)
    assert "\n" not in str(err.value)


def test_failover_holds_its_spares_and_a_chain_names_the_checkpoint_dir_itself():
    job = _job("abci")
    assert (job.failover, job.spares, job.alloc_nodes) == (1, 1, 3)
    assert _job("abci", failover=2, spares=1).spares == 2
    assert _job("abci", chain=2, train_args=["--steps", "50"]).failover == 1  # links resume from the chain's dir


@pytest.mark.parametrize("cluster", ["abci", "abci2", "thetagpu", "miyabi", "tb-pbs"])
def test_the_failover_loop_is_valid_bash_and_shellcheck_clean(cluster, tmp_path, monkeypatch):
    if cluster == "tb-pbs":  # DeepSpeed's pdsh launcher on a scheduler: the testbed's profile
        monkeypatch.setenv("HPC_LAUNCH_CLUSTERS_DIR", os.path.join(os.path.dirname(__file__), "e2e", "profiles"))
    text = render(_job(cluster), stamp="t").text
    assert "# --- --failover 1:" in text and "hpc_launch_spares_check\n" in text
    path = tmp_path / "job.sh"
    path.write_text(text)
    assert subprocess.run(["bash", "-n", str(path)]).returncode == 0
    assert shutil.which("shellcheck"), "shellcheck is required (apt-get install shellcheck)"
    out = subprocess.run(["shellcheck", "-S", "style", "-s", "bash", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_without_failover_the_launch_is_not_looped():
    text = render(_job("abci", failover=0, spares=1), stamp="t").text
    assert "--failover" not in text and "hpc_launch_spares_check" not in text


# ---- the loop, run for real in bash: a stand-in mpirun whose launches fail as told -----------


@pytest.fixture
def stubs(tmp_path):
    """ssh: every host answers. mpirun: launch K does what line K of $LAUNCHES says: `ok`,
    `hang HOST` (the watchdog's bad-host line and verdict, exit 124) or `fail` (exit 1, no host)."""
    d = tmp_path / "stubs"
    d.mkdir()
    (d / "ssh").write_text("#!/bin/sh\nexit 0\n")
    (d / "python").write_text("#!/bin/sh\necho 29500\n")
    (d / "mpirun").write_text(
        "#!/bin/bash\n"
        'n=$(( $(cat "$COUNT" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$COUNT"\n'
        'echo "launch $n on $(awk \'{print $1}\' "$HOSTFILE_SEEN" | paste -sd, -)"\n'
        'set -- $(sed -n "${n}p" "$LAUNCHES")\n'
        "case $1 in\n"
        "  ok) exit 0 ;;\n"
        '  hang) printf "%s\\twatchdog: rank 1 on %s made no step for 20 s\\n" "$2" "$2" >> "$HPC_LAUNCH_BAD_HOSTS"\n'
        '        echo 124 > "$HPC_LAUNCH_VERDICT"; exit 124 ;;\n'
        "  *) exit 1 ;;\n"
        "esac\n"
    )
    for f in d.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    (d / "venv" / "bin").mkdir(parents=True)
    (d / "venv" / "bin" / "activate").write_text("# stand-in\n")
    return d


def _run(tmp_path, stubs, launches, failover=1):
    """An abci (PBS, mpirun) job, --nodes 2 --failover N, on this host and n2..n4; (rc, output)."""
    profile = profiles.load("abci")
    profile = msgspec.structs.replace(
        profile, modules=profiles.Modules(), net_if=None, python=msgspec.structs.replace(profile.python, modules=[])
    )
    spec = JobSpec(
        cluster="abci",
        nodes=2,
        failover=failover,
        workdir=str(tmp_path),
        venv=str(stubs / "venv"),
        group="g1",
        modules=[],
        train_args=CKPT,
    )
    script = tmp_path / "job.sh"
    script.write_text(render(resolve(spec, profile), stamp="t").text)
    hosts = [socket.gethostname(), "n2", "n3", "n4"][: 2 + failover]
    (tmp_path / "nodes").write_text("".join(f"{h}\n" for h in hosts))
    (tmp_path / "launches").write_text("\n".join(launches) + "\n")
    r = subprocess.run(
        ["bash", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": f"{stubs}:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(tmp_path),
            "PBS_JOBID": "61.pbshead",
            "PBS_NODEFILE": str(tmp_path / "nodes"),
            "COUNT": str(tmp_path / "count"),
            "LAUNCHES": str(tmp_path / "launches"),
            "HOSTFILE_SEEN": str(tmp_path / "hostfile_61"),
        },
    )
    return r.returncode, r.stdout + r.stderr


def _record() -> JobRecord:
    return JobRecord("61", "abci", "pbspro", "localhost", "train", "/w", "/w/s.sh", "/w/train.o61", "/w/x", 0.0)


def test_a_node_the_watchdog_names_is_swapped_for_the_spare_and_the_job_ends_done(tmp_path, stubs):
    rc, out = _run(tmp_path, stubs, ["hang n2", "ok"])
    here = socket.gethostname()
    assert rc == 0, out
    assert f"launch 1 on {here},n2" in out and f"launch 2 on {here},n3" in out, out
    assert (
        "[hpc-launch] failover: n2 swapped out for n3 (watchdog: rank 1 on n2 made no step for 20 s; exit 124;" in out
    )
    assert (tmp_path / "train.o61.exitcode").read_text().split()[0] == "0"
    # the summary names the node swapped out, and the nodes the job ended on
    lines = host_lines(_record(), out)
    assert f"  hosts     training on {here} n3 (1 spare node(s) held)" in lines, lines
    assert any(line.startswith("  failover  n2 swapped out for n3 (watchdog:") for line in lines), lines


def test_with_no_spare_left_the_job_ends_with_the_watchdogs_exit_as_without_failover(tmp_path, stubs):
    rc, out = _run(tmp_path, stubs, ["hang n2", "hang n3"])
    assert rc == 124, out
    assert "[hpc-launch] failover: n2 swapped out for n3" in out
    assert "[hpc-launch] failover: none: 1 swap(s) made, no spare left for n3; the job ends (exit 124)" in out
    assert (tmp_path / "count").read_text().strip() == "2"


def test_two_spares_take_two_swaps(tmp_path, stubs):
    rc, out = _run(tmp_path, stubs, ["hang n2", "hang n3", "ok"], failover=2)
    assert rc == 0, out
    assert "failover: n2 swapped out for n3" in out and "failover: n3 swapped out for n4" in out, out


def test_a_launch_that_fails_with_no_bad_node_named_ends_the_job_at_once(tmp_path, stubs):
    rc, out = _run(tmp_path, stubs, ["fail", "ok"])
    assert rc == 1, out
    assert (tmp_path / "count").read_text().strip() == "1" and "swapped out" not in out


def test_the_node_running_the_rendezvous_is_not_swapped(tmp_path, stubs):
    rc, out = _run(tmp_path, stubs, [f"hang {socket.gethostname()}", "ok"])
    assert rc == 124, out
    assert "runs the job script and the rendezvous; the job ends (exit 124)" in out


def test_a_pdsh_launch_kept_waiting_by_a_stopped_rank_is_stopped_and_the_spare_taken(tmp_path, stubs, monkeypatch):
    """DeepSpeed's pdsh launcher waits for every node's ranks, and a rank stopped with SIGSTOP never
    ends: once the watchdog has named its node, the loop stops the launch after the grace and swaps
    the node. The stand-in runner (`python -u -m hpc_launch.ds_runner`, the line's DeepSpeed runner)
    hangs after naming n2 as the watchdog would (no verdict file: .deepspeed_env does not carry its
    name); the stand-in pdsh ends it when asked to TERM the ranks."""
    monkeypatch.setenv("HPC_LAUNCH_CLUSTERS_DIR", os.path.join(os.path.dirname(__file__), "e2e", "profiles"))
    (stubs / "python").write_text(
        "#!/bin/bash\n"
        '[ "$3" = hpc_launch.ds_runner ] || { echo 29500; exit 0; }\n'
        'n=$(( $(cat "$COUNT" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$COUNT"\n'
        'echo "launch $n on $(awk \'{print $1}\' "$HOSTFILE_SEEN" | paste -sd, -)"\n'
        '[ "$n" -gt 1 ] && exit 0\n'
        'printf "n2\\twatchdog: rank 1 on n2 stopped\\n" >> "$HPC_LAUNCH_BAD_HOSTS"\n'
        'echo $$ > "$COUNT.pid"; exec sleep 120\n'
    )
    (stubs / "pdsh").write_text(
        "#!/bin/bash\n"
        'while [ $# -gt 1 ]; do [ "$1" = -w ] && hosts=$2; shift; done\n'
        'case "$1" in *-TERM*) kill "$(cat "$COUNT.pid")" ;; esac\n'
        'for h in ${hosts//,/ }; do echo "$h: hpc-launch-ok"; done\n'
    )
    for f in (stubs / "python", stubs / "pdsh"):
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    profile = profiles.load("tb-pbs")
    profile = msgspec.structs.replace(profile, net_if=None)
    spec = JobSpec(
        cluster="tb-pbs", nodes=2, failover=1, workdir=str(tmp_path), venv=str(stubs / "venv"), train_args=CKPT
    )
    script = tmp_path / "job.sh"
    script.write_text(render(resolve(spec, profile), stamp="t").text)
    (tmp_path / "nodes").write_text("".join(f"{h}\n" for h in (socket.gethostname(), "n2", "n3")))
    env = {
        "PATH": f"{stubs}:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(tmp_path),
        "PBS_JOBID": "62.pbshead",
        "PBS_NODEFILE": str(tmp_path / "nodes"),
        "COUNT": str(tmp_path / "count"),
        "HOSTFILE_SEEN": str(tmp_path / "hostfile_62"),
        "HPC_LAUNCH_FAILOVER_GRACE_S": "1",
        "VIRTUAL_ENV": str(stubs / "venv"),
    }
    r = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "[hpc-launch] failover: the launch did not end" in out and "stopping the ranks on" in out, out
    assert f"launch 2 on {socket.gethostname()},n3" in out, out
    assert "[hpc-launch] failover: n2 swapped out for n3 (watchdog: rank 1 on n2 stopped; exit 143;" in out
