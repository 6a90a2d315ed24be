"""The parsed-profile cache (profiles.ParsedCache): a cold dry-run neither parses YAML nor
imports the YAML library when no profile file changed, and an edit is always seen."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from hpc_launch.site import profiles

LOAD_AND_REPORT = (
    "import sys; from hpc_launch.site import profiles; p = profiles.load(sys.argv[1]); "
    "print(p.group.default or '-', 'yaml' in sys.modules)"
)


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    home = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))  # platformdirs' user_cache_dir on Linux
    monkeypatch.delenv("HPC_LAUNCH_NO_CACHE", raising=False)
    return home


def _load_in_new_process(name: str) -> tuple:
    out = subprocess.run(
        [sys.executable, "-c", LOAD_AND_REPORT, name], capture_output=True, text=True, check=True, env=os.environ.copy()
    )
    group, yaml_imported = out.stdout.split()
    return group, yaml_imported == "True"


def _age(path, seconds: float) -> None:
    """Make a file look untouched for a while: only then may the cache trust its stamp."""
    deadline = os.stat(path).st_ctime + seconds
    time.sleep(max(0.0, deadline - time.time()))


def test_second_run_reads_no_yaml(cache_home):
    shipped = profiles.clusters_dirs()[0] / "abci.yaml"
    _age(shipped, profiles.ParsedCache.RACY_NS / 1e9 + 0.1)
    assert _load_in_new_process("abci")[1] is True  # first run parses and fills the cache
    assert list(cache_home.rglob("profiles-*.marshal"))
    assert _load_in_new_process("abci")[1] is False  # second run: not even `import yaml`


def test_an_edit_of_the_same_size_is_seen(cache_home, tmp_path, monkeypatch):
    user = tmp_path / "config" / "clusters"
    user.mkdir(parents=True)
    monkeypatch.setenv("HPC_LAUNCH_CONFIG_DIR", str(tmp_path / "config"))
    override = user / "abci.yaml"
    override.write_text("group: {default: gaa00001}\n")
    _age(override, profiles.ParsedCache.RACY_NS / 1e9 + 0.1)
    assert _load_in_new_process("abci") == ("gaa00001", True)
    assert _load_in_new_process("abci")[0] == "gaa00001"
    override.write_text("group: {default: gbb00002}\n")  # same size, same inode
    assert _load_in_new_process("abci")[0] == "gbb00002"


def test_a_file_rewritten_within_one_clock_tick_is_never_trusted(cache_home, tmp_path, monkeypatch):
    user = tmp_path / "config" / "clusters"
    user.mkdir(parents=True)
    monkeypatch.setenv("HPC_LAUNCH_CONFIG_DIR", str(tmp_path / "config"))
    override = user / "abci.yaml"
    for value in ("gaa00001", "gbb00002", "gcc00003"):  # faster than the file clock ticks
        override.write_text(f"group: {{default: {value}}}\n")
        assert _load_in_new_process("abci")[0] == value


@pytest.mark.parametrize("damage", ["garbage", "unwritable"])
def test_a_broken_cache_only_costs_time(cache_home, damage):
    if damage == "garbage":
        target = cache_home / "hpc-launch"
        target.mkdir(parents=True)
        from hpc_launch import __version__

        (target / f"profiles-{__version__}.marshal").write_bytes(b"\xffgarbage")
    else:
        cache_home.write_text("a file where the cache dir should be")
    for _ in range(2):
        assert _load_in_new_process("abci")[0] == "-"
