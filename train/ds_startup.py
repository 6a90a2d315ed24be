"""What DeepSpeed does at start-up that a training run does not need, kept off its path.

Every rank pays these, on every start of every job (and on a shared filesystem at scale, in
metadata lookups): each is a narrow stand-in for one piece of DeepSpeed that the run does not
use, chosen from what the run asked for, never a change to what it computes.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Mapping

# deepspeed 0.19.8 imports these from ZeRO's and the engine's set-up whatever the optimizer
MUON_MODULES = ("deepspeed.runtime.zero.muon.muon_optimizer", "deepspeed.runtime.zero.muon.original_muon")


def skip_shm_comm_op() -> None:
    """Keep DeepSpeed's CPU backend from compiling its shared-memory all-reduce op at init.

    deepspeed 0.19.8's TorchBackend builds `shm_comm` (ninja, 25-70 s the first time in an
    environment, a build check and a 66 MiB /dev/shm segment per rank, never unlinked, on every
    start after) for `inference_all_reduce` alone: training's collectives go through gloo, and
    without the op that one falls back to gloo too (deepspeed/comm/torch.py)."""
    # by its module name: the attribute deepspeed.comm.torch is the torch package itself
    ds_torch: Any = importlib.import_module("deepspeed.comm.torch")
    if callable(getattr(ds_torch, "build_shm_op", None)):
        ds_torch.build_shm_op = lambda: None


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
