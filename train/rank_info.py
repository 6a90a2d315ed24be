"""Who this rank is, as its launcher said: what rank discovery (train/dist.py) finds and the
start-up check (train/preflight.py) and the watchdog read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    local_size: Optional[int]  # ranks on this node, when the launcher says
    source: str
