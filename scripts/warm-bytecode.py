"""Write the bytecode of what the suite's jobs and tests import, by importing it once.

  python scripts/warm-bytecode.py         # everything below
  python scripts/warm-bytecode.py torch   # torch and torch._dynamo alone (setup-dev.sh, while pip
                                          # installs the rest: hpc_launch is not installed yet)

scripts/test.sh runs this instead of `compileall` over site-packages (scripts/setup-dev.sh without
HPC_SETUP_COMPILE): the jobs import about 5,000 of the venv's 17,000 modules, and compiling just
those on their first import took 10.5 CPU-s here against 39 CPU-s for all of them, on one core
beside mypy instead of both (torch's own, the largest part, were mostly written by setup-dev.sh while
pip installed the rest). It runs before the test lanes start: four lanes importing torch at once
would each compile the same modules. What it leaves out compiles on its first import (the tests run
with bytecode writing on).
"""

from __future__ import annotations

import sys

if sys.flags.dont_write_bytecode:
    raise SystemExit("warm-bytecode: PYTHONDONTWRITEBYTECODE is set, so importing would write nothing")

import torch  # noqa: E402 - after the check above

# An optimizer's first use imports torch._dynamo (and sympy): every training rank pays it
torch.optim.AdamW([torch.zeros(1, requires_grad=True)]).step()
if sys.argv[1:] == ["torch"]:
    raise SystemExit(0)

from hpc_launch.train.tv_compat import import_torchvision  # noqa: E402

import_torchvision()  # as every rank that uses torchvision (its CPU-only wheel needs this)

import accelerate  # noqa: E402,F401
import deepspeed  # noqa: E402,F401
import lightning.pytorch  # noqa: E402,F401
import torch.utils.tensorboard  # noqa: E402,F401
import transformers  # noqa: E402,F401
import wandb  # noqa: E402,F401
from transformers import Trainer  # noqa: E402,F401

import hpc_launch.cli.app  # noqa: E402,F401
import hpc_launch.train.trainer  # noqa: E402,F401
