#!/bin/bash
# The main job, on a fresh machine: set up .venv, then train a small model on built-in data
# with DeepSpeed (2 CPU ranks) through `hpc-launch submit --cluster local --follow`.
# Extra arguments go to `hpc-launch submit` (e.g. --train-args "--zero 3 --epochs 1").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-dev.sh
mkdir -p runs
cd runs
exec ../.venv/bin/hpc-launch submit --cluster local --nodes 1 --follow "$@"
