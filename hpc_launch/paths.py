"""Where shipped data (profiles, templates) and user files live."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List

_PKG = Path(__file__).resolve().parent


def _shipped(sub: str) -> Path:
    # In a wheel the data sits inside the package (hatch force-include); in a checkout or an
    # editable install it sits at the repository root beside the package.
    inside = _PKG / sub
    return inside if inside.is_dir() else _PKG.parent / sub


def user_config_dir() -> Path:
    override = os.environ.get("HPC_LAUNCH_CONFIG_DIR")
    if override:
        return Path(override)
    from platformdirs import user_config_dir as _ucd  # small; only needed when no override

    return Path(_ucd("hpc-launch"))


def clusters_dirs() -> List[Path]:
    dirs = [_shipped("clusters"), user_config_dir() / "clusters"]
    extra = os.environ.get("HPC_LAUNCH_CLUSTERS_DIR")
    if extra:
        dirs += [Path(p) for p in extra.split(os.pathsep) if p]
    return dirs


def templates_dirs() -> List[Path]:
    # User templates first: a file of the same name overrides the shipped one.
    return [user_config_dir() / "templates", _shipped("templates")]
