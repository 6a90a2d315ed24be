"""The cluster profile's schema (msgspec): what a site is, each key checked as it is read.

Loading, discovery and merging are profiles.py's; this module holds only the shapes and their checks.
"""

# No `from __future__ import annotations` here: msgspec would resolve every schema annotation
# from its string on the first load (~90 typing.ForwardRef compiles, ~3 ms of a dry-run).

import re
from typing import Any, Dict, List, Literal, Optional, TYPE_CHECKING

import msgspec
from msgspec import Meta, Struct

from ..dialects import names as dialect_names
from .launchers import get as launcher_entry
from .launchers import names as launcher_names
from ..protocol import PLACEHOLDERS
from ..walltime import parse_walltime


try:
    from typing import Annotated
except ImportError:  # Python 3.8
    from typing_extensions import Annotated

# Allowed names come from the registries: a new scheduler or launcher is one registry line.
if TYPE_CHECKING:  # a type checker sees plain strings; msgspec checks the registry's names
    Dialect = str
    Launcher = str
else:
    Dialect = Literal[tuple(dialect_names())]
    Launcher = Literal[tuple(launcher_names())]
Status = Literal["active", "retired", "testbed"]
LogLive = Literal["scheduler", "tee"]
GroupWhere = Literal["directive", "submit"]
MasterAddr = Literal["first-host", "net-if", "slurm-nodeaddr"]

KNOWN_PLACEHOLDERS = set(PLACEHOLDERS)
# Placeholders computed from the node's CPU count: a profile using them must give node.cpus.
CPU_PLACEHOLDERS = {"cpus_per_proc", "threads_per_proc"}
_PLACEHOLDER = re.compile(r"{(\w+)}")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")  # one rank's CPUs: 24-31 or 0,32

NonNeg = Annotated[int, Meta(ge=0)]
Positive = Annotated[int, Meta(ge=1)]
Port = Annotated[int, Meta(ge=1, le=65535)]


class _Strict(Struct, forbid_unknown_fields=True, kw_only=True):
    pass


def _check_walltime(value: Optional[str]) -> None:
    if value is not None:
        parse_walltime(value)  # ValueError naming the accepted forms


class Node(_Strict):
    gpus: NonNeg  # GPUs per node (on CPU-only profiles: ranks per node)
    gpu_model: Optional[str] = None
    gpu_mem_gib: Optional[float] = None
    cpus: Optional[Positive] = None  # logical CPUs as the scheduler counts them
    threads_per_core: Positive = 1  # hardware threads per physical core (ABCI 3.0: 192 CPUs = 96 cores x 2)
    mem_gib: Optional[float] = None
    arch: str = "x86_64"


class Tier(_Strict):
    """A node-count band of a routing queue with its own walltime ceiling (Polaris `prod`)."""

    min_nodes: Positive
    max_nodes: Positive
    max_walltime: str
    routes_to: Optional[str] = None  # the execution queue the scheduler picks (shown in messages)

    def __post_init__(self) -> None:
        _check_walltime(self.max_walltime)
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"tier {self.min_nodes}-{self.max_nodes}: min_nodes is above max_nodes")


class Queue(_Strict):
    max_nodes: Optional[Positive] = None
    min_nodes: Positive = 1
    max_walltime: Optional[str] = None
    min_walltime: Optional[str] = None
    default_walltime: Optional[str] = None
    # Node-count bands, each with its own max_walltime; a job must fall in one of them.
    tiers: List[Tier] = []
    gpus: Optional[NonNeg] = None  # GPUs per node when this queue differs from the node
    cpus: Optional[Positive] = None  # CPUs a job gets per node when this queue differs from the node
    by_request: bool = False  # usable only after the site grants it: never suggested as a fix
    # A user's jobs in this queue at once, in any state (queued, held, running): the scheduler
    # refuses the next one at submit (ALCF debug-scaling: 1). Checked before a chain or sweep is
    # submitted (site_rules.check_jobs).
    max_user_jobs: Optional[Positive] = None
    max_user_running: Optional[Positive] = None  # of them running at once: the others wait queued
    note: Optional[str] = None

    def __post_init__(self) -> None:
        _check_walltime(self.max_walltime)
        _check_walltime(self.min_walltime)
        _check_walltime(self.default_walltime)
        tiers = sorted(self.tiers, key=lambda t: t.min_nodes)
        for a, b in zip(tiers, tiers[1:]):
            if b.min_nodes <= a.max_nodes:
                raise ValueError(f"tiers {a.min_nodes}-{a.max_nodes} and {b.min_nodes}-{b.max_nodes} overlap")


