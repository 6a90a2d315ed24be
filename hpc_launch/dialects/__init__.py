"""One module per scheduler dialect; each is a set of build-command / parse-output pairs."""

from __future__ import annotations

from .base import Dialect, StatusInfo, with_site_commands
from .cobalt import Cobalt
from .direct import Direct
from .gridengine import GridEngine
from .pbspro import PBSPro
from .slurm import Slurm

_DIALECTS = {d.name: d for d in (PBSPro(), GridEngine(), Cobalt(), Slurm(), Direct())}


def get(name: str) -> Dialect:
    return _DIALECTS[name]


__all__ = ["Dialect", "StatusInfo", "get", "with_site_commands"]
