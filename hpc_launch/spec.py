"""JobSpec (what the user asks for, site-neutral) and its resolution against a cluster profile.

Everything a user can get wrong is checked here, before anything is written or submitted:
each problem is a SpecError with one line that names the fix.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Dict, List, Optional

from .errors import SpecError
from .profiles import Profile
from .walltime import hms, minutes, parse_walltime

PROJECT_CONFIG_NAMES = ("hpc-launch.yaml", ".hpc-launch.yaml")

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,62}$")
_TOKEN = re.compile(r"^[A-Za-z0-9_.@%+-][A-Za-z0-9_.@%+:/=-]*$")  # queue, group, module names, hosts
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Names whose values must not be written into a job script (it is copied, kept, often world-readable).
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.I)


@dataclass
class JobSpec:
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
    pass_env: List[str] = field(default_factory=list)  # names handed to the job by the scheduler, never written

    @classmethod
    def keys(cls) -> List[str]:
        return [f.name for f in fields(cls)]


def find_project_config(start: Optional[Path] = None) -> Optional[Path]:
    here = (start or Path.cwd()).resolve()
    for directory in [here, *here.parents]:
        for name in PROJECT_CONFIG_NAMES:
            candidate = directory / name
            if candidate.is_file():
                return candidate
        if (directory / ".git").exists():
            break
    return None


def load_project_config(path: Path) -> Dict[str, Any]:
    import yaml

    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"{path}: cannot read the project config ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: the project config must be a YAML mapping (keys: {', '.join(JobSpec.keys())})")
    aliases = {"project": "group", "gpus": "gpus_per_node", "train-args": "train_args", "gpus-per-node": "gpus_per_node"}
    out: Dict[str, Any] = {}
    for key, value in data.items():
        key = aliases.get(key, key)
        if key not in JobSpec.keys():
            raise SpecError(f"{path}: unknown key {key!r}", hint=f"known keys: {', '.join(JobSpec.keys())}")
        if key == "train_args" and isinstance(value, str):
            import shlex

            value = shlex.split(value)
        if key == "env" and isinstance(value, dict):
            value = {str(k): str(v) for k, v in value.items()}
        if key in ("modules", "hosts", "directives", "train_args") and isinstance(value, str):
            value = [value]
        out[key] = value
    return out


def spec_from(config: Dict[str, Any], overrides: Dict[str, Any]) -> JobSpec:
    """Project config values, then command-line options (only those given) on top."""
    merged = dict(config)
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


@dataclass
class ResolvedJob:
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

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def walltime(self) -> str:
        return hms(self.walltime_s)

    def placeholders(self) -> Dict[str, Any]:
        return {
            "nodes": self.nodes, "queue": self.queue or "", "walltime": self.walltime,
            "walltime_minutes": minutes(self.walltime_s), "group": self.group or "", "name": self.name,
            "gpus_per_node": self.gpus_per_node, "procs_per_node": self.procs_per_node,
            "world_size": self.world_size, "workdir": self.workdir,
        }


def _check_token(value: str, what: str, fix: str) -> str:
    if not _TOKEN.match(value):
        raise SpecError(f"{what} {value!r} has characters a scheduler cannot take", hint=fix)
    return value


def resolve(spec: JobSpec, profile: Profile, *, cwd: Optional[str] = None) -> ResolvedJob:
    p = profile
    where = f"on {p.name}"

    if not _NAME.match(spec.name or ""):
        raise SpecError(f"job name {spec.name!r} is not usable", hint="use --name with a letter first, then letters, digits, '_', '.', '-' (at most 63)")

    if spec.nodes is None:
        spec.nodes = len(spec.hosts) if (profile.dialect == "none" and spec.hosts) else 1
    if not isinstance(spec.nodes, int) or spec.nodes < 1:
        raise SpecError(f"--nodes must be a whole number of at least 1, not {spec.nodes!r}")

    queue_name = spec.queue or p.default_queue
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
        raise SpecError(f"--nodes {spec.nodes} is above the {queue_name} limit of {queue.max_nodes} nodes {where}", hint=f"use --nodes {queue.max_nodes} or fewer, or another --queue")
    if queue and spec.nodes < queue.min_nodes:
        raise SpecError(f"--nodes {spec.nodes} is below the {queue_name} minimum of {queue.min_nodes} nodes {where}", hint="ask for more nodes or another --queue")

    raw_wall = spec.walltime or (queue.default_walltime if queue and queue.default_walltime else p.default_walltime)
    try:
        walltime_s = parse_walltime(str(raw_wall))
    except ValueError as exc:
        raise SpecError(f"--walltime: {exc}") from None
    if queue and queue.max_walltime and walltime_s > parse_walltime(queue.max_walltime):
        raise SpecError(f"--walltime {hms(walltime_s)} is above the {queue_name} maximum of {queue.max_walltime} {where}", hint=f"use --walltime {queue.max_walltime} or less")

    node_gpus = queue.gpus if queue and queue.gpus is not None else p.node.gpus
    gpus = node_gpus if spec.gpus_per_node is None else spec.gpus_per_node
    if not isinstance(gpus, int) or gpus < 0:
        raise SpecError(f"--gpus-per-node must be 0 or more, not {gpus!r}")
    if gpus > node_gpus:
        raise SpecError(f"--gpus-per-node {gpus} is more than the {node_gpus} GPUs of a {p.name} node", hint=f"use --gpus-per-node {node_gpus} or fewer")
    procs = max(gpus, 1)

    group = spec.group or p.group.default
    if group:
        _check_token(group, p.group.label, "pass --group with the plain group/project name")
    elif p.group.required:
        raise SpecError(f"{p.name} requires an {p.group.label} for accounting", hint=f"pass --group NAME (alias --project), or set `group:` in hpc-launch.yaml")

    modules = list(p.modules.load if spec.modules is None else spec.modules)
    for mod in modules:
        _check_token(mod, "module", "module names are plain words like cuda/12.6")

    env = dict(p.env)
    env.update(spec.env or {})
    for key, value in env.items():
        if not _ENV_KEY.match(key):
            raise SpecError(f"environment variable name {key!r} is not valid", hint="use --env NAME=VALUE with NAME made of letters, digits and _")
        if "\x00" in str(value):
            raise SpecError(f"the value of {key} contains a NUL byte")
        if p.launch.launcher in ("deepspeed-pdsh", "deepspeed-openmpi") and _CONTROL.search(str(value)):
            # .deepspeed_env is line-based: one KEY=VALUE per line, nothing else
            raise SpecError(f"the value of {key} contains a newline or control character, which DeepSpeed's .deepspeed_env cannot carry")

    for key in env:
        if _SECRET.search(key):
            raise SpecError(f"--env {key}=... would write a secret into the job script",
                            hint=f"export {key} in your shell and pass --pass-env {key}: the scheduler hands it to the job")
    pass_env = list(dict.fromkeys(spec.pass_env or []))
    for key in pass_env:
        if not _ENV_KEY.match(key):
            raise SpecError(f"--pass-env {key!r} is not a variable name")
        if key not in os.environ:
            raise SpecError(f"--pass-env {key}: it is not set in this shell", hint=f"export {key}=... first")
    if pass_env and p.dialect == "cobalt":
        raise SpecError("--pass-env is not supported on Cobalt (its --env would show the value on the command line)")

    for line in spec.directives:
        if _CONTROL.search(line) or not line.strip():
            raise SpecError(f"directive {line!r} must be one non-empty line", hint="pass each --directive as a single line such as '-l place=scatter'")

    hosts = list(spec.hosts if spec.hosts is not None else p.hosts)
    for host in hosts:
        _check_token(host, "host", "hosts are names or IP addresses")
    if p.dialect == "none":
        if not hosts:
            raise SpecError(f"{p.name} has no node list", hint="pass --hosts pod1,pod2 (names or IPs reachable over ssh) or set `hosts:` in your profile")
        if p.launch.launcher == "deepspeed" and spec.nodes > 1:
            raise SpecError(f"{p.name} runs on this machine only", hint="use --nodes 1, or the `pods` cluster for several machines")
        if spec.nodes > len(hosts):
            raise SpecError(f"--nodes {spec.nodes} but {p.name} knows only {len(hosts)} host(s): {', '.join(hosts)}", hint=f"pass --hosts with {spec.nodes} hosts or use --nodes {len(hosts)}")
        hosts = hosts[: spec.nodes]

    train_args = list(p.train_args if spec.train_args is None else spec.train_args)
    for arg in train_args:
        if "\x00" in arg:
            raise SpecError("a training argument contains a NUL byte")

    workdir = spec.workdir or cwd or os.getcwd()
    if _CONTROL.search(workdir):
        raise SpecError("the work directory path contains a newline or control character", hint="run from, or pass --workdir, a plain path")

    venv = spec.venv or p.python.venv
    if venv == "auto":
        venv = sys.prefix if sys.prefix != getattr(sys, "base_prefix", sys.prefix) else None

    login = spec.login if spec.login is not None else None
    return ResolvedJob(
        spec=spec, profile=p, name=spec.name, nodes=spec.nodes, queue=queue_name, walltime_s=walltime_s,
        group=group, gpus_per_node=gpus, procs_per_node=procs, workdir=workdir, modules=modules, env=env,
        train_args=train_args, script=spec.script, hosts=hosts, venv=venv, conda=spec.conda or p.python.conda,
        login=login, pass_env=pass_env,
    )


def with_defaults(spec: JobSpec, **kw) -> JobSpec:
    return replace(spec, **kw)
