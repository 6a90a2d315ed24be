"""First to start, one copy (`hpc-launch where -c A,B --submit`): the same training submitted to
several clusters at once; the first job to start trains, the others are cancelled.

Two guards, so that two copies never train:
1. The start gate in every job script of the group (templates/body/start_gate.sh.j2): before
   anything else the job claims the training with `mkdir CLAIM`, CLAIM on a filesystem every
   cluster's nodes see. mkdir is atomic (POSIX; on NFS too): of two jobs that start in the same
   instant exactly one succeeds; the other prints why and exits EXIT_LOST_START without training.
   It holds whether or not anyone watches.
2. `watch`: once the claim exists, the other clusters' jobs (queued, or stopped by the gate) are
   cancelled and recorded `cancelled` with the reason, so no queue keeps a copy waiting.

The claim lives beside the jobs, so every cluster of a group must be submitted to through the
same host (one filesystem); clusters behind different logins are refused, not guessed at.
"""

from __future__ import annotations

import secrets as token
import time
from dataclasses import dataclass

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple

from msgspec.structs import replace

from ..errors import HpcLaunchError, ProfileError, SchedulerError, SpecError, TransportError
from ..protocol import EXIT_LOST_START
from ..records import JobRecord, JobStore
from ..spec import JobSpec
from ..states import JobState
from .cancel import cancel_group
from .connect import TransportFor, transport_for
from .state import poll_for, refresh
from .submission import submit

if TYPE_CHECKING:
    from ..site.profiles import ProfileFiles
    from ..transport.base import Transport

CLAIM_ENV = "HPC_LAUNCH_CLAIM"  # the job script's start gate reads the claim's path from it
GROUP_KEY = "first_start"  # record.extra: the group's id (groups.group_members finds it)
CLAIM_KEY = "claim"  # record.extra: the claim's path on the jobs' host


@dataclass(frozen=True)
class Entrant:
    cluster: str
    record: Optional[JobRecord] = None  # submitted
    refused: str = ""  # not submitted: why (one line)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C while the group was being submitted: nothing more was; these jobs were."""

    def __init__(self, group: str, submitted: List[Entrant]):
        super().__init__(group)
        self.group = group
        self.submitted = submitted


def group_id(now: Optional[datetime] = None) -> str:
    return f"first-{(now or datetime.now()).strftime('%Y%m%d-%H%M%S')}-{token.token_hex(2)}"


def submit_first_start(
    clusters: Sequence[str],
    spec_of: Callable[[str], JobSpec],
    *,
    profile_file: ProfileFiles = None,
    store: Optional[JobStore] = None,
    transport: TransportFor = transport_for,
    note: Callable[[str], Any] = lambda line: None,
) -> Tuple[str, str, List[Entrant]]:
    """Submit the job to each cluster that takes it (its scheduler's check first), each with the
    start gate. Returns (group id, claim path, one Entrant per cluster in order). Raises SpecError
    when the clusters cannot share a claim, or when none takes the job."""
    from ..prepare import prepare

    if len(set(clusters)) != len(clusters) or len(clusters) < 2:
        raise SpecError(
            f"where --submit needs two or more different clusters (got {', '.join(clusters) or 'none'})",
            hint="name each once: -c A,B",
        )
    store = store or JobStore()
    group = group_id()
    first = datetime.now()
    prepared, entrants = [], []
    for cluster in clusters:
        try:
            prepared.append((cluster, prepare(spec_of(cluster), profile_file=profile_file, note=note)))
        except (SpecError, ProfileError) as err:
            entrants.append(Entrant(cluster, refused=err.one_line()))
    if not prepared:
        raise SpecError(
            "no cluster takes the job as asked: " + "; ".join(f"{e.cluster}: {e.refused}" for e in entrants),
            hint="`hpc-launch where` with the same options shows each cluster's reason",
        )
    hosts = sorted({p.host for _, p in prepared})
    if len(hosts) > 1:
        raise SpecError(
            f"where --submit: the clusters are submitted to from different hosts ({', '.join(hosts)}), so no "
            "filesystem is known to hold one claim all their jobs see",
            hint="give the same --login for all (one site's clusters or partitions), or submit to one cluster",
        )
    link = transport(hosts[0])
    workdir = link.resolve_path(prepared[0][1].job.workdir)
    claim = f"{workdir}/.hpc-launch/{group}.claim"

    def joined(record: JobRecord) -> None:
        """Runs while submit holds interrupts: the job is in the group the moment it is recorded."""
        extra = {**(record.extra or {}), GROUP_KEY: group, CLAIM_KEY: claim}
        store.update(record.cluster, record.job_id, extra=extra)
        entrants.append(Entrant(record.cluster, record=store.get(record.job_id, record.cluster)))

    try:
        for i, (cluster, _) in enumerate(prepared):
            spec = spec_of(cluster)
            spec = replace(spec, env={**(spec.env or {}), CLAIM_ENV: claim})
            # one stamp each: the scripts of one group may share a work dir
            stamp = (first + timedelta(milliseconds=i)).strftime("%Y%m%d-%H%M%S-%f")[:-3]
            try:
                ready = prepare(spec, profile_file=profile_file, stamp=stamp, note=note)
                submit(ready, store=store, on_recorded=joined)
            except (SpecError, ProfileError, SchedulerError, TransportError) as err:
                entrants.append(Entrant(cluster, refused=err.one_line()))
    except KeyboardInterrupt:  # Ctrl-C stops the group: no more is submitted, what was is named
        raise Interrupted(group, [e for e in entrants if e.record is not None]) from None
    order = {c: i for i, c in enumerate(clusters)}
    entrants.sort(key=lambda e: order[e.cluster])
    if not any(e.record for e in entrants):
        raise SchedulerError(
            "no cluster took the job: " + "; ".join(f"{e.cluster}: {e.refused}" for e in entrants),
            hint="`hpc-launch where` with the same options shows each cluster's reason",
        )
    return group, claim, entrants


