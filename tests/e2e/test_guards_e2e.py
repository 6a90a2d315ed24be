"""On the real testbed: a job whose node list has fewer distinct hosts than it asked for refuses
to launch (issue 7 B2: real PBS Pro packed two chunks on one host and the job "succeeded" on
one node). The shortfall is made the way a site's profile does it: a directive that gives fewer
nodes than the job asks for (a user's --directive that does so is refused before submitting)."""

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


def _one_node(tmp_path, base: str, lines) -> list:
    """A profile like `base` whose node-count directive gives one node, and the options naming it."""
    path = tmp_path / "one-node.yaml"
    path.write_text(f"name: one-node\nextends: {base}\ndirectives:\n" + "".join(f"  - {x!r}\n" for x in lines))
    return ["--cluster", "one-node", "--profile", str(path)]


def test_slurm_job_given_fewer_nodes_than_asked_refuses(hpc_launch_bin, testbed, shared_workdir, tmp_path):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir)
    lines = ["--job-name={name}", "--partition={queue}", "--nodes=1", "--ntasks-per-node={procs_per_node}"]
    lines += ["--time={walltime}", "--output={name}.o%j"]
    job_id = cli.submit(*_one_node(tmp_path, "tb-slurm", lines), "--nodes", "2")
    _refused(cli, job_id, shared_workdir, f"train.o{job_id}")


def test_pbs_job_given_fewer_nodes_than_asked_refuses(hpc_launch_bin, testbed, shared_workdir, tmp_path):
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed["HPC_TESTBED_PBS_BIN"])
    lines = ["-q {queue}", "-l select=1:ncpus=1:mpiprocs=1", "-l walltime={walltime}", "-N {name}", "-j oe"]
    job_id = cli.submit(*_one_node(tmp_path, "tb-pbs", lines), "--nodes", "2")
    _refused(cli, job_id, shared_workdir, f"train.o{job_id}")
