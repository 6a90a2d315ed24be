"""Miyabi's launch line under a real Open MPI with OMPI_MCA_mca_base_env_list set.

On Miyabi, `module load nv-hpcx` sets OMPI_MCA_mca_base_env_list, and Open MPI 4 refuses to
start when that variable and `mpirun -x` are used together; public Miyabi job scripts unset it
before mpirun, and so does the Miyabi profile (`launch.unset_env`). Debian 12's Open MPI 4.1.4
(the testbed's) refuses the mix the same way ("Open MPI does not support mixing these two
methods"): the control job below, rendered without the unset, shows it, and the job rendered
with Miyabi's `unset_env` trains across two pods through the same mpirun + torchrun line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from e2e_support import SIDE_QUEUE, make_cli

from hpc_launch.site import profiles

pytestmark = [pytest.mark.scheduler, pytest.mark.side]


def _profile(tmp_path: Path, name: str, unset) -> Path:
    # tb-pbs-torchrun is Miyabi's route (mpirun starts one torchrun per node, -x forwards the
    # environment) on the testbed's PBS dialect; the modules line stands in for `module load nv-hpcx`.
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nextends: tb-pbs-torchrun\ntitle: testbed PBS, Miyabi's launch line with nv-hpcx's env list\n"
        'modules: {init: "export OMPI_MCA_mca_base_env_list=HPC_LAUNCH_ENV_LIST_PROBE"}\n'
        f"launch: {{unset_env: {json.dumps(list(unset))}}}\n"
    )
    return path


def test_miyabi_launch_line_runs_with_nv_hpcx_env_list_set(hpc_launch_bin, testbed, shared_workdir, tmp_path):
    unset = profiles.load("miyabi").launch.unset_env
    assert unset == ["OMPI_MCA_mca_base_env_list"]
    cli = make_cli(hpc_launch_bin, testbed, shared_workdir, path_first=testbed["HPC_TESTBED_PBS_BIN"])

    # control: without the unset, Debian's Open MPI aborts before any rank starts
    bad = _profile(tmp_path, "tb-envlist-kept", [])
    job_id = cli.submit(
        "--profile", str(bad), "--cluster", "tb-envlist-kept", "--nodes", "2", "--name", "kept", *SIDE_QUEUE
    )
    r = cli("logs", "-f", job_id, timeout=300)
    assert r.returncode != 0, r.stdout[-2000:]
    assert "mixing these two methods" in r.stdout, r.stdout[-3000:]

    # Miyabi's unset_env: the same launch line trains across both pods
    good = _profile(tmp_path, "tb-envlist-unset", unset)
    job_id = cli.submit(
        "--profile", str(good), "--cluster", "tb-envlist-unset", "--nodes", "2", "--name", "unset", *SIDE_QUEUE
    )
    r = cli("logs", "-f", job_id, timeout=400)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-2000:])
    assert re.search(r"\[hpc-train\] step=4 .*world_size=2", r.stdout), r.stdout[-3000:]
    script = next(shared_workdir.glob(".hpc-launch/unset-*.sh")).read_text()
    lines = script.splitlines()
    assert lines.index("unset OMPI_MCA_mca_base_env_list") < next(
        i for i, line in enumerate(lines) if line.startswith("mpirun ")
    )
