"""States read from a real scheduler on the testbed (issue 28): Grid Engine's error state."""

from __future__ import annotations

import pytest

from e2e_support import make_cli

pytestmark = [pytest.mark.scheduler]


@pytest.mark.beside
def test_gridengine_error_state_ends_a_follow_naming_the_users_fix(hpc_launch_bin, testbed, shared_workdir):
    # an output file Grid Engine cannot open puts the job in Eqw (recorded: testbed_sge_*eqw_output.txt)
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed["HPC_TESTBED_SGE_BIN"])
    job = cli.submit("--cluster", "tb-sge", "--nodes", "1", "--directive", "-o /nonexistent/out.log")
    try:
        r = cli("logs", "-f", job, timeout=120)
        assert r.returncode == 1, r.stderr[-2000:]
        assert f"job {job} will never run as it is: error state (Eqw)" in r.stderr
        assert 'can\'t open output file "/nonexistent/out.log"' in r.stderr and f"`qmod -cj {job}`" in r.stderr
        assert "fewer nodes" not in r.stderr
    finally:
        cli("cancel", job)
