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
import re
from collections import Counter, OrderedDict
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from .errors import HostfileError

# A host name or IPv4 address as node files write them (RFC 1123 labels, dots; `_` seen at sites).
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
# Slurm's hostlist separators are comma, space and TAB (src/common/hostlist.c, hostlist_create_dims)
_HOSTLIST_SEP = ", \t\r\n"


def expand_slurm_nodelist(text: str) -> List[str]:
    """`n[1-3,07] gpu[01-02]-ib` -> n1 n2 n3 n07 gpu01-ib gpu02-ib (Slurm's hostlist syntax:
    items separated by commas or whitespace, brackets hold ranges)."""
    hosts: List[str] = []
    for item in _split_top_level(text.strip()):
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
        elif depth == 0 and ch in _HOSTLIST_SEP:
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


def _line_format(parts: List[str]) -> Tuple[str, int]:
    """(format, slots) of a host line of more than one word; format "" when unreadable."""
    if len(parts) == 2 and parts[1].startswith("slots=") and parts[1][6:].isdigit():
        return "deepspeed", int(parts[1][6:])  # DeepSpeed / Open MPI hostfile
    if len(parts) == 3 and parts[1].startswith("slots=") and parts[1][6:].isdigit() and re.fullmatch(r"max_slots=\d+", parts[2]):
        return "deepspeed", int(parts[1][6:])  # Open MPI's optional max_slots
    if len(parts) in (3, 4) and parts[1].isdigit() and "=" not in parts[2]:
        return "pe_hostfile", int(parts[1])  # Grid Engine: host slots queue [processors|binding] (sge_pe(5))
    return "", 0


def count_hosts(lines: Iterable[str], origin: str = "the node list") -> "OrderedDict[str, int]":
    """Hosts in first-seen order with their slots, read by content (see the module doc).
    One host per line: slots = how often the host appears (PBS: once per MPI rank)."""
    lines = list(lines)
    counts: "OrderedDict[str, int]" = OrderedDict()
    seen_format = ""
    # Each distinct line once (a PBS node file repeats every host once per rank): Counter keeps
    # first-seen order, so node order survives.
    for line, times in Counter(lines).items():
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        if len(parts) == 1:
            fmt, slots = "one host per line", 1
        else:
            fmt, slots = _line_format(parts)
            if not fmt:
                raise HostfileError(f"cannot read line {lines.index(line) + 1} of {origin}: {line.strip()[:120]!r}",
                                    hint="write one host per line, `host slots=N` lines, or pass a hostlist with --hosts")
        if fmt != seen_format:
            if seen_format:
                raise HostfileError(f"line {lines.index(line) + 1} of {origin} mixes formats ({fmt} after {seen_format}): {line.strip()[:120]!r}")
            seen_format = fmt
        host = parts[0]
        if fmt == "deepspeed" and (host in counts or times > 1):
            raise HostfileError(f"{origin} lists {host} twice (DeepSpeed refuses such a hostfile)")
        counts[host] = counts.get(host, 0) + slots * times
    for host in counts:
        if not _HOST.match(host):
            hint = "a Slurm hostlist? pass it with --hosts" if "[" in host else "one host name or IP address per line"
            raise HostfileError(f"{host[:120]!r} in {origin} is not a host name", hint=hint)
    return counts


def read_node_file(path: str, origin: str) -> str:
    """`origin` says where the path came from: `$PBS_NODEFILE`, `--nodefile`."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise HostfileError(f"cannot read the node file {path} (from {origin}): {exc.strerror}") from None
    except UnicodeDecodeError:
        raise HostfileError(f"the node file {path} (from {origin}) is not text") from None


def nodes_from_env(env: Mapping[str, str], prefer: Optional[str] = None) -> Tuple[str, "OrderedDict[str, int]"]:
    """(source description, host -> slots) from the node list of the scheduler whose job this is
    (`prefer`: only that scheduler's). Each dialect knows its own variables and their format."""
    from . import dialects  # here, not at import: `hpc-launch hostfile --hosts` needs none of it

    looked: List[str] = []
    for dialect in dialects.all_dialects():
        if not dialect.has_scheduler or (prefer and dialect.name != prefer):
            continue
        found = dialect.nodes_from_env(env)
        if found is not None:
            return found
        looked.extend(dialect.nodefile_vars)
    wanted = f" for {prefer}" if prefer else ""
    raise HostfileError(
        f"no scheduler node list found{wanted} (looked for {', '.join(looked) or 'nothing'})",
        hint="run inside a job, or pass --nodefile FILE or --hosts a,b",
    )


def nodes_from_file(path: str) -> "OrderedDict[str, int]":
    return count_hosts(read_node_file(path, "--nodefile").splitlines(), f"--nodefile {path}")


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
        found = count_hosts(expand_slurm_nodelist(hosts), "--hosts")
    elif nodefile:
        found = nodes_from_file(nodefile)
    else:
        _, found = nodes_from_env(env, prefer)
    return format_hostfile(filter_hosts(found, include, exclude), slots)


def summary(found: Dict[str, int]) -> str:
    return f"{len(found)} node(s), {sum(found.values())} slot(s)"
