"""paths.user_dir reads the XDG rule itself on Linux (platformdirs' import is ~3 ms of a dry-run):
it must give platformdirs' answer for every way the variables can be set (elsewhere it asks
platformdirs, so the same assertion holds there too)."""

from __future__ import annotations

import platformdirs
import pytest

from hpc_launch import paths

KINDS = {"config": "XDG_CONFIG_HOME", "cache": "XDG_CACHE_HOME", "state": "XDG_STATE_HOME"}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("value", [None, "", "   ", "/tmp/xdg base", "relative/dir", "/trailing/", "~/x"])
@pytest.mark.parametrize("home", ["abs", "/", "relative", None])
def test_the_xdg_rule_gives_platformdirs_answer(monkeypatch, tmp_path, kind, value, home):
    if home is None:
        monkeypatch.delenv("HOME", raising=False)  # both read the password database
    else:
        monkeypatch.setenv("HOME", str(tmp_path / "home") if home == "abs" else home)
    monkeypatch.delenv("ANDROID_DATA", raising=False)
    if value is None:
        monkeypatch.delenv(KINDS[kind], raising=False)
    else:
        monkeypatch.setenv(KINDS[kind], value)
    expected = getattr(platformdirs, f"user_{kind}_dir")("hpc-launch")
    assert paths.user_dir(kind) == type(paths.user_dir(kind))(expected)


def test_the_overrides_win(monkeypatch, tmp_path):
    monkeypatch.setenv("HPC_LAUNCH_CONFIG_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("HPC_LAUNCH_STATE_DIR", str(tmp_path / "s"))
    assert paths.user_config_dir() == tmp_path / "c"
    assert paths.store_path() == tmp_path / "s" / "jobs.sqlite"
