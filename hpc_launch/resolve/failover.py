"""--failover N: the ranks restart on a spare node from the newest checkpoint."""

from __future__ import annotations

from typing import List

from ..errors import SpecError
from ..spec import JobSpec
from .common import MAX_SPARES


def failover_of(spec: JobSpec, train_args: List[str], staged: bool = False) -> int:
    """--failover N, checked (its spares and launcher were checked with --spares'): the ranks restart
    on a spare from the newest checkpoint, so the training must write one."""
    n = spec.failover or 0
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_SPARES:
        raise SpecError(f"--failover must be a whole number from 0 to {MAX_SPARES}, not {n!r}")
    if n and spec.script:
        raise SpecError(
            "--failover restarts the shipped entrypoint from its checkpoint; a --script resumes as it sees fit",
            hint="drop --failover (use --spares K), or train with the entrypoint and --checkpoint-dir",
        )
    if n and staged:
        # the copies are made before the ranks start, on the nodes they start on: a spare swapped in
        # later would run from a node-local path that holds nothing
        raise SpecError(
            "--failover with node-local staging: a spare swapped in has no node-local copy of the venv, data or image",
            hint="drop --stage-env/--stage-data (or give --no-stage), or drop --failover",
        )
    if (
        n
        and spec.chain <= 1
        and not any(a == "--checkpoint-dir" or a.startswith("--checkpoint-dir=") for a in train_args)
    ):
        raise SpecError(
            "--failover restarts the ranks from the newest checkpoint; the training arguments name no --checkpoint-dir",
            hint="add --checkpoint-dir DIR (and --checkpoint-every N) to --train-args",
        )
    return n
