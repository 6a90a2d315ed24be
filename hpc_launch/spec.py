"""JobSpec (what the user asks for, site-neutral) and its resolution against a cluster profile.

Everything a user can get wrong is checked here, before anything is written or submitted:
each problem is a SpecError with one line that names the fix.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Dict, List, Optional

import msgspec
from msgspec import field
from msgspec.structs import replace

from . import dialects, launchers, site_rules
from .errors import SpecError
from .profiles import Profile, Queue, Stage
from .directive_limits import directive_options
from .protocol import ENV_PREFLIGHT, ENV_STOP_SIGNAL, LOCAL_HOST, PLACEHOLDERS
from .walltime import hms, minutes, parse_walltime


_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,62}$")
# queue, group, module names, hosts; never a leading '-' (it would read as an option: `-P -x`)
_TOKEN = re.compile(r"^[A-Za-z0-9_.@%+][A-Za-z0-9_.@%+:/=-]*$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# in a --notify URL: C0, DEL, C1 and the line separators (a CR/LF would split a request or a mail header)
_URL_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_DS_ENV_UNSAFE = re.compile(r'["$`\\]')  # DeepSpeed's pdsh runner only wraps values in "..."
# Names whose values must not be written into a job script (it is copied, kept, often world-readable).
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)


class JobSpec(msgspec.Struct):
    cluster: Optional[str] = None
    nodes: Optional[int] = None  # default 1; on pods, every host given
    gpus_per_node: Optional[int] = None
    queue: Optional[str] = None
    walltime: Optional[str] = None
    group: Optional[str] = None
    name: str = "train"
    modules: Optional[List[str]] = None  # replaces the profile's list when given
    env: Dict[str, str] = field(default_factory=dict)
    script: Optional[str] = None  # a user script instead of `-m train`
    train_args: Optional[List[str]] = None  # replaces the profile's defaults when given
    directives: List[str] = field(default_factory=list)  # extra/overriding scheduler directives
    workdir: Optional[str] = None
    venv: Optional[str] = None
    conda: Optional[str] = None
    hosts: Optional[List[str]] = None  # pods: the node list
    login: Optional[str] = None
    pass_env: List[str] = field(
        default_factory=list
    )  # names whose values reach the job in a 0600 file, never written in the script
    notify: Optional[str] = None  # the variable holding a webhook URL: the job posts its start and end (notify.py)
    stop_before: Optional[str] = (
        None  # checkpoint and stop this long before the walltime (default: a tenth, 30 s to 5 min)
    )
    chain: int = 1  # N dependent jobs, each resuming from the newest complete checkpoint
    gather: Optional[int] = None  # pods: a port where the other hosts announce their addresses at start-up
    exclude: List[str] = field(
        default_factory=list
    )  # hosts the job must not run on (the user's, and those remembered as bad)
    spares: int = 0  # nodes held beyond --nodes: the job trains on the first --nodes that pass its start-up check
    failover: int = (
        0  # --failover N: N spares, and the job goes on on one when the gate or the watchdog finds a bad node
    )
    # node-local staging over the profile's `stage:` (docs/staging.md): True --stage-env, False --no-stage
    stage_env: Optional[bool] = None
    stage_data: Optional[str] = None  # --stage-data: a shared directory staged too
    container: Optional[str] = None  # --container IMAGE: the ranks run inside it (hpc_launch/container.py)
    preflight: bool = True  # --no-preflight: no pre-flight gate before the ranks' training (docs/preflight.md)
    stop_signal: Optional[str] = None  # --stop-signal: what a --script rank gets at the deadline (default SIGUSR1)

    @classmethod
    def keys(cls) -> List[str]:
        return list(cls.__struct_fields__)


# The option that sets each JobSpec value given as text: an empty one is refused, never read as "the default".
_TEXT_OPTIONS = {
    "cluster": "--cluster",
    "queue": "--queue",
    "walltime": "--walltime",
    "group": "--group",
    "name": "--name",
    "script": "--script",
    "workdir": "--workdir",
    "venv": "--venv",
    "conda": "--conda",
    "login": "--login",
    "stop_before": "--stop-before",
    "notify": "--notify",
    "container": "--container",
    "stop_signal": "--stop-signal",
}


def spec_from(config: Dict[str, Any], overrides: Dict[str, Any]) -> JobSpec:
    """Project config values, then command-line options (only those given) on top."""
    for source, values in (("hpc-launch.yaml key", config), ("", overrides)):
        for key, option in _TEXT_OPTIONS.items():
            value = values.get(key)
            if isinstance(value, str) and not value.strip():
                # `-c ''` (an unset shell variable) must not quietly become the default cluster
                what = f"{source} `{key}`" if source else option
                raise SpecError(f"{what} is empty", hint="give a value, or leave it out for the default")
    merged = dict(config)
    if os.environ.get("HPC_LAUNCH_NOTIFY", "").strip():  # the user's default, under the project file's
        merged.setdefault("notify", os.environ["HPC_LAUNCH_NOTIFY"].strip())
    for key, value in overrides.items():
        if value is None or value == [] or value == {}:
            continue
        if key == "env":
            merged["env"] = {**merged.get("env", {}), **value}
        elif key == "directives":
            merged["directives"] = list(merged.get("directives", [])) + list(value)
        else:
            merged[key] = value
    try:
        return JobSpec(**merged)
    except TypeError as exc:
        raise SpecError(f"bad job options: {exc}") from None


# ---------------------------------------------------------------------------------------------


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


def _staging(spec: JobSpec, p: Profile, launcher: "launchers.Launcher") -> Profile:
    """The profile with --stage-env / --stage-data / --no-stage over its `stage:`."""
    if spec.stage_env is None and spec.stage_data is None:
        return p
    if spec.stage_env is False:
        off = Stage(dest=p.stage.dest, timeout_s=p.stage.timeout_s, directives=p.stage.directives, image=False)
        return replace(p, stage=off)
    option = "--stage-env" if spec.stage_env else "--stage-data"
    if not launcher.per_node:
        raise SpecError(
            f"{option}: the {launcher.name} launcher of {p.name} has no way to run one task per node",
            hint="submit without it, or to a profile whose launcher is srun, mpiexec, mpirun or pdsh",
        )
    try:
        stage = Stage(
            env=bool(spec.stage_env) or p.stage.env,
            data=spec.stage_data if spec.stage_data is not None else p.stage.data,
            dest=p.stage.dest,
            timeout_s=p.stage.timeout_s,
            directives=p.stage.directives,
            image=p.stage.image,
        )
    except ValueError as exc:
        fix = "set stage.dest, the node-local directory, in your profile (docs/staging.md)"
        raise SpecError(f"{option}: {exc}", hint=fix if not p.stage.dest else "give an absolute directory") from None
    return replace(p, stage=stage)


def _check_token(value: str, what: str, fix: str) -> str:
    if not _TOKEN.match(value):
        raise SpecError(f"{what} {value!r} has characters a scheduler cannot take", hint=fix)
    return value


# Signals a rank may be asked to stop with: catchable, and none that means something else to a
# Python process or a launcher (INT is Ctrl-C, TERM the scheduler's kill, CHLD/SEGV/... the kernel's).
STOP_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGHUP", "SIGURG", "SIGXCPU")


def _layer_env(spec: JobSpec) -> Dict[str, str]:
    """--no-preflight and --stop-signal, as the variables every rank reads (protocol.ENV_PREFLIGHT,
    protocol.ENV_STOP_SIGNAL), so each launcher hands them on as it hands on --env."""
    env: Dict[str, str] = {}
    if spec.preflight is False:
        env[ENV_PREFLIGHT] = "0"
    if spec.stop_signal is not None:
        name = str(spec.stop_signal).strip().upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        if name not in STOP_SIGNALS:
            raise SpecError(
                f"--stop-signal {spec.stop_signal}: not a signal a rank can be asked to stop with",
                hint=f"use one of {', '.join(s[3:] for s in STOP_SIGNALS)} (default USR1)",
            )
        env[ENV_STOP_SIGNAL] = name
    return env


def _stop_before(spec: JobSpec, walltime_s: int) -> int:
    """How long before its walltime the job checkpoints and stops (the trainer's deadline)."""
    if spec.stop_before is None:
        return min(300, max(30, walltime_s // 10))
    try:
        margin = parse_walltime(str(spec.stop_before))
    except ValueError as exc:
        raise SpecError(f"--stop-before: {exc}") from None
    if margin >= walltime_s:
        raise SpecError(
            f"--stop-before {hms(margin)} leaves no time before the walltime {hms(walltime_s)}",
            hint="give a margin shorter than --walltime, e.g. --stop-before 5m",
        )
    return margin


def resolve(spec: JobSpec, profile: Profile, *, cwd: Optional[str] = None, host: str = LOCAL_HOST) -> ResolvedJob:
    """`host`: where the job is submitted from (decided by `prepare.choose_host`, never here)."""
    dialect = dialects.get(profile.dialect)
    launcher = launchers.get(profile.launch.launcher)
    p = _staging(spec, profile, launcher)
    if spec.container:
        from .container import container_of

        container_of(p, spec.container)  # a one-line error naming what to add where the site has no wiring
    if spec.container or p.stage.image is not None:
        from .container import staging

        p = replace(p, stage=staging(p, spec.container))  # the image staged too, or not (docs/containers.md)
    where = f"on {p.name}"
    if spec.exclude and not dialect.has_scheduler:  # no scheduler: the host list itself leaves them out
        listed = spec.hosts if spec.hosts is not None else p.hosts
        spec = replace(spec, hosts=[h for h in listed if h not in spec.exclude])

    if spec.directives and not dialect.has_scheduler:
        raise SpecError(
            f"--directive {spec.directives[0]!r}: {p.name} has no scheduler to read directives",
            hint="drop --directive, or submit to a cluster with a scheduler",
        )
    spec = replace(spec, **directive_options(spec, p, dialect))

    if not _NAME.match(spec.name or ""):
        raise SpecError(
            f"job name {spec.name!r} is not usable",
            hint="use --name with a letter first, then letters, digits, '_', '.', '-' (at most 63)",
        )

    if spec.nodes is None:  # the resolved job gets its own copy: the caller's spec is never changed
        spec = replace(spec, nodes=len(spec.hosts) if (not dialect.has_scheduler and spec.hosts) else 1)
    if not isinstance(spec.nodes, int) or spec.nodes < 1:
        raise SpecError(f"--nodes must be a whole number of at least 1, not {spec.nodes!r}")

    queue_name = spec.queue or _default_queue(p, spec.nodes, spec.walltime)
    queue = None
    if queue_name:
        _check_token(queue_name, "queue", "pass --queue with a plain name")
        if p.queues and queue_name not in p.queues:
            import difflib

            close = difflib.get_close_matches(queue_name, list(p.queues), n=1)
            has = f"{p.name} has: {', '.join(p.queues)}"
            hint = f"did you mean {close[0]}? {has}" if close else has
            raise SpecError(f"unknown queue {queue_name!r} {where}", hint=hint)
        queue = p.queues.get(queue_name)

    if queue and queue.max_nodes and spec.nodes > queue.max_nodes:
        raise SpecError(
            f"--nodes {spec.nodes} is above the {queue_name} limit of {queue.max_nodes} nodes {where}",
            hint=f"use --nodes {queue.max_nodes} or fewer, or another --queue",
        )
    if queue and spec.nodes < queue.min_nodes:
        raise SpecError(
            f"--nodes {spec.nodes} is below the {queue_name} minimum of {queue.min_nodes} nodes {where}",
            hint="ask for more nodes or another --queue",
        )

    raw_wall = spec.walltime or (queue.default_walltime if queue and queue.default_walltime else p.default_walltime)
    try:
        walltime_s = parse_walltime(str(raw_wall))
    except ValueError as exc:
        raise SpecError(f"--walltime: {exc}") from None
    if walltime_s > MAX_WALLTIME_S:
        raise SpecError(
            f"--walltime {hms(walltime_s)} is more than a year, longer than any site allows",
            hint="ask for what one job may run, e.g. --walltime 24:00:00, and --chain N links for longer",
        )
    if queue and queue.max_walltime and walltime_s > parse_walltime(queue.max_walltime):
        raise SpecError(
            f"--walltime {hms(walltime_s)} is above the {queue_name} maximum of {queue.max_walltime} {where}",
            hint=f"use --walltime {queue.max_walltime} or less",
        )
    # with no scheduler hpc-launch ends the job at its walltime (dialects/none.py): the same stop request first
    stop_before_s = _stop_before(spec, walltime_s)
    if not dialect.has_scheduler and spec.stop_before is None:
        stop_before_s = min(stop_before_s, walltime_s // 2)
    if isinstance(spec.chain, bool) or not isinstance(spec.chain, int) or not 1 <= spec.chain <= MAX_CHAIN:
        raise SpecError(
            f"--chain must be a whole number from 1 to {MAX_CHAIN}, not {spec.chain!r}",
            hint="every link waits in the queue from the start: chain fewer, longer jobs",
        )
    if spec.chain > 1 and not dialect.has_scheduler:
        raise SpecError(
            f"--chain needs a scheduler to hold each link until the one before ends; {p.name} has none",
            hint="run one job with a longer time, or chain on a cluster with a scheduler",
        )

    node_gpus = p.node_gpus(queue_name)
    gpus = node_gpus if spec.gpus_per_node is None else spec.gpus_per_node
    if not isinstance(gpus, int) or gpus < 0:
        raise SpecError(f"--gpus-per-node must be 0 or more, not {gpus!r}")
    if gpus > node_gpus:
        raise SpecError(
            f"--gpus-per-node {gpus} is more than the {node_gpus} GPUs of a {p.name} node",
            hint=f"use --gpus-per-node {node_gpus} or fewer",
        )
    procs = max(gpus, 1)

    group = spec.group or p.group.default
    if group:
        _check_token(group, p.group.label, "pass --group with the plain group/project name")
    elif p.group.required:
        raise SpecError(
            f"{p.name} requires an {p.group.label} for accounting",
            hint="pass --group NAME (alias --project), or set `group:` in hpc-launch.yaml",
        )

    modules = list(p.modules.load if spec.modules is None else spec.modules)
    for mod in modules:
        _check_token(mod, "module", "module names are plain words like cuda/12.6")

    env = dict(p.env)
    env.update(spec.env or {})
    env.update(_layer_env(spec))
    for key, value in env.items():
        if not _ENV_KEY.match(key):
            raise SpecError(
                f"environment variable name {key!r} is not valid",
                hint="use --env NAME=VALUE with NAME made of letters, digits and _",
            )
        if "\x00" in str(value):
            raise SpecError(f"the value of {key} contains a NUL byte")
        if launcher.env_file and _CONTROL.search(str(value)):
            # .deepspeed_env is line-based: one KEY=VALUE per line, nothing else
            raise SpecError(
                f"the value of {key} contains a newline or control "
                "character, which DeepSpeed's .deepspeed_env cannot carry"
            )
        if (
            launcher.env_via_shell
            and spec.nodes > 1
            and (_DS_ENV_UNSAFE.search(str(value)) or str(value) != str(value).strip())
        ):
            # DeepSpeed's pdsh runner writes `export KEY="VALUE";` into the remote shell command
            raise SpecError(
                f"the value of {key} holds \" $ ` \\ or leading/trailing spaces: DeepSpeed's pdsh launcher hands it "
                'to the other nodes\' shell inside "...", which would expand or cut it',
                hint=f"drop those characters from {key}, or use --nodes 1",
            )

    for key in env:
        if _SECRET.search(key):
            raise SpecError(
                f"--env {key}=... would write a secret into the job script",
                hint=(
                    f"export {key} in your shell and pass --pass-env "
                    f"{key}: it reaches the job in a file only you can read"
                ),
            )
    # --pass-env values travel in a 0600 file the job reads and deletes (hpc_launch/secrets.py)
    pass_env = list(dict.fromkeys(spec.pass_env or []))
    # --notify NAME: a webhook URL is a secret (anyone holding it can post), so it travels as one
    notify = spec.notify.strip() if spec.notify else None
    if notify and notify not in pass_env:
        pass_env.append(notify)
    for key in pass_env:
        opt = "--notify" if key == notify else "--pass-env"
        if not _ENV_KEY.match(key):
            raise SpecError(f"{opt} {key!r} is not a variable name")
        if key.upper().startswith("HPC_LAUNCH_"):
            raise SpecError(
                f"{opt} {key}: names starting with HPC_LAUNCH_ belong to the job script",
                hint="pass the value under another name",
            )
        if key in env:
            raise SpecError(
                f"{key} is given both as --env (or in the profile's env:) and as {opt}",
                hint=f"drop one of them; a secret belongs in --pass-env {key}",
            )
        if key not in os.environ:
            raise SpecError(f"{opt} {key}: it is not set in this shell", hint=f"export {key}=... first")
        if key == notify and _URL_CONTROL.search(os.environ[key]):
            raise SpecError(  # never the value: it is the secret
                f"--notify {key}: its value holds a control character (a line break, tab or escape), which no URL has",
                hint=f"set {key} to the webhook URL or mail address form alone, on one line",
            )
    if pass_env and launcher.env_file and spec.nodes > 1:
        # DeepSpeed's multi-node runner puts what it forwards on a command line: pdsh's
        # `export K=V; ...`, mpirun's `-x K=V` (deepspeed/launcher/multinode_runner.py)
        raise SpecError(
            f"--pass-env with --nodes {spec.nodes}: the {launcher.name} launcher can hand variables to other nodes "
            "only on their command line, readable in ps by every user there",
            hint="use --nodes 1 (one node runs without it), or a profile with launch.launcher mpirun or srun",
        )

    for line in spec.directives:
        if _CONTROL.search(line) or not line.strip():
            raise SpecError(
                f"directive {line!r} must be one non-empty line",
                hint="pass each --directive as a single line such as '-l place=scatter'",
            )

    hosts = list(spec.hosts if spec.hosts is not None else p.hosts)
    seen: set = set()
    for host in hosts:
        _check_token(host, "host", "hosts are names or IP addresses")
        if host in seen:  # DeepSpeed refuses a hostfile naming a host twice
            raise SpecError(
                f"host {host} is listed twice in --hosts (or the profile's hosts:)",
                hint="name each host once; --gpus-per-node sets the ranks on each",
            )
        seen.add(host)
    exclude, spares = _avoidance(spec, dialect, launcher, hosts)
    if spec.gather is not None:  # the other hosts announce their addresses when the job starts (hpc_launch/gather.py)
        if dialect.has_scheduler or not launcher.over_ssh:
            raise SpecError(
                f"--gather is for machines with no scheduler reached over ssh; {p.name} finds its nodes itself",
                hint="drop --gather, or use --cluster pods",
            )
        if not isinstance(spec.gather, int) or not 1024 <= spec.gather <= 65535:
            raise SpecError(f"--gather {spec.gather}: the port must be 1024-65535", hint="e.g. --gather 29400")
        if not p.net_if:
            raise SpecError(
                f"--gather needs `net_if` in the {p.name} profile: the interface whose address the others announce to",
                hint="set net_if: eth0 (or your pods' interface) in your profile",
            )
        if spec.nodes < 2:
            raise SpecError(
                "--gather with one node: no other host to wait for",
                hint="pass --nodes N (this machine and N-1 that announce), or --hosts THIS,POD2,... naming them",
            )
    if not dialect.has_scheduler and not (spec.gather is not None and not hosts):
        if not hosts:
            raise SpecError(
                f"{p.name} has no node list",
                hint=(
                    "pass --hosts pod1,pod2 (names or IPs reachable over ssh), "
                    "set `hosts:` in your profile, or --gather PORT --nodes N"
                ),
            )
        if launcher.single_node and spec.nodes > 1:
            raise SpecError(
                f"{p.name} runs on this machine only", hint="use --nodes 1, or the `pods` cluster for several machines"
            )
        if spec.nodes > len(hosts):
            raise SpecError(
                f"--nodes {spec.nodes} but {p.name} knows only {len(hosts)} host(s): {', '.join(hosts)}",
                hint=f"pass --hosts with {spec.nodes} hosts or use --nodes {len(hosts)}",
            )
        hosts = hosts[: spec.nodes]

    # The profile's train_args belong to `python -m train`: a --script of the user's gets none.
    default_args = [] if spec.script else p.train_args
    train_args = list(default_args if spec.train_args is None else spec.train_args)
    for arg in train_args:
        if "\x00" in arg:
            raise SpecError("a training argument contains a NUL byte")

    workdir = spec.workdir or cwd or os.getcwd()
    if _CONTROL.search(workdir):
        raise SpecError(
            "the work directory path contains a newline or control character",
            hint="run from, or pass --workdir, a plain path",
        )

    site_rules.check(
        p,
        queue=queue_name,
        nodes=spec.nodes + spares,
        walltime_s=walltime_s,
        procs_per_node=procs,
        chain=spec.chain,
        workdir=workdir,
        group=group,
    )

    venv = spec.venv or p.python.venv
    if venv == "auto":
        venv = _running_venv()
    conda = spec.conda or p.python.conda
    if p.python.env_required and not (venv or conda):
        venv = _submitting_venv(p, host)

    login = spec.login if spec.login is not None else None
    return ResolvedJob(
        spec=spec,
        profile=p,
        name=spec.name,
        nodes=spec.nodes,
        queue=queue_name,
        walltime_s=walltime_s,
        group=group,
        gpus_per_node=gpus,
        procs_per_node=procs,
        workdir=workdir,
        modules=modules,
        env=env,
        train_args=train_args,
        script=spec.script,
        hosts=hosts,
        venv=venv,
        conda=conda,
        login=login,
        pass_env=pass_env,
        notify=notify,
        stop_before_s=stop_before_s,
        chain=spec.chain,
        exclude=exclude if dialect.has_scheduler else [],
        spares=spares,
        failover=_failover(spec, train_args),
        container=spec.container or None,
    )


MAX_SPARES = 64
# Each link is a job waiting in the queue from the start; sites cap a user's queued jobs far below
# this (Slurm MaxSubmitJobs, PBS max_queued), and a thousand walltimes is years of training.
MAX_CHAIN = 1000
# Longer than any site's queue allows (ABCI's longest: 168 h); beyond it is a typo (`--walltime
# 9999h`), and Slurm reads a huge minute count as its INFINITE/NO_VAL markers. Longer runs: --chain.
MAX_WALLTIME_S = 365 * 86400


def _takes(queue: Queue, nodes: int, walltime: Optional[str]) -> bool:
    if nodes < queue.min_nodes or (queue.max_nodes and nodes > queue.max_nodes) or queue.by_request:
        return False
    if queue.tiers and not any(t.min_nodes <= nodes <= t.max_nodes for t in queue.tiers):
        return False
    try:
        asked = parse_walltime(str(walltime)) if walltime else None
    except ValueError:
        return True  # the walltime's own check says what is wrong with it
    return not (asked and queue.max_walltime and asked > parse_walltime(queue.max_walltime))


def _default_queue(p: Profile, nodes: Any, walltime: Optional[str]) -> Optional[str]:
    """The profile's default queue, or the first of its queue_fallbacks that takes the job when
    the default does not; the default again when none does (its limit is then the error)."""
    if not p.default_queue or not p.queue_fallbacks or not isinstance(nodes, int):
        return p.default_queue
    for name in (p.default_queue, *p.queue_fallbacks):
        if _takes(p.queues[name], nodes, walltime):
            return name
    return p.default_queue


def _avoidance(spec: JobSpec, dialect, launcher, hosts: List[str]) -> "tuple[List[str], int]":
    """The hosts to keep the job off and the spare nodes to hold, checked."""
    exclude: List[str] = []
    for host in spec.exclude or []:
        _check_token(host, "--exclude host", "give host names as the scheduler names them")
        if host not in exclude:
            exclude.append(host)
    if exclude and dialect.has_scheduler and not dialect.supports(dialects.HostExclusion):
        raise SpecError(
            f"{dialect.title} cannot keep a job off named hosts (--exclude {','.join(exclude)})",
            hint="hold spare nodes instead: --spares K trains on the --nodes that pass the start-up check",
        )
    spares = spec.spares or 0
    failover = spec.failover or 0
    if isinstance(failover, int) and not isinstance(failover, bool) and 0 < failover <= MAX_SPARES:
        spares = max(spares, failover)  # --failover N holds N spares (at least)
    if isinstance(spares, bool) or not isinstance(spares, int) or not 0 <= spares <= MAX_SPARES:
        raise SpecError(f"--spares must be a whole number from 0 to {MAX_SPARES}, not {spares!r}")
    what = "--failover" if failover else "--spares"
    if spares and not dialect.has_scheduler:
        raise SpecError(
            f"{what} needs a scheduler that allocates the nodes",
            hint="on pods list more --hosts than --nodes: the job uses the first that answer",
        )
    if spares and not launcher.places_by_hostfile:
        raise SpecError(
            f"{what}: the {launcher.name} launcher places ranks on every allocated node, not on a chosen few",
            hint=(
                "this scheduler can exclude hosts instead: --exclude "
                "HOST (and hosts found bad are excluded by themselves)"
            ),
        )
    return exclude, spares


def _failover(spec: JobSpec, train_args: List[str]) -> int:
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


def _running_venv() -> Optional[str]:
    """The virtualenv hpc-launch itself runs in, if any."""
    return sys.prefix if sys.prefix != getattr(sys, "base_prefix", sys.prefix) else None


def _submitting_venv(p: Profile, host: str) -> str:
    """A site whose python3 has no torch, and no env given: the venv hpc-launch runs in, when the
    job is submitted from this machine (the login node), said on stderr; otherwise refuse."""
    from .paths import user_config_dir

    active = _running_venv()
    if active and host == LOCAL_HOST:
        sys.stderr.write(
            f"hpc-launch: no --venv given: the job activates {active}, the virtualenv hpc-launch runs in\n"
        )
        return active
    override = user_config_dir() / "clusters" / f"{p.name}.yaml"
    raise SpecError(
        f"{p.name} jobs would run the system python3, which has no torch",
        hint=f"pass --venv PATH (a virtualenv on {p.name}), or set python.venv in {override}",
    )


def with_defaults(spec: JobSpec, **kw) -> JobSpec:
    return replace(spec, **kw)
