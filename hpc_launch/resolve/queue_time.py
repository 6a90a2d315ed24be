"""The queue, its node limits, the walltime and the time before it: the request's --walltime is
parsed once (`asked`), and every rule here reads that one result."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple

from ..errors import SpecError
from ..site.profiles import Profile, Queue
from ..spec import JobSpec
from ..walltime import hms, parse_walltime
from .common import MAX_CHAIN, MAX_WALLTIME_S, check_token


class Asked(NamedTuple):
    """The request's --walltime, read once: its seconds, or why it cannot be read (said by the
    walltime rule, after the queue's own refusals, as before)."""

    text: Optional[str]
    seconds: Optional[int] = None
    error: Optional[str] = None


def asked_walltime(text: Optional[str]) -> Asked:
    if not text:
        return Asked(None)
    try:
        return Asked(str(text), seconds=parse_walltime(str(text)))
    except ValueError as exc:
        return Asked(str(text), error=str(exc))


def takes(queue: Queue, nodes: int, asked: Asked) -> bool:
    """Whether `queue` takes a job of `nodes` nodes and the asked walltime."""
    if nodes < queue.min_nodes or (queue.max_nodes and nodes > queue.max_nodes) or queue.by_request:
        return False
    if queue.tiers and not any(t.min_nodes <= nodes <= t.max_nodes for t in queue.tiers):
        return False
    if asked.error:
        return True  # the walltime's own check says what is wrong with it
    return not (asked.seconds and queue.max_walltime and asked.seconds > parse_walltime(queue.max_walltime))


def default_queue(p: Profile, nodes: Any, asked: Asked) -> Optional[str]:
    """The profile's default queue, or the first of its queue_fallbacks that takes the job when
    the default does not; the default again when none does (its limit is then the error)."""
    if not p.default_queue or not p.queue_fallbacks or not isinstance(nodes, int):
        return p.default_queue
    for name in (p.default_queue, *p.queue_fallbacks):
        if takes(p.queues[name], nodes, asked):
            return name
    return p.default_queue


def queue_of(spec: JobSpec, p: Profile, asked: Asked) -> Tuple[Optional[str], Optional[Queue]]:
    """The queue asked for (or chosen), known to the profile, and the node count within its limits."""
    where = f"on {p.name}"
    assert isinstance(spec.nodes, int)  # the nodes rule ran first
    queue_name = spec.queue or default_queue(p, spec.nodes, asked)
    queue = None
    if queue_name:
        check_token(queue_name, "queue", "pass --queue with a plain name")
        if p.queues and queue_name not in p.queues:
            import difflib

            close = difflib.get_close_matches(queue_name, list(p.queues), n=1)
            has = f"{p.name} has: {', '.join(p.queues)}"
            hint = f"did you mean {close[0]}? {has}" if close else has
            raise SpecError(f"unknown queue {queue_name!r} {where}", hint=hint)
        queue = p.queues.get(queue_name)

    if queue and queue.max_nodes and spec.nodes > queue.max_nodes:
        raise SpecError(
            f"--nodes {spec.nodes} is above the {queue_name} limit of {queue.max_nodes} nodes {where}",
            hint=f"use --nodes {queue.max_nodes} or fewer, or another --queue",
        )
    if queue and spec.nodes < queue.min_nodes:
        raise SpecError(
            f"--nodes {spec.nodes} is below the {queue_name} minimum of {queue.min_nodes} nodes {where}",
            hint="ask for more nodes or another --queue",
        )
    return queue_name, queue


def walltime_of(asked: Asked, p: Profile, queue_name: Optional[str], queue: Optional[Queue]) -> int:
    """The job's walltime in seconds: the asked one, else the queue's or the profile's default."""
    if asked.text is not None:
        if asked.error is not None:
            raise SpecError(f"--walltime: {asked.error}")
        walltime_s = asked.seconds
    else:
        raw = queue.default_walltime if queue and queue.default_walltime else p.default_walltime
        try:
            walltime_s = parse_walltime(str(raw))
        except ValueError as exc:
            raise SpecError(f"--walltime: {exc}") from None
    assert walltime_s is not None
    if walltime_s > MAX_WALLTIME_S:
        raise SpecError(
            f"--walltime {hms(walltime_s)} is more than a year, longer than any site allows",
            hint="ask for what one job may run, e.g. --walltime 24:00:00, and --chain N links for longer",
        )
    if queue and queue.max_walltime and walltime_s > parse_walltime(queue.max_walltime):
        raise SpecError(
            f"--walltime {hms(walltime_s)} is above the {queue_name} maximum of {queue.max_walltime} on {p.name}",
            hint=f"use --walltime {queue.max_walltime} or less",
        )
    return walltime_s


def stop_before(spec: Any, walltime_s: int) -> int:
    """How long before its walltime the job checkpoints and stops (the trainer's deadline)."""
    if spec.stop_before is None:
        return min(300, max(30, walltime_s // 10))
    try:
        margin = parse_walltime(str(spec.stop_before))
    except ValueError as exc:
        raise SpecError(f"--stop-before: {exc}") from None
    if margin >= walltime_s:
        raise SpecError(
            f"--stop-before {hms(margin)} leaves no time before the walltime {hms(walltime_s)}",
            hint="give a margin shorter than --walltime, e.g. --stop-before 5m",
        )
    return margin


def stop_before_of(spec: JobSpec, walltime_s: int, has_scheduler: bool) -> int:
    """With no scheduler hpc-launch ends the job at its walltime (dialects/none.py): the same stop request first."""
    margin = stop_before(spec, walltime_s)
    if not has_scheduler and spec.stop_before is None:
        margin = min(margin, walltime_s // 2)
    return margin


def check_chain(spec: JobSpec, p: Profile, has_scheduler: bool) -> None:
    if isinstance(spec.chain, bool) or not isinstance(spec.chain, int) or not 1 <= spec.chain <= MAX_CHAIN:
        raise SpecError(
            f"--chain must be a whole number from 1 to {MAX_CHAIN}, not {spec.chain!r}",
            hint="every link waits in the queue from the start: chain fewer, longer jobs",
        )
    if spec.chain > 1 and not has_scheduler:
        raise SpecError(
            f"--chain needs a scheduler to hold each link until the one before ends; {p.name} has none",
            hint="run one job with a longer time, or chain on a cluster with a scheduler",
        )
