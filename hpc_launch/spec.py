"""JobSpec: what the user asks for, site-neutral (its options are rows of options.py).

Its resolution against a cluster profile is hpc_launch/resolve/: everything a user can get wrong
is checked there, before anything is written or submitted, each problem a SpecError with one line
that names the fix.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import msgspec
from msgspec import field
from msgspec.structs import replace

from . import options
from .errors import SpecError

if TYPE_CHECKING:  # the checks against a profile: hpc_launch/resolve/ (see the end of this module)
    from .resolve import MAX_CHAIN, MAX_SPARES, MAX_WALLTIME_S, ResolvedJob, resolve  # noqa: F401
    from .resolve.environment import STOP_SIGNALS  # noqa: F401
    from .resolve.queue_time import stop_before as _stop_before  # noqa: F401


class JobSpec(msgspec.Struct):
    """What the user asks for. Each field has its row in the option table (hpc_launch/options.py:
    flags, help, parser, project-file kind, the commands that take it) and its rule in resolve."""

    cluster: Optional[str] = None
    nodes: Optional[int] = None  # default 1; on pods, every host given
    gpus_per_node: Optional[int] = None
    queue: Optional[str] = None
    walltime: Optional[str] = None
    group: Optional[str] = None
    name: str = "train"
    modules: Optional[List[str]] = None  # replaces the profile's list when given
    env: Dict[str, str] = field(default_factory=dict)
    script: Optional[str] = None  # a user script instead of `-m hpc_launch.train`
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


# The option that sets each JobSpec value given as text (the rows marked `text` in the option
# table): an empty one is refused, never read as "the default".
_TEXT_OPTIONS = options.text_options()


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
# The checks of a JobSpec against a profile are hpc_launch/resolve/, one module per group of rules.
# Their names stay importable from here (`from hpc_launch.spec import resolve`), loaded on first
# use: the resolve package imports JobSpec from this module.
_RESOLVE_NAMES = {
    "resolve": ("hpc_launch.resolve", "resolve"),
    "ResolvedJob": ("hpc_launch.resolve.job", "ResolvedJob"),
    "MAX_CHAIN": ("hpc_launch.resolve.common", "MAX_CHAIN"),
    "MAX_SPARES": ("hpc_launch.resolve.common", "MAX_SPARES"),
    "MAX_WALLTIME_S": ("hpc_launch.resolve.common", "MAX_WALLTIME_S"),
    "STOP_SIGNALS": ("hpc_launch.resolve.environment", "STOP_SIGNALS"),
    "_stop_before": ("hpc_launch.resolve.queue_time", "stop_before"),
}


def __getattr__(name: str) -> Any:
    if name not in _RESOLVE_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module, attr = _RESOLVE_NAMES[name]
    return getattr(importlib.import_module(module), attr)


def with_defaults(spec: JobSpec, **kw: Any) -> JobSpec:
    return replace(spec, **kw)
