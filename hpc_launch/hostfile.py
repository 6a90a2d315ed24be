"""Scheduler node lists -> DeepSpeed hostfile (`host slots=N`, one line per node, in node order).

DeepSpeed rejects a host listed twice, and PBS node files repeat each host once per MPI slot,
so hosts are de-duplicated keeping their first position (node rank follows line order).
Standard library only: this runs inside every job, often on 1000s of nodes.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .errors import HostfileError

# Which environment variable gives the node list, per dialect, in detection order.
SOURCES: Sequence[Tuple[str, str]] = (
    ("pbspro", "PBS_NODEFILE"),
    ("cobalt", "COBALT_NODEFILE"),
    ("gridengine", "PE_HOSTFILE"),
    ("gridengine", "SGE_JOB_HOSTLIST"),
    ("slurm", "SLURM_JOB_NODELIST"),
)


def expand_slurm_nodelist(text: str) -> List[str]:
    """`n[1-3,07],gpu[01-02]-ib` -> n1 n2 n3 n07 gpu01-ib gpu02-ib (Slurm's hostlist syntax)."""
    hosts: List[str] = []
    for item in _split_top_level(text.strip()):
        item = item.strip()
        if item:
            hosts.extend(_expand_item(item))
    return hosts


def _split_top_level(text: str) -> List[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostfileError(f"unbalanced ']' in node list {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise HostfileError(f"unbalanced '[' in node list {text!r}")
    parts.append(text[start:])
    return parts


def _expand_item(item: str) -> List[str]:
    m = re.search(r"\[([^\]]*)\]", item)
    if not m:
        return [item]
    head, tail = item[: m.start()], item[m.end():]
    out: List[str] = []
    for rng in m.group(1).split(","):
        bounds = rng.split("-")
        if len(bounds) == 1 and bounds[0].isdigit():
            values = [bounds[0]]
        elif len(bounds) == 2 and bounds[0].isdigit() and bounds[1].isdigit():
            lo, hi = int(bounds[0]), int(bounds[1])
            if hi < lo:
                raise HostfileError(f"range {rng!r} runs backwards in node list item {item!r}")
            width = len(bounds[0])
            values = [str(v).zfill(width) for v in range(lo, hi + 1)]
        else:
            raise HostfileError(f"cannot read range {rng!r} in node list item {item!r}")
        for value in values:
            out.extend(_expand_item(head + value + tail))
    return out


def count_hosts(lines: Iterable[str]) -> "OrderedDict[str, int]":
    """Hosts in first-seen order with how many times each appears (PBS: once per slot)."""
    counts: "OrderedDict[str, int]" = OrderedDict()
    for line in lines:
        host = line.strip().split(None, 1)[0] if line.strip() else ""
        if host and not host.startswith("#"):
            counts[host] = counts.get(host, 0) + 1
    return counts


def read_node_file(path: str, origin: str) -> str:
    """`origin` says where the path came from: `$PBS_NODEFILE`, `--nodefile`."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise HostfileError(f"cannot read the node file {path} (from {origin}): {exc.strerror}") from None


def nodes_from_env(env: Mapping[str, str], prefer: Optional[str] = None) -> Tuple[str, "OrderedDict[str, int]"]:
    """(source description, host -> slots seen) from the scheduler's environment."""
    for dialect, var in SOURCES:
        if prefer and dialect != prefer:
            continue
        value = env.get(var)
        if not value:
            continue
        if var == "SLURM_JOB_NODELIST":
            return f"${var}", count_hosts(expand_slurm_nodelist(value))
        text = read_node_file(value, f"${var}")
        if var == "PE_HOSTFILE":
            # `host slots queue processors` per line: the slot count is the second column
            pe: "OrderedDict[str, int]" = OrderedDict()
            for line in text.splitlines():
                cols = line.split()
                if len(cols) >= 2 and cols[1].isdigit():
                    pe[cols[0]] = pe.get(cols[0], 0) + int(cols[1])
            return f"${var}", pe
        return f"${var}", count_hosts(text.splitlines())
    wanted = f" for {prefer}" if prefer else ""
    raise HostfileError(
        f"no scheduler node list found{wanted} (looked for {', '.join(v for d, v in SOURCES if not prefer or d == prefer)})",
        hint="run inside a job, or pass --nodefile FILE or --hosts a,b",
    )


def nodes_from_file(path: str) -> "OrderedDict[str, int]":
    return count_hosts(read_node_file(path, "--nodefile").splitlines())


def filter_hosts(hosts: "OrderedDict[str, int]", include: Optional[str], exclude: Optional[str]) -> "OrderedDict[str, int]":
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
            raise HostfileError(f"slot-level filter {name!r} cannot be written into a hostfile", hint="pass it to deepspeed --include/--exclude instead")
        if name not in hosts:
            raise HostfileError(f"host {name!r} in the filter is not in the node list ({', '.join(list(hosts)[:5])}{'...' if len(hosts) > 5 else ''})")
    keep = (lambda h: h in names) if include else (lambda h: h not in names)
    return OrderedDict((h, s) for h, s in hosts.items() if keep(h))


def format_hostfile(hosts: "OrderedDict[str, int]", slots: Optional[int]) -> str:
    """`slots` fixes every node's count (the profile's GPUs); None keeps the counts seen."""
    if not hosts:
        raise HostfileError("the node list is empty")
    if slots is not None and slots < 1:
        raise HostfileError(f"--slots must be at least 1, not {slots}")
    return "".join(f"{h} slots={slots if slots is not None else n}\n" for h, n in hosts.items())


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
        found = count_hosts(expand_slurm_nodelist(hosts))
    elif nodefile:
        found = nodes_from_file(nodefile)
    else:
        _, found = nodes_from_env(env, prefer)
    return format_hostfile(filter_hosts(found, include, exclude), slots)


def summary(found: Dict[str, int]) -> str:
    return f"{len(found)} node(s), {sum(found.values())} slot(s)"