class Group(_Strict):
    required: bool = False
    # Where the site takes it: a directive line in the script, or a flag on the submit command
    # (ABCI 2.0: "the -g option cannot be specified in the job script").
    where: GroupWhere = "directive"
    flag: str = "-P {group}"
    default: Optional[str] = None
    label: str = "group"


class Modules(_Strict):
    init: Optional[str] = None  # a shell line, e.g. `source /etc/profile.d/modules.sh`
    purge: bool = False
    load: List[str] = []
    # a shell line run after the modules are loaded (OLCF Frontier: LD_LIBRARY_PATH from CRAY_LD_LIBRARY_PATH;
    # ALCF Polaris: `conda activate base`, the env a --venv is made on top of)
    after: Optional[str] = None


class PythonEnv(_Strict):
    venv: Optional[str] = None  # "auto": the environment hpc-launch itself runs in
    conda: Optional[str] = None
    conda_setup: Optional[str] = None  # a shell line that makes `conda activate` work
    python: str = "python3"
    # The site's python3 has no torch: a job needs a venv or conda env (see resolve/script.py).
    env_required: bool = False
    modules: List[str] = []  # loaded before the venv is activated (the interpreter it was made with)


class LogSpec(_Strict):
    # The scheduler's own log name relative to the work dir; {name}, {job_num}, {job_id}.
    name: str = "{name}.o{job_num}"
    # scheduler: the scheduler writes it live (PBS -k oed, GE, Slurm). tee: the script also tees
    # itself into NAME.oNUM.live, for sites where live output is not guaranteed.
    live: LogLive = "scheduler"


class Rendezvous(_Strict):
    # How the head node's address is found inside the job: the first host's name, the IPv4
    # address of `net_if` on the node running the batch script (the first node), or Slurm's
    # NodeAddr of the first node (for hostnames that do not resolve).
    master_addr: MasterAddr = "first-host"
    port_base: Annotated[int, Meta(ge=1024, le=64000)] = 29500


class Launch(_Strict):
    launcher: Launcher
    args: List[str] = []  # extra launcher arguments (e.g. mpirun --mca ...)
    ssh_port: Optional[Port] = None
    pdsh_ssh_args: Optional[str] = None
    # Variables the site's modules set that break the launcher: `unset NAME` before it runs
    # (Miyabi: nv-hpcx's OMPI_MCA_mca_base_env_list makes Open MPI 4 refuse `mpirun -x`).
    unset_env: List[str] = []
    # CPUs for each local rank, rank i gets entry i (the cores nearest GPU i); launchers with cpu_bind.
    cpu_bind: List[str] = []
    # Node-local directories the ranks need (Frontier's MIOpen cache on /tmp): created on every node before launch.
    node_dirs: List[str] = []

    def __post_init__(self) -> None:
        for name in self.unset_env:
            if not _ENV_NAME.match(name):
                raise ValueError(f"unset_env: {name!r} is not a variable name")
        for cpus in self.cpu_bind:
            if not _CPU_LIST.match(cpus):
                raise ValueError(f"cpu_bind: {cpus!r} is not a CPU list such as 24-31 or 0,32")
        if self.cpu_bind and not launcher_entry(self.launcher).cpu_bind:
            raise ValueError(f"cpu_bind is not rendered by the {self.launcher} launcher")
        for d in self.node_dirs:
            if not d.startswith("/") or re.search(r"[\x00-\x1f\x7f]", d):
                raise ValueError(f"node_dirs: {d!r} is not an absolute directory")
        if self.node_dirs and not launcher_entry(self.launcher).node_dirs:
            raise ValueError(f"node_dirs are not created by the {self.launcher} launcher")


