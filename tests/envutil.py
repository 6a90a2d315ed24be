"""Small helpers shared by test modules (conftest.py holds only fixtures: its module name is not unique)."""

from __future__ import annotations

import os


def scheduler_env_cleared(env=None):
    """A copy of the environment without any scheduler's job variables."""
    env = dict(os.environ if env is None else env)
    for key in list(env):
        if key.startswith(("PBS_", "SLURM_", "SGE_", "COBALT_")) or key in ("PE_HOSTFILE", "JOB_ID", "NHOSTS"):
            env.pop(key)
    return env
