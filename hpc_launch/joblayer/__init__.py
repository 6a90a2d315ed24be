"""The job layer: every rank of a `--script` job starts through it (`python -m hpc_launch.joblayer
SCRIPT ARGS...`), so a user's own training gets what the shipped entrypoint has, unmodified:

- its place (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT)
  from whatever launcher started it (ranks.py);
- the watchdog, fed by torch's global optimizer step hook once the script imports torch (steps.py);
- DeepSpeed on CPU without compiling its shm_comm op (deepspeed_cpu.py).

Standard library only at import: torch and DeepSpeed are touched only after the user's code
imported them. The in-job API (api.py) is re-exported here. docs/rank-layer.md says it all.
"""

from .api import checkpoint_dir, heartbeat, resume_from, stop_agreed, stop_requested

__all__ = ["checkpoint_dir", "heartbeat", "resume_from", "stop_agreed", "stop_requested"]
