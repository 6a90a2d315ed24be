"""The scheduler registry: one module per dialect, one line here per dialect, imported when first
asked for. A site ships its own without forking through the entry-point group
`hpc_launch.dialects` (`lsf = "site_pkg.lsf:LSF"`); a built-in name wins over an entry point.

A dialect whose module fails to import is named on stderr once and skipped by `all_dialects()`:
every other command still works (`get` of that name is a one-line error).

Nothing outside this package compares a dialect's name: code asks the dialect object
(`has_scheduler`, `supports(...)`, `query`, `exit_state`, ...) and validation and CLI choices
come from `names()` / `scheduler_names()`.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Dict, List, Optional

from ..errors import ProfileError
from .base import (
    CAPABILITIES,
    Arrays,
    CancelOutcome,
    ChainHandOff,
    Dialect,
    FailureWording,
    HostExclusion,
    NodeListCommand,
    Allocation,
    PendingExclusion,
    RestartNotice,
    StartEstimates,
    StatusInfo,
    TestSubmission,
    scheduler_words,
    with_site_commands,
)

ENTRY_POINT_GROUP = "hpc_launch.dialects"

# name -> "module:Class", in the order `hostfile` looks for a job's node list.
_BUILTIN: Dict[str, str] = {
    "pbspro": "hpc_launch.dialects.pbspro:PBSPro",
    "gridengine": "hpc_launch.dialects.gridengine:GridEngine",
    "cobalt": "hpc_launch.dialects.cobalt:Cobalt",
    "slurm": "hpc_launch.dialects.slurm:Slurm",
    "none": "hpc_launch.dialects.none:NoScheduler",
}
# Built-ins with no scheduler (`has_scheduler = False`), known without importing them.
_WITHOUT_SCHEDULER = {"none"}

_DIALECTS: Dict[str, Dialect] = {}  # loaded (tests may add one here)
_BROKEN: Dict[str, str] = {}  # name -> why its module did not load
_plugins: Optional[Dict[str, str]] = None  # entry points: name -> "module:Class"


def _declared_on_path() -> bool:
    """Whether any distribution on sys.path declares the group: a few directory listings, so a
    command on a site without plugins never imports importlib.metadata (~30 ms)."""
    needle = f"[{ENTRY_POINT_GROUP}]"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if not name.endswith((".dist-info", ".egg-info")):
                continue
            try:
                with open(os.path.join(entry or ".", name, "entry_points.txt"), encoding="utf-8") as fh:
                    if needle in fh.read():
                        return True
            except OSError:
                continue
    return False


def _plugin_sources() -> Dict[str, str]:
    global _plugins
    if _plugins is None:
        _plugins = {}
        if _declared_on_path():
            from importlib.metadata import entry_points

            try:
                found = entry_points(group=ENTRY_POINT_GROUP)
            except TypeError:  # Python 3.9: a dict of groups
                found = entry_points().get(ENTRY_POINT_GROUP, [])  # type: ignore[attr-defined,arg-type]
            for ep in found:
                if ep.name not in _BUILTIN:
                    _plugins.setdefault(ep.name, ep.value)
    return _plugins


def _sources() -> Dict[str, str]:
    return {**_BUILTIN, **_plugin_sources()}


def _load(name: str) -> Optional[Dialect]:
    """The dialect `name`, imported on first use; None (said once on stderr) when it fails."""
    if name in _DIALECTS:
        return _DIALECTS[name]
    if name in _BROKEN:
        return None
    module_name, _, class_name = _sources()[name].partition(":")
    try:
        made = getattr(importlib.import_module(module_name), class_name)()
        if not isinstance(made, Dialect):
            raise TypeError(f"{class_name} is not a Dialect")
    except Exception as exc:  # any fault of that module is that dialect's, never every command's
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
        _BROKEN[name] = f"{module_name}: {why}"
        sys.stderr.write(f"hpc-launch: warning: scheduler dialect {name!r} skipped ({_BROKEN[name]})\n")
        return None
    _DIALECTS[name] = made
    return made


def load_or_skip(name: str) -> Optional[Dialect]:
    """The dialect `name`, or None when its module fails to import (said once on stderr)."""
    return _load(name)


def get(name: str) -> Dialect:
    """The dialect `name` (KeyError for a name no registry holds)."""
    if name not in _DIALECTS and name not in _sources():
        raise KeyError(name)
    found = _load(name)
    if found is None:
        raise ProfileError(
            f"scheduler dialect {name!r} cannot be loaded ({_BROKEN[name]})",
            hint="fix or remove that module; every other scheduler still works",
        )
    return found


def names() -> List[str]:
    """Every registered name, without importing any dialect."""
    return list(dict.fromkeys([*_sources(), *_DIALECTS]))


def scheduler_names() -> List[str]:
    """The names of dialects with a scheduler (whose node list `hostfile --from` reads), without
    importing a built-in."""
    return [n for n in names() if (_DIALECTS[n].has_scheduler if n in _DIALECTS else n not in _WITHOUT_SCHEDULER)]


def all_dialects() -> List[Dialect]:
    """Every dialect that loads, in registry order (one that fails is named on stderr, once)."""
    return [d for d in (_load(n) for n in names()) if d is not None]


__all__ = [
    "CAPABILITIES",
    "Arrays",
    "CancelOutcome",
    "ChainHandOff",
    "Dialect",
    "FailureWording",
    "HostExclusion",
    "NodeListCommand",
    "Allocation",
    "PendingExclusion",
    "RestartNotice",
    "StartEstimates",
    "StatusInfo",
    "TestSubmission",
    "all_dialects",
    "get",
    "load_or_skip",
    "names",
    "scheduler_names",
    "scheduler_words",
    "with_site_commands",
]
