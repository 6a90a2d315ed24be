"""Node lists as schedulers write them: Slurm's hostlist syntax and node files read by content.

Both the dialects (counting a job's hosts) and `hostfile` (writing DeepSpeed's hostfile) use
these, so they live apart from either: nothing here imports the dialect registry.

A node list is read by its content, whatever variable or option named it: one host per line
(PBS, Cobalt, SGE_JOB_HOSTLIST; repeats are slots), `host slots=N` (DeepSpeed / Open MPI
hostfile), `host slots queue processors` (Grid Engine's PE_HOSTFILE). Anything else is an
error naming the line, never a guess. Every expansion is bounded (MAX_HOSTS): a typo such as
`n[1-99999999999]` is an error in microseconds, not gigabytes of hostfile.

Standard library only: this runs inside every job, often on 1000s of nodes.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Dict, Iterable, List, Optional, Tuple

from .errors import HostfileError

# The largest machines have about 10,000 nodes (Aurora 10,624, Frontier 9,408): a list that
# expands past this is a typo, not a job.
MAX_HOSTS = 100_000

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
            hosts.extend(_expand_item(item, MAX_HOSTS - len(hosts)))
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


def _expand_item(item: str, budget: int) -> List[str]:
    """The hosts `item` names; more than `budget` of them is an error (checked before expanding)."""
    m = re.search(r"\[([^\]]*)\]", item)
    if not m:
        if budget < 1:
            raise _too_many(item)
        return [item]
    head, tail = item[: m.start()], item[m.end() :]
    out: List[str] = []
    for rng in m.group(1).split(","):
        bounds = rng.split("-")
        if len(bounds) == 1 and bounds[0].isdigit():
            values = [bounds[0]]
        elif len(bounds) == 2 and bounds[0].isdigit() and bounds[1].isdigit():
            lo, hi = int(bounds[0]), int(bounds[1])
            if hi < lo:
                raise HostfileError(f"range {rng!r} runs backwards in node list item {item!r}")
            if hi - lo + 1 > budget:
                raise _too_many(item)
            width = len(bounds[0])
            values = [str(v).zfill(width) for v in range(lo, hi + 1)]
        else:
            raise HostfileError(f"cannot read range {rng!r} in node list item {item!r}")
        for value in values:
            out.extend(_expand_item(head + value + tail, budget - len(out)))
            if len(out) > budget:
                raise _too_many(item)
    return out


def _too_many(item: str) -> HostfileError:
    return HostfileError(
        f"node list item {item[:80]!r} names more than {MAX_HOSTS:,} hosts",
        hint="check the ranges in the node list (a typo such as n[1-99999999999]?)",
    )


def _line_format(parts: List[str]) -> Tuple[str, int]:
    """(format, slots) of a host line of more than one word; format "" when unreadable."""
    if len(parts) == 2 and parts[1].startswith("slots=") and parts[1][6:].isdigit():
        return "deepspeed", int(parts[1][6:])  # DeepSpeed / Open MPI hostfile
    if (
        len(parts) == 3
        and parts[1].startswith("slots=")
        and parts[1][6:].isdigit()
        and re.fullmatch(r"max_slots=\d+", parts[2])
    ):
        return "deepspeed", int(parts[1][6:])  # Open MPI's optional max_slots
    if len(parts) in (3, 4) and parts[1].isdigit() and "=" not in parts[2]:
        return "pe_hostfile", int(parts[1])  # Grid Engine: host slots queue [processors|binding] (sge_pe(5))
    return "", 0


# The common case, a node file of plain host names (PBS, Cobalt: every node of a 10,000-node job
# once per rank), checked in one regex pass in C instead of a Python loop per line.
_PLAIN_HOSTS = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*\n)*")


def _one_host_per_line(distinct: "Counter[str]") -> "Optional[Dict[str, int]]":
    """The counts when every line is one plain host name; None when any line needs a closer look."""
    joined = "\n".join(distinct) + "\n"
    if not _PLAIN_HOSTS.fullmatch(joined):
        return None
    return distinct  # a Counter is a dict in first-seen order: no copy of 100,000 hosts


# A PBS node file names each host once per rank, one line after the other: each run of one line
# is matched in C, so 100,000 nodes x 8 ranks make 100,000 strings, not 800,000 (issue 18).
_RUNS = re.compile(r"(.+)\n(?:\1\n)*")


def count_host_text(text: str, origin: str = "the node list") -> Dict[str, int]:
    """count_hosts(text.splitlines()), the same answer, about a third faster for plain host lines
    that repeat one after the other (a file that does not start so is read line by line: runs of
    one line would cost more than they save)."""
    end = text.find("\n") + 1  # no copy of the rest: a node file can be tens of MB
    if not end or not text.startswith(text[:end], end):
        return count_hosts(text.splitlines(), origin)
    counts: Dict[str, int] = {}
    for run in _RUNS.finditer(text if text.endswith("\n") else text + "\n"):
        host = run[1]
        counts[host] = counts.get(host, 0) + (run.end() - run.start()) // (len(host) + 1)
    if counts and _PLAIN_HOSTS.fullmatch("\n".join(counts) + "\n"):
        return counts
    return count_hosts(text.splitlines(), origin)  # anything else: read line by line


def count_hosts(lines: Iterable[str], origin: str = "the node list") -> Dict[str, int]:
    """Hosts in first-seen order with their slots, read by content (see the module doc).
    One host per line: slots = how often the host appears (PBS: once per MPI rank)."""
    lines = lines if isinstance(lines, list) else list(lines)
    # Each distinct line once (a PBS node file repeats every host once per rank): Counter keeps
    # first-seen order, so node order survives.
    distinct = Counter(lines)
    fast = _one_host_per_line(distinct)
    if fast is not None:
        return fast
    counts: Dict[str, int] = {}
    seen_format = ""
    for line, times in distinct.items():
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        if len(parts) == 1:
            fmt, slots = "one host per line", 1
        else:
            fmt, slots = _line_format(parts)
            if not fmt:
                raise HostfileError(
                    f"cannot read line {lines.index(line) + 1} of {origin}: {line.strip()[:120]!r}",
                    hint="write one host per line, `host slots=N` lines, or pass a hostlist with --hosts",
                )
        if fmt != seen_format:
            if seen_format:
                raise HostfileError(
                    f"line {lines.index(line) + 1} of {origin} mixes formats "
                    f"({fmt} after {seen_format}): {line.strip()[:120]!r}"
                )
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
