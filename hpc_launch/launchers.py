"""The launcher registry: one entry per way of starting the ranks.

Each entry says which template starts the ranks (templates/body/launch/NAME.sh.j2), which rank
variables the ranks find (train/dist.py maps them to RANK/WORLD_SIZE/LOCAL_RANK), and how the
job's environment reaches remote ranks. Code asks the entry, never the launcher's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List


@dataclass(frozen=True)
class Launcher:
    name: str
    summary: str
    rank_vars: str  # what the ranks read to find their place
    forwards: str  # how exported variables reach ranks on other nodes
    # The `deepspeed` CLI starts the ranks: the entry is `--module train`, not `-m train`.
    deepspeed_cli: bool = False
    # Remote ranks get the environment from a line-based .deepspeed_env (KEY=VALUE per line).
    env_file: bool = False
    # Remote ranks get .deepspeed_env through a shell command line (DeepSpeed's pdsh runner:
    # `export KEY="VALUE"; ...`), so values must not hold " $ ` \.
    env_via_shell: bool = False
    # Reaches the other nodes over ssh (pdsh): they are checked before launch, and `cancel`
    # stops the ranks there.
    over_ssh: bool = False
    # Starts ranks on this node only.
    single_node: bool = False
    # Renders a per-local-rank CPU list (the profile's launch.cpu_bind).
    cpu_bind: bool = False
    # Starts ranks on the hosts of the job's hostfile (not on every allocated node): --spares works.
    places_by_hostfile: bool = True

    @property
    def template(self) -> str:
        return f"body/launch/{self.name}.sh.j2"


_LAUNCHERS: Dict[str, Launcher] = {entry.name: entry for entry in (
    Launcher("deepspeed", "DeepSpeed's launcher on one node (local, single-node jobs)",
             "RANK/LOCAL_RANK/WORLD_SIZE from the deepspeed launcher", "inherited (one node)",
             deepspeed_cli=True, single_node=True),
    Launcher("deepspeed-pdsh", "DeepSpeed's launcher fanning out over ssh/pdsh (pods, sites with node ssh)",
             "RANK/LOCAL_RANK/WORLD_SIZE from the deepspeed launcher", ".deepspeed_env",
             deepspeed_cli=True, env_file=True, env_via_shell=True, over_ssh=True),
    Launcher("deepspeed-openmpi", "DeepSpeed's launcher driving mpirun (the ABCI 2.0 tutorial)",
             "OMPI_COMM_WORLD_*", ".deepspeed_env (turned into mpirun -x)", deepspeed_cli=True, env_file=True),
    Launcher("mpirun", "Open MPI mpirun, one rank per GPU", "OMPI_COMM_WORLD_*", "mpirun -x NAME"),
    Launcher("mpiexec", "MPICH/PALS mpiexec (Polaris), one rank per GPU", "PMI_RANK, PALS_LOCAL_RANKID", "mpiexec --envall", cpu_bind=True),
    Launcher("mpirun-torchrun", "mpirun one task per node, torchrun inside (Miyabi)",
             "torchrun's RANK/LOCAL_RANK (node rank from OMPI_COMM_WORLD_RANK)", "mpirun -x NAME"),
    Launcher("srun", "Slurm srun, one task per GPU", "SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID", "srun (whole environment)",
             places_by_hostfile=False),
    Launcher("srun-torchrun", "srun one task per node, torchrun inside with a static rendezvous",
             "torchrun's RANK/LOCAL_RANK (node rank from SLURM_NODEID)", "srun (whole environment)", places_by_hostfile=False),
)}


def get(name: str) -> Launcher:
    return _LAUNCHERS[name]


def names() -> List[str]:
    return list(_LAUNCHERS)