def claim_owner(link: "Transport", claim: str) -> Optional[Tuple[str, str]]:
    """(cluster, job id) that holds the claim, or None while no job has started. A claim made an
    instant ago may have no owner file yet: (\"\", \"\")."""
    got = link.run(["sh", "-c", 'test -d "$1" || exit 3; cat "$1/owner" 2>/dev/null; true', "sh", claim])
    if got.rc == 3:
        return None
    words = got.out.split()
    return (words[0], words[1]) if len(words) >= 2 else ("", "")


def watch(
    store: JobStore,
    records: List[JobRecord],
    *,
    transport: TransportFor = transport_for,
    sleep: Callable[[float], None] = time.sleep,
    on_line: Callable[[str], Any] = lambda line: None,
    timeout_s: Optional[float] = None,
) -> Optional[JobRecord]:
    """Wait until one job of the group has claimed the training, then cancel the others and
    record why. Returns the winner's record; None when every job ended without claiming (or
    `timeout_s` passed: then nothing is cancelled, the gate still guards)."""
    claim = records[0].extra[CLAIM_KEY]
    link = transport(records[0].host)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pace = poll_for(records)
    delay = pace.first
    while True:
        owner = claim_owner(link, claim)
        if owner is not None and owner[0]:
            break
        current = refresh(store, records, transport, on_unreached=lambda gone: None)
        if owner is None and all(JobState(r.state).terminal for r in current):
            return None
        if deadline is not None and time.monotonic() >= deadline:
            return None
        sleep(delay)
        delay = pace.after(delay)
    winner_cluster, winner_job = owner
    winner = next((r for r in records if r.cluster == winner_cluster), None)
    why = f"another cluster started first: {winner_cluster} job {winner_job}"
    on_line(f"{winner_cluster} job {winner_job} started first and trains; cancelling the others")
    losers = [store.get(r.job_id, r.cluster) for r in records if r.cluster != winner_cluster]
    settle(store, losers, why, transport)
    for r in losers:
        now = store.get(r.job_id, r.cluster)
        on_line(f"{now.cluster} job {now.job_id}: {now.comment or now.state}")
    if winner is None:
        return None
    return refresh(store, [store.get(winner.job_id, winner.cluster)], transport, on_unreached=lambda gone: None)[0]


def settle(store: JobStore, losers: List[JobRecord], why: str, transport: TransportFor = transport_for) -> None:
    """Cancel the jobs that lost, and record them `cancelled` with `why`: those still queued,
    those the gate stopped (exit EXIT_LOST_START), those cancelled now. A job that had ended on
    its own for another reason keeps its own end."""
    active = [r for r in losers if not JobState(r.state).terminal]
    if active:
        try:
            cancel_group(store, active, transport)
        except HpcLaunchError:
            pass  # the gate still keeps them from training; their records below say what is true
    asked = {(r.cluster, r.job_id) for r in active}
    for r in losers:
        now = store.get(r.job_id, r.cluster)
        if not JobState(now.state).terminal:  # the scheduler has not confirmed the cancel yet
            store.update(now.cluster, now.job_id, comment=f"cancel requested ({why})")
        elif (now.cluster, now.job_id) in asked or now.exit_code == EXIT_LOST_START:
            store.update(now.cluster, now.job_id, state=JobState.CANCELLED.value, comment=f"cancelled ({why})")


def run(
    clusters: Sequence[str],
    spec_of: Callable[[str], JobSpec],
    *,
    profile_file: ProfileFiles = None,
    wait: bool = True,
    store: Optional[JobStore] = None,
    transport: TransportFor = transport_for,
    note: Callable[[str], Any] = lambda line: None,
    on_submitted: Callable[[str, List[Entrant]], Any] = lambda group, entrants: None,
    sleep: Callable[[float], None] = time.sleep,
) -> Tuple[str, List[Entrant], Optional[JobRecord]]:
    """`where --submit`: submit to each cluster (`on_submitted` hears the group and its jobs),
    then, with `wait`, watch until one starts and cancel the others. Returns (group, entrants,
    the winner's record or None)."""
    store = store or JobStore()
    group, _claim, entrants = submit_first_start(
        clusters, spec_of, profile_file=profile_file, store=store, transport=transport, note=note
    )
    on_submitted(group, entrants)
    records = [e.record for e in entrants if e.record is not None]
    if not wait:
        return group, entrants, None
    return group, entrants, watch(store, records, transport=transport, sleep=sleep, on_line=note)
