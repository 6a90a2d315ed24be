"""Asking the scheduler about a job without queueing it.

`where`: the same job rendered for several clusters, and when each would start it, asked BEFORE
submitting. The script is the one `submit` would send (`prepare()`); it is written to a
temporary file on the submit host only while the scheduler's test command reads it (Slurm's
`sbatch --test-only`, Grid Engine's `qsub -w v`), then removed: nothing is submitted, recorded or
left behind.

`check_before_submit`: `submit` runs the same test command on the script it has just written,
before the submit command, so a request the scheduler refuses (a partition or queue that does
not exist, more nodes or time than it allows) is a one-line error with the scheduler's own
reason, and nothing is queued."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence

from .. import dialects, secrets
from ..dialects import TestSubmission
from ..dialects.base import WouldStart
from ..errors import HpcLaunchError, ProfileError, SchedulerError, SpecError, TransportError
from ..spec import JobSpec
from ..walltime import hms, parse_walltime
from .connect import TransportFor, transport_for
from .state import span_words

if TYPE_CHECKING:
    from ..prepare import Prepared
    from ..site.profiles import Profile, ProfileFiles
    from ..transport.base import Transport

# HPC_LAUNCH_SUBMIT_CHECK=0 turns `submit`'s check off (a site whose test command is slow or wrong).
CHECK_ENV = "HPC_LAUNCH_SUBMIT_CHECK"


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
    profile_file: ProfileFiles = None,
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


def _ask(prepared: "Prepared", transport: TransportFor) -> Where:
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
    if not isinstance(dialect, TestSubmission):  # the scheduler has no test command
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
        said = _test_submit(link, prepared, path)
    finally:
        link.remove(path)
    if said.error:
        return _with(
            facts,
            refused=f"{dialect.test_submit_name}: {said.error} "
            f"(`hpc-launch clusters show {profile.name}` lists its queues and their limits)",
        )
    queue = said.queue or job.queue
    on = f" on {said.hosts}" if said.hosts else ""
    if said.at is None:
        return _with(
            facts,
            queue=queue,
            hosts=said.hosts,
            estimate=f"accepted ({dialect.test_submit_name}), no start time said{on}",
        )
    left = said.at - time.time()
    when = "starts now" if left < 60 else f"starts in {span_words(left)}"
    return _with(facts, queue=queue, hosts=said.hosts, estimated_start=said.at, estimate=when + on)


def _test_submit(link: "Transport", prepared: "Prepared", path: str, cwd: Optional[str] = None) -> WouldStart:
    """The scheduler's test command on the script at `path` (as the submit command would name it
    from `cwd`), run as the submit command runs: the site's program name, no --pass-env values."""
    job = prepared.job
    dialect = dialects.get(job.profile.dialect)
    assert isinstance(dialect, TestSubmission)  # callers asked first
    argv = dialect.test_submit_argv(path, submit_flags=prepared.script.submit_flags)
    env = secrets.submit_env(job.pass_env)
    got = link.run(dialects.with_site_commands(argv, job.profile.commands), cwd=cwd, env=env, timeout=60)
    if got.rc in (126, 127):  # the shell's "cannot run" / "not found": nothing was asked
        said = (got.err or got.out).strip().splitlines()
        raise SchedulerError(
            f"cannot run {dialect.test_submit_name} on {link.host}: {said[-1] if said else f'exit {got.rc}'}"
        )
    return dialect.parse_test_submit(got.rc, got.out, got.err)


def check_enabled() -> bool:
    return os.environ.get(CHECK_ENV, "1").strip().lower() not in ("0", "no", "off", "false")


def check_before_submit(transport: "Transport", prepared: "Prepared", workdir: str) -> None:
    """`submit`'s check, on the script just written in `workdir`, before the submit command.
    Raises SchedulerError (the scheduler's reason, one line) when it refuses the job. Passes when
    the scheduler has no test command, when $HPC_LAUNCH_SUBMIT_CHECK is 0, and when its answer
    cannot be read or says "try later" (said on stderr: the submit command then speaks for itself)."""
    dialect = dialects.get(prepared.job.profile.dialect)
    if not isinstance(dialect, TestSubmission) or not check_enabled():
        return
    try:
        said = _test_submit(transport, prepared, prepared.script.script_relpath, cwd=workdir)
    except SchedulerError as err:
        sys.stderr.write(f"hpc-launch: note: submitting unchecked: {err.message}\n")
        return
    if not said.error:
        return
    if dialect.is_transient(said.error):
        sys.stderr.write(f"hpc-launch: note: submitting unchecked: {dialect.test_submit_name} said {said.error}\n")
        return
    name = prepared.job.profile.name
    raise SchedulerError(
        f"{dialect.test_submit_name} refused the job, so nothing was submitted: {said.error}",
        hint=f"`hpc-launch clusters show {name}` lists its queues and their limits; "
        f"`submit --no-check` (or {CHECK_ENV}=0) submits without this check",
    )


def _with(facts: Where, **changes: Any) -> Where:
    return replace(facts, **changes)


def _limits(profile: "Profile", queue: Optional[str], nodes: int) -> "tuple[Optional[int], Optional[str]]":
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
