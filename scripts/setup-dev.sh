#!/bin/bash
# Create .venv with hpc-launch (editable) and the pinned CPU training stack.
#   scripts/setup-dev.sh          # launcher + training payload
#   scripts/setup-dev.sh test     # ... plus what the tests need (transformers for the language models,
#                                 # tensorboard and wandb for the monitors, accelerate and lightning for
#                                 # the job layer's HF Trainer and Lightning adapters)
# Idempotent: a second run only checks. torch is installed first and alone so that nothing
# lets pip pick a newer (CUDA, multi-GB) torch.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=train
[ "${1:-}" = test ] && extras=train,lm,monitor,frameworks,test
py=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$py" -m venv .venv
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints-cpu.txt)
if ! .venv/bin/python -c 'import torch, deepspeed, torchvision' >/dev/null 2>&1; then
  "${pip[@]}" torch
fi
"${pip[@]}" -e ".[$extras]" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python - <<'PY'
import importlib
for mod in ("hpc_launch", "torch", "deepspeed", "torchvision"):
    importlib.import_module(mod) if mod != "torchvision" else importlib.import_module("hpc_launch.train.tv_compat")
print("set-up ok: .venv ready")
PY
