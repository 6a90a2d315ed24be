"""Scheduler node lists -> DeepSpeed hostfile (`host slots=N`, one line per node, in node order).

DeepSpeed rejects a host listed twice, and PBS node files repeat each host once per MPI slot,
so hosts are de-duplicated keeping their first position (node rank follows line order).
Which variable names a job's node list, and how a scheduler writes it, lives on its dialect
(`hpc_launch/dialects/`); this module keeps the parsing helpers they share.

A node list is read by its content, whatever variable or option named it: one host per line
(PBS, Cobalt, SGE_JOB_HOSTLIST; repeats are slots), `host slots=N` (DeepSpeed / Open MPI
hostfile), `host slots queue processors` (Grid Engine's PE_HOSTFILE). Anything else is an
error naming the line, never a guess.

Standard library only: this runs inside every job, often on 1000s of nodes.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Dict, List, Mapping, Optional, Tuple

from .errors import HostfileError
from .nodelist import count_host_text, count_hosts, expand_slurm_nodelist, read_node_file


# Ranks per node: DeepSpeed starts one process per slot, and no node has thousands of GPUs or cores.
MAX_SLOTS = 4096


def nodes_from_env(env: Mapping[str, str], prefer: Optional[str] = None) -> Tuple[str, Dict[str, int]]:
    """(source description, host -> slots) from the node list of the scheduler whose job this is
    (`prefer`: only that scheduler's). Each dialect knows its own variables and their format."""
    from . import dialects  # here, not at import: `hpc-launch hostfile --hosts` needs none of it

    looked: List[str] = []
    for name in [prefer] if prefer else dialects.scheduler_names():
        dialect = dialects.get(name) if prefer else dialects.load_or_skip(name)
        if dialect is None or not dialect.has_scheduler:
            continue
        found = dialect.nodes_from_env(env)
        if found is None and isinstance(dialect, dialects.NodeListCommand):
            found = dialect.nodes_from_command(env)  # a scheduler that gives it by a command (Flux)
        if found is not None:
            return found
        looked.extend(dialect.nodefile_vars)
        if isinstance(dialect, dialects.NodeListCommand):
            looked.append(f"{dialect.name}'s node-list command")
    wanted = f" for {prefer}" if prefer else ""
    raise HostfileError(
        f"no scheduler node list found{wanted} (looked for {', '.join(looked) or 'nothing'})",
        hint="run inside a job, or pass --nodefile FILE or --hosts a,b",
    )


def nodes_from_file(path: str) -> Dict[str, int]:
    return count_host_text(read_node_file(path, "--nodefile"), f"--nodefile {path}")


def filter_hosts(hosts: Dict[str, int], include: Optional[str], exclude: Optional[str]) -> Dict[str, int]:
    """DeepSpeed's `--include/--exclude` syntax, host level: `host1@host2`.

    Slot-level specs (`host:0,1`) select GPU indices, which a hostfile cannot express: those
    belong on the deepspeed command line itself.
    """
    if include and exclude:
        raise HostfileError("--include and --exclude cannot be combined (as in DeepSpeed)")
    spec = include or exclude
    if not spec:
        return hosts
    names = [s for s in spec.split("@") if s]
    for name in names:
        if ":" in name:
            raise HostfileError(
                f"slot-level filter {name!r} cannot be written into a hostfile",
                hint="pass it to deepspeed --include/--exclude instead",
            )
        if name not in hosts:
            raise HostfileError(
                f"host {name!r} in the filter is not in the node list "
                f"({', '.join(list(hosts)[:5])}{'...' if len(hosts) > 5 else ''})"
            )
    keep = (lambda h: h in names) if include else (lambda h: h not in names)
    return {h: s for h, s in hosts.items() if keep(h)}


def format_hostfile(hosts: Dict[str, int], slots: Optional[int]) -> str:
    """`slots` fixes every node's count (the profile's GPUs); None keeps the counts seen."""
    if not hosts:
        raise HostfileError("the node list is empty")
    if slots is not None and not 1 <= slots <= MAX_SLOTS:
        raise HostfileError(
            f"--slots must be from 1 to {MAX_SLOTS}, not {slots}", hint="give the GPUs or ranks per node"
        )
    if slots is not None:  # one join in C, not a formatted string per host (100,000 of them at scale)
        line_end = f" slots={slots}\n"
        return line_end.join(hosts) + line_end
    return "".join(f"{h} slots={n}\n" for h, n in hosts.items())


def write_atomic(path: str, text: str) -> None:
    """Write via a temp file and rename: a reader never sees half a hostfile."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise HostfileError(f"cannot write {path}: {exc.strerror}") from None


def build(
    *,
    env: Mapping[str, str],
    prefer: Optional[str] = None,
    nodefile: Optional[str] = None,
    hosts: Optional[str] = None,
    slots: Optional[int] = None,
    include: Optional[str] = None,
    exclude: Optional[str] = None,
) -> str:
    if hosts:
        # Slurm hostlist syntax too: a plain split on "," would turn `n[1,3]` into hosts `n[1`, `3]`
        listed = expand_slurm_nodelist(hosts)
        found = count_hosts(listed, "--hosts")
        if len(found) < len(listed):  # a repeat would silently count as a second slot
            twice = next(h for h, n in Counter(listed).items() if n > 1)
            raise HostfileError(
                f"host {twice} is listed twice in --hosts", hint="name each host once; --slots N sets the slots"
            )
    elif nodefile:
        found = nodes_from_file(nodefile)
    else:
        _, found = nodes_from_env(env, prefer)
    return format_hostfile(filter_hosts(found, include, exclude), slots)


def summary(found: Dict[str, int]) -> str:
    return f"{len(found)} node(s), {sum(found.values())} slot(s)"


def scheduler_names() -> List[str]:
    """The schedulers whose node list `hostfile --from` can read (none imported)."""
    from . import dialects

    return dialects.scheduler_names()
