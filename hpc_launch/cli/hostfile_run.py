"""`hostfile` between parsing and the exit code, without typer: the typer command
(cli/info_cmds.py) and the fast path (cli/fast.py) both call `read_hostfile`. It runs inside every
job, on every node, so it imports only hpc_launch.hostfile (standard library) and, with --from or
no node list given, the scheduler dialects."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict

from .option_values import OptionError


def read_hostfile(v: Dict[str, Any]) -> Callable[[], int]:
    """`v`: the hostfile command's parameters by name, as typer passes them. Checks --from
    (OptionError) and returns the command itself, which returns the exit code."""
    from .. import hostfile as hf

    source = v["source"]
    if source is not None and source not in hf.scheduler_names():
        raise OptionError(f"{source!r}: use one of {', '.join(hf.scheduler_names())}", param_hint="--from")
    return lambda: hostfile(v)


def hostfile(v: Dict[str, Any]) -> int:
    from .. import hostfile as hf

    slots = v["slots"]
    if slots is None and v["cluster"]:
        from ..site import profiles

        slots = max(profiles.load(v["cluster"]).node.gpus, 1)
    text = hf.build(
        env=os.environ,
        prefer=v["source"],
        nodefile=v["nodefile"],
        hosts=v["hosts"],
        slots=slots,
        include=v["include"],
        exclude=v["exclude"],
    )
    if v["output"]:
        hf.write_atomic(v["output"], text)
    else:
        sys.stdout.write(text)
    return 0
