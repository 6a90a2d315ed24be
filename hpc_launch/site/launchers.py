"""The launcher registry: one entry per way of starting the ranks.

Each entry says which template starts the ranks (templates/body/launch/NAME.sh.j2), which rank
variables the ranks find (`ranks`: a convention of hpc_launch/joblayer/ranks.py CONVENTIONS, the one
home of the variable names), and how the job's environment reaches remote ranks. Code asks the entry,
never the launcher's name.
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import msgspec


class Launcher(msgspec.Struct, frozen=True):
    name: str
    summary: str
    ranks: Tuple[str, ...]  # the rank variables the ranks may find: names in joblayer/ranks.py CONVENTIONS
    forwards: str  # how exported variables reach ranks on other nodes
    # The `deepspeed` CLI starts the ranks: it runs a module by `--module NAME`, not python's `-m NAME`.
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
    # Creates the profile's launch.node_dirs on every node before the ranks start.
    node_dirs: bool = False
    # Starts ranks on the hosts of the job's hostfile (not on every allocated node): --spares works.
    places_by_hostfile: bool = True
    # How the job runs one task on every node (node-local staging, templates/body/stage.sh.j2):
    # srun | mpiexec | mpirun | pdsh | here (one node); empty: it cannot, and staging is refused.
    per_node: str = ""
    # How the launched program runs a module instead of a file (a `--script` job's ranks start
    # through the job layer, `MODULE_FLAG hpc_launch.joblayer SCRIPT`): python's -m, or the
    # --module of DeepSpeed's launchers and torchrun.
    module_flag: str = "-m"

    @property
    def template(self) -> str:
        return f"body/launch/{self.name}.sh.j2"


_LAUNCHERS: Dict[str, Launcher] = {
    entry.name: entry
    for entry in (
        Launcher(
            "deepspeed",
            "DeepSpeed's launcher on one node (local, single-node jobs)",
            ("torch",),
            "inherited (one node)",
            deepspeed_cli=True,
            module_flag="--module",
            single_node=True,
            per_node="here",
        ),
        Launcher(
            "deepspeed-pdsh",
            "DeepSpeed's launcher fanning out over ssh/pdsh (pods, sites with node ssh)",
            ("torch",),
            ".deepspeed_env",
            deepspeed_cli=True,
            module_flag="--module",
            env_file=True,
            env_via_shell=True,
            over_ssh=True,
            per_node="pdsh",
        ),
        Launcher(
            "deepspeed-openmpi",
            "DeepSpeed's launcher driving mpirun (the ABCI 2.0 tutorial)",
            ("openmpi",),
            ".deepspeed_env (turned into mpirun -x)",
            deepspeed_cli=True,
            module_flag="--module",
            env_file=True,
            per_node="mpirun",
        ),
        Launcher("mpirun", "Open MPI mpirun, one rank per GPU", ("openmpi",), "mpirun -x NAME", per_node="mpirun"),
        Launcher(
            "mpiexec",
            "MPICH/PALS mpiexec (Polaris), one rank per GPU",
            ("pmi", "pmix", "pals"),
            "mpiexec --envall",
            cpu_bind=True,
            per_node="mpiexec",
        ),
        Launcher(
            "mpirun-torchrun",
            "mpirun one task per node, torchrun inside (Miyabi)",
            ("torch",),
            "mpirun -x NAME",
            per_node="mpirun",
            module_flag="--module",
        ),
        Launcher(
            "srun",
            "Slurm srun, one task per GPU",
            ("slurm",),
            "srun (whole environment)",
            places_by_hostfile=False,
            node_dirs=True,
            per_node="srun",
        ),
        Launcher(
            "srun-torchrun",
            "srun one task per node, torchrun inside with a static rendezvous",
            ("torch",),
            "srun (whole environment)",
            places_by_hostfile=False,
            per_node="srun",
            module_flag="--module",
        ),
    )
}


def get(name: str) -> Launcher:
    return _LAUNCHERS[name]


def names() -> List[str]:
    return list(_LAUNCHERS)
