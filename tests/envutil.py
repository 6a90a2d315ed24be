"""Small helpers shared by test modules (conftest.py holds only fixtures: its module name is not unique)."""

from __future__ import annotations

import os
import re


def scheduler_variables():
    """(exact names, prefixes) of every registered scheduler's job variables, from the registry:
    each dialect's node-list variables, its array index and the variables its job id is read from
    (the family prefix of each: `SLURM_`, `PBS_`, ...)."""
    from hpc_launch import dialects

    names, prefixes = set(), set()
    for d in dialects.all_dialects():
        if not d.has_scheduler:
            continue
        found = set(d.nodefile_vars) | set(re.findall(r"\$\{?(\w+)", f"{d.job_id_expr} {d.job_num_expr}"))
        if d.supports(dialects.Arrays):
            found.add(d.array_index_var)
        names |= found
        prefixes |= {name.split("_", 1)[0] + "_" for name in found if "_" in name}
    return names, tuple(sorted(prefixes))


def scheduler_env_cleared(env=None):
    """A copy of the environment without any scheduler's job variables."""
    env = dict(os.environ if env is None else env)
    names, prefixes = scheduler_variables()
    for key in list(env):
        if key.startswith(prefixes) or key in names:
            env.pop(key)
    return env
