"""On the real testbed: a job whose node list has fewer distinct hosts than it asked for refuses
to launch (issue 7 B2: real PBS Pro packed two chunks on one host and the job "succeeded" on
one node). The shortfall is made the way a site does it: a directive that gives fewer nodes."""

from __future__ import annotations

import pytest

from e2e_support import make_cli

pytestmark = pytest.mark.scheduler


def _refused(cli, job_id: str, workdir, log_name: str):
    r = cli("logs", "-f", job_id, timeout=200)
    assert r.returncode == 3, (r.stdout[-2000:], r.stderr[-2000:])
    log = (workdir / log_name).read_text()
    assert "node list has 1 distinct host(s) but the job asked for 2; not launching" in log
    assert "[hpc-train]" not in log  # nothing trained
    assert cli.wait_state(job_id, {"failed"}, timeout=60) == "failed"


def test_slurm_job_given_fewer_nodes_than_asked_refuses(hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    job_id = cli.submit("--cluster", "tb-slurm", "--nodes", "2", "--directive", "--nodes=1")
    _refused(cli, job_id, shared_workdir, f"train.o{job_id}")


def test_pbs_job_given_fewer_nodes_than_asked_refuses(hpc_launch_bin, testbed, shared_workdir):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed["HPC_TESTBED_PBS_BIN"])
    job_id = cli.submit("--cluster", "tb-pbs", "--nodes", "2", "--directive", "-l select=1:ncpus=1:mpiprocs=1")
    _refused(cli, job_id, shared_workdir, f"train.o{job_id}")