class Stage(_Strict):
    """Node-local staging (hpc_launch/stage.py, docs/staging.md): before the ranks start, the job's
    venv (and `data`) are copied once from the shared file system to `dest` on every node by a tree
    broadcast, and the ranks run from the copy. Off unless `env` is true or `data` is given."""

    env: bool = False  # stage the job's virtualenv; the ranks then import torch/DeepSpeed from the copy
    data: Optional[str] = None  # a shared directory staged too; the job finds it in $HPC_LAUNCH_STAGED_DATA
    # node-local directory, the same path on every node; $VAR is expanded on each node, {host} becomes its name
    dest: Optional[str] = None
    timeout_s: Annotated[int, Meta(ge=10, le=3600)] = 300  # for the tree to connect, and the most a node may wait
    # directives a job needs only when it stages: the request for the node-local disk (Frontier: -C nvme)
    directives: List[str] = []
    # a --container image file/directory staged too (container.staging): unset, whenever staging is on;
    # true, even alone; false, never (the ranks read the shared image)
    image: Optional[bool] = None

    @property
    def on(self) -> bool:
        return self.env or self.data is not None or self.image is True

    def __post_init__(self) -> None:
        for key, value in (("dest", self.dest), ("data", self.data)):
            if value is not None and (not value.startswith(("/", "$")) or re.search(r"[\x00-\x1f\x7f]", value)):
                raise ValueError(f"stage.{key}: {value!r} is not an absolute directory")
        if self.on and not self.dest:
            raise ValueError("stage: give stage.dest, the node-local directory to stage to")


ContainerRuntime = Literal["apptainer", "singularity", "podman-hpc", "shifter", "pyxis", "charliecloud"]
# pyxis/enroot is srun's own option (--container-image): the launcher starts the container itself.
RUNTIME_LAUNCHED = {"pyxis"}


class Container(_Strict):
    """How the site runs a job's ranks inside a container image (`--container IMAGE`,
    hpc_launch/container.py, docs/containers.md): the site's launcher starts each rank through the
    runtime's exec line (`per-rank`), or the runtime is the launcher's own option (`runtime`: pyxis)."""

    runtime: ContainerRuntime
    modules: List[str] = []  # `module load` before the launch (Polaris: apptainer, cray-mpich-abi)
    # scheduler lines a container job needs, e.g. Polaris `-l singularity_fakeroot=true`; placeholders as in directives
    directives: List[str] = []
    binds: List[str] = []  # host paths bound into every rank, SRC or SRC:DST (the work dir is always bound)
    gpu_flags: List[str] = []  # the runtime's flags that expose the node's GPUs (--nv, --rocm, --gpu)
    args: List[str] = []  # other runtime flags the site documents (--fakeroot, --mpi)
    env: Dict[str, str] = {}  # exported on the host before the launch (APPTAINERENV_LD_LIBRARY_PATH)
    launch: Literal["per-rank", "runtime"] = "per-rank"
    mpi: Optional[str] = None  # what the image's MPI must match (ABI), said by `clusters show` and doctor

    def __post_init__(self) -> None:
        if (self.runtime in RUNTIME_LAUNCHED) != (self.launch == "runtime"):
            want = "runtime" if self.runtime in RUNTIME_LAUNCHED else "per-rank"
            raise ValueError(f"container.launch: {self.runtime} takes launch: {want}")
        for bind in self.binds:
            src = bind.split(":", 1)[0]
            if not src.startswith(("/", "$")) or re.search(r"[\x00-\x1f\x7f,]", bind):
                raise ValueError(f"container.binds: {bind!r} is not an absolute path (SRC or SRC:DST)")
        for name, value in self.env.items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"container.env: {name!r} is not a variable name")
            # written inside "..." so the site's $VARS expand in the job; nothing else may
            if re.search(r'["`\\\x00-\x1f\x7f]|\$\(', value):
                raise ValueError(f"container.env.{name}: {value!r} may use $VAR but no quote, backslash or $(...)")
        for line in self.modules + self.gpu_flags + self.args:
            if re.search(r"[\x00-\x1f\x7f]", line):
                raise ValueError(f"container: {line!r} must be one line")


