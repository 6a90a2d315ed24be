"""`where`: the same job rendered for several clusters, and when each would start it, asked
BEFORE submitting. The script is the one `submit` would send (`prepare()`); it is written to a
temporary file on the submit host only while the scheduler's test command reads it (Slurm's
`sbatch --test-only`), then removed: nothing is submitted, recorded or left behind."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, List, Optional, Sequence

from .. import dialects
from ..errors import HpcLaunchError, ProfileError, SpecError, TransportError
from ..spec import JobSpec
from ..walltime import hms, parse_walltime
from .connect import TransportFor, transport_for
from .state import span_words


@dataclass(frozen=True)
class Where:
    cluster: str
    scheduler: str = ""  # the dialect's title
    queue: Optional[str] = None
    nodes: int = 0
    per_node: int = 0  # ranks per node
    walltime: str = ""
    max_nodes: Optional[int] = None  # the queue's limits (its node-count tier's, for a routing queue)
    max_walltime: Optional[str] = None
    estimated_start: Optional[float] = None  # epoch seconds, as the scheduler said
    hosts: str = ""  # where the scheduler would run it
    estimate: str = ""  # when it would start, in words, or why there is no estimate
    refused: str = ""  # why this cluster cannot take the job as asked (one line, naming the fix)
    error: str = ""  # why it could not be asked (the connection, an answer that cannot be read)

    def as_dict(self) -> dict:
        return asdict(self)


def where(
    clusters: Sequence[str],
    spec_of: Callable[[str], JobSpec],
    *,
    profile_file: Optional[str] = None,
    transport: TransportFor = transport_for,
    note: Callable[[str], Any] = lambda line: None,
) -> List[Where]:
    """One answer per cluster, in the order given; a cluster that refuses the job (`refused`) or
    cannot be asked (`error`) is an answer, never an abort of the others."""
    from ..prepare import prepare

    answers = []
    for cluster in clusters:
        try:
            prepared = prepare(spec_of(cluster), profile_file=profile_file, note=note)
            answers.append(_ask(prepared, transport))
        except (SpecError, ProfileError) as err:
            answers.append(Where(cluster=cluster, refused=err.one_line()))
        except HpcLaunchError as err:
            answers.append(Where(cluster=cluster, error=err.one_line()))
    return answers


def _ask(prepared, transport: TransportFor) -> Where:
    job = prepared.job
    profile = job.profile
    dialect = dialects.get(profile.dialect)
    max_nodes, max_walltime = _limits(profile, job.queue, job.alloc_nodes)
    facts = Where(
        cluster=profile.name,
        scheduler=dialect.title,
        queue=job.queue,
        nodes=job.alloc_nodes,
        per_node=job.procs_per_node,
        walltime=job.walltime if dialect.has_scheduler else "",
        max_nodes=max_nodes,
        max_walltime=max_walltime,
    )
    if not dialect.has_scheduler:
        return _with(facts, estimate="no scheduler: starts when submitted")
    if dialect.test_submit_argv("probe") is None:  # the scheduler has no test command
        return _with(facts, estimate=f"no estimate without submitting ({dialect.title})")
    link = transport(prepared.host)
    made = link.run(["mktemp", "-t", "hpc-launch-where.XXXXXXXX"])
    path = made.out.strip()
    if made.rc != 0 or not path:
        raise TransportError(
            f"cannot make a temporary file on {prepared.host}: {made.err.strip() or 'mktemp printed nothing'}",
            hint=f"check that $TMPDIR (or /tmp) on {prepared.host} is writable",
        )
    try:
        link.put_text(path, prepared.script.text, 0o600)
        argv = dialect.test_submit_argv(path, submit_flags=prepared.script.submit_flags) or []
        got = link.run(dialects.with_site_commands(argv, profile.commands))
    finally:
        link.remove(path)
    said = dialect.parse_test_submit(got.rc, got.out, got.err)
    if said.error:
        return _with(
            facts,
            refused=f"{dialect.submit_program} --test-only: {said.error} "
            f"(`hpc-launch clusters show {profile.name}` lists its queues and their limits)",
        )
    queue = said.queue or job.queue
    on = f" on {said.hosts}" if said.hosts else ""
    if said.at is None:
        return _with(facts, queue=queue, hosts=said.hosts, estimate=f"accepted, no start time said{on}")
    left = said.at - time.time()
    when = "starts now" if left < 60 else f"starts in {span_words(left)}"
    return _with(facts, queue=queue, hosts=said.hosts, estimated_start=said.at, estimate=when + on)


def _with(facts: Where, **changes: Any) -> Where:
    return replace(facts, **changes)


def _limits(profile, queue: Optional[str], nodes: int):
    """(max nodes, max walltime) of the queue the job goes to: its node-count tier's walltime
    for a routing queue (Polaris `prod`)."""
    q = profile.queues.get(queue or "")
    if q is None:
        return None, None
    walltime = q.max_walltime
    tier = next((t for t in q.tiers if t.min_nodes <= nodes <= t.max_nodes), None)
    if tier is not None:
        walltime = tier.max_walltime
    max_nodes = q.max_nodes or (max(t.max_nodes for t in q.tiers) if q.tiers else None)
    return max_nodes, hms(parse_walltime(walltime)) if walltime else None


def where_line(answer: Where, width: int = 0) -> str:
    """`tb-slurm  debug  2 nodes x 1, 01:00:00  starts now on pod[1-2]`; `(fits: max 64 nodes, 24:00:00)`
    where the profile knows the queue's limits."""
    head = answer.cluster.ljust(width)
    if answer.refused:
        return f"{head}  refused: {answer.refused}"
    if answer.error:
        return f"{head}  could not ask: {answer.error}"
    limits = [f"max {answer.max_nodes} nodes" if answer.max_nodes else "", answer.max_walltime or ""]
    shown = ", ".join(x for x in limits if x)
    ask = f"{answer.nodes} nodes x {answer.per_node}" + (f", {answer.walltime}" if answer.walltime else "")
    queue = answer.queue or "-"
    return f"{head}  {queue}  {ask}" + (f" (fits: {shown})" if shown else "") + f"  {answer.estimate}"
