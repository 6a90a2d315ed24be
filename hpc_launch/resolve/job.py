"""ResolvedJob: a JobSpec checked against a profile, every number final (what render.py reads)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import msgspec
from msgspec import field

from ..site.profiles import Profile
from ..protocol import PLACEHOLDERS
from ..spec import JobSpec
from ..walltime import hms, minutes


class ResolvedJob(msgspec.Struct):
    """A JobSpec checked against a profile: every number final, every value validated."""

    spec: JobSpec
    profile: Profile
    name: str
    nodes: int
    queue: Optional[str]
    walltime_s: int
    group: Optional[str]
    gpus_per_node: int
    procs_per_node: int
    workdir: str
    modules: List[str]
    env: Dict[str, str]
    train_args: List[str]
    script: Optional[str]
    hosts: List[str]
    venv: Optional[str]
    conda: Optional[str]
    login: Optional[str]
    pass_env: List[str] = field(default_factory=list)
    notify: Optional[str] = None  # in pass_env too: the webhook URL travels as a secret
    stop_before_s: int = 0  # 0: no deadline
    chain: int = 1
    exclude: List[str] = field(
        default_factory=list
    )  # kept off by the scheduler (dialect.exclude_flags), or dropped from --hosts
    spares: int = 0  # allocated beyond `nodes`; the job script keeps the first `nodes` that pass its check
    failover: int = 0  # swaps onto a spare the job script may make (templates/body/failover.sh.j2)
    # hosts earlier jobs found bad that the scheduler cannot keep the job off: the spares check takes them last
    tried_last: List[str] = field(default_factory=list)
    import_from: Optional[str] = (
        None  # where the job imports a --script's neighbours the capsule could not take (hpc_launch/capsule.py)
    )
    container: Optional[str] = None  # the image the ranks run in, as given (hpc_launch/container.py)
    container_record: Optional[Dict[str, Any]] = None  # what submit found of it where the job runs (capsule.json)

    @property
    def alloc_nodes(self) -> int:
        """Nodes asked of the scheduler: the training's and its spares."""
        return self.nodes + self.spares

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def walltime(self) -> str:
        return hms(self.walltime_s)

    def placeholders(self) -> Dict[str, Any]:
        """A value for each of protocol.PLACEHOLDERS (the names a profile may use), no other."""
        values = {
            "nodes": self.alloc_nodes,
            "queue": self.queue or "",
            "walltime": self.walltime,
            "walltime_minutes": minutes(self.walltime_s),
            "group": self.group or "",
            "name": self.name,
            "gpus_per_node": self.gpus_per_node,
            "procs_per_node": self.procs_per_node,
            "world_size": self.world_size,
            "workdir": self.workdir,
            "cpus_per_proc": self.cpus_per_proc or "",
            "threads_per_proc": self.threads_per_proc or "",
        }
        return {name: values[name] for name in PLACEHOLDERS}

    @property
    def cpus_per_proc(self) -> Optional[int]:
        """The node's CPUs (or the queue's share of it) divided between its ranks."""
        cpus = self.profile.node_cpus(self.queue)
        return max(1, cpus // self.procs_per_node) if cpus else None

    @property
    def threads_per_proc(self) -> Optional[int]:
        """Physical cores per rank: the OpenMP threads each rank should run (PBS `ompthreads`)."""
        cpus = self.cpus_per_proc
        return max(1, cpus // self.profile.node.threads_per_core) if cpus else None
