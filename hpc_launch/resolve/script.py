"""What the job runs and where: the training arguments, the work directory, and the Python
environment (a venv or conda env) the ranks start in."""

from __future__ import annotations

import os
import sys
from typing import List, Optional, Tuple

from ..errors import SpecError
from ..site.profiles import Profile
from ..protocol import LOCAL_HOST
from ..spec import JobSpec
from .common import CONTROL


def train_args_of(spec: JobSpec, p: Profile) -> List[str]:
    """--train-args, else the profile's: they belong to `python -m hpc_launch.train`, so a --script
    of the user's gets none."""
    default_args = [] if spec.script else p.train_args
    train_args = list(default_args if spec.train_args is None else spec.train_args)
    for arg in train_args:
        if "\x00" in arg:
            raise SpecError("a training argument contains a NUL byte")
    return train_args


def workdir_of(spec: JobSpec, cwd: Optional[str]) -> str:
    workdir = spec.workdir or cwd or os.getcwd()
    if CONTROL.search(workdir):
        raise SpecError(
            "the work directory path contains a newline or control character",
            hint="run from, or pass --workdir, a plain path",
        )
    return workdir


def python_env_of(spec: JobSpec, p: Profile, host: str) -> Tuple[Optional[str], Optional[str]]:
    """The venv and conda env the job activates (`venv: auto`: the one hpc-launch runs in)."""
    venv = spec.venv or p.python.venv
    if venv == "auto":
        venv = running_venv()
    conda = spec.conda or p.python.conda
    if p.python.env_required and not (venv or conda):
        venv = submitting_venv(p, host)
    return venv, conda


def running_venv() -> Optional[str]:
    """The virtualenv hpc-launch itself runs in, if any."""
    return sys.prefix if sys.prefix != getattr(sys, "base_prefix", sys.prefix) else None


def submitting_venv(p: Profile, host: str) -> str:
    """A site whose python3 has no torch, and no env given: the venv hpc-launch runs in, when the
    job is submitted from this machine (the login node), said on stderr; otherwise refuse."""
    from ..paths import user_config_dir

    active = running_venv()
    if active and host == LOCAL_HOST:
        sys.stderr.write(
            f"hpc-launch: no --venv given: the job activates {active}, the virtualenv hpc-launch runs in\n"
        )
        return active
    override = user_config_dir() / "clusters" / f"{p.name}.yaml"
    raise SpecError(
        f"{p.name} jobs would run the system python3, which has no torch",
        hint=f"pass --venv PATH (a virtualenv on {p.name}), or set python.venv in {override}",
    )
