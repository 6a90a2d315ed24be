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
# --no-compile: pip compiles every file it installs, one after the other (17,000 files here, 41 s
# of an 88-s set-up), most of which nothing imports; the packages a job imports are compiled below.
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check --no-compile -c constraints-cpu.txt)
if ! .venv/bin/python -c 'import torch, deepspeed, torchvision' >/dev/null 2>&1; then
  "${pip[@]}" torch
fi
# HPC_SETUP_COMPILE=0 (scripts/test.sh): torch's bytecode, torch._dynamo's
# included, is written on the core pip leaves idle while it installs the rest (~8 s of
# scripts/warm-bytecode.py's work moved there). A module pip is still writing meanwhile fails this
# import or gets bytecode that its source's new size and time invalidate: nothing here is relied on.
torch_warm=
if [ "${HPC_SETUP_COMPILE:-1}" = 0 ]; then  # (the script itself refuses where bytecode is not written)
  .venv/bin/python scripts/warm-bytecode.py torch >/dev/null 2>&1 &
  torch_warm=$!
fi
"${pip[@]}" -e ".[$extras]" 2>&1 | grep -v "^WARNING: Location" || true
[ -z "$torch_warm" ] || wait "$torch_warm" || true
# Compiled on both cores instead: pip's one-at-a-time compile was 41 s of the 88; -j 0 takes ~25 s
# (transformers, 2,700 files, compiles on its first import). Nothing then compiles at a job's
# start, even where PYTHONDONTWRITEBYTECODE is set; a second run only looks (seconds).
# HPC_SETUP_COMPILE=0 (scripts/test.sh): left to scripts/warm-bytecode.py, which compiles only what is imported.
if [ "${HPC_SETUP_COMPILE:-1}" != 0 ]; then
  .venv/bin/python -m compileall -q -j 0 -x '/site-packages/transformers/' \
    "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
fi
.venv/bin/python - <<'PY'
import importlib
for mod in ("hpc_launch", "torch", "deepspeed", "torchvision"):
    importlib.import_module(mod) if mod != "torchvision" else importlib.import_module("hpc_launch.train.tv_compat")
print("set-up ok: .venv ready")
PY
