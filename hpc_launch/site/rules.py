"""The sites' own rules, checked before anything is written.

Profile data, not code, says what a site allows: a queue's minimum walltime, and node-count
tiers of a routing queue, each with its own maximum walltime (Polaris `prod`: 10-24 nodes at
most 3 h, 25-99 at most 6 h, 100-496 at most 24 h; a job outside them is refused by qsub with
`Job rejected by all possible destinations`). Per-rank profile data (`launch.cpu_bind`) must
cover the ranks asked for. Each violation is a SpecError whose one line names a --walltime,
--nodes or --queue that would work.

A user's jobs at once (`max_user_jobs`, per queue and for the whole site): a chain submits all
its links at once and a sweep all its points, so where the site allows fewer the scheduler
takes the first ones and refuses the rest (ALCF: 1 job per user on debug-scaling; OLCF: 100 in
all). `check_jobs` refuses such a submission before anything is submitted. A site that says
where jobs run from (`project_dir`: ALCF Aurora's project space, not home) refuses a work dir in
the home directory.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional

from ..errors import SpecError
from .profiles import Profile, Queue, Tier
from ..walltime import hms, parse_walltime


def check(
    profile: Profile,
    *,
    queue: Optional[str],
    nodes: int,
    walltime_s: int,
    procs_per_node: int,
    chain: int = 1,
    workdir: Optional[str] = None,
    group: Optional[str] = None,
) -> None:
    where = f"on {profile.name}"
    if workdir is not None and profile.project_dir and _in_home(workdir):
        place = profile.project_dir.replace("{group}", group or "<project>")
        raise SpecError(
            f"the work dir {workdir} is in the home directory, and {profile.name} runs jobs from the project's "
            f"space ({place}), not home",
            hint=f"pass --workdir {place}/<your dir>",
        )
    q = profile.queues.get(queue) if queue else None
    if q is not None:
        if q.min_walltime and walltime_s < parse_walltime(q.min_walltime):
            least = hms(parse_walltime(q.min_walltime))
            raise SpecError(
                f"--walltime {hms(walltime_s)} is below the {queue} minimum of {least} {where}",
                hint=f"use --walltime {least} or more",
            )
        if q.tiers:
            tier = _tier(q, nodes)
            if tier is None:
                bands = ", ".join(_band(t) for t in _sorted(q.tiers))
                raise SpecError(
                    f"--nodes {nodes} is in none of the {queue} node ranges {where} ({bands})",
                    hint=_fixes(profile, queue, q, nodes, walltime_s, None),
                )
            if walltime_s > parse_walltime(tier.max_walltime):
                # a routing queue's refusal (PBS): `qsub: Job rejected by all possible destinations`
                routed = (
                    f"; it routes them to {tier.routes_to}, so qsub would "
                    "answer 'Job rejected by all possible destinations'"
                    if tier.routes_to
                    else ""
                )
                raise SpecError(
                    f"--walltime {hms(walltime_s)} is above the {hms(parse_walltime(tier.max_walltime))} that "
                    f"{queue} allows for {_band(tier)} nodes {where}{routed}",
                    hint=_fixes(profile, queue, q, nodes, walltime_s, tier),
                )
    bind = profile.launch.cpu_bind
    if bind and procs_per_node > len(bind):
        raise SpecError(
            f"{procs_per_node} ranks per node, but launch.cpu_bind of {profile.name} gives CPUs for {len(bind)}",
            hint=f"use --gpus-per-node {len(bind)} or fewer, or list one CPU set per rank in launch.cpu_bind",
        )
    if chain > 1:
        check_jobs(
            profile,
            {queue: chain},
            what=f"--chain {chain} submits {chain} linked jobs at once",
            fewer=lambda most: f"--chain {most}" + (" (one job)" if most == 1 else ""),
            nodes=nodes,
            walltime_s=walltime_s,
        )


def check_jobs(
    profile: Profile,
    jobs: Dict[Optional[str], int],
    *,
    what: str,
    fewer: Callable[[int], str],
    nodes: int,
    walltime_s: int,
) -> None:
    """`jobs`: how many jobs one submission puts in each queue at once (every link of a chain,
    every point of a sweep, each array task where the site counts them). Refused where the
    site's per-user limit is lower, naming `fewer(limit)` and a queue that takes them all."""
    for name, count in jobs.items():
        q = profile.queues.get(name) if name else None
        if q is None or q.max_user_jobs is None or count <= q.max_user_jobs:
            continue
        most = q.max_user_jobs
        takers = [
            (other_name, other.max_user_jobs)
            for other_name, other in profile.queues.items()
            if other_name != name
            and not other.by_request
            and (other.max_user_jobs is None or other.max_user_jobs >= count)
            and _accepts(other, nodes, walltime_s)
        ]
        takers.sort(key=lambda t: t[1] is None)  # a queue whose limit the site states first
        others = [f"--queue {n} ({f'{m} per user' if m else 'no per-user limit stated'})" for n, m in takers]
        raise SpecError(
            f"{what} in {name}, but {profile.name} allows a user {_jobs(most)} there at once "
            f"(queued, held or running): the scheduler would refuse the rest",
            hint=", or ".join([f"use {fewer(most)}"] + others[:1]),
        )
    site_most = profile.max_user_jobs
    if site_most is not None and sum(jobs.values()) > site_most:
        raise SpecError(
            f"{what}, but {profile.name} allows a user {_jobs(site_most)} at once in all queues together "
            f"(queued, held or running): the scheduler would refuse the rest",
            hint=f"use {fewer(site_most)}, fewer if other jobs of yours are queued there",
        )


