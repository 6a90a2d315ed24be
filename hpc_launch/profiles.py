"""Cluster profiles: one YAML file per site, one schema, discovery and override.

Search order (later wins for the same name): the profiles shipped with the package, then the
user's config dir (paths.user_dir: ~/.config/hpc-launch/clusters/*.yaml), then
$HPC_LAUNCH_CLUSTERS_DIR, then `--profile FILE`. A user file may be partial: it is deep-merged
over the profile of the same name (so `abci.yaml` holding only `group: {default: gxx}` works),
or may say `extends: <name>` to start a new profile from another one.

The schema is msgspec (fast to import: the dry-run path must stay close to `import jinja2, yaml`).
"""

# No `from __future__ import annotations` here: msgspec would resolve every schema annotation
# from its string on the first load (~90 typing.ForwardRef compiles, ~3 ms of a dry-run).

import os
import re
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Sequence, TYPE_CHECKING, Tuple, Union, get_args

import msgspec
from msgspec import Meta, Struct

from .dialects import names as dialect_names
from .errors import ProfileError
from .launchers import get as launcher_entry
from .launchers import names as launcher_names
from .paths import NotAUserFile, clusters_dirs, load_yaml, read_user_file
from .protocol import PLACEHOLDERS
from .walltime import parse_walltime

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

    def __post_init__(self):
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

    def __post_init__(self):
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
    # The site's python3 has no torch: a job needs a venv or conda env (see spec.resolve).
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

    def __post_init__(self):
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

    def __post_init__(self):
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

    def __post_init__(self):
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

    def __post_init__(self):
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


# ---------------------------------------------------------------------------------------------
# discovery and loading


class ParsedCache:
    """Parsed profile files kept on disk between runs, keyed by path, mtime, ctime, size and inode.

    Parsing the dozen shipped YAML files (facts and all) is the largest single cost of a cold
    dry-run: with every file unchanged, the run neither parses YAML nor imports the YAML library.
    marshal is the interpreter's own loader; a file whose data it cannot hold (a YAML date, say)
    is simply parsed every time. A cache that cannot be read or written is only slower.
    """

    LIMIT = 256  # entries; test suites and many override dirs would otherwise grow it forever
    RACY_NS = 2_000_000_000

    def __init__(self) -> None:
        self.path = self._location()
        self.entries: Dict[str, Tuple[Tuple[int, ...], bytes]] = {}
        self.dirty = False
        if self.path is not None:
            try:
                import marshal

                loaded = marshal.loads(self.path.read_bytes())
                if isinstance(loaded, dict):
                    self.entries = loaded
            except (OSError, EOFError, ValueError, TypeError):
                pass

    @staticmethod
    def _location() -> Optional[Path]:
        if os.environ.get("HPC_LAUNCH_NO_CACHE"):
            return None
        try:
            from . import __version__
            from .paths import user_dir

            return user_dir("cache") / f"profiles-{__version__}.marshal"
        except Exception:  # noqa: BLE001 - no usable home: parse every time
            return None

    def read(self, path: Path) -> Dict[str, Any]:
        import marshal

        try:
            st = path.stat()
        except OSError:
            return _read_yaml(path)  # raises the one-line error
        stamp = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
        key = str(path)
        hit = self.entries.get(key)
        if hit is not None and tuple(hit[0]) == stamp:
            try:
                return marshal.loads(hit[1])
            except (EOFError, ValueError, TypeError):
                pass
        data = _read_yaml(path)
        if time.time_ns() - st.st_ctime_ns < self.RACY_NS:
            # File times tick in jiffies: a file rewritten twice within one tick, at the same
            # size, would look unchanged. Trust only files that have been quiet a while (git's
            # "racily clean" rule).
            self.entries.pop(key, None)
            return data
        try:
            self.entries[key] = (stamp, marshal.dumps(data))
            self.dirty = True
        except ValueError:  # a value marshal cannot hold: parse this file every time
            self.entries.pop(key, None)
        return data

    def save(self) -> None:
        if not self.dirty or self.path is None:
            return
        import marshal
        import tempfile

        entries = dict(list(self.entries.items())[-self.LIMIT :])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".profiles-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(marshal.dumps(entries))
            os.replace(tmp, self.path)  # atomic: a concurrent reader sees the old or the new file
        except OSError:
            pass


_Found = Dict[str, Tuple[Dict[str, Any], List[Path]]]
# `--profile FILE`, given once or more: each file merged in turn, after every other source
ProfileFiles = Union[None, str, Sequence[str]]


