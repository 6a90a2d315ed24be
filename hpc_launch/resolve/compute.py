"""How many nodes, and on each the GPUs and the ranks (one per GPU, one on a CPU node)."""

from __future__ import annotations

from typing import Optional, Tuple

from msgspec.structs import replace

from ..errors import SpecError
from ..site.profiles import Profile
from ..spec import JobSpec


def with_nodes(spec: JobSpec, has_scheduler: bool) -> JobSpec:
    """--nodes, checked: 1 by default, or every host given where there is no scheduler."""
    if spec.nodes is None:  # the resolved job gets its own copy: the caller's spec is never changed
        spec = replace(spec, nodes=len(spec.hosts) if (not has_scheduler and spec.hosts) else 1)
    if not isinstance(spec.nodes, int) or spec.nodes < 1:
        raise SpecError(f"--nodes must be a whole number of at least 1, not {spec.nodes!r}")
    return spec


def gpus_and_procs(spec: JobSpec, p: Profile, queue_name: Optional[str]) -> Tuple[int, int]:
    """--gpus-per-node within what a node (of this queue) has, and the ranks per node."""
    node_gpus = p.node_gpus(queue_name)
    gpus = node_gpus if spec.gpus_per_node is None else spec.gpus_per_node
    if not isinstance(gpus, int) or gpus < 0:
        raise SpecError(f"--gpus-per-node must be 0 or more, not {gpus!r}")
    if gpus > node_gpus:
        raise SpecError(
            f"--gpus-per-node {gpus} is more than the {node_gpus} GPUs of a {p.name} node",
            hint=f"use --gpus-per-node {node_gpus} or fewer",
        )
    return gpus, max(gpus, 1)
