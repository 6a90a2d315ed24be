"""What DeepSpeed does at start-up that a training run does not need, kept off its path.

Every rank pays these, on every start of every job (and on a shared filesystem at scale, in
metadata lookups): each is a narrow stand-in for one piece of DeepSpeed that the run does not
use, chosen from what the run asked for, never a change to what it computes.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Mapping

# its one home is the job layer's, which applies it to a user's own DeepSpeed too
from hpc_launch.joblayer.deepspeed_cpu import skip_shm_comm_op

__all__ = ["MUON_MODULES", "skip_muon_import", "skip_shm_comm_op", "uses_muon"]

# deepspeed 0.19.8 imports these from ZeRO's and the engine's set-up whatever the optimizer
MUON_MODULES = ("deepspeed.runtime.zero.muon.muon_optimizer", "deepspeed.runtime.zero.muon.original_muon")


class _MuonNotInUse:
    """Stands for MuonWithAuxAdam: no optimizer of this run is one."""


def _muon_update(*args: object, **kwargs: object) -> None:
    raise RuntimeError("hpc-train: Muon was called, but the run's DeepSpeed config asked for another optimizer")


def uses_muon(config: Mapping[str, Any]) -> bool:
    optimizer = config.get("optimizer")
    return isinstance(optimizer, Mapping) and "muon" in str(optimizer.get("type", "")).lower()


def skip_muon_import(config: Mapping[str, Any]) -> bool:
    """Keep DeepSpeed from importing its Muon optimizer when the run's optimizer is another.

    deepspeed 0.19.8 imports `muon_optimizer` in ZeRO's optimizer check and `original_muon` in
    ZeRO-1/2's gradient partitioning, only to ask `isinstance(optimizer, MuonWithAuxAdam)` and to
    reach `muon_update` for parameters marked `use_muon`; their `@compiler.compile()` pulls in
    torch._inductor (2.2 s of CPU per rank measured on a 2-core CPU machine, ~600 modules). With
    another optimizer, a class nothing is an instance of answers the same. Returns whether it did;
    a config that names Muon keeps DeepSpeed's own modules."""
    if uses_muon(config) or any(name in sys.modules for name in MUON_MODULES):
        return False
    optimizer = types.ModuleType(MUON_MODULES[0], "hpc-train: Muon is not this run's optimizer")
    optimizer.MuonWithAuxAdam = _MuonNotInUse  # type: ignore[attr-defined]
    update = types.ModuleType(MUON_MODULES[1], "hpc-train: Muon is not this run's optimizer")
    update.muon_update = _muon_update  # type: ignore[attr-defined]
    sys.modules[MUON_MODULES[0]] = optimizer
    sys.modules[MUON_MODULES[1]] = update
    return True