class Charge(_Strict):
    """What the site charges a job, in its own unit, for `report`'s allocation plan: units per
    node-hour of elapsed time (by queue where they differ). No rate where no source gives one."""

    unit: str  # "ABCI points", "TSUBAME4 points", "tokens"
    source: str  # where the unit and the rates are stated (a URL)
    status: Literal["V", "U", "I"]  # as in facts: verified in the source, used in practice, inferred
    per_node_hour: Optional[Annotated[float, Meta(gt=0)]] = None  # on every queue not in `queues`
    queues: Dict[str, Annotated[float, Meta(gt=0)]] = {}

    def rate(self, queue: Optional[str]) -> Optional[float]:
        return self.queues.get(queue or "", self.per_node_hour)


class Profile(_Strict):
    name: str
    title: str
    dialect: Dialect
    node: Node
    launch: Launch
    status: Status = "active"
    notes: Optional[str] = None
    docs: Optional[str] = None
    login: Optional[str] = None
    # The site's names for the scheduler's programs, e.g. ThetaGPU {qsub: qsub-gpu, qstat: qstat-gpu}
    commands: Dict[str, str] = {}
    queues: Dict[str, Queue] = {}
    default_queue: Optional[str] = None
    # Tried in order, without --queue, when default_queue does not take the job's node count or
    # walltime (Aurora: debug-scaling from 2 nodes, debug for one, prod from 256)
    queue_fallbacks: List[str] = []
    # The site's queue for interactive allocations (`hpc-launch alloc` without --queue, where it
    # takes the allocation's nodes and walltime; ALCF: debug)
    interactive_queue: Optional[str] = None
    default_walltime: str = "01:00:00"
    # Where the site wants jobs to run from ({group}: the project), where it advises against the home
    # directory for job I/O (ALCF Aurora: the project's Flare space): a work dir in home is refused naming it
    project_dir: Optional[str] = None
    # A user's jobs in all queues together, in any state (OLCF Frontier: 100), and running at once
    max_user_jobs: Optional[Positive] = None
    max_user_running: Optional[Positive] = None
    # Each task of a job array counts as a job against those limits (PBS at ALCF, Slurm's
    # MaxSubmitJobs); false where the site's docs count a whole array as one job.
    array_tasks_count: bool = True
    group: Group = msgspec.field(default_factory=Group)
    directives: List[str] = []
    modules: Modules = msgspec.field(default_factory=Modules)
    python: PythonEnv = msgspec.field(default_factory=PythonEnv)
    env: Dict[str, str] = {}
    # Directories put in front of path-like variables: {LD_LIBRARY_PATH: [dir, ...]}
    paths: Dict[str, List[str]] = {}
    net_if: Optional[str] = None
    nodefile_var: Optional[str] = None
    hosts: List[str] = []  # fixed node list (pods, local)
    log: LogSpec = msgspec.field(default_factory=LogSpec)
    rendezvous: Rendezvous = msgspec.field(default_factory=Rendezvous)
    stage: Stage = msgspec.field(default_factory=Stage)  # node-local copies of the venv/data (stage.py)
    train_args: List[str] = []  # default arguments for the training entrypoint
    # `#!/bin/bash -l`: the job starts as a login shell (ALCF asks for it: `module` is defined there)
    login_shell: bool = False
    # --notify: where a job's messages are sent from (hpc_launch/notify.py): `direct` the job posts,
    # `relay` it leaves them for whoever refreshes it with a network, `auto` direct then relay
    notify_route: Literal["auto", "direct", "relay"] = "auto"
    facts: Dict[str, str] = {}  # evidence: key -> "V|U|I: source"
    charge: Optional[Charge] = None  # the site's charge unit and rates (`report --plan-*`)
    container: Optional[Container] = None  # how ranks run inside an image (`--container`, docs/containers.md)

    def __post_init__(self) -> None:
        _check_walltime(self.default_walltime)
        if self.default_queue and self.default_queue not in self.queues:
            raise ValueError(
                f"default_queue {self.default_queue!r} is not one of the queues ({', '.join(sorted(self.queues))})"
            )
        for name in self.queue_fallbacks:
            if name not in self.queues:
                known = ", ".join(sorted(self.queues))
                raise ValueError(f"queue_fallbacks: {name!r} is not one of the queues ({known})")
        if self.interactive_queue and self.interactive_queue not in self.queues:
            known = ", ".join(sorted(self.queues))
            raise ValueError(f"interactive_queue: {self.interactive_queue!r} is not one of the queues ({known})")
        for name in self.charge.queues if self.charge else ():
            if name not in self.queues:
                raise ValueError(f"charge.queues: {name!r} is not one of the queues ({', '.join(sorted(self.queues))})")
        if self.stage.on and not launcher_entry(self.launch.launcher).per_node:
            raise ValueError(f"stage: the {self.launch.launcher} launcher has no way to run one task per node")
        if (
            self.container
            and self.container.launch == "runtime"
            and launcher_entry(self.launch.launcher).per_node != "srun"
        ):
            raise ValueError(
                f"container: {self.container.runtime} is an srun option, not for the {self.launch.launcher} launcher"
            )
        container_directives = list(self.container.directives) if self.container else []
        for line in list(self.directives) + list(self.stage.directives) + container_directives + [self.group.flag]:
            _check_placeholders(line)
            used = CPU_PLACEHOLDERS & set(_PLACEHOLDER.findall(line))
            if used and not self.node.cpus:
                raise ValueError(f"{{{sorted(used)[0]}}} in {line!r} needs node.cpus (the CPUs of a node)")
        for name, dirs in self.paths.items():
            if not _ENV_NAME.match(name):
                raise ValueError(f"paths: {name!r} is not a variable name")
            for d in dirs:
                if not d or ":" in d or re.search(r"[\x00-\x1f\x7f]", d):
                    raise ValueError(f"paths.{name}: {d!r} must be one directory (no ':' or control characters)")

    def node_gpus(self, queue: Optional[str] = None) -> int:
        """GPUs of one node as `queue` hands it out (a queue may give part of a node)."""
        q = self.queues.get(queue or self.default_queue or "")
        return q.gpus if q and q.gpus is not None else self.node.gpus

    def node_cpus(self, queue: Optional[str] = None) -> Optional[int]:
        """CPUs of one node as `queue` hands it out; None when the profile does not say."""
        q = self.queues.get(queue or self.default_queue or "")
        return q.cpus if q and q.cpus else self.node.cpus

    def to_dict(self) -> Dict[str, Any]:
        return msgspec.to_builtins(self)


def _check_placeholders(text: str) -> None:
    for ph in _PLACEHOLDER.findall(text):
        if ph not in KNOWN_PLACEHOLDERS:
            raise ValueError(
                f"unknown placeholder {{{ph}}} in {text!r}; allowed: {', '.join(sorted(KNOWN_PLACEHOLDERS))}"
            )
