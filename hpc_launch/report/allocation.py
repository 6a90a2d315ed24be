"""A planned training on a site: the chain of jobs it needs on the queue it would use, checked
against the site's limits, and its charge in the site's own unit where the profile knows it.

Each link of a chain (`submit --chain K`) starts up (measured: the prologue's time stamp to the
first training step of the reported jobs), trains until the walltime less the stop margin
(`submit --stop-before`, by default a tenth of the walltime, 30 s to 5 min), then checkpoints
and exits for the next link. So a link of walltime W trains for W - stop margin - start-up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..errors import HpcLaunchError, SpecError
from ..site.profiles import Profile
from ..walltime import hms, parse_walltime
from .scaling import Plan, ScaleGroup, ScalePoint


def stop_margin(walltime_s: int) -> int:
    """The default --stop-before (resolve.queue_time.stop_before without the option)."""
    return min(300, max(30, walltime_s // 10))


@dataclass
class Chain:
    nodes: int
    links: Optional[int] = None
    link_walltime_s: Optional[int] = None
    startup_s: Optional[float] = None  # per link; None: not measured (no start-up counted)
    used_node_hours: Optional[float] = None  # the training plus one start-up per link
    reserved_node_hours: Optional[float] = None  # links x link walltime x nodes: what the site holds
    charge: Optional[float] = None  # used_node_hours x the site's rate, in its unit
    refused: str = ""  # why the site would not take it, and the fix


@dataclass
class SitePlan:
    cluster: str
    queue: Optional[str]
    unit: str  # the site's charge unit, "" when the profile names none
    rate: Optional[float]  # units per node-hour on `queue`
    chains: Dict[int, Chain] = field(default_factory=dict)
    lines: List[str] = field(default_factory=list)  # what the report says about it


def _queue(profile: Profile, plan: Plan, nodes: int) -> Optional[str]:
    if plan.queue is not None:
        if profile.queues and plan.queue not in profile.queues:
            raise HpcLaunchError(
                f"--queue {plan.queue}: {profile.name} has no such queue",
                hint=f"one of: {', '.join(profile.queues)}",
            )
        return plan.queue
    from ..resolve.queue_time import asked_walltime, default_queue  # the queue `submit` picks for these nodes

    return default_queue(profile, nodes, asked_walltime(None))


def _longest(profile: Profile, queue: Optional[str], nodes: int) -> Optional[int]:
    """The longest walltime `queue` allows for `nodes` (a routing queue's tier), if it says."""
    q = profile.queues.get(queue or "")
    if q is None:
        return None
    tier = next((t for t in q.tiers if t.min_nodes <= nodes <= t.max_nodes), None)
    limit = tier.max_walltime if tier else q.max_walltime
    return parse_walltime(limit) if limit else None


def _refusal(profile: Profile, queue: Optional[str], nodes: int, walltime_s: int) -> str:
    """The site's limits on one link, as `submit` checks them: '' when it takes it."""
    from ..site.rules import check

    where = f"on {profile.name}"
    q = profile.queues.get(queue or "")
    if q is not None:
        if q.max_nodes and nodes > q.max_nodes:
            return (
                f"{nodes} nodes are above the {queue} limit of {q.max_nodes} {where} (fewer nodes, or another --queue)"
            )
        if nodes < q.min_nodes:
            return f"{nodes} nodes are below the {queue} minimum of {q.min_nodes} {where} (another --queue)"
        longest = _longest(profile, queue, nodes)
        if longest is not None and walltime_s > longest:
            most = hms(longest)
            return f"--link-walltime {hms(walltime_s)} is above the {most} {queue} allows {where} (use {most} or less)"
    try:
        check(profile, queue=queue, nodes=nodes, walltime_s=walltime_s, procs_per_node=1)
    except SpecError as exc:
        return exc.one_line()
    return ""


def chain_for(profile: Profile, plan: Plan, point: ScalePoint, queue: Optional[str], rate: Optional[float]) -> Chain:
    from ..resolve.common import MAX_CHAIN

    c = Chain(nodes=point.nodes, startup_s=point.startup_s)
    if point.wall_h is None:
        return c
    train_s = point.wall_h * 3600
    startup = point.startup_s or 0.0
    longest = _longest(profile, queue, point.nodes)
    limit = plan.link_walltime_s or longest
    if limit is None:
        c.refused = (
            f"{queue or profile.name} states no maximum walltime: give --link-walltime HH:MM:SS, "
            "the longest one job may run there"
        )
        return c
    usable = limit - stop_margin(limit) - startup
    if usable <= 0:
        least = hms(60 * math.ceil((startup + 300 + 60) / 60))  # the widest stop margin and a minute to train
        c.refused = (
            f"a link of {hms(limit)} leaves no training time after the start-up ({startup:.0f} s) and the stop "
            f"margin ({stop_margin(limit)} s) (use a --link-walltime of at least {least})"
        )
        return c
    links = math.ceil(train_s / usable)
    walltime = limit
    if plan.link_walltime_s is None:
        # even links, each as long as its share of the training needs (the queue waits less for them),
        # with the widest stop margin (5 min), rounded up to the minute
        walltime = min(limit, 60 * math.ceil((train_s / links + startup + 300) / 60))
        q = profile.queues.get(queue or "")
        if q is not None and q.min_walltime:
            walltime = max(walltime, parse_walltime(q.min_walltime))
    c.links, c.link_walltime_s = links, walltime
    c.used_node_hours = point.nodes * (train_s + links * startup) / 3600
    c.reserved_node_hours = point.nodes * links * walltime / 3600
    c.charge = c.used_node_hours * rate if rate is not None else None
    if links > MAX_CHAIN:
        fixes = "more nodes" + (
            f", or a longer --link-walltime (up to {hms(longest)} on {queue})"
            if longest and walltime < longest
            else ", or a queue with a longer walltime"
        )
        c.refused = f"needs {links} links, more than --chain allows (1-{MAX_CHAIN}) ({fixes})"
        return c
    c.refused = _refusal(profile, queue, point.nodes, walltime)
    return c


def _limits(profile: Profile, queue: Optional[str], nodes: int) -> str:
    """The limits a link was checked against, in words."""
    from ..resolve.common import MAX_CHAIN

    q = profile.queues.get(queue or "")
    said = []
    if q is not None:
        said.append(f"{q.min_nodes}-{q.max_nodes} nodes" if q.max_nodes else f"at least {q.min_nodes} node(s)")
        longest = _longest(profile, queue, nodes)
        if longest is not None:
            said.append(f"at most {hms(longest)} a job at {nodes} node(s)")
    said.append(f"--chain 1-{MAX_CHAIN}")
    return f"the limits of {queue or profile.name} on {profile.name} ({', '.join(said)})"


def _unit_line(profile: Profile, queue: Optional[str]) -> str:
    charge = profile.charge
    if charge is None:
        return f"charge: {profile.name}'s profile names no charge unit: node-hours only"
    rate = charge.rate(queue)
    said = (
        f"{rate:g} {charge.unit} per node-hour on {queue or profile.name}"
        if rate is not None
        else f"the rate on {queue or profile.name} is not in the profile: node-hours only"
    )
    return f"charge: in {charge.unit}, {said} (source [{charge.status}]: {charge.source})"


def _length(plan: Plan, point: ScalePoint) -> str:
    """The entrypoint's own length option for the planned training."""
    if plan.epochs is not None:
        return f", training `--epochs {plan.epochs}`"
    if plan.steps is not None:
        return f", training `--steps {plan.steps}`"
    if plan.samples is not None and point.global_batch:
        return f", training `--steps {math.ceil(plan.samples / point.global_batch)}`"
    return ""


def submit_line(profile: Profile, queue: Optional[str], chain: Chain) -> str:
    q = f" --queue {queue}" if queue else ""
    return (
        f"hpc-launch submit -c {profile.name} --nodes {chain.nodes}{q} -t {hms(chain.link_walltime_s or 0)} "
        f"--chain {chain.links} ..."
    )


def site_plan(group: ScaleGroup, plan: Optional[Plan], profile: Optional[Profile]) -> Optional[SitePlan]:
    """The chain and the charge of the planned training on the jobs' cluster (None without a plan)."""
    if plan is None or not plan.planned or profile is None:
        return None
    from .. import dialects

    proposed = next(p for p in group.points if p.proposed)
    queue = _queue(profile, plan, proposed.nodes)
    rate = profile.charge.rate(queue) if profile.charge else None
    site = SitePlan(profile.name, queue, profile.charge.unit if profile.charge else "", rate)
    site.lines.append(_unit_line(profile, queue))
    if not dialects.get(profile.dialect).has_scheduler:
        site.lines.append(
            f"chain: {profile.name} has no scheduler (no walltime, no chain): the training runs as one job"
        )
        return site
    for p in group.points:
        site.chains[p.nodes] = chain_for(profile, plan, p, queue, rate)
    c = site.chains[proposed.nodes]
    if c.links is None and not c.refused:
        return site
    if c.refused:
        site.lines.append(f"chain for the proposed {c.nodes} node(s) on {queue or profile.name}: refused: {c.refused}")
    else:
        startup = (
            f"{c.startup_s:.0f} s start-up (the longest measured)"
            if c.startup_s is not None
            else "start-up not measured (the logs lack the prologue's time stamp or `ended_at`), none counted"
        )
        assert c.link_walltime_s is not None
        site.lines.append(
            f"chain for the proposed {c.nodes} node(s) on {queue or profile.name}: {c.links} link(s) x "
            f"{hms(c.link_walltime_s)}; each link: {startup}, {stop_margin(c.link_walltime_s)} s stop margin "
            f"to checkpoint, the rest training; within {_limits(profile, queue, c.nodes)}: "
            f"{c.used_node_hours:.1f} node-hours used, {c.reserved_node_hours:.1f} held"
            + (f", {c.charge:,.1f} {site.unit}" if c.charge is not None else "")
        )
        site.lines.append(
            f"run: `{submit_line(profile, queue, c)}` (... = the measured jobs' other options{_length(plan, proposed)})"
        )
    for p in group.points:
        other = site.chains[p.nodes]
        if other.refused and p is not proposed:
            site.lines.append(f"- {p.nodes} node(s): refused: {other.refused}")
    return site
