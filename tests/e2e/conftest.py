"""End-to-end fixtures: the REAL testbed (testbed/up.sh) and a work dir the pods share."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from e2e_support import testbed_env


@pytest.fixture(scope="session")
def testbed() -> dict:
    env = testbed_env()
    alive = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    if alive.returncode != 0:
        pytest.fail(
            "the testbed is not running: start it with `testbed/install.sh && testbed/up.sh` (the test command does)"
        )
    return env


@pytest.fixture
def shared_workdir(testbed, tmp_path_factory) -> Path:
    """A work dir on the filesystem the pods share (jobs run there)."""
    base = Path(testbed["HPC_TESTBED_WORK"])
    base.mkdir(parents=True, exist_ok=True)
    d = Path(
        subprocess.run(
            ["mktemp", "-d", f"{base}/e2e.XXXXXX"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    d.chmod(0o755)
    return d


def pytest_collection_modifyitems(items):
    """`gridengine` marks every end-to-end test that needs the testbed's Grid Engine: those that
    submit to tb-sge or drive Grid Engine's own commands (select with -m gridengine / not gridengine)."""
    for item in items:
        if "/e2e/" in str(item.fspath) and (
            "tb-sge" in item.nodeid or "gridengine" in item.name or "grid_engine" in item.name
        ):
            item.add_marker(pytest.mark.gridengine)
