"""The job script's rendezvous port: the first free one on the node from the profile's port_base,
run under bash against real sockets (templates/body/rendezvous.sh.j2)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from hpc_launch.site import profiles
from hpc_launch.render import render
from hpc_launch.spec import JobSpec, resolve

PORT_BASE = 29500  # the local profile's (the default)


def _rendezvous_part(**spec) -> str:
    job = resolve(
        JobSpec(cluster="local", nodes=1, workdir="/work/project", **spec),
        profiles.load("local"),
        cwd="/work/project",
    )
    text = render(job, stamp="s").text
    start = text.index("# --- rendezvous ---")
    return text[start : text.index("# --- launch", start)]


def _run(part: str, tmp_path, job_num: str, env=None) -> subprocess.CompletedProcess:
    hostfile = tmp_path / f"hostfile_{job_num}"
    hostfile.write_text("localhost slots=2\n")
    script = f"set -Eeuo pipefail\nHOSTFILE={hostfile}\nJOB_ID={job_num}\nJOB_NUM={job_num}\nWORLD_SIZE=2\n{part}"
    # the script's `python` is the job's: here, this interpreter
    path = f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"
    run_env = {**os.environ, "PATH": path, "HPC_LAUNCH_PORT_DIR": str(tmp_path / "ports"), **(env or {})}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, env=run_env)


def _port(result: subprocess.CompletedProcess) -> int:
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if "MASTER_PORT=" in x)
    return int(line.split("MASTER_PORT=")[1].split()[0])


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def test_a_port_held_on_the_node_is_skipped_for_a_free_one(tmp_path):
    part = _rendezvous_part(venv=os.path.dirname(os.path.dirname(sys.executable)))
    # the job's first port (port_base + jobnum % 1000) is held by another program
    taken = next(p for p in range(PORT_BASE + 500, PORT_BASE + 1000) if _free(p))
    with socket.socket() as held:
        held.bind(("", taken))
        held.listen(1)
        port = _port(_run(part, tmp_path, job_num=str(7000 + taken - PORT_BASE)))
        assert port != taken
        assert PORT_BASE <= port < PORT_BASE + 1000  # port_base still names the range
        assert _free(port)


def test_jobs_starting_together_get_distinct_ports(tmp_path):
    """40 jobs whose numbers agree mod 1000 start at once, none binding its port: each is told a different one."""
    part = _rendezvous_part(venv=os.path.dirname(os.path.dirname(sys.executable)))
    with ThreadPoolExecutor(8) as pool:
        ports = list(pool.map(lambda i: _port(_run(part, tmp_path, job_num=str(1234 + 1000 * i))), range(40)))
    assert len(set(ports)) == 40, sorted(ports)
    assert all(PORT_BASE <= p < PORT_BASE + 1000 for p in ports)


def test_master_port_from_env_is_kept(tmp_path):
    part = _rendezvous_part(venv=os.path.dirname(os.path.dirname(sys.executable)), env={"MASTER_PORT": "31234"})
    assert _port(_run(part, tmp_path, job_num="5", env={"MASTER_PORT": "31234"})) == 31234


def test_without_hpc_launch_on_the_node_the_first_port_is_used_and_said(tmp_path):
    part = _rendezvous_part(venv=os.path.dirname(os.path.dirname(sys.executable)))
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").write_text("#!/bin/sh\necho 'No module named hpc_launch' >&2\nexit 1\n")
    (bare / "python").chmod(0o755)
    result = _run(part, tmp_path, job_num="4321", env={"PATH": f"{bare}:/usr/bin:/bin"})
    assert _port(result) == PORT_BASE + 321
    assert "using 29821" in result.stderr and "No module named" not in result.stderr