def _in_home(path: str) -> bool:
    """`~`, `~/...` (a remote home, as the script names it), /home/..., or under this user's home."""
    if path == "~" or path.startswith(("~/", "/home/")):
        return True
    home = os.path.expanduser("~").rstrip("/")
    return bool(home) and home != "/" and (path == home or path.startswith(home + "/"))


def _jobs(n: int) -> str:
    return f"{n} job" + ("" if n == 1 else "s")


def _sorted(tiers: List[Tier]) -> List[Tier]:
    return sorted(tiers, key=lambda t: t.min_nodes)


def _band(tier: Tier) -> str:
    return f"{tier.min_nodes}-{tier.max_nodes}"


def _tier(q: Queue, nodes: int) -> Optional[Tier]:
    return next((t for t in q.tiers if t.min_nodes <= nodes <= t.max_nodes), None)


def _accepts(q: Queue, nodes: int, walltime_s: int) -> bool:
    if nodes < q.min_nodes or (q.max_nodes and nodes > q.max_nodes):
        return False
    if q.max_walltime and walltime_s > parse_walltime(q.max_walltime):
        return False
    if q.min_walltime and walltime_s < parse_walltime(q.min_walltime):
        return False
    if q.tiers:
        tier = _tier(q, nodes)
        return tier is not None and walltime_s <= parse_walltime(tier.max_walltime)
    return True


def _fixes(profile: Profile, name: Optional[str], q: Queue, nodes: int, walltime_s: int, tier: Optional[Tier]) -> str:
    """What would work instead: a shorter walltime, a node count in a tier that allows this
    walltime (the nearest one), or another queue with the same GPUs that takes the job."""
    fixes = []
    if tier is not None:
        fixes.append(f"use --walltime {hms(parse_walltime(tier.max_walltime))} or less")
    fitting = [t for t in q.tiers if walltime_s <= parse_walltime(t.max_walltime)]
    if fitting:
        near = min(fitting, key=lambda t: min(abs(nodes - t.min_nodes), abs(nodes - t.max_nodes)))
        fixes.append(f"--nodes {_band(near)} (up to {hms(parse_walltime(near.max_walltime))} on {name})")
    gpus = q.gpus if q.gpus is not None else profile.node.gpus
    others = [
        other_name
        for other_name, other in profile.queues.items()
        if other_name != name
        and not other.by_request
        and (other.gpus if other.gpus is not None else profile.node.gpus) == gpus
        and _accepts(other, nodes, walltime_s)
    ]
    if others:
        fixes.append(f"--queue {others[0]}")
    if not fixes:
        return f"no {profile.name} queue takes {nodes} nodes for {hms(walltime_s)}: ask for fewer nodes or less time"
    if len(fixes) > 1:
        fixes[-1] = "or " + fixes[-1]
    return ", ".join(fixes)
