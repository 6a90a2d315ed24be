"""The pre-flight gate's judgement (rank 0): every rank's facts against the job's plan.

Pure: the facts come in as the ranks published them (hpc_launch/train/preflight.py), the
problems go out most telling first, each with the host, what differs and the fix.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence


@dataclass(frozen=True)
class Problem:
    host: str
    fact: str  # what differs, one line
    fix: str
    bad_host: bool = False  # the host itself is at fault (not the job's settings)


def check(facts: Sequence[Mapping], *, world: int, ranks_per_node: Optional[int]) -> List[Problem]:
    """Everything that differs from the plan, most telling first."""
    by_host: Dict[str, List[Mapping]] = defaultdict(list)
    for f in facts:
        by_host[f["host"]].append(f)
    problems = _rank_numbering(facts, by_host, world)
    for host, ranks in sorted(by_host.items()):
        problems += _host_problems(host, ranks, ranks_per_node)
    return problems


def _rank_numbering(facts: Sequence[Mapping], by_host: Mapping[str, List[Mapping]], world: int) -> List[Problem]:
    """The ranks that started are exactly 0..world-1."""
    seen_ranks = sorted(f["rank"] for f in facts)
    if seen_ranks == list(range(world)):
        return []
    return [
        Problem(
            ",".join(sorted(by_host)),
            f"ranks {seen_ranks} started, the job asked for 0..{world - 1}",
            "check the launcher's rank count (-n, --ppn, --ntasks-per-node)",
        )
    ]


def _host_problems(host: str, ranks: List[Mapping], ranks_per_node: Optional[int]) -> List[Problem]:
    """One host's ranks: their count, local ranks, devices, threads and network interface."""
    names = ", ".join(str(f["rank"]) for f in ranks)
    return [
        *_ranks_on_host(host, ranks, names, ranks_per_node),
        *_local_ranks(host, ranks, names),
        *_devices(host, ranks, names),
        *_threads(host, ranks),
        *_interface(host, ranks),
    ]


def _ranks_on_host(host: str, ranks: List[Mapping], names: str, ranks_per_node: Optional[int]) -> List[Problem]:
    """As many ranks here as the job planned per node."""
    if not ranks_per_node or len(ranks) == ranks_per_node:
        return []
    return [
        Problem(
            host,
            f"{len(ranks)} rank(s) ({names}) on this host, the job planned {ranks_per_node} per node",
            "check the launcher's per-node count (--ppn, --npernode, --ntasks-per-node) and the hostfile's slots",
        )
    ]


def _local_ranks(host: str, ranks: List[Mapping], names: str) -> List[Problem]:
    """Local ranks unique on the host, and the launcher's per-node size the count that started."""
    problems: List[Problem] = []
    locals_ = [f["local_rank"] for f in ranks]
    if len(set(locals_)) != len(locals_):
        problems.append(
            Problem(
                host,
                f"ranks {names} share local ranks {sorted(locals_)}: two ranks would drive one device",
                "the launcher's local rank variable is wrong for this launcher"
                " (see hpc_launch/train/dist.py CONVENTIONS)",
            )
        )
    sizes = {f["local_size"] for f in ranks if f["local_size"] is not None}
    if sizes and sizes != {len(ranks)}:
        problems.append(
            Problem(
                host,
                f"the launcher says {sorted(sizes)} rank(s) per node, {len(ranks)} started here",
                "check the launcher's per-node count",
            )
        )
    return problems


def _devices(host: str, ranks: List[Mapping], names: str) -> List[Problem]:
    """No accelerator driven by two ranks."""
    devices = [f["device"] for f in ranks if f["device"] is not None]
    if len(set(devices)) == len(devices):
        return []
    return [
        Problem(
            host,
            f"ranks {names} share accelerator(s) {sorted(devices)}",
            "give each local rank its own device (CUDA_VISIBLE_DEVICES / ZE_AFFINITY_MASK per rank, or none)",
        )
    ]


def _threads(host: str, ranks: List[Mapping]) -> List[Problem]:
    """Each rank's threads within its CPU binding; else (only then) the host's threads within its CPUs."""
    problems = [
        Problem(
            host,
            f"rank {f['rank']} runs {f['threads']} threads in a {len(f['cpus'])}-CPU binding",
            f"set OMP_NUM_THREADS={len(f['cpus'])} (or the profile's launch threads) to match the binding",
        )
        for f in ranks
        if f["threads"] > len(f["cpus"])
    ]
    union = set().union(*(set(f["cpus"]) for f in ranks))
    total = sum(f["threads"] for f in ranks)
    if total > len(union) and not problems:
        problems.append(
            Problem(
                host,
                f"{len(ranks)} rank(s) run {total} threads on {len(union)} CPUs",
                f"set OMP_NUM_THREADS={max(1, len(union) // len(ranks))} (CPUs / ranks per node)",
            )
        )
    return problems


def _interface(host: str, ranks: List[Mapping]) -> List[Problem]:
    """The first rank that found the network interface missing or down names the host bad."""
    for f in ranks:
        if f["if_problem"]:
            return [
                Problem(
                    host,
                    f["if_problem"],
                    "set the profile's net_if to an interface every node has, "
                    "or keep this node out (it is remembered as bad: `hpc-launch hosts`)",
                    bad_host=True,
                )
            ]
    return []
