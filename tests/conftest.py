"""Shared test set-up: every test gets its own config and state dirs, never the user's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory, monkeypatch):
    base = tmp_path_factory.mktemp("hpc-launch-home")
    monkeypatch.setenv("HPC_LAUNCH_CONFIG_DIR", str(base / "config"))
    monkeypatch.setenv("HPC_LAUNCH_STATE_DIR", str(base / "state"))
    monkeypatch.delenv("HPC_LAUNCH_CLUSTERS_DIR", raising=False)
    from hpc_launch.site import profiles

    profiles._discover.cache_clear()
    yield
    profiles._discover.cache_clear()


@pytest.fixture
def hpc_launch_bin() -> str:
    path = VENV_BIN / "hpc-launch"
    assert path.exists(), f"{path} missing: install the package (pip install -e .)"
    return str(path)


# ---- a real sshd on 127.0.0.1 and the same test body over both transports ------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from sshd import start_sshd

    handle = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def shared_ssh(server):
    from hpc_launch.transport import SSHTransport

    t = SSHTransport(server.alias, ssh_config=str(server.ssh_config))
    yield t
    t.close()


@pytest.fixture(params=["local", "ssh"])
def transport(request):
    from hpc_launch.transport import LocalTransport

    return LocalTransport() if request.param == "local" else request.getfixturevalue("shared_ssh")


@pytest.fixture
def notify_sandbox(tmp_path):
    """For the --notify tests (test_notify*.py): a work dir with a script that ends well and one that
    fails (exit 3), an environment with no scheduler and its own state and config dirs; the job store."""
    from envutil import scheduler_env_cleared

    env = scheduler_env_cleared()
    env.update(HPC_LAUNCH_STATE_DIR=str(tmp_path / "state"), HPC_LAUNCH_CONFIG_DIR=str(tmp_path / "config"))
    env.pop("HPC_LAUNCH_NOTIFY", None)
    work = tmp_path / "work"
    work.mkdir()
    (work / "ok.py").write_text("print('ran', flush=True)\n")
    (work / "fail.py").write_text("import sys\nprint('ran', flush=True)\nsys.exit(3)\n")
    return work, env, tmp_path / "state" / "jobs.sqlite"