def _read_yaml(path: Path) -> Dict[str, Any]:
    import yaml  # only when a file changed since it was last parsed (see ParsedCache)

    try:
        data = load_yaml(read_user_file(path))
    except NotAUserFile as exc:
        raise ProfileError(
            f"cannot read profile {path}: {exc.strerror}", hint="a profile is a small YAML file"
        ) from None
    except OSError as exc:
        raise ProfileError(f"cannot read profile {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise ProfileError(
            f"{path} line {line}: not valid UTF-8 (byte {exc.object[exc.start]:#04x})", hint="save the file as UTF-8"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ProfileError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: a profile is a YAML mapping of keys (see `hpc-launch clusters show local`)")
    return data


def _deep_merge(base: Dict[str, Any], over: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _add(found: _Found, raw: Dict[str, Any], path: Path) -> str:
    name = str(raw.get("name") or path.stem)
    raw.setdefault("name", name)
    if name in found and "extends" not in raw:
        base, sources = found[name]
        found[name] = (_deep_merge(base, raw), sources + [path])
    else:
        found[name] = (raw, [path])
    return name


@lru_cache(maxsize=4)
def _discover(dirs: Tuple[Path, ...]) -> Tuple[_Found, Dict[str, ProfileError]]:
    """Every profile found, and the files that could not be read, by file name: a broken user
    override breaks only the cluster it is named after, never the others."""
    found: _Found = {}
    broken: Dict[str, ProfileError] = {}
    cache = ParsedCache()
    for directory in dirs:
        if directory.is_dir():
            # what glob("*.yaml") finds, without its pattern machinery (~1 ms of a dry-run)
            with os.scandir(directory) as entries:
                paths = sorted(directory / e.name for e in entries if e.name.endswith(".yaml"))
            for path in paths:
                try:
                    _add(found, cache.read(path), path)
                except ProfileError as exc:
                    broken[path.stem] = exc
    cache.save()
    return found, broken


def _all(profile_file: ProfileFiles = None) -> Tuple[_Found, List[str], Dict[str, ProfileError]]:
    """Every profile, the clusters the --profile files name (in turn, each once) and the broken ones."""
    discovered, broken = _discover(tuple(clusters_dirs()))
    found = dict(discovered)
    files = [profile_file] if isinstance(profile_file, str) else list(profile_file or ())
    named: List[str] = []
    for f in filter(None, files):
        name = _add(found, _read_yaml(Path(f)), Path(f))
        named += [] if name in named else [name]
    return found, named, broken


def _resolve_raw(name: str, found: _Found, seen: Tuple[str, ...] = ()) -> Tuple[Dict[str, Any], List[Path]]:
    raw, sources = found[name]
    parent = raw.get("extends")
    if not parent:
        return raw, sources
    if parent in seen or parent == name:
        raise ProfileError(f"{sources[-1]}: `extends: {parent}` makes a cycle")
    if parent not in found:
        raise ProfileError(f"{sources[-1]}: `extends: {parent}` names no known cluster ({', '.join(sorted(found))})")
    base, base_sources = _resolve_raw(parent, found, seen + (name,))
    child = {k: v for k, v in raw.items() if k != "extends"}
    return _deep_merge(base, child), base_sources + sources


_ALLOWED = {
    "dialect": Dialect,
    "launch.launcher": Launcher,
    "status": Status,
    "log.live": LogLive,
    "group.where": GroupWhere,
    "rendezvous.master_addr": MasterAddr,
}


def _validate(raw: Dict[str, Any], sources: List[Path]) -> Profile:
    raw = {k: v for k, v in raw.items() if k != "extends"}
    try:
        return msgspec.convert(raw, Profile)
    except msgspec.ValidationError as exc:
        text = str(exc)
        m = re.search(r" - at `\$\.?([^`]*)`$", text)
        key = m.group(1) if m else ""
        msg = text[: m.start()] if m else text
        unknown = re.match(r"Object contains unknown field `(\w+)`", msg)
        missing = re.match(r"Object missing required field `(\w+)`", msg)
        if unknown:
            key = f"{key}.{unknown.group(1)}" if key else unknown.group(1)
            msg = "is not a known key (typo?)"
        elif missing:
            key = f"{key}.{missing.group(1)}" if key else missing.group(1)
            msg = "is required"
        elif key in _ALLOWED:
            msg = f"{msg}; allowed: {', '.join(get_args(_ALLOWED[key]))}"
        where = f"key `{key}`: " if key else ""
        raise ProfileError(f"{sources[-1]}: {where}{msg}") from None


def available() -> List[str]:
    found, _, broken = _all()
    return sorted(set(found) | set(broken))


def load(name: Optional[str], *, profile_file: ProfileFiles = None) -> Profile:
    """The resolved profile `name`; `profile_file` (the --profile files, in turn) is merged last."""
    found, named, broken = _all(profile_file)
    if not name and len(named) > 1:
        raise ProfileError(
            f"the --profile files name {len(named)} clusters ({', '.join(named)})", hint="pick one with --cluster NAME"
        )
    name = name or (named[0] if named else "local")
    if name in broken:
        raise broken[name]
    if name not in found:
        import difflib

        close = difflib.get_close_matches(name, list(found), n=1, cutoff=0.5)
        hint = f"did you mean `{close[0]}`?" if close else f"known: {', '.join(sorted(found))}"
        raise ProfileError(f"unknown cluster {name!r}", hint=f"{hint} `hpc-launch clusters` lists them")
    raw, sources = _resolve_raw(name, found)
    return _validate(raw, sources)


def sources_of(name: str, *, profile_file: ProfileFiles = None) -> List[Path]:
    found = _all(profile_file)[0]
    return list(_resolve_raw(name, found)[1]) if name in found else []


def summaries() -> List[Dict[str, Any]]:
    """One row per known cluster for `hpc-launch clusters` (keys: docs/commands.md); a profile
    that does not load is a row with status "broken" and its one-line error, never a failure."""
    from .errors import HpcLaunchError

    rows: List[Dict[str, Any]] = []
    for name in available():
        try:
            p = load(name)
        except HpcLaunchError as exc:
            rows.append({"name": name, "status": "broken", "error": exc.one_line()})
            continue
        rows.append(
            {
                "name": p.name,
                "scheduler": p.dialect,
                "gpus_per_node": p.node.gpus,
                "launcher": p.launch.launcher,
                "status": p.status,
                "title": p.title,
                "queues": sorted(p.queues),
                "login": p.login,
            }
        )
    return rows


def resolved_yaml(name: str, profile_file: ProfileFiles = None) -> str:
    """`clusters show NAME`: the profile as resolved (defaults filled, overrides merged), with
    the files it came from."""
    import yaml

    p = load(name, profile_file=profile_file)
    sources = sources_of(p.name, profile_file=profile_file)
    return (
        "# from: "
        + ", ".join(str(s) for s in sources)
        + "\n"
        + yaml.safe_dump(p.to_dict(), sort_keys=False, allow_unicode=True)
    )
