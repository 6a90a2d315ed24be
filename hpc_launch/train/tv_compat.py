"""Import torchvision on machines where its compiled extension cannot load.

The registry's torchvision wheel ships a CUDA-linked `_C.so`. On a CPU-only machine it fails
to load, and `import torchvision` then dies with `operator torchvision::nms does not exist`,
because `torchvision/_meta_registrations.py` registers fake kernels for `nms`/`qnms` without
checking that the extension loaded. Defining just those op schemas (no kernels) lets the
import finish: models, transforms, datasets work; `torchvision.ops.nms` and `torchvision.io`
decoding still do not (we decode with PIL). When `_C` loads (every GPU cluster) this is a no-op.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys

# Schemas of the ops that torchvision registers fake kernels for unconditionally
# (copied from torchvision's csrc/ops/nms.cpp and the quantized nms kernel).
_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}

_schema_lib = None  # keep the Library object alive: dropping it unregisters the schemas
patched = False  # True when the fallback was needed (reported by `python -m hpc_launch.train --version`)


def _extension_loads() -> bool:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return False
    import torch

    for path in glob.glob(os.path.join(spec.submodule_search_locations[0], "_C*")):
        try:
            torch.ops.load_library(path)
            return True
        except (OSError, ImportError, RuntimeError):
            return False
    return False


def _op_exists(name: str) -> bool:
    import torch

    try:
        torch._C._dispatch_find_schema_or_throw(f"torchvision::{name}", "")
        return True
    except RuntimeError:
        return False


def import_torchvision():
    """`import torchvision`, registering the missing op schemas first when `_C` cannot load."""
    global _schema_lib, patched
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"]
    if not _extension_loads():
        import torch

        missing = [n for n in _SCHEMAS if not _op_exists(n)]
        if missing:
            _schema_lib = torch.library.Library("torchvision", "FRAGMENT")
            for name in missing:
                _schema_lib.define(_SCHEMAS[name])
            patched = True
    import torchvision

    return torchvision
