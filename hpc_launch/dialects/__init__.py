"""The scheduler registry: one module per dialect, one line here per dialect.

Nothing outside this package compares a dialect's name: code asks the dialect object
(`has_scheduler`, `query`, `exit_state`, ...) and validation and CLI choices come from `names()`.
"""

from __future__ import annotations

from typing import List

from .base import CancelOutcome, Dialect, StatusInfo, with_site_commands
from .cobalt import Cobalt
from .gridengine import GridEngine
from .none import NoScheduler
from .pbspro import PBSPro
from .slurm import Slurm

_DIALECTS = {d.name: d for d in (PBSPro(), GridEngine(), Cobalt(), Slurm(), NoScheduler())}


def get(name: str) -> Dialect:
    return _DIALECTS[name]


def names() -> List[str]:
    return list(_DIALECTS)


def all_dialects() -> List[Dialect]:
    return list(_DIALECTS.values())


__all__ = ["CancelOutcome", "Dialect", "StatusInfo", "all_dialects", "get", "names", "with_site_commands"]
