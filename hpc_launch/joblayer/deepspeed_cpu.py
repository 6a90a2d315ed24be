"""DeepSpeed's start without a compiler where the run needs none, and a word before any JIT build.

Applied by the job layer to a user's DeepSpeed as it is imported (after_import.py) and by the
shipped entrypoint (hpc_launch/train/ds_startup.py) alike: the one home of both.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any, Callable, Optional
from hpc_launch.one_line import say_ours


def _on_cpu() -> bool:
    from deepspeed.accelerator import get_accelerator

    return bool(get_accelerator().device_name() == "cpu")


def skip_shm_comm_op(ds_torch: Optional[ModuleType] = None, on_cpu: Callable[[], bool] = _on_cpu) -> None:
    """Keep DeepSpeed's CPU backend from compiling its shared-memory all-reduce op at init.

    deepspeed 0.19.8's TorchBackend builds `shm_comm` (ninja, 25-70 s the first time in an
    environment, a build check and a 66 MiB /dev/shm segment per rank, never unlinked, on every
    start after) for `inference_all_reduce` alone: training's collectives go through gloo, and
    without the op that one falls back to gloo too (deepspeed/comm/torch.py). Decided when the op
    would be built (the accelerator is known by then): on a GPU DeepSpeed's own function runs."""
    # by its module name: the attribute deepspeed.comm.torch is the torch package itself
    module: Any = ds_torch if ds_torch is not None else importlib.import_module("deepspeed.comm.torch")
    build = getattr(module, "build_shm_op", None)
    if not callable(build) or getattr(build, "hpc_launch_skip", False):
        return

    def build_shm_op_unless_on_cpu() -> Any:
        return None if on_cpu() else build()

    build_shm_op_unless_on_cpu.hpc_launch_skip = True  # type: ignore[attr-defined]
    module.build_shm_op = build_shm_op_unless_on_cpu


def extensions_dir(env: Any = os.environ) -> str:
    """Where torch's JIT builds go (torch.utils.cpp_extension: $TORCH_EXTENSIONS_DIR, else ~/.cache)."""
    return env.get("TORCH_EXTENSIONS_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "torch_extensions")


def announce_jit_builds(builder_module: Any) -> None:
    """One line before DeepSpeed JIT-loads an op (ninja compiles it unless a build is cached):
    a first start that sits silent for minutes otherwise looks hung."""
    op_builder = getattr(builder_module, "OpBuilder", None)
    jit_load = getattr(op_builder, "jit_load", None)
    if op_builder is None or not callable(jit_load) or getattr(jit_load, "hpc_launch_said", False):
        return

    def jit_load_said(self: Any, *args: Any, **kwargs: Any) -> Any:
        say_ours(
            f"DeepSpeed JIT-loads its {getattr(self, 'name', '?')} op: ninja compiles it unless "
            f"{extensions_dir()} holds a build (minutes the first time in an environment)"
        )
        return jit_load(self, *args, **kwargs)

    jit_load_said.hpc_launch_said = True  # type: ignore[attr-defined]
    op_builder.jit_load = jit_load_said
